"""Does a shipped model keep its answers in a compact storage form? The gate of issue 53, on dev only: the model as
shipped before (BASELINE) and in its compact form (CANDIDATE) answer the same dev set; the candidate passes when

- at least 99% of the answers are identical (QA: the same span, or both no answer; sentiment: the same label; NER: the
  same tags for every word of a sentence),
- its dev score is within ±0.2 of the baseline's (QA: SOQAL F1; sentiment: F1-PN; NER: entity micro-F1), and
- its cold start (a new `arabert-pipeline answer|classify|tag` process, to its exit after one answer; median of
  --cold-runs, the two alternating) is at most 10% slower.

    python scripts/compact_gate.py qa BASELINE CANDIDATE --dev arcd-dev mlqa-ar-dev -o notebooks/results/compact/qa.json
    python scripts/compact_gate.py sentiment BASELINE CANDIDATE --dev arsarcasm-v2-dev -o .../sentiment.json
    python scripts/compact_gate.py ner BASELINE CANDIDATE --dev anercorp-dev -o .../ner.json

Both models run as users run them: `Pipeline(DIR)` (ONNX Runtime, the model's own defaults). Test sets are not read.
Exit status 0 when the gate passes, 1 when it does not.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

MIN_IDENTICAL = 0.99
MAX_SCORE_DELTA = 0.2
MAX_COLD_SLOWDOWN = 0.10
COLD_TEXT = "أحب هذا الفيلم كثيرا، لكن النهاية في عمّان كانت مخيبة."


def qa_answers(model: str, dev: list[str]) -> tuple[list, float]:
    from arabert_pipeline.pipeline.core import Pipeline
    from arabert_pipeline.qa.data import read_squad
    from arabert_pipeline.qa.metrics import score_question

    examples = [e for source in dev for e in read_squad(source, misaligned="keep").examples]
    found = Pipeline(model).answer([e["question"] for e in examples], [e["context"] for e in examples])
    keys = [a and (a.start, a.end) for a in found]
    f1 = [score_question(e, a and a.text, a and a.start)["soqal_f1"] for e, a in zip(examples, found, strict=True)]
    return keys, 100 * float(np.mean(f1))


def sentiment_answers(model: str, dev: list[str]) -> tuple[list, float]:
    from arabert_pipeline.classification.data import read_texts
    from arabert_pipeline.classification.metrics import confusion, score_confusion
    from arabert_pipeline.pipeline.core import Pipeline

    pipeline = Pipeline(model)
    labels = pipeline.labels
    examples = [e for source in dev for e in read_texts(source, label_column="sentiment").examples]
    found = [r[0]["label"] if isinstance(r, list) else r["label"] for r in pipeline([e["text"] for e in examples])]
    score = score_confusion(confusion([e["label"] for e in examples], found, labels), labels, "f1_pn")
    return found, float(np.asarray(score).reshape(-1)[0])


def ner_answers(model: str, dev: list[str]) -> tuple[list, float]:
    from arabert_pipeline.ner.data import read_conll
    from arabert_pipeline.ner.metrics import ner_report
    from arabert_pipeline.pipeline.core import Pipeline

    tagger = Pipeline(model).model
    examples = [e for source in dev for e in read_conll(source).examples]
    found = [tags for tags, _ in tagger.tag_words([e["words"] for e in examples])]
    report = ner_report([e["tags"] for e in examples], found)
    return [tuple(t) for t in found], float(report["micro_f1"] if "micro_f1" in report else report["micro"]["f1"])


ANSWERS = {"qa": qa_answers, "sentiment": sentiment_answers, "ner": ner_answers}


def cold_command(task: str, model: str) -> list[str]:
    from bench_pipeline import COLD_CONTEXT, COLD_QUESTION

    script = Path(sys.executable).with_name("arabert-pipeline")
    prefix = [str(script)] if script.exists() else [sys.executable, "-m", "arabert_pipeline.cli"]
    if task == "qa":
        return [*prefix, "answer", "--model", model, "--question", COLD_QUESTION, "--context", COLD_CONTEXT]
    return [*prefix, "classify" if task == "sentiment" else "tag", "--model", model, COLD_TEXT]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=sorted(ANSWERS))
    parser.add_argument("baseline")
    parser.add_argument("candidate")
    parser.add_argument("--dev", nargs="+", required=True)
    parser.add_argument("--cold-runs", type=int, default=5)
    parser.add_argument("-o", "--output", help="write the record here (JSON)")
    args = parser.parse_args()
    from bench_pipeline import cold_starts

    answers, scores = {}, {}
    for name in ("baseline", "candidate"):
        answers[name], scores[name] = ANSWERS[args.task](getattr(args, name), args.dev)
    identical = float(np.mean([a == b for a, b in zip(answers["baseline"], answers["candidate"], strict=True)]))
    cold = cold_starts({name: cold_command(args.task, getattr(args, name)) for name in ("baseline", "candidate")},
                       dict(os.environ), args.cold_runs)
    slowdown = cold["candidate"]["cold_start_s"] / cold["baseline"]["cold_start_s"] - 1
    delta = scores["candidate"] - scores["baseline"]
    sizes = {name: sum(p.stat().st_size for p in Path(getattr(args, name)).rglob("*") if p.is_file())
             for name in ("baseline", "candidate")}
    record = {
        "task": args.task, "dev": args.dev, "answers": len(answers["baseline"]),
        "identical": round(identical, 4), "baseline_score": round(scores["baseline"], 2),
        "candidate_score": round(scores["candidate"], 2), "score_delta": round(delta, 2),
        "cold_start_s": {name: round(cold[name]["cold_start_s"], 3) for name in cold},
        "cold_start_slowdown": round(slowdown, 3),
        "peak_rss_mb": {name: round(cold[name]["peak_rss_mb"], 1) for name in cold},
        "dir_mb": {name: round(size / 1e6, 2) for name, size in sizes.items()},
        "rule": f"identical ≥ {MIN_IDENTICAL:.0%}, |Δscore| ≤ {MAX_SCORE_DELTA}, cold start ≤ "
                f"+{MAX_COLD_SLOWDOWN:.0%}",
        "threads": os.environ.get("OMP_NUM_THREADS", "default"),
    }
    record["passes"] = bool(identical >= MIN_IDENTICAL and abs(delta) <= MAX_SCORE_DELTA
                            and slowdown <= MAX_COLD_SLOWDOWN)
    text = json.dumps(record, ensure_ascii=False, indent=2)
    print(text)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    return 0 if record["passes"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

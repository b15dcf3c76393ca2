"""A question asked of its paragraph, of a long document and of a collection, end to end on one thread (issue 59):
`Pipeline("arabert").answer(q, paragraph)` vs `answer(q, document)` vs `answer(q, index=index)`, in one run.

    python benchmarks/bench_documents.py --out notebooks/results/open-collection/bench.json      # ../shared/data
    python benchmarks/bench_documents.py --data-root DIR --questions 20 --news-paragraphs 2000 --out bench.json

Questions: dev only (arcd-dev, MLQA-ar dev), one per article (so that no document repeats: `rank_passages` keeps the
indexes of the last few texts, and a second question about the same document would skip building it), drawn with a
seeded generator among those whose document has at least --min-chars characters. A question's document is its
article among --others other articles of its set (evaluate/open_domain.py's `document_examples`, the documents of
`evaluate --documents`); the collection holds both sets' paragraphs and the first --news-paragraphs paragraph lines of
DATA_ROOT/corpus/*.txt.xz (whole articles, files in name order), written to a temporary index directory by
`Index.build(..., path=)` and opened with `Index.open`, as `answer --index` opens one.

Each question is asked in the three ways in turn (so that the machine's load hits them alike), after a few warm-up
questions that are not counted; the times are the calls alone, on the package's default backend (ONNX Runtime for the
shipped model) with one intra-op thread. Reported: ms a question (mean, p50, p95) per way, the ratios of the means and
of the p50s to the paragraph's (the issue's targets: a document ≤ 3×, a collection ≤ 5×), the documents' and
collection's sizes, the index's build time, and F1 (SOQAL) of the answers scored against the paragraph (a check that
the three answered, not the evaluation: `evaluate --documents --collection` is). Run by hand, alone;
tests/test_bench_documents.py runs it at tiny size.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEV_SETS = ("arcd-dev", "mlqa-ar-dev")
WAYS = ("paragraph", "document", "collection")


def timing(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"mean": statistics.fmean(values), "p50": statistics.median(values),
            "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data-root", type=Path,
                        default=Path(os.environ.get("ARABERT_PIPELINE_DATA", REPO.parent / "shared" / "data")))
    parser.add_argument("--questions", type=int, default=100, help="questions asked (default: %(default)s)")
    parser.add_argument("--others", type=int, default=5, help="other articles in a document (default: %(default)s)")
    parser.add_argument("--min-chars", type=int, default=10_000,
                        help="only questions whose document has this many characters (default: %(default)s)")
    parser.add_argument("--news-paragraphs", type=int, default=50_000,
                        help="paragraph lines of news in the collection (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=3, help="questions asked first and not counted")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--passages-read", type=int,
                        help="passages a long context or an index question reads (default: the model's setting)")
    args = parser.parse_args(argv)
    # One thread for ONNX Runtime (it reads OMP_NUM_THREADS when its session is made) and for numpy's BLAS.
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = "1"
    os.environ["ARABERT_PIPELINE_DATA"] = str(args.data_root)
    sys.path.insert(0, str(REPO))
    from arabert_pipeline import Index, Pipeline
    from arabert_pipeline.artifacts.paths import portable_path
    from arabert_pipeline.evaluate.open_domain import build_collection, distractor_documents, document_examples
    from arabert_pipeline.qa.data import read_squad
    from arabert_pipeline.qa.metrics import score_question

    sets = {name: read_squad(name, misaligned="keep").examples for name in DEV_SETS}
    candidates = []
    for examples in sets.values():
        first: dict[str, dict] = {}
        for example in examples:
            first.setdefault(example["title"], example)
        for document in document_examples(list(first.values()), examples, args.others, args.seed):
            if len(document["context"]) >= args.min_chars:
                candidates.append(document)
    random.Random(args.seed).shuffle(candidates)
    asked = candidates[: args.warmup + args.questions]
    if len(asked) <= args.warmup:
        raise SystemExit(f"only {len(candidates)} questions have a document of {args.min_chars:,} characters")

    news = distractor_documents([str(p) for p in sorted((args.data_root / "corpus").glob("*.txt.xz"))],
                                args.news_paragraphs)
    collection = build_collection(sets, news, withhold=0.0, seed=args.seed).full
    qa = Pipeline("arabert")
    if args.passages_read is not None:  # the QASettings field a model dir's arabert_pipeline.json may set
        qa.qa.settings = dataclasses.replace(qa.qa.settings, passages_read=args.passages_read)
    with tempfile.TemporaryDirectory(prefix="bench-documents-") as workdir:
        started = time.perf_counter()
        Index.build(collection.texts, collection.ids, collection.titles, path=Path(workdir) / "index")
        build_seconds = time.perf_counter() - started
        index = Index.open(Path(workdir) / "index")
        times: dict[str, list[float]] = {way: [] for way in WAYS}
        f1: dict[str, list[float]] = {way: [] for way in WAYS}
        load_before = os.getloadavg()
        for number, example in enumerate(asked):
            paragraph = {**example, "context": example["paragraph"],
                         "answers": {"text": example["answers"]["text"],
                                     "answer_start": [s - example["paragraph_start"]
                                                      for s in example["answers"]["answer_start"]]}}
            calls = {"paragraph": lambda e=paragraph: qa.answer(e["question"], e["context"]),
                     "document": lambda e=example: qa.answer(e["question"], e["context"]),
                     "collection": lambda e=example: qa.answer(e["question"], index=index)}
            for way in WAYS:
                started = time.perf_counter()
                answer = calls[way]()
                seconds = time.perf_counter() - started
                if number >= args.warmup:
                    times[way].append(1000 * seconds)
                    f1[way].append(score_question(paragraph, answer.text if answer else None)["soqal_f1"])
        load_after = os.getloadavg()
    summary = {way: timing(values) for way, values in times.items()}
    result = {
        "argv": [portable_path(arg) for arg in (sys.argv[1:] if argv is None else argv)],
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_before": load_before,
                    "load_after": load_after, "threads": 1},
        "model": qa.source, "backend": qa.backend, "passages_read": qa.qa.settings.passages_read,
        "questions": len(times["paragraph"]),
        "characters": {"paragraph": statistics.fmean(len(e["paragraph"]) for e in asked[args.warmup:]),
                       "document": statistics.fmean(len(e["context"]) for e in asked[args.warmup:])},
        "collection": {"documents": len(collection.texts), "passages": len(index),
                       "news_paragraph_lines": news.description["paragraph_lines"],
                       "build_seconds": round(build_seconds, 2)},
        "ms": summary,
        "ratio_to_paragraph": {way: {"mean": summary[way]["mean"] / summary["paragraph"]["mean"],
                                     "p50": summary[way]["p50"] / summary["paragraph"]["p50"]} for way in WAYS},
        "soqal_f1": {way: 100 * statistics.fmean(values) for way, values in f1.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    for way in WAYS:
        print(f"{way:10} {summary[way]['mean']:8.1f} ms (p50 {summary[way]['p50']:.1f}, p95 {summary[way]['p95']:.1f})"
              f"  ×{result['ratio_to_paragraph'][way]['mean']:.2f}  F1 {result['soqal_f1'][way]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

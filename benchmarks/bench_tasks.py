"""The shipped task models (`Pipeline(..., task="sentiment" | "ner")`, ONNX with int8 or 4-bit weights) against
Hugging Face's `pipeline("text-classification")` / `pipeline("token-classification", aggregation_strategy="simple")`,
in one run.

    python benchmarks/bench_tasks.py                      # both shipped models; HF on a same-shape stand-in
    python benchmarks/bench_tasks.py --sentiment-reference runs/tasks/sentiment-mini-lr2e-4-cw \\
        --ner-reference runs/tasks/ner-L6-lr1e-4          # HF on the fp32 weights the shipped models were made from

Reported per task, all measured in this one run, with the same thread count on both sides (torch threads, ONNX
Runtime intra-op threads through OMP_NUM_THREADS; default 2, the target's 2 cores):
- cold start: a new process that imports the library, loads the model, answers one text, prints it and exits (median
  of --cold-runs), with its peak RSS; ours is `Pipeline(DIR, task=...)(text)`, HF's is `transformers.pipeline(...)`;
- throughput at batch 32 (texts per second, best of --rounds, the two systems alternating so machine load hits them
  alike) and latency at batch 1 (p50 / p95 over --latency-texts), and their ratios to Hugging Face's;
- agreement: the share of texts with the same label (classification) or the same entities, as (type, start, end) in
  the original text (NER), as Hugging Face's on the same weights.

The shipped models hold quantized weights inside model.onnx and no torch weights, so Hugging Face needs the fine-tuning
run they were exported from (--*-reference, the fp32 weights: what a user of the Hugging Face pipeline would load). On a
fresh clone without it, HF runs a stand-in: the shipped config.json and tokenizer with seeded random weights, the same
shapes and so the same compute; speed is then meaningful and agreement is not (it is not reported).
Hugging Face's pipeline is given the texts ALREADY preprocessed with the model's preprocessing (AraBERT
normalization), outside its timed region; ours gets the raw text and its timing includes preprocessing. Texts are the
dev sets (arsarcasm-v2-dev tweets, anercorp-dev sentences joined by spaces): no test text is read. Run by hand.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "arabert_pipeline" / "models"
TASKS = {"sentiment": ("text-classification", "arabert-sentiment", "arsarcasm-v2-dev"),
         "ner": ("token-classification", "arabert-ner", "anercorp-dev")}
COLD_TEXTS = {"sentiment": "الخدمة في هذا المطعم ممتازة والأكل لذيذ جدا",
              "ner": "زار الرئيس الفرنسي ماكرون بيروت يوم الخميس والتقى عون في قصر بعبدا ."}
OURS_COLD = ("import sys; from arabert_pipeline import Pipeline; "
             "print(Pipeline(sys.argv[1], task=sys.argv[2])(sys.argv[3]))")
HF_COLD = ("import sys, transformers; transformers.logging.set_verbosity_error(); "
           "kw = {'aggregation_strategy': 'simple'} if sys.argv[2] == 'token-classification' else {}; "
           "p = transformers.pipeline(sys.argv[2], model=sys.argv[1], device=-1, **kw); print(p(sys.argv[3]))")


def stand_in(shipped: Path, kind: str, directory: Path, seed: int) -> Path:
    """The shipped model's config and tokenizer with seeded random weights: same shapes, not the same weights."""
    import shutil

    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.AutoConfig.from_pretrained(shipped)
    auto = (transformers.AutoModelForSequenceClassification if kind == "text-classification"
            else transformers.AutoModelForTokenClassification)
    auto.from_config(config).save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (shipped / name).is_file():
            shutil.copyfile(shipped / name, directory / name)
    return directory


def texts_of(dataset: str) -> list[str]:
    if dataset.startswith("anercorp"):
        from arabert_pipeline.ner.data import read_conll

        return [" ".join(e["words"]) for e in read_conll(dataset, "keep").examples]
    from arabert_pipeline.classification.data import read_texts

    return [e["text"] for e in read_texts(dataset, label_column="sentiment").examples]


def hf_entities(found: list[dict], aligned) -> set:
    """HF's entities (offsets into the preprocessed text) mapped back to the original text."""
    out = set()
    for e in found:
        span = aligned.to_original(e["start"], e["end"])
        if span and span[1] > span[0]:
            out.add((e["entity_group"], span[0], span[1]))
    return out


def bench_task(name: str, args, thread_env: dict, cold_starts, percentile) -> dict:
    import transformers

    from arabert_pipeline import Pipeline
    from arabert_pipeline.preprocess import Preprocessor

    kind, model_name, dataset = TASKS[name]
    shipped = Path(getattr(args, f"{name}_model") or MODELS / model_name)
    reference = getattr(args, f"{name}_reference")
    temp = tempfile.TemporaryDirectory(prefix="bench-tasks-")
    if reference:
        hf_dir, hf_note = Path(reference), f"the fp32 weights of {Path(reference).name}"
    else:
        hf_dir = stand_in(shipped, kind, Path(temp.name) / "hf", args.seed)
        hf_note = "a stand-in: the shipped config and tokenizer with random weights (speed only)"
    ours = Pipeline(shipped, task=name, batch_size=args.batch_size)
    options = {"aggregation_strategy": "simple"} if kind == "token-classification" else {}
    hf = transformers.pipeline(kind, model=str(hf_dir), device=-1, **options)
    texts = texts_of(dataset)
    texts = texts[: args.texts or len(texts)]
    preprocessor = Preprocessor(ours.preprocessing)
    aligned = [_aligned(preprocessor, t) for t in texts]
    hf_texts = [a.text for a in aligned]
    lengths = {"truncation": True, "max_length": 512} if kind == "text-classification" else {}

    cold = cold_starts({"ours": [sys.executable, "-c", OURS_COLD, str(shipped), name, COLD_TEXTS[name]],
                        "hf": [sys.executable, "-c", HF_COLD, str(hf_dir), kind,
                               preprocessor.preprocess(COLD_TEXTS[name])]}, thread_env, args.cold_runs)
    for i in range(5):  # warm-up
        ours(texts[i])
        hf(hf_texts[i], **lengths)
    latency = {"ours": [], "hf": []}
    for i in range(min(args.latency_texts, len(texts))):
        start = time.perf_counter()
        ours(texts[i])
        latency["ours"].append(time.perf_counter() - start)
        start = time.perf_counter()
        hf(hf_texts[i], **lengths)
        latency["hf"].append(time.perf_counter() - start)
    throughput, answers = {"ours": [], "hf": []}, {}
    for _ in range(args.rounds):
        start = time.perf_counter()
        answers["ours"] = ours(texts)
        throughput["ours"].append(len(texts) / (time.perf_counter() - start))
        start = time.perf_counter()
        answers["hf"] = hf(hf_texts, batch_size=args.batch_size, **lengths)
        throughput["hf"].append(len(texts) / (time.perf_counter() - start))
    if kind == "text-classification":
        same = [a["label"] == b["label"] for a, b in zip(answers["ours"], answers["hf"], strict=True)]
    else:
        same = [{(e["entity_group"], e["start"], e["end"]) for e in a} == hf_entities(b, al)
                for a, b, al in zip(answers["ours"], answers["hf"], aligned, strict=True)]
    result = {"model": str(shipped.relative_to(REPO)) if shipped.is_relative_to(REPO) else shipped.name,
              "backend": ours.backend, "reference": f"transformers {transformers.__version__} pipeline('{kind}') on "
              f"{hf_note}, preprocessed text in", "dataset": dataset, "texts": len(texts),
              "cold_start": cold, "systems": {}}
    for system in ("ours", "hf"):
        result["systems"][system] = {"p50_ms": 1000 * percentile(latency[system], 50),
                                     "p95_ms": 1000 * percentile(latency[system], 95),
                                     "texts_per_s_batch32": max(throughput[system])}
    mine, theirs = result["systems"]["ours"], result["systems"]["hf"]
    mine["speedup_p50"] = theirs["p50_ms"] / mine["p50_ms"]
    mine["speedup_throughput"] = mine["texts_per_s_batch32"] / theirs["texts_per_s_batch32"]
    mine["speedup_cold_start"] = cold["hf"]["cold_start_s"] / cold["ours"]["cold_start_s"]
    if reference:
        mine["same_as_hf"] = sum(same) / len(same)
    temp.cleanup()
    return result


def _aligned(preprocessor, text: str):
    from arabert_pipeline.finetuning.offsets import preprocess_aligned

    return preprocess_aligned(text, preprocessor)


def print_report(results: dict, threads: int) -> None:
    print(f"threads {threads}; cold start = new process: import, load, one text, print, exit (median)")
    for name, r in results.items():
        print(f"\n{name}: {r['model']} ({r['backend']}) vs {r['reference']}; {r['texts']} texts of {r['dataset']}")
        for system, c in r["cold_start"].items():
            print(f"  cold start {system:<5} {c['cold_start_s']:6.2f} s (max {c['cold_start_max_s']:.2f}) "
                  f"{c['peak_rss_mb']:7.0f} MB")
        print(f"  {'system':<6} {'p50 ms':>8} {'p95 ms':>8} {'texts/s @32':>12} {'×p50':>6} {'×texts/s':>9} "
              f"{'×cold':>6} {'=hf':>7}")
        for system, s in r["systems"].items():
            ratios = (f"{s['speedup_p50']:>6.2f} {s['speedup_throughput']:>9.2f} {s['speedup_cold_start']:>6.2f}"
                      if system == "ours" else f"{'1':>6} {'1':>9} {'1':>6}")
            same = f"{100 * s['same_as_hf']:6.1f}%" if "same_as_hf" in s else f"{'—':>7}"
            print(f"  {system:<6} {s['p50_ms']:>8.1f} {s['p95_ms']:>8.1f} {s['texts_per_s_batch32']:>12.1f} {ratios} "
                  f"{same}")
    print("\n× = ours over Hugging Face's, measured in this run; =hf: same label / same entities (type and span in "
          "the original text) as Hugging Face's pipeline on the fp32 weights")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    for name in TASKS:
        parser.add_argument(f"--{name}-model", help=f"the {name} model dir (default: the shipped one)")
        parser.add_argument(f"--{name}-reference", metavar="DIR",
                            help=f"the fp32 {name} model dir the shipped one was exported from, for Hugging Face")
    parser.add_argument("--texts", type=int, default=1000, help="first N dev texts at batch 32 (0: all)")
    parser.add_argument("--latency-texts", type=int, default=200, help="first N texts one by one")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2, help="throughput rounds per system (best kept)")
    parser.add_argument("--cold-runs", type=int, default=5, help="fresh processes per system for the cold start")
    parser.add_argument("--threads", type=int, default=2, help="torch / ONNX Runtime threads, both systems")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    # Before any session or torch pool exists: ONNX Runtime's sessions and the child processes read it.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(Path(__file__).parent))
    import torch
    from transformers.utils import logging as hf_logging

    from bench_pipeline import cold_starts, percentile

    torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    results = {name: bench_task(name, args, dict(os.environ), cold_starts, percentile) for name in args.tasks}
    print_report(results, args.threads)
    if args.json:
        Path(args.json).write_text(json.dumps({"threads": args.threads, "tasks": results}, ensure_ascii=False,
                                              indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

"""Training speed of each pretraining objective vs MLM: same trainer, model size, data, machine and run.

    python benchmarks/bench_objectives.py --workdir runs/objectives-bench --threads 1 --steps 8

One pretraining-stage `Trainer` per objective (the real collators, optimizer, clipping), all in this process; their
optimizer steps of --batch-size × --max-seq-length tokens are interleaved round-robin, so every objective sees the
same load on a shared machine. Speed = packed tokens read ([CLS]/[SEP] included) per CPU second of this thread
(`time.thread_time`, robust to other processes on the machine; wall-clock speed beside it), over the steps after
--warmup-steps. "scored/s" counts the tokens each objective learns from per second: MLM and the ELECTRA generator the
masked 15%, the ELECTRA discriminator every token, span selection one span per sequence (start and end = 2).

Data: the first --lines lines of a shard of the shared corpus, preprocessed with arabertv02, and a WordPiece
tokenizer of --vocab-size trained on them; both cached in --workdir. Run by hand, not in CI.
"""
from __future__ import annotations

import argparse
import itertools
import lzma
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # usable from a checkout without `pip install -e .`
SHARED = Path(os.environ.get("ARABERT_PIPELINE_TEST_DATA", REPO.parent / "shared" / "data"))

# (label, objective, extra PretrainConfig fields, scored tokens per read token)
RUNS = [
    ("mlm", "mlm", {}, lambda m: 0.15),
    ("electra gdes", "electra", {"electra_embedding_sharing": "gdes"}, lambda m: 1.0),
    ("electra full", "electra", {"electra_embedding_sharing": "full"}, lambda m: 1.0),
    ("electra none", "electra", {"electra_embedding_sharing": "none"}, lambda m: 1.0),
    ("span-selection", "span-selection", {}, lambda m: 2 / m),
]


def prepare(args) -> tuple[Path, Path]:
    """(preprocessed corpus, tokenizer dir), built once in the work dir."""
    from arabert_pipeline.cli import main as cli
    from arabert_pipeline.tokenizer import train_tokenizer

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    raw, corpus = work / f"raw-{args.lines}.txt", work / f"corpus-{args.lines}.txt"
    tokenizer = work / f"wordpiece-{args.vocab_size}"
    if not Path(f"{corpus}.arabert_pipeline.json").exists():
        with lzma.open(SHARED / "corpus" / f"{args.shard}.txt.xz", "rt", encoding="utf-8") as f:
            raw.write_text("".join(itertools.islice(f, args.lines)), encoding="utf-8")
        assert cli(["preprocess", str(raw), "-o", str(corpus), "--preprocessing", "arabertv02", "--no-progress"]) == 0
    if not tokenizer.exists():
        print(train_tokenizer([corpus], tokenizer, model_type="wordpiece", vocab_size=args.vocab_size,
                              threads=args.threads, progress=False).summary())
    return corpus, tokenizer


def make_trainer(args, corpus: Path, tokenizer: Path, label: str, objective: str, extra: dict):
    from arabert_pipeline.pretrain.config import PretrainConfig
    from arabert_pipeline.pretrain.trainer import Trainer

    output = Path(args.workdir) / "runs" / label.replace(" ", "-")
    shutil.rmtree(output, ignore_errors=True)
    config = PretrainConfig(
        tokenizer=str(tokenizer), corpus=[str(corpus)], output=str(output), model_size=args.model_size,
        objective=objective, max_seq_length=args.max_seq_length, steps=args.steps + args.warmup_steps,
        batch_size=args.batch_size, seed=args.seed, cache_dir=str(Path(args.workdir) / "cache"), progress=False,
        **extra,
    )
    return Trainer(config)


def measure(trainers: dict, args) -> dict[str, dict[str, float]]:
    """Round-robin optimizer steps (so every objective sees the same machine load); per objective the tokens, CPU
    seconds and wall seconds of the steps after the warm-up, and the last loss."""
    totals = {label: {"tokens": 0, "cpu": 0.0, "wall": 0.0, "loss": float("nan")} for label in trainers}
    for step in range(args.warmup_steps + args.steps):
        for label, trainer in trainers.items():
            tokens, cpu, wall = trainer.state.tokens, time.thread_time(), time.perf_counter()
            metrics = trainer.train_step()
            if step >= args.warmup_steps:
                total = totals[label]
                total["tokens"] += trainer.state.tokens - tokens
                total["cpu"] += time.thread_time() - cpu
                total["wall"] += time.perf_counter() - wall
                total["loss"] = float(metrics["loss"])
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="runs/objectives-bench")
    parser.add_argument("--shard", default="saudinewsnet-000")
    parser.add_argument("--lines", type=int, default=10000)
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--model-size", default="mini", help="mini = L4/H256/A4")
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8, help="measured steps per objective")
    parser.add_argument("--warmup-steps", type=int, default=2, help="unmeasured first steps per objective")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--only", nargs="+", help="labels of the runs to measure (default: all)")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    corpus, tokenizer = prepare(args)
    chosen = [run for run in RUNS if not args.only or run[0] in args.only]
    torch.manual_seed(args.seed)
    trainers = {label: make_trainer(args, corpus, tokenizer, label, objective, extra)
                for label, objective, extra, _ in chosen}
    totals = measure(trainers, args)

    reference = totals.get("mlm") or next(iter(totals.values()))
    ref_speed = reference["tokens"] / reference["cpu"]
    ref_scored = ref_speed * 0.15
    print(f"{args.model_size} model, {args.max_seq_length}-token sequences, batch {args.batch_size}, "
          f"{args.threads} thread(s), bf16 {next(iter(trainers.values())).bf16}, torch {torch.__version__}; "
          f"{args.steps} steps each after {args.warmup_steps} warm-up, interleaved")
    print(f"{'objective':<16} {'tokens/s':>9} {'(wall)':>8} {'vs mlm':>7} {'scored/s':>9} {'vs mlm':>7} {'loss':>8}")
    for label, _, _, scored in chosen:
        total = totals[label]
        speed = total["tokens"] / total["cpu"]
        scored_speed = scored(args.max_seq_length) * speed
        print(f"{label:<16} {speed:>9,.0f} {total['tokens'] / total['wall']:>8,.0f} {speed / ref_speed:>6.2f}x "
              f"{scored_speed:>9,.0f} {scored_speed / ref_scored:>6.2f}x {total['loss']:>8.3f}")

if __name__ == "__main__":
    main()

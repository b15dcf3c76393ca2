"""Pretraining memory over a long run: resident memory per step with fixed batch shapes vs exact shapes.

    python benchmarks/bench_pretrain_memory.py --workdir runs/pretrain-bench --steps 500

A run of several hours must not grow: with exact batch shapes (width = the batch's longest sequence, rows filling
the token budget, as many prediction-head rows as masked tokens) every step brings shapes the process has not
seen, and the CPU kernels keep native memory per shape (bf16 autocast makes it ~3× worse), so the resident set grew
by ~5-8 MB per step on a mini model at seq 256 until the OOM killer ended the run. The trainer pads every batch to
a few shapes (`pretrain.data.BatchShape`); the reference is the same trainer with the padding multiples set to 1,
i.e. exact shapes. Each side runs in a child process, one after the other; RSS is read from /proc/self/statm every
--every steps. Prints RSS after the first --every steps, at the end, the growth per 100 steps, and the ratio.
Data: as bench_pretrain.py (first --lines lines of a shard, arabertv02, unigram tokenizer), cached in --workdir.
Run by hand, not in CI.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pretrain import prepare


def child(args) -> None:
    import torch

    from arabert_pipeline.pretrain import data, mlm
    from arabert_pipeline.pretrain.config import PretrainConfig
    from arabert_pipeline.pretrain.trainer import Trainer

    torch.set_num_threads(args.threads)
    if args.child == "exact":
        data.WIDTH_MULTIPLE = mlm.POSITIONS_MULTIPLE = 1
    corpus, tokenizer = prepare(args)
    page_mb = os.sysconf("SC_PAGE_SIZE") / 2**20
    rss: dict[int, float] = {}

    def record(trainer) -> None:
        if trainer.state.step % args.every == 0:
            with open("/proc/self/statm") as f:
                rss[trainer.state.step] = int(f.read().split()[1]) * page_mb

    output = Path(args.workdir) / f"memory-{args.child}"
    config = PretrainConfig(
        tokenizer=str(tokenizer), corpus=[str(corpus)], output=str(output), model_size=args.model_size,
        max_seq_length=args.max_seq_length, batch_size=args.batch_size, steps=args.steps, bf16=args.bf16,
        whole_word_masking=True, seed=0, save_every=10**9, eval_every=10**9, progress=False,
        cache_dir=str(Path(args.workdir) / "cache"),
    )
    Trainer(config, on_step=record).train()
    print(json.dumps(rss))


def measure(args, side: str) -> dict[int, float]:
    command = [sys.executable, __file__, "--child", side, *sys.argv[1:]]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{side} run failed: {' '.join(command)}\n{done.stderr[-2000:]}")
    return {int(step): mb for step, mb in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="runs/pretrain-bench")
    parser.add_argument("--shard", default="saudinewsnet-000")
    parser.add_argument("--lines", type=int, default=25000)
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--model-size", default="tiny")
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--every", type=int, default=100, help="read RSS every this many steps")
    parser.add_argument("--bf16", default="auto", choices=["auto", "on", "off"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", choices=["fixed", "exact"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    if args.steps < 2 * args.every:
        parser.error("--steps must be at least twice --every (growth is measured after the first --every steps)")

    prepare(args)  # once, before the children, so neither pays for it
    rows = {}
    for side in ("fixed", "exact"):
        rss = measure(args, side)
        first, last = min(rss), max(rss)
        rows[side] = (rss[first], rss[last], (rss[last] - rss[first]) * 100 / (last - first))
    print(f"{args.model_size}, seq {args.max_seq_length}, batch {args.batch_size}, {args.steps} steps, bf16 "
          f"{args.bf16}, {args.threads} thread(s)")
    print(f"{'':28}{'fixed shapes':>14}{'exact shapes':>14}")
    first, last = min(rss), max(rss)
    for i, label in enumerate((f"RSS MB at step {first}", f"RSS MB at step {last}", "growth MB / 100 steps")):
        print(f"{label:28}{rows['fixed'][i]:>14.0f}{rows['exact'][i]:>14.0f}")
    growth_fixed, growth_exact = rows["fixed"][2], rows["exact"][2]
    print(f"growth ratio exact / fixed: {growth_exact / max(growth_fixed, 1.0):.1f}× "
          f"(fixed-shape growth floored at 1 MB / 100 steps)")


if __name__ == "__main__":
    main()

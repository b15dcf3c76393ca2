"""Pretraining speed and memory of DeBERTa vs BERT, and of DeBERTa's MLM head with vs without the enhanced mask
decoder: same trainer, model size, data, sequence length and machine, in one run.

    python benchmarks/bench_architectures.py --workdir runs/pretrain-bench --steps 30

Each configuration trains in its own child process (one after the other, so each peak resident set is its own): the
real `Trainer` (collator, masked-only MLM head, optimizer, clipping, bf16 autocast where the CPU has it) for
--warmup-steps + --steps optimizer steps of --batch-size × --max-seq-length tokens. Speed = packed tokens read
([CLS]/[SEP] included) per CPU second of the training thread (`time.thread_time`: other processes on the machine
do not count; wall-clock speed beside it) over the steps after the warm-up. Memory = the child's peak resident set,
and its growth from the end of setup (model, data and tokenizer loaded) to the peak: activations, gradients and
optimizer state. Ratios are against BERT (and, for EMD, against DeBERTa without it).

Data: as bench_pretrain.py (first --lines lines of a shard of the shared corpus, arabertv02, a unigram tokenizer of
--vocab-size), cached in --workdir. Run by hand, not in CI.
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pretrain import prepare

# label → PretrainConfig fields
RUNS = {
    "bert": {"architecture": "bert"},
    "deberta": {"architecture": "deberta-v2"},
    "deberta+emd": {"architecture": "deberta-v2", "enhanced_mask_decoder": True},
}


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def child(args) -> None:
    import torch

    from arabert_pipeline.pretrain.config import PretrainConfig
    from arabert_pipeline.pretrain.trainer import Trainer

    torch.set_num_threads(args.threads)
    corpus, tokenizer = prepare(args)
    output = Path(args.workdir) / f"architectures-{args.child}"
    shutil.rmtree(output, ignore_errors=True)
    config = PretrainConfig(
        tokenizer=str(tokenizer), corpus=[str(corpus)], output=str(output), model_size=args.model_size,
        max_seq_length=args.max_seq_length, batch_size=args.batch_size, steps=args.warmup_steps + args.steps,
        whole_word_masking=True, dropout=0.0, seed=0, eval_sequences=8, progress=False,
        cache_dir=str(Path(args.workdir) / "cache"), **RUNS[args.child],
    )
    trainer = Trainer(config)
    setup_rss = rss_mb()
    tokens, cpu, wall = 0, 0.0, 0.0
    for step in range(args.warmup_steps + args.steps):
        before, cpu_start, wall_start = trainer.state.tokens, time.thread_time(), time.perf_counter()
        trainer.train_step()
        if step >= args.warmup_steps:
            tokens += trainer.state.tokens - before
            cpu += time.thread_time() - cpu_start
            wall += time.perf_counter() - wall_start
    trainer.release_output()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    parameters = sum(p.numel() for p in trainer.model.parameters())
    print(json.dumps({"tokens": tokens, "cpu": cpu, "wall": wall, "setup_rss": setup_rss, "peak_rss": peak,
                      "parameters": parameters, "bf16": trainer.bf16}))


def measure(args, label: str) -> dict:
    command = [sys.executable, __file__, "--child", label, *sys.argv[1:]]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{label} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="runs/pretrain-bench")
    parser.add_argument("--shard", default="saudinewsnet-000")
    parser.add_argument("--lines", type=int, default=25000)
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--model-size", default="mini", help="mini = L4/H256/A4")
    parser.add_argument("--max-seq-length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=30, help="measured steps per configuration")
    parser.add_argument("--warmup-steps", type=int, default=2, help="unmeasured first steps per configuration")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", choices=list(RUNS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    import torch

    prepare(args)  # once, before the children: none of them pays for tokenizer training in its peak memory
    results = {label: measure(args, label) for label in RUNS}
    bert = results["bert"]
    print(f"{args.model_size} model, {args.max_seq_length}-token sequences, batch {args.batch_size}, whole-word MLM, "
          f"{args.threads} thread(s), bf16 {bert['bf16']}, torch {torch.__version__}; {args.steps} steps each after "
          f"{args.warmup_steps} warm-up, one child process per configuration, one after the other")
    print(f"{'configuration':<13} {'params':>10} {'tokens/s':>9} {'(wall)':>7} {'vs bert':>8} {'vs deberta':>10} "
          f"{'peak RSS':>9} {'vs bert':>8} {'growth':>8} {'vs bert':>8}")
    for label, r in results.items():
        speed = r["tokens"] / r["cpu"]
        growth = r["peak_rss"] - r["setup_rss"]
        deberta = results["deberta"]
        versus = (speed / (deberta["tokens"] / deberta["cpu"])) if label == "deberta+emd" else None
        print(f"{label:<13} {r['parameters']:>10,} {speed:>9,.0f} {r['tokens'] / r['wall']:>7,.0f} "
              f"{speed / (bert['tokens'] / bert['cpu']):>7.2f}x {'' if versus is None else f'{versus:.2f}x':>10} "
              f"{r['peak_rss']:>7,.0f}MB {r['peak_rss'] / bert['peak_rss']:>7.2f}x {growth:>6,.0f}MB "
              f"{growth / (bert['peak_rss'] - bert['setup_rss']):>7.2f}x")


if __name__ == "__main__":
    main()

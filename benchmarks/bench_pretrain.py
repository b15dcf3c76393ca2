"""Pretraining speed: our trainer vs a plain Hugging Face MLM loop, same model, same data, same machine, same run.

    python benchmarks/bench_pretrain.py --workdir runs/pretrain-bench --model-size mini --threads 1 --tokens 100000

Baseline: `BertForMaskedLM` (full prediction head over every position) + `DataCollatorForLanguageModeling`
(15%, 80/10/10) + padded batches of unpacked corpus lines (one paragraph per sequence, truncated to
--max-seq-length, padded to the longest in the batch), AdamW with the same hyper-parameters and a linear schedule.
Ours: the pretraining stage's `Trainer` (packed sequences, masked-only head, ...), same model config and seed, and
by default as many tokens per optimizer step as the baseline (see `our_batch_size`).

The two alternate step by step in one process (the one that has read fewer tokens goes next), so both see the same load
on a shared machine; tokens per CPU second (process time, all threads) is printed too. Tokens = tokens the model reads
([CLS]/[SEP] included, padding excluded). After both have read --tokens tokens, both are evaluated on the trainer's
held-out sequences with the same fixed masks. Peak memory is measured separately: each side runs a few steps in a child
process, whose peak RSS os.wait4 reports.

Data: the first --lines lines of a shard of the shared corpus, preprocessed with arabertv02 (`arabert-pipeline
preprocess`), and a unigram tokenizer trained on it (`train_tokenizer`); both cached in --workdir.
Run by hand, not in CI.
"""
from __future__ import annotations

import argparse
import itertools
import json
import lzma
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import mean

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # usable from a checkout without `pip install -e .`
SHARED = Path(os.environ.get("ARABERT_PIPELINE_TEST_DATA", REPO.parent / "shared" / "data"))


def prepare(args) -> tuple[Path, Path]:
    """(preprocessed corpus, tokenizer dir), built once in the work dir."""
    from arabert_pipeline.cli import main as cli
    from arabert_pipeline.tokenizer import train_tokenizer

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    raw, corpus = work / f"raw-{args.lines}.txt", work / f"corpus-{args.lines}.txt"
    tokenizer = work / f"unigram-{args.vocab_size}"
    if not Path(f"{corpus}.arabert_pipeline.json").exists():
        with lzma.open(SHARED / "corpus" / f"{args.shard}.txt.xz", "rt", encoding="utf-8") as f:
            lines = list(itertools.islice(f, args.lines))
        raw.write_text("".join(lines), encoding="utf-8")
        assert cli(["preprocess", str(raw), "-o", str(corpus), "--preprocessing", "arabertv02", "--no-progress"]) == 0
    if not tokenizer.exists():
        print(train_tokenizer([corpus], tokenizer, model_type="unigram", vocab_size=args.vocab_size,
                              threads=args.threads, progress=False).summary())
    return corpus, tokenizer


def our_batch_size(args, corpus: Path, tokenizer: Path) -> int:
    """Sequences per batch for our trainer: by default as many tokens per optimizer step as the baseline's batches
    of --batch-size unpacked lines hold on average, so both make updates of the same size and their losses after
    the same number of tokens compare; with --same-sequences, --batch-size packed sequences."""
    import numpy as np
    from transformers import AutoTokenizer

    from arabert_pipeline.pretrain.data import TokenStore, cache_key, tokenize_corpus

    if args.same_sequences:
        return args.batch_size
    tok = AutoTokenizer.from_pretrained(tokenizer)
    key = cache_key([str(corpus)], tok)
    store = TokenStore.open(tokenize_corpus([str(corpus)], tok, Path(args.workdir) / "cache", key, progress=False))
    line_tokens = np.minimum(np.diff(store.line_starts), args.max_seq_length - 2) + 2
    return max(1, round(args.batch_size * float(line_tokens.mean()) / args.max_seq_length))


def make_trainer(args, corpus: Path, tokenizer: Path, output: Path):
    import shutil

    from arabert_pipeline.pretrain.config import PretrainConfig
    from arabert_pipeline.pretrain.trainer import Trainer

    shutil.rmtree(output, ignore_errors=True)
    config = PretrainConfig(
        tokenizer=str(tokenizer), corpus=[str(corpus)], output=str(output), model_size=args.model_size,
        max_seq_length=args.max_seq_length, tokens=args.tokens, batch_size=our_batch_size(args, corpus, tokenizer),
        lr=args.lr,
        seed=args.seed, bf16="off", cache_dir=str(Path(args.workdir) / "cache"), progress=False,
        eval_sequences=args.eval_sequences,
    )
    return Trainer(config)


class Baseline:
    """The plain Hugging Face recipe on the trainer's training documents, one corpus line per sequence."""

    def __init__(self, trainer, args):
        import numpy as np
        import torch
        from transformers import BertForMaskedLM, DataCollatorForLanguageModeling, get_linear_schedule_with_warmup

        from arabert_pipeline.training import parameter_groups

        store, tok = trainer.store, trainer.tokenizer
        torch.manual_seed(args.seed)
        bert_config = trainer.accelerator.unwrap_model(trainer.model).model.config
        self.model = BertForMaskedLM._from_config(bert_config)
        self.model.train()
        starts = store.line_starts
        docs = trainer.data.train_docs
        train_lines = np.concatenate([np.arange(store.doc_lines[d], store.doc_lines[d + 1]) for d in docs])
        keep = args.max_seq_length - 2
        self.examples = [
            {"input_ids": [tok.cls_token_id, *store.tokens[starts[i]: min(starts[i + 1], starts[i] + keep)].tolist(),
                           tok.sep_token_id]}
            for i in train_lines
        ]
        self.order = np.random.default_rng(args.seed).permutation(len(self.examples))
        self.collator = DataCollatorForLanguageModeling(tok, mlm_probability=0.15, seed=args.seed)
        self.batch_size, self.cursor, self.tokens, self.step = args.batch_size, 0, 0, 0
        mean_tokens = np.mean([len(e["input_ids"]) for e in self.examples]) * args.batch_size
        total = math.ceil(args.tokens / mean_tokens)
        self.optimizer = torch.optim.AdamW(parameter_groups(self.model, 0.01), lr=args.lr, betas=(0.9, 0.999), eps=1e-6)
        self.schedule = get_linear_schedule_with_warmup(self.optimizer, round(0.06 * total), total)

    def train_step(self) -> float:
        import torch

        if self.cursor + self.batch_size > len(self.order):
            self.cursor = 0
        rows = self.order[self.cursor: self.cursor + self.batch_size]
        self.cursor += self.batch_size
        batch = self.collator([self.examples[i] for i in rows])
        loss = self.model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.schedule.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.tokens += int(batch["attention_mask"].sum())
        self.step += 1
        return loss.item()


def evaluate_baseline(trainer, baseline) -> dict:
    """The baseline's model on the trainer's held-out batches and masks (the masked-only loss equals the full one)."""
    from arabert_pipeline.pretrain.mlm import MaskedLanguageModel

    ours = trainer.model
    trainer.model = MaskedLanguageModel(baseline.model, trainer.collator)
    try:
        return trainer.evaluate()
    finally:
        trainer.model = ours


def child(args) -> None:
    """Data preparation, or a few steps of one side only, so the parent can read this process's peak RSS."""
    import torch

    torch.set_num_threads(args.threads)
    corpus, tokenizer = prepare(args)
    if args.child == "prepare":
        return
    trainer = make_trainer(args, corpus, tokenizer, Path(args.workdir) / f"memory-{args.child}")
    side = trainer if args.child == "ours" else Baseline(trainer, args)
    for _ in range(args.child_steps):
        side.train_step()


def peak_memory(args, side: str) -> float:
    command = [sys.executable, __file__, "--child", side, *sys.argv[1:]]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{side} memory run failed: {' '.join(command)}")
    return usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="runs/pretrain-bench")
    parser.add_argument("--shard", default="saudinewsnet-000")
    parser.add_argument("--lines", type=int, default=25000, help="lines of the shard to use (the whole shard: 25000)")
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--model-size", default="mini")
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32, help="lines per baseline batch")
    parser.add_argument("--same-sequences", action="store_true",
                        help="give our trainer --batch-size packed sequences (more tokens per step than the baseline)")
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--tokens", type=int, default=100_000, help="tokens each side reads")
    parser.add_argument("--eval-sequences", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--child", choices=["prepare", "ours", "baseline"], help=argparse.SUPPRESS)
    parser.add_argument("--child-steps", type=int, default=4, help="steps of each memory run")
    args = parser.parse_args()
    if args.child:
        return child(args)

    # Data preparation runs in a child and the memory runs come first, while this process is small: a child's peak
    # RSS counts its parent's size at fork (Linux carries the high-water mark across exec).
    subprocess.run([sys.executable, __file__, "--child", "prepare", *sys.argv[1:]], check=True)
    corpus, tokenizer = prepare(args)
    memory = {side: peak_memory(args, side) for side in ("ours", "baseline")}

    import torch

    torch.set_num_threads(args.threads)
    trainer = make_trainer(args, corpus, tokenizer, Path(args.workdir) / "ours")
    baseline = Baseline(trainer, args)
    seconds = {"ours": 0.0, "baseline": 0.0}
    cpu_seconds = {"ours": 0.0, "baseline": 0.0}
    losses = {"ours": [], "baseline": []}
    print(f"{args.model_size}, vocab {len(trainer.tokenizer)}, seq {args.max_seq_length}, "
          f"batch {args.batch_size} lines (baseline) / {trainer.config.batch_size} packed sequences (ours), "
          f"{args.threads} thread(s), {args.tokens:,} tokens each; corpus {trainer.store.meta['tokens']:,} tokens")
    while min(trainer.state.tokens, baseline.tokens) < args.tokens:
        side = "ours" if trainer.state.tokens <= baseline.tokens else "baseline"
        if side == "ours" and trainer.state.tokens >= args.tokens:
            side = "baseline"
        elif side == "baseline" and baseline.tokens >= args.tokens:
            side = "ours"
        start, cpu_start = time.perf_counter(), time.process_time()
        if side == "ours":
            losses["ours"].append(float(trainer.train_step()["loss"]))
        else:
            losses["baseline"].append(baseline.train_step())
        seconds[side] += time.perf_counter() - start
        cpu_seconds[side] += time.process_time() - cpu_start
    tokens = {"ours": trainer.state.tokens, "baseline": baseline.tokens}
    rates = {side: tokens[side] / seconds[side] for side in tokens}
    cpu_rates = {side: tokens[side] / cpu_seconds[side] for side in tokens}
    eval_ours, eval_base = trainer.evaluate(), evaluate_baseline(trainer, baseline)
    rows = [
        ("tokens read", f"{trainer.state.tokens:,}", f"{baseline.tokens:,}", ""),
        ("optimizer steps", trainer.state.step, baseline.step, ""),
        ("seconds", f"{seconds['ours']:.1f}", f"{seconds['baseline']:.1f}", ""),
        ("tokens/s", f"{rates['ours']:.0f}", f"{rates['baseline']:.0f}", f"{rates['ours'] / rates['baseline']:.2f}×"),
        ("tokens per CPU second", f"{cpu_rates['ours']:.0f}", f"{cpu_rates['baseline']:.0f}",
         f"{cpu_rates['ours'] / cpu_rates['baseline']:.2f}×"),
        ("held-out MLM loss", f"{eval_ours['eval_mlm_loss']:.3f}", f"{eval_base['eval_mlm_loss']:.3f}", ""),
        ("held-out masked accuracy", f"{eval_ours['eval_mlm_accuracy']:.3f}",
         f"{eval_base['eval_mlm_accuracy']:.3f}", ""),
        ("train loss, last 5 steps", f"{mean(losses['ours'][-5:]):.3f}", f"{mean(losses['baseline'][-5:]):.3f}", ""),
        (f"peak RSS MB ({args.child_steps} steps)", f"{memory['ours']:.0f}", f"{memory['baseline']:.0f}",
         f"{memory['baseline'] / memory['ours']:.2f}×"),
    ]
    print(f"| {'':26} | {'ours':>10} | {'HF baseline':>11} | {'ratio':>6} |")
    print(f"|{'-' * 28}|{'-' * 12}|{'-' * 13}|{'-' * 8}|")
    for name, ours, base, ratio in rows:
        print(f"| {name:26} | {ours!s:>10} | {base!s:>11} | {ratio:>6} |")
    result = {"args": vars(args), "tokens_per_second": rates, "tokens_per_cpu_second": cpu_rates,
              "eval_ours": eval_ours, "eval_baseline": eval_base,
              "peak_rss_mb": memory, "seconds": seconds,
              "steps": {"ours": trainer.state.step, "baseline": baseline.step}}
    (Path(args.workdir) / "result.json").write_text(json.dumps(result, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()

"""Tokenizer speed: training time and peak memory per vocabulary size, and encoding throughput of the exported fast
tokenizer against the SentencePiece Python API on the same lines (ratio printed; ids compared too).

    python benchmarks/bench_tokenizer.py --corpus runs/corpus/train-arabertv2.txt.xz --workdir runs/tok-bench \
        --vocab-sizes 32000 64000 --threads 2

Each training runs `arabert-pipeline train-tokenizer` in a child process, so its peak RSS is the child's own
(os.wait4). The corpus is used as it is: pass a preprocessed file (with its sidecar) to time the tokenizer alone.
Run by hand, not in CI.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # usable from a checkout without `pip install -e .`


def train(corpus: Path, out: Path, vocab_size: int, args) -> dict:
    command = [sys.executable, "-m", "arabert_pipeline.cli", "train-tokenizer", str(corpus), "-o", str(out),
               "--model-type", args.model_type, "--vocab-size", str(vocab_size), "--threads", str(args.threads),
               "--sample-sentences", str(args.sample_sentences), "--no-progress"]
    if args.preprocess:
        command += ["--preprocessing", args.preprocess]
    log = out.with_name(out.name + ".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as f:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        child = subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, env=env)
        # wait4 gives this child's own peak RSS (RUSAGE_CHILDREN would be the maximum over all children so far).
        _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    output = log.read_text(encoding="utf-8").strip()
    if child.returncode != 0:
        return {"vocab_size": vocab_size, "error": output.splitlines()[-1] if output else "failed"}
    meta = json.loads((out / "arabert_pipeline.json").read_text(encoding="utf-8"))
    return {"vocab_size": vocab_size, "seconds": seconds, "peak_rss_mb": usage.ru_maxrss / 1024,
            "lines_used": meta["lines_used"], "summary": output.splitlines()[-1]}


def read_lines(corpus: Path, n: int) -> list[str]:
    from arabert_pipeline.tokenizer.report import read_held_out

    return read_held_out(corpus, n)


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def encode_speed(directory: Path, lines: list[str], args) -> dict:
    import sentencepiece as spm

    from arabert_pipeline.tokenizer import load_tokenizer

    tokenizer, _ = load_tokenizer(directory)
    sp = spm.SentencePieceProcessor(model_file=str(directory / "sentencepiece.model"))
    batches = [lines[i:i + args.batch_size] for i in range(0, len(lines), args.batch_size)]

    def fast():
        for batch in batches:
            tokenizer(batch, add_special_tokens=False, verbose=False)

    def sp_batch():
        for batch in batches:
            sp.encode(batch, num_threads=args.threads)

    def sp_loop():
        for line in lines:
            sp.encode(line)

    ids_fast = [ids for b in batches for ids in tokenizer(b, add_special_tokens=False, verbose=False)["input_ids"]]
    mismatches = sum(a != b for a, b in zip(ids_fast, sp.encode(lines), strict=True))
    n = len(lines)
    t_fast, t_batch, t_loop = (best_of(args.repeats, f) for f in (fast, sp_batch, sp_loop))
    return {"lines": n, "fast_lines_per_s": n / t_fast, "sp_batch_lines_per_s": n / t_batch,
            "sp_loop_lines_per_s": n / t_loop, "id_mismatches": mismatches,
            "tokens": sum(len(ids) for ids in ids_fast)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True, type=Path, help="corpus file (preprocessed, with its sidecar)")
    parser.add_argument("--workdir", required=True, type=Path, help="where the tokenizers are written")
    parser.add_argument("--vocab-sizes", type=int, nargs="+", default=[32000, 64000])
    parser.add_argument("--model-type", default="unigram", choices=["unigram", "wordpiece"])
    parser.add_argument("--preprocess", help="only for raw corpora without a sidecar")
    parser.add_argument("--threads", type=int, default=2, help="training and encoding threads")
    parser.add_argument("--sample-sentences", type=int, default=2_000_000)
    parser.add_argument("--encode-lines", type=int, default=20000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-training", action="store_true", help="reuse the tokenizers already in --workdir")
    args = parser.parse_args()
    # The fast tokenizer's thread pool reads this once; the SentencePiece side gets the same count explicitly.
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)

    results = {"corpus": str(args.corpus), "threads": args.threads, "trainings": [], "encoding": []}
    print(f"corpus {args.corpus}, {args.model_type}, {args.threads} thread(s)")
    print("| vocab | training (s) | peak RSS (MB) | lines |\n|---:|---:|---:|---:|")
    for vocab_size in sorted(args.vocab_sizes):
        out = args.workdir / f"{args.model_type}-{vocab_size}"
        if args.skip_training:
            continue
        row = train(args.corpus, out, vocab_size, args)
        results["trainings"].append(row)
        if "error" in row:
            print(f"| {vocab_size:,} | failed: {row['error']} | | |")
        else:
            print(f"| {vocab_size:,} | {row['seconds']:.1f} | {row['peak_rss_mb']:.0f} | {row['lines_used']:,} |")
    if args.model_type == "unigram":
        lines = read_lines(args.corpus, args.encode_lines)
        print(f"\nencoding {len(lines):,} lines, batches of {args.batch_size}, best of {args.repeats}")
        print("| vocab | fast tokenizer (lines/s) | sentencepiece batch (lines/s) | sentencepiece loop (lines/s) | "
              "fast / sp batch | fast / sp loop | id mismatches |\n|---:|---:|---:|---:|---:|---:|---:|")
        for vocab_size in sorted(args.vocab_sizes):
            directory = args.workdir / f"{args.model_type}-{vocab_size}"
            if not (directory / "sentencepiece.model").is_file():
                continue
            row = {"vocab_size": vocab_size, **encode_speed(directory, lines, args)}
            results["encoding"].append(row)
            print(f"| {vocab_size:,} | {row['fast_lines_per_s']:,.0f} | {row['sp_batch_lines_per_s']:,.0f} | "
                  f"{row['sp_loop_lines_per_s']:,.0f} | {row['fast_lines_per_s'] / row['sp_batch_lines_per_s']:.2f}x | "
                  f"{row['fast_lines_per_s'] / row['sp_loop_lines_per_s']:.2f}x | {row['id_mismatches']} |")
    (args.workdir / "bench_tokenizer.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

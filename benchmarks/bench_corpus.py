"""Corpus preprocessing throughput: the shared corpus (or a slice of it) through `preprocess_corpus`.

    python benchmarks/bench_corpus.py                  # whole corpus (192 MB, 488k paragraphs), arabertv2, 2 workers
    python benchmarks/bench_corpus.py --limit 20000    # 20k lines taken evenly from every shard

Target (issue 2): the whole corpus with arabertv2 on 2 workers in at most 15 minutes. A slice starts with a cold
word cache and sees fewer repeats than the whole corpus, so the projected full-corpus time it prints is pessimistic.
The run uses a fresh temporary word cache, so earlier runs do not flatter the numbers.
"""
from __future__ import annotations

import argparse
import itertools
import json
import lzma
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("ARABERT_PIPELINE_TEST_DATA", REPO.parent / "shared" / "data")) / "corpus"
TARGET_SECONDS = 15 * 60


def write_slice(shards: list[Path], limit: int, path: Path) -> None:
    """The first `limit / len(shards)` lines of every shard, so that every source is represented."""
    per_shard = -(-limit // len(shards))
    written = 0
    with open(path, "wb") as out:
        for shard in shards:
            with lzma.open(shard, "rb") as f:
                for line in itertools.islice(f, min(per_shard, limit - written)):
                    out.write(line)
                    written += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, help="lines to take (evenly from every shard); default: everything")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--preprocessing", default="arabertv2")
    parser.add_argument("--chunk-lines", type=int, default=1000)
    parser.add_argument("--output", help="keep the output here (default: a temporary directory, removed after)")
    args = parser.parse_args()

    from arabert_pipeline.preprocess.corpus import preprocess_corpus

    shards = sorted(CORPUS.glob("*.txt.xz"))
    if not shards:
        print(f"no corpus shards in {CORPUS} (set ARABERT_PIPELINE_TEST_DATA)", file=sys.stderr)
        return 1
    # stats.json has the corpus's word count: a slice's time is projected by words, without reading everything.
    full_words = sum(source["words"] for source in json.loads((CORPUS / "stats.json").read_text()).values())
    with tempfile.TemporaryDirectory() as tmp:
        inputs = shards
        if args.limit:
            inputs = [Path(tmp) / "slice.txt"]
            write_slice(shards, args.limit, inputs[0])
        output = Path(args.output) if args.output else Path(tmp) / "corpus.txt"
        word_cache = Path(tmp) / "words.tsv"
        started = time.perf_counter()
        cpu_before = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        report = preprocess_corpus(inputs, output, preprocessing=args.preprocessing, workers=args.workers,
                                   chunk_lines=args.chunk_lines, word_cache=word_cache)
        wall = time.perf_counter() - started
        cpu_after = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds do not grow when other jobs share the cores, unlike wall time: they show what idle cores would give.
    main_cpu, workers_cpu = (a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime
                             for a, b in zip(cpu_after, cpu_before, strict=True))
    idle_wall = max(main_cpu, (main_cpu + workers_cpu) / args.workers)

    misses = report.cache_lookups - report.cache_hits
    print(f"corpus: {'slice of ' if args.limit else ''}{len(shards)} shards in {CORPUS}; "
          f"preprocessing {args.preprocessing}, {args.workers} workers, {args.chunk_lines} lines per chunk")
    print(f"lines            {report.lines:,}")
    print(f"words            {report.words:,}")
    print(f"text             {report.input_bytes / 1e6:,.1f} MB")
    print(f"wall time        {wall:,.1f} s")
    print(f"throughput       {report.lines / wall:,.0f} lines/s, {report.input_bytes / 1e6 / wall:,.2f} MB/s")
    print(f"CPU time         main process {main_cpu:,.1f} s, workers {workers_cpu:,.1f} s: about {idle_wall:,.1f} s "
          f"of wall time on {args.workers} idle cores (measured wall / that = {wall / max(idle_wall, 1e-9):.2f}; "
          "above 1 the cores were shared)")
    if report.cache_lookups:
        print(f"distinct words   {report.segmented_words:,} segmented "
              f"({misses - report.segmented_words:,} segmented twice by different workers)")
        print(f"cache hit rate   {100 * report.cache_hit_rate:.2f}% of {report.cache_lookups:,} lookups")
    for name, seconds in (("wall", wall), ("idle cores", idle_wall)):
        projected = seconds * full_words / report.words
        label = f"projected full corpus, {name} (upper bound)" if args.limit else f"full corpus, {name}"
        print(f"{label}: {projected / 60:,.1f} min = {projected / TARGET_SECONDS:.2f} x the 15 min target "
              f"({'met' if projected <= TARGET_SECONDS else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Normalization throughput: arabert_pipeline vs the reference `ArabertPreprocessor("bert-base-arabertv02")`.

    python benchmarks/bench_normalize.py [--lines 20000] [--reference-python PATH]

Both run in this one invocation on the same lines of the shared corpus (ARABERT_PIPELINE_DATA or ../shared/data):
ours in this process, the reference in a subprocess of the Python that has the `arabert` package, which is never a
dependency of this project. Create that environment once, outside the repository:

    python -m venv ~/.cache/arabert_pipeline/arabert-venv \\
        && ~/.cache/arabert_pipeline/arabert-venv/bin/pip install arabert

and point to it with --reference-python or ARABERT_REFERENCE_PYTHON (default: that path). Prints lines/s for both,
the ratio (target >= 5x) and whether the outputs are identical line for line.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DEFAULT_REFERENCE_PYTHON = str(Path.home() / ".cache" / "arabert_pipeline" / "arabert-venv" / "bin" / "python")

REFERENCE_SCRIPT = r"""
import json, logging, sys, time
logging.disable(logging.WARNING)
from arabert.preprocess import ArabertPreprocessor
lines = json.load(open(sys.argv[1], encoding="utf-8"))
prep = ArabertPreprocessor("bert-base-arabertv02")
for line in lines[:200]:
    prep.preprocess(line)  # warm-up: regex cache
start = time.perf_counter()
out = [prep.preprocess(line) for line in lines]
seconds = time.perf_counter() - start
json.dump({"seconds": seconds, "out": out}, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
"""


def corpus_lines(limit: int) -> list[str]:
    root = Path(os.environ.get("ARABERT_PIPELINE_DATA", REPO.parent / "shared" / "data")) / "corpus"
    files = sorted(root.glob("*.txt.xz"))
    if not files:
        sys.exit(f"no corpus files under {root}; set ARABERT_PIPELINE_DATA to the shared data folder")
    per_file = -(-limit // len(files))
    lines: list[str] = []
    for path in files:
        with lzma.open(path, "rt", encoding="utf-8") as f:
            for i, line in enumerate(f):
                if i >= per_file:
                    break
                lines.append(line.rstrip("\n"))
    return lines[:limit]


def run_reference(python: str, lines: list[str]) -> tuple[float, list[str]]:
    if not Path(python).exists():
        sys.exit(f"reference Python {python} not found. Create it outside the repository:\n"
                 "  python -m venv ~/.cache/arabert_pipeline/arabert-venv && "
                 "~/.cache/arabert_pipeline/arabert-venv/bin/pip install arabert\n"
                 f"then pass --reference-python or set ARABERT_REFERENCE_PYTHON")
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "in.json"), Path(tmp, "out.json")
        src.write_text(json.dumps(lines, ensure_ascii=False), encoding="utf-8")
        subprocess.run([python, "-c", REFERENCE_SCRIPT, str(src), str(dst)], check=True)
        result = json.loads(dst.read_text(encoding="utf-8"))
    return result["seconds"], result["out"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--reference-python", default=os.environ.get("ARABERT_REFERENCE_PYTHON",
                                                                     DEFAULT_REFERENCE_PYTHON))
    parser.add_argument("--repeats", type=int, default=3, help="best of N runs for each side")
    args = parser.parse_args()

    from arabert_pipeline.preprocess.normalize import normalize

    lines = corpus_lines(args.lines)
    n_chars = sum(map(len, lines))
    print(f"{len(lines):,} corpus lines, {n_chars / len(lines):.0f} characters per line on average")
    for line in lines[:200]:
        normalize(line)
    ours_times, ref_times = [], []
    for _ in range(args.repeats):  # interleaved, so both sides see the same machine load
        start = time.perf_counter()
        ours = [normalize(line) for line in lines]
        ours_times.append(time.perf_counter() - start)
        seconds, reference = run_reference(args.reference_python, lines)
        ref_times.append(seconds)
    ours_s, ref_s = min(ours_times), min(ref_times)
    mismatches = [i for i, (a, b) in enumerate(zip(ours, reference, strict=True)) if a != b]
    print(f"reference ArabertPreprocessor v02: {len(lines) / ref_s:>10,.0f} lines/s ({ref_s:.2f} s)")
    print(f"arabert_pipeline normalize:        {len(lines) / ours_s:>10,.0f} lines/s ({ours_s:.2f} s)")
    print(f"speed-up: {ref_s / ours_s:.1f}x (target >= 5x)")
    digest = hashlib.sha256("\n".join(ours).encode("utf-8")).hexdigest()[:16]
    print(f"identical outputs: {not mismatches and len(ours) == len(reference)} "
          f"({len(mismatches)} of {len(lines)} lines differ; output sha256 {digest})")
    for i in mismatches[:3]:
        print(f"  line {i}:\n    input: {lines[i]!r}\n    ours:  {ours[i]!r}\n    ref:   {reference[i]!r}")


if __name__ == "__main__":
    main()

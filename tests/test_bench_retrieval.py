"""benchmarks/bench_retrieval.py at tiny size on the test slices: its speed numbers mean nothing here; that it builds
each size in a child process, searches with the dev questions and reports every column is checked. Slow whole, as
every benchmark script's test is (two indexes built and searched, four Python processes)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO, SLICES

pytestmark = pytest.mark.slow


def test_the_benchmark_builds_and_searches_each_size(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_retrieval.py"), "--data-root", str(SLICES),
                           "--sizes", "300", "all", "--workdir", str(tmp_path), "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    small, every = report["rows"]
    assert 300 <= small["passages"] < every["passages"] and small["documents"] < every["documents"]
    for row in (small, every):
        assert row["questions"] > 50 and 0 < row["recall@1"] <= row["recall@5"] <= row["recall@20"] <= 100
        assert row["build_seconds"] > 0 and row["index_mb"] > 0 and row["rss_loaded_mb"] > 0 and row["ms_p50"] > 0
    assert report["analysis"] == "arabertv02-light10+qwords" and "| passages |" in done.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]  # the indexes were built in a temp dir, and removed

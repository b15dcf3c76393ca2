"""benchmarks/bench_retrieval.py at tiny size on the test slices: its speed numbers mean nothing here; that it builds
each size in a child process, searches with the dev questions and reports every column is checked. Slow whole, as
every benchmark script's test is (two indexes built and searched, four Python processes)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from conftest import REPO, SLICES

pytestmark = pytest.mark.slow


def test_the_benchmark_builds_and_searches_each_size(tmp_path):
    out = tmp_path / "bench.json"
    # tantivy is no dependency of the package: the comparison with it runs where it is installed
    compare = ["--compare-tantivy"] if importlib.util.find_spec("tantivy") else []
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_retrieval.py"), "--data-root", str(SLICES),
                           "--sizes", "300", "all", "--workdir", str(tmp_path), "--out", str(out), "--verb",
                           "--context-chars", "3000", *compare], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    small, every = report["rows"]
    assert 300 <= small["passages"] < every["passages"] and small["documents"] < every["documents"]
    for row in (small, every):
        assert row["questions"] > 50 and 0 < row["recall@1"] <= row["recall@5"] <= row["recall@20"] <= 100
        assert row["build_seconds"] > 0 and row["index_mb"] > 0 and row["rss_loaded_mb"] > 0 and row["ms_p50"] > 0
    assert report["analysis"] == "arabertv02-light10+qwords" and "| passages |" in done.stdout
    assert report["verb"]["printed"].startswith("indexed ") and report["verb"]["seconds"] > 0
    context, = report["long_contexts"]
    assert context["context_chars"] == 3000 and context["passages_mean"] >= 5 and context["ms_p50"] > 0
    if compare:
        for library in ("bm25s", "tantivy"):
            assert 0 < every[f"{library}_positions_only"]["recall@20"] <= 100
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]  # the indexes were built in a temp dir, and removed


def test_the_dev_script_compares_systems_with_paired_cis(tmp_path):
    out = tmp_path / "dev.json"
    systems = ["bm25s", "tantivy"] if importlib.util.find_spec("tantivy") else ["bm25s"]
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "retrieval_dev.py"), "--data-root", str(SLICES),
                           "--collections", "own", "--systems", *systems, "--analyses", "arabertv02-light10+qwords",
                           "arabertv02", "--passage-chars", "600", "300", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert {r["system"] for r in report["results"]} == set(systems)
    assert set(report["versions"]) == set(systems)  # without tantivy installed, nothing asks for it
    first = report["results"][0]
    assert (first["analysis"], first["passage_chars"]) == ("arabertv02-light10+qwords", 600)
    assert 0 < first["pooled"]["recall@1"]["mean"] <= first["pooled"]["recall@20"]["mean"] <= 100
    paired = [c for c in report["comparisons"] if "recall@1" in c]
    assert paired and all(c["recall@1"]["low"] <= c["recall@1"]["diff"] <= c["recall@1"]["high"] for c in paired)
    assert any("equal_characters" in c for c in report["comparisons"])

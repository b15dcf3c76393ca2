"""benchmarks/bench_documents.py at tiny size on the test slices: its times mean nothing here; that it asks each
question of its paragraph, its document and the collection, and reports the ratios, is checked."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO, SLICES

pytestmark = pytest.mark.slow


def test_the_benchmark_times_the_three_ways_in_one_run(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_documents.py"), "--data-root", str(SLICES),
                           "--questions", "3", "--warmup", "1", "--min-chars", "3000", "--news-paragraphs", "200",
                           "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["questions"] == 3 and report["machine"]["threads"] == 1 and report["backend"] == "onnx"
    assert report["characters"]["document"] >= 3000 > report["characters"]["paragraph"]
    assert report["collection"]["news_paragraph_lines"] >= 200 and report["collection"]["passages"] > 0
    for way in ("paragraph", "document", "collection"):
        assert 0 < report["ms"][way]["p50"] <= report["ms"][way]["p95"]
        assert 0 <= report["soqal_f1"][way] <= 100
    assert report["ratio_to_paragraph"]["paragraph"] == {"mean": 1.0, "p50": 1.0}
    assert report["ratio_to_paragraph"]["document"]["mean"] == pytest.approx(
        report["ms"]["document"]["mean"] / report["ms"]["paragraph"]["mean"])
    assert "collection" in done.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]  # the index was built in a temp dir, and removed

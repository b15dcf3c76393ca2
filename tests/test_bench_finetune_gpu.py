"""benchmarks/bench_finetune_gpu.py at tiny size on the CPU: the folder `prepare` writes for a GPU call is small and
self-contained (the package without its models, the scripts and data paper_table6.sh's dry run reads), and `run`
times the dry run from it, outside the checkout, as a bare machine would. Its speed numbers mean nothing here; that
the dry run runs from the folder and what the report holds is checked. Two stand-in fine-tunings and an evaluate, each
starting torch in a process of its own (a minute or two), so marked slow."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, SLICES

pytestmark = pytest.mark.slow
SCRIPT = REPO / "benchmarks" / "bench_finetune_gpu.py"


def test_the_prepared_folder_times_the_paper_dry_run_at_tiny_size(tmp_path):
    pytest.importorskip("torch")
    if not (SLICES / "vocab" / "arabertv2-farasa-segmented-vocab.txt").is_file():
        pytest.skip("needs the shared vocabularies' slices")
    folder, report_file = tmp_path / "carried", tmp_path / "out" / "bench.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
    # No wheels: this environment has Farasa's port, camel-tools and emoji installed.
    prepare = [sys.executable, str(SCRIPT), "prepare", str(folder), "--data", str(SLICES), "--no-wheels"]
    done = subprocess.run(prepare, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) <= 40 * 2**20
    assert not (folder / "src" / "arabert_pipeline" / "models").exists()
    assert {p.name for p in (folder / "src" / "scripts").iterdir()} == {
        "paper_table6.sh", "hub_standins.py", "seed_spread.py", "pooled_table.py"}
    assert {p.name for p in (folder / "data" / "qa").iterdir()} == {"xquad.ar.json", "arcd-train.json",
                                                                    "arcd-test.json"}
    assert {p.name for p in (folder / "data" / "vocab").iterdir()} == {"arabertv2-farasa-segmented-vocab.txt",
                                                                       "mbert-cased-vocab.txt"}

    # Outside the checkout, as on the GPU machine: the folder must not lean on the repository.
    run = [sys.executable, str(folder / "bench_finetune_gpu.py"), "run", str(folder), "--out", str(report_file),
           "--size", "tiny", "--max-steps", "22", "--batch", "2", "--micro-batch", "2", "--articles", "2",
           "--resamples", "100"]
    done = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(report_file.read_text(encoding="utf-8"))
    assert report["device"] == "cpu" and report["wheels"] == []
    assert report["dry_run"]["returncode"] == 0 and not report["dry_run"]["stopped_at_deadline"]
    assert list(report["systems"]) == ["arabertv2", "mbert"]
    for system, row in report["systems"].items():
        assert "error" not in row, f"{system}: {row.get('error')}"
        assert row["finished"] and row["steps"] == 22
        # log rows at steps 20 and 22: the steady state is the last two steps, the first 20 excluded
        assert row["warmup_steps_excluded"] == 20 and row["steady_steps"] == 2
        assert row["seconds_per_step"] > 0 and row["tokens_per_second"] > 0
        assert row["windows_per_epoch"] > 0 and row["peak_cuda_gib"] is None and row["peak_rss_gib"] > 0
        assert 0 < row["setup_seconds"] < row["finetune_seconds"] and row["rest_seconds"] >= 0
        projected = report["projection"]["systems"][system]
        assert projected["steps"] == 2 * -(-{"arabertv2": 53_000, "mbert": 57_000}[system] // 2)
        assert 0 < projected["training_hours"] < projected["hours_low"] <= projected["hours"]
    evaluate = report["evaluate"]
    assert evaluate["models"] == ["AraBERTv2-s0", "mBERT-s0"] and evaluate["seconds"] > 0
    assert evaluate["device"] == "cpu" and evaluate["questions"] > 0 and evaluate["resamples"] == 100
    log = report_file.with_suffix(".log").read_text(encoding="utf-8")
    assert "== evaluate on arcd-test" in log
    assert "| arabertv2 |" in done.stdout

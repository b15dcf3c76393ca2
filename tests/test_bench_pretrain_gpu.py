"""benchmarks/bench_pretrain_gpu.py at tiny size on the CPU: the folder `prepare` writes for a GPU call is small,
self-contained (the package without its models) and runs every row of the benchmark, as a bare machine would run it.
Its speed numbers mean nothing here; that every row runs, and what the report holds, is checked. Each row starts
torch in a process of its own (a couple of minutes in all), so marked slow."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from conftest import REPO, SLICES

pytestmark = pytest.mark.slow
SCRIPT = REPO / "benchmarks" / "bench_pretrain_gpu.py"


def test_the_prepared_folder_runs_every_row_at_tiny_size(tmp_path):
    pytest.importorskip("torch")
    folder, report_file = tmp_path / "carried", tmp_path / "out" / "bench.json"
    # Outside the checkout, as on the GPU machine: the folder must not lean on the repository's package.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
    prepare = [sys.executable, str(SCRIPT), "prepare", str(folder), "--corpus",
               str(SLICES / "corpus" / "ant-jawharafm-000.txt.xz"), "--lines", "1500"]
    done = subprocess.run(prepare, cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= 40 * 2**20
    assert not (folder / "src" / "arabert_pipeline" / "models").exists()
    assert {"corpus.txt", "bench_pretrain_gpu.py"} <= {p.name for p in folder.iterdir()}

    run = [sys.executable, str(folder / "bench_pretrain_gpu.py"), "run", str(folder), "--out", str(report_file),
           "--size", "tiny", "--seq", "32", "--tokens-per-step", "512", "--steps", "2", "--warmup-steps", "1",
           "--profile-steps", "1"]
    done = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(report_file.read_text(encoding="utf-8"))
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_pretrain_gpu import ROWS

    assert report["device"] == "cpu" and list(report["rows"]) == list(ROWS)
    for name, row in report["rows"].items():
        assert "error" not in row, f"{name}: {row.get('error')}"
        assert row["tokens_per_second"] > 0 and row["timed_steps"] == 2 and row["flops_per_token"] > 0
        # Three steps of 512-token budgets: what the model read, padding excluded.
        assert 0 < row["tokens"] <= 3 * 512
        assert row["graphs_traced_while_timed"] == 0 and row["retimed"] == 0  # eager at tiny size: nothing traced
        assert row["profile"] and row["profile"][0]["self_cpu_ms_per_step"] > 0, name  # the CPU's busiest first
        if row["kind"] == "package":
            assert math.isfinite(row["loss"]), name
    assert report["rows"]["bert-512"]["seq"] == 128 and report["rows"]["bert-512"]["batch"] == 4
    assert set(report["ratios"]) >= {"bert-128 / hf-trainer-4w", "bert-128-wwm / bert-128",
                                     "bert-128 / bert-128-plain", "deberta-128 / deberta-128-plain",
                                     "deberta-128-sdpa-eager / deberta-128-eager"}
    assert "| bert-128 |" in done.stdout


def test_a_window_with_a_trace_is_timed_again_then_profiled_within_the_planned_steps(monkeypatch, capsys):
    """The Timer without a model: warm-up 3, windows of 4, a graph traced at step 5 (the first window, steps 4-7):
    the window is timed again (8-11), the losses are that window's (a Hugging Face log row for its last step comes
    after the step's callback and still counts), 2 profiled steps follow (12-13), and the run the schedule plans for
    (planned_steps) holds them all."""
    import types

    import torch

    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_pretrain_gpu as bench

    graphs = {"traced": 0}
    monkeypatch.setattr(bench, "traced_graphs", lambda: graphs["traced"])
    timer = bench.Timer(3, 4, torch.device("cpu"), profile_steps=2)
    done_at = None
    for step in range(1, 30):
        if step == 5:
            graphs["traced"] += 1
        if timer.step(step, tokens=100 * step, loss=float(step) if step != 11 else None):
            done_at = step
            break
        if step == 11:
            timer.record_loss(11, 11.0)  # the Trainer's on_log, after on_step_end
    assert done_at == 13 and timer.retimed == 1 and timer.graphs_while_timed == 0
    assert timer.losses == [8.0, 9.0, 10.0, 11.0] and (timer.tokens, timer.end_tokens) == (400, 1100)
    assert timer.profile is not None
    args = types.SimpleNamespace(warmup_steps=3, steps=4, profile_steps=2)
    assert done_at < bench.planned_steps(args)  # the last step with no stop before it
    # The phase lines a row stopped at the deadline is reported by (the last one that starts with "step ").
    phases = [line.split(" at ")[0] for line in capsys.readouterr().err.splitlines()]
    assert phases == ["step 1: done (the first steps carry the compilation)",
                      "step 2: done (the first steps carry the compilation)", "step 3: warm-up done, timing starts",
                      "step 7: timed window done", "step 11: timed window done"]


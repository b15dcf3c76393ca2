"""The training engine's parts that need no corpus and no model: the schedule, the --time-budget planner, the
optimizer groups (training/; the engine's runs are tested through pretrain and finetune)."""
import pytest

from arabert_pipeline.training import BudgetPlanner, TrainerState, lr_factor, warmup_steps


def test_lr_factor_warms_up_then_decays_linearly_to_zero():
    assert [lr_factor(s, 4, 12) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor(4, 4, 12) == 1.0 and lr_factor(8, 4, 12) == 0.5 and lr_factor(12, 4, 12) == 0.0
    assert lr_factor(20, 4, 12) == 0.0
    assert warmup_steps(0.1, 200) == 20 and warmup_steps(30, 200) == 30 and warmup_steps(500, 200) == 200


def test_budget_planner_first_correction_comes_early_and_rescales_the_warmup():
    planner, state = BudgetPlanner(minutes=10, warmup=0.1), TrainerState(total_steps=1000, warmup_steps=100)
    state.step, state.elapsed = 20, 17.0
    assert not planner.due(state)  # before min(60 s, 3% of the budget) = 18 s
    state.elapsed = 60.0  # 3 s per step while the machine was busy
    assert planner.due(state)
    planner.replan(state, planner.remaining_total(state, planner.seconds_per_step(state)))
    assert state.total_steps == 20 + 180 and state.warmup_steps == 20 and state.budget_replanned
    assert not planner.due(state)


def test_budget_planner_corrects_every_tenth_with_a_continuous_learning_rate():
    planner = BudgetPlanner(minutes=10, warmup=0.1)
    state = TrainerState(step=20, elapsed=60.0, total_steps=1000, warmup_steps=100)
    planner.replan(state, planner.remaining_total(state, planner.seconds_per_step(state)))
    state.step, state.elapsed = 80, 120.0  # then 1 s per step: the 480 s left are 480 steps, not 160
    assert planner.due(state) and planner.seconds_per_step(state) == 1.0
    before = lr_factor(80, state.warmup_steps, state.total_steps)
    planner.replan(state, planner.remaining_total(state, planner.seconds_per_step(state)))
    assert state.total_steps == 80 + 480 and state.warmup_steps == 20
    after = [lr_factor(step, state.warmup_steps, state.total_steps, state.decay_step, state.decay_factor)
             for step in (80, 81, 559, 560)]
    assert after[0] == pytest.approx(before) and after[0] > after[1] > after[2] > 0 and after[3] == 0
    state.step, state.elapsed = 100, 150.0  # less than a tenth of the budget since the last correction
    assert not planner.due(state)
    state.step, state.elapsed = 500, 560.0  # in the last tenth: no more corrections
    assert not planner.due(state)
    assert not planner.exhausted(state)
    state.elapsed = 600.0
    assert planner.exhausted(state)


def test_budget_planner_never_plans_fewer_steps_than_done():
    planner = BudgetPlanner(minutes=1, warmup=0.06)
    state = TrainerState(step=50, elapsed=70.0, total_steps=60, warmup_steps=4, budget_replanned=True)
    assert planner.remaining_total(state, seconds_per_step=2.0) == 51
    assert planner.first_total(seconds_per_step=100.0) == 1


def test_the_bf16_measurement_is_the_best_fp32_time_over_the_best_bf16_time(monkeypatch):
    """cpu_bf16_speedup on a pretend CPU whose clock only the matrix products move: fp32 takes 20 ms, bf16 8 ms, each
    dtype's first product (kernels picked, threads started) 1 s more, and bursts of load slow the first and the last
    timed bf16 products (by 50 and 30 ms) and the last timed fp32 one (by 40 ms), so that neither the first nor the
    last timing of either dtype is its best. The speed-up must be 2.5: best times, warm-up left out, fp32 over bf16."""
    import types

    import torch

    from arabert_pipeline.training import optim

    clock, calls = [0.0], []
    cost = {torch.float32: 0.020, torch.bfloat16: 0.008}
    # (dtype, its n-th product) → extra seconds; the 1st is the warm-up, the 2nd to 4th the 3 timed ones.
    bursts = {(torch.bfloat16, 2): 0.05, (torch.bfloat16, 4): 0.03, (torch.float32, 4): 0.04}

    def mm(a, b):
        calls.append(a.dtype)
        first = calls.count(a.dtype) == 1
        burst = bursts.get((a.dtype, calls.count(a.dtype)), 0.0)
        clock[0] += cost[a.dtype] + (1.0 if first else 0.0) + burst
        return a

    native = [True]
    fake_torch = types.SimpleNamespace(
        ops=types.SimpleNamespace(mkldnn=types.SimpleNamespace(_is_mkldnn_bf16_supported=lambda: native[0])),
        randn=torch.randn, mm=mm, float32=torch.float32, bfloat16=torch.bfloat16)
    monkeypatch.setattr(optim, "torch", fake_torch)
    monkeypatch.setattr(optim, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    optim.cpu_bf16_speedup.cache_clear()
    try:
        assert optim.cpu_bf16_speedup(size=4, repeats=3) == pytest.approx(2.5)
        assert calls.count(torch.float32) == calls.count(torch.bfloat16) == 4  # a warm-up product, then 3 timed
        native[0], calls[:] = False, []
        assert optim.cpu_bf16_speedup(size=4, repeats=2) == 0.0 and not calls  # no bf16 kernels: none timed
    finally:
        optim.cpu_bf16_speedup.cache_clear()


def test_bf16_auto_is_decided_by_measuring_this_cpu(monkeypatch):
    import torch

    from arabert_pipeline.training import optim

    cpu = torch.device("cpu")
    assert optim.use_bf16("on", cpu) and not optim.use_bf16("off", cpu)
    measured = optim.cpu_bf16_speedup()
    native = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert (0 < measured < 100) if native else measured == 0.0
    assert optim.use_bf16("auto", cpu) == (measured >= optim.BF16_MIN_SPEEDUP)
    for speedup, expected in ((0.1, False), (1.0, False), (2.7, True)):  # AVX2-only, no gain, AVX512-BF16
        monkeypatch.setattr(optim, "cpu_bf16_speedup", lambda speedup=speedup: speedup)
        assert optim.use_bf16("auto", cpu) is expected


def test_the_optimizer_is_fused_where_a_gpu_trains_and_updates_as_the_unfused_one(monkeypatch):
    """Fused AdamW is a GPU run's choice; torch's fused kernel also runs on the CPU, so both ways are checked here:
    the same weights after a few steps (within float rounding) as the per-tensor AdamW."""
    torch = pytest.importorskip("torch")
    from arabert_pipeline.training import make_optimizer, parameter_groups

    def trained(cuda: bool):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 2))
        optimizer = make_optimizer(parameter_groups(model, 0.01), 1e-2)
        for step in range(5):
            torch.manual_seed(step)
            model(torch.randn(4, 8)).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        return optimizer, [p.detach().clone() for p in model.parameters()]

    fused, fused_weights = trained(cuda=True)
    plain, plain_weights = trained(cuda=False)
    assert fused.defaults["fused"] is True and not plain.defaults.get("fused")
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(fused_weights, plain_weights, strict=True))


def test_mfu_divides_by_the_peak_named_by_the_devices_whole_name(monkeypatch):
    """CUDA names cards like "NVIDIA H100 80GB HBM3": a peak is found by whole words, so "L4" is not an L40's and
    "H200" not a GH200's; an unknown card has no MFU unless the environment names its peak."""
    from arabert_pipeline.training.logs import peak_flops

    monkeypatch.delenv("ARABERT_PIPELINE_PEAK_TFLOPS", raising=False)
    expected = {"NVIDIA H100 80GB HBM3": 989, "NVIDIA H100 PCIe": 756, "NVIDIA H100 NVL": 835, "NVIDIA H200": 989,
                "NVIDIA GH200 480GB": 989, "NVIDIA A100-SXM4-80GB": 312, "NVIDIA L4": 121, "NVIDIA L40": 181,
                "NVIDIA L40S": 362, "Tesla T4": None}
    for name, tflops in expected.items():
        assert peak_flops(name) == (tflops * 1e12 if tflops else None), name
    monkeypatch.setenv("ARABERT_PIPELINE_PEAK_TFLOPS", "100")
    assert peak_flops("Tesla T4") == 100e12


def test_loader_workers_auto_share_this_process_cpu_set_among_the_nodes_training_processes(monkeypatch):
    torch = pytest.importorskip("torch")
    import os

    from arabert_pipeline.training.loader import loader_workers

    gpu, cpu = torch.device("cuda"), torch.device("cpu")
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(16)), raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert loader_workers(None, gpu) == 4 and loader_workers(None, cpu) == 0 and loader_workers(2, cpu) == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")  # 8 ranks on 16 cores: one worker each, not four
    assert loader_workers(None, gpu) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert loader_workers(None, gpu) == 1

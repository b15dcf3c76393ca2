"""--time-budget: turning minutes of wall-clock time into optimizer steps, corrected from the measured speed
(`BudgetPlanner`), and `BudgetSteps`, the part of `Engine` (engine.py) that measures the speed and refits the plan."""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import numpy as np
import torch

from .optim import lr_factor, warmup_steps
from .state import TrainerState

if TYPE_CHECKING:
    from accelerate import Accelerator

    from .state import LoopSettings

log = logging.getLogger("arabert_pipeline.training")
REPLAN_CHECK_EVERY = 10  # steps between --time-budget checks


class BudgetPlanner:
    """--time-budget: how many optimizer steps fit in the budget, corrected while training from the measured speed.

    The first estimate (from timing a few forward/backward passes before training) misses batch collation, the
    optimizer and whatever else shares the machine (it measured 1.8× too optimistic with two runs on two cores), and
    the load changes: a run planned while another job was running used 60 of its 95 minutes before the corrections
    were periodic. So the plan is corrected early in the warm-up, then after every further tenth of the budget (but
    not in the last tenth), from the speed since the last correction, keeping the learning rate continuous.
    """

    def __init__(self, minutes: float, warmup: float):
        self.budget, self.warmup = minutes * 60, warmup

    def first_total(self, seconds_per_step: float) -> int:
        return max(1, int(self.budget / seconds_per_step))

    def due(self, state: TrainerState) -> bool:
        if not state.budget_replanned:
            return state.elapsed >= min(60.0, 0.03 * self.budget)
        return state.replanned_elapsed + 0.1 * self.budget <= state.elapsed <= 0.9 * self.budget

    def seconds_per_step(self, state: TrainerState) -> float:
        if not state.budget_replanned:
            return state.elapsed / max(1, state.step)
        return (state.elapsed - state.replanned_elapsed) / max(1, state.step - state.replanned_step)

    def replan(self, state: TrainerState, total: int) -> None:
        """Move the schedule's end to `total` (computed by `remaining_steps`, agreed by every process)."""
        if state.step < state.warmup_steps or not state.budget_replanned:  # still warming up: rescale it too
            state.warmup_steps = warmup_steps(self.warmup, total)
        else:
            state.decay_factor = lr_factor(state.step, state.warmup_steps, state.total_steps, state.decay_step,
                                           state.decay_factor)
            state.decay_step = state.step
        state.total_steps = total
        state.budget_replanned = True
        state.replanned_step, state.replanned_elapsed = state.step, state.elapsed

    def remaining_total(self, state: TrainerState, seconds_per_step: float) -> int:
        return max(state.step + 1, state.step + int((self.budget - state.elapsed) / seconds_per_step))

    def exhausted(self, state: TrainerState) -> bool:
        return state.elapsed >= self.budget


class BudgetSteps:
    """--time-budget's measurements and refits, for `Engine`, which supplies `budget`, `loop`, `state`, `model`,
    `optimizer`, `accelerator`, `epoch_plan`, `make_batch`, `forward` and `autocast`."""

    if TYPE_CHECKING:  # what Engine supplies
        budget: BudgetPlanner | None
        budget_changed: bool
        loop: LoopSettings
        state: TrainerState
        model: torch.nn.Module
        optimizer: torch.optim.Optimizer
        accelerator: Accelerator
        is_main: bool
        world: int

        def epoch_plan(self, epoch: int) -> list[np.ndarray]: ...
        def make_batch(self, rows: np.ndarray, epoch: int, index: int) -> dict[str, torch.Tensor]: ...
        def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]: ...
        def autocast(self) -> torch.autocast: ...

    def steps_within_budget(self) -> int:
        """Time a few forward/backward passes (then undo their effects) to turn --time-budget into steps."""
        from accelerate.utils import broadcast_object_list

        rng_state = torch.get_rng_state()
        timings = []
        with self.accelerator.no_sync(self.model):
            for index, rows in enumerate(self.epoch_plan(0)[:3]):
                batch = self.make_batch(rows, 0, index)
                began = time.perf_counter()
                with self.autocast():
                    loss = self.forward(batch)["loss"]
                self.accelerator.backward(loss)
                timings.append(time.perf_counter() - began)
        self.optimizer.zero_grad(set_to_none=True)
        torch.set_rng_state(rng_state)
        micro = float(np.median(timings[1:] if len(timings) > 1 else timings))
        self.eval_seconds_per_step = self.evaluation_seconds(micro)
        assert self.budget is not None  # these steps run under --time-budget only
        estimate = [self.budget.first_total(micro * self.loop.grad_accum * 1.05 + self.eval_seconds_per_step)]
        broadcast_object_list(estimate)
        return estimate[0]

    def evaluation_seconds(self, micro_batch_seconds: float) -> float:
        """Evaluation time per optimizer step, estimated from a micro-batch's forward + backward time."""
        return 0.0

    def step_cap(self) -> int | None:
        """The most optimizer steps a --time-budget refit may plan (fine-tuning: its epochs and --max-steps); None:
        as many as the budget holds."""
        return None

    def replan_due(self) -> bool:
        from accelerate.utils import broadcast_object_list

        if self.state.step % REPLAN_CHECK_EVERY:  # the same on every process: no per-step broadcast (a GPU sync)
            return False
        assert self.budget is not None
        due = [self.budget_changed or self.budget.due(self.state)]
        if self.world > 1:  # clocks differ slightly: the main process decides, or one would wait in the broadcast
            broadcast_object_list(due)
        return due[0]

    def replan_for_budget(self) -> None:
        from accelerate.utils import broadcast_object_list

        assert self.budget is not None
        per_step = self.budget.seconds_per_step(self.state) + getattr(self, "eval_seconds_per_step", 0.0)
        total = [self.budget.remaining_total(self.state, per_step)]
        cap = self.step_cap()
        if cap is not None:
            total[0] = min(total[0], cap)
        broadcast_object_list(total)
        self.budget.replan(self.state, total[0])
        self.budget_changed = False
        if self.is_main:
            log.info(f"time budget: {self.state.total_steps} steps at the measured {per_step:.2f} s per step")


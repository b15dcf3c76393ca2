"""--time-budget: turning minutes of wall-clock time into optimizer steps, corrected from the measured speed."""
from __future__ import annotations

from .optim import lr_factor, warmup_steps
from .state import TrainerState

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

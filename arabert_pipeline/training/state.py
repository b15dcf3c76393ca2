"""What a run is told (LoopSettings, from a stage's config) and where it is (TrainerState, saved in checkpoints)."""
from __future__ import annotations

import math
from dataclasses import dataclass

SCHEDULES = ("linear", "constant")


@dataclass
class LoopSettings:
    """What the engine reads of a stage's config (PretrainConfig.loop_settings(), FinetuneConfig.loop_settings())."""

    output: str
    lr: float
    warmup: float  # < 1: a fraction of the total steps; ≥ 1: a number of steps
    seed: int
    weight_decay: float = 0.01
    layer_lr_decay: float = 1.0  # lr × decay^(layers above); 1: one learning rate
    bf16: str = "auto"  # auto | on | off
    grad_accum: int = 1
    max_grad_norm: float = 1.0  # 0: no clipping
    time_budget: float | None = None  # minutes
    log_every: int = 10
    eval_every: int = 0  # 0: the stage evaluates at its own points (fine-tuning: epoch ends)
    save_every: int = 0  # 0: the stage saves at its own points
    keep_checkpoints: int = 1
    resume: str | None = None  # "latest" or a checkpoint directory
    overwrite: bool = False
    progress: bool = True
    # "linear": BERT's warm-up then linear decay to 0 (optim.lr_factor); "constant": `lr` throughout (the static
    # reader's Adamax, as DrQA trains it).
    schedule: str = "linear"
    # Worker processes that build the batches ahead of the steps (loader.py); None: 4 on a GPU, none on a CPU.
    loader_workers: int | None = None
    # torch.compile the model for the training steps, once, with dynamic shapes: batches come in a few padded shapes
    # (pretrain/data.py). With --time-budget the first plan counts the compilation as step time, and the replanning
    # that follows corrects it. None: on a GPU, not on a CPU (Engine.compile_choice).
    compile: bool | None = False

    def __post_init__(self) -> None:
        """Checked for every stage at once, before any model or data is loaded: torch would refuse a negative or NaN
        learning rate and an out-of-range seed only with a traceback, after the setup; an infinite one, or a negative
        save interval (a checkpoint every step), it would take silently."""
        from ..errors import ConfigError

        def finite(value) -> bool:
            return isinstance(value, (int, float)) and math.isfinite(value)

        for name in ("lr", "warmup", "weight_decay", "max_grad_norm"):  # lr 0: weights kept (a dev-only baseline)
            if not (finite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ConfigError(f"{name} must be a finite number ≥ 0, got {getattr(self, name)}")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if not 0 <= self.seed < 2**32:
            raise ConfigError(f"seed must be between 0 and {2**32 - 1}, got {self.seed}")
        if self.time_budget is not None and not (finite(self.time_budget) and self.time_budget > 0):
            raise ConfigError(f"time_budget must be a finite number of minutes > 0, got {self.time_budget}")
        workers: object = self.loader_workers  # checked as given: a caller of the Python API may pass anything
        if workers is not None and not (isinstance(workers, int) and 0 <= workers <= 64):
            raise ConfigError(f"loader_workers must be between 0 and 64 (or None: automatic), got "
                              f"{self.loader_workers}")
        for name in ("save_every", "eval_every"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be ≥ 0 (0: at the stage's own points), got {getattr(self, name)}")


@dataclass
class TrainerState:
    """Where the run is; saved in every checkpoint's trainer_state.json."""

    step: int = 0
    epoch: int = 0
    cursor: int = 0  # index of the next micro-batch in the epoch's plan
    tokens: int = 0  # tokens read by all processes, special tokens included, padding excluded
    elapsed: float = 0.0  # seconds of training over all sessions
    total_steps: int = 0
    warmup_steps: int = 0
    budget_replanned: bool = False  # --time-budget: the plan was corrected from the speed of the first real steps
    # --time-budget, later corrections: the decay restarts from (decay_step, decay_factor) towards the new total, so
    # the learning rate stays continuous; replanned_step/replanned_elapsed mark the last correction.
    decay_step: int = 0
    decay_factor: float = 1.0
    replanned_step: int = 0
    replanned_elapsed: float = 0.0

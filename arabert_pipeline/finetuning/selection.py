"""The engine hook every fine-tuning task shares: `FinetuneEngine`, an `Engine` whose epochs end in a dev score.

At each epoch's end: the epoch's mean training loss; with dev sets, the task's dev score (on the main process, model
in eval mode), the weights of the best epoch so far kept in OUT/checkpoints/best.safetensors, a log row, and early
stopping after `patience` epochs without a better score; a checkpoint. After the last step the best epoch's weights
come back (`keep_best_epoch`). Losses, the running loss of the current epoch and the dev scores travel in checkpoints,
so a resumed run chooses as an uninterrupted one would.

A task subclasses it (qa/transformer/finetune.py QATrainer, qa/static/train.py ReaderTrainer; classification and NER
next, issue 40), sets `epochs`, `patience`, `dev_metric` and `say_to`, plans its schedule with `plan_schedule`, and
supplies `has_dev` and `dev_score` besides what `Engine` asks for.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts.writes import follow_umask
from ..errors import ConfigError, InputError
from ..training import CHECKPOINTS, Engine, warmup_steps

BEST_WEIGHTS = "best.safetensors"  # in CHECKPOINTS: the weights of the best epoch on the dev sets so far


class FinetuneEngine(Engine):
    """An `Engine` that scores dev at each epoch's end, keeps the best epoch and stops early."""

    epochs: int
    patience: int = 0  # with dev sets: stop after this many epochs without a better score (0: run every epoch)
    max_steps: int | None = None  # --max-steps: the run ends there even inside an epoch
    say_to: Callable[[str], None]
    losses: list[float]  # each finished epoch's mean training loss
    running: list[float]  # the current epoch's step losses
    dev_history: list[float]  # each scored epoch's dev score
    unit = "training examples"  # what a row of the epoch plan is, for messages

    # ------------------------------------------------------------------------------------------- what a task supplies

    @property
    def dev_metric(self) -> str:
        """The name the dev scores are logged and reported under (a class attribute or a property)."""
        raise NotImplementedError

    def has_dev(self) -> bool:
        raise NotImplementedError

    def dev_score(self) -> float:
        """The dev score of the model as it is now (called on the main process, in eval mode); higher is better."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------- the shared parts

    def say(self, message: str) -> None:
        if self.is_main:
            self.say_to(message)

    def plan_schedule(self, checkpoint: Path | None, warmup: float, rows: int, batch_size: int) -> None:
        """A fresh run's length (every epoch, capped by step_cap and a --time-budget) and warm-up; a resumed run keeps
        its checkpoint's. `rows`, `batch_size`: the epoch plan's rows and batch size, for the too-small message."""
        if checkpoint is not None:
            self.say(f"resumed from {checkpoint} at step {self.state.step}/{self.state.total_steps}")
            return
        self.losses, self.running, self.dev_history = [], [], []
        total = self.steps_per_epoch() * self.epochs
        if total < 1:
            raise ConfigError(f"{rows} {self.unit} do not fill one step of {batch_size} × {self.loop.grad_accum} "
                              f"(--grad-accum) on each of {self.world} processes: use a smaller --batch-size")
        total = min(total, self.step_cap())
        if self.budget is not None:
            total = min(total, self.steps_within_budget())
            self.say(f"time budget: {total} steps planned from the measured speed")
        self.state.total_steps, self.state.warmup_steps = total, warmup_steps(warmup, total)

    def step_cap(self) -> int:
        """The epochs and --max-steps: a --time-budget refit never plans beyond them."""
        total = self.steps_per_epoch() * self.epochs
        return total if self.max_steps is None else min(total, self.max_steps)

    def after_step(self, board) -> bool:
        """At each epoch's end: its mean loss, the dev score, the best weights so far, early stopping, a checkpoint."""
        state = self.state
        self.running.append(float(self.last_metrics["loss"]))
        if not self.epoch_ends_here():
            return False
        self.losses.append(float(np.mean(self.running)))
        self.running = []
        message = f"epoch {state.epoch + 1}/{self.epochs}: mean loss {self.losses[-1]:.4f}"
        stop = False
        if self.has_dev():
            if self.is_main:
                model = self.unwrapped()
                model.eval()
                self.dev_history.append(self.dev_score())
                model.train()
                if int(np.argmax(self.dev_history)) == len(self.dev_history) - 1:
                    save_best_weights(self.output, model)
                self.log({"step": state.step, "epoch": state.epoch + 1,
                          f"dev_{self.dev_metric}": self.dev_history[-1]}, board)
            self.dev_history = self.broadcast(self.dev_history)
            best = int(np.argmax(self.dev_history))
            message += f"; dev {self.dev_metric} {self.dev_history[-1]:.2f} (best: epoch {best + 1})"
            stop = bool(self.patience) and len(self.dev_history) - 1 - best >= self.patience
        self.say(message)
        if stop:
            self.say(f"early stop: no better dev {self.dev_metric} for {self.patience} epoch(s)")
        elif state.step < state.total_steps and state.step != self.last_saved_step:
            self.save_checkpoint()
        return stop

    def keeps_final_checkpoint(self) -> bool:
        return False  # the finished model replaces the checkpoints

    def keep_best_epoch(self) -> dict[str, int]:
        """After training, on the main process: the best dev epoch's weights back in the model; {"epoch": its number}
        (empty without dev sets). Says when the run ended before its planned epochs."""
        planned = self.steps_per_epoch() * self.epochs
        if self.state.step < planned:
            self.say(f"ended after {self.state.step} of the {planned} steps of {self.epochs} epoch(s) "
                     "(--max-steps / --time-budget)")
        if not self.dev_history:
            return {}
        best = int(np.argmax(self.dev_history))
        # Steps past the last scored epoch (a --max-steps or --time-budget end inside an epoch: `running` holds their
        # losses) changed the weights after their score: the kept epoch's weights must come back even when it is the
        # last one scored.
        if best != len(self.dev_history) - 1 or self.running:
            self.unwrapped().load_state_dict(load_best_weights(self.output), strict=True)
        self.say(f"kept epoch {best + 1} (dev {self.dev_metric} {self.dev_history[best]:.2f})")
        return {"epoch": best + 1}

    def extra_state(self) -> dict[str, Any]:
        return {"losses": self.losses, "running": self.running, "dev": self.dev_history}

    def restore_extra_state(self, extra: dict[str, Any]) -> None:
        fields = ("losses", "running", "dev")
        for name in sorted(extra):
            if name not in fields:
                raise InputError("unknown field", path=self.resumed_state_file, field=f"extra.{name}")
        for name in fields:
            if name not in extra:
                raise InputError("missing", path=self.resumed_state_file, field=f"extra.{name}")
            values = extra[name]
            if not (isinstance(values, list)
                    and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)):
                raise InputError("expected a list of numbers", path=self.resumed_state_file, field=f"extra.{name}")
        self.losses, self.running, self.dev_history = extra["losses"], extra["running"], extra["dev"]


def save_best_weights(output: Path, model) -> None:
    from safetensors.torch import save_file

    (output / CHECKPOINTS).mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    tmp = output / CHECKPOINTS / f".{BEST_WEIGHTS}.tmp"
    save_file(tensors, str(tmp))
    follow_umask(tmp)
    os.replace(tmp, output / CHECKPOINTS / BEST_WEIGHTS)


def load_best_weights(output: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(output / CHECKPOINTS / BEST_WEIGHTS))

"""The engine's loop: `Engine`, which a stage subclasses (pretrain.Trainer, and the fine-tuning tasks through
finetuning.FinetuneEngine). Its parts are the sibling modules: output.py (OUT claimed, locked, the final model moved
in), checkpoints.py (checkpoints found, checked, restored, saved), logs.py (log.jsonl, TensorBoard), budget.py
(--time-budget), schedule.py (each step's micro-batches, and the loader that makes them ahead), optim.py (learning
rate schedule, optimizer, bf16) and state.py (settings and progress)."""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..errors import InputError
from ..outputs import OutputKind
from .budget import BudgetPlanner, BudgetSteps
from .checkpoints import CHECKPOINTS, Checkpointing, quiet_transformers
from .loader import BatchMaker, Prefetcher
from .logs import RunLog, model_flops_utilization, peak_memory
from .optim import lr_factor, use_bf16
from .output import OutputRules
from .schedule import BatchSchedule
from .state import LoopSettings, TrainerState

if TYPE_CHECKING:
    from typing_extensions import Self  # typing's from Python 3.11

log = logging.getLogger("arabert_pipeline.training")
__all__ = ["Engine", "peak_memory", "quiet_transformers"]


class Engine(Checkpointing, OutputRules, RunLog, BudgetSteps, BatchSchedule):
    """A training run: `Subclass(config)` checks every input and sets up (before anything is trained), `train()`
    runs to the planned end.

    A subclass sets, in `setup()`: `self.model` and `self.optimizer` (through `self.prepare`), `self.data_key` (a
    hash of what it trains on: a checkpoint of other data is refused), and the plan's length (`self.state.total_steps`
    and `warmup_steps`, unless resumed); and it implements `epoch_plan`, `make_batch`, `count_tokens`, `forward`,
    `config_record`, `config_differences` and `export`. Hooks it may override: `evaluate`, `after_step`, `finish`,
    `export_checkpoint`, `extra_state` / `restore_extra_state`.
    """

    description = "training"

    @property
    def output_kind(self) -> OutputKind:
        """What OUT holds and how it is claimed; a subclass sets it (a class attribute or a property)."""
        raise NotImplementedError

    def __init__(self, loop: LoopSettings, on_step: Callable[[Self], None] | None = None):
        from accelerate import Accelerator, PartialState

        self.loop = loop
        self.on_step: Callable[[Any], None] | None = on_step  # called with this engine: Self, as __init__ says
        self.output = Path(loop.output)
        # Under torchrun without GPUs, accelerate only goes multi-process (gloo) when told the run is on CPU.
        cpu = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available()
        self.bf16 = use_bf16(loop.bf16, PartialState(cpu=cpu).device)
        # bf16 needs no loss scaling, so autocast is all that accelerate's mixed_precision="bf16" would add; doing it
        # here keeps accelerate's process-wide state the same for every run (it cannot change within a process).
        self.accelerator = Accelerator(cpu=cpu)
        self.compiled = self.compile_choice(self.accelerator.device)  # before OUT is claimed: it may refuse
        self.is_main = self.accelerator.is_main_process
        self.world = self.accelerator.num_processes
        self.batches_per_step = self.world * loop.grad_accum
        self.budget = BudgetPlanner(loop.time_budget, loop.warmup) if loop.time_budget is not None else None
        self.state = TrainerState()
        self.budget_changed = False
        self.stop_signal: int | None = None
        self.last_eval: dict[str, float] = {}  # on the main process only
        self.last_eval_step = -1
        self.last_metrics: dict[str, torch.Tensor] = {}  # the last step's, on this process (tensors: no device sync)
        # Sums of the step metrics since the last log row, and how many steps they hold.
        self.window: dict[str, torch.Tensor] = {}
        self.window_steps = 0
        self.last_saved_step = -1
        self.resumed_state_file: Path | None = None  # the trainer_state.json resumed from, for restore_extra_state
        self._checkpoint_tensors: tuple[Path, Any] | None = None  # state.pt, read by find_checkpoint for restore
        self._plans: dict[int, list[np.ndarray]] = {}  # the current epoch's plan and, near its end, the next one's
        self.prefetcher: Prefetcher | None = None  # while training with --loader-workers
        self.module: torch.nn.Module | None = None  # the model as prepare() received it (see unwrapped())
        self.output_lock = self.claim_output()
        try:
            self.setup()
        except BaseException:
            self.release_output()
            raise

    # ------------------------------------------------------------------------------------------- what a stage supplies

    def inputs(self) -> list[str]:
        """Paths this run reads: OUT may not be, nor contain, any of them."""
        return []

    def compile_choice(self, device: torch.device) -> bool:
        """Whether the training steps run under torch.compile: as the stage's config says, or (None) on a GPU and not
        on a CPU, where inductor's C++ compilation costs a short run (and each test's) more than it saves."""
        return self.loop.compile if self.loop.compile is not None else device.type == "cuda"

    def setup(self) -> None:
        raise NotImplementedError

    def epoch_plan(self, epoch: int) -> list[np.ndarray]:
        """The micro-batches of one epoch (rows of the training data), in order; a function of (seed, epoch)."""
        raise NotImplementedError

    def make_batch(self, rows: np.ndarray, epoch: int, index: int) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def count_tokens(self, rows: np.ndarray) -> int:
        raise NotImplementedError

    def batch_maker(self) -> BatchMaker | None:
        """A picklable (rows, epoch, index) → CPU tensors equal to what make_batch puts on the device, which
        --loader-workers runs in worker processes; None: batches are made in this process."""
        return None

    def flops_per_token(self) -> float | None:
        """The model's training FLOPs per token read (forward and backward), for the MFU in the log; None: unknown."""
        return None

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The loss ("loss") and any other per-step metrics to log, as tensors."""
        raise NotImplementedError

    def config_record(self) -> dict[str, Any]:
        """The stage config as stored in checkpoints."""
        raise NotImplementedError

    def config_differences(self, stored: dict[str, Any]) -> list[str]:
        """Names of the settings that differ from a checkpoint's and would change the training trajectory."""
        raise NotImplementedError

    def export(self, directory: Path) -> None:
        """The final model directory (a Hugging Face one, with the tokenizer and arabert_pipeline.json)."""
        raise NotImplementedError

    def export_checkpoint(self, directory: Path) -> None:
        self.export(directory)

    def evaluate(self) -> dict[str, float]:
        return {}

    def health_warning(self, metrics: dict[str, float]) -> str | None:
        return None

    def after_step(self, board) -> bool:
        """Called after every optimizer step; True ends training here (early stopping)."""
        return False

    def finish(self, board) -> None:
        """After the last step, before the final export."""

    def extra_state(self) -> dict[str, Any]:
        """JSON-able stage progress to keep in checkpoints (restored by restore_extra_state)."""
        return {}

    def restore_extra_state(self, extra: dict[str, Any]) -> None:
        """Check and take back what extra_state saved; errors name `self.resumed_state_file` and the field."""
        if extra:
            raise InputError("unknown field", path=self.resumed_state_file, field=f"extra.{sorted(extra)[0]}")

    # ------------------------------------------------------------------------------------------- setup helpers

    def prepare(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, checkpoint: Path | None) -> None:
        """Restore from `checkpoint` (or seed each process's dropout), then hand both to accelerate."""
        if checkpoint is not None:
            self.restore(checkpoint, model, optimizer)
        elif self.world > 1:
            torch.manual_seed(self.loop.seed + self.accelerator.process_index)  # distinct dropout masks per process
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.module = self.accelerator.unwrap_model(self.model)
        if self.compiled:
            # Training steps only: checkpoints, evaluation and the export read the module itself (unwrapped()), so
            # their keys and results are those of a run without --compile. Batches come in a few padded shapes:
            # dynamic from the first trace, so that they share one graph. With the default (static first, dynamic
            # after the first new shape) a run compiles twice or more, and a base-size DeBERTa took minutes of its
            # first steps on an H200 doing it (docs/performance.md).
            self.model = torch.compile(self.model, dynamic=True)  # type: ignore[assignment]  # a Module, typed callable

    # ------------------------------------------------------------------------------------------- the loop

    def request_stop(self) -> None:
        """Finish the current step, save a checkpoint and return from train() (what Ctrl-C does)."""
        self.stop_signal = self.stop_signal or signal.SIGINT

    def autocast(self) -> torch.autocast:
        return torch.autocast(self.accelerator.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {key: value.to(self.accelerator.device, non_blocking=True) for key, value in batch.items()}

    def train_step(self) -> dict[str, torch.Tensor]:
        loop, accelerator = self.loop, self.accelerator
        micro_batches, tokens = self.next_step_batches()
        totals: dict[str, torch.Tensor] = {}
        for position, micro_batch in enumerate(micro_batches):
            batch = self.next_batch(micro_batch)
            last = position == len(micro_batches) - 1
            with contextlib.nullcontext() if last else accelerator.no_sync(self.model):
                with self.autocast():
                    out = self.forward(batch)
                accelerator.backward(out["loss"] / loop.grad_accum)
            for key, value in out.items():
                if key != "weight":
                    totals[key] = totals.get(key, 0) + value.detach().float() / loop.grad_accum
        if loop.max_grad_norm > 0:
            totals["grad_norm"] = accelerator.clip_grad_norm_(self.model.parameters(), loop.max_grad_norm)
        state = self.state
        lr = loop.lr if loop.schedule == "constant" else loop.lr * lr_factor(
            state.step, state.warmup_steps, state.total_steps, state.decay_step, state.decay_factor)
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.step += 1
        self.state.tokens += tokens
        totals["lr"] = torch.tensor(lr)
        return totals

    def train(self) -> bool:
        """Run to the planned end; True if it completed, False if it was interrupted (a checkpoint is saved)."""
        try:
            with self.tracing_settings():
                return self.run()
        finally:
            self.release_output()

    def tracing_settings(self):
        """For the run of a compiled model (traced at its first steps): sizes that happen to be equal (64 predicted
        positions in a batch 64 wide) do not share one symbol, which would retrace the next batch where they differ
        (the remedy torch's own retrace log names)."""
        from torch.fx.experimental import _config as shape_config

        if not self.compiled or not hasattr(shape_config, "use_duck_shape"):  # a torch without the setting
            return contextlib.nullcontext()
        return shape_config.patch(use_duck_shape=False)  # type: ignore[attr-defined]  # installed at import

    def run(self) -> bool:
        from tqdm.auto import tqdm

        loop, state = self.loop, self.state
        self.output.mkdir(parents=True, exist_ok=True)
        if self.is_main:
            self.truncate_log(state.step)
        board = self.open_tensorboard()
        handlers = self.install_signal_handlers()
        bar = tqdm(total=state.total_steps, initial=state.step, unit="step", dynamic_ncols=True,
                   disable=not (loop.progress and self.is_main), desc=self.description)
        session_start = time.perf_counter()
        elapsed_before = state.elapsed
        window_tokens, window_start = 0, time.perf_counter()
        flops_per_token = self.flops_per_token()
        try:
            self.start_loader()
            while state.step < state.total_steps and not self.should_stop():
                tokens_before = state.tokens
                metrics = self.train_step()
                state.elapsed = elapsed_before + time.perf_counter() - session_start
                if self.budget is not None and self.replan_due():
                    self.replan_for_budget()
                    bar.total = state.total_steps
                self.last_metrics = metrics
                for key, value in metrics.items():
                    self.window[key] = self.window.get(key, 0.0) + value
                self.window_steps += 1
                window_tokens += state.tokens - tokens_before
                bar.update(1)
                if state.step % loop.log_every == 0 or state.step == state.total_steps:
                    now = time.perf_counter()
                    row = {"step": state.step, "tokens": state.tokens, "elapsed": round(state.elapsed, 2),
                           "tokens_per_second": round(window_tokens / (now - window_start), 1)}
                    row.update({key: self.mean_over_processes(value / self.window_steps)
                                for key, value in self.window.items()})
                    row.update(peak_memory(self.accelerator.device))
                    # tokens_per_second counts every process's tokens; MFU is one device's share of its peak.
                    row.update(model_flops_utilization(row["tokens_per_second"] / self.world, flops_per_token,
                                                       self.accelerator.device))
                    self.log(row, board)
                    bar.set_postfix(loss=f"{row['loss']:.3f}", tok_s=f"{row['tokens_per_second']:.0f}")
                    self.window, self.window_steps = {}, 0
                    window_tokens, window_start = 0, now
                if loop.eval_every and state.step % loop.eval_every == 0:
                    self.evaluate_and_log(board)
                stop_early = self.after_step(board)
                if loop.save_every and state.step % loop.save_every == 0 and state.step != self.last_saved_step:
                    self.save_checkpoint()
                if self.on_step is not None:
                    self.on_step(self)
                if stop_early:
                    break
                if self.budget is not None and self.budget.exhausted(state):
                    break
        finally:
            self.stop_loader()
            bar.close()
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
        interrupted = self.stop_signal is not None and state.step < state.total_steps
        if interrupted:
            if state.step != self.last_saved_step:
                self.save_checkpoint()
            if self.is_main:
                log.info(f"stopped at step {state.step}/{state.total_steps}; checkpoint saved in "
                         f"{self.output / CHECKPOINTS}. Continue with the same command plus --resume.")
            return False
        if state.step != self.last_saved_step and self.keeps_final_checkpoint():
            self.save_checkpoint()
        self.finish(board)
        self.write_final_model()
        if board is not None:
            board.close()
        return True

    def keeps_final_checkpoint(self) -> bool:
        """Whether the last step gets a checkpoint of its own (pretraining: to continue from with --init-from)."""
        return True

    def should_stop(self) -> bool:
        if self.world == 1:
            return self.stop_signal is not None
        if self.stop_signal is not None:
            self.accelerator.set_trigger()
        return self.accelerator.check_trigger()  # every process stops after the same step

    def install_signal_handlers(self) -> dict:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def handle(signum, _frame):
            self.stop_signal = signum
            signal.signal(signum, previous[signum])  # a second Ctrl-C interrupts at once

        # A signal ignored on entry stays ignored, as a shell leaves it and as Python leaves SIGINT: a script's
        # background job (`arabert-pipeline pretrain ... &`) ignores the Ctrl-C meant for the script's foreground.
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in previous:
            if previous[s] is not signal.SIG_IGN:
                signal.signal(s, handle)
        return previous

    def mean_over_processes(self, value):
        if not torch.is_tensor(value):
            return value
        if self.world > 1:
            value = self.accelerator.reduce(value.to(self.accelerator.device), reduction="mean")
        return value.item()

    def broadcast(self, value):
        """The main process's value, on every process."""
        if self.world == 1:
            return value
        from accelerate.utils import broadcast_object_list

        return broadcast_object_list([value])[0]

    def unwrapped(self) -> torch.nn.Module:
        """The model itself, without DDP or torch.compile around it. Kept from `prepare` rather than unwrapped
        again: accelerate's unwrap of a compiled DDP model rewires the compiled module around the bare one."""
        return self.module if self.module is not None else self.accelerator.unwrap_model(self.model)


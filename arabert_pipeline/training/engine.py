"""The engine's loop: `Engine`, which a stage subclasses (pretrain.Trainer, qa.finetune.QATrainer). The parts it
uses are the sibling modules: optim.py (schedule, optimizer, bf16), budget.py (--time-budget), checkpoints.py (files,
names, resume checks), state.py (settings and progress)."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from ..artifacts import (
    METADATA_FILE, OutputKind, OutputLock, atomic_directory, atomic_write, claim_output_dir, describe_exception,
    follow_umask, load_tensor_state, naming_io_errors, remove_own_entries, remove_stale_temporaries,
)
from ..errors import ArabertPipelineError, ConfigError, InputError
from .budget import REPLAN_CHECK_EVERY, BudgetPlanner
from .checkpoints import (
    CHECKPOINT_MODEL, CHECKPOINTS, LOG_FILE, STATE_FILE, TRAINER_STATE_FILE, check_tensor_state, checkpoint_name,
    is_count, json_kind, list_checkpoints, read_trainer_state,
)
from .optim import lr_factor, use_bf16
from .state import LoopSettings, TrainerState

log = logging.getLogger("arabert_pipeline.training")


class Engine:
    """A training run: `Subclass(config)` checks every input and sets up (before anything is trained), `train()`
    runs to the planned end.

    A subclass sets, in `setup()`: `self.model` and `self.optimizer` (through `self.prepare`), `self.data_key` (a
    hash of what it trains on: a checkpoint of other data is refused), and the plan's length (`self.state.total_steps`
    and `warmup_steps`, unless resumed); and it implements `epoch_plan`, `make_batch`, `count_tokens`, `forward`,
    `config_record`, `config_differences` and `export`. Hooks it may override: `evaluate`, `after_step`, `finish`,
    `export_checkpoint`, `extra_state` / `restore_extra_state`.
    """

    output_kind: OutputKind
    description = "training"

    def __init__(self, loop: LoopSettings, on_step: Callable[["Engine"], None] | None = None):
        from accelerate import Accelerator, PartialState

        self.loop, self.on_step = loop, on_step
        self.output = Path(loop.output)
        # Under torchrun without GPUs, accelerate only goes multi-process (gloo) when told the run is on CPU.
        cpu = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available()
        self.bf16 = use_bf16(loop.bf16, PartialState(cpu=cpu).device)
        # bf16 needs no loss scaling, so autocast is all that accelerate's mixed_precision="bf16" would add; doing it
        # here keeps accelerate's process-wide state the same for every run (it cannot change within a process).
        self.accelerator = Accelerator(cpu=cpu)
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
        self._plan: tuple[int, list[np.ndarray]] | None = None
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

    def setup(self) -> None:
        raise NotImplementedError

    def epoch_plan(self, epoch: int) -> list[np.ndarray]:
        """The micro-batches of one epoch (rows of the training data), in order; a function of (seed, epoch)."""
        raise NotImplementedError

    def make_batch(self, rows: np.ndarray, epoch: int, index: int) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def count_tokens(self, rows: np.ndarray) -> int:
        raise NotImplementedError

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

    def claim_output(self) -> OutputLock | None:
        """On the main process: lock OUT, check that this run may write it, empty an earlier run's for --overwrite
        and delete what a run killed during a save left half-written. Every process raises the main one's refusal."""
        loop, lock, refusal = self.loop, None, None
        if self.is_main:
            try:
                lock = OutputLock(self.output, self.output_kind.verb).acquire()
                earlier = claim_output_dir(self.output, self.output_kind, inputs=self.inputs(),
                                           overwrite=loop.overwrite, resume=loop.resume is not None)
                if earlier and loop.resume is None:
                    remove_own_entries(self.output, self.output_kind)
                remove_stale_temporaries(self.output / CHECKPOINTS, ".*.tmp")
                remove_stale_temporaries(self.output, ".*.tmp")
            except ArabertPipelineError as exc:
                if lock is not None:
                    lock.release()
                refusal = exc
        if self.world > 1:
            from accelerate.utils import broadcast_object_list

            message = broadcast_object_list([None if refusal is None else str(refusal)])[0]
            if message is not None and refusal is None:
                raise ConfigError(message)
        if refusal is not None:
            raise refusal
        return lock

    def release_output(self) -> None:
        if self.output_lock is not None:
            self.output_lock.release()

    def find_checkpoint(self) -> Path | None:
        """The checkpoint to resume from (its trainer state loaded), after checking that it fits this run."""
        resume = self.loop.resume
        if resume is None:  # claim_output has refused an earlier run's OUT, or emptied it (--overwrite)
            return None
        if resume == "latest":
            existing = list_checkpoints(self.output)
            if not existing:
                raise ConfigError(
                    f"{self.output} holds no checkpoint to resume (a finished model, or a run stopped before its first "
                    "checkpoint): pass --overwrite instead of --resume to start it again")
            checkpoint = existing[-1]
        else:
            checkpoint = Path(resume)
            if not (checkpoint / TRAINER_STATE_FILE).is_file():
                raise ConfigError(f"--resume {checkpoint}: not a checkpoint (no {TRAINER_STATE_FILE})")
        saved = read_trainer_state(checkpoint / TRAINER_STATE_FILE)
        stored_config = saved["config"]
        differences = self.config_differences(stored_config)
        if differences:
            current = self.config_record()
            detail = "; ".join(f"{k}: checkpoint {stored_config.get(k)!r}, now {current.get(k)!r}"
                               for k in differences)
            raise ConfigError(f"--resume {checkpoint} was written by a run with other settings ({detail})")
        if saved["data_key"] != self.data_key:
            raise ConfigError(f"--resume {checkpoint}: the training data or the tokenizer changed since the checkpoint "
                              "was written (their content hash differs)")
        if saved["processes"] != self.world:
            raise ConfigError(
                f"--resume {checkpoint} was written with {saved['processes']} processes, now {self.world}: "
                "launch with the same number to continue exactly"
            )
        # Read and checked now, before the stage spends time on its model and data; restore() applies it.
        tensors = load_tensor_state(checkpoint / STATE_FILE)
        check_tensor_state(tensors, checkpoint / STATE_FILE, self.world)
        self._checkpoint_tensors = (checkpoint, tensors)
        self.resumed_state_file = checkpoint / TRAINER_STATE_FILE
        self.state = TrainerState(**saved["state"])
        self.restore_extra_state(saved["extra"])
        self.last_saved_step = self.state.step
        # A budgeted run resumed with another --time-budget (extended, or cut short) moves the end of its decay to the
        # new budget at the first check, from the speed measured so far.
        self.budget_changed = self.budget is not None and stored_config.get("time_budget") != self.loop.time_budget
        return checkpoint

    def restore(self, checkpoint: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Model, optimizer and this process's RNG and unlogged metric sums from a checkpoint's state.pt."""
        path = checkpoint / STATE_FILE
        held, self._checkpoint_tensors = self._checkpoint_tensors, None
        if held is not None and held[0] == checkpoint:
            saved = held[1]
        else:
            saved = load_tensor_state(path)
            check_tensor_state(saved, path, self.world)
        # A file of the right layout can still hold another model's tensors or another optimizer's groups.
        try:
            model.load_state_dict(saved["model"] if "model" in saved else saved["objective"])
        except RuntimeError as exc:
            raise InputError(f"the weights do not fit this run's model ({describe_exception(exc)})", path=path,
                             field="model") from exc
        try:
            optimizer.load_state_dict(saved["optimizer"])
        except (ValueError, KeyError, TypeError, IndexError, RuntimeError) as exc:
            raise InputError(f"does not fit this run's optimizer ({describe_exception(exc)})", path=path,
                             field="optimizer") from exc
        mine = saved["processes"][self.accelerator.process_index]
        try:
            torch.set_rng_state(mine["torch"])
            if "cuda" in mine and torch.cuda.is_available():
                torch.cuda.set_rng_state(mine["cuda"])
        except RuntimeError as exc:
            raise InputError(f"not a random generator state ({describe_exception(exc)})", path=path,
                             field=f"processes[{self.accelerator.process_index}]") from exc
        self.window = {key: torch.tensor(value) for key, value in mine["window"].items()}
        self.window_steps = mine["window_steps"]

    def prepare(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, checkpoint: Path | None) -> None:
        """Restore from `checkpoint` (or seed each process's dropout), then hand both to accelerate."""
        if checkpoint is not None:
            self.restore(checkpoint, model, optimizer)
        elif self.world > 1:
            torch.manual_seed(self.loop.seed + self.accelerator.process_index)  # distinct dropout masks per process
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)

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

    # ------------------------------------------------------------------------------------------- the loop

    def request_stop(self) -> None:
        """Finish the current step, save a checkpoint and return from train() (what Ctrl-C does)."""
        self.stop_signal = self.stop_signal or signal.SIGINT

    def autocast(self):
        return torch.autocast(self.accelerator.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {key: value.to(self.accelerator.device, non_blocking=True) for key, value in batch.items()}

    def plan(self, epoch: int) -> list[np.ndarray]:
        if self._plan is None or self._plan[0] != epoch:
            self._plan = (epoch, self.epoch_plan(epoch))
        return self._plan[1]

    def steps_per_epoch(self) -> int:
        return len(self.plan(self.state.epoch)) // self.batches_per_step

    def epoch_ends_here(self) -> bool:
        """True right after the last step of an epoch (the next step would start the next one)."""
        return self.state.cursor + self.batches_per_step > len(self.plan(self.state.epoch))

    def next_step_batches(self) -> tuple[list[tuple[int, np.ndarray]], int]:
        """This process's micro-batches (index in the epoch plan, rows) for the next step, and the step's tokens."""
        state = self.state
        if self.epoch_ends_here():
            state.epoch, state.cursor = state.epoch + 1, 0
        plan = self.plan(state.epoch)
        group = range(state.cursor, state.cursor + self.batches_per_step)
        tokens = sum(self.count_tokens(plan[i]) for i in group)
        begin = state.cursor + self.accelerator.process_index * self.loop.grad_accum
        state.cursor += self.batches_per_step
        return [(i, plan[i]) for i in range(begin, begin + self.loop.grad_accum)], tokens

    def train_step(self) -> dict[str, torch.Tensor]:
        loop, accelerator = self.loop, self.accelerator
        micro_batches, tokens = self.next_step_batches()
        epoch = self.state.epoch
        totals: dict[str, torch.Tensor] = {}
        for position, (index, rows) in enumerate(micro_batches):
            batch = self.make_batch(rows, epoch, index)
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
        lr = loop.lr * lr_factor(state.step, state.warmup_steps, state.total_steps, state.decay_step,
                                 state.decay_factor)
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.step += 1
        self.state.tokens += tokens
        totals["lr"] = torch.tensor(lr)
        return totals

    def replan_due(self) -> bool:
        from accelerate.utils import broadcast_object_list

        if self.state.step % REPLAN_CHECK_EVERY:  # the same on every process: no per-step broadcast (a GPU sync)
            return False
        due = [self.budget_changed or self.budget.due(self.state)]
        if self.world > 1:  # clocks differ slightly: the main process decides, or one would wait in the broadcast
            broadcast_object_list(due)
        return due[0]

    def replan_for_budget(self) -> None:
        from accelerate.utils import broadcast_object_list

        per_step = self.budget.seconds_per_step(self.state) + getattr(self, "eval_seconds_per_step", 0.0)
        total = [self.budget.remaining_total(self.state, per_step)]
        if self.step_cap() is not None:
            total[0] = min(total[0], self.step_cap())
        broadcast_object_list(total)
        self.budget.replan(self.state, total[0])
        self.budget_changed = False
        if self.is_main:
            log.info(f"time budget: {self.state.total_steps} steps at the measured {per_step:.2f} s per step")

    def train(self) -> bool:
        """Run to the planned end; True if it completed, False if it was interrupted (a checkpoint is saved)."""
        try:
            return self.run()
        finally:
            self.release_output()

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
        try:
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

        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in previous:
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

    # ------------------------------------------------------------------------------------------- evaluation, logs

    def evaluate_and_log(self, board) -> None:
        self.last_eval_step = self.state.step  # on every process, so that all take the same barriers
        if self.is_main:
            metrics = self.evaluate()
            self.last_eval = {"step": self.state.step, **metrics}
            warning = self.health_warning(metrics) if self.state.step > self.state.warmup_steps else None
            if warning:
                log.warning(f"warning at step {self.state.step}: {warning}")
            self.log({"step": self.state.step, "tokens": self.state.tokens, **metrics,
                      **({"warning": warning} if warning else {})}, board)
        self.accelerator.wait_for_everyone()

    def log(self, row: dict, board) -> None:
        if not self.is_main:
            return
        with open(self.output / LOG_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        if board is not None:
            for key, value in row.items():
                if key not in ("step", "tokens") and isinstance(value, (int, float)):
                    board.add_scalar(key, value, row["step"])

    def truncate_log(self, step: int) -> None:
        """Drop rows written after the checkpoint being resumed, so the log reads as one run."""
        path = self.output / LOG_FILE
        if not path.exists():
            return
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"unreadable log ({describe_exception(exc)})", path=path) from exc
        lines = text.split("\n")
        if lines[-1]:  # a row torn by a run killed while writing it: never complete, so not part of the run
            lines[-1] = ""
        rows = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                logged = row["step"]
            except (ValueError, TypeError, KeyError) as exc:
                raise InputError(f"not a log row with a step ({describe_exception(exc)})", path=path,
                                 line=number) from exc
            if not is_count(logged):
                raise InputError(f"expected a non-negative integer, found {json_kind(logged)}", path=path, line=number,
                                 field="step")
            if logged <= step:
                rows.append(line)
        with atomic_write(path) as f:
            f.write("".join(line + "\n" for line in rows))

    def open_tensorboard(self):
        if not self.is_main:
            return None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # TensorBoard is optional; log.jsonl has everything
            return None
        return SummaryWriter(str(self.output / "tensorboard"), purge_step=self.state.step + 1)

    # ------------------------------------------------------------------------------------------- saving

    def unwrapped(self) -> torch.nn.Module:
        return self.accelerator.unwrap_model(self.model)

    def save_checkpoint(self) -> None:
        """Model (a loadable directory and the training state), optimizer, per-process RNG and the trainer state,
        written atomically; then only the last `keep_checkpoints` are kept."""
        from accelerate.utils import gather_object

        name = checkpoint_name(self.state.step)  # on every process, so that a bad step stops them all here
        mine = {"torch": torch.get_rng_state(), "window_steps": self.window_steps,
                "window": {key: float(value) for key, value in self.window.items()}}
        if torch.cuda.is_available():
            mine["cuda"] = torch.cuda.get_rng_state()
        process_states = gather_object([mine])
        if self.is_main:
            target = self.output / CHECKPOINTS / name
            with atomic_directory(target) as tmp:
                with quiet_transformers():
                    self.export_checkpoint(tmp / CHECKPOINT_MODEL)
                torch.save({"model": self.unwrapped().state_dict(), "optimizer": self.optimizer.state_dict(),
                            "processes": process_states}, tmp / STATE_FILE)
                trainer_state = {"state": asdict(self.state), "config": self.config_record(),
                                 "data_key": self.data_key, "processes": self.world, "extra": self.extra_state()}
                (tmp / TRAINER_STATE_FILE).write_text(json.dumps(trainer_state, indent=2), encoding="utf-8")
            for old in list_checkpoints(self.output)[: -self.loop.keep_checkpoints]:
                shutil.rmtree(old, ignore_errors=True)
        self.last_saved_step = self.state.step
        self.accelerator.wait_for_everyone()

    def write_final_model(self) -> None:
        """Export into OUT itself, file by file (each move atomic): config.json, then arabert_pipeline.json last, so
        a partial directory neither loads nor counts as a finished model."""
        if self.is_main:
            tmp = Path(tempfile.mkdtemp(dir=self.output, prefix=".final.", suffix=".tmp"))
            try:
                with quiet_transformers(), naming_io_errors(self.output):
                    self.export(tmp)
                follow_umask(tmp)
                order = {"config.json": 1, METADATA_FILE: 2}
                for path in sorted(tmp.iterdir(), key=lambda p: (order.get(p.name, 0), p.name)):
                    path.replace(self.output / path.name)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        self.accelerator.wait_for_everyone()


def peak_memory(device) -> dict[str, float]:
    """GiB at the high-water mark so far: the process's resident memory, and the CUDA allocator's on a GPU (the
    numbers a batch size is chosen by; host-side queries, no device sync)."""
    import resource

    peak = {"peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}  # KiB on Linux
    if device.type == "cuda":
        peak["peak_cuda_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    return peak


@contextlib.contextmanager
def quiet_transformers():
    """No "Writing model shards" bar per save: it would break the training bar."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()

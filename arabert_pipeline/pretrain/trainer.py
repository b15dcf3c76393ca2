"""The pretraining loop: the same code on one CPU, one GPU, several GPUs or nodes (through accelerate), resumable.

Launch commands (the flags after `pretrain` are the same everywhere):

    # one process: CPU, or one GPU if there is one
    arabert-pipeline pretrain --tokenizer TOK --corpus corpus.txt --model-size mini -o runs/mini
    # one machine, 4 GPUs (DDP)
    accelerate launch --multi_gpu --num_processes 4 -m arabert_pipeline.cli pretrain ...
    torchrun --nproc_per_node 4 -m arabert_pipeline.cli pretrain ...
    # CPU-only DDP over gloo, e.g. 2 processes × 1 thread (what the tests use; `accelerate launch --cpu` alone
    # starts one process, multi-CPU through accelerate needs an `accelerate config` file)
    OMP_NUM_THREADS=1 torchrun --nproc_per_node 2 -m arabert_pipeline.cli pretrain ...
    # 2 machines × 8 GPUs: run on each machine, R = 0 or 1
    accelerate launch --multi_gpu --num_machines 2 --num_processes 16 --machine_rank R \\
        --main_process_ip HOST0 --main_process_port 29500 -m arabert_pipeline.cli pretrain ...
    torchrun --nnodes 2 --nproc_per_node 8 --node_rank R --master_addr HOST0 --master_port 29500 \\
        -m arabert_pipeline.cli pretrain ...

`--batch-size` is per process and per micro-batch: an optimizer step reads batch_size × grad_accum × processes
sequences. Resuming needs the same number of processes. With several machines, OUT and the token cache
(`--cache-dir`) should be on a shared filesystem; otherwise each machine tokenizes the corpus once itself.

OUT holds `log.jsonl` (one JSON row per log interval and per evaluation), `tensorboard/` if TensorBoard is
installed, `checkpoints/step-NNNNNNNN/` (the exported model in `model/`, plus `state.pt` and `trainer_state.json`
for `--resume`; only the last --keep-checkpoints are kept) and, when the run completes, the final Hugging Face model
(config.json, model.safetensors, tokenizer files, arabert_pipeline.json).

Ctrl-C or SIGTERM finishes the current optimizer step, writes a checkpoint and exits; `--resume` then continues
exactly where it stopped: the data order and masks are functions of (seed, epoch, batch index), and the model,
optimizer, learning-rate position and dropout RNG come from the checkpoint.

OUT must be new, empty, or an earlier run's (which needs `--resume` or `--overwrite`); a directory holding anything
else, or an input, is refused. The run holds a lock on OUT (artifacts.OutputLock) and, under it, deletes what a run
killed during a save left half-written.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..artifacts import (
    MODEL_DIR_FILES, OutputKind, OutputLock, atomic_directory, atomic_write, claim_output_dir, describe_exception,
    load_pretrained_tokenizer, load_tensor_state, read_json_file, remove_own_entries, remove_stale_temporaries,
    write_metadata,
)
from ..errors import ArabertPipelineError, ConfigError, InputError
from ..tokenizer.export import save_pretrained_tokenizer
from .config import PretrainConfig
from .data import (
    PretrainingData, SpecialIds, TokenStore, cache_key, check_corpus_preprocessing, default_cache_dir, tokenize_corpus,
)
from .objectives import build_objective, init_model_dir

log = logging.getLogger(__name__)
CHECKPOINTS = "checkpoints"
LOG_FILE = "log.jsonl"
PRETRAIN_OUTPUT = OutputKind("pretrain", names=(*MODEL_DIR_FILES, LOG_FILE, CHECKPOINTS, "tensorboard", "generator"),
                             markers=(LOG_FILE, CHECKPOINTS), resumable=True)
REPLAN_CHECK_EVERY = 10  # steps between --time-budget checks


@dataclass
class TrainerState:
    """Where the run is; saved in every checkpoint as trainer_state.json."""

    step: int = 0
    epoch: int = 0
    cursor: int = 0  # index of the next batch in the epoch's plan
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


def lr_factor(step: int, warmup: int, total: int, decay_step: int = 0, decay_factor: float = 1.0) -> float:
    """BERT's schedule: linear warm-up to the peak, then linear decay to zero at `total`; after a --time-budget
    correction, linear decay from `decay_factor` at `decay_step` to zero at the corrected `total`.

    Written here rather than taken from transformers because with --time-budget the total is only known while
    training, and it must come back from a checkpoint; this way it is a few numbers in the state.
    """
    if step < warmup:
        return (step + 1) / warmup
    if decay_step > warmup:
        return max(0.0, decay_factor * (total - step) / max(1, total - decay_step))
    return max(0.0, (total - step) / max(1, total - warmup))


def use_bf16(setting: str, device: torch.device) -> bool:
    if setting != "auto":
        return setting == "on"
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    # Only with native bf16 (AVX512-BF16/AMX, or AVX512 that oneDNN handles well): on an AVX2-only CPU, bf16 autocast
    # measured 20× slower than fp32 for a mini BERT.
    native = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return device.type == "cpu" and native is not None and bool(native())


def set_dropout(module: torch.nn.Module, p: float) -> None:
    """Every dropout layer of `module` drops with probability p; Hugging Face attention reads its rate from these too.

    The model configs are left as they are, so an exported model fine-tunes with its architecture's dropout.
    """
    for layer in module.modules():
        if isinstance(layer, torch.nn.Dropout):
            layer.p = p


def parameter_groups(module: torch.nn.Module, weight_decay: float) -> list[dict]:
    """BERT's exclusions: no weight decay on biases and LayerNorm weights (the parameters with < 2 dimensions)."""
    decay, no_decay = [], []
    for parameter in module.parameters():
        if parameter.requires_grad:
            (decay if parameter.ndim >= 2 else no_decay).append(parameter)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def list_checkpoints(output: Path) -> list[Path]:
    directory = output / CHECKPOINTS
    found = [p for p in directory.glob("step-*") if (p / "trainer_state.json").is_file()] if directory.is_dir() else []
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


class Trainer:
    """Set up with `Trainer(config)` (every input check happens here, before training), then `train()`."""

    def __init__(self, config: PretrainConfig, on_step: Callable[["Trainer"], None] | None = None):
        from accelerate import Accelerator, PartialState

        config.validate()
        self.config, self.on_step = config, on_step
        self.output = Path(config.output)
        # Under torchrun without GPUs, accelerate only goes multi-process (gloo) when told the run is on CPU.
        cpu = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available()
        self.bf16 = use_bf16(config.bf16, PartialState(cpu=cpu).device)
        # bf16 needs no loss scaling, so autocast is all that accelerate's mixed_precision="bf16" would add; doing it
        # here keeps accelerate's process-wide state the same for every run (it cannot change within a process).
        self.accelerator = Accelerator(cpu=cpu)
        self.is_main = self.accelerator.is_main_process
        self.world = self.accelerator.num_processes
        self.state = TrainerState()
        self.stop_signal: int | None = None
        self.last_eval: dict[str, float] = {}  # on the main process only
        self.last_eval_step = -1
        # Sums of the step metrics since the last log row, and how many steps they hold.
        self.window: dict[str, torch.Tensor] = {}
        self.window_steps = 0
        self.last_saved_step = -1
        self.output_lock = self.claim_output()
        try:
            self.setup()
        except BaseException:
            self.release_output()
            raise

    def setup(self) -> None:
        """Load and check everything the run needs: tokenizer, corpus, checkpoint, model, optimizer, data plan."""
        from accelerate.utils import set_seed

        config = self.config
        self.tokenizer = load_pretrained_tokenizer(
            config.tokenizer, "--tokenizer takes a directory written by `arabert-pipeline train-tokenizer`")
        if not self.tokenizer.is_fast:
            raise ConfigError(f"--tokenizer {config.tokenizer}: a fast (tokenizers-backed) tokenizer is needed")
        self.preprocessing = check_corpus_preprocessing(config.corpus, config.tokenizer)
        self.data_key = cache_key(config.corpus, self.tokenizer)
        checkpoint = self.find_checkpoint()

        set_seed(config.seed)
        objective = self.build_objective()
        if config.dropout is not None:
            set_dropout(objective, config.dropout)

        cache_dir = Path(config.cache_dir) if config.cache_dir else default_cache_dir()
        with self.accelerator.local_main_process_first():
            store_dir = tokenize_corpus(config.corpus, self.tokenizer, cache_dir, self.data_key,
                                        config.progress and self.is_main)
        self.store = TokenStore.open(store_dir)
        self.data = PretrainingData(
            self.store, SpecialIds.from_tokenizer(self.tokenizer), config.max_seq_length,
            token_budget=config.batch_size * config.max_seq_length, eval_sequences=config.eval_sequences,
            seed=config.seed, nsp=config.nsp,
        )
        self.batches_per_step = self.world * config.grad_accum
        first_epoch = self.data.epoch_batches(0)
        step_tokens = self.batches_per_step * config.batch_size * config.max_seq_length
        if len(first_epoch) < self.batches_per_step or self.data.train_tokens < step_tokens:
            raise InputError(
                f"the corpus is too short: {self.data.train_tokens} training tokens (after holding out "
                f"{len(self.data.eval_docs)} documents for evaluation) do not fill one optimizer step of "
                f"{step_tokens} tokens (--batch-size × --max-seq-length × --grad-accum × processes). "
                "Use more text or a smaller --batch-size.",
                path=", ".join(config.corpus),
            )

        optimizer = torch.optim.AdamW(
            parameter_groups(objective, config.weight_decay), lr=config.lr, betas=(0.9, 0.999), eps=1e-6
        )
        if checkpoint is not None:
            saved = load_tensor_state(checkpoint / "state.pt")
            objective.load_state_dict(saved["objective"])
            optimizer.load_state_dict(saved["optimizer"])
            self.restore_process_state(saved["processes"])
        elif self.world > 1:
            torch.manual_seed(config.seed + self.accelerator.process_index)  # distinct dropout masks per process
        self.collator = objective.collator
        self.model, self.optimizer = self.accelerator.prepare(objective, optimizer)
        if checkpoint is None:
            self.plan_length(first_epoch)

    # ------------------------------------------------------------------------------------------- setup helpers

    def claim_output(self) -> OutputLock | None:
        """On the main process: lock OUT, check that this run may write it, empty an earlier run's for --overwrite
        and delete what a run killed during a save left half-written. Every process raises the main one's refusal."""
        config, lock, refusal = self.config, None, None
        if self.is_main:
            inputs = [*config.corpus, config.tokenizer, *([config.init_from] if config.init_from else [])]
            try:
                lock = OutputLock(self.output, "pretrain").acquire()
                earlier = claim_output_dir(self.output, PRETRAIN_OUTPUT, inputs=inputs, overwrite=config.overwrite,
                                           resume=config.resume is not None)
                if earlier and config.resume is None:
                    remove_own_entries(self.output, PRETRAIN_OUTPUT)
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

    def build_objective(self) -> torch.nn.Module:
        """The objective's modules; with --init-from, any failure to read that model names it."""
        config = self.config
        if config.init_from is None:
            return build_objective(config, self.tokenizer)
        config_file = init_model_dir(config.init_from) / "config.json"
        read_json_file(config_file)
        try:
            return build_objective(config, self.tokenizer)
        except ArabertPipelineError:
            raise
        except Exception as exc:  # safetensors, JSON, shape and I/O errors all mean "cannot use this model"
            raise ConfigError(f"--init-from {config.init_from}: cannot load the model ({describe_exception(exc)})"
                              ) from exc

    def release_output(self) -> None:
        if self.output_lock is not None:
            self.output_lock.release()

    def find_checkpoint(self) -> Path | None:
        """The checkpoint to resume from (its state loaded into self.state), after checking it fits this run."""
        if self.config.resume is None:  # claim_output has refused an earlier run's OUT, or emptied it (--overwrite)
            return None
        existing = list_checkpoints(self.output)
        if self.config.resume == "latest":
            if not existing:
                raise ConfigError(f"--resume: no checkpoint under {self.output / CHECKPOINTS}")
            checkpoint = existing[-1]
        else:
            checkpoint = Path(self.config.resume)
            if not (checkpoint / "trainer_state.json").is_file():
                raise ConfigError(f"--resume {checkpoint}: not a checkpoint (no trainer_state.json)")
        saved = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        differences = self.config.differences(saved["config"])
        if differences:
            detail = "; ".join(f"{k}: checkpoint {saved['config'].get(k)!r}, now {getattr(self.config, k, None)!r}"
                               for k in differences)
            raise ConfigError(f"--resume {checkpoint} was written by a run with other settings ({detail})")
        if saved["data_key"] != self.data_key:
            raise ConfigError(
                f"--resume {checkpoint}: the corpus or the tokenizer changed since the checkpoint was written "
                "(their content hash differs)"
            )
        if saved["processes"] != self.world:
            raise ConfigError(
                f"--resume {checkpoint} was written with {saved['processes']} processes, now {self.world}: "
                "launch with the same number to continue exactly"
            )
        self.state = TrainerState(**saved["state"])
        self.last_saved_step = self.state.step
        return checkpoint

    def plan_length(self, first_epoch: list[np.ndarray]) -> None:
        """Fix the number of optimizer steps (and warm-up steps) from --steps, --tokens, --time-budget or one epoch."""
        config = self.config
        if config.steps is not None:
            total = config.steps
        elif config.tokens is not None:
            tokens_per_step = self.data.train_tokens / len(first_epoch) * self.batches_per_step
            total = math.ceil(config.tokens / tokens_per_step)
        elif config.time_budget is not None:
            total = self.steps_within_budget(config.time_budget * 60)
        else:
            total = len(first_epoch) // self.batches_per_step
        warmup = int(round(config.warmup * total)) if config.warmup < 1 else int(config.warmup)
        self.state.total_steps, self.state.warmup_steps = total, min(warmup, total)

    def steps_within_budget(self, seconds: float) -> int:
        """Time a few forward/backward passes (then undo their effects) to turn a time budget into steps."""
        from accelerate.utils import broadcast_object_list

        rng_state = torch.get_rng_state()
        batches = self.data.epoch_batches(0)[: 3]
        timings = []
        with self.accelerator.no_sync(self.model):
            for index, rows in enumerate(batches):
                batch = self.make_batch(self.data.train, rows, np.random.default_rng([self.config.seed, 0, index, 1]))
                began = time.perf_counter()
                with self.autocast():
                    loss = self.model(batch)["loss"]
                self.accelerator.backward(loss)
                timings.append(time.perf_counter() - began)
        self.optimizer.zero_grad(set_to_none=True)
        torch.set_rng_state(rng_state)
        micro = float(np.median(timings[1:] if len(timings) > 1 else timings))
        evals_per_step = 1 / self.config.eval_every
        self.eval_seconds_per_step = len(self.data.eval_batches()) * micro / 3 * evals_per_step  # forward ≈ a third
        estimate = [max(1, int(seconds / (micro * self.config.grad_accum * 1.05 + self.eval_seconds_per_step)))]
        broadcast_object_list(estimate)
        return estimate[0]

    def replan_due(self) -> bool:
        """--time-budget: correct the plan early in the warm-up, then after every further tenth of the budget (but
        not in the last tenth), from the speed since the last correction.

        The up-front timing misses batch collation, the optimizer and whatever else shares the machine (it measured
        1.8x too optimistic with two runs on two cores), and the load changes: a run planned while another job was
        running used 60 of its 95 minutes before the corrections were periodic.
        """
        from accelerate.utils import broadcast_object_list

        state, budget = self.state, self.config.time_budget * 60
        if state.step % REPLAN_CHECK_EVERY:  # the same on every process: no per-step broadcast (a GPU sync)
            return False
        if not state.budget_replanned:
            due = [state.elapsed >= min(60.0, 0.03 * budget)]
        else:
            due = [state.replanned_elapsed + 0.1 * budget <= state.elapsed <= 0.9 * budget]
        if self.world > 1:  # clocks differ slightly: the main process decides, or one would wait in the broadcast
            broadcast_object_list(due)
        return due[0]

    def replan_for_budget(self) -> None:
        """Re-fix the schedule's length from the measured speed, keeping the learning rate continuous."""
        from accelerate.utils import broadcast_object_list

        state, budget = self.state, self.config.time_budget * 60
        first = not state.budget_replanned
        since = (state.elapsed, state.step) if first else (
            state.elapsed - state.replanned_elapsed, state.step - state.replanned_step)
        per_step = since[0] / max(1, since[1]) + getattr(self, "eval_seconds_per_step", 0.0)
        total = [max(state.step + 1, state.step + int((budget - state.elapsed) / per_step))]
        broadcast_object_list(total)
        if state.step < state.warmup_steps or first:  # still warming up: rescale the warm-up too
            warmup = self.config.warmup
            state.warmup_steps = min(total[0], int(round(warmup * total[0])) if warmup < 1 else int(warmup))
        else:
            state.decay_factor = lr_factor(state.step, state.warmup_steps, state.total_steps, state.decay_step,
                                           state.decay_factor)
            state.decay_step = state.step
        state.total_steps = total[0]
        state.budget_replanned = True
        state.replanned_step, state.replanned_elapsed = state.step, state.elapsed
        if self.is_main:
            log.info(f"time budget: {state.total_steps} steps at the measured {per_step:.2f} s per step")

    def restore_process_state(self, states: list[dict]) -> None:
        """This process's RNG and its unlogged metric sums (so the next log row averages the same steps)."""
        mine = states[self.accelerator.process_index]
        torch.set_rng_state(mine["torch"])
        if "cuda" in mine and torch.cuda.is_available():
            torch.cuda.set_rng_state(mine["cuda"])
        self.window = {key: torch.tensor(value) for key, value in mine["window"].items()}
        self.window_steps = mine["window_steps"]

    # ------------------------------------------------------------------------------------------- the loop

    def request_stop(self) -> None:
        """Finish the current step, save a checkpoint and return from train() (what Ctrl-C does)."""
        self.stop_signal = self.stop_signal or signal.SIGINT

    def autocast(self):
        return torch.autocast(self.accelerator.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def make_batch(self, chunks, rows: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        batch = self.collator(self.data.examples(chunks, rows, rng), rng)
        return {key: value.to(self.accelerator.device, non_blocking=True) for key, value in batch.items()}

    def next_step_batches(self) -> tuple[list[tuple[int, np.ndarray]], int]:
        """This process's micro-batches (index in the epoch plan, rows) for the next step, and the step's tokens."""
        state = self.state
        plan = self.data.epoch_batches(state.epoch)
        if state.cursor + self.batches_per_step > len(plan):
            state.epoch, state.cursor = state.epoch + 1, 0
            plan = self.data.epoch_batches(state.epoch)
        group = range(state.cursor, state.cursor + self.batches_per_step)
        lengths = self.data.train.length
        tokens = sum(int(lengths[plan[i]].sum()) + len(plan[i]) * self.data.specials_per_sequence for i in group)
        begin = state.cursor + self.accelerator.process_index * self.config.grad_accum
        state.cursor += self.batches_per_step
        return [(i, plan[i]) for i in range(begin, begin + self.config.grad_accum)], tokens

    def train_step(self) -> dict[str, torch.Tensor]:
        config, accelerator = self.config, self.accelerator
        micro_batches, tokens = self.next_step_batches()
        epoch = self.state.epoch
        totals: dict[str, torch.Tensor] = {}
        for position, (index, rows) in enumerate(micro_batches):
            batch = self.make_batch(self.data.train, rows, np.random.default_rng([config.seed, epoch, index, 1]))
            last = position == len(micro_batches) - 1
            with contextlib.nullcontext() if last else accelerator.no_sync(self.model):
                with self.autocast():
                    out = self.model(batch)
                accelerator.backward(out["loss"] / config.grad_accum)
            for key, value in out.items():
                if key != "weight":
                    totals[key] = totals.get(key, 0) + value.detach().float() / config.grad_accum
        if config.max_grad_norm > 0:
            totals["grad_norm"] = accelerator.clip_grad_norm_(self.model.parameters(), config.max_grad_norm)
        state = self.state
        lr = config.lr * lr_factor(state.step, state.warmup_steps, state.total_steps, state.decay_step,
                                   state.decay_factor)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.step += 1
        self.state.tokens += tokens
        totals["lr"] = torch.tensor(lr)
        return totals

    def train(self) -> bool:
        """Run to the planned end; True if it completed, False if it was interrupted (a checkpoint is saved)."""
        try:
            return self.run()
        finally:
            self.release_output()

    def run(self) -> bool:
        from tqdm.auto import tqdm

        config, state = self.config, self.state
        self.output.mkdir(parents=True, exist_ok=True)
        if self.is_main:
            self.truncate_log(state.step)
        board = self.open_tensorboard()
        handlers = self.install_signal_handlers()
        bar = tqdm(total=state.total_steps, initial=state.step, unit="step", dynamic_ncols=True,
                   disable=not (config.progress and self.is_main), desc="pretraining")
        session_start = time.perf_counter()
        elapsed_before = state.elapsed
        window_tokens, window_start = 0, time.perf_counter()
        try:
            while state.step < state.total_steps and not self.should_stop():
                tokens_before = state.tokens
                metrics = self.train_step()
                state.elapsed = elapsed_before + time.perf_counter() - session_start
                if config.time_budget is not None and self.replan_due():
                    self.replan_for_budget()
                    bar.total = state.total_steps
                for key, value in metrics.items():
                    self.window[key] = self.window.get(key, 0.0) + value
                self.window_steps += 1
                window_tokens += state.tokens - tokens_before
                bar.update(1)
                if state.step % config.log_every == 0 or state.step == state.total_steps:
                    now = time.perf_counter()
                    row = {"step": state.step, "tokens": state.tokens, "elapsed": round(state.elapsed, 2),
                           "tokens_per_second": round(window_tokens / (now - window_start), 1)}
                    row.update({key: self.mean_over_processes(value / self.window_steps)
                                for key, value in self.window.items()})
                    self.log(row, board)
                    bar.set_postfix(loss=f"{row['loss']:.3f}", tok_s=f"{row['tokens_per_second']:.0f}")
                    self.window, self.window_steps = {}, 0
                    window_tokens, window_start = 0, now
                if state.step % config.eval_every == 0:
                    self.evaluate_and_log(board)
                if state.step % config.save_every == 0:
                    self.save_checkpoint()
                if self.on_step is not None:
                    self.on_step(self)
                if config.time_budget is not None and state.elapsed >= config.time_budget * 60:
                    break
        finally:
            bar.close()
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
        if state.step != self.last_saved_step:
            self.save_checkpoint()
        interrupted = self.stop_signal is not None and state.step < state.total_steps
        if interrupted:
            if self.is_main:
                log.info(f"stopped at step {state.step}/{state.total_steps}; checkpoint saved in "
                      f"{self.output / CHECKPOINTS}. Continue with the same command plus --resume.")
            return False
        if self.last_eval_step != state.step:
            self.evaluate_and_log(board)
        self.write_final_model()
        if board is not None:
            board.close()
        if self.is_main:
            quality = ", ".join(f"{k} {v:.4g}" for k, v in self.last_eval.items() if k != "step")
            log.info(f"{self.output}: {state.step} steps, {state.tokens:,} tokens in {state.elapsed / 60:.1f} min; "
                  f"{quality}")
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

    # ------------------------------------------------------------------------------------------- evaluation, logs

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Held-out metrics with fixed masks (the same for every evaluation and every seed)."""
        module = self.accelerator.unwrap_model(self.model)
        module.eval()
        sums: dict[str, float] = defaultdict(float)
        total = 0.0
        try:
            for index, rows in enumerate(self.data.eval_batches()):
                with self.autocast():
                    out = module(self.make_batch(self.data.eval, rows, np.random.default_rng([0, index, 2])))
                weight = float(out.pop("weight", torch.tensor(1.0)))
                total += weight
                for key, value in out.items():
                    sums[key] += float(value) * weight
        finally:
            module.train()
        metrics = {f"eval_{key}": value / total for key, value in sums.items()}
        if "eval_mlm_loss" in metrics:
            metrics["eval_mlm_perplexity"] = math.exp(min(metrics["eval_mlm_loss"], 50.0))
        return metrics

    def evaluate_and_log(self, board) -> None:
        self.last_eval_step = self.state.step  # on every process, so that all take the same barriers
        if self.is_main:
            metrics = self.evaluate()
            self.last_eval = {"step": self.state.step, **metrics}
            check = getattr(self.accelerator.unwrap_model(self.model), "health_warning", None)
            warning = check(metrics) if check is not None and self.state.step > self.state.warmup_steps else None
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
        rows = [line for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip() and json.loads(line)["step"] <= step]
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

    def export(self, directory: Path) -> None:
        """A complete Hugging Face model directory: weights, config, tokenizer files, arabert_pipeline.json."""
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # a "Writing model shards" bar per checkpoint would break ours
        try:
            self.accelerator.unwrap_model(self.model).export(directory)
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        save_pretrained_tokenizer(self.tokenizer, directory)
        write_metadata(
            directory,
            preprocessing=self.preprocessing,
            objective=self.config.objective,
            pretrain={
                "config": self.config.to_dict(),
                "steps": self.state.step,
                "tokens_seen": self.state.tokens,
                "processes": self.world,
                "bf16": self.bf16,
                "corpus_tokens": self.store.meta["tokens"],
                "corpus_documents": self.store.meta["documents"],
                "eval": self.last_eval,
            },
        )

    def save_checkpoint(self) -> None:
        from accelerate.utils import gather_object

        mine = {"torch": torch.get_rng_state(), "window_steps": self.window_steps,
                "window": {key: float(value) for key, value in self.window.items()}}
        if torch.cuda.is_available():
            mine["cuda"] = torch.cuda.get_rng_state()
        process_states = gather_object([mine])
        if self.is_main:
            target = self.output / CHECKPOINTS / f"step-{self.state.step:08d}"
            with atomic_directory(target) as tmp:
                self.export(tmp / "model")
                torch.save(
                    {
                        "objective": self.accelerator.unwrap_model(self.model).state_dict(),
                        "optimizer": self.optimizer.state_dict(),
                        "processes": process_states,
                    },
                    tmp / "state.pt",
                )
                trainer_state = {"state": asdict(self.state), "config": self.config.to_dict(),
                                 "data_key": self.data_key, "processes": self.world}
                (tmp / "trainer_state.json").write_text(json.dumps(trainer_state, indent=2), encoding="utf-8")
            for old in list_checkpoints(self.output)[: -self.config.keep_checkpoints]:
                shutil.rmtree(old, ignore_errors=True)
        self.last_saved_step = self.state.step
        self.accelerator.wait_for_everyone()

    def write_final_model(self) -> None:
        """Export into OUT itself, file by file (each move atomic), arabert_pipeline.json last as the done-marker."""
        if self.is_main:
            tmp = Path(tempfile.mkdtemp(dir=self.output, prefix=".final.", suffix=".tmp"))
            try:
                self.export(tmp)
                files = sorted(tmp.iterdir(), key=lambda p: p.name == "arabert_pipeline.json")
                for path in files:
                    path.replace(self.output / path.name)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        self.accelerator.wait_for_everyone()


def pretrain(config: PretrainConfig, on_step: Callable[[Trainer], None] | None = None) -> bool:
    """Train as `config` says; True when the run completed (the final model is in config.output)."""
    return Trainer(config, on_step).train()


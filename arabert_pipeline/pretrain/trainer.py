"""Pretraining on the package's training engine (training/): the same code on one CPU, one GPU, several GPUs or
nodes (through accelerate), resumable.

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
else, or an input, is refused. The run holds a lock on OUT (outputs.OutputLock) and, under it, deletes what a run
killed during a save left half-written.
"""
from __future__ import annotations

import dataclasses
import logging
import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..artifacts.metadata import write_metadata
from ..artifacts.models import check_local_source, describe_exception
from ..artifacts.reads import read_json_file
from ..errors import ArabertPipelineError, ConfigError, InputError
from ..outputs import MODEL_DIR_FILES, OutputKind
from ..tokenizer.export import save_pretrained_tokenizer
from ..tokenizer.load import load_pretrained_tokenizer
from ..training import (
    CHECKPOINTS,
    LOG_FILE,
    Engine,
    LoopSettings,
    lr_factor,
    make_optimizer,
    parameter_groups,
    use_bf16,
    warmup_steps,
)
from .config import PretrainConfig
from .data import (
    PretrainingData,
    SpecialIds,
    TokenStore,
    cache_key,
    check_corpus_preprocessing,
    default_cache_dir,
    tokenize_corpus,
)
from .objectives import build_objective, init_model_dir

log = logging.getLogger(__name__)
__all__ = ["PRETRAIN_OUTPUT", "Trainer", "pretrain", "set_dropout", "lr_factor", "parameter_groups", "use_bf16"]

PRETRAIN_OUTPUT = OutputKind("pretrain", names=(*MODEL_DIR_FILES, LOG_FILE, CHECKPOINTS, "tensorboard", "generator"),
                             markers=(LOG_FILE, CHECKPOINTS), resumable=True)


def set_dropout(module: torch.nn.Module, p: float) -> None:
    """Every dropout layer of `module` drops with probability p; Hugging Face attention reads its rate from these too.

    The model configs are left as they are, so an exported model fine-tunes with its architecture's dropout.
    """
    for layer in module.modules():
        if isinstance(layer, torch.nn.Dropout):
            layer.p = p


def loop_settings(config: PretrainConfig) -> LoopSettings:
    return LoopSettings(
        output=config.output, lr=config.lr, warmup=config.warmup, seed=config.seed, weight_decay=config.weight_decay,
        bf16=config.bf16, grad_accum=config.grad_accum, max_grad_norm=config.max_grad_norm,
        time_budget=config.time_budget, log_every=config.log_every, eval_every=config.eval_every,
        save_every=config.save_every, keep_checkpoints=config.keep_checkpoints, resume=config.resume,
        overwrite=config.overwrite, progress=config.progress, loader_workers=config.loader_workers,
        compile=config.compile,
    )


class PretrainBatches:
    """Training micro-batch (rows, epoch, index) → CPU tensors: packed sequences, then the objective's collator with
    a generator seeded by (seed, epoch, index), so that a resumed run, and a loader worker, draw the same masks.
    Picklable (the token store reopens its memory maps by path), for --loader-workers."""

    def __init__(self, data: PretrainingData, collator, seed: int):
        self.data, self.collator, self.seed = data, collator, seed

    def __call__(self, rows: np.ndarray, epoch: int, index: int) -> dict[str, torch.Tensor]:
        return self.make(self.data.train, rows, np.random.default_rng([self.seed, epoch, index, 1]))

    def make(self, chunks, rows: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """Rows of `chunks` (the training or the held-out sequences) as one batch drawn with `rng`."""
        return self.collator(self.data.examples(chunks, rows, rng), rng)


class Trainer(Engine):
    """Set up with `Trainer(config)` (every input check happens here, before training), then `train()`."""

    output_kind = PRETRAIN_OUTPUT
    description = "pretraining"

    def __init__(self, config: PretrainConfig, on_step: Callable[[Trainer], None] | None = None):
        config.validate()
        # Before the output is claimed: a mistyped local path must fail at once, not after a hub lookup or with the
        # hub library's repo-id complaint.
        check_local_source(config.tokenizer, "tokenizer")
        if config.init_from is not None:
            init_model_dir(config.init_from)
        self.config = config
        super().__init__(loop_settings(config), on_step)

    def inputs(self) -> list[str]:
        config = self.config
        return [*config.corpus, config.tokenizer, *([config.init_from] if config.init_from else [])]

    def compile_choice(self, device: torch.device) -> bool:
        """The engine's choice, except for --deberta-attention sdpa on a GPU, which runs eager: there the compiled
        backward pass failed at the first batch of another width (one H200, torch 2.11, 2026-11-28): inductor checked
        the SDPA bias saved for it against strides fixed at the first width. By torch's source the two layouts part
        where the CUDA attention kernel's bias is padded, which a CPU never does, so a CPU cannot show it
        (docs/pretraining.md)."""
        compiled = super().compile_choice(device)
        if not (compiled and device.type == "cuda" and self.config.deberta_attention == "sdpa"):
            return compiled
        if self.config.compile:
            raise ConfigError("--deberta-attention sdpa with --compile on a GPU: torch.compile's backward pass fails "
                              "at the first batch of another width (docs/pretraining.md); use --no-compile or "
                              "--deberta-attention eager")
        log.info("--deberta-attention sdpa on a GPU: training steps not compiled (docs/pretraining.md)")
        return False

    def setup(self) -> None:
        """Load and check everything the run needs: tokenizer, corpus, checkpoint, model, optimizer, data plan."""
        from accelerate.utils import set_seed

        # Compiled or not as decided for this device, for what reads the setting (the batch shapes) and what records
        # the config (checkpoints, the export's metadata).
        config = self.config = dataclasses.replace(self.config, compile=self.compiled)
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
        first_epoch = self.plan(0)
        step_tokens = self.batches_per_step * config.batch_size * config.max_seq_length
        if len(first_epoch) < self.batches_per_step or self.data.train_tokens < step_tokens:
            raise InputError(
                f"the corpus is too short: {self.data.train_tokens} training tokens (after holding out "
                f"{len(self.data.eval_docs)} documents for evaluation) do not fill one optimizer step of "
                f"{step_tokens} tokens (--batch-size × --max-seq-length × --grad-accum × processes). "
                "Use more text or a smaller --batch-size.",
                path=", ".join(config.corpus),
            )
        optimizer = make_optimizer(parameter_groups(objective, config.weight_decay), config.lr)
        self.collator = objective.collator
        self.batches = PretrainBatches(self.data, self.collator, config.seed)
        self.model_flops = self.count_flops_per_token(objective)
        self.prepare(objective, optimizer, checkpoint)
        if checkpoint is None:
            self.plan_length(first_epoch)

    def build_objective(self) -> torch.nn.Module:
        """The objective's modules; with --init-from, any failure to read that model names it."""
        config = self.config
        if config.init_from is None:
            return build_objective(config, self.tokenizer, self.preprocessing)
        config_file = init_model_dir(config.init_from) / "config.json"
        read_json_file(config_file)
        try:
            return build_objective(config, self.tokenizer)
        except ArabertPipelineError:
            raise
        except Exception as exc:  # safetensors, JSON, shape and I/O errors all mean "cannot use this model"
            raise ConfigError(f"--init-from {config.init_from}: cannot load the model ({describe_exception(exc)})"
                              ) from exc

    def plan_length(self, first_epoch: list[np.ndarray]) -> None:
        """Fix the number of optimizer steps (and warm-up steps) from --steps, --tokens, --time-budget or one epoch."""
        config = self.config
        if config.steps is not None:
            total = config.steps
        elif config.tokens is not None:
            tokens_per_step = self.data.train_tokens / len(first_epoch) * self.batches_per_step
            total = math.ceil(config.tokens / tokens_per_step)
        elif config.time_budget is not None:
            total = self.steps_within_budget()
        else:
            total = len(first_epoch) // self.batches_per_step
        self.state.total_steps, self.state.warmup_steps = total, warmup_steps(config.warmup, total)

    def evaluation_seconds(self, micro_batch_seconds: float) -> float:
        return len(self.data.eval_batches()) * micro_batch_seconds / 3 / self.config.eval_every  # forward ≈ a third

    # ------------------------------------------------------------------------------------------- the engine's hooks

    def epoch_plan(self, epoch: int) -> list[np.ndarray]:
        return self.data.epoch_batches(epoch)

    def make_batch(self, rows: np.ndarray, epoch: int, index: int) -> dict[str, torch.Tensor]:
        return self.to_device(self.batches(rows, epoch, index))

    def batch_maker(self) -> PretrainBatches:
        return self.batches

    def count_flops_per_token(self, objective: torch.nn.Module) -> float:
        """Training FLOPs per token of every encoder the objective trains (ELECTRA: generator and discriminator)
        at --max-seq-length; parameters counted outside the embedding tables, each once."""
        from transformers import PreTrainedModel

        from ..training.logs import transformer_flops_per_token
        from ..training.optim import EMBEDDINGS

        seen, parameters = set(), 0
        for name, parameter in objective.named_parameters():
            if id(parameter) not in seen and not EMBEDDINGS.search(name):
                seen.add(id(parameter))
                parameters += parameter.numel()
        attention = 0.0
        for module in objective.modules():
            if isinstance(module, PreTrainedModel) and module.base_model is module:  # each encoder once
                config = module.config
                layers = getattr(config, "num_hidden_layers", 0) or getattr(config, "n_layer", 0)
                hidden = getattr(config, "hidden_size", 0) or getattr(config, "d_model", 0)
                attention += transformer_flops_per_token(0, layers, hidden, self.config.max_seq_length)
        return 6.0 * parameters + attention

    def flops_per_token(self) -> float:
        return self.model_flops

    def count_tokens(self, rows: np.ndarray) -> int:
        return int(self.data.train.length[rows].sum()) + len(rows) * self.data.specials_per_sequence

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return self.model(batch)

    def config_record(self) -> dict[str, Any]:
        return self.config.to_dict()

    def config_differences(self, stored: dict[str, Any]) -> list[str]:
        return self.config.differences(stored)

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Held-out metrics with fixed masks (the same for every evaluation and every seed)."""
        module = self.unwrapped()
        module.eval()
        sums: dict[str, float] = defaultdict(float)
        total = 0.0
        try:
            for index, rows in enumerate(self.data.eval_batches()):
                with self.autocast():
                    batch = self.batches.make(self.data.eval, rows, np.random.default_rng([0, index, 2]))
                    out = module(self.to_device(batch))
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

    def health_warning(self, metrics: dict[str, float]) -> str | None:
        check = getattr(self.unwrapped(), "health_warning", None)
        return check(metrics) if check is not None else None

    def finish(self, board) -> None:
        if self.last_eval_step != self.state.step:
            self.evaluate_and_log(board)
        if self.is_main:
            state = self.state
            quality = ", ".join(f"{k} {v:.4g}" for k, v in self.last_eval.items() if k != "step")
            log.info(f"{self.output}: {state.step} steps, {state.tokens:,} tokens in {state.elapsed / 60:.1f} min; "
                     f"{quality}")

    def export(self, directory: Path) -> None:
        """A complete Hugging Face model directory: weights, config, tokenizer files, arabert_pipeline.json."""
        self.unwrapped().export(directory)  # type: ignore[operator]  # an objectives.py module, typed Module
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


def pretrain(config: PretrainConfig, on_step: Callable[[Trainer], None] | None = None) -> bool:
    """Train as `config` says; True when the run completed (the final model is in config.output)."""
    return Trainer(config, on_step).train()

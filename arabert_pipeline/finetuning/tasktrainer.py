"""`TaskTrainer`: fine-tuning of an encoder for a labelled-text task on the one engine, as classification/ and ner/
run it (QA's QATrainer predates it and keeps its windows and decoders).

What it does for a task: the preprocessing read from the model dir's metadata (or the flag, checked against it); the
sets read through the task's reader with the leakage policy applied (sets.py); the tokenizer checked against the
preprocessing; the training rows (token ids and labels) hashed into the checkpoints' data key, so a checkpoint of other
data is refused; the model loaded with a fresh head of the task's labels; AdamW, warm-up and decay, clipping, bf16
where it pays, checkpoints and --resume (the engine); the dev score at every epoch's end and the best epoch kept
(FinetuneEngine); and at the end the model dir (config.json with id2label, tokenizer, arabert_pipeline.json recording
the preprocessing, labels, sets, leakage, dev scores, speed and peak memory) and every --eval set predicted and scored
into OUT/eval/.

A task subclasses it and supplies: `task` (the metadata's task name), `auto_class()`, `read_sets()`, `choose_labels`,
`training_rows(examples)` → (token-id rows, labels per row), `loss(outputs, batch)` when it is not the model's own,
`predictor()` (the task's model wrapper over the training model), `score(predictor, labelled set)` → scores with
`dev_metric` among them, and `write_predictions`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts.metadata import read_metadata, write_metadata
from ..artifacts.models import check_local_source, check_vocabulary_size, load_pretrained_model
from ..artifacts.paths import portable_path
from ..artifacts.writes import atomic_write
from ..errors import ConfigError
from ..outputs import MODEL_DIR_FILES, OutputKind
from ..tokenizer.export import save_pretrained_tokenizer
from ..tokenizer.load import load_pretrained_tokenizer
from ..tokenizer.markers import check_preprocessing_fits
from ..training import CHECKPOINTS, LOG_FILE, make_optimizer, parameter_groups
from ..training.checkpoints import quiet_transformers
from ..training.logs import peak_memory
from .batches import WIDTH_MULTIPLE, epoch_batches, pad
from .config import TaskConfig, eval_file_stem, local_inputs
from .modeldir import recorded_preprocessing
from .selection import FinetuneEngine

EVAL_DIR = "eval"


@dataclasses.dataclass
class TaskResult:
    output: Path
    train_examples: int
    steps: int
    seconds: float
    losses: list[float]
    dev_scores: list[float]
    metrics: dict[str, dict]  # eval set → scores
    completed: bool = True


class TaskTrainer(FinetuneEngine):
    """Set up with Subclass(config, log) (every check before training), then train(); run() does both and
    predicts the evaluation sets."""

    description = "finetune"
    task: str
    config: TaskConfig

    @property
    def output_kind(self) -> OutputKind:
        return OutputKind("finetune", names=(*MODEL_DIR_FILES, CHECKPOINTS, LOG_FILE, "tensorboard", EVAL_DIR),
                          markers=(CHECKPOINTS, LOG_FILE), metadata_marker=("task", self.task), resumable=True)

    def __init__(self, config: TaskConfig, log=None):
        config.check()
        self.config, self.say_to = config, log or logging.getLogger(__name__).info
        self.epochs, self.patience, self.max_steps = config.epochs, config.patience, config.max_steps
        super().__init__(config.loop_settings())

    # ------------------------------------------------------------------------------------------- what a task supplies

    def auto_class(self):
        raise NotImplementedError

    def read_sets(self):
        """finetuning.sets.LabelledSets of the config's sets."""
        raise NotImplementedError

    def choose_labels(self, sets) -> list[str]:
        raise NotImplementedError

    def training_rows(self, examples: list[dict]) -> tuple[list[list[int]], list]:
        raise NotImplementedError

    def predictor(self):
        raise NotImplementedError

    def score(self, predictor, labelled) -> tuple[dict[str, Any], list[dict]]:
        """(scores ×100 with self.dev_metric among them, one prediction record per example) of one set."""
        raise NotImplementedError

    def task_metadata(self) -> dict[str, Any]:
        return {}

    def describe_set(self, labelled) -> dict[str, Any]:
        return {"name": labelled.name, "path": portable_path(labelled.path), "examples": len(labelled.examples)}

    # ------------------------------------------------------------------------------------------- setup

    def inputs(self) -> list[str]:
        return local_inputs(self.config)

    def setup(self) -> None:
        import torch
        import transformers

        config = self.config
        recorded = read_metadata(config.model, missing_ok=True) if Path(config.model).is_dir() else {}
        self.pretrained = recorded
        self.preprocessing = recorded_preprocessing(
            config.model, recorded, config.preprocessing, how="pass --preprocessing (arabertv2 for "
            "aubmindlab/bert-base-arabertv2, arabertv02 for v0.2 models, none for mBERT)")
        self.sets = self.read_sets()
        self.labels = self.choose_labels(self.sets)
        self.tokenizer = load_pretrained_tokenizer(config.model)
        if not getattr(self.tokenizer, "is_fast", False):
            raise ConfigError(f"{config.model}: a fast tokenizer (tokenizer.json) is needed for character offsets")
        warning = check_preprocessing_fits(self.tokenizer, self.preprocessing, config.model)
        if warning:
            self.say(warning)
        started = time.perf_counter()
        self.rows, self.row_labels = self.training_rows(self.sets.examples)
        if not self.rows:
            raise ConfigError("no training example left")
        self.say(f"training on {len(self.sets.examples)} examples → {len(self.rows)} rows of ≤ "
                 f"{config.max_seq_length} tokens ({time.perf_counter() - started:.1f} s to preprocess and tokenize)")
        self.lengths = np.asarray([len(r) for r in self.rows])
        self.data_key = rows_key(self.rows, self.row_labels, len(self.tokenizer), self.labels)
        checkpoint = self.find_checkpoint()
        transformers.set_seed(config.seed)
        verbosity = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_error()
        try:
            with contextlib.nullcontext() if config.progress else quiet_transformers():
                model, info = load_pretrained_model(
                    self.auto_class(), config.model, dtype=torch.float32, num_labels=len(self.labels),
                    id2label=dict(enumerate(self.labels)), label2id={label: i for i, label in enumerate(self.labels)})
        finally:
            transformers.logging.set_verbosity(verbosity)
        check_vocabulary_size(model, self.tokenizer, config.model)
        if info["missing_keys"] and checkpoint is None:
            self.say(f"initialised {', '.join(sorted(info['missing_keys']))} (new {self.task} head)")
        optimizer = make_optimizer(parameter_groups(model, config.weight_decay, config.layer_lr_decay,
                                                    layers=model.config.num_hidden_layers), config.lr)
        self.prepare(model, optimizer, checkpoint)
        self.model.train()
        self.plan_schedule(checkpoint, config.warmup_ratio, len(self.rows), config.batch_size)

    # ------------------------------------------------------------------------------------------- the engine's hooks

    def epoch_plan(self, epoch: int) -> list[np.ndarray]:
        return epoch_batches(self.lengths, self.config.batch_size, self.config.seed, epoch)

    def make_batch(self, rows: np.ndarray, epoch: int, index: int):
        import torch

        labels = self.row_labels
        per_token = bool(labels) and isinstance(labels[0], list)
        batch = pad(self.rows, rows, self.tokenizer.pad_token_id or 0, WIDTH_MULTIPLE,
                    labels=labels if per_token else None)
        if not per_token:
            batch["labels"] = np.asarray([labels[i] for i in rows], dtype=np.int64)
        return self.to_device({k: torch.from_numpy(v) for k, v in batch.items()})

    def count_tokens(self, rows: np.ndarray) -> int:
        return int(self.lengths[rows].sum())

    def forward(self, batch):
        return {"loss": self.loss(self.model(**batch), batch)}

    def loss(self, outputs, batch):
        return outputs.loss

    def config_record(self) -> dict[str, Any]:
        return self.config.fingerprint()

    def config_differences(self, stored: dict[str, Any]) -> list[str]:
        return self.config.config_differences(stored)

    def has_dev(self) -> bool:
        return bool(self.sets.dev)

    def dev_score(self) -> float:
        predictor = self.predictor()
        scores = [self.score(predictor, labelled)[0][self.dev_metric] for labelled in self.sets.dev]
        # Several dev sets count alike, whatever their sizes.
        return float(np.mean(scores))

    def finish(self, board) -> None:
        if not self.is_main:
            return
        config = self.config
        self.unwrapped().eval()
        chosen = self.keep_best_epoch()
        seconds = max(self.state.elapsed, 1e-9)
        self.metadata = {
            "preprocessing": self.preprocessing,
            "task": self.task,
            "base_model": portable_path(config.model),
            "labels": list(self.labels),
            "max_seq_length": config.max_seq_length,
            "dev_metric": self.dev_metric,
            **self.task_metadata(),
            "training_data": [self._describe(f, self.sets.dropped) for f in self.sets.train],
            "dev_data": [self._describe(f, {}) for f in self.sets.dev],
            "evaluation_data": [self._describe(f, {}) for f in self.sets.eval],
            "leakage": {"policy": self.sets.policy, "counts": self.sets.leakage.counts(),
                        "dropped_train_examples": sum(self.sets.dropped.values())},
            "finetune": {**config.fingerprint(), "model": portable_path(config.model), "bf16_used": self.bf16,
                         "steps": self.state.step, "processes": self.world, "train_examples": len(self.sets.examples),
                         "train_rows": len(self.rows), "epoch_losses": self.losses, "dev_metric": self.dev_metric,
                         "dev_scores": self.dev_history, **chosen,
                         "seconds": round(self.state.elapsed, 1),
                         "tokens_per_second": round(self.state.tokens / seconds, 1),
                         "rows_per_second": round(self.state.step * config.batch_size * config.grad_accum
                                                  * self.world / seconds, 1),
                         **peak_memory(self.accelerator.device)},
            "pretrained": self.pretrained,
        }

    def _describe(self, labelled, dropped: dict[str, int]) -> dict[str, Any]:
        entry = self.describe_set(labelled)
        if dropped.get(labelled.name):
            entry["dropped_for_leakage"] = dropped[labelled.name]
        return entry

    def export_checkpoint(self, directory: Path) -> None:
        self.unwrapped().save_pretrained(directory)  # type: ignore[operator]  # a PreTrainedModel, typed Module
        save_pretrained_tokenizer(self.tokenizer, directory)

    def export(self, directory: Path) -> None:
        self.export_checkpoint(directory)
        write_metadata(directory, **self.metadata)

    # ------------------------------------------------------------------------------------------- the whole run

    def run_and_evaluate(self) -> TaskResult:
        started = time.time()
        if not self.train():
            return TaskResult(self.output, len(self.sets.examples), self.state.step, time.time() - started,
                              self.losses, self.dev_history, {}, completed=False)
        shutil.rmtree(self.output / CHECKPOINTS, ignore_errors=True)
        self.say(f"saved {self.output} ({self.state.step} steps, {time.time() - started:.0f} s)")
        metrics = {}
        if self.is_main and self.sets.eval:
            predictor = self.predictor()
            for labelled in self.sets.eval:
                scores, records = self.score(predictor, labelled)
                metrics[labelled.name] = scores
                stem = eval_file_stem(labelled.name)
                with atomic_write(self.output / EVAL_DIR / f"{stem}.predictions.jsonl") as f:
                    f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
                with atomic_write(self.output / EVAL_DIR / f"{stem}.metrics.json") as f:
                    json.dump(scores, f, indent=1, ensure_ascii=False)
                self.say(f"{labelled.name} ({len(labelled.examples)} examples): " + ", ".join(
                    f"{k} {v:.2f}" for k, v in scores.items() if isinstance(v, float)))
        return TaskResult(self.output, len(self.sets.examples), self.state.step, time.time() - started, self.losses,
                          self.dev_history, metrics)


def rows_key(rows, labels, vocabulary: int, label_names) -> str:
    """A hash of what fine-tuning trains on: a checkpoint of other data, tokenizer or labels is refused."""
    digest = hashlib.sha256(f"{vocabulary}|{','.join(label_names)}".encode())
    for row, label in zip(rows, labels, strict=True):
        digest.update(np.asarray(row, dtype=np.int32).tobytes() + b"|")
        digest.update(np.asarray(label, dtype=np.int64).tobytes() + b"|")
    return digest.hexdigest()


def run_task(trainer_class, config: TaskConfig, log=None) -> TaskResult:
    check_local_source(config.model)
    return trainer_class(config, log).run_and_evaluate()

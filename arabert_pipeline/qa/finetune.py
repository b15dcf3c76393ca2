"""Fine-tune any Hugging Face encoder checkpoint for extractive QA (`arabert-pipeline finetune`).

    run_finetune(FinetuneConfig(model="runs/mlm-small", protocol="offline", output="runs/qa-small",
                                drop_leaking_train=True, skip_misaligned=True))

Steps: read the training/dev/evaluation sets (SQuAD v1.1 files or registry names) → refuse leakage into dev or
evaluation data → align the gold answers through the model's preprocessing → sliding windows → train a start/end head
(AutoModelForQuestionAnswering: an MLM checkpoint gets a fresh QA head; BERT, ELECTRA, DeBERTa and XLNet work, what
differs per architecture is in architectures.py) → with dev sets,
score them after every epoch, keep the best epoch's weights (early stopping with `patience`) and choose the sentence
prior's weight on them → save a model dir that AutoModelForQuestionAnswering loads, with its tokenizer,
arabert_pipeline.json and the sentence prior's IDF table → predict and score every evaluation set (qa/metrics.py).

Choose on dev, report on test: dev sets decide the epoch and the prior; evaluation sets are only scored at the end.

Training runs on the package's one engine (training/, shared with `pretrain`): AdamW with BERT's exclusions and
optional layer-wise learning rates, warm-up + linear decay, clipping at norm 1, bf16 autocast where the hardware has
it, checkpoints that resume bit-for-bit (seeded per-epoch batch orders), Ctrl-C, OUT/log.jsonl, and one or several
GPUs through accelerate / torchrun:

    torchrun --nproc_per_node 4 -m arabert_pipeline.cli finetune --model runs/mlm -o runs/qa --protocol offline-dev

QATrainer adds what is QA's own: windows as batches, the dev score at every epoch's end (on the main process), the
best epoch's weights, early stopping, and the decoder and no-answer threshold chosen on dev before the model is written.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts import (
    MODEL_DIR_FILES, OutputKind, atomic_write, check_local_source, check_vocabulary_size, follow_umask,
    load_pretrained_model, portable_path, read_metadata, write_metadata,
)
from ..cliargs import BF16_CHOICES
from ..errors import ConfigError, InputError
from ..tokenizer.export import save_pretrained_tokenizer
from ..tokenizer.load import load_pretrained_tokenizer
from ..tokenizer.markers import check_preprocessing_fits
from ..training import (
    CHECKPOINTS, LOG_FILE, Engine, LoopSettings, make_optimizer, parameter_groups, warmup_steps,
)
from ..training.engine import quiet_transformers
from .align import QAPreprocessing, align_examples
from .architectures import prepare_qa_model
from .data import SquadFile, dataset_license, dataset_names, read_squad, unanswerable_examples
from .features import CONTEXT_TYPE, QUESTION_OVERLAP_TYPE, build_windows, check_fast_tokenizer
from .calibration import describe as describe_calibration
from .decoding import (DEV_METRIC, PLAIN_DECODING, best_decoding, calibrate, describe_decoding, describe_no_answer,
                       dev_answers, dev_score, tune_decoding, tune_null_threshold)
from .infer import DECODINGS, SENTENCE_IDF_FILE, QAModel, QASettings, collate
from .overlap import KeyIDF
from .leakage import LeakageReport, find_leakage

# Named train/evaluation presets. "paper" is the AraBERT paper's ARCD protocol; "offline" is what runs without
# Arabic-SQuAD (it is not distributed with the shared data).
# "offline-dev" keeps a dev split out of training (ARCD-train's arcd-dev articles and MLQA-ar dev) to choose on.
PROTOCOLS = {
    "paper": {"train": ["arabic-squad", "arcd-train"], "eval": ["arcd-test"]},
    "offline": {"train": ["arcd-train", "xquad-ar", "mlqa-ar-dev"], "eval": ["arcd-test", "tydiqa-goldp-ar-dev"]},
    "offline-dev": {"train": ["arcd-train-rest", "xquad-ar"], "dev": ["arcd-dev", "mlqa-ar-dev"],
                    "eval": ["arcd-test", "tydiqa-goldp-ar-dev"]},
}
# Settings added after checkpoints were first written (issue 41): an older checkpoint lacks them.
_ADDED_SETTINGS = ("grad_accum", "max_steps", "time_budget")
MAX_GRAD_NORM = 1.0  # BERT's fine-tuning recipe clips gradients at norm 1
WIDTH_MULTIPLE = 32  # batch widths are padded to multiples of this: few shapes, flat memory
LENGTH_POOL = 50  # batches per pool of windows sorted by length (epoch_batches)
LOG_EVERY = 20  # optimizer steps per log.jsonl row
BEST_WEIGHTS = "best.safetensors"  # in CHECKPOINTS: the weights of the best epoch on the dev sets so far
FINETUNE_OUTPUT = OutputKind("finetune", names=(*MODEL_DIR_FILES, CHECKPOINTS, LOG_FILE, "tensorboard", "eval",
                                                SENTENCE_IDF_FILE),
                             markers=(CHECKPOINTS, LOG_FILE), metadata_marker=("task", "question-answering"),
                             resumable=True)


@dataclasses.dataclass
class FinetuneConfig:
    """Fields mirror `arabert-pipeline finetune` flags; defaults are the AraBERT paper's for base-size models."""

    model: str  # MLM or QA checkpoint dir, or hub id
    output: str
    train: list[str] = dataclasses.field(default_factory=list)  # SQuAD files or registry names
    dev: list[str] = dataclasses.field(default_factory=list)  # scored after every epoch; the best epoch is kept
    eval: list[str] = dataclasses.field(default_factory=list)  # scored once, at the end
    # Kept out of training by the leakage guard but never predicted or scored: the test sets while choosing on dev,
    # so that the model chosen there is already the one to report on test.
    hold_out: list[str] = dataclasses.field(default_factory=list)
    protocol: str | None = None  # a PROTOCOLS name: fills train, dev and eval
    preprocessing: str | None = None  # required for checkpoints without arabert_pipeline.json
    epochs: int = 4
    lr: float = 3e-5
    batch_size: int = 32  # windows per micro-batch per process; a step reads batch_size × grad_accum × processes
    grad_accum: int = 1  # micro-batches per optimizer step: the paper's 32 as 8 × 4 where 32 windows do not fit
    max_steps: int | None = None  # stop the schedule (warm-up and decay included) after this many optimizer steps
    time_budget: float | None = None  # minutes: the schedule is fitted to them from the measured speed (engine)
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    layer_lr_decay: float = 1.0  # lr × decay^(layers above): ELECTRA's 0.8 keeps lower layers closer to pretraining
    patience: int = 0  # with dev sets: stop after this many epochs without a better dev F1 (0: run every epoch)
    question_overlap: bool = False  # mark context words shared with the question (token type 2; overlap.py)
    negatives: bool = False  # + each question with a paragraph of its article lacking the answer, labelled [CLS]
    # Decoding settings (QASettings); None: chosen on the dev sets, else the plain decoder's (0, False, "max-score").
    sentence_prior: float | None = None  # weight of the prior on the sentence sharing the question's words
    within_sentence: bool | None = None  # answers never cross a sentence boundary
    decoding: str | None = None  # "max-score" or "expected-f1"
    max_seq_length: int = 384
    doc_stride: int = 128
    max_question_tokens: int = 64
    max_answer_tokens: int = 30
    seed: int = 42
    bf16: str = "auto"  # auto: on a bf16 GPU, or a CPU where bf16 measures faster (training.optim.use_bf16)
    save_steps: int = 0  # extra checkpoints every N optimizer steps (one is always written per epoch)
    resume: str | None = None  # "latest" (what --resume alone means) or a checkpoint directory
    overwrite: bool = False  # replace an earlier finetune output at `output`
    skip_misaligned: bool = False  # drop (counted, reported) training answers whose answer_start is wrong
    allow_leakage: bool = False  # train even if evaluation contexts/questions occur in training
    drop_leaking_train: bool = False  # remove the training questions involved in a leak, then train
    download: bool = False  # fetch missing registered datasets from their upstream URL
    progress: bool = True

    def resolved(self) -> "FinetuneConfig":
        """Protocol expanded into train/eval, options validated."""
        config = dataclasses.replace(self)
        if isinstance(config.resume, bool):  # resume=True from Python callers of earlier versions
            config.resume = "latest" if config.resume else None
        if config.protocol is not None:
            if config.protocol not in PROTOCOLS:
                raise ConfigError(f"unknown protocol {config.protocol!r}: use one of {', '.join(PROTOCOLS)}")
            if config.train or config.eval or config.dev:
                raise ConfigError("--protocol sets the training, dev and evaluation data: drop --train/--dev/--eval "
                                  "or --protocol")
            config.train = list(PROTOCOLS[config.protocol]["train"])
            config.dev = list(PROTOCOLS[config.protocol].get("dev", []))
            config.eval = list(PROTOCOLS[config.protocol]["eval"])
        if not config.train:
            raise ConfigError("no training data: pass --train FILE_OR_NAME... or --protocol paper|offline")
        if config.bf16 not in BF16_CHOICES:
            raise ConfigError(f"bf16={config.bf16!r}: use one of {', '.join(BF16_CHOICES)}")
        if config.allow_leakage and config.drop_leaking_train:
            raise ConfigError("choose one of --allow-leakage and --drop-leaking-train")
        positive = ("epochs", "batch_size", "grad_accum", "max_seq_length", "doc_stride", "max_question_tokens",
                    "max_answer_tokens")
        for name in positive:
            if getattr(config, name) < 1:
                raise ConfigError(f"{name} must be ≥ 1, got {getattr(config, name)}")
        if config.max_steps is not None and config.max_steps < 1:
            raise ConfigError(f"max_steps must be ≥ 1, got {config.max_steps}")
        if not 0 <= config.warmup_ratio < 1:
            raise ConfigError(f"warmup_ratio must be in [0, 1), got {config.warmup_ratio}")
        if not 0 < config.layer_lr_decay <= 1:
            raise ConfigError(f"layer_lr_decay must be in (0, 1], got {config.layer_lr_decay}")
        if config.patience < 0:
            raise ConfigError(f"patience must be ≥ 0, got {config.patience}")
        if config.patience and not config.dev:
            raise ConfigError("patience needs dev sets to watch (--dev)")
        if config.sentence_prior is not None and config.sentence_prior < 0:
            raise ConfigError(f"sentence_prior must be ≥ 0, got {config.sentence_prior}")
        if config.decoding is not None and config.decoding not in DECODINGS:
            raise ConfigError(f"decoding={config.decoding!r}: use one of {', '.join(DECODINGS)}")
        return config

    def fingerprint(self) -> dict[str, Any]:
        """What a resumed run must share with the interrupted one (a time budget may change: the engine refits the
        schedule to the new one)."""
        skip = {"output", "resume", "overwrite", "progress", "download", "save_steps"}
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in skip}

    def loop_settings(self) -> LoopSettings:
        return LoopSettings(
            output=self.output, lr=self.lr, warmup=self.warmup_ratio, seed=self.seed, weight_decay=self.weight_decay,
            layer_lr_decay=self.layer_lr_decay, bf16=self.bf16, grad_accum=self.grad_accum,
            max_grad_norm=MAX_GRAD_NORM, time_budget=self.time_budget, log_every=LOG_EVERY,
            save_every=self.save_steps, keep_checkpoints=1, resume=self.resume, overwrite=self.overwrite,
            progress=self.progress,
        )


@dataclasses.dataclass
class FinetuneResult:
    output: Path
    train_questions: int
    train_windows: int
    steps: int
    seconds: float
    losses: list[float]  # mean training loss per epoch
    alignment: str
    predictions: dict[str, Path]  # eval set → predictions file
    metrics: dict[str, dict]  # eval set → EM/F1/SM ×100, SOQAL-compatible and Arabic-correct
    completed: bool = True  # False: interrupted (Ctrl-C); a checkpoint was saved, --resume continues


def run_finetune(config: FinetuneConfig, log=None) -> FinetuneResult:
    """Train, choose on dev, save, predict. `log` receives one-line progress messages (default: this module's
    logger at INFO, which the CLI prints)."""
    log = log or logging.getLogger(__name__).info
    check_local_source(config.model)
    started = time.time()
    trainer = QATrainer(config.resolved(), log)
    if not trainer.train():
        return trainer.result(started, completed=False)
    shutil.rmtree(trainer.output / CHECKPOINTS, ignore_errors=True)
    trainer.say(f"saved {trainer.output} ({trainer.state.step} steps, {time.time() - started:.0f} s)")
    return trainer.result(started)


class QATrainer(Engine):
    """Fine-tuning on the training engine: set up with QATrainer(config, log) (data read, leakage refused, answers
    aligned, windows built, model loaded: every check before training), then train()."""

    output_kind = FINETUNE_OUTPUT
    description = "finetune"

    def __init__(self, config: FinetuneConfig, log):
        self.config, self.say_to = config, log
        super().__init__(config.loop_settings())

    def say(self, message: str) -> None:
        if self.is_main:
            self.say_to(message)

    def inputs(self) -> list[str]:
        config = self.config
        return [source for source in [config.model, *config.train, *config.dev, *config.eval, *config.hold_out]
                if Path(source).exists()]

    def setup(self) -> None:
        import torch
        import transformers
        from transformers import AutoModelForQuestionAnswering

        config = self.config
        self.preprocessing = _preprocessing_name(config)

        def read(sources: list[str], misaligned: str) -> list[SquadFile]:
            return [read_squad(source, misaligned=misaligned, download=config.download) for source in sources]

        self.train_files = read(config.train, "skip" if config.skip_misaligned else "error")
        self.dev_files, self.eval_files = read(config.dev, "keep"), read(config.eval, "keep")
        held_out_files = read(config.hold_out, "keep")
        for f in self.train_files + self.dev_files + self.eval_files:
            if f.misaligned:
                self.say(f.describe_misaligned())
        # Dev and held-out sets are guarded like evaluation sets: a leak into any is refused (or dropped) the same way.
        self.leakage = find_leakage([(f.name, f.examples) for f in self.train_files],
                                    [(f.name, f.examples) for f in self.dev_files + self.eval_files + held_out_files])
        train_examples, self.dropped = _apply_leakage_policy(self.leakage, self.train_files, config, self.say)

        self.tokenizer = load_pretrained_tokenizer(config.model)
        check_fast_tokenizer(self.tokenizer)
        warning = check_preprocessing_fits(self.tokenizer, self.preprocessing, config.model)
        if warning:
            self.say(warning)
        qa_preprocessing = QAPreprocessing(self.preprocessing)
        aligned, self.alignment = align_examples(train_examples, qa_preprocessing)
        self.say(self.alignment.summary())
        aligned = [a for a in aligned if a["spans"]]
        if not aligned:
            raise ConfigError("no training question left with an aligned answer")
        negatives = []
        if config.negatives:
            kept = {a["id"] for a in aligned}
            negatives, _ = align_examples(
                unanswerable_examples([e for e in train_examples if str(e["id"]) in kept], seed=config.seed),
                qa_preprocessing)
            self.say(f"+ {len(negatives)} unanswerable pairs (a question with another paragraph of its article), "
                     "labelled no-answer")
        self.windows = build_windows(
            self.tokenizer,
            [a["question"] for a in aligned + negatives],
            [a["aligned"].text for a in aligned + negatives],
            max_seq_length=config.max_seq_length,
            doc_stride=config.doc_stride,
            max_question_tokens=config.max_question_tokens,
            answer_spans=[a["spans"][0] for a in aligned] + [None] * len(negatives),
            question_overlap=config.question_overlap,
        )
        self.train_questions, self.train_negatives = len(aligned), len(negatives)
        self.lengths = np.asarray([len(ids) for ids in self.windows.input_ids])
        self.say(f"training on {len(aligned) + len(negatives)} questions → {len(self.windows)} windows of ≤ "
                 f"{config.max_seq_length} tokens")
        # The sentence prior's IDF is counted over the training contexts, as the model will see them (preprocessed).
        self.sentence_idf = KeyIDF.from_texts(sorted({a["aligned"].text for a in aligned}))
        self.data_key = windows_key(self.windows, self.tokenizer)
        checkpoint = self.find_checkpoint()

        transformers.set_seed(config.seed)
        verbosity = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_error()  # its load report lists the fresh QA head: said below in one line
        try:
            # fp32 master weights whatever the checkpoint's storage dtype; bf16 is only used inside autocast.
            with contextlib.nullcontext() if config.progress else quiet_transformers():  # its "Loading weights" bar
                model, info = load_pretrained_model(AutoModelForQuestionAnswering, config.model, dtype=torch.float32)
        finally:
            transformers.logging.set_verbosity(verbosity)
        check_vocabulary_size(model, self.tokenizer, config.model)
        prepare_qa_model(model, question_overlap=config.question_overlap, source=config.model)
        if info["missing_keys"] and checkpoint is None:
            self.say(f"initialised {', '.join(sorted(info['missing_keys']))} (new question-answering head)")
        if config.question_overlap and add_question_overlap_type(model) and checkpoint is None:
            self.say("token type 2 (context word shared with the question) added, initialised as the context type")
        optimizer = make_optimizer(parameter_groups(model, config.weight_decay, config.layer_lr_decay,
                                                    layers=model.config.num_hidden_layers), config.lr)
        self.prepare(model, optimizer, checkpoint)
        self.model.train()
        self.settings = QASettings(config.max_seq_length, config.doc_stride, config.max_question_tokens,
                                   config.max_answer_tokens, question_overlap=config.question_overlap)
        if checkpoint is None:
            self.losses, self.running, self.dev_history = [], [], []
            total = self.steps_per_epoch() * config.epochs
            if total < 1:
                raise ConfigError(f"{len(self.windows)} training windows do not fill one step of {config.batch_size} × "
                                  f"{config.grad_accum} (--grad-accum) on each of {self.world} processes: use a "
                                  "smaller --batch-size")
            total = min(total, self.step_cap())
            if self.budget is not None:
                total = min(total, self.steps_within_budget())
                self.say(f"time budget: {total} steps planned from the measured speed")
            self.state.total_steps, self.state.warmup_steps = total, warmup_steps(config.warmup_ratio, total)
        else:
            self.say(f"resumed from {checkpoint} at step {self.state.step}/{self.state.total_steps}")

    # ------------------------------------------------------------------------------------------- the engine's hooks

    def epoch_plan(self, epoch: int) -> list[np.ndarray]:
        return epoch_batches(self.windows, self.config.batch_size, self.config.seed, epoch)

    def step_cap(self) -> int:
        """--epochs and --max-steps: a --time-budget refit never plans beyond them."""
        total = self.steps_per_epoch() * self.config.epochs
        return total if self.config.max_steps is None else min(total, self.config.max_steps)

    def make_batch(self, rows: np.ndarray, epoch: int, index: int):
        return self.to_device(collate(self.windows, rows, self.tokenizer.pad_token_id or 0, labels=True,
                                      multiple=WIDTH_MULTIPLE))

    def count_tokens(self, rows: np.ndarray) -> int:
        return int(self.lengths[rows].sum())

    def forward(self, batch):
        return {"loss": self.model(**batch).loss}

    def config_record(self) -> dict[str, Any]:
        return self.config.fingerprint()

    def config_differences(self, stored: dict[str, Any]) -> list[str]:
        current = self.config.fingerprint()
        # A checkpoint written before a setting existed ran with its default (grad_accum 1, no max_steps, ...).
        stored = {**{f.name: f.default for f in dataclasses.fields(FinetuneConfig) if f.name in _ADDED_SETTINGS},
                  **stored}
        budgets = current.get("time_budget") is not None and stored.get("time_budget") is not None
        return sorted(k for k in current.keys() | stored.keys() if stored.get(k) != current.get(k)
                      and not (budgets and k == "time_budget"))

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

    def after_step(self, board) -> bool:
        """At each epoch's end: its mean loss, the dev score, the best weights so far, early stopping, a checkpoint."""
        config, state = self.config, self.state
        self.running.append(float(self.last_metrics["loss"]))
        if not self.epoch_ends_here():
            return False
        self.losses.append(float(np.mean(self.running)))
        self.running = []
        message = f"epoch {state.epoch + 1}/{config.epochs}: mean loss {self.losses[-1]:.4f}"
        stop = False
        if self.dev_files:
            if self.is_main:
                model = self.unwrapped()
                model.eval()
                qa = QAModel(model, self.tokenizer, self.preprocessing, self.settings)
                self.dev_history.append(dev_score(qa, self.dev_files, config.batch_size))
                model.train()
                if int(np.argmax(self.dev_history)) == len(self.dev_history) - 1:
                    _save_best_weights(self.output, model)
                self.log({"step": state.step, "epoch": state.epoch + 1, f"dev_{DEV_METRIC}": self.dev_history[-1]},
                         board)
            self.dev_history = self.broadcast(self.dev_history)
            best = int(np.argmax(self.dev_history))
            message += f"; dev {DEV_METRIC} {self.dev_history[-1]:.2f} (best: epoch {best + 1})"
            stop = bool(config.patience) and len(self.dev_history) - 1 - best >= config.patience
        self.say(message)
        if stop:
            self.say(f"early stop: no better dev {DEV_METRIC} for {config.patience} epoch(s)")
        elif state.step < state.total_steps and state.step != self.last_saved_step:
            self.save_checkpoint()
        return stop

    def keeps_final_checkpoint(self) -> bool:
        return False  # the finished model replaces the checkpoints

    def finish(self, board) -> None:
        """The best epoch's weights; the decoder and the no-answer threshold chosen on dev; the model's metadata."""
        if not self.is_main:
            return
        config, model = self.config, self.unwrapped()
        model.eval()
        planned = self.steps_per_epoch() * config.epochs
        if self.state.step < planned:
            self.say(f"ended after {self.state.step} of the {planned} steps of {config.epochs} epoch(s) "
                     "(--max-steps / --time-budget)")
        chosen = {}
        if self.dev_history:
            best = int(np.argmax(self.dev_history))
            if best != len(self.dev_history) - 1:
                model.load_state_dict(_load_best_weights(self.output), strict=True)
            chosen["epoch"] = best + 1
            self.say(f"kept epoch {best + 1} (dev {DEV_METRIC} {self.dev_history[best]:.2f})")
        fixed = {"sentence_prior": config.sentence_prior, "within_sentence": config.within_sentence,
                 "decoding": config.decoding}
        decoding, decoding_scores = dict(PLAIN_DECODING), []
        decoding.update({name: value for name, value in fixed.items() if value is not None})
        if self.dev_files and None in fixed.values():
            decoding_scores = tune_decoding(self.qa_model(), self.dev_files, config.batch_size, fixed)
            decoding = best_decoding(decoding_scores)
            self.say("decoding on dev: " + "; ".join(f"{describe_decoding(row)} → {row['score']:.2f}"
                                                     for row in decoding_scores)
                     + f"; chose {describe_decoding(decoding)}")
        self.settings = dataclasses.replace(self.settings, **{**decoding,
                                                              "sentence_prior": float(decoding["sentence_prior"])})
        no_answer, calibration_report = {}, {}
        if self.dev_files:
            answers = dev_answers(self.qa_model(), self.dev_files, config.batch_size)
            no_answer = tune_null_threshold(self.qa_model(), self.dev_files, config.batch_size, answers)
            calibration, calibration_report = calibrate(answers, no_answer["threshold"])
            self.settings = dataclasses.replace(self.settings, null_score_diff_threshold=no_answer["threshold"],
                                                calibration=calibration)
            self.say(describe_no_answer(no_answer))
            self.say(describe_calibration(calibration_report))
        report = self.alignment
        self.metadata = {
            "preprocessing": self.preprocessing,
            "task": "question-answering",
            "base_model": portable_path(config.model),
            **dataclasses.asdict(self.settings),
            "training_data": [_describe(f, self.dropped) for f in self.train_files],
            "dev_data": [_describe(f, {}) for f in self.dev_files],
            "evaluation_data": [_describe(f, {}) for f in self.eval_files],
            "alignment": {"answers": report.answers, "aligned": report.aligned, "exact": report.exact,
                          "rate": report.rate, "unaligned_ids": report.unaligned_ids},
            "leakage": {"policy": _leakage_policy(config), "counts": self.leakage.counts(),
                        "dropped_train_questions": sum(self.dropped.values())},
            "finetune": {**config.fingerprint(), "model": portable_path(config.model), "bf16_used": self.bf16,
                         "steps": self.state.step, "processes": self.world, "train_questions": self.train_questions,
                         "train_negatives": self.train_negatives, "train_windows": len(self.windows),
                         "epoch_losses": self.losses, "dev_metric": DEV_METRIC, "dev_scores": self.dev_history,
                         **chosen, "decoding_dev_scores": decoding_scores, "no_answer_dev": no_answer,
                         "calibration_dev": calibration_report},
            "pretrained": read_metadata(config.model, missing_ok=True) if Path(config.model).is_dir() else {},
        }

    def qa_model(self) -> QAModel:
        return QAModel(self.unwrapped(), self.tokenizer, self.preprocessing, self.settings,
                       sentence_idf=self.sentence_idf)

    def export_checkpoint(self, directory: Path) -> None:
        """A checkpoint's model: the weights at that step, loadable with the tokenizer (no decoder settings yet)."""
        self.unwrapped().save_pretrained(directory)
        save_pretrained_tokenizer(self.tokenizer, directory)

    def export(self, directory: Path) -> None:
        self.export_checkpoint(directory)
        with atomic_write(directory / SENTENCE_IDF_FILE) as f:
            json.dump(self.sentence_idf.to_json(), f, ensure_ascii=False, separators=(",", ":"))
        write_metadata(directory, **self.metadata)

    def result(self, started: float, completed: bool = True) -> FinetuneResult:
        """Predict and score every evaluation set (after a completed run, on the main process)."""
        predictions, metrics = {}, {}
        if completed and self.is_main:
            qa = self.qa_model()
            for f in self.eval_files:
                predictions[f.name], metrics[f.name] = evaluate_file(qa, f, self.output / "eval",
                                                                     self.config.batch_size)
                scores = ", ".join(f"{k} {v:.1f}" for k, v in metrics[f.name].items() if k != "questions")
                self.say(f"{f.name} ({len(f.examples)} questions): {scores}; predictions in {predictions[f.name]}")
        return FinetuneResult(self.output, self.train_questions, len(self.windows), self.state.step,
                              time.time() - started, self.losses, self.alignment.summary(), predictions, metrics,
                              completed)


def windows_key(windows, tokenizer) -> str:
    """A hash of what fine-tuning trains on (token ids, token types, labels, vocabulary size): a checkpoint of other
    data, or of data built by another tokenizer or recipe, is refused."""
    digest = hashlib.sha256(str(len(tokenizer)).encode())
    for rows in (windows.input_ids, windows.token_type_ids or []):
        for row in rows:
            digest.update(np.asarray(row, dtype=np.int32).tobytes() + b"|")
    for labels in (windows.start_positions, windows.end_positions):
        digest.update(np.asarray(labels, dtype=np.int64).tobytes())
    return digest.hexdigest()


def epoch_batches(windows, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """The batches of one epoch: every window once, in batches of windows of similar length, in random order.

    Windows are shuffled, cut into pools of `LENGTH_POOL` batches, sorted by length within a pool and batched, and the
    batches shuffled: a batch pads to its own longest window rather than to the longest of a random draw (a third
    less compute on ARCD-like contexts), while each batch still mixes questions from all over the training data.
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(windows))
    lengths = np.asarray([len(ids) for ids in windows.input_ids])
    pool = batch_size * LENGTH_POOL
    batches = []
    for start in range(0, len(order), pool):
        chunk = order[start : start + pool]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def add_question_overlap_type(model) -> bool:
    """Give the model a third token type (row 2 starts as a copy of the context type 1); False if it has one."""
    import torch

    embeddings = model.base_model.embeddings.token_type_embeddings
    if embeddings.num_embeddings > QUESTION_OVERLAP_TYPE:
        return False
    grown = torch.nn.Embedding(QUESTION_OVERLAP_TYPE + 1, embeddings.embedding_dim)
    with torch.no_grad():
        grown.weight[: embeddings.num_embeddings] = embeddings.weight
        grown.weight[QUESTION_OVERLAP_TYPE] = embeddings.weight[CONTEXT_TYPE]
    model.base_model.embeddings.token_type_embeddings = grown.to(embeddings.weight.device)
    model.config.type_vocab_size = QUESTION_OVERLAP_TYPE + 1
    return True


def evaluate_file(qa: QAModel, squad: SquadFile, directory: Path, batch_size: int) -> tuple[Path, dict[str, float]]:
    """Predict one evaluation file: answers as JSON and EM/F1/SM (×100, both metric variants) beside it.

    The predictions file is `evaluate`'s format, {id: {"text", "start"}} (start in the original context), so that
    `arabert-pipeline evaluate --predictions` scores it exactly as the model was scored here.
    """
    from .metrics import SCORE_KEYS, score_question

    answers = qa.predict(squad.examples, batch_size=batch_size)
    predictions = {str(example["id"]): {"text": found[0].text, "start": found[0].start}
                   for example, found in zip(squad.examples, answers) if found}
    scores = [
        score_question(example, found[0].text if found else None, found[0].start if found else None)
        for example, found in zip(squad.examples, answers)
    ]
    metrics = {key: 100.0 * float(np.mean([s[key] for s in scores])) for key in SCORE_KEYS}
    metrics["questions"] = len(scores)
    stem = squad.name if squad.name in dataset_names() else Path(squad.name).stem
    path = directory / f"{stem}.predictions.json"
    with atomic_write(path) as f:
        json.dump(predictions, f, ensure_ascii=False, indent=1)
    with atomic_write(directory / f"{stem}.metrics.json") as f:
        json.dump(metrics, f, indent=1)
    return path, metrics


def _preprocessing_name(config: FinetuneConfig) -> str:
    stored = read_metadata(config.model, missing_ok=True).get("preprocessing") if Path(config.model).is_dir() else None
    if stored and config.preprocessing and stored != config.preprocessing:
        raise ConfigError(f"{config.model} was trained with preprocessing {stored!r}, not {config.preprocessing!r}")
    name = config.preprocessing or stored
    if not name:
        raise ConfigError(
            f"{config.model} does not record its preprocessing (no arabert_pipeline.json): pass --preprocessing "
            "(arabertv2 for aubmindlab/bert-base-arabertv2, arabertv02 for v0.2 models, none for mBERT)"
        )
    return name


def _apply_leakage_policy(report: LeakageReport, train_files: list[SquadFile], config: FinetuneConfig, log):
    """Training examples to use, and how many were dropped per training set."""
    examples = [e for f in train_files for e in f.examples]
    if report.clean:
        log(report.summary())
        return examples, {}
    if config.allow_leakage:
        log("WARNING: training despite leakage (--allow-leakage); scores on these evaluation sets are inflated:\n"
            + report.summary())
        return examples, {}
    if not config.drop_leaking_train:
        raise ConfigError(
            "training and evaluation data overlap:\n" + report.summary() + "\nPass --drop-leaking-train to remove "
            "the training questions involved, or --allow-leakage to train anyway (scores would be inflated)."
        )
    leaking = report.train_ids()
    kept, dropped = [], {}
    for f in train_files:
        for example in f.examples:
            if (f.name, example["id"]) in leaking:
                dropped[f.name] = dropped.get(f.name, 0) + 1
            else:
                kept.append(example)
    log(report.summary() + "\ndropped training questions involved in a leak: "
        + ", ".join(f"{name} {count}" for name, count in dropped.items()))
    return kept, dropped


def _leakage_policy(config: FinetuneConfig) -> str:
    return "allow" if config.allow_leakage else "drop" if config.drop_leaking_train else "refuse"


def _describe(f: SquadFile, dropped: dict[str, int]) -> dict[str, Any]:
    entry = {"name": f.name, "path": portable_path(f.path), "questions": len(f.examples),
             "misaligned": {"policy": f.policy, "ids": [m["id"] for m in f.misaligned]}}
    if dataset_license(f.name):
        entry["license"] = dataset_license(f.name)
    if dropped.get(f.name):
        entry["dropped_for_leakage"] = dropped[f.name]
    return entry


def _save_best_weights(output: Path, model) -> None:
    from safetensors.torch import save_file

    (output / CHECKPOINTS).mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    tmp = output / CHECKPOINTS / f".{BEST_WEIGHTS}.tmp"
    save_file(tensors, str(tmp))
    follow_umask(tmp)
    os.replace(tmp, output / CHECKPOINTS / BEST_WEIGHTS)


def _load_best_weights(output: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(output / CHECKPOINTS / BEST_WEIGHTS))

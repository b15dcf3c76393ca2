"""Fine-tune any Hugging Face encoder checkpoint for extractive QA (`arabert-pipeline finetune`).

    run_finetune(FinetuneConfig(model="runs/mlm-small", protocol="offline", output="runs/qa-small",
                                drop_leaking_train=True, skip_misaligned=True))

Steps: read the training/dev/evaluation sets (SQuAD v1.1 files or registry names) and refuse leakage into dev or
evaluation data, as every fine-tuning task does (qa.data.read_squad_sets, finetuning/sets.py) → align the gold answers
through the model's preprocessing → sliding windows → train a start/end head (AutoModelForQuestionAnswering: an MLM
checkpoint gets a fresh QA head; BERT, ELECTRA, DeBERTa and XLNet work, what differs per architecture is in
architectures.py) → with dev sets, score them after every epoch, keep the best epoch's weights (early stopping with
`patience`) and choose the sentence prior's weight on them → save a model dir that AutoModelForQuestionAnswering loads,
with its tokenizer, arabert_pipeline.json and the sentence prior's IDF table → predict and score every evaluation set
(qa/metrics.py).

Choose on dev, report on test: dev sets decide the epoch and the prior; evaluation sets are only scored at the end.

Training runs on the package's one engine (training/, shared with `pretrain`): AdamW with BERT's exclusions and
optional layer-wise learning rates, warm-up + linear decay, clipping at norm 1, bf16 autocast where the hardware has
it, checkpoints that resume bit-for-bit (seeded per-epoch batch orders), Ctrl-C, OUT/log.jsonl, and one or several
GPUs through accelerate / torchrun:

    torchrun --nproc_per_node 4 -m arabert_pipeline.cli finetune --model runs/mlm -o runs/qa --protocol offline-dev

QATrainer is a finetuning.FinetuneEngine, the engine hook every task shares (the dev score at every epoch's end on
the main process, the best epoch's weights, early stopping), and adds what is QA's own: windows as batches, the dev
metric (qa/metrics.py DEV_METRIC) and the decoder and no-answer threshold chosen on dev before the model is written.
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

from ...artifacts.metadata import read_metadata, write_metadata
from ...artifacts.models import check_local_source, check_vocabulary_size, load_pretrained_model
from ...artifacts.paths import portable_path
from ...artifacts.writes import atomic_write
from ...errors import ConfigError
from ...finetuning.batches import epoch_batches as shared_epoch_batches
from ...finetuning.config import eval_file_stem, local_inputs
from ...finetuning.modeldir import recorded_preprocessing
from ...finetuning.selection import FinetuneEngine
from ...outputs import MODEL_DIR_FILES, OutputKind
from ...tokenizer.export import save_pretrained_tokenizer
from ...tokenizer.load import load_pretrained_tokenizer
from ...tokenizer.markers import check_preprocessing_fits
from ...training import CHECKPOINTS, LOG_FILE, make_optimizer, parameter_groups
from ...training.checkpoints import quiet_transformers
from ..align import QAPreprocessing, align_examples
from ..data import DIGEST_KEY, SquadFile, dataset_license, read_squad_sets, unanswerable_examples
from ..metrics import DEV_METRIC
from ..overlap import KeyIDF
from .architectures import prepare_qa_model
from .bonuses import SENTENCE_IDF_FILE
from .calibration import describe as describe_calibration
from .config import ADDED_SETTINGS, FinetuneConfig
from .features import CONTEXT_TYPE, QUESTION_OVERLAP_TYPE, build_windows, check_fast_tokenizer, collate
from .model import QAModel
from .settings import PLAIN_DECODING, QASettings
from .tune import (
    best_decoding,
    calibrate,
    describe_decoding,
    describe_leading_words,
    describe_no_answer,
    dev_answers,
    dev_passes,
    dev_score,
    tune_decoding,
    tune_leading_words,
    tune_null_threshold,
)

WIDTH_MULTIPLE = 32  # batch widths are padded to multiples of this: few shapes, flat memory
FINETUNE_OUTPUT = OutputKind("finetune", names=(*MODEL_DIR_FILES, CHECKPOINTS, LOG_FILE, "tensorboard", "eval",
                                                SENTENCE_IDF_FILE),
                             markers=(CHECKPOINTS, LOG_FILE), metadata_marker=("task", "question-answering"),
                             resumable=True)


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


class QATrainer(FinetuneEngine):
    """Fine-tuning on the training engine: set up with QATrainer(config, log) (data read, leakage refused, answers
    aligned, windows built, model loaded: every check before training), then train()."""

    output_kind = FINETUNE_OUTPUT
    description = "finetune"
    dev_metric = DEV_METRIC
    unit = "training windows"

    def __init__(self, config: FinetuneConfig, log):
        self.config, self.say_to = config, log
        self.epochs, self.patience, self.max_steps = config.epochs, config.patience, config.max_steps
        super().__init__(config.loop_settings())

    def inputs(self) -> list[str]:
        return local_inputs(self.config)

    def setup(self) -> None:
        import torch
        import transformers
        from transformers import AutoModelForQuestionAnswering

        config = self.config
        # Only a local checkpoint's own metadata counts here: a hub id's preprocessing is given with the flag.
        recorded = read_metadata(config.model, missing_ok=True) if Path(config.model).is_dir() else {}
        self.preprocessing = recorded_preprocessing(
            config.model, recorded, config.preprocessing, how="pass --preprocessing (arabertv2 for "
            "aubmindlab/bert-base-arabertv2, arabertv02 for v0.2 models, none for mBERT)")
        sets = read_squad_sets(train=config.train, dev=config.dev, eval=config.eval, hold_out=config.hold_out,
                               misaligned="skip" if config.skip_misaligned else "error",
                               policy=config.leakage_policy(), download=config.download, say=self.say)
        self.train_files, self.dev_files, self.eval_files = sets.train, sets.dev, sets.eval
        self.leakage, self.dropped, train_examples = sets.leakage, sets.dropped, sets.examples

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
        negatives: list[dict[str, Any]] = []
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
        self.plan_schedule(checkpoint, config.warmup_ratio, len(self.windows), config.batch_size)

    # ------------------------------------------------------------------------------------------- the engine's hooks

    def epoch_plan(self, epoch: int) -> list[np.ndarray]:
        return epoch_batches(self.windows, self.config.batch_size, self.config.seed, epoch)

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
        stored = {**{f.name: f.default for f in dataclasses.fields(FinetuneConfig) if f.name in ADDED_SETTINGS},
                  **stored}
        budgets = current.get("time_budget") is not None and stored.get("time_budget") is not None
        return sorted(k for k in current.keys() | stored.keys() if stored.get(k) != current.get(k)
                      and not (budgets and k == "time_budget"))

    def has_dev(self) -> bool:
        return bool(self.dev_files)

    def dev_score(self) -> float:
        qa = QAModel(self.unwrapped(), self.tokenizer, self.preprocessing, self.settings)
        return dev_score(qa, self.dev_files, self.config.batch_size)

    def finish(self, board) -> None:
        """The best epoch's weights; the decoder and the no-answer threshold chosen on dev; the model's metadata."""
        if not self.is_main:
            return
        config = self.config
        self.unwrapped().eval()
        chosen = self.keep_best_epoch()
        fixed = {"sentence_prior": config.sentence_prior, "within_sentence": config.within_sentence,
                 "decoding": config.decoding}
        decoding, decoding_scores = dict(PLAIN_DECODING), []
        decoding.update({name: value for name, value in fixed.items() if value is not None})
        # The settings change below; the logits they decode do not.
        passes = dev_passes(self.qa_model(), self.dev_files, config.batch_size) if self.dev_files else []
        if self.dev_files and None in fixed.values():
            decoding_scores = tune_decoding(self.qa_model(), passes, fixed)
            decoding = best_decoding(decoding_scores)
            self.say("decoding on dev: " + "; ".join(f"{describe_decoding(row)} → {row['score']:.2f}"
                                                     for row in decoding_scores)
                     + f"; chose {describe_decoding(decoding)}")
        self.settings = dataclasses.replace(self.settings, **{**decoding,
                                                              "sentence_prior": float(decoding["sentence_prior"])})
        no_answer: dict[str, Any] = {}
        calibration_report: dict[str, Any] = {}
        leading: dict[str, Any] = {}
        if self.dev_files:
            leading = tune_leading_words(self.qa_model(), passes)
            self.settings = dataclasses.replace(self.settings, leading_words=leading["leading_words"])
            self.say(describe_leading_words(leading))
            answers = dev_answers(self.qa_model(), passes)
            no_answer = tune_null_threshold(answers)
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
            "leakage": {"policy": config.leakage_policy(), "counts": self.leakage.counts(),
                        "dropped_train_questions": sum(self.dropped.values())},
            "finetune": {**config.fingerprint(), "model": portable_path(config.model), "bf16_used": self.bf16,
                         "steps": self.state.step, "processes": self.world, "train_questions": self.train_questions,
                         "train_negatives": self.train_negatives, "train_windows": len(self.windows),
                         "epoch_losses": self.losses, "dev_metric": DEV_METRIC, "dev_scores": self.dev_history,
                         **chosen, "decoding_dev_scores": decoding_scores, "leading_words_dev": leading,
                         "no_answer_dev": no_answer,
                         "calibration_dev": calibration_report},
            "pretrained": read_metadata(config.model, missing_ok=True) if Path(config.model).is_dir() else {},
        }

    def qa_model(self) -> QAModel:
        return QAModel(self.unwrapped(), self.tokenizer, self.preprocessing, self.settings,
                       sentence_idf=self.sentence_idf)

    def export_checkpoint(self, directory: Path) -> None:
        """A checkpoint's model: the weights at that step, loadable with the tokenizer (no decoder settings yet)."""
        self.unwrapped().save_pretrained(directory)  # type: ignore[operator]  # a PreTrainedModel, typed Module
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
    """The batches of one epoch: every window once, in batches of windows of similar length, in random order
    (finetuning/batches.py, shared with every task): a third less compute on ARCD-like contexts than random batches."""
    return shared_epoch_batches([len(ids) for ids in windows.input_ids], batch_size, seed, epoch)


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
    from ..metrics import SCORE_KEYS, score_question

    answers = qa.predict(squad.examples, batch_size=batch_size)
    predictions = {str(example["id"]): {"text": found[0].text, "start": found[0].start}
                   for example, found in zip(squad.examples, answers, strict=True) if found}
    scores = [
        score_question(example, found[0].text if found else None, found[0].start if found else None)
        for example, found in zip(squad.examples, answers, strict=True)
    ]
    metrics = {key: 100.0 * float(np.mean([s[key] for s in scores])) for key in SCORE_KEYS}
    metrics["questions"] = len(scores)
    stem = eval_file_stem(squad.name)
    path = directory / f"{stem}.predictions.json"
    with atomic_write(path) as f:
        json.dump(predictions, f, ensure_ascii=False, indent=1)
    with atomic_write(directory / f"{stem}.metrics.json") as f:
        json.dump(metrics, f, indent=1)
    return path, metrics


def _describe(f: SquadFile, dropped: dict[str, int]) -> dict[str, Any]:
    # The digest lets tune-decoding and soup know a training set by its content, whatever name or path it is given by.
    entry = {"name": f.name, "path": portable_path(f.path), DIGEST_KEY: f.content_digest(),
             "questions": len(f.examples),
             "misaligned": {"policy": f.policy, "ids": [m["id"] for m in f.misaligned]}}
    if dataset_license(f.name):
        entry["license"] = dataset_license(f.name)
    if dropped.get(f.name):
        entry["dropped_for_leakage"] = dropped[f.name]
    return entry

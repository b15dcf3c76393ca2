"""Fine-tune any Hugging Face encoder checkpoint for extractive QA (`arabert-pipeline finetune`).

    run_finetune(FinetuneConfig(model="runs/mlm-small", protocol="offline", output="runs/qa-small",
                                drop_leaking_train=True, skip_misaligned=True))

Steps: read the training/dev/evaluation sets (SQuAD v1.1 files or registry names) → refuse leakage into dev or
evaluation data → align the gold answers through the model's preprocessing → sliding windows → train a start/end head
(AutoModelForQuestionAnswering: an MLM checkpoint gets a fresh QA head; BERT and ELECTRA both work) → with dev sets,
score them after every epoch, keep the best epoch's weights (early stopping with `patience`) and choose the sentence
prior's weight on them → save a model dir that AutoModelForQuestionAnswering loads, with its tokenizer,
arabert_pipeline.json and the sentence prior's IDF table → predict and score every evaluation set (qa/metrics.py).

Choose on dev, report on test: dev sets decide the epoch and the prior; evaluation sets are only scored at the end.

The loop is written out rather than delegated to transformers.Trainer: QA needs its own evaluation (windows → spans →
original text) anyway, and the whole schedule (seeded per-epoch shuffles, checkpoints that resume bit-for-bit,
bf16 autocast) fits in one readable function instead of Trainer callbacks and arguments.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts import (
    MODEL_DIR_FILES, OutputKind, OutputLock, atomic_directory, atomic_write, check_local_source,
    check_vocabulary_size, claim_output_dir, load_pretrained_model, load_pretrained_tokenizer, load_tensor_state,
    portable_path, read_json_file, read_metadata, remove_own_entries, remove_stale_temporaries, write_metadata,
)
from ..errors import ConfigError
from ..tokenizer.export import save_pretrained_tokenizer
from .align import QAPreprocessing, align_examples
from .data import SquadFile, dataset_license, dataset_names, read_squad, unanswerable_examples
from .features import CONTEXT_TYPE, QUESTION_OVERLAP_TYPE, build_windows, check_fast_tokenizer
from .decoding import (DEV_METRIC, PLAIN_DECODING, best_decoding, describe_decoding, describe_no_answer, dev_score,
                       tune_decoding, tune_null_threshold)
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
BF16_CHOICES = ("auto", "on", "off")
MAX_GRAD_NORM = 1.0  # BERT's fine-tuning recipe clips gradients at norm 1
WIDTH_MULTIPLE = 32  # batch widths are padded to multiples of this: few shapes, flat memory
LENGTH_POOL = 50  # batches per pool of windows sorted by length (epoch_batches)
CHECKPOINTS = "checkpoints"
STATE_FILE = "trainer_state.pt"
CONFIG_FILE = "finetune_config.json"
BEST_WEIGHTS = "best.safetensors"  # in CHECKPOINTS: the weights of the best epoch on the dev sets so far
FINETUNE_OUTPUT = OutputKind("finetune", names=(*MODEL_DIR_FILES, CHECKPOINTS, "eval", SENTENCE_IDF_FILE),
                             markers=(CHECKPOINTS,), metadata_marker=("task", "question-answering"), resumable=True)


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
    batch_size: int = 32
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
    bf16: str = "auto"  # auto: on where the CPU/GPU computes bf16 natively
    save_steps: int = 0  # extra checkpoints every N optimizer steps (one is always written per epoch)
    resume: bool = False
    overwrite: bool = False  # replace an earlier finetune output at `output`
    skip_misaligned: bool = False  # drop (counted, reported) training answers whose answer_start is wrong
    allow_leakage: bool = False  # train even if evaluation contexts/questions occur in training
    drop_leaking_train: bool = False  # remove the training questions involved in a leak, then train
    download: bool = False  # fetch missing registered datasets from their upstream URL
    progress: bool = True

    def resolved(self) -> "FinetuneConfig":
        """Protocol expanded into train/eval, options validated."""
        config = dataclasses.replace(self)
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
        positive = ("epochs", "batch_size", "max_seq_length", "doc_stride", "max_question_tokens", "max_answer_tokens")
        for name in positive:
            if getattr(config, name) < 1:
                raise ConfigError(f"{name} must be ≥ 1, got {getattr(config, name)}")
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
        """What a resumed run must share with the interrupted one."""
        skip = {"output", "resume", "overwrite", "progress", "download", "save_steps"}
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in skip}


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


def run_finetune(config: FinetuneConfig, log=None) -> FinetuneResult:
    """Train, choose on dev, save, predict. `log` receives one-line progress messages (default: this module's
    logger at INFO, which the CLI prints)."""
    log = log or logging.getLogger(__name__).info
    with OutputLock(config.output, "finetune"):
        return _run_finetune(config, log)


def _run_finetune(config: FinetuneConfig, log) -> FinetuneResult:
    import torch
    import transformers
    from transformers import AutoModelForQuestionAnswering

    from ..pretrain.trainer import use_bf16  # one bf16 policy for pretraining and fine-tuning

    check_local_source(config.model)
    config = config.resolved()
    preprocessing = _preprocessing_name(config)
    config = dataclasses.replace(config, preprocessing=preprocessing)
    output = Path(config.output)
    started = time.time()
    resume_from = _prepare_output(output, config)
    train_files = [read_squad(s, misaligned="skip" if config.skip_misaligned else "error", download=config.download)
                   for s in config.train]
    dev_files = [read_squad(s, misaligned="keep", download=config.download) for s in config.dev]
    eval_files = [read_squad(s, misaligned="keep", download=config.download) for s in config.eval]
    held_out_files = [read_squad(s, misaligned="keep", download=config.download) for s in config.hold_out]
    for f in train_files + dev_files + eval_files:
        if f.misaligned:
            log(f.describe_misaligned())
    # Dev and held-out sets are guarded like evaluation sets: a leak into any is refused (or dropped) the same way.
    leakage = find_leakage([(f.name, f.examples) for f in train_files],
                           [(f.name, f.examples) for f in dev_files + eval_files + held_out_files])
    train_examples, dropped = _apply_leakage_policy(leakage, train_files, config, log)

    tokenizer = load_pretrained_tokenizer(config.model)
    check_fast_tokenizer(tokenizer)
    qa_preprocessing = QAPreprocessing(preprocessing)
    aligned, report = align_examples(train_examples, qa_preprocessing)
    log(report.summary())
    aligned = [a for a in aligned if a["spans"]]
    if not aligned:
        raise ConfigError("no training question left with an aligned answer")
    labels = [a["spans"][0] for a in aligned]
    negatives = []
    if config.negatives:
        kept = {a["id"] for a in aligned}
        negatives, _ = align_examples(
            unanswerable_examples([e for e in train_examples if str(e["id"]) in kept], seed=config.seed),
            qa_preprocessing)
        log(f"+ {len(negatives)} unanswerable pairs (a question with another paragraph of its article), "
            "labelled no-answer")
    windows = build_windows(
        tokenizer,
        [a["question"] for a in aligned + negatives],
        [a["aligned"].text for a in aligned + negatives],
        max_seq_length=config.max_seq_length,
        doc_stride=config.doc_stride,
        max_question_tokens=config.max_question_tokens,
        answer_spans=labels + [None] * len(negatives),
        question_overlap=config.question_overlap,
    )
    log(f"training on {len(aligned) + len(negatives)} questions → {len(windows)} windows of ≤ "
        f"{config.max_seq_length} tokens")
    # The sentence prior's IDF is counted over the training contexts, as the model will see them (preprocessed).
    sentence_idf = KeyIDF.from_texts(sorted({a["aligned"].text for a in aligned}))

    transformers.set_seed(config.seed)
    model_source = resume_from or config.model
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # its load report lists the fresh QA head: said below in one line
    try:
        # fp32 master weights whatever the checkpoint's storage dtype; bf16 is only used inside autocast.
        model, info = load_pretrained_model(AutoModelForQuestionAnswering, model_source, dtype=torch.float32)
    finally:
        transformers.logging.set_verbosity(verbosity)
    check_vocabulary_size(model, tokenizer, model_source)
    if info["missing_keys"]:
        log(f"initialised {', '.join(sorted(info['missing_keys']))} (new question-answering head)")
    if config.question_overlap and add_question_overlap_type(model):
        log("token type 2 (context word shared with the question) added, initialised as the context type")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device)
    bf16 = use_bf16(config.bf16, device)

    steps_per_epoch = math.ceil(len(windows) / config.batch_size)
    total_steps = steps_per_epoch * config.epochs
    optimizer = torch.optim.AdamW(
        parameter_groups(model, config.weight_decay, config.lr, config.layer_lr_decay), lr=config.lr
    )
    scheduler = transformers.get_linear_schedule_with_warmup(
        optimizer, int(config.warmup_ratio * total_steps), total_steps
    )
    settings = QASettings(config.max_seq_length, config.doc_stride, config.max_question_tokens,
                          config.max_answer_tokens, question_overlap=config.question_overlap)
    progress_state = {"step": 0, "losses": [], "running": [], "dev": []}  # dev: per-epoch dev scores
    if resume_from is not None:
        state = load_tensor_state(resume_from / STATE_FILE)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        progress_state.update({key: state[key] for key in progress_state if key in state})
        log(f"resumed from {resume_from} at step {progress_state['step']}/{total_steps}")
    step, losses, running, dev_history = (progress_state[k] for k in ("step", "losses", "running", "dev"))

    progress = _progress_bar(total_steps, step, config.progress)
    model.train()
    shuffled_epoch, order = -1, None
    while step < total_steps:
        epoch, position = divmod(step, steps_per_epoch)
        if epoch != shuffled_epoch:
            # One seeded order per epoch: a resumed run replays the same batches from where it stopped.
            shuffled_epoch, order = epoch, epoch_batches(windows, config.batch_size, config.seed, epoch)
        rows = order[position]
        batch = collate(windows, rows, tokenizer.pad_token_id or 0, labels=True, multiple=WIDTH_MULTIPLE)
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        running.append(loss.item())
        progress.update(1)
        progress.set_postfix(epoch=epoch + 1, loss=f"{np.mean(running[-50:]):.3f}")
        epoch_done = step % steps_per_epoch == 0
        stop = False
        if epoch_done:
            losses.append(float(np.mean(running)))
            running = []
            message = f"epoch {epoch + 1}/{config.epochs}: mean loss {losses[-1]:.4f}"
            if dev_files:
                model.eval()
                qa = QAModel(model, tokenizer, preprocessing, settings)
                dev_history.append(dev_score(qa, dev_files, config.batch_size))
                model.train()
                best = int(np.argmax(dev_history))
                if best == len(dev_history) - 1:
                    _save_best_weights(output, model)
                message += f"; dev {DEV_METRIC} {dev_history[-1]:.2f} (best: epoch {best + 1})"
                stop = bool(config.patience) and len(dev_history) - 1 - best >= config.patience
            log(message)
        if stop:
            log(f"early stop: no better dev {DEV_METRIC} for {config.patience} epoch(s)")
            break
        if step < total_steps and (epoch_done or (config.save_steps and step % config.save_steps == 0)):
            _save_checkpoint(output, config, model, optimizer, scheduler,
                             {"step": step, "losses": losses, "running": running, "dev": dev_history})
    progress.close()

    model.eval()
    chosen = {}
    if dev_history:
        best = int(np.argmax(dev_history))
        if best != len(dev_history) - 1:
            model.load_state_dict(_load_best_weights(output), strict=True)
        chosen["epoch"] = best + 1
        log(f"kept epoch {best + 1} (dev {DEV_METRIC} {dev_history[best]:.2f})")
    fixed = {"sentence_prior": config.sentence_prior, "within_sentence": config.within_sentence,
             "decoding": config.decoding}
    decoding, decoding_scores = dict(PLAIN_DECODING), []
    decoding.update({name: value for name, value in fixed.items() if value is not None})
    if dev_files and None in fixed.values():
        qa = QAModel(model, tokenizer, preprocessing, settings, sentence_idf=sentence_idf)
        decoding_scores = tune_decoding(qa, dev_files, config.batch_size, fixed)
        decoding = best_decoding(decoding_scores)
        log("decoding on dev: " + "; ".join(f"{describe_decoding(row)} → {row['score']:.2f}" for row in decoding_scores)
            + f"; chose {describe_decoding(decoding)}")
    settings = dataclasses.replace(settings, **{**decoding, "sentence_prior": float(decoding["sentence_prior"])})
    no_answer = {}
    if dev_files:
        no_answer = tune_null_threshold(QAModel(model, tokenizer, preprocessing, settings, sentence_idf=sentence_idf),
                                        dev_files, config.batch_size)
        settings = dataclasses.replace(settings, null_score_diff_threshold=no_answer["threshold"])
        log(describe_no_answer(no_answer))
    metadata = {
        "preprocessing": preprocessing,
        "task": "question-answering",
        "base_model": portable_path(config.model),
        **dataclasses.asdict(settings),
        "training_data": [_describe(f, dropped) for f in train_files],
        "dev_data": [_describe(f, {}) for f in dev_files],
        "evaluation_data": [_describe(f, {}) for f in eval_files],
        "alignment": {"answers": report.answers, "aligned": report.aligned, "exact": report.exact,
                      "rate": report.rate, "unaligned_ids": report.unaligned_ids},
        "leakage": {"policy": _leakage_policy(config), "counts": leakage.counts(),
                    "dropped_train_questions": sum(dropped.values())},
        "finetune": {**config.fingerprint(), "model": portable_path(config.model), "bf16_used": bf16, "steps": step,
                     "train_questions": len(aligned), "train_negatives": len(negatives), "train_windows": len(windows), "epoch_losses": losses,
                     "dev_metric": DEV_METRIC, "dev_scores": dev_history, **chosen,
                     "decoding_dev_scores": decoding_scores, "no_answer_dev": no_answer},
        "pretrained": read_metadata(config.model, missing_ok=True) if Path(config.model).is_dir() else {},
    }
    _save_final_model(output, model, tokenizer, metadata, sentence_idf)
    shutil.rmtree(output / CHECKPOINTS, ignore_errors=True)
    seconds = time.time() - started
    log(f"saved {output} ({step} steps, {seconds:.0f} s)")

    qa = QAModel(model, tokenizer, preprocessing, settings, sentence_idf=sentence_idf)
    predictions, metrics = {}, {}
    for f in eval_files:
        predictions[f.name], metrics[f.name] = evaluate_file(qa, f, output / "eval", config.batch_size)
        scores = ", ".join(f"{k} {v:.1f}" for k, v in metrics[f.name].items() if k != "questions")
        log(f"{f.name} ({len(f.examples)} questions): {scores}; predictions in {predictions[f.name]}")
    return FinetuneResult(output, len(aligned), len(windows), step, seconds, losses, report.summary(),
                          predictions, metrics)


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


def _prepare_output(output: Path, config: FinetuneConfig) -> Path | None:
    """The checkpoint to resume from, or None for a fresh run; refuses to overwrite an unrelated directory."""
    local_inputs = [source for source in [config.model, *config.train, *config.dev, *config.eval]
                    if Path(source).exists()]
    claim_output_dir(output, FINETUNE_OUTPUT, inputs=local_inputs, overwrite=config.overwrite, resume=config.resume)
    remove_stale_temporaries(output / CHECKPOINTS, ".*.tmp")
    checkpoints = sorted((output / CHECKPOINTS).glob("step-*")) if output.is_dir() else []
    if config.resume and checkpoints:
        latest = checkpoints[-1]
        stored = read_json_file(latest / CONFIG_FILE)
        differences = {k: (stored.get(k), v) for k, v in config.fingerprint().items() if stored.get(k) != v}
        if differences:
            details = "; ".join(f"{k}: checkpoint {a!r}, now {b!r}" for k, (a, b) in differences.items())
            raise ConfigError(f"cannot resume {latest}: the configuration changed ({details})")
        return latest
    if output.is_dir() and any(output.iterdir()):
        if config.resume:
            raise ConfigError(f"{output} holds no checkpoint to resume (a finished model, or a run stopped before "
                              "its first checkpoint): pass --overwrite instead of --resume to start it again")
        remove_own_entries(output, FINETUNE_OUTPUT)
    return None


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


def parameter_groups(model, weight_decay: float, lr: float, layer_lr_decay: float = 1.0) -> list[dict]:
    """BERT's recipe (no weight decay on biases and LayerNorm weights), with layer-wise learning rates.

    With decay d < 1 (ELECTRA's fine-tuning recipe), encoder layer i of L trains at lr · d^(L − i), the embeddings at
    lr · d^(L + 1) and everything above the encoder (the QA head) at lr: the layers that pretraining shaped most
    generally move least.
    """
    layers = model.config.num_hidden_layers
    groups: dict[tuple[float, float], list] = {}
    for name, parameter in model.named_parameters():
        no_decay = name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name
        match = re.search(r"\.layer\.(\d+)\.", name)
        depth = layers - int(match.group(1)) if match else layers + 1 if ".embeddings." in name else 0
        key = (lr * layer_lr_decay**depth, 0.0 if no_decay else weight_decay)
        groups.setdefault(key, []).append(parameter)
    return [{"params": params, "lr": group_lr, "weight_decay": decay}
            for (group_lr, decay), params in groups.items()]


def _progress_bar(total: int, done: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, desc="finetune", unit="step", disable=not enabled, file=sys.stderr)


def _save_checkpoint(output: Path, config, model, optimizer, scheduler, progress: dict) -> None:
    """Model + optimizer + scheduler + RNG + progress at its step, written atomically; older checkpoints go after."""
    import torch

    target = output / CHECKPOINTS / f"step-{progress['step']:08d}"
    with atomic_directory(target) as tmp:
        model.save_pretrained(tmp)
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                    "torch_rng": torch.get_rng_state(), **progress}, tmp / STATE_FILE)
        (tmp / CONFIG_FILE).write_text(json.dumps(config.fingerprint(), ensure_ascii=False, indent=1), "utf-8")
    for old in (output / CHECKPOINTS).glob("step-*"):
        if old != target:
            shutil.rmtree(old, ignore_errors=True)


def _save_best_weights(output: Path, model) -> None:
    from safetensors.torch import save_file

    (output / CHECKPOINTS).mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    tmp = output / CHECKPOINTS / f".{BEST_WEIGHTS}.tmp"
    save_file(tensors, str(tmp))
    os.replace(tmp, output / CHECKPOINTS / BEST_WEIGHTS)


def _load_best_weights(output: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(output / CHECKPOINTS / BEST_WEIGHTS))


def _save_final_model(output: Path, model, tokenizer, metadata: dict, sentence_idf: KeyIDF) -> None:
    """Write the model dir beside the checkpoints; config.json moves in last, so a partial dir never loads."""
    staging = output / ".final.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    save_pretrained_tokenizer(tokenizer, staging)
    with atomic_write(staging / SENTENCE_IDF_FILE) as f:
        json.dump(sentence_idf.to_json(), f, ensure_ascii=False, separators=(",", ":"))
    write_metadata(staging, **metadata)
    names = sorted(p.name for p in staging.iterdir())
    for name in [n for n in names if n != "config.json"] + ["config.json"]:
        os.replace(staging / name, output / name)
    staging.rmdir()

"""Side-by-side evaluation: systems × datasets → per-question scores, tables (md / csv / json) and plots.

    config = EvaluateConfig(systems=[("model", "runs/qa-a"), ("predictions", "b.json")], data=["arcd-test"],
                            out=Path("reports/eval"))
    results = run_evaluation(config)      # also writes everything under config.out, atomically

A system is a QA model dir / hub id (answers predicted with `qa.transformer.model.QAModel`), a predictions file
(`{question id: answer text}` or `{question id: {"text": ..., "start": ...}}`, as `evaluate` itself writes under
predictions/), or a baseline that needs no model (baselines.py: first / random / TF-IDF sentence, sliding window,
word-overlap span). Every metric is the ×100 mean over ALL questions of the dataset
(a missing prediction scores 0 and is counted), with a seeded bootstrap 95% CI, and a paired bootstrap comparison
(CI of the difference, p-value; exact McNemar for EM) of every system against the first one.

Output directory (replaced as a whole once complete):
    results.json                      everything below, machine-readable (read by notebooks/evaluation.ipynb)
    table.md, table.csv               the tables; table.md also states what "mBERT" means and the paper's numbers
    per_question/DATASET/LABEL.jsonl.gz  one line per question: prediction, gold answers, the six scores, buckets
    predictions/LABEL.json            a model's answers {id: {"text", "start"}} over all datasets, reusable with
                                      --predictions (so a rerun need not predict again)
    plots/DATASET_metrics.png, DATASET_f1_by_answer_length.png, DATASET_f1_by_question_word.png
    pretraining/LABEL.jsonl, plots/pretraining.png
                                      with --pretraining-log: the pretraining runs' logs (log.jsonl of
                                      `arabert-pipeline pretrain`), their loss curves and last held-out metrics
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts.metadata import read_metadata
from ..artifacts.models import check_local_source, describe_exception, torch_device
from ..artifacts.paths import portable_path
from ..artifacts.reads import MAX_DATA_FILE_BYTES, check_input_file
from ..artifacts.writes import atomic_directory
from ..cliargs import check_seed
from ..errors import ConfigError, InputError
from ..weights.files import read_text_file
from . import metrics
from .baselines import BASELINES, baseline_predictions
from .buckets import ANSWER_LENGTH_BUCKETS, OTHER, QUESTION_WORDS, score_system
from .load import RESULTS_FILE, check_file_names, no_answer_file, per_question_file, safe_name
from .open_domain import (
    DEPTH,
    GRID_NULL_WEIGHTS,
    GRID_PASSAGES,
    KEEP_ANSWERED,
    RECALL_AT,
    OpenOptions,
    OpenRun,
    no_answer_summary,
    open_label,
    open_summary,
    paired_vs_paragraph,
)
from .plots import plot_dataset, plot_open, plot_pretraining
from .tables import csv_report, markdown_report

# Said when nothing run here shows which mBERT is meant (prediction files only); describe_setup says it from the models.
MBERT_NOTE = (
    '"mBERT" means `bert-base-multilingual-cased` when the Hugging Face hub is reachable. Offline it means a model of '
    "the same size and pretrained with the same compute as ours, but with mBERT's WordPiece vocabulary "
    "(shared/data/vocab/mbert-cased-vocab.txt, 119,547 entries) on unsegmented text (preprocessing `none`): the "
    "tokenization is the variable the paper's argument is about."
)
PAPER_TABLE6 = {"mBERT": (34.2, 61.3, 90.0), "AraBERTv0.1": (30.1, 61.2, 93.0), "AraBERTv1": (30.6, 62.7, 92.0)}
PAPER_NOTE = (
    "Published numbers (AraBERT paper, Antoun et al. 2020, Table 6): ARCD-test, EM / F1 / SM from SOQAL's evaluate.py "
    "(= the SOQAL-compatible variant here) of BERT-base models (12 layers, hidden 768; AraBERT pretrained on ~24 GB "
    "of Arabic text, mBERT on the Wikipedias of 104 languages) fine-tuned on Arabic-SQuAD (48,344 questions) + "
    "ARCD-train."
)
MBERT_HUB_ID = "bert-base-multilingual-cased"
MBERT_VOCAB_SIZE = 119_547
BERT_BASE = (12, 768)  # (layers, hidden): the paper's models
PAPER_TRAINING_DATA = {"arabic-squad", "arcd-train"}
METRIC_NOTE = (
    "SOQAL = the definitions of SOQAL's bert/evaluate.py used for the paper (every 'ال' removed even inside words, "
    "no Arabic punctuation/diacritic handling, sentences split by English Punkt so '؟' is no boundary). Arabic = "
    "article stripped only as a word prefix, diacritics/tatweel/Arabic punctuation removed, alef/yeh/teh-marbuta "
    "forms unified, sentences split also on '؟' and newlines, the gold sentence located by answer_start. "
    "See arabert_pipeline/qa/metrics.py."
)


BACKENDS = ("torch", "onnx")


@dataclasses.dataclass
class EvaluateConfig:
    """Mirrors `arabert-pipeline evaluate`'s flags."""

    data: list[str]  # registered dataset names or SQuAD JSON paths
    out: Path
    systems: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # ("model" | "predictions", source)
    labels: list[str] = dataclasses.field(default_factory=list)  # for systems, in order; default from the source
    baselines: tuple[str, ...] = BASELINES
    resamples: int = 10_000
    seed: int = 0
    batch_size: int = 32
    limit: int | None = None  # evaluate only the first N questions of each dataset (smoke runs)
    pretraining_logs: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (label, log.jsonl path)
    whole_words: bool = True  # model answers widened to whole words (QAModel.whole_words)
    no_answer: bool = False  # models also scored on SQuAD 2.0-style negatives with allow_no_answer
    # SQuAD 2.0 sets whose unanswerable questions are asked too (qa.data.read_unanswerable; needs no_answer)
    no_answer_data: list[str] = dataclasses.field(default_factory=list)
    no_answer_limit: int | None = None  # at most N questions of each no_answer_data set, drawn with `seed`
    device: str = "cpu"  # where models predict: cpu, cuda, cuda:1, mps
    preprocessing: str | None = None  # for models that record none (a hub QA checkpoint); others keep their own
    backend: str = "torch"  # models run on torch, or on ONNX Runtime ("onnx": the model dir's model.onnx)
    open: OpenOptions = dataclasses.field(default_factory=OpenOptions)  # documents and collections (open_domain.py)


@dataclasses.dataclass
class System:
    label: str
    kind: str  # "model" | "predictions" | "baseline"
    source: str
    info: dict[str, Any] = dataclasses.field(default_factory=dict)


# ----------------------------------------------------------------------------------------------------------- inputs


def _dataset_key(source: str) -> str:
    from ..qa.data import dataset_names

    return source if source in dataset_names() else Path(source).stem


def load_predictions_file(path: str | os.PathLike) -> dict[str, tuple[str, int | None]]:
    """{id: (text, start or None)} from `{id: text}` or `{id: {"text", "start"}}` JSON; bad entries name the id."""
    path = check_input_file(path, "predictions file")
    try:
        raw = json.loads(read_text_file(path, max_bytes=MAX_DATA_FILE_BYTES, bom=True))
    except json.JSONDecodeError as exc:
        raise InputError(f"not a JSON predictions file ({exc})", path=path) from exc
    except (ValueError, RecursionError) as exc:  # an integer too long, nesting too deep
        raise InputError(f"not a JSON predictions file ({describe_exception(exc)})", path=path) from None
    if not isinstance(raw, dict):
        raise InputError("expected a JSON object {question id: answer text}", path=path)
    predictions = {}
    for qid, value in raw.items():
        if isinstance(value, dict):
            text, start = value.get("text"), value.get("start")
        else:
            text, start = value, None
        # type(start) is int: true and false are ints to isinstance, but no offset a tool would write
        if not isinstance(text, str) or not (start is None or (type(start) is int and start >= 0)):
            raise InputError("expected an answer string or {\"text\": str, \"start\": int}", path=path,
                             field=f"question {qid}")
        predictions[str(qid)] = (text, start)
    return predictions


def _model_info(source: str) -> dict[str, Any]:
    """What a report needs to say about a model: the checkpoint it was fine-tuned from, its training sets, its
    preprocessing and size (a hub model's from its config.json, where the hub or its cache has it)."""
    path = Path(source)
    config: dict[str, Any] = {}
    if not path.is_dir():
        info: dict[str, Any] = {"hub_id": source}
        try:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(source).to_dict()
        except Exception:  # unreachable or unknown here: QAModel.load says why when the model is loaded
            pass
    else:
        metadata = read_metadata(path, missing_ok=True)
        info = {"base_model": metadata.get("base_model"), "preprocessing": metadata.get("preprocessing")}
        names = [entry.get("name") for entry in metadata.get("training_data") or () if isinstance(entry, dict)]
        info["training_data"] = " + ".join(Path(str(name)).name for name in names) if names else None
        config_file = path / "config.json"
        if config_file.is_file():
            config = json.loads(config_file.read_text(encoding="utf-8"))
    for key in ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"):
        if key in config:
            info[key] = config.get(key)
    return info


def _is_hub_id(name: object) -> bool:
    return isinstance(name, str) and re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name) is not None \
        and not Path(name).exists()


def describe_setup(systems: list[System]) -> tuple[str | None, str, bool]:
    """The report's notes, from what was run: what its mBERT rows are (None: no mBERT row), how the rows relate to
    the paper's Table 6, and whether they follow its protocol (BERT-base checkpoints from the hub, fine-tuned on
    Arabic-SQuAD + ARCD-train)."""
    models = [s for s in systems if s.kind == "model"]
    files = [s.label for s in systems if s.kind == "predictions"]
    origin = {s.label: s.info.get("base_model") or s.info.get("hub_id") for s in models}
    hub_mbert = [s.label for s in models if str(origin[s.label]).split("/")[-1] == MBERT_HUB_ID]
    vocab_mbert = [s.label for s in models if s.label not in hub_mbert
                   and s.info.get("vocab_size") == MBERT_VOCAB_SIZE]
    notes = []
    if hub_mbert:
        notes.append(f"{', '.join(hub_mbert)}: fine-tuned from `{MBERT_HUB_ID}` (the hub checkpoint), not from a "
                     "model pretrained here with its vocabulary.")
    if vocab_mbert:
        notes.append(f"{', '.join(vocab_mbert)}: not mBERT itself but a model pretrained here with mBERT's WordPiece "
                     "vocabulary (119,547 entries) on unsegmented text (preprocessing `none`).")
    mbert_note = " ".join(notes) if notes else (MBERT_NOTE if not models else None)
    if not models:
        return mbert_note, PAPER_NOTE + " Whether the rows here are comparable is not known: prediction files do not " \
            "say what model made them or how it was trained.", False
    differences: dict[str, list[str]] = {}
    for s in models:
        layers, hidden = s.info.get("num_hidden_layers"), s.info.get("hidden_size")
        if (layers, hidden) != BERT_BASE:
            size = f"L{layers}/H{hidden}" if layers and hidden else "size unknown"
            differences.setdefault(f"not BERT-base ({size})", []).append(s.label)
        if not _is_hub_id(origin[s.label]):
            differences.setdefault("pretrained here, on far less text than the published checkpoints",
                                   []).append(s.label)
        data = s.info.get("training_data")
        if data is None:
            differences.setdefault("training data not recorded", []).append(s.label)
        elif not set(data.split(" + ")) >= PAPER_TRAINING_DATA:
            differences.setdefault(f"fine-tuned on {data}, not Arabic-SQuAD + ARCD-train", []).append(s.label)
    if files:
        differences["prediction files, their models not described"] = files
    if not differences:
        return mbert_note, PAPER_NOTE + " The models here follow that protocol: BERT-base checkpoints from the hub " \
            "fine-tuned on Arabic-SQuAD + ARCD-train, scored with the same metric (SOQAL variant). What still " \
            "differs (seeds, v0.1/v1 preprocessing, hyper-parameters) is in docs/experiments/table6.md.", True
    detail = "; ".join(f"{what}: {', '.join(labels)}" for what, labels in differences.items())
    return mbert_note, PAPER_NOTE + f" A reference point, not a comparable row: {detail}.", False


def _predict_with_model(model, examples: list[dict], batch_size: int, timed: bool = False
                        ) -> tuple[dict[str, tuple[str, int | None]], list[float] | None]:
    """The best answer of a `qa.transformer.model.QAModel` per question (a question it finds no span for stays
    missing); `timed`: asked one at a time, with the ms each took (else None)."""
    times = None
    if timed:
        answers, times = [], []
        for example in examples:
            started = time.perf_counter()
            answers += model.predict([example], batch_size=batch_size)
            times.append(1000 * (time.perf_counter() - started))
    else:
        answers = model.predict(examples, batch_size=batch_size)
    return ({ex["id"]: (found[0].text, found[0].start) for ex, found in zip(examples, answers, strict=True) if found},
            times)


# ---------------------------------------------------------------------------------------------------------- scoring


def _score_matrix(records: list[dict]) -> np.ndarray:
    return np.array([[r[key] for key in metrics.SCORE_KEYS] for r in records], dtype=float)


def summarize(records: list[dict], reference: list[dict] | None, resamples: int, seed: int) -> dict:
    """Means with CIs, paired comparison against `reference` (records on the same questions), breakdowns."""
    scores = _score_matrix(records)
    ci = metrics.bootstrap_ci(scores, resamples=resamples, seed=seed)
    summary: dict[str, Any] = {
        "questions": len(records),
        "missing": sum(r["missing"] for r in records),
        "scores": {key: {"mean": float(ci["mean"][i]), "low": float(ci["low"][i]), "high": float(ci["high"][i])}
                   for i, key in enumerate(metrics.SCORE_KEYS)},
    }
    if reference is not None:
        other = _score_matrix(reference)
        paired = metrics.paired_bootstrap(other, scores, resamples=resamples, seed=seed)
        summary["paired_vs_reference"] = {
            key: {name: float(paired[name][i]) for name in ("diff", "low", "high", "p_value")}
            for i, key in enumerate(metrics.SCORE_KEYS)
        }
        for key in ("soqal_em", "arabic_em"):
            column = metrics.SCORE_KEYS.index(key)
            summary["paired_vs_reference"][key]["mcnemar_p"] = metrics.mcnemar_exact(other[:, column],
                                                                                     scores[:, column])
    summary["by_question_word"] = _breakdown(records, "question_word", [*QUESTION_WORDS, OTHER])
    summary["by_answer_length"] = _breakdown(records, "answer_length", [name for name, _, _ in ANSWER_LENGTH_BUCKETS])
    return summary


def _breakdown(records: list[dict], field: str, order: list[str]) -> dict[str, dict]:
    groups = {}
    for bucket in order:
        chosen = [r for r in records if r[field] == bucket]
        if chosen:
            groups[bucket] = {"n": len(chosen), **{key: 100.0 * float(np.mean([r[key] for r in chosen]))
                                                    for key in ("soqal_f1", "arabic_f1", "arabic_em")}}
    return groups


# -------------------------------------------------------------------------------------------------------------- run


def run_evaluation(config: EvaluateConfig, log=print) -> dict:
    """Predict (when needed), score, summarize and write the report directory; returns results.json's content."""
    systems = _systems(config)
    _check_output_dir(config.out)
    pretraining = {label: load_pretraining_log(path) for label, path in config.pretraining_logs}
    if len(pretraining) != len(config.pretraining_logs):
        raise ConfigError("--pretraining-log: the same label given twice")
    answers = {s.label: load_predictions_file(s.source) for s in systems if s.kind == "predictions"}
    squads = _read_datasets(config.data)
    unanswerable = _read_unanswerable_sets(config)  # before any prediction: a bad file fails first
    open_run = None
    if config.open.active:
        open_run = OpenRun(config.open, {key: squad.examples for key, (_, squad) in squads.items()}, config.seed,
                           config.batch_size, log)
    models: dict[str, Any] = {}  # loaded once, used for every dataset
    datasets: dict[str, dict] = {}
    per_question: dict[tuple[str, str], list[dict]] = {}
    no_answer_records: dict[tuple[str, str], list[dict]] = {}
    for key, (source, squad) in squads.items():
        datasets[key], records, negatives = _evaluate_dataset(config, source, squad, key, systems, answers, models,
                                                              open_run, log)
        per_question.update({(key, label): rows for label, rows in records.items()})
        no_answer_records.update({(key, label): rows for label, rows in negatives.items()})

    for system in systems:
        if system.kind == "predictions":
            evaluated = {r["id"] for (_, label), rows in per_question.items() if label == system.label for r in rows}
            system.info["ids_not_evaluated"] = len(answers[system.label].keys() - evaluated)
    # Only model answers are worth keeping for reuse: prediction files exist already, baselines are recomputed.
    model_answers = {
        s.label: {r["id"]: {"text": r["prediction"], "start": r["prediction_start"]}
                  for (_, label), rows in per_question.items() if label == s.label for r in rows if not r["missing"]}
        for s in systems if s.kind == "model"
    }
    mbert_note, paper_note, comparable = describe_setup(systems)
    results = {
        "created_by": "arabert-pipeline evaluate",
        "config": {**dataclasses.asdict(config), "out": portable_path(config.out),
                   "systems": [(kind, portable_path(source)) for kind, source in config.systems],
                   "pretraining_logs": [(label, portable_path(log)) for label, log in config.pretraining_logs],
                   "no_answer_data": [portable_path(source) for source in config.no_answer_data],
                   "open": {**dataclasses.asdict(config.open),
                            "distractors": [portable_path(path) for path in config.open.distractors]}},
        "reference": systems[0].label,
        "systems": [{**dataclasses.asdict(s), "source": portable_path(s.source)} for s in systems],
        "datasets": datasets,
        "score_keys": list(metrics.SCORE_KEYS),
        "mbert_note": mbert_note,
        "metric_note": METRIC_NOTE,
        "paper_table6": {"note": paper_note, "comparable": comparable, "dataset": "arcd-test", "variant": "soqal",
                         "rows": {name: dict(zip(("em", "f1", "sm"), row, strict=True))
                                  for name, row in PAPER_TABLE6.items()}},
        "pretraining": {label: pretraining_summary(rows) for label, rows in pretraining.items()},
    }
    if unanswerable:
        results["no_answer_data"] = _unanswerable_results(config, unanswerable, systems, models, per_question,
                                                          no_answer_records, log)
    if open_run is not None:
        results["open"] = _open_results(config, systems, models, open_run, per_question, no_answer_records)
    write_report(config.out, results, per_question, model_answers, pretraining, no_answer_records)
    return results


def _read_datasets(sources: list[str]) -> dict[str, tuple[str, Any]]:
    """Key → (source, qa.data.SquadFile) of each --data, in order; the same key twice is an error."""
    from ..qa.data import read_squad

    squads: dict[str, tuple[str, Any]] = {}
    for source in sources:
        key = _dataset_key(source)
        if key in squads:
            raise ConfigError(f"dataset {source!r} given twice (or two files named {key})")
        squads[key] = (source, read_squad(source, misaligned="keep"))
    return squads


def _read_unanswerable_sets(config: EvaluateConfig) -> dict[str, tuple[str, list[dict], int]]:
    """Key → (source, the questions asked, how many the set holds) of each no_answer_data set: its unanswerable
    questions (qa.data.read_unanswerable), at most no_answer_limit of them drawn with the seed."""
    from ..qa.data import read_unanswerable

    sets: dict[str, tuple[str, list[dict], int]] = {}
    for source in config.no_answer_data:
        key = _dataset_key(source)
        if key in sets or key in {_dataset_key(data) for data in config.data}:
            raise ConfigError(f"no-answer set {source!r} given twice, or under a name another set has ({key})")
        negatives = read_unanswerable(source)
        total = len(negatives)
        if config.no_answer_limit is not None and total > config.no_answer_limit:
            drawn = np.sort(np.random.default_rng(config.seed).choice(total, config.no_answer_limit, replace=False))
            negatives = [negatives[i] for i in drawn]
        sets[key] = (source, negatives, total)
    return sets


def _load_model(system: System, config: EvaluateConfig):
    own = system.info.get("preprocessing") if "hub_id" not in system.info else None
    preprocessing = None if own else config.preprocessing
    if config.backend == "onnx":
        from ..qa.transformer.onnx import OnnxQAModel

        return OnnxQAModel.load(system.source, preprocessing=preprocessing, whole_words=config.whole_words)
    from ..qa.transformer.model import QAModel

    return QAModel.load(system.source, whole_words=config.whole_words, device=config.device,
                        preprocessing=preprocessing)


def _evaluate_dataset(config, source, squad, key, systems, answers, models, open_run, log
                      ) -> tuple[dict, dict[str, list[dict]], dict[str, list[dict]]]:
    """One dataset: every system's per-question records and summary (paired against the first system); and the
    no-answer records of the open systems asked of a collection."""
    examples = squad.examples[: config.limit] if config.limit else squad.examples
    if not examples:
        raise InputError("no questions to evaluate", path=squad.path)
    ids = {ex["id"] for ex in examples}
    contexts = list({ex["context"]: None for ex in examples})
    entry: dict[str, Any] = {
        "source": source, "path": portable_path(squad.path), "questions": len(examples),
        "misaligned_gold_ids": [m["id"] for m in squad.misaligned if m["id"] in ids],
        "sentences_per_context": {
            "punkt": float(np.mean([len(metrics.punkt_sentence_spans(c)) for c in contexts])),
            "arabic": float(np.mean([len(metrics.arabic_sentence_spans(c)) for c in contexts])),
        },
        "systems": {},
    }
    records: dict[str, list[dict]] = {}
    negatives: dict[str, list[dict]] = {}
    for system in systems:
        log(f"{key}: {system.label} ({system.kind}, {len(examples)} questions)")
        predictions: Mapping[str, tuple[str, int | None]]
        if system.kind == "open":
            model, oracle = models[system.info["model"]], records[system.info["model"]]
            records[system.label], found = open_run.records(model, system.info["setting"], system.info["retriever"],
                                                            key, examples)
            if found:
                negatives[system.label] = found
            entry["systems"][system.label] = summarize(records[system.label], records[systems[0].label],
                                                       config.resamples, config.seed)
            entry.setdefault("open", {})[system.label] = {
                "paired_vs_paragraph": paired_vs_paragraph(records[system.label], oracle, config.resamples,
                                                           config.seed),
                **open_summary(records[system.label], oracle, model, config.resamples, config.seed),
                "no_answer": no_answer_summary(records[system.label], found, model.settings.index_null_threshold,
                                               config.resamples, config.seed)}
            continue
        times = None
        if system.kind == "model":
            if system.label not in models:
                models[system.label] = _load_model(system, config)
            predictions, times = _predict_with_model(models[system.label], examples, config.batch_size,
                                                     timed=open_run is not None)
        elif system.kind == "predictions":
            predictions = answers[system.label]
            if not ids & predictions.keys():
                raise InputError(f"no answer for any of the {len(ids)} questions of {key}: wrong dataset? "
                                 "(a predictions file may hold the answers of several datasets)", path=system.source)
        else:
            predictions = baseline_predictions(system.source, examples, config.seed)
        records[system.label] = score_system(examples, predictions)
        reference = records[systems[0].label] if system is not systems[0] else None
        entry["systems"][system.label] = summarize(records[system.label], reference, config.resamples, config.seed)
        if times is not None:  # the paragraph-given answers beside the open settings: timed one by one
            for record, example, ms in zip(records[system.label], examples, times, strict=True):
                record["ms"], record["characters"] = ms, len(example["context"])
            entry.setdefault("open", {})[system.label] = _paragraph_summary(records[system.label])
        if system.kind == "model" and config.no_answer:
            entry.setdefault("no_answer", {})[system.label] = score_no_answer(
                models[system.label], examples, records[system.label], config)
    return entry, records, negatives


def _paragraph_summary(records: list[dict]) -> dict:
    times = [r["ms"] for r in records]
    return {"setting": "paragraph", "questions": len(records),
            "characters": float(np.mean([r["characters"] for r in records])),
            "ms": {"end_to_end": {"mean": float(np.mean(times)), "p50": float(np.median(times))}}}


def _open_results(config, systems, models, open_run, per_question, no_answer_records) -> dict:
    """The open settings pooled over every dataset: each open system's scores paired against its model's
    paragraph-given answers to the same questions, its recall, times, grid and no-answer scores."""
    keys = list(dict.fromkeys(key for key, _ in per_question))

    def pooled(label: str, table: dict) -> list[dict]:
        return [row for key in keys for row in table.get((key, label), [])]

    out: dict[str, Any] = {
        "settings": config.open.settings(), "depth": DEPTH, "recall_at": list(RECALL_AT),
        "grid": {"passages_read": list(GRID_PASSAGES), "null_weights": list(GRID_NULL_WEIGHTS)},
        "keep_answered": list(KEEP_ANSWERED), "collection": open_run.description, "systems": {}, "pooled": {},
    }
    for system in systems:
        if system.kind != "open":
            continue
        model_label = system.info["model"]
        model = models[model_label]
        records, oracle = pooled(system.label, per_question), pooled(model_label, per_question)
        out["systems"][system.label] = {key: system.info[key] for key in ("model", "setting", "retriever")}
        if model_label not in out["pooled"]:
            out["systems"][model_label] = {"model": model_label, "setting": "paragraph", "retriever": "oracle"}
            out["pooled"][model_label] = {"scores": summarize(oracle, None, config.resamples, config.seed)["scores"],
                                          **_paragraph_summary(oracle)}
        out["pooled"][system.label] = {
            "scores": summarize(records, None, config.resamples, config.seed)["scores"],
            "paired_vs_paragraph": paired_vs_paragraph(records, oracle, config.resamples, config.seed),
            **open_summary(records, oracle, model, config.resamples, config.seed),
            "no_answer": no_answer_summary(records, pooled(system.label, no_answer_records),
                                           model.settings.index_null_threshold, config.resamples, config.seed)}
    return out
def score_no_answer(model, examples: list[dict], records: list[dict], config: EvaluateConfig) -> dict[str, Any]:
    """SQuAD 2.0-style scores: the answerable questions as asked, allowed to abstain (an abstention scores 0), and
    each once more with a paragraph of its article that lacks the answer (`unanswerable_examples`), where only an
    abstention is right. Overall = the mean over both; `always_answer_f1` is the overall of the same answers without
    the no-answer option (every negative wrong). Each of `records` (the answerable questions') gets its
    `null_margin`."""
    from ..qa.data import unanswerable_examples

    negatives = unanswerable_examples(examples, seed=config.seed)
    threshold = model.settings.null_score_diff_threshold
    answers, margins = model.predict_with_margins(examples + negatives, batch_size=config.batch_size)
    for record, found, margin in zip(records, answers[: len(examples)], margins[: len(examples)], strict=True):
        record["null_margin"] = _recorded_margin(found, margin)  # the --no-answer-data curves are drawn against these
    answered = np.array([bool(found) and margin <= threshold for found, margin in
                         zip(answers[: len(examples)], margins[: len(examples)], strict=True)])
    abstained = np.array([not found or margin > threshold for found, margin in
                          zip(answers[len(examples):], margins[len(examples):], strict=True)], dtype=float)
    out: dict[str, Any] = {"threshold": threshold, "answerable": len(examples),
                           "unanswerable": len(negatives), "answered": 100.0 * float(answered.mean()),
                           "no_ans_accuracy": 100.0 * float(abstained.mean()) if len(negatives) else None}
    for variant in ("soqal", "arabic"):
        f1 = np.array([r[f"{variant}_f1"] for r in records])
        # A question answered here got the same best answer as in the plain run: allow_no_answer only removes answers.
        overall = np.concatenate([f1 * answered, abstained])
        ci = metrics.bootstrap_ci(overall[:, None], resamples=config.resamples, seed=config.seed)
        out[variant] = {"has_ans_f1": 100.0 * float((f1 * answered).mean()),
                        "overall_f1": {"mean": float(ci["mean"][0]), "low": float(ci["low"][0]),
                                       "high": float(ci["high"][0])},
                        "always_answer_f1": 100.0 * float(f1.sum() / len(overall))}
    return out


def _unanswerable_results(config: EvaluateConfig, unanswerable: dict[str, tuple[str, list[dict], int]],
                          systems: list[System], models: dict, per_question: dict, no_answer_records: dict,
                          log) -> dict[str, Any]:
    """Each no_answer_data set's unanswerable questions (`_read_unanswerable_sets`) asked of their paragraph by every
    model, with their null margins against those of the --data questions (pooled, recorded by `score_no_answer`):
    NoAns accuracy at the model's threshold and along the curve of thresholds that keep KEEP_ANSWERED of the
    answerable answered. The records go to no_answer/."""
    from ..qa.data import dataset_license
    from .open_domain import KEEP_ANSWERED, no_answer_summary

    out: dict[str, Any] = {}
    for key, (source, negatives, total) in unanswerable.items():
        entry: dict[str, Any] = {"source": portable_path(source), "license": dataset_license(source),
                                 "questions": len(negatives), "of": total, "keep_answered": list(KEEP_ANSWERED),
                                 "systems": {}}
        for system in systems:
            if system.kind != "model":
                continue
            model = models[system.label]
            log(f"{key}: {system.label} ({len(negatives)} unanswerable questions)")
            answers, margins = model.predict_with_margins(negatives, batch_size=config.batch_size)
            # Ids and margins only, no text of the set: such a set may state no licence (AQAD); the ids find the
            # questions in its file.
            rows = [{"id": example["id"], "null_margin": _recorded_margin(found, margin)}
                    for example, found, margin in zip(negatives, answers, margins, strict=True)]
            answerable = [r for (_, label), records in per_question.items() if label == system.label for r in records]
            no_answer_records[(key, system.label)] = rows
            entry["systems"][system.label] = no_answer_summary(
                answerable, rows, model.settings.null_score_diff_threshold, config.resamples, config.seed)
        out[key] = entry
    return out


def _recorded_margin(found: list, margin: float) -> float | None:
    """A question's null margin as records keep it: None where no threshold makes it answered (no span decoded, or
    nothing read), as open_domain's records do; no_answer_summary reads None as +inf."""
    return float(margin) if found and np.isfinite(margin) else None


# Each resample keeps one mean per metric and system: 10⁶ resamples are already ~50 MB a system and minutes of work.
MAX_RESAMPLES = 1_000_000


def check_run_settings(config) -> None:
    """What `evaluate` and `evaluate --task` take alike, checked before any data is read: resamples, seed, batch
    size, and no more --label than systems (a label naming nothing would be dropped silently)."""
    if type(config.resamples) is not int or not 100 <= config.resamples <= MAX_RESAMPLES:
        raise ConfigError(f"--resamples {config.resamples}: use between 100 and {MAX_RESAMPLES:,}")
    check_seed(config.seed)
    if type(config.batch_size) is not int or config.batch_size < 1:
        raise ConfigError(f"--batch-size {config.batch_size}: use at least 1")
    if len(config.labels) > len(config.systems):
        raise ConfigError(f"{len(config.labels)} --label for {len(config.systems)} --model/--predictions")


def _systems(config: EvaluateConfig) -> list[System]:
    check_run_settings(config)
    if config.no_answer_data and not config.no_answer:
        raise ConfigError("no_answer_data measures the no-answer threshold against the answerable questions' margins: "
                          "set no_answer (--no-answer) too")
    if config.no_answer_limit is not None and (type(config.no_answer_limit) is not int or config.no_answer_limit < 1):
        raise ConfigError(f"--no-answer-limit {config.no_answer_limit}: use a positive number of questions")
    if config.preprocessing is not None:
        from ..preprocess.preprocessor import preprocessing_name

        preprocessing_name(config.preprocessing)
    if config.backend not in BACKENDS:
        raise ConfigError(f"--backend {config.backend!r}: use {' or '.join(BACKENDS)}")
    if config.backend == "onnx" and config.device != "cpu":
        raise ConfigError(f"--backend onnx runs on the CPU, not on --device {config.device}")
    if config.device != "cpu" and any(kind == "model" for kind, _ in config.systems):
        torch_device(config.device)  # before any data is read or model loaded
    unknown = [b for b in config.baselines if b not in BASELINES]
    if unknown:
        raise ConfigError(f"unknown baseline(s) {', '.join(unknown)}: use {', '.join(BASELINES)} or none")
    systems = []
    for i, (kind, source) in enumerate(config.systems):
        if kind == "model":  # before any data is read: a mistyped local path must not become a slow hub lookup
            check_local_source(source)
        label = config.labels[i] if i < len(config.labels) else Path(source.rstrip("/")).name.removesuffix(".json")
        info = _model_info(source) if kind == "model" else {}
        systems.append(System(label, kind, source, info))
    config.open.check()
    if config.open.active:
        if not any(s.kind == "model" for s in systems):
            raise ConfigError("--documents and --collection ask a model: give --model (a predictions file answers "
                              "paragraphs only)")
        asked = []
        for system in systems:
            asked.append(system)
            if system.kind == "model":
                for setting in config.open.settings():
                    others = config.open.documents if setting == "documents" else None
                    asked += [System(open_label(system.label, setting, retriever, others), "open", system.source,
                                     {"model": system.label, "setting": setting, "retriever": retriever,
                                      "documents": others}) for retriever in config.open.retrievers]
        systems = asked
    systems += [System(name, "baseline", name) for name in config.baselines]
    if not systems:
        raise ConfigError("nothing to evaluate: give --model or --predictions, or keep the baselines")
    labels = [s.label for s in systems]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise ConfigError(f"duplicate system label(s) {', '.join(duplicates)}: name them with --label")
    if not all(label.strip() for label in labels):
        raise ConfigError("an empty --label: each system needs a name for its table row and files")
    check_file_names(labels, "labels", "rename one with --label")
    return systems


def _check_output_dir(out: Path) -> None:
    # The directory is replaced as a whole: refuse to replace one that is not an earlier evaluation report.
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / RESULTS_FILE).is_file())):
        raise ConfigError(f"{out} exists and is not an evaluation report directory; choose another -o")


# ---------------------------------------------------------------------------------------------------------- writing


def write_report(out: Path, results: dict, per_question: dict, predictions: dict,
                 pretraining: dict[str, list[dict]] | None = None, no_answer: dict | None = None) -> None:
    with atomic_directory(out) as tmp:
        tmp.chmod(0o755)  # a temporary directory is private; a report is not
        (tmp / RESULTS_FILE).write_text(json.dumps(results, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        (tmp / "table.md").write_text(markdown_report(results), encoding="utf-8")
        (tmp / "table.csv").write_text(csv_report(results), encoding="utf-8")
        for (dataset, label), records in per_question.items():
            _write_records(per_question_file(tmp, dataset, label), records)
        for (dataset, label), records in (no_answer or {}).items():
            _write_records(no_answer_file(tmp, dataset, label), records)
        for label, answers in predictions.items():
            (tmp / "predictions").mkdir(exist_ok=True)
            (tmp / "predictions" / f"{safe_name(label)}.json").write_text(
                json.dumps(answers, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
        (tmp / "plots").mkdir()
        for dataset in results["datasets"]:
            plot_dataset(results, dataset, tmp / "plots")
        if results.get("open"):
            plot_open(results, tmp / "plots")
        if pretraining:
            (tmp / "pretraining").mkdir()
            for label, rows in pretraining.items():
                (tmp / "pretraining" / f"{safe_name(label)}.jsonl").write_text(
                    "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
            plot_pretraining(pretraining, tmp / "plots")


def _write_records(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # gzip without a timestamp: the same scores give the same bytes, so a rerun does not churn the repository.
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8"))


# ------------------------------------------------------------------------------------------------------ pretraining


def load_pretraining_log(path: str | os.PathLike) -> list[dict]:
    """The rows of a pretraining run's log.jsonl; a malformed line is an error naming it."""
    path = check_input_file(path, "pretraining log (the log.jsonl in a `pretrain` output directory)")
    rows = []
    for number, line in enumerate(read_text_file(path, max_bytes=MAX_DATA_FILE_BYTES).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"not JSON ({error.msg})", path=path, line=number) from None
        except (ValueError, RecursionError) as error:  # an integer too long, nesting too deep
            raise InputError(f"not JSON ({describe_exception(error)})", path=path, line=number) from None
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            raise InputError("a log row must be an object with an integer 'step'", path=path, line=number)
        rows.append(row)
    if not any("loss" in r for r in rows):
        raise InputError("no training rows (with 'loss'): not a `pretrain` log, or the run logged nothing yet",
                         path=path)
    return rows


def pretraining_summary(rows: list[dict]) -> dict:
    """Size of the run and its last training and held-out values."""
    train = [r for r in rows if "loss" in r]
    evals = [r for r in rows if any(k.startswith("eval_") for k in r)]
    last = train[-1]
    return {"steps": last["step"], "tokens": last.get("tokens"), "minutes": round(last.get("elapsed", 0) / 60, 1),
            "tokens_per_second": last.get("tokens_per_second"),
            "train": {k: v for k, v in last.items() if isinstance(v, (int, float)) and k not in ("step", "tokens")},
            "eval": {k: v for k, v in (evals[-1] if evals else {}).items() if k.startswith("eval_")},
            "eval_step": evals[-1]["step"] if evals else None}


# ---------------------------------------------------------------------------------------------------------- reading



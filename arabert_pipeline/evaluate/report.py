"""Side-by-side evaluation: systems × datasets → per-question scores, tables (md / csv / json) and plots.

    config = EvaluateConfig(systems=[("model", "runs/qa-a"), ("predictions", "b.json")], data=["arcd-test"],
                            out=Path("reports/eval"))
    results = run_evaluation(config)      # also writes everything under config.out, atomically

A system is a QA model dir / hub id (answers predicted with `qa.infer.QAModel`), a predictions file
(`{question id: answer text}` or `{question id: {"text": ..., "start": ...}}`, as `evaluate` itself writes under
predictions/), or a baseline that needs no model (baselines.py: first / random / TF-IDF sentence, sliding window,
word-overlap span). Every metric is the ×100 mean over ALL questions of the dataset
(a missing prediction scores 0 and is counted), with a seeded bootstrap 95% CI, and a paired bootstrap comparison
(CI of the difference, p-value; exact McNemar for EM) of every system against the first one.

Output directory (replaced as a whole once complete):
    results.json                      everything below, machine-readable (read by notebooks/evaluation.ipynb)
    table.md, table.csv               the tables; table.md also states what "mBERT" means and the paper's numbers
    per_question/DATASET/LABEL.jsonl  one line per question: prediction, gold answers, the six scores, buckets
    predictions/LABEL.json            a model's answers {id: {"text", "start"}} over all datasets, reusable with
                                      --predictions (so a rerun need not predict again)
    plots/DATASET_metrics.png, DATASET_f1_by_answer_length.png, DATASET_f1_by_question_word.png
    pretraining/LABEL.jsonl, plots/pretraining.png
                                      with --pretraining-log: the pretraining runs' logs (log.jsonl of
                                      `arabert-pipeline pretrain`), their loss curves and last held-out metrics
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts import atomic_directory, portable_path, read_metadata
from ..errors import ConfigError, InputError
from . import metrics
from .baselines import BASELINES, baseline_predictions

RESULTS_DIR_ENV = "ARABERT_PIPELINE_EVAL_DIR"
RESULTS_FILE = "results.json"


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
    "ARCD-train. A reference point, not a comparable row: the models evaluated here are much smaller, pretrained on "
    "far less text and, offline, fine-tuned without Arabic-SQuAD."
)
METRIC_NOTE = (
    "SOQAL = the definitions of SOQAL's bert/evaluate.py used for the paper (every 'ال' removed even inside words, "
    "no Arabic punctuation/diacritic handling, sentences split by English Punkt so '؟' is no boundary). Arabic = "
    "article stripped only as a word prefix, diacritics/tatweel/Arabic punctuation removed, alef/yeh/teh-marbuta "
    "forms unified, sentences split also on '؟' and newlines, the gold sentence located by answer_start. "
    "See arabert_pipeline/evaluate/metrics.py."
)

# Interrogatives as `metrics.arabic_normalize` leaves them (alef forms unified, ى → ي, ة → ه), with attached clitics.
QUESTION_WORDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ما": ("ma (what)", ("ما", "ماذا", "ماهو", "ماهي", "مالذي", "بما", "بماذا", "مازا", "بمازا", "وما", "وماذا", "فما",
                         "عما", "مما", "بم")),
    "من": ("man (who)", ("من", "ومن", "لمن", "بمن", "ممن", "عمن")),
    "متى": ("mata (when)", ("متي", "ومتي")),
    "أين": ("ayna (where)", ("اين", "واين")),
    "كم": ("kam (how many)", ("كم", "وكم", "بكم")),
    "كيف": ("kayfa (how)", ("كيف", "وكيف")),
    "لماذا": ("limadha (why)", ("لماذا", "ولماذا")),
    "هل": ("hal (yes/no)", ("هل", "وهل")),
    "أي": ("ayy (which)", ("اي", "ايه", "باي", "لاي", "فاي", "واي")),
}
OTHER = "other"
ANSWER_LENGTH_BUCKETS = (("1", 1, 1), ("2", 2, 2), ("3", 3, 3), ("4-5", 4, 5), ("6-10", 6, 10), ("11+", 11, 10**9))
METRIC_LABELS = {"em": "EM", "f1": "F1", "sm": "SM"}
VARIANT_LABELS = {"soqal": "SOQAL", "arabic": "Arabic"}


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


@dataclasses.dataclass
class System:
    label: str
    kind: str  # "model" | "predictions" | "baseline"
    source: str
    info: dict[str, Any] = dataclasses.field(default_factory=dict)


def question_word(question: str) -> str:
    """The interrogative a question asks with ("ما", "من", "متى", "أين", "كم", "كيف", "لماذا", "هل", "أي") or "other"."""
    tokens = metrics.arabic_normalize(question).split()
    for i, token in enumerate(tokens):
        for word, (_, forms) in QUESTION_WORDS.items():
            if token in forms:
                # "من أي ..." is "from which ...", not "who".
                if word == "من" and i + 1 < len(tokens) and tokens[i + 1] in QUESTION_WORDS["أي"][1]:
                    return "أي"
                return word
    return OTHER


def answer_length_bucket(answer: str) -> str:
    words = len(answer.split())
    return next((name for name, low, high in ANSWER_LENGTH_BUCKETS if low <= words <= high), "1")


# ----------------------------------------------------------------------------------------------------------- inputs


def _dataset_key(source: str) -> str:
    from ..qa.data import dataset_names

    return source if source in dataset_names() else Path(source).stem


def load_predictions_file(path: str | os.PathLike) -> dict[str, tuple[str, int | None]]:
    """{id: (text, start or None)} from `{id: text}` or `{id: {"text", "start"}}` JSON; bad entries name the id."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError as exc:
        raise InputError("no such predictions file", path=path) from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"not a JSON predictions file ({exc})", path=path) from exc
    if not isinstance(raw, dict):
        raise InputError("expected a JSON object {question id: answer text}", path=path)
    predictions = {}
    for qid, value in raw.items():
        if isinstance(value, dict):
            text, start = value.get("text"), value.get("start")
        else:
            text, start = value, None
        if not isinstance(text, str) or not (start is None or (isinstance(start, int) and start >= 0)):
            raise InputError("expected an answer string or {\"text\": str, \"start\": int}", path=path,
                             field=f"question {qid}")
        predictions[str(qid)] = (text, start)
    return predictions


def _model_info(source: str) -> dict[str, Any]:
    """What a report needs to say about a model: its preprocessing and size, from its dir when it is local."""
    path = Path(source)
    if not path.is_dir():
        return {"hub_id": source}
    info: dict[str, Any] = {"preprocessing": read_metadata(path, missing_ok=True).get("preprocessing")}
    config_file = path / "config.json"
    if config_file.is_file():
        config = json.loads(config_file.read_text(encoding="utf-8"))
        for key in ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"):
            info[key] = config.get(key)
    return info


def _predict_with_model(model, examples: list[dict], batch_size: int) -> dict[str, tuple[str, int | None]]:
    """The best answer of a `qa.infer.QAModel` per question; a question it finds no span for stays missing."""
    answers = model.predict(examples, batch_size=batch_size)
    return {ex["id"]: (found[0].text, found[0].start) for ex, found in zip(examples, answers) if found}


# ---------------------------------------------------------------------------------------------------------- scoring


def score_system(examples: list[dict], predictions: dict[str, tuple[str, int | None]]) -> list[dict]:
    """Per-question records: prediction, gold answers, buckets and the six scores."""
    records = []
    for ex in examples:
        text, start = predictions.get(ex["id"], (None, None))
        gold = list(ex["answers"]["text"])
        records.append({
            "id": ex["id"],
            "prediction": text,
            "prediction_start": start,
            "missing": text is None,
            "gold": gold,
            "question_word": question_word(ex["question"]),
            "answer_length": answer_length_bucket(gold[0]),
            **metrics.score_question(ex, text, start),
        })
    return records


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
            summary["paired_vs_reference"][key]["mcnemar_p"] = metrics.mcnemar_exact(other[:, column], scores[:, column])
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
    models: dict[str, Any] = {}  # loaded once, used for every dataset
    datasets: dict[str, dict] = {}
    per_question: dict[tuple[str, str], list[dict]] = {}
    for source in config.data:
        key = _dataset_key(source)
        if key in datasets:
            raise ConfigError(f"dataset {source!r} given twice (or two files named {key})")
        datasets[key], records = _evaluate_dataset(config, source, key, systems, answers, models, log)
        per_question.update({(key, label): rows for label, rows in records.items()})

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
    results = {
        "created_by": "arabert-pipeline evaluate",
        "config": {**dataclasses.asdict(config), "out": portable_path(config.out),
                   "systems": [(kind, portable_path(source)) for kind, source in config.systems],
                   "pretraining_logs": [(label, portable_path(log)) for label, log in config.pretraining_logs]},
        "reference": systems[0].label,
        "systems": [{**dataclasses.asdict(s), "source": portable_path(s.source)} for s in systems],
        "datasets": datasets,
        "score_keys": list(metrics.SCORE_KEYS),
        "mbert_note": MBERT_NOTE,
        "metric_note": METRIC_NOTE,
        "paper_table6": {"note": PAPER_NOTE, "dataset": "arcd-test", "variant": "soqal",
                         "rows": {name: dict(zip(("em", "f1", "sm"), row)) for name, row in PAPER_TABLE6.items()}},
        "pretraining": {label: pretraining_summary(rows) for label, rows in pretraining.items()},
    }
    write_report(config.out, results, per_question, model_answers, pretraining)
    return results


def _evaluate_dataset(config, source, key, systems, answers, models, log) -> tuple[dict, dict[str, list[dict]]]:
    """One dataset: every system's per-question records and summary (paired against the first system)."""
    from ..qa.data import read_squad

    squad = read_squad(source, misaligned="keep")
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
    for system in systems:
        log(f"{key}: {system.label} ({system.kind}, {len(examples)} questions)")
        if system.kind == "model":
            if system.label not in models:
                from ..qa.infer import QAModel

                models[system.label] = QAModel.load(system.source, whole_words=config.whole_words)
            predictions = _predict_with_model(models[system.label], examples, config.batch_size)
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
        if system.kind == "model" and config.no_answer:
            entry.setdefault("no_answer", {})[system.label] = score_no_answer(
                models[system.label], examples, records[system.label], config)
    return entry, records


def score_no_answer(model, examples: list[dict], records: list[dict], config: EvaluateConfig) -> dict[str, Any]:
    """SQuAD 2.0-style scores: the answerable questions as asked, allowed to abstain (an abstention scores 0), and
    each once more with a paragraph of its article that lacks the answer (`unanswerable_examples`), where only an
    abstention is right. Overall = the mean over both; `always_answer_f1` is the overall of the same answers without
    the no-answer option (every negative wrong)."""
    from ..qa.data import unanswerable_examples

    negatives = unanswerable_examples(examples, seed=config.seed)
    answers = model.predict(examples + negatives, batch_size=config.batch_size, allow_no_answer=True)
    answered = np.array([bool(found) for found in answers[: len(examples)]])
    abstained = np.array([not found for found in answers[len(examples):]], dtype=float)
    out: dict[str, Any] = {"threshold": model.settings.null_score_diff_threshold, "answerable": len(examples),
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


def _systems(config: EvaluateConfig) -> list[System]:
    if len(config.labels) > len(config.systems):
        raise ConfigError(f"{len(config.labels)} --label for {len(config.systems)} --model/--predictions")
    unknown = [b for b in config.baselines if b not in BASELINES]
    if unknown:
        raise ConfigError(f"unknown baseline(s) {', '.join(unknown)}: use {', '.join(BASELINES)} or none")
    systems = []
    for i, (kind, source) in enumerate(config.systems):
        label = config.labels[i] if i < len(config.labels) else Path(source.rstrip("/")).name.removesuffix(".json")
        info = _model_info(source) if kind == "model" else {}
        systems.append(System(label, kind, source, info))
    systems += [System(name, "baseline", name) for name in config.baselines]
    if not systems:
        raise ConfigError("nothing to evaluate: give --model or --predictions, or keep the baselines")
    labels = [s.label for s in systems]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise ConfigError(f"duplicate system label(s) {', '.join(duplicates)}: name them with --label")
    return systems


def _check_output_dir(out: Path) -> None:
    # The directory is replaced as a whole: refuse to replace one that is not an earlier evaluation report.
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / RESULTS_FILE).is_file())):
        raise ConfigError(f"{out} exists and is not an evaluation report directory; choose another -o")


# ---------------------------------------------------------------------------------------------------------- writing


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name)


def write_report(out: Path, results: dict, per_question: dict, predictions: dict,
                 pretraining: dict[str, list[dict]] | None = None) -> None:
    with atomic_directory(out) as tmp:
        tmp.chmod(0o755)  # a temporary directory is private; a report is not
        (tmp / RESULTS_FILE).write_text(json.dumps(results, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        (tmp / "table.md").write_text(markdown_report(results), encoding="utf-8")
        (tmp / "table.csv").write_text(csv_report(results), encoding="utf-8")
        for (dataset, label), records in per_question.items():
            path = tmp / "per_question" / _safe(dataset) / f"{_safe(label)}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        for label, answers in predictions.items():
            (tmp / "predictions").mkdir(exist_ok=True)
            (tmp / "predictions" / f"{_safe(label)}.json").write_text(
                json.dumps(answers, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
        (tmp / "plots").mkdir()
        for dataset in results["datasets"]:
            plot_dataset(results, dataset, tmp / "plots")
        if pretraining:
            (tmp / "pretraining").mkdir()
            for label, rows in pretraining.items():
                (tmp / "pretraining" / f"{_safe(label)}.jsonl").write_text(
                    "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
            plot_pretraining(pretraining, tmp / "plots")


def _cell(score: dict) -> str:
    return f"{score['mean']:.1f} [{score['low']:.1f}, {score['high']:.1f}]"


def _diff_cell(paired: dict) -> str:
    p = paired["p_value"]
    return f"{paired['diff']:+.1f} [{paired['low']:+.1f}, {paired['high']:+.1f}] p={p:.3f}" if p >= 0.001 else \
        f"{paired['diff']:+.1f} [{paired['low']:+.1f}, {paired['high']:+.1f}] p<0.001"


def _system_name(system: dict) -> str:
    return f"*{system['label']}* (baseline)" if system["kind"] == "baseline" else system["label"]


def _columns(results: dict) -> list[str]:
    return [f"{METRIC_LABELS[k.split('_')[1]]} ({VARIANT_LABELS[k.split('_')[0]]})" for k in results["score_keys"]]


def systems_table(results: dict) -> str:
    lines = ["| system | kind | source | details |", "|---|---|---|---|"]
    for s in results["systems"]:
        details = ", ".join(f"{k}={v}" for k, v in s["info"].items() if v is not None) or "-"
        lines.append(f"| {s['label']} | {s['kind']} | `{s['source']}` | {details} |")
    return "\n".join(lines)


def scores_table(results: dict, dataset: str) -> str:
    """EM / F1 / SM × variant with 95% CIs, one row per system."""
    systems = {s["label"]: s for s in results["systems"]}
    columns = _columns(results)
    lines = ["| system | " + " | ".join(columns) + " | missing |", "|---" * (len(columns) + 2) + "|"]
    for label, summary in results["datasets"][dataset]["systems"].items():
        cells = [_cell(summary["scores"][k]) for k in results["score_keys"]]
        lines.append(f"| {_system_name(systems[label])} | " + " | ".join(cells) + f" | {summary['missing']} |")
    return "\n".join(lines)


def paired_table(results: dict, dataset: str) -> str:
    """Reference − system per metric: difference, 95% CI, p-values. Empty when there is a single system."""
    systems = {s["label"]: s for s in results["systems"]}
    compared = [(label, s) for label, s in results["datasets"][dataset]["systems"].items()
                if "paired_vs_reference" in s]
    if not compared:
        return ""
    columns = _columns(results)
    lines = ["| system | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for label, summary in compared:
        paired = summary["paired_vs_reference"]
        cells = [_diff_cell(paired[k]) + (f", McNemar p={paired[k]['mcnemar_p']:.3g}" if "mcnemar_p" in paired[k]
                                          else "") for k in results["score_keys"]]
        lines.append(f"| {_system_name(systems[label])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def no_answer_table(results: dict, dataset: str) -> str:
    lines = ["| system | threshold | answerable / unanswerable | answered (%) | HasAns F1 (SOQAL) | NoAns accuracy | "
             "overall F1 (SOQAL) | always answering | overall F1 (Arabic) |", "|---|---|---|---|---|---|---|---|---|"]
    for label, row in results["datasets"][dataset]["no_answer"].items():
        soqal, arabic = row["soqal"], row["arabic"]
        no_ans = "-" if row["no_ans_accuracy"] is None else f"{row['no_ans_accuracy']:.1f}"
        lines.append(f"| {label} | {row['threshold']:.2f} | {row['answerable']} / {row['unanswerable']} | "
                     f"{row['answered']:.1f} | {soqal['has_ans_f1']:.1f} | {no_ans} | {_cell(soqal['overall_f1'])} | "
                     f"{soqal['always_answer_f1']:.1f} | {_cell(arabic['overall_f1'])} |")
    return "\n".join(lines)


def breakdown_table(results: dict, dataset: str, field: str) -> str:
    """Arabic-variant F1 per bucket ("by_question_word" or "by_answer_length"), one column per system."""
    entry = results["datasets"][dataset]
    labels = list(entry["systems"])
    buckets = list(dict.fromkeys(b for s in entry["systems"].values() for b in s[field]))
    title = "question word" if field == "by_question_word" else "gold answer words"
    lines = [f"| {title} | n | " + " | ".join(labels) + " |", "|---" * (len(labels) + 2) + "|"]
    for bucket in buckets:
        cells = [f"{s[field][bucket]['arabic_f1']:.1f}" for s in entry["systems"].values()]
        lines.append(f"| {bucket} | {entry['systems'][labels[0]][field][bucket]['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paper_table(results: dict) -> str:
    lines = ["| model (paper) | EM | F1 | SM |", "|---|---|---|---|"]
    lines += [f"| {name} | {r['em']} | {r['f1']} | {r['sm']} |" for name, r in results["paper_table6"]["rows"].items()]
    return "\n".join(lines)


def dataset_note(results: dict, dataset: str) -> str:
    entry = results["datasets"][dataset]
    misaligned = entry["misaligned_gold_ids"]
    sentences = entry["sentences_per_context"]
    return (f"{entry['questions']} questions (`{entry['source']}`)"
            + (f"; {len(misaligned)} gold answer(s) not found at their answer_start, kept ({', '.join(misaligned)})"
               if misaligned else "")
            + f". Sentences per context: {sentences['punkt']:.1f} (Punkt, SOQAL SM) vs {sentences['arabic']:.1f} "
            "(Arabic SM): the fewer the sentences, the easier Sentence-Match.")


def markdown_report(results: dict) -> str:
    config = results["config"]
    parts = [
        "# Side-by-side QA evaluation",
        f"**mBERT.** {results['mbert_note']}",
        f"**Metrics.** {results['metric_note']} Values are ×100 means over all questions with 95% bootstrap CIs "
        f"({config['resamples']} resamples, seed {config['seed']}); a missing prediction scores 0.",
        "## Systems", systems_table(results),
    ]
    for dataset in results["datasets"]:
        parts += [f"## {dataset}", dataset_note(results, dataset), scores_table(results, dataset)]
        paired = paired_table(results, dataset)
        if paired:
            parts += [f"Paired differences, {results['reference']} − system (95% CI, two-sided paired-bootstrap p; "
                      "EM also exact McNemar p):", paired]
        if results["datasets"][dataset].get("no_answer"):
            parts += ["No answer in this context (SQuAD 2.0-style; `--no-answer`): each question also paired with "
                      "another paragraph of its article that lacks the answer; models answer with allow_no_answer "
                      "at their dev-chosen threshold.", no_answer_table(results, dataset)]
        parts += ["F1 (Arabic variant) by question word:", breakdown_table(results, dataset, "by_question_word"),
                  "F1 (Arabic variant) by gold answer length in words:",
                  breakdown_table(results, dataset, "by_answer_length")]
    if results.get("pretraining"):
        parts += ["## Pretraining runs", "Last logged training values and last held-out evaluation "
                  "(fixed masks on held-out documents) of each run given with --pretraining-log.",
                  pretraining_table(results)]
    parts += ["## Reference: the AraBERT paper's Table 6 (not comparable)", results["paper_table6"]["note"],
              paper_table(results)]
    return "\n\n".join(parts) + "\n"


def csv_report(results: dict) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["dataset", "system", "kind", "variant", "metric", "value", "ci_low", "ci_high", "questions",
                     "missing", "reference", "diff_vs_reference", "diff_low", "diff_high", "p_value", "mcnemar_p"])
    kinds = {s["label"]: s["kind"] for s in results["systems"]}
    for dataset, entry in results["datasets"].items():
        for label, summary in entry["systems"].items():
            for key in results["score_keys"]:
                variant, metric = key.split("_")
                score = summary["scores"][key]
                paired = summary.get("paired_vs_reference", {}).get(key, {})
                writer.writerow([dataset, label, kinds[label], variant, metric, f"{score['mean']:.4f}",
                                 f"{score['low']:.4f}", f"{score['high']:.4f}", summary["questions"],
                                 summary["missing"], results["reference"]]
                                + [f"{paired[k]:.4g}" if k in paired else "" for k in
                                   ("diff", "low", "high", "p_value", "mcnemar_p")])
    for name, row in results["paper_table6"]["rows"].items():
        for metric, value in row.items():
            writer.writerow(["arcd-test (AraBERT paper, Table 6)", name, "published", "soqal", metric, value]
                            + [""] * 10)
    return buffer.getvalue()


def plot_dataset(results: dict, dataset: str, directory: Path) -> list[Path]:
    """The three plots of one dataset, as PNG files in `directory`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entry = results["datasets"][dataset]
    labels = list(entry["systems"])
    width = 0.8 / len(labels)
    paths = []

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, variant in zip(axes, metrics.VARIANTS):
        for i, label in enumerate(labels):
            scores = [entry["systems"][label]["scores"][f"{variant}_{m}"] for m in metrics.METRICS]
            means = np.array([s["mean"] for s in scores])
            errors = np.array([[s["mean"] - s["low"] for s in scores], [s["high"] - s["mean"] for s in scores]])
            x = np.arange(len(metrics.METRICS)) + (i - (len(labels) - 1) / 2) * width
            ax.bar(x, means, width, yerr=errors, capsize=3, label=label)
        ax.set_xticks(np.arange(len(metrics.METRICS)), [METRIC_LABELS[m] for m in metrics.METRICS])
        ax.set_title(f"{VARIANT_LABELS[variant]} metric variant")
        ax.set_ylim(0, 100)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("score (×100), 95% bootstrap CI")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"{dataset}: {entry['questions']} questions")
    fig.tight_layout()
    paths.append(directory / f"{_safe(dataset)}_metrics.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    for field, title, names in (
        ("by_answer_length", "gold answer length (words)", {name: name for name, _, _ in ANSWER_LENGTH_BUCKETS}),
        ("by_question_word", "question word", {**{w: latin for w, (latin, _) in QUESTION_WORDS.items()}, OTHER: OTHER}),
    ):
        buckets = list(dict.fromkeys(b for s in entry["systems"].values() for b in s[field]))
        fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(buckets) + 2), 4.2))
        for i, label in enumerate(labels):
            groups = entry["systems"][label][field]
            x = np.arange(len(buckets)) + (i - (len(labels) - 1) / 2) * width
            ax.bar(x, [groups[b]["arabic_f1"] for b in buckets], width, label=label)
        counts = entry["systems"][labels[0]][field]
        # Latin names: matplotlib does not shape Arabic script.
        ax.set_xticks(np.arange(len(buckets)), [f"{names[b]}\nn={counts[b]['n']}" for b in buckets], fontsize=8)
        ax.set_ylabel("F1 (Arabic variant, ×100)")
        ax.set_ylim(0, 100)
        ax.set_xlabel(title)
        ax.set_title(f"{dataset}: F1 by {title}")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        paths.append(directory / f"{_safe(dataset)}_f1_{field}.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


# ------------------------------------------------------------------------------------------------------ pretraining

# Curves worth plotting, in panel order: (title, keys that measure it in the objectives' logs).
PRETRAINING_PANELS = (
    ("masked-token loss (MLM; ELECTRA generator)", ("mlm_loss", "generator_loss")),
    ("replaced-token detection loss (ELECTRA)", ("rtd_loss",)),
    ("span-selection loss", ("span_loss",)),
)
PRETRAINING_COLUMNS = (
    ("eval_mlm_loss", "held-out MLM loss"), ("eval_mlm_perplexity", "perplexity"),
    ("eval_mlm_accuracy", "masked accuracy"), ("eval_generator_loss", "held-out generator loss"),
    ("eval_generator_accuracy", "generator accuracy"), ("eval_rtd_loss", "held-out RTD loss"),
    # Accuracy alone flatters a collapsed discriminator (always "original" scores 1 − replaced share): recall shows it.
    ("eval_rtd_accuracy", "RTD accuracy"), ("eval_rtd_recall", "RTD recall"),
    ("eval_span_exact", "span exact"),
)


def load_pretraining_log(path: str | os.PathLike) -> list[dict]:
    """The rows of a pretraining run's log.jsonl; a malformed line is an error naming it."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such pretraining log (the log.jsonl in a `pretrain` output directory)", path=path)
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"not JSON ({error.msg})", path=path, line=number) from None
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


def pretraining_table(results: dict) -> str:
    runs = results.get("pretraining") or {}
    columns = [(key, name) for key, name in PRETRAINING_COLUMNS if any(key in r["eval"] for r in runs.values())]
    lines = ["| run | steps | tokens | minutes | " + " | ".join(name for _, name in columns) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(columns)]
    for label, run in runs.items():
        cells = [f"{run['eval'][key]:.3f}" if key in run["eval"] else "" for key, _ in columns]
        tokens = f"{run['tokens'] / 1e6:.2f} M" if run.get("tokens") else ""
        lines.append(f"| {label} | {run['steps']} | {tokens} | {run['minutes']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_pretraining(logs: dict[str, list[dict]], directory: Path) -> Path:
    """Training curves (lines) and held-out evaluations (markers) against tokens read, one panel per loss."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(title, keys) for title, keys in PRETRAINING_PANELS
              if any(k in r for rows in logs.values() for r in rows for k in keys)]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    for ax, (title, keys) in zip(axes[0], panels):
        for index, (label, rows) in enumerate(logs.items()):
            color = f"C{index}"
            for key in keys:
                train = [(r["tokens"] / 1e6, r[key]) for r in rows if key in r and "tokens" in r]
                if train:
                    ax.plot(*zip(*train), color=color, lw=1, alpha=0.8, label=f"{label} ({key})")
                held_out = [(r["tokens"] / 1e6, r[f"eval_{key}"]) for r in rows
                            if f"eval_{key}" in r and "tokens" in r]
                if held_out:
                    ax.plot(*zip(*held_out), "o", color=color, ms=4, label=f"{label} (held-out)")
        ax.set_xlabel("tokens read (millions)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = directory / "pretraining.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------------------- reading


def results_dir(path: str | os.PathLike | None = None, *, default: str | os.PathLike | None = None) -> Path:
    """An evaluation run directory: `path`, else $ARABERT_PIPELINE_EVAL_DIR, else `default` (the notebook passes
    its committed results, relative to the notebook; the package itself knows no results folder)."""
    chosen = path or os.environ.get(RESULTS_DIR_ENV) or default
    if not chosen:
        raise ConfigError(f"which evaluation run? Pass its directory or set ${RESULTS_DIR_ENV}")
    return Path(chosen)


def load_results(path: str | os.PathLike | None = None) -> dict:
    """results.json of an evaluation run directory (see `results_dir`)."""
    directory = results_dir(path)
    file = directory / RESULTS_FILE
    if not file.is_file():
        raise InputError(f"no {RESULTS_FILE}: not an `arabert-pipeline evaluate` output directory", path=directory)
    return json.loads(file.read_text(encoding="utf-8"))


def load_per_question(path: str | os.PathLike | None, dataset: str, label: str) -> list[dict]:
    file = results_dir(path) / "per_question" / _safe(dataset) / f"{_safe(label)}.jsonl"
    return [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line]


def print_summary(results: dict, stream=None) -> None:
    """One line per dataset × system: the six metrics (×100)."""
    stream = stream or sys.stdout
    for dataset, entry in results["datasets"].items():
        for label, summary in entry["systems"].items():
            cells = " ".join(f"{key}={summary['scores'][key]['mean']:.1f}" for key in results["score_keys"])
            print(f"{dataset:24} {label:20} {cells}  missing={summary['missing']}", file=stream)

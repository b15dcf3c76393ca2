"""Choosing a QA model's decoding settings on dev: the sentence prior, the sentence limit and expected-F1 decoding.

    arabert-pipeline tune-decoding runs/qa/mini --dev arcd-dev mlqa-ar-dev -o runs/qa/mini-tuned

`finetune` calls `tune_decoding` after training when it has dev sets; `tune-decoding` does the same for a model that is
already trained (ours from an earlier release, or one whose dev sets were not given), without touching its weights:
the output is a copy of the model dir whose arabert_pipeline.json holds the chosen settings and every dev score tried.
The model (and its reader) runs once per dev set, on its questions and their unanswerable pairings together
(`dev_passes`); every choice after that only re-decodes those logits (QAModel.decode). Every choice is made on the dev
metric (qa/metrics.py DEV_METRIC), pooled over the questions of all dev sets.
"""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from ...artifacts.metadata import read_metadata, write_metadata
from ...artifacts.models import check_local_source, shipped_model_dir, torch_device
from ...artifacts.paths import portable_path
from ...artifacts.writes import atomic_directory
from ...errors import ConfigError
from ...outputs import MODEL_DIR_FILES, OutputKind, OutputLock, check_not_input, claim_output_dir
from ..data import SquadFile, read_squad, sets_trained_on, unanswerable_examples
from ..metrics import DEV_METRIC, score_question
from .bonuses import SENTENCE_IDF_FILE
from .calibration import CORRECT_AT, FEATURES, Calibration, choose_calibration
from .companion import COMPANION_DIR, Companion, copy_companion, export_companion
from .decode import Logits
from .model import QAModel
from .settings import DECODING_FIELDS, DECODINGS, PLAIN_DECODING, QASettings, check_decoding_setting

# Sentence-prior weights tried on the dev sets (in logits: a span's score is its start + end logit).
SENTENCE_PRIOR_GRID = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
# Temperatures of expected-F1 decoding tried (1 = the model's own distribution; lower = shorter, surer answers,
# higher = longer ones that hedge more).
TEMPERATURE_GRID = (0.5, 1.0, 2.0)
# Weights of a companion reader's word log-probabilities (companion.py), tried when the model has one.
READER_WEIGHT_GRID = (0.0, 2.0, 4.0, 8.0, 16.0)
# Words tried as `leading_words` (normalized as overlap.normalize_word does): prepositions, "about", the nouns
# before a year, and the pronoun that opens a "who is" answer. Each is kept when dropping it raises the dev metric
# and changes at least MIN_LEADING_WORD_ANSWERS dev answers: a gain on one or two answers is a coin flip (on the
# shipped model's dev sets, 6 of the 17 words changed one or two answers each, by ±0.04 F1).
LEADING_WORD_CANDIDATES = ("في", "من", "الي", "علي", "عن", "منذ", "حتي", "خلال", "نحو", "حوالي", "قرابه", "عام",
                           "العام", "سنه", "السنه", "هو", "هي")
MIN_LEADING_WORD_ANSWERS = 3
# The no-answer threshold must keep answering this share of the answerable dev questions. SQuAD 2.0's rule (best
# overall F1 on dev, with as many unanswerable as answerable questions) made a small model abstain on most real
# questions: where its answers score F1 ~0.2, abstaining costs an answerable question little and earns 1 on a negative.
MIN_ANSWERED = 0.8
TUNE_OUTPUT = OutputKind("tune-decoding", names=(*MODEL_DIR_FILES, SENTENCE_IDF_FILE, COMPANION_DIR), markers=(),
                         metadata_marker=("decoding_tuned_by", "tune-decoding"))


def dev_score(qa: QAModel, dev_files: list[SquadFile], batch_size: int) -> float:
    """DEV_METRIC ×100 pooled over the questions of all dev sets."""
    scores = [_best_score(example, found) for f in dev_files
              for example, found in zip(f.examples, qa.predict(f.examples, batch_size=batch_size), strict=True)]
    return 100.0 * float(np.mean(scores))


def _best_score(example: dict[str, Any], found) -> float:
    """DEV_METRIC of an example's best answer (0 without one)."""
    best = found[0] if found else None
    return score_question(example, best and best.text, best and best.start)[DEV_METRIC]


def decoding_grid(fixed: dict[str, Any]) -> list[dict[str, Any]]:
    """The decoding settings to try on dev: every combination of the grids, with the `fixed` (not None) values kept."""
    grids = {"sentence_prior": SENTENCE_PRIOR_GRID, "within_sentence": (False, True), "decoding": DECODINGS,
             "expected_f1_temperature": TEMPERATURE_GRID, "reader_weight": READER_WEIGHT_GRID}
    rows: list[dict[str, Any]] = [{}]
    for name, grid in grids.items():
        values = grid if fixed.get(name) is None else (fixed[name],)
        rows = [{**row, name: value} for row in rows for value in values]
    # The temperature only shapes expected-F1 decoding: max-score is tried once, at 1.
    return [row for row in rows if row["decoding"] == "expected-f1" or row["expected_f1_temperature"] == 1.0
            or fixed.get("expected_f1_temperature") is not None]


@dataclasses.dataclass
class DevPass:
    """One dev set run through a QA model once: its answerable questions, followed in `logits` by their
    `unanswerable_examples` (for the no-answer threshold), and the reader's scores of both (None without a reader)."""

    examples: list[dict[str, Any]]
    logits: Logits
    reader_scores: list | None
    name: str = ""  # the dev set's (SquadFile.name), for the reports that compare the sets

    def answerable(self) -> tuple[Logits, list | None]:
        """The logits and reader scores of the answerable questions alone."""
        n = len(self.examples)
        return self.logits.head(n), self.reader_scores[:n] if self.reader_scores is not None else None


def dev_passes(qa: QAModel, dev_files: list[SquadFile], batch_size: int) -> list[DevPass]:
    """Each dev set through the model (and its reader): what every choice on dev re-decodes."""
    passes = []
    for f in dev_files:
        logits = qa.logits(f.examples + unanswerable_examples(f.examples), batch_size)
        passes.append(DevPass(f.examples, logits,
                              qa.reader_scores(logits.prepared) if qa.reader is not None else None, f.name))
    return passes


def best_answers(qa: QAModel, passes: list[DevPass], settings: QASettings) -> tuple[list[float], list[str | None]]:
    """DEV_METRIC and text of the best answer to every answerable dev question under `settings`."""
    scores, texts = [], []
    for run in passes:
        logits, reader_scores = run.answerable()
        answers = qa.decode(logits, settings=settings, reader_scores=reader_scores)
        for example, found in zip(run.examples, answers, strict=True):
            scores.append(_best_score(example, found))
            texts.append(found[0].text if found else None)
    return scores, texts


def tune_decoding(qa: QAModel, passes: list[DevPass], fixed: dict[str, Any]) -> list[dict[str, Any]]:
    """Pooled dev DEV_METRIC of each setting of `decoding_grid(fixed)`, as rows (without a reader, the reader weight
    is 0)."""
    if qa.reader is None:
        fixed = {**fixed, "reader_weight": 0.0}
    rows = decoding_grid(fixed)
    return [{**row, "score": 100.0 * float(np.mean(
        best_answers(qa, passes, dataclasses.replace(qa.settings, **as_settings(row)))[0]))} for row in rows]


def tune_leading_words(qa: QAModel, passes: list[DevPass],
                       candidates: tuple[str, ...] = LEADING_WORD_CANDIDATES) -> dict[str, Any]:
    """The `leading_words` chosen on dev under the model's other settings: each candidate alone is tried, and kept
    when dropping it from the answers it starts raises the pooled dev metric and changes at least
    MIN_LEADING_WORD_ANSWERS of them. Returns the words, the pooled dev score
    without and with them, and each candidate's count of changed answers and gain."""
    def answers(words: tuple[str, ...]) -> tuple[list[float], list[str | None]]:
        return best_answers(qa, passes, dataclasses.replace(qa.settings, leading_words=words))

    base_scores, base_texts = answers(())
    base = 100.0 * float(np.mean(base_scores))
    rows: list[dict[str, Any]] = []
    for word in candidates:
        scores, texts = answers((word,))
        rows.append({"word": word, "changed": sum(a != b for a, b in zip(texts, base_texts, strict=True)),
                     "gain": 100.0 * float(np.mean(scores)) - base})
    kept = tuple(row["word"] for row in rows if row["gain"] > 0 and row["changed"] >= MIN_LEADING_WORD_ANSWERS)
    return {"leading_words": kept, "dev_metric": DEV_METRIC, "score_without": base,
            "score_with": 100.0 * float(np.mean(answers(kept)[0])), "candidates": rows}


def describe_leading_words(result: dict[str, Any]) -> str:
    kept = ", ".join(result["leading_words"]) or "none"
    return (f"leading words dropped: {kept} (dev {result['dev_metric']} {result['score_without']:.2f} → "
            f"{result['score_with']:.2f})")


def as_settings(row: dict[str, Any]) -> dict[str, Any]:
    """A grid row's values as QASettings fields (the weights are floats there, a flag may have given an int)."""
    return {**{name: row[name] for name in DECODING_FIELDS}, "sentence_prior": float(row["sentence_prior"]),
            "reader_weight": float(row["reader_weight"])}


def best_decoding(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The settings of the best dev score; on a tie, the plainer decoder (no reader, smaller prior, no sentence
    limit, max-score)."""
    best = max(rows, key=lambda row: (row["score"], -row["reader_weight"], -row["sentence_prior"],
                                      not row["within_sentence"], row["decoding"] == "max-score",
                                      row["expected_f1_temperature"] == 1.0))
    return as_settings(best)


@dataclasses.dataclass
class DevAnswers:
    """The decoder's best answer to every dev question, as the no-answer threshold and the calibration need them."""

    metric: np.ndarray  # DEV_METRIC of the best answer of each answerable question
    top_score: dict[str, np.ndarray]  # its raw score per calibration input: the probability, the expected F1
    answerable_margin: np.ndarray  # null margin of each answerable question
    negative_margin: np.ndarray  # and of each unanswerable one (the question paired with another paragraph)
    features: np.ndarray | None = None  # calibration.answer_features of each best answer (what a logistic map reads)
    dev_set: np.ndarray | None = None  # which dev set (index into the passes) each answerable question is from
    dev_set_names: tuple[str, ...] | None = None  # the name of each dev set (of each pass), indexed by dev_set


def dev_answers(qa: QAModel, passes: list[DevPass]) -> DevAnswers:
    """Every dev question with its answer, and paired with another paragraph of its article (no answer there)."""
    # Raw scores: no map, reading what each input reads (expected F1 only where the decoder ranks by it).
    raw = {"probability": dataclasses.replace(qa.settings, calibration=None)}
    if qa.settings.decoding == "expected-f1":
        raw["expected-f1"] = dataclasses.replace(qa.settings, calibration=Calibration("none", input="expected-f1"))
    metric: list[float] = []
    answerable_margin: list[float] = []
    negative_margin: list[float] = []
    features: list[np.ndarray] = []
    dev_set: list[int] = []
    top_score: dict[str, list[float]] = {read: [] for read in raw}
    for index, run in enumerate(passes):
        n = len(run.examples)
        margins = qa.null_margins(run.logits)
        logits, reader_scores = run.answerable()
        for read, settings in raw.items():
            tables: list[np.ndarray] = []
            answers = qa.decode(logits, settings=settings, reader_scores=reader_scores,
                                features=tables if read == "probability" else None)
            for example, found in zip(run.examples, answers, strict=True):
                if read == "probability":  # the same spans under every input: only the score differs
                    metric.append(_best_score(example, found))
                top_score[read].append(found[0].score if found else 0.0)
            features.extend(t[0] if len(t) else np.zeros(len(FEATURES)) for t in tables)
        answerable_margin.extend(margins[:n])
        negative_margin.extend(margins[n:])
        dev_set.extend([index] * n)
    return DevAnswers(np.asarray(metric, dtype=np.float64),
                      {read: np.asarray(values, dtype=np.float64) for read, values in top_score.items()},
                      np.asarray(answerable_margin), np.asarray(negative_margin),
                      np.asarray(features, dtype=np.float64).reshape(-1, len(FEATURES)), np.asarray(dev_set),
                      dev_set_names(passes))


def dev_set_names(passes: list[DevPass]) -> tuple[str, ...]:
    """The name of each pass's dev set (its index when it has none), told apart by their index where two share one."""
    names = [run.name or str(index) for index, run in enumerate(passes)]
    if len(set(names)) < len(names):
        names = [f"{index}: {name}" for index, name in enumerate(names)]
    return tuple(names)


def tune_null_threshold(answers: DevAnswers) -> dict[str, Any]:
    """The `null_score_diff_threshold` chosen on dev, the scores at it, and the HasAns / NoAns curve around it.

    The dev questions (answerable) are pooled with their `unanswerable_examples`. At threshold t a question is answered
    when its null margin is ≤ t: an answerable one then scores its DEV_METRIC, an unanswerable one scores 1 when it is
    not answered. Thresholds tried: every margin seen (each is where a decision flips), and one above them all
    (always answer). The rule (MIN_ANSWERED): the best NoAns accuracy among the thresholds that still answer that
    share of the answerable questions. "always_answer" holds the scores of a decoder without the no-answer option;
    "curve" the scores at thresholds answering 50%, 60%, ... 100% of the answerable questions. `answers`: the
    model's `dev_answers` under its chosen settings.
    """
    metric, answerable_margin, negative_margin = answers.metric, answers.answerable_margin, answers.negative_margin
    total = len(metric) + len(negative_margin)

    def scores(threshold: float) -> dict[str, float]:
        answered = answerable_margin <= threshold
        abstained = negative_margin > threshold
        return {"answered": 100.0 * float(np.mean(answered)),
                "has_ans_f1": 100.0 * float(np.mean(metric * answered)),
                "no_ans_accuracy": 100.0 * float(np.mean(abstained)) if len(negative_margin) else 0.0,
                "overall_f1": 100.0 * float((np.sum(metric * answered) + np.sum(abstained)) / total)}

    seen = sorted(set(np.concatenate([answerable_margin, negative_margin]).tolist()))
    candidates = seen + [seen[-1] + 1.0]
    allowed = [t for t in candidates if np.mean(answerable_margin <= t) >= MIN_ANSWERED]
    best = max(allowed, key=lambda t: (scores(t)["no_ans_accuracy"], scores(t)["overall_f1"], t))
    curve = []
    for share in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0):  # the lowest threshold answering that share
        threshold = float(np.quantile(answerable_margin, share, method="inverted_cdf"))
        curve.append({"threshold": threshold, **scores(threshold)})
    return {"threshold": best, "rule": f"best NoAns accuracy answering ≥ {MIN_ANSWERED:.0%} of answerable dev "
            "questions", "dev_metric": DEV_METRIC, "answerable": len(metric), "unanswerable": len(negative_margin),
            "at_threshold": scores(best), "always_answer": scores(float("inf")), "curve": curve}


def describe_no_answer(result: dict[str, Any]) -> str:
    at, plain = result["at_threshold"], result["always_answer"]
    return (f"no answer: threshold {result['threshold']:.2f} on {result['answerable']} answerable + "
            f"{result['unanswerable']} unanswerable dev questions: answers {at['answered']:.0f}% of the answerable, "
            f"HasAns {result['dev_metric']} {at['has_ans_f1']:.1f}, "
            f"NoAns accuracy {at['no_ans_accuracy']:.1f}, overall {at['overall_f1']:.1f} (always answering: "
            f"{plain['overall_f1']:.1f})")


def describe_decoding(row: dict[str, Any]) -> str:
    within = ", within sentence" if row["within_sentence"] else ""
    temperature = row.get("expected_f1_temperature", 1.0)
    shaped = f" at temperature {temperature:g}" if row["decoding"] == "expected-f1" and temperature != 1.0 else ""
    reader = f", reader weight {row['reader_weight']:g}" if row.get("reader_weight") else ""
    return f"prior {row['sentence_prior']:g}{within}, {row['decoding']}{shaped}{reader}"


def tune_model_decoding(model_dir: str | Path, dev: list[str], output: str | Path, *,
                        fixed: dict[str, Any] | None = None, batch_size: int = 32, reader: str | Path | None = None,
                        calibration_method: str = "auto", leading_words: tuple[str, ...] | None = None,
                        overwrite: bool = False, device: str = "cpu"
                        ) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """Choose the decoding settings, the leading words dropped from answers (unless `leading_words` is given), the
    no-answer threshold and the score calibration (`calibration_method`: auto or one of calibration.METHODS) of the QA
    model in `model_dir` on `dev`; write the tuned copy to `output`. `reader`: a train-reader output to attach as the
    model's companion (companion.py; its weight is chosen with the rest); without it, a reader the model dir already
    has is kept and re-weighed. Returns (chosen settings, dev score of each decoding tried, no-answer dev scores)."""
    import tempfile

    # A shipped model's name names its folder in the package, as Pipeline and evaluate read it.
    model_dir, output = shipped_model_dir(model_dir) or Path(model_dir), Path(output)
    check_local_source(model_dir)
    fixed = {name: (fixed or {}).get(name) for name in DECODING_FIELDS}
    for name in ("sentence_prior", "reader_weight", "expected_f1_temperature", "decoding"):
        if fixed[name] is not None:
            check_decoding_setting(name, fixed[name])
    if leading_words is not None:
        leading_words = tuple(leading_words)
        check_decoding_setting("leading_words", leading_words)
    if batch_size < 1:
        raise ConfigError(f"batch_size must be ≥ 1, got {batch_size}")
    torch_device(device)
    metadata = read_metadata(model_dir)
    if metadata.get("task") != "question-answering":
        raise ConfigError(f"{model_dir} is not a QA model dir (its arabert_pipeline.json has no task "
                          "'question-answering'): fine-tune it first with `arabert-pipeline finetune`")
    if reader is not None and not Path(reader).is_dir():
        raise ConfigError(f"--reader {reader}: no such directory (expected a train-reader output)")
    check_not_input(output, [model_dir, *([reader] if reader is not None else [])], within=True)
    with OutputLock(output, "tune-decoding"), tempfile.TemporaryDirectory(prefix="arabert-reader-") as scratch:
        dev_files = [read_squad(source, misaligned="keep") for source in dev]
        overlap = sets_trained_on(metadata.get("training_data"), dev_files)
        if overlap:
            raise ConfigError(f"{model_dir} was trained on {', '.join(overlap)}: tune on sets it has not seen")
        inputs = [model_dir, *([reader] if reader is not None else []), *[s for s in dev if Path(s).exists()]]
        claim_output_dir(output, TUNE_OUTPUT, inputs=inputs, overwrite=overwrite)
        qa = QAModel.load(model_dir, device=device)
        # The calibration is fitted anew, on the raw probabilities; the decoder is chosen before the leading words.
        qa.settings = dataclasses.replace(qa.settings, calibration=None, leading_words=leading_words or ())
        companion_home = None
        if reader is not None:
            companion_home = Path(scratch)
            export_companion(reader, companion_home / COMPANION_DIR)
        elif (model_dir / COMPANION_DIR).is_dir():
            companion_home = model_dir
        if companion_home is not None and (reader is not None or qa.reader is None):  # a weighed reader is loaded
            qa.reader = Companion.load(companion_home, qa.preprocessing)
        if qa.reader is None and fixed["reader_weight"]:
            raise ConfigError(f"reader_weight {fixed['reader_weight']:g} needs a reader: give --reader")
        if qa.sentence_idf is None and fixed["sentence_prior"] is None:
            fixed["sentence_prior"] = 0.0  # no IDF table beside the model: no prior to weigh
        passes = dev_passes(qa, dev_files, batch_size)
        rows = tune_decoding(qa, passes, fixed)
        chosen = best_decoding(rows)
        qa.settings = dataclasses.replace(qa.settings, **chosen)
        leading = tune_leading_words(qa, passes) if leading_words is None else None
        chosen["leading_words"] = leading["leading_words"] if leading is not None else leading_words
        qa.settings = dataclasses.replace(qa.settings, leading_words=chosen["leading_words"])
        answers = dev_answers(qa, passes)
        no_answer = tune_null_threshold(answers)
        calibration, calibration_report = calibrate(answers, no_answer["threshold"], calibration_method)
        with atomic_directory(output) as staging:
            for path in sorted(model_dir.iterdir()):
                if path.is_file() and TUNE_OUTPUT.owns(path.name) and path.name != "arabert_pipeline.json":
                    shutil.copy2(path, staging / path.name)
            if companion_home is not None:
                copy_companion(companion_home, staging)
            write_metadata(staging, **{
                **metadata, **chosen,
                "null_score_diff_threshold": no_answer["threshold"], "decoding_tuned_by": "tune-decoding",
                "calibration": calibration.to_json(), "leading_words": list(chosen["leading_words"]),
                "decoding_tuning": {"model": portable_path(model_dir), "dev_metric": DEV_METRIC,
                                    "reader": portable_path(reader) if reader is not None else
                                    metadata.get("decoding_tuning", {}).get("reader"),
                                    "dev_data": [{"name": f.name, "path": portable_path(f.path),
                                                  "questions": len(f.examples)} for f in dev_files],
                                    "previous": {**{name: metadata.get(name, PLAIN_DECODING[name])
                                                    for name in DECODING_FIELDS},
                                                 "leading_words": metadata.get("leading_words", [])},
                                    "scores": rows, "leading_words": leading, "no_answer": no_answer,
                                    "calibration": calibration_report},
            })
    return {**chosen, "null_score_diff_threshold": no_answer["threshold"]}, rows, no_answer


def calibrate(answers: DevAnswers, threshold: float, method: str = "auto") -> tuple[Calibration, dict[str, Any]]:
    """The score calibration (calibration.py) fitted on the dev questions the model answers at `threshold`: the
    one-input maps and the logistic map over the answers' features, chosen by leaving one dev set out when there
    are two or more (random folds otherwise)."""
    answered = answers.answerable_margin <= threshold
    return choose_calibration({read: values[answered] for read, values in answers.top_score.items()},
                              answers.metric[answered] >= CORRECT_AT, method,
                              features=answers.features[answered] if answers.features is not None else None,
                              groups=answers.dev_set[answered] if answers.dev_set is not None else None,
                              group_names=answers.dev_set_names)

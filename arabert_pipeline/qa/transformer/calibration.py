"""`answer.score` as the probability that the answer is right.

The decoder's score is a softmax over the question's candidate spans: it says how the model spreads its belief over
spans, not how often its best span is right, and a small model is sure of many wrong answers (the README demo once
answered a *who* question with a verb at 1.00). So a QA model dir may carry a monotone map, fitted on dev, from that
softmax probability to the observed rate of right answers: `calibration` in arabert_pipeline.json, applied to every
answer's score after decoding (answers keep their order). A right answer is one whose SOQAL F1 against the gold is at
least CORRECT_AT (the dev metric of decoding.DEV_METRIC, so the score speaks of what the model was chosen for).

What the map reads (its `input`): the decoder's softmax probability of the answer, or, under expected-F1 decoding, the
answer's expected F1 against the model's distribution over candidates. The second ranks right above wrong answers far
better (dev AUROC 0.70 vs 0.59 for the L6 default of issue 39), because it also counts the mass of every candidate
that overlaps the answer, where the probability of one span is split among its near-duplicates.

Methods and inputs are chosen together by the Brier score of out-of-fold predictions (so the dev set that fits the map
does not also grade it). Not by the expected calibration error alone: a map that gives every answer the base rate has
an ECE near 0 and says nothing (measured: the L6 default's probability, mapped, had ECE 0.014 and a Brier score no
better than the base rate's); the Brier score counts how well the score separates right from wrong answers too. ECE is
reported beside it.
- isotonic: a non-decreasing step function (scikit-learn's IsotonicRegression), stored as its breakpoints and read
  back by linear interpolation between them;
- platt: a logistic curve on the score's log-odds, sigmoid(a · logit(p) + b) — temperature scaling of the decision
  "is the best span right", with a bias;
- none: the softmax as it is, when neither does better out of fold;
- logistic (issue 54): a logistic regression over several FEATURES of the answer, its question and its context, not
  one number: sigmoid(bias + Σ weight · feature). A one-input map fitted on dev carries dev's rate of right answers to
  every question with the same decoder score; on easier questions (short contexts, a question whose words the
  answer's sentence repeats, a متى answered with a date) it read 0.47 on average where 70% were right. Its features
  and regularization were chosen by leave-one-set-out on the dev sets (scripts/calibration_loso.py): fitted on one
  dev set, graded on the other and on a slice of AQAD no model trained on.

Whatever the method, the scores of one question's answers never increase down its list (`monotone`): a map that reads
more than the decoder's order could otherwise put a later answer above an earlier one, and calibration never
re-ranks.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Sequence
from typing import Any, TypeGuard

import numpy as np

from ...errors import ConfigError
from ..cloze import _DIGITS, _MONTHS, _YEAR, QUESTION_WORDS, Gazetteers, find_candidates
from ..metrics import arabic_sentence_spans
from ..overlap import match_keys, normalize_word, question_keys

METHODS = ("isotonic", "platt", "logistic", "none")
INPUTS = ("probability", "expected-f1")  # what the map reads; expected-f1 only where the decoder computes it
CORRECT_AT = 0.5  # an answer is right when its SOQAL F1 is at least this
BINS = 10  # equal-width score bins of the expected calibration error and the reliability table
FOLDS = 5
MAX_POINTS = 1000  # breakpoints stored: more is a damaged file, not a fitted map
MIN_BIN = 20  # dev answers behind each step of an isotonic map
_EPS = 1e-6
# What the logistic map may read of an answer (answer_features), one column each:
FEATURES = (
    "expected-f1",  # logit of the answer's expected F1 against the model's candidates (decode.expected_f1)
    "probability",  # logit of its softmax probability among the candidates
    "margin",  # log of its probability over the best other answer's
    "top-span-f1",  # its word F1 with the single highest-scoring span (max-score's answer): the decoders agree
    "answer-words",  # log(1 + its words)
    "type-fit",  # 1 when the question asks for a date (متى) or a number (كم) and the answer is one
    "type-miss",  # 1 when it asks for one and the answer is not
    "question-overlap",  # share of the question's content words (overlap.question_keys) in the answer's sentence
    "context-words",  # log(1 + the context's words)
    "open-question",  # 1 when the question opens with ما / ماذا / كيف / لماذا ...: a definition, a reason, a manner
    "transformer-f1",  # its word F1 with the transformer's own best span (no reader, no expected-F1 order)
    "reader-f1",  # and with the reader's (companion.py; a model without one: the same as transformer-f1)
)
# The features and the L2 strength (C of scikit-learn's LogisticRegression on standardized features) that
# `fit("logistic", ...)` uses: chosen by leave-one-set-out (scripts/calibration_loso.py, docs/experiments/).
# Chosen for the shipped model's answers (docs/experiments/calibration-loso.md): the expected F1, the agreement with
# the transformer's own best span, a date/number answer where the question asks for one, and the question's overlap
# with the answer's sentence; the other features did not lower the held-out Brier score.
LOGISTIC_FEATURES = ("expected-f1", "transformer-f1", "type-fit", "question-overlap")
LOGISTIC_C = 0.1
_CLIP_LOGIT = 10.0
# A user who keeps answers scored above 0.8 expects them right (issue 39: no wrong answer above 0.8). A few hundred dev
# answers cannot show that a score above it is earned, so where a fitted logistic map scores a wrong dev answer above
# CEILING, its scores stop there.
CEILING = 0.8


@dataclasses.dataclass(frozen=True)
class Calibration:
    method: str
    x: tuple[float, ...] = ()  # isotonic breakpoints (scores), increasing
    y: tuple[float, ...] = ()  # and the right-answer rate at each
    a: float = 1.0  # platt: sigmoid(a · logit(p) + b)
    b: float = 0.0
    input: str = "probability"  # the raw score it maps (INPUTS); models written before it existed read probability
    features: tuple[str, ...] = ()  # logistic: the FEATURES it reads,
    weights: tuple[float, ...] = ()  # their weights on the raw feature values,
    bias: float = 0.0  # and the intercept
    ceiling: float = 1.0  # logistic: no score above it (CEILING where a wrong dev answer would score above it)

    def __call__(self, score: float) -> float:
        return float(self.apply(np.asarray([score]))[0])

    def apply(self, scores: np.ndarray) -> np.ndarray:
        """The map of raw scores (INPUTS), or of a (answers, len(FEATURES)) matrix of answer_features: a logistic map
        reads the matrix only; the others read the matrix's column of their input."""
        scores = np.asarray(scores, dtype=np.float64)
        if scores.ndim == 2:
            if self.method == "logistic":
                columns = [FEATURES.index(name) for name in self.features]
                z = self.bias + scores[:, columns] @ np.asarray(self.weights, dtype=np.float64)
                return np.minimum(1.0 / (1.0 + np.exp(-np.clip(z, -50, 50))), self.ceiling)
            return self.apply(_sigmoid(scores[:, FEATURES.index(self.input)]))
        if self.method == "logistic":
            raise ConfigError("a logistic calibration maps answer_features, not one score per answer")
        if self.method == "isotonic":
            return np.interp(scores, self.x, self.y)
        if self.method == "platt":
            p = np.clip(scores, _EPS, 1 - _EPS)
            return 1.0 / (1.0 + np.exp(-(self.a * np.log(p / (1 - p)) + self.b)))
        return scores

    def to_json(self) -> dict[str, Any]:
        if self.method == "isotonic":
            return {"method": "isotonic", "x": list(self.x), "y": list(self.y), "input": self.input}
        if self.method == "platt":
            return {"method": "platt", "a": self.a, "b": self.b, "input": self.input}
        if self.method == "logistic":
            return {"method": "logistic", "features": list(self.features), "weights": list(self.weights),
                    "bias": self.bias, "ceiling": self.ceiling, "input": self.input}
        return {"method": "none", "input": self.input}

    @classmethod
    def from_json(cls, data: Any, source: object = "calibration") -> Calibration:
        """Checked field by field: a damaged map must not turn every score into NaN or 5."""
        field = f"{source}: calibration"
        if not isinstance(data, dict) or data.get("method") not in METHODS:
            raise ConfigError(f"{field} must be an object whose method is one of {', '.join(METHODS)}")
        read = data.get("input", "probability")
        if read not in INPUTS:
            raise ConfigError(f"{field}.input must be one of {', '.join(INPUTS)}, got {read!r}")
        if data["method"] == "isotonic":
            x, y = data.get("x"), data.get("y")
            if not (isinstance(x, list) and isinstance(y, list) and 1 <= len(x) == len(y) <= MAX_POINTS):
                raise ConfigError(f"{field}.x and .y must be lists of 1 to {MAX_POINTS} numbers of equal length")
            if not all(_number(v) and 0 <= v <= 1 for v in x + y):
                raise ConfigError(f"{field}.x and .y must hold numbers between 0 and 1")
            if any(b < a for a, b in itertools.pairwise(x)) or any(b < a for a, b in itertools.pairwise(y)):
                raise ConfigError(f"{field}.x and .y must not decrease (the map keeps the answers' order)")
            return cls("isotonic", tuple(map(float, x)), tuple(map(float, y)), input=read)
        if data["method"] == "platt":
            a, b = data.get("a"), data.get("b")
            if not (_number(a) and _number(b) and 0 < a <= 100 and abs(b) <= 100):
                raise ConfigError(f"{field}.a must be a number in (0, 100] and .b one in [-100, 100]")
            return cls("platt", a=float(a), b=float(b), input=read)
        if data["method"] == "logistic":
            names, weights, bias = data.get("features"), data.get("weights"), data.get("bias")
            if not (isinstance(names, list) and 1 <= len(names) == len(set(names)) and set(names) <= set(FEATURES)):
                raise ConfigError(f"{field}.features must be a list of distinct names among {', '.join(FEATURES)}")
            if not (isinstance(weights, list) and len(weights) == len(names)
                    and all(_number(w) and abs(w) <= 100 for w in weights) and _number(bias) and abs(bias) <= 100):
                raise ConfigError(f"{field}.weights must be one number in [-100, 100] per feature, and .bias one "
                                  "number in [-100, 100]")
            ceiling = data.get("ceiling", 1.0)
            if not (_number(ceiling) and 0.5 <= ceiling <= 1):
                raise ConfigError(f"{field}.ceiling must be a number between 0.5 and 1")
            return cls("logistic", input=read, features=tuple(names), weights=tuple(map(float, weights)),
                       bias=float(bias), ceiling=float(ceiling))
        return cls("none", input=read)


def monotone(scores: np.ndarray) -> np.ndarray:
    """One question's mapped scores, in its answers' order, never increasing down the list (each at most the one
    above it): what every map's output goes through, so that no map re-ranks."""
    return np.minimum.accumulate(np.asarray(scores, dtype=np.float64)) if len(scores) else np.asarray(scores)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), _EPS, 1 - _EPS)
    return np.clip(np.log(p / (1 - p)), -_CLIP_LOGIT, _CLIP_LOGIT)


# ------------------------------------------------------------------------------------------- what the map reads

_NORMALIZED_MONTHS = tuple(normalize_word(m) for m in _MONTHS.split("|"))
_ANY_DIGIT = re.compile(_DIGITS)
_A_YEAR = re.compile(rf"(?<![0-9]){_YEAR}(?![0-9])")
_NUMBER_WORDS = frozenset(normalize_word(w) for w in (
    "واحد واحدة اثنان اثنين اثنتان ثلاث ثلاثة أربع أربعة خمس خمسة ست ستة سبع سبعة ثمان ثماني ثمانية تسع تسعة عشر "
    "عشرة عشرون عشرين ثلاثون ثلاثين أربعون أربعين خمسون خمسين مئة مائة مئات ألف آلاف مليون ملايين مليار نصف ربع "
    "ثلث").split())
_DATE_NOUNS = frozenset(normalize_word(w) for w in "عام العام سنة السنة تاريخ يوم شهر قرن القرن".split())
# A question is open (what, how, why) when one of its first two words is one of _OPEN_WORDS or the two together are
# one of _OPEN_PHRASES: "هو" alone is no question word ("من هو مؤسس ..." asks for a person).
_OPEN_WORDS = frozenset(normalize_word(w) for w in "ما ماذا بماذا ماهو ماهي كيف لماذا لم".split())
_OPEN_PHRASES = frozenset(" ".join(normalize_word(w) for w in p.split()) for p in ("ما هو", "ما هي"))
_NO_GAZETTEERS = Gazetteers(set(), set(), set())
_WESTERN_DIGITS = str.maketrans("٠١٢٣٤٥٦٧٨٩", "0123456789")


def question_type(question: str) -> str | None:
    """The kind of answer a question's word asks for, as make-synthetic-qa types answers (cloze.QUESTION_WORDS):
    "date" for متى (or أي + a date noun: في أي عام), "number" for كم (بكم, وكم), else None (a person or a place
    cannot be told from the answer alone without the synthetic-QA gazetteers)."""
    words = [normalize_word(w) for w in question.split()[:4]]
    date_word, number_word = normalize_word(QUESTION_WORDS["date"]), normalize_word(QUESTION_WORDS["number"])
    if date_word in words or any(a == "اي" and b in _DATE_NOUNS for a, b in itertools.pairwise(words)):
        return "date"
    if any(w in (number_word, "ب" + number_word, "و" + number_word) for w in words):
        return "number"
    return None


def is_open_question(question: str) -> bool:
    """Whether a question asks what, how or why (the open-question feature): one of its first two words is an
    open question word, or the two are "ما هو" / "ما هي"."""
    first = [normalize_word(w) for w in question.split()[:2]]
    return any(w in _OPEN_WORDS for w in first) or " ".join(first) in _OPEN_PHRASES


def answer_is(kind: str, context: str, start: int, end: int) -> bool:
    """Whether context[start:end] is a date / a number: one of cloze's typed candidates of its sentence overlaps it
    (the rules make-synthetic-qa types answers by), or it holds a year or a month name (a date), a digit or a
    number word (a number)."""
    text = context[start:end].translate(_WESTERN_DIGITS)
    words = {normalize_word(w) for w in text.split()}
    if kind == "date" and (_A_YEAR.search(text) or any(m in words for m in _NORMALIZED_MONTHS)):
        return True
    before = context[max(0, start - 12):start].split()
    if kind == "date" and _ANY_DIGIT.search(text) and (
            (before and normalize_word(before[-1]) in _DATE_NOUNS) or words & _DATE_NOUNS):
        return True  # عام 636, سنة 95 هـ: any number a date noun introduces
    if kind == "number" and (_ANY_DIGIT.search(text) or words & _NUMBER_WORDS):
        return True
    low, high = _sentence_of(context, start)
    for candidate in find_candidates(context[low:high], _NO_GAZETTEERS, (kind,)):
        if candidate.start + low < end and candidate.end + low > start:
            return True
    return False


def _sentence_of(context: str, position: int) -> tuple[int, int]:
    for low, high in arabic_sentence_spans(context):
        if low <= position < high:
            return low, high
    return 0, len(context)


def answer_features(question: str, context: str, spans: list[tuple[int, int]], probability: np.ndarray,
                    expected_f1: np.ndarray, top_span_f1: np.ndarray, transformer_f1: np.ndarray | None = None,
                    reader_f1: np.ndarray | None = None) -> np.ndarray:
    """The FEATURES of each of one question's answers (spans of `context`, in the decoder's order), one row each.
    `probability`: their softmax probabilities; `expected_f1`: their expected F1 against every candidate;
    `top_span_f1`: their word F1 with the highest-scoring candidate span; `transformer_f1`, `reader_f1`: with the
    transformer's and the reader's own best spans (default: top_span_f1). The decoder computes the numbers."""
    n = len(spans)
    rows = np.zeros((n, len(FEATURES)), dtype=np.float64)
    if not n:
        return rows
    probability = np.asarray(probability, dtype=np.float64)
    rows[:, 0] = _logit(expected_f1)
    rows[:, 1] = _logit(probability)
    logp = np.log(np.clip(probability, _EPS, 1.0))
    for i in range(n):
        others = np.delete(logp, i)
        rows[i, 2] = np.clip(logp[i] - (others.max() if len(others) else np.log(_EPS)), -_CLIP_LOGIT, _CLIP_LOGIT)
    rows[:, 3] = np.asarray(top_span_f1, dtype=np.float64)
    asked = question_type(question)
    keys = question_keys(question)
    context_words = len(context.split())
    for i, (start, end) in enumerate(spans):
        rows[i, 4] = np.log1p(len(context[start:end].split()))
        if asked is not None:
            fits = answer_is(asked, context, start, end)
            rows[i, 5], rows[i, 6] = float(fits), float(not fits)
        if keys:
            low, high = _sentence_of(context, start)
            sentence = frozenset().union(*map(match_keys, context[low:max(high, end)].split()))
            rows[i, 7] = len(keys & sentence) / len(keys)
        rows[i, 8] = np.log1p(context_words)
    rows[:, 9] = float(is_open_question(question))
    rows[:, 10] = rows[:, 3] if transformer_f1 is None else np.asarray(transformer_f1, dtype=np.float64)
    rows[:, 11] = rows[:, 10] if reader_f1 is None else np.asarray(reader_f1, dtype=np.float64)
    return rows


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def fit(method: str, scores: np.ndarray, correct: np.ndarray, input: str = "probability") -> Calibration:
    """A map of `method` fitted on raw scores of `input` (or, logistic, on answer_features rows) and their outcomes."""
    if method == "logistic":
        return fit_logistic(scores, correct)
    return dataclasses.replace(_fit(method, scores, correct), input=input)


def _fit(method: str, scores: np.ndarray, correct: np.ndarray) -> Calibration:
    scores, correct = np.asarray(scores, dtype=np.float64), np.asarray(correct, dtype=np.float64)
    if method == "isotonic":
        from sklearn.isotonic import IsotonicRegression

        # Fitted on runs of MIN_BIN answers adjacent in score, not on single answers: a step then rests on at least
        # that many dev answers, and a handful of right (wrong) answers at the top (bottom) cannot map the extremes to
        # 1 (0). Without it the L6 default's map gave 1.00 to every expected F1 above 0.9999, where 2 of 4 dev answers
        # were right.
        order = np.argsort(scores, kind="stable")
        runs = np.array_split(order, max(1, len(scores) // MIN_BIN))
        means = np.asarray([scores[run].mean() for run in runs])
        rates = np.asarray([correct[run].mean() for run in runs])
        model = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(
            means, rates, sample_weight=[len(run) for run in runs])
        x, y = model.X_thresholds_, model.y_thresholds_
        if len(x) > MAX_POINTS:  # keep the map storable; its shape is kept by even subsampling
            keep = np.unique(np.linspace(0, len(x) - 1, MAX_POINTS).round().astype(int))
            x, y = x[keep], y[keep]
        return Calibration("isotonic", tuple(np.clip(x, 0, 1).tolist()), tuple(np.clip(y, 0, 1).tolist()))
    if method == "platt":
        from sklearn.linear_model import LogisticRegression

        if len(np.unique(correct)) < 2:
            return Calibration("none")
        p = np.clip(scores, _EPS, 1 - _EPS)
        model = LogisticRegression(C=1e6).fit(np.log(p / (1 - p))[:, None], correct)
        a, b = float(model.coef_[0, 0]), float(model.intercept_[0])
        if not 0 < a <= 100 or abs(b) > 100:  # a map that reverses the order is no calibration of this score
            return Calibration("none")
        return Calibration("platt", a=a, b=b)
    return Calibration("none")


def fit_logistic(features: np.ndarray, correct: np.ndarray, names: tuple[str, ...] = LOGISTIC_FEATURES,
                 c: float = LOGISTIC_C, ceiling: float | None = CEILING) -> Calibration:
    """The logistic map over the `names` columns of an answer_features matrix (one row per dev answer), fitted on
    standardized features with L2 strength `c`, stored with weights on the raw values; its scores capped at
    `ceiling` where it scores a wrong dev answer above it (None: never capped)."""
    from sklearn.linear_model import LogisticRegression

    features, correct = np.asarray(features, dtype=np.float64), np.asarray(correct, dtype=np.float64)
    if features.ndim != 2 or features.shape[1] != len(FEATURES):
        raise ConfigError(f"a logistic calibration is fitted on answer_features ({len(FEATURES)} columns)")
    if len(np.unique(correct)) < 2:
        return Calibration("none")
    x = features[:, [FEATURES.index(name) for name in names]]
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-9] = 1.0  # a constant column: its weight goes to the intercept
    model = LogisticRegression(C=c, max_iter=1000).fit((x - mean) / scale, correct)
    weights = model.coef_[0] / scale
    bias = float(model.intercept_[0] - np.sum(weights * mean))
    weights = np.clip(weights, -100, 100)
    calibration = Calibration("logistic", input="expected-f1", features=tuple(names),
                              weights=tuple(weights.tolist()), bias=float(np.clip(bias, -100, 100)))
    if ceiling is not None and np.any(calibration.apply(features)[correct < 0.5] > ceiling):
        calibration = dataclasses.replace(calibration, ceiling=ceiling)
    return calibration


def auroc(scores: np.ndarray, correct: np.ndarray) -> float:
    """The chance that a right answer scores above a wrong one (ties count half); NaN without both kinds."""
    scores, correct = np.asarray(scores, dtype=np.float64), np.asarray(correct).astype(bool)
    n_right, n_wrong = int(correct.sum()), int((~correct).sum())
    if not n_right or not n_wrong:
        return float("nan")
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores), dtype=np.float64)
    sorted_scores = scores[order]
    # average ranks of ties
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    average = first + (counts - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(average, counts)
    return float((ranks[correct].sum() - n_right * (n_right + 1) / 2) / (n_right * n_wrong))


def expected_calibration_error(scores: np.ndarray, correct: np.ndarray, bins: int = BINS) -> float:
    """Σ over equal-width score bins of (share of answers in the bin) × |mean score − right-answer rate|."""
    return float(sum(row["count"] * abs(row["mean_score"] - row["right"])
                     for row in reliability_table(scores, correct, bins)) / max(1, len(scores)))


def reliability_table(scores: np.ndarray, correct: np.ndarray, bins: int = BINS) -> list[dict[str, float]]:
    """Per non-empty score bin: its range, how many answers, their mean score and their right-answer rate."""
    scores, correct = np.asarray(scores, dtype=np.float64), np.asarray(correct, dtype=np.float64)
    index = np.minimum((scores * bins).astype(int), bins - 1)
    rows = []
    for b in range(bins):
        inside = index == b
        if inside.any():
            rows.append({"low": b / bins, "high": (b + 1) / bins, "count": int(inside.sum()),
                         "mean_score": float(scores[inside].mean()), "right": float(correct[inside].mean())})
    return rows


def brier_score(scores: np.ndarray, correct: np.ndarray) -> float:
    """Mean squared gap between score and outcome: calibration and how well the score separates right from wrong."""
    return float(np.mean((np.asarray(scores, dtype=np.float64) - np.asarray(correct, dtype=np.float64)) ** 2))


def choose_calibration(scores: np.ndarray | dict[str, np.ndarray], correct: np.ndarray, method: str = "auto", *,
                       features: np.ndarray | None = None, groups: np.ndarray | None = None, folds: int = FOLDS,
                       seed: int = 0, group_names: Sequence[str] | None = None) -> tuple[Calibration, dict[str, Any]]:
    """The map fitted on all of (scores, correct), its input and method chosen by out-of-fold Brier score, and a
    report of the choice: per input and method the out-of-fold ECE and Brier score, and for the chosen input its ECE
    before and the reliability tables before and after. `scores`: the decoder's probability of each answer, or
    {input: scores} with the raw scores of the same answers under several INPUTS; `features`: their answer_features
    rows, which adds the logistic map to the candidates; `groups`: the dev set of each answer: with two sets or more,
    the folds are the sets (each map is graded on a set it was not fitted on: leave one set out), else `folds` random
    folds; `group_names`: the name of each group when `groups` are indices (the report's per_set names the sets by
    them; else by the group values); `method`: auto or one of METHODS."""
    by_input = {name: np.asarray(values, dtype=np.float64)
                for name, values in (scores.items() if isinstance(scores, dict) else [("probability", scores)])}
    correct = np.asarray(correct, dtype=np.float64)
    if method != "auto" and method not in METHODS:
        raise ConfigError(f"calibration {method!r}: choose auto or one of {', '.join(METHODS)}")
    if unknown := set(by_input) - set(INPUTS):
        raise ConfigError(f"calibration inputs {sorted(unknown)}: choose among {', '.join(INPUTS)}")
    if method == "logistic" and features is None:
        raise ConfigError("a logistic calibration needs the answers' features")
    if len(correct) < 2 * folds:
        raise ConfigError(f"calibration needs at least {2 * folds} answered dev questions, got {len(correct)}")
    if groups is not None and len(np.unique(groups)) >= 2:
        _, fold = np.unique(np.asarray(groups), return_inverse=True)
        folds, scheme = int(fold.max()) + 1, "leave one dev set out"
    else:
        fold, scheme = np.random.default_rng(seed).permutation(len(correct)) % folds, f"{folds} random folds"
    one_input = [m for m in METHODS if m != "logistic" and method in ("auto", m)]
    tried = [(read, name, values) for read, values in by_input.items() for name in one_input]
    if features is not None and method in ("auto", "logistic"):
        tried.append(("features", "logistic", np.asarray(features, dtype=np.float64)))
    out_of_fold: dict[tuple[str, str], np.ndarray] = {}
    rows: list[dict[str, Any]] = []
    for read, name, values in tried:
        predicted = np.empty(len(correct))
        for k in range(folds):
            held = fold == k
            predicted[held] = fit(name, values[~held], correct[~held], input=read).apply(values[held])
        out_of_fold[read, name] = predicted
        rows.append({"input": read, "method": name, "ece": expected_calibration_error(predicted, correct),
                     "brier": brier_score(predicted, correct), "auroc": auroc(predicted, correct)})
    # A tie keeps the simpler map (none before platt before isotonic before logistic) and the probability before
    # expected F1.
    best = min(rows, key=lambda row: (round(row["brier"], 6),
                                      ("none", "platt", "isotonic", "logistic").index(row["method"]),
                                      (*INPUTS, "features").index(row["input"])))
    read = best["input"]
    values = next(v for r, n, v in tried if (r, n) == (read, best["method"]))
    calibration = fit(best["method"], values, correct, input=read if read in INPUTS else "expected-f1")
    before = by_input.get(read, by_input.get("expected-f1", next(iter(by_input.values()))))
    report = {
        "target": f"SOQAL F1 >= {CORRECT_AT}", "answered_questions": len(correct), "right": float(correct.mean()),
        "folds": folds, "scheme": scheme, "bins": BINS, "input": read, "method": calibration.method,
        "ece_before": expected_calibration_error(before, correct),
        "ece_out_of_fold": {row["method"]: row["ece"] for row in rows if row["input"] == read},
        "brier_out_of_fold": best["brier"], "auroc_out_of_fold": best["auroc"],
        "brier_base_rate": brier_score(np.full_like(correct, correct.mean()), correct),
        "candidates": rows,
        "reliability_before": reliability_table(before, correct),
        "reliability_out_of_fold": reliability_table(out_of_fold[read, best["method"]], correct),
    }
    if groups is not None:
        groups = np.asarray(groups)
        held_out = out_of_fold[read, best["method"]]
        report["per_set"] = {
            (str(group_names[int(g)]) if group_names is not None else str(g)): {
                "answers": int(np.sum(groups == g)), "right": float(correct[groups == g].mean()),
                "ece_held_out": expected_calibration_error(held_out[groups == g], correct[groups == g])}
            for g in np.unique(groups)}
    return calibration, report


def describe(report: dict[str, Any]) -> str:
    after = report["ece_out_of_fold"][report["method"]]
    brier = (f"; Brier {report['brier_out_of_fold']:.3f} (the base rate's {report['brier_base_rate']:.3f})"
             if "brier_out_of_fold" in report else "")
    return (f"calibration: {report['method']} of the {report.get('input', 'probability')} on "
            f"{report['answered_questions']} answered dev questions ({100 * report['right']:.0f}% right by "
            f"{report['target']}): ECE {report['ece_before']:.3f} → {after:.3f} out of fold"
            f"{' (' + report['scheme'] + ')' if 'scheme' in report else ''}{brier}")

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
- none: the softmax as it is, when neither does better out of fold.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ...errors import ConfigError

METHODS = ("isotonic", "platt", "none")
INPUTS = ("probability", "expected-f1")  # what the map reads; expected-f1 only where the decoder computes it
CORRECT_AT = 0.5  # an answer is right when its SOQAL F1 is at least this
BINS = 10  # equal-width score bins of the expected calibration error and the reliability table
FOLDS = 5
MAX_POINTS = 1000  # breakpoints stored: more is a damaged file, not a fitted map
MIN_BIN = 20  # dev answers behind each step of an isotonic map
_EPS = 1e-6


@dataclasses.dataclass(frozen=True)
class Calibration:
    method: str
    x: tuple[float, ...] = ()  # isotonic breakpoints (scores), increasing
    y: tuple[float, ...] = ()  # and the right-answer rate at each
    a: float = 1.0  # platt: sigmoid(a · logit(p) + b)
    b: float = 0.0
    input: str = "probability"  # the raw score it maps (INPUTS); models written before it existed read probability

    def __call__(self, score: float) -> float:
        return float(self.apply(np.asarray([score]))[0])

    def apply(self, scores: np.ndarray) -> np.ndarray:
        scores = np.asarray(scores, dtype=np.float64)
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
        return {"method": "none", "input": self.input}

    @classmethod
    def from_json(cls, data: Any, source: object = "calibration") -> "Calibration":
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
            if any(b < a for a, b in zip(x, x[1:])) or any(b < a for a, b in zip(y, y[1:])):
                raise ConfigError(f"{field}.x and .y must not decrease (the map keeps the answers' order)")
            return cls("isotonic", tuple(map(float, x)), tuple(map(float, y)), input=read)
        if data["method"] == "platt":
            a, b = data.get("a"), data.get("b")
            if not (_number(a) and _number(b) and 0 < a <= 100 and abs(b) <= 100):
                raise ConfigError(f"{field}.a must be a number in (0, 100] and .b one in [-100, 100]")
            return cls("platt", a=float(a), b=float(b), input=read)
        return cls("none", input=read)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def fit(method: str, scores: np.ndarray, correct: np.ndarray, input: str = "probability") -> Calibration:
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


def choose_calibration(scores: "np.ndarray | dict[str, np.ndarray]", correct: np.ndarray, method: str = "auto", *,
                       folds: int = FOLDS, seed: int = 0) -> tuple[Calibration, dict[str, Any]]:
    """The map fitted on all of (scores, correct), its input and method chosen by out-of-fold Brier score, and a
    report of the choice: per input and method the out-of-fold ECE and Brier score, and for the chosen input its ECE
    before and the reliability tables before and after. `scores`: the decoder's probability of each answer, or
    {input: scores} with the raw scores of the same answers under several INPUTS; `method`: auto or one of METHODS."""
    by_input = {name: np.asarray(values, dtype=np.float64)
                for name, values in (scores.items() if isinstance(scores, dict) else [("probability", scores)])}
    correct = np.asarray(correct, dtype=np.float64)
    if method != "auto" and method not in METHODS:
        raise ConfigError(f"calibration {method!r}: choose auto or one of {', '.join(METHODS)}")
    if unknown := set(by_input) - set(INPUTS):
        raise ConfigError(f"calibration inputs {sorted(unknown)}: choose among {', '.join(INPUTS)}")
    if len(correct) < 2 * folds:
        raise ConfigError(f"calibration needs at least {2 * folds} answered dev questions, got {len(correct)}")
    fold = np.random.default_rng(seed).permutation(len(correct)) % folds
    out_of_fold, rows = {}, []
    for read, values in by_input.items():
        for name in METHODS if method == "auto" else (method,):
            predicted = np.empty_like(values)
            for k in range(folds):
                held = fold == k
                predicted[held] = fit(name, values[~held], correct[~held]).apply(values[held])
            out_of_fold[read, name] = predicted
            rows.append({"input": read, "method": name, "ece": expected_calibration_error(predicted, correct),
                         "brier": brier_score(predicted, correct)})
    # A tie keeps the simpler map (none before platt before isotonic) and the probability before expected F1.
    best = min(rows, key=lambda row: (round(row["brier"], 6), ("none", "platt", "isotonic").index(row["method"]),
                                      INPUTS.index(row["input"])))
    read = best["input"]
    calibration = fit(best["method"], by_input[read], correct, input=read)
    report = {
        "target": f"SOQAL F1 >= {CORRECT_AT}", "answered_questions": len(correct), "right": float(correct.mean()),
        "folds": folds, "bins": BINS, "input": read, "method": calibration.method,
        "ece_before": expected_calibration_error(by_input[read], correct),
        "ece_out_of_fold": {row["method"]: row["ece"] for row in rows if row["input"] == read},
        "brier_out_of_fold": best["brier"], "brier_base_rate": brier_score(np.full_like(correct, correct.mean()),
                                                                             correct),
        "candidates": rows,
        "reliability_before": reliability_table(by_input[read], correct),
        "reliability_out_of_fold": reliability_table(out_of_fold[read, best["method"]], correct),
    }
    return calibration, report


def describe(report: dict[str, Any]) -> str:
    after = report["ece_out_of_fold"][report["method"]]
    brier = (f"; Brier {report['brier_out_of_fold']:.3f} (the base rate's {report['brier_base_rate']:.3f})"
             if "brier_out_of_fold" in report else "")
    return (f"calibration: {report['method']} of the {report.get('input', 'probability')} on "
            f"{report['answered_questions']} answered dev questions ({100 * report['right']:.0f}% right by "
            f"{report['target']}): ECE {report['ece_before']:.3f} → {after:.3f} out of fold{brier}")

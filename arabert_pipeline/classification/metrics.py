"""Classification scores from (gold, predicted) label pairs: accuracy, macro-F1, F1-PN (the mean F1 of the positive
and negative classes: ArSarcasm-v2's and SemEval's official sentiment metric), the F1 of one class (the sarcastic class
is ArSarcasm-v2's sarcasm metric) and per-class precision / recall / F1.

Every score is a function of the confusion matrix, so a bootstrap resample is a weighted confusion matrix: `pair_codes`
turns examples into one column per (gold, predicted) cell, and `scores_from_confusion` scores a stack of such matrices
at once (evaluate/ draws the resamples). A class with no gold and no predicted example has F1 0 in macro-F1, as
scikit-learn's f1_score(average="macro", zero_division=0) counts the labels it is given.
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError

_POSITIVE, _NEGATIVE = ("pos", "positive"), ("neg", "negative")
DEV_METRICS = ("macro_f1", "accuracy", "f1_pn", "f1:LABEL[,LABEL...]")


def pn_labels(labels: Sequence[str]) -> tuple[str, str]:
    """The positive and negative labels among `labels` (POS / NEG, positive / negative, any case)."""
    found = []
    for names in (_POSITIVE, _NEGATIVE):
        match = [label for label in labels if label.lower() in names]
        if len(match) != 1:
            raise ConfigError(f"F1-PN needs one positive and one negative label (POS/NEG); the labels are "
                              f"{', '.join(labels)}")
        found.append(match[0])
    return found[0], found[1]


def metric_classes(metric: str, labels: Sequence[str]) -> list[str] | None:
    """The classes whose F1 is averaged for `metric` (None: accuracy), checked against `labels`."""
    if metric == "accuracy":
        return None
    if metric == "macro_f1":
        return list(labels)
    if metric == "f1_pn":
        return list(pn_labels(labels))
    if metric.startswith("f1:"):
        chosen = [name for name in metric[3:].split(",") if name]
        unknown = [name for name in chosen if name not in labels]
        if not chosen or unknown:
            raise ConfigError(f"metric {metric!r}: name classes among {', '.join(labels)}")
        return chosen
    raise ConfigError(f"unknown metric {metric!r}: use one of {', '.join(DEV_METRICS)}")


def confusion(gold: Sequence[str], predicted: Sequence[str], labels: Sequence[str]) -> np.ndarray:
    """(labels × labels) counts, rows gold, columns predicted."""
    index = {label: i for i, label in enumerate(labels)}
    matrix = np.zeros((len(labels), len(labels)), dtype=np.int64)
    for g, p in zip(gold, predicted, strict=True):
        matrix[index[g], index[p]] += 1
    return matrix


def pair_codes(gold: Sequence[str], predicted: Sequence[str], labels: Sequence[str]) -> np.ndarray:
    """(n, labels²) one-hot rows of each example's confusion cell: counts @ codes is a resample's confusion matrix."""
    index = {label: i for i, label in enumerate(labels)}
    k = len(labels)
    codes = np.zeros((len(gold), k * k), dtype=np.float64)
    for row, (g, p) in enumerate(zip(gold, predicted, strict=True)):
        codes[row, index[g] * k + index[p]] = 1.0
    return codes


def per_class(matrix: np.ndarray) -> dict[str, np.ndarray]:
    """Precision, recall and F1 per class of a (..., k, k) stack of confusion matrices (0 where undefined)."""
    matrix = np.asarray(matrix, dtype=np.float64)
    true = np.diagonal(matrix, axis1=-2, axis2=-1)
    gold, predicted = matrix.sum(axis=-1), matrix.sum(axis=-2)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(predicted > 0, true / predicted, 0.0)
        recall = np.where(gold > 0, true / gold, 0.0)
        f1 = np.where(gold + predicted > 0, 2 * true / (gold + predicted), 0.0)
    return {"precision": precision, "recall": recall, "f1": f1, "support": gold}


def score_confusion(matrix: np.ndarray, labels: Sequence[str], metric: str) -> np.ndarray:
    """`metric` (×100) of a (..., k, k) stack of confusion matrices."""
    matrix = np.asarray(matrix, dtype=np.float64)
    classes = metric_classes(metric, labels)
    if classes is None:
        total = matrix.sum(axis=(-2, -1))
        return 100.0 * np.trace(matrix, axis1=-2, axis2=-1) / np.maximum(total, 1)
    f1 = per_class(matrix)["f1"]
    return 100.0 * f1[..., [list(labels).index(c) for c in classes]].mean(axis=-1)


def scores_from_codes(codes: np.ndarray, labels: Sequence[str], metrics: Sequence[str]) -> np.ndarray:
    """(resamples, len(metrics)) scores of resampled count-weighted codes: `codes` is (resamples, labels²)."""
    k = len(labels)
    matrices = np.asarray(codes, dtype=np.float64).reshape(-1, k, k)
    return np.stack([score_confusion(matrices, labels, metric) for metric in metrics], axis=-1)


def classification_report(gold: Sequence[str], predicted: Sequence[str], labels: Sequence[str]) -> dict:
    """Accuracy, macro-F1, F1-PN (when the labels have POS and NEG) ×100, and per-class precision / recall / F1."""
    matrix = confusion(gold, predicted, labels)
    report: dict[str, Any] = {"examples": int(matrix.sum()),
                              "accuracy": float(score_confusion(matrix, labels, "accuracy")),
                              "macro_f1": float(score_confusion(matrix, labels, "macro_f1"))}
    with contextlib.suppress(ConfigError):  # labels without POS and NEG: no F1-PN
        report["f1_pn"] = float(score_confusion(matrix, labels, "f1_pn"))
    classes = per_class(matrix)
    report["per_class"] = {label: {"precision": 100 * float(classes["precision"][i]),
                                   "recall": 100 * float(classes["recall"][i]), "f1": 100 * float(classes["f1"][i]),
                                   "support": int(classes["support"][i])} for i, label in enumerate(labels)}
    report["confusion"] = matrix.tolist()
    return report

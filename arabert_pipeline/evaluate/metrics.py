"""Statistics over per-question scores: ×100 means, bootstrap CIs, paired bootstrap and McNemar tests.

The per-question metrics (SOQAL-compatible and Arabic-correct EM/F1/SM) are defined in `qa/metrics.py`, where
fine-tuning chooses on them on dev; they are imported here so that `evaluate.metrics` stays the one module a report,
the notebook or a user reads scores from.
"""
from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from ..qa.metrics import (
    ARTICLE_PREFIXES,
    METRICS,
    SCORE_KEYS,
    VARIANTS,
    arabic_normalize,
    arabic_sentence_match,
    arabic_sentence_spans,
    exact_match,
    punkt_sentence_spans,
    score_question,
    soqal_normalize,
    soqal_sentence_match,
    strip_article,
    token_f1,
)

__all__ = [  # the per-question metrics (re-exported), then the statistics defined here
    "ARTICLE_PREFIXES",
    "METRICS",
    "SCORE_KEYS",
    "VARIANTS",
    "arabic_normalize",
    "arabic_sentence_match",
    "arabic_sentence_spans",
    "exact_match",
    "punkt_sentence_spans",
    "score_question",
    "soqal_normalize",
    "soqal_sentence_match",
    "strip_article",
    "token_f1",
    "resample_counts",
    "bootstrap_means",
    "bootstrap_ci",
    "paired_bootstrap",
    "mcnemar_exact",
    "bootstrap_statistics",
    "interval",
    "paired_difference",
]


# --------------------------------------------------------------------------------------------------------------------
# Aggregation: ×100 means over all questions, bootstrap CIs, paired comparisons


def resample_counts(n: int, resamples: int, seed: int, chunk: int = 1000) -> Iterable[np.ndarray]:
    """Bootstrap resamples of n questions as (rows, n) count matrices; same seed and n → same resamples.

    Count matrices (how often each question is drawn) let one matrix product average any number of metrics.
    """
    rng = np.random.default_rng(seed)
    uniform = np.full(n, 1.0 / n)
    for done in range(0, resamples, chunk):
        yield rng.multinomial(n, uniform, size=min(chunk, resamples - done))


def bootstrap_means(scores: np.ndarray, *, resamples: int = 10_000, seed: int = 0) -> np.ndarray:
    """(resamples, k) ×100 means of a (n, k) per-question score matrix."""
    scores = np.asarray(scores, dtype=float)
    if scores.ndim == 1:
        scores = scores[:, None]
    n = len(scores)
    if n == 0:
        raise ValueError("no questions to bootstrap")
    return np.concatenate([counts @ scores for counts in resample_counts(n, resamples, seed)]) * (100.0 / n)


def bootstrap_ci(scores: np.ndarray, *, resamples: int = 10_000, seed: int = 0, level: float = 0.95) -> dict:
    """×100 mean and percentile bootstrap CI of each column of a (n, k) score matrix: {"mean", "low", "high"}."""
    scores = np.asarray(scores, dtype=float)
    means = bootstrap_means(scores, resamples=resamples, seed=seed)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(means, [tail, 100 - tail], axis=0)
    return {"mean": 100.0 * scores.reshape(len(scores), -1).mean(axis=0), "low": low, "high": high}


def paired_bootstrap(
    a: np.ndarray, b: np.ndarray, *, resamples: int = 10_000, seed: int = 0, level: float = 0.95
) -> dict:
    """Difference a − b (×100) of two systems scored on the same questions, per column of (n, k) matrices.

    Returns {"diff", "low", "high", "p_value"}: the CI resamples questions jointly for both systems, and the two-sided
    p-value is the share of resampled differences at least |diff| away from diff (the bootstrap null of
    Berg-Kirkpatrick et al., 2012), with +1 smoothing so it is never exactly 0.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired comparison needs the same questions: shapes {a.shape} and {b.shape}")
    differences = a - b
    means = bootstrap_means(differences, resamples=resamples, seed=seed)
    observed = 100.0 * differences.reshape(len(differences), -1).mean(axis=0)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(means, [tail, 100 - tail], axis=0)
    extreme = (np.abs(means - observed) >= np.abs(observed) - 1e-9).sum(axis=0)
    return {"diff": observed, "low": low, "high": high, "p_value": (extreme + 1) / (len(means) + 1)}


def mcnemar_exact(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided exact McNemar p-value for two 0/1 outcome vectors on the same questions (e.g. EM)."""
    a, b = np.asarray(a) > 0.5, np.asarray(b) > 0.5
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    discordant = only_a + only_b
    if discordant == 0:
        return 1.0
    tail = sum(math.comb(discordant, i) for i in range(min(only_a, only_b) + 1))
    return min(1.0, 2 * tail / 2**discordant)


# --------------------------------------------------------------------------------------------------------------------
# Scores that are not means of per-question scores (macro-F1, entity F1): bootstrap over sufficient statistics


def bootstrap_statistics(stats: list[np.ndarray], score, *, resamples: int = 10_000, seed: int = 0) -> list[np.ndarray]:
    """The (resamples, m) scores of each system under the same resamples of its units (texts, sentences).

    `stats`: per system, an (n, d) matrix of per-unit sufficient statistics (a confusion-matrix cell, entity counts)
    whose column sums a score is a function of; `score` maps (r, d) summed statistics to (r, m) scores. Every system
    sees the same count matrices, so differences between systems are paired."""
    n = len(stats[0])
    if n == 0:
        raise ValueError("no examples to bootstrap")
    out: list[list[np.ndarray]] = [[] for _ in stats]
    for counts in resample_counts(n, resamples, seed):
        for i, matrix in enumerate(stats):
            out[i].append(score(counts @ np.asarray(matrix, dtype=float)))
    return [np.concatenate(parts) for parts in out]


def interval(samples: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(samples, [tail, 100 - tail], axis=0)
    return low, high


def paired_difference(samples_a: np.ndarray, samples_b: np.ndarray, observed_a: np.ndarray, observed_b: np.ndarray,
                      level: float = 0.95) -> dict:
    """a − b with the percentile CI of the resampled differences and the two-sided bootstrap p-value (the share of
    resampled differences at least |diff| away from diff, +1 smoothed), as paired_bootstrap computes it."""
    differences = np.asarray(samples_a) - np.asarray(samples_b)
    observed = np.asarray(observed_a, dtype=float) - np.asarray(observed_b, dtype=float)
    low, high = interval(differences, level)
    extreme = (np.abs(differences - observed) >= np.abs(observed) - 1e-9).sum(axis=0)
    return {"diff": observed, "low": low, "high": high, "p_value": (extreme + 1) / (len(differences) + 1)}

"""Entity-level NER scores, as seqeval scores them in its default mode (conlleval's reading of BIO): an entity is a
maximal run of a type opened by B-X, or by an I-X that does not continue an X entity (after O or another type), and
continued by I-X; a predicted entity is right only when its span and type equal a gold one's.

    scores = ner_report(gold_tag_lists, predicted_tag_lists)   # micro / macro F1, per-type P / R / F1 (×100)

Micro-F1 counts every entity alike (seqeval's f1_score default, and what conlleval prints); macro-F1 is the mean of the
per-type F1 (seqeval's "macro avg"). tests/test_ner.py checks both against seqeval on random tag sequences.

For the bootstrap, each sentence is reduced to counts per type (true positives, predicted, gold): `sentence_counts`;
a resample's scores are those of its summed counts (`scores_from_counts`), drawn in evaluate/.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError

DEV_METRICS = ("micro_f1", "macro_f1")


def entities(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """{(type, first word, last word + 1)} of one sentence's tags (seqeval's default chunking)."""
    found, kind, start = set(), None, 0
    for i, tag in enumerate([*tags, "O"]):
        prefix, tag_type = ("O", None) if tag == "O" else (tag[0], tag[2:])
        continues = prefix == "I" and tag_type == kind
        if kind is not None and not continues:
            found.add((kind, start, i))
            kind = None
        if prefix in ("B", "I") and not continues:
            kind, start = tag_type, i
    return found


def sentence_counts(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]],
                    types: Sequence[str]) -> np.ndarray:
    """(sentences, types, 3) counts: true positives, predicted entities, gold entities, per type."""
    index = {t: i for i, t in enumerate(types)}
    counts = np.zeros((len(gold), len(types), 3), dtype=np.float64)
    for row, (g, p) in enumerate(zip(gold, predicted, strict=True)):
        if len(g) != len(p):
            raise ConfigError(f"sentence {row}: {len(g)} gold tags but {len(p)} predicted")
        gold_entities, predicted_entities = entities(g), entities(p)
        for kind, *_ in predicted_entities:
            if kind in index:
                counts[row, index[kind], 1] += 1
        for kind, *_ in gold_entities:
            counts[row, index[kind], 2] += 1
        for kind, *_ in gold_entities & predicted_entities:
            counts[row, index[kind], 0] += 1
    return counts


def _f1(true, predicted, gold):
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(predicted > 0, true / predicted, 0.0)
        recall = np.where(gold > 0, true / gold, 0.0)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
    return precision, recall, f1


def scores_from_counts(totals: np.ndarray, metrics: Sequence[str] = DEV_METRICS) -> np.ndarray:
    """(..., len(metrics)) ×100 scores of (..., types, 3) summed counts."""
    totals = np.asarray(totals, dtype=np.float64)
    out = []
    for metric in metrics:
        if metric == "micro_f1":
            out.append(_f1(*(totals[..., :, k].sum(axis=-1) for k in range(3)))[2])
        elif metric == "macro_f1":
            out.append(_f1(*(totals[..., :, k] for k in range(3)))[2].mean(axis=-1))
        else:
            raise ConfigError(f"unknown NER metric {metric!r}: use one of {', '.join(DEV_METRICS)}")
    return 100.0 * np.stack(out, axis=-1)


def ner_report(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]],
               types: Sequence[str] | None = None) -> dict:
    """Micro and macro P / R / F1 and per-type P / R / F1 with support (×100), and token accuracy."""
    if types is None:
        types = sorted({kind for tags in [*gold, *predicted] for kind, *_ in entities(tags)})
    totals = sentence_counts(gold, predicted, types).sum(axis=0)
    precision, recall, f1 = _f1(totals[:, 0], totals[:, 1], totals[:, 2])
    micro = _f1(*(totals[:, k].sum() for k in range(3)))
    tokens = sum(len(g) for g in gold)
    right = sum(a == b for g, p in zip(gold, predicted, strict=True) for a, b in zip(g, p, strict=True))
    return {
        "sentences": len(gold), "entities": int(totals[:, 2].sum()),
        "micro_f1": 100 * float(micro[2]), "micro_precision": 100 * float(micro[0]),
        "micro_recall": 100 * float(micro[1]), "macro_f1": 100 * float(f1.mean()) if len(types) else 0.0,
        "token_accuracy": 100.0 * right / max(tokens, 1),
        "per_type": {kind: {"precision": 100 * float(precision[i]), "recall": 100 * float(recall[i]),
                            "f1": 100 * float(f1[i]), "support": int(totals[i, 2])} for i, kind in enumerate(types)},
    }

"""Batches of token-id rows, as every task trains and predicts on them.

Training: `epoch_batches`, every row once per epoch in batches of rows of similar length, in a seeded random order (a
function of (seed, epoch), so a resumed run replays the same epoch). Rows are shuffled, cut into pools of
`LENGTH_POOL` batches, sorted by length within a pool and batched, and the batches shuffled: a batch pads to its own
longest row rather than to the longest of a random draw, while each batch still mixes rows from all over the data.

Prediction: `prediction_batches`, rows sorted by length and cut so that a batch holds at most `batch_size` rows and
`max_tokens` padded tokens; `pad` lays a batch out as the arrays a forward takes. The torch and ONNX backends of the
classification and NER tasks share both, so the two backends batch and pad alike.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

LENGTH_POOL = 50  # batches per pool of rows sorted by length (epoch_batches)
WIDTH_MULTIPLE = 8  # training batches are padded to a multiple of this: few shapes


def epoch_batches(lengths: Sequence[int] | np.ndarray, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    rng = np.random.default_rng([seed, epoch])
    lengths = np.asarray(lengths)
    order = rng.permutation(len(lengths))
    pool = batch_size * LENGTH_POOL
    batches = []
    for start in range(0, len(order), pool):
        chunk = order[start : start + pool]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def prediction_batches(lengths: Sequence[int] | np.ndarray, batch_size: int,
                       max_tokens: int | None = None) -> list[np.ndarray]:
    """Row indices in batches of similar length (ascending): ≤ batch_size rows and, when given, ≤ max_tokens padded
    tokens (always one row at least)."""
    lengths = np.asarray(lengths)
    order = np.argsort(lengths, kind="stable")
    batches, i = [], 0
    while i < len(order):
        size = 1
        while (size < batch_size and i + size < len(order)
               and (max_tokens is None or (size + 1) * lengths[order[i + size]] <= max_tokens)):
            size += 1
        batches.append(order[i : i + size])
        i += size
    return batches


def pad(rows: Sequence[Sequence[int]], indices: Sequence[int] | np.ndarray, pad_id: int, multiple: int = 1,
        labels: Sequence[Sequence[int]] | None = None) -> dict[str, np.ndarray]:
    """input_ids and attention_mask (int64) of rows[indices], right-padded to the longest (rounded up to `multiple`);
    with `labels` (one per token), "labels" padded with -100 (ignored by the loss)."""
    width = max(len(rows[i]) for i in indices)
    width = -(-width // multiple) * multiple
    ids = np.full((len(indices), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(indices), width), dtype=np.int64)
    for j, i in enumerate(indices):
        ids[j, : len(rows[i])] = rows[i]
        mask[j, : len(rows[i])] = 1
    batch = {"input_ids": ids, "attention_mask": mask}
    if labels is not None:
        padded = np.full((len(indices), width), -100, dtype=np.int64)
        for j, i in enumerate(indices):
            padded[j, : len(labels[i])] = labels[i]
        batch["labels"] = padded
    return batch

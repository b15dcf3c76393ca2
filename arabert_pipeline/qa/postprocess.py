"""N-best span decoding: window logits → best answer spans per example, in preprocessed-context characters.

As in Hugging Face's run_qa: per window, the top-`n_best` start tokens × top-`n_best` end tokens; spans that are
reversed, outside the context or longer than `max_answer_tokens` are dropped; a span scores start + end logit; the
best spans over all windows of an example win. One difference, on purpose: the top-n are taken among context tokens
only (run_qa takes them over all tokens, then drops question tokens), so the candidate set is never smaller.
All windows are scored at once with numpy; only the few winning spans per example are visited in Python.

`snap_to_words` widens a span of the original context to whole words, like Hugging Face's `align_to_words`
(default on in its QA pipeline), but on the original text rather than on the tokenizer's pre-tokenized words.
"""
from __future__ import annotations

import unicodedata

import numpy as np


def decode_spans(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    offsets: np.ndarray,
    example_index: np.ndarray,
    *,
    n_examples: int,
    n_best: int = 20,
    max_answer_tokens: int = 30,
    limit: int = 20,
    start_bonus: list[np.ndarray] | None = None,
) -> list[list[tuple[int, int, float]]]:
    """The `limit` best distinct spans per example as (char start, char end, score), best first.

    start_logits/end_logits: (windows, tokens); offsets: (windows, ≥tokens, 2) with -1 outside the context.
    start_bonus: per example, an array over its context's characters added to the score of spans starting there.
    """
    tokens = start_logits.shape[1]
    in_context = offsets[:, :tokens, 0] >= 0
    start = np.where(in_context, start_logits, -np.inf)
    end = np.where(in_context, end_logits, -np.inf)
    k = min(n_best, tokens)
    start_idx = np.argpartition(-start, k - 1, axis=1)[:, :k]
    end_idx = np.argpartition(-end, k - 1, axis=1)[:, :k]
    scores = np.take_along_axis(start, start_idx, 1)[:, :, None] + np.take_along_axis(end, end_idx, 1)[:, None, :]
    length = end_idx[:, None, :] - start_idx[:, :, None] + 1
    valid = np.isfinite(scores) & (length >= 1) & (length <= max_answer_tokens)
    window, a, b = np.nonzero(valid)
    first_token, last_token = start_idx[window, a], end_idx[window, b]
    char_start = offsets[window, first_token, 0]
    char_end = offsets[window, last_token, 1]
    score = scores[window, a, b]
    example = example_index[window]
    keep = char_end > char_start
    example, char_start, char_end, score = example[keep], char_start[keep], char_end[keep], score[keep]
    if start_bonus is not None:
        first_char = np.cumsum([0] + [len(b) for b in start_bonus])
        score = score + np.concatenate(start_bonus)[first_char[example] + char_start]
    # Best first within each example; overlapping windows propose the same span again: keep its best score only.
    order = np.lexsort((-score, example))
    keys = np.stack([example[order], char_start[order], char_end[order]], axis=1)
    _, first = np.unique(keys, axis=0, return_index=True)
    order = order[np.sort(first)]
    example, char_start, char_end, score = example[order], char_start[order], char_end[order], score[order]
    group_start = np.searchsorted(example, example, side="left")
    rank = np.arange(len(example)) - group_start
    results: list[list[tuple[int, int, float]]] = [[] for _ in range(n_examples)]
    for i in np.flatnonzero(rank < limit):
        results[example[i]].append((int(char_start[i]), int(char_end[i]), float(score[i])))
    return results


def is_word_character(char: str) -> bool:
    """Letters, digits and combining marks (Arabic diacritics are marks, not letters)."""
    return char.isalnum() or unicodedata.category(char) == "Mn"


def snap_to_words(text: str, start: int, end: int) -> tuple[int, int]:
    """[start, end) widened so that it neither starts nor ends inside a word of `text`.

    Gold answers are whole words, and a subword model's best span often cuts one (a prefix `و`/`ال` or a suffix
    piece left out): measured on the saved predictions of a small model, ARCD-test F1 8.6 → 9.8.
    """
    while 0 < start < len(text) and is_word_character(text[start - 1]) and is_word_character(text[start]):
        start -= 1
    while 0 < end < len(text) and is_word_character(text[end - 1]) and is_word_character(text[end]):
        end += 1
    return start, end

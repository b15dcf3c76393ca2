"""N-best span decoding: window logits → best answer spans per example, in preprocessed-context characters.

As in Hugging Face's run_qa: per window, the top-`n_best` start tokens × top-`n_best` end tokens; spans that are
reversed, outside the context or longer than `max_answer_tokens` are dropped; a span scores start + end logit; the
best spans over all windows of an example win. One difference, on purpose: the top-n are taken among context tokens
only (run_qa takes them over all tokens, then drops question tokens), so the candidate set is never smaller.
All windows are scored at once with numpy; only the few winning spans per example are visited in Python.

Two choices a plain run_qa decoder does not make, both settings of a QA model (QASettings, chosen on dev):
- `sentence_index`: a span must start and end in one sentence of the context. A gold answer never crosses a sentence
  boundary, and a span that does never scores Sentence-Match; a small model's best span often does.
- `rank_by_expected_f1`: minimum-Bayes-risk decoding for the F1 metric. Instead of the single most likely span, the
  candidate whose expected token F1 against the model's own span distribution (the softmax of the candidates' scores)
  is highest: when the model hesitates between overlapping spans, the answer is the part they share, or the phrase
  that covers them, rather than one guess.

`snap_to_words` widens a span of the original context to whole words, like Hugging Face's `align_to_words`
(default on in its QA pipeline), but on the original text rather than on the tokenizer's pre-tokenized words.
"""
from __future__ import annotations

import functools
import re
import unicodedata

import numpy as np

_WORD_RE = re.compile(r"\S+")


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
    end_bonus: list[np.ndarray] | None = None,
    sentence_index: list[np.ndarray] | None = None,
) -> list[list[tuple[int, int, float]]]:
    """The `limit` best distinct spans per example as (char start, char end, score), best first.

    start_logits/end_logits: (windows, tokens); offsets: (windows, ≥tokens, 2) with -1 outside the context.
    start_bonus: per example, an array over its context's characters added to the score of spans starting there;
    end_bonus: the same for spans whose last character is there.
    sentence_index: per example, the sentence number of each of its context's characters: only spans whose first and
    last characters share it are kept (for an example where no candidate does, all are kept).
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
    if sentence_index is not None:
        first_char = np.cumsum([0] + [len(s) for s in sentence_index])
        flat = np.concatenate(sentence_index)
        inside = flat[first_char[example] + char_start] == flat[first_char[example] + char_end - 1]
        has_inside = np.zeros(n_examples, dtype=bool)
        has_inside[example[inside]] = True
        keep = inside | ~has_inside[example]
        example, char_start, char_end, score = example[keep], char_start[keep], char_end[keep], score[keep]
    if start_bonus is not None:
        first_char = np.cumsum([0] + [len(b) for b in start_bonus])
        score = score + np.concatenate(start_bonus)[first_char[example] + char_start]
    if end_bonus is not None:
        first_char = np.cumsum([0] + [len(b) for b in end_bonus])
        score = score + np.concatenate(end_bonus)[first_char[example] + char_end - 1]
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


def null_margins(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    offsets: np.ndarray,
    example_index: np.ndarray,
    *,
    n_examples: int,
    max_answer_tokens: int = 30,
) -> np.ndarray:
    """Per example, the no-answer score minus the best span score, as SQuAD 2.0 decoders compare them.

    The no-answer score is the [CLS] start + end logit (position 0) of the example's window where it is lowest, the
    span score the best start + end logit of a span inside the context of any window (at most `max_answer_tokens`
    long), both without the sentence prior, which only ranks spans against spans. A margin above the model's
    `null_score_diff_threshold` means "no answer in this context".
    """
    tokens = start_logits.shape[1]
    in_context = offsets[:, :tokens, 0] >= 0
    start = np.where(in_context, start_logits, -np.inf)
    end = np.where(in_context, end_logits, -np.inf)
    best_in_window = np.full(len(start), -np.inf)
    for length in range(min(max_answer_tokens, tokens)):  # spans of length+1 tokens: start i, end i + length
        best_in_window = np.maximum(best_in_window, (start[:, : tokens - length] + end[:, length:]).max(axis=1))
    null = np.full(n_examples, np.inf)
    best = np.full(n_examples, -np.inf)
    np.minimum.at(null, example_index, start_logits[:, 0] + end_logits[:, 0])
    np.maximum.at(best, example_index, best_in_window)
    return null - best


def sentence_numbers(text: str, sentences: list[tuple[int, int]]) -> np.ndarray:
    """For each character of `text` (and one past its end), the number of the sentence it belongs to.

    The whitespace between two sentences belongs to the next one, so that a span is inside one sentence exactly when
    its first and last characters have the same number.
    """
    ends = np.asarray([end for _, end in sentences], dtype=np.int64)
    return np.searchsorted(ends, np.arange(len(text) + 1), side="right")


def rank_by_expected_f1(text: str, spans: list[tuple[int, int]], scores: list[float],
                        temperature: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Candidate spans of `text` ordered by expected token F1, best first: (order, expected F1 of each candidate).

    The model's distribution over answers is the softmax of the candidates' scores (start + end logits, prior
    included) divided by `temperature`; a candidate's expected F1 is the mean of its F1 against every candidate under
    that distribution. A small model spreads its mass thinly, so at temperature 1 the answer hedges with length; below
    1 the distribution sharpens towards the most likely span (max-score decoding in the limit). Tokens
    are the whitespace-delimited words of `text`, and two spans share the words they overlap on, which is the SQuAD F1
    of the two texts up to its normalization (punctuation, articles).
    """
    words = [(m.start(), m.end()) for m in _WORD_RE.finditer(text)]
    word_starts = np.asarray([start for start, _ in words], dtype=np.int64)
    word_ends = np.asarray([end for _, end in words], dtype=np.int64)
    bounds = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    first = np.searchsorted(word_ends, bounds[:, 0], side="right")  # first word ending after the span starts
    stop = np.searchsorted(word_starts, bounds[:, 1], side="left")  # first word starting at or after its end
    length = np.maximum(stop - first, 1)
    overlap = np.maximum(0, np.minimum(stop[:, None], stop[None, :]) - np.maximum(first[:, None], first[None, :]))
    f1 = 2.0 * overlap / (length[:, None] + length[None, :])
    weights = np.exp((np.asarray(scores, dtype=np.float64) - max(scores)) / temperature)
    expected = f1 @ (weights / weights.sum())
    return np.argsort(-expected, kind="stable"), expected


def is_word_character(char: str) -> bool:
    """Letters, digits and combining marks (Arabic diacritics are marks, not letters)."""
    return char.isalnum() or unicodedata.category(char) == "Mn"


@functools.lru_cache(maxsize=64)  # contexts repeat across questions and calls
def _word_boundaries(text: str) -> tuple[np.ndarray, np.ndarray]:
    """For each position 0..len(text): the nearest position at or before it, and at or after it, that is not inside a
    word (a position is inside a word when word characters stand on both sides of it)."""
    n = len(text)
    word = np.zeros(n + 2, dtype=bool)
    word[1:-1] = [is_word_character(c) for c in text]
    position = np.arange(n + 1)
    boundary = ~(word[:-1] & word[1:])  # position p lies between characters p - 1 and p
    before = np.maximum.accumulate(np.where(boundary, position, 0))
    after = np.minimum.accumulate(np.where(boundary, position, n)[::-1])[::-1]
    return before, after


def snap_spans_to_words(text: str, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Spans [start, end) of `text` widened so that none starts or ends inside a word (arrays of starts and ends).

    Gold answers are whole words, and a subword model's best span often cuts one (a prefix `و`/`ال` or a suffix
    piece left out): measured on the saved predictions of a small model, ARCD-test F1 8.6 → 9.8.
    """
    before, after = _word_boundaries(text)
    return before[starts], after[ends]


# What a span may lose at its ends: sentence and clause punctuation (Latin and Arabic) and spaces. Not brackets,
# quotes or signs such as %: cutting one off "(429 هـ)" or "13%" would change or unbalance the answer.
TRIMMED_PUNCTUATION = frozenset(" \t\n\r\u00a0,.;:!?،؛؟…")


def trim_spans(text: str, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Spans [start, end) of `text` without TRIMMED_PUNCTUATION at their ends ("جنوب الأردن،" → "جنوب الأردن"); a
    span made of it alone is left as it is. Gold answers do not end in a comma and the metrics ignore it, but a user
    reads it: a span whose last word is the preprocessor's split-off comma still maps back to it."""
    keep = np.fromiter((c not in TRIMMED_PUNCTUATION for c in text), dtype=bool, count=len(text))
    n = len(text)
    index = np.arange(n)
    # next_kept[p]: the first kept character at or after p (n if none); last_kept_end[p]: one past the last kept
    # character before p (0 if none).
    next_kept = np.append(np.minimum.accumulate(np.where(keep, index, n)[::-1])[::-1], n)
    last_kept_end = np.concatenate([[0], np.maximum.accumulate(np.where(keep, index + 1, 0))])
    new_starts, new_ends = next_kept[starts], last_kept_end[ends]
    inside = new_ends > new_starts
    return np.where(inside, new_starts, starts), np.where(inside, new_ends, ends)


def snap_to_words(text: str, start: int, end: int) -> tuple[int, int]:
    """One span [start, end) of `text`, widened as snap_spans_to_words widens many."""
    starts, ends = snap_spans_to_words(text, np.asarray([start]), np.asarray([end]))
    return int(starts[0]), int(ends[0])

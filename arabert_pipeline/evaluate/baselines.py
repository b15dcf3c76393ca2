"""Reference answers that need no model: the rows every model row is read against.

- `first-sentence`, `random-sentence` (seeded): one Punkt sentence of the context (the sentence baselines of the ARCD
  paper).
- `tfidf-sentence`: the Punkt sentence holding the most IDF-weighted question words (each word once), as information
  retrieval would pick it. IDF is counted over the sentences of all contexts of the evaluated set, so the baseline
  needs nothing but that set.
- `sliding-window`: Richardson et al.'s (2013) sliding-window score with its distance term, turned extractive as in the
  SQuAD paper: every run of 1 to `SLIDING_WINDOW_MAX_WORDS` context words without a question word is a candidate;
  it lies within one sentence and scores the IDF-weighted question words within |question| + |candidate| words of
  it, minus its distance (in words, over its sentence's length) to the nearest question word.
- `overlap-span`: in the `tfidf-sentence`, the longest run of words that are not question words (the answer is rarely
  a word of the question).

Words are compared on `qa.overlap.match_keys` (diacritics, letter variants, clitics forgiven; function words left
out), the same keys as the models' question-overlap feature.
"""
from __future__ import annotations

import re
from typing import cast

import numpy as np

from ..qa.overlap import KeyIDF, match_keys, question_keys, sentence_overlap_scores
from .metrics import punkt_sentence_spans

BASELINES = ("first-sentence", "random-sentence", "tfidf-sentence", "sliding-window", "overlap-span")
SLIDING_WINDOW_MAX_WORDS = 6  # chosen on the dev split (arcd-dev + mlqa-ar-dev) by F1 among 1, 2, 3, 4, 6

Prediction = tuple[str, int]  # (answer text, its start in the context)


def baseline_predictions(name: str, examples: list[dict], seed: int = 0) -> dict[str, Prediction]:
    """{question id: (text, start)} for every example whose context has a sentence."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}")
    rng = np.random.default_rng(seed)
    # The first two read no IDF table; the other three do.
    idf = KeyIDF.from_texts(sorted({ex["context"] for ex in examples})) if name not in BASELINES[:2] else None
    predictions = {}
    for ex in examples:
        context = ex["context"]
        spans = punkt_sentence_spans(context)
        if not spans:
            continue
        if name == "first-sentence":
            start, end = spans[0]
        elif name == "random-sentence":
            start, end = spans[int(rng.integers(len(spans)))]
        elif name == "sliding-window":
            start, end = sliding_window_span(ex["question"], context, cast(KeyIDF, idf))
        else:
            scores = sentence_overlap_scores(ex["question"], context, cast(KeyIDF, idf), spans)
            start, end = spans[int(np.argmax(scores))]
            if name == "overlap-span":
                start, end = longest_run_without_question_words(ex["question"], context, start, end)
        predictions[ex["id"]] = (context[start:end], start)
    return predictions


def _words(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int, frozenset[str]]]:
    return [(start + m.start(), start + m.end(), match_keys(m.group())) for m in re.finditer(r"\S+", text[start:end])]


def longest_run_without_question_words(question: str, context: str, start: int, end: int) -> tuple[int, int]:
    keys = question_keys(question)
    best: list[tuple[int, int, frozenset[str]]] | None = None
    run: list[tuple[int, int, frozenset[str]]] = []
    for word in [*_words(context, start, end), None]:
        if word is None or not keys.isdisjoint(word[2]):
            if run and (best is None or len(run) > len(best)):
                best = run
            run = []
        else:
            run.append(word)
    return (best[0][0], best[-1][1]) if best else (start, end)


def sliding_window_span(question: str, context: str, idf: KeyIDF,
                        max_words: int = SLIDING_WINDOW_MAX_WORDS) -> tuple[int, int]:
    keys = question_keys(question)
    words = _words(context)
    if not words:
        return 0, len(context)
    sentence_ends = [end for _, end in punkt_sentence_spans(context)]
    sentence_of = np.searchsorted(sentence_ends, [start for start, _, _ in words], side="right")
    in_question = np.array([not keys.isdisjoint(w[2]) for w in words])
    weights = np.array([max((idf(k) for k in w[2] & keys), default=0.0) for w in words])
    question_positions = np.flatnonzero(in_question)
    best, best_score = (words[0][0], words[0][1]), -np.inf
    width = len(question.split())
    for first in range(len(words)):
        for last in range(first, min(first + max_words, len(words))):
            if in_question[last] or sentence_of[last] != sentence_of[first]:
                break
            size = width + (last - first + 1)
            low, high = max(0, first - size), min(len(words), last + 1 + size)
            score = weights[low:high].sum()
            if question_positions.size:
                distance = np.min(np.abs(question_positions - np.clip(question_positions, first, last)))
                score -= distance / np.count_nonzero(sentence_of == sentence_of[first])
            if score > best_score:
                best, best_score = (words[first][0], words[last][1]), score
    return best

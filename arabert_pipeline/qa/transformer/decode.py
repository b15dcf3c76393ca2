"""Span decoding: window logits → answers, spans of the ORIGINAL context, for both backends (model.py, onnx.py).

`decode` ranks each example's candidate spans (`candidates`: the n-best spans of `decode_spans`, the bonuses of
bonuses.py added, mapped back to the original context and widened to whole words), orders them by expected F1 when
the settings say so, turns their scores into probabilities (and calibrates them), and trims sentence punctuation off
their ends.

`decode_spans` is Hugging Face's run_qa n-best decoder, vectorized:
per window, the top-`n_best` start tokens × top-`n_best` end tokens; spans that are
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

`snap_spans_to_words` widens spans of the original context to whole words, like Hugging Face's `align_to_words`
(default on in its QA pipeline), but on the original text rather than on the tokenizer's pre-tokenized words.
"""
from __future__ import annotations

import dataclasses
import functools
import re
import unicodedata
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from ...errors import ConfigError
from ..overlap import KeyIDF, normalize_word, sentence_spans
from .bonuses import reader_scores as reader_log_probs
from .bonuses import sentence_bonus
from .features import Windows
from .settings import QASettings

if TYPE_CHECKING:
    from ...finetuning.offsets import AlignedText
    from ...retrieval.passages import Passage
    from .companion import Companion

_WORD_RE = re.compile(r"\S+")
# Distinct spans per example that expected-F1 decoding weighs: the mass of a small model's distribution is spread
# over many overlapping spans, and the top 20 of Hugging Face's n-best hold too little of it.
EXPECTED_F1_CANDIDATES = 200


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
    """The `limit` best distinct spans per example as (char start, char end, score), best first (decode_spans_under
    with one pair of bonuses).

    start_logits/end_logits: (windows, tokens); offsets: (windows, ≥tokens, 2) with -1 outside the context.
    start_bonus: per example, an array over its context's characters added to the score of spans starting there;
    end_bonus: the same for spans whose last character is there.
    sentence_index: per example, the sentence number of each of its context's characters: only spans whose first and
    last characters share it are kept (for an example where no candidate does, all are kept).
    """
    return decode_spans_under(start_logits, end_logits, offsets, example_index, n_examples=n_examples, n_best=n_best,
                              max_answer_tokens=max_answer_tokens, bonuses=[(start_bonus, end_bonus, limit)],
                              sentence_index=sentence_index)[0]


def decode_spans_under(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    offsets: np.ndarray,
    example_index: np.ndarray,
    *,
    n_examples: int,
    n_best: int = 20,
    max_answer_tokens: int = 30,
    bonuses: list[tuple[list[np.ndarray] | None, list[np.ndarray] | None, int]],
    sentence_index: list[np.ndarray] | None = None,
) -> list[list[list[tuple[int, int, float]]]]:
    """decode_spans' spans ranked under each of several scorings at once: per (start_bonus, end_bonus, limit) of
    `bonuses`, the `limit` best distinct spans per example. The candidate spans (the top-n start and end tokens by
    logit, the sentence filter) do not depend on the bonuses, so they are found once; each scoring adds its own
    bonuses to the same start + end logits and ranks them as decode_spans alone would."""
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
    return [_ranked(example, char_start, char_end, _with_bonuses(example, char_start, char_end, score, *pair[:2]),
                    n_examples, pair[2]) for pair in bonuses]


def _with_bonuses(example: np.ndarray, char_start: np.ndarray, char_end: np.ndarray, score: np.ndarray,
                  start_bonus: list[np.ndarray] | None, end_bonus: list[np.ndarray] | None) -> np.ndarray:
    if start_bonus is not None:
        first_char = np.cumsum([0] + [len(b) for b in start_bonus])
        score = score + np.concatenate(start_bonus)[first_char[example] + char_start]
    if end_bonus is not None:
        first_char = np.cumsum([0] + [len(b) for b in end_bonus])
        score = score + np.concatenate(end_bonus)[first_char[example] + char_end - 1]
    return score


def _ranked(example: np.ndarray, char_start: np.ndarray, char_end: np.ndarray, score: np.ndarray, n_examples: int,
            limit: int) -> list[list[tuple[int, int, float]]]:
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
    margins: np.ndarray = null - best
    return margins


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
    1 the distribution sharpens towards the most likely span (max-score decoding in the limit).
    """
    expected = expected_f1(text, spans, spans, scores, temperature)
    return np.argsort(-expected, kind="stable"), expected


def expected_f1(text: str, spans: list[tuple[int, int]], candidates: list[tuple[int, int]], scores: list[float],
                temperature: float = 1.0) -> np.ndarray:
    """Each span's expected token F1 against the candidates under softmax(scores / temperature). Tokens are the
    whitespace-delimited words of `text`, and two spans share the words they overlap on, which is the SQuAD F1 of
    the two texts up to its normalization (punctuation, articles)."""
    words = [(m.start(), m.end()) for m in _WORD_RE.finditer(text)]
    word_starts = np.asarray([start for start, _ in words], dtype=np.int64)
    word_ends = np.asarray([end for _, end in words], dtype=np.int64)

    def word_range(bounds: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pairs = np.asarray(bounds, dtype=np.int64).reshape(-1, 2)
        first = np.searchsorted(word_ends, pairs[:, 0], side="right")  # first word ending after the span starts
        stop = np.searchsorted(word_starts, pairs[:, 1], side="left")  # first word starting at or after its end
        return first, stop, np.maximum(stop - first, 1)

    first, stop, length = word_range(spans)
    c_first, c_stop, c_length = word_range(candidates)
    overlap = np.maximum(0, np.minimum(stop[:, None], c_stop[None, :]) - np.maximum(first[:, None], c_first[None, :]))
    f1 = 2.0 * overlap / (length[:, None] + c_length[None, :])
    weights = np.exp((np.asarray(scores, dtype=np.float64) - max(scores)) / temperature)
    expected: np.ndarray = f1 @ (weights / weights.sum())
    return expected


def is_word_character(char: str) -> bool:
    """Letters, digits and combining marks (Arabic diacritics are marks, not letters)."""
    return char.isalnum() or unicodedata.category(char) == "Mn"


# Inside a number: "7.6", "1,000", and the Arabic decimal and thousands separators ("٧٫٦", "١٬٠٠٠").
NUMBER_SEPARATORS = frozenset(".,\u066b\u066c")
_SEPARATOR_IN_NUMBER = re.compile(r"(?<=\d)[" + re.escape("".join(sorted(NUMBER_SEPARATORS))) + r"](?=\d)")


# Contexts repeat across questions and calls, one after the other; each entry holds 16 bytes a character of its
# context, so a server sent 64 new 100,000-character contexts kept 100 MB more: a few entries do the work.
@functools.lru_cache(maxsize=8)
def _word_boundaries(text: str) -> tuple[np.ndarray, np.ndarray]:
    """For each position 0..len(text): the nearest position at or before it, and at or after it, that is not inside a
    word (a position is inside a word when word characters stand on both sides of it). A decimal or thousands
    separator between two digits is part of its number: the preprocessor spaces it out, so a model can start an
    answer at "6" of "7.6 مليون", and widening must give back "7.6"."""
    n = len(text)
    word = np.zeros(n + 2, dtype=bool)
    word[1:-1] = [is_word_character(c) for c in text]
    for match in _SEPARATOR_IN_NUMBER.finditer(text):
        word[match.start() + 1] = True
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


def drop_leading_word(text: str, start: int, end: int, leading_words: frozenset[str]) -> int:
    """The start of span [start, end) of `text` past its first word when that word, normalized (overlap.py
    normalize_word), is one of `leading_words` and another word follows it: "عام 1889" → "1889", "في باريس" →
    "باريس". Gold answers rarely start with a preposition or with the noun before a year ("سنة", "عام"), and a small
    model often takes it in; which words are dropped is a decoding setting chosen on dev (tune.py)."""
    words = list(_WORD_RE.finditer(text, start, end))
    if len(words) < 2 or normalize_word(words[0].group()) not in leading_words:
        return start
    return words[1].start()


@dataclasses.dataclass(frozen=True)
class Answer:
    text: str  # == context[start:end] of the original context
    start: int
    end: int
    # A probability: the softmax of the start + end logits (+ the sentence prior's and the reader's bonuses) over the
    # question's candidate spans, its max(n_best, top_k) best distinct ones over all of its windows. In (0, 1]; the
    # top-k of one question sum to at most 1; comparable across questions (Hugging Face's p_start · p_end within one
    # window is not comparable across the windows of a long context). A model with a `calibration` maps it to the
    # dev rate of right answers at that probability (calibration.py).
    score: float
    # An answer from an index (Pipeline.answer(question, index=...)): the id and title of the document it was found in
    # (start and end are offsets into that document's text); None for an answer from a context given.
    document: str | None = None
    title: str | None = None
    # And the passage it was read from (its document's position in the index, its start and end in that document's
    # text: `index.document_text(p.document)[p.start:p.end]`), for showing the answer in its surroundings.
    passage: Passage | None = None


def with_probabilities(answers: list[Answer]) -> list[Answer]:
    """The same answers with `score` = softmax of their logit scores (max-shifted, so no overflow)."""
    if not answers:
        return []
    logits = np.asarray([a.score for a in answers], dtype=np.float64)
    weights = np.exp(logits - logits.max())
    weights /= weights.sum()
    return [dataclasses.replace(a, score=float(w)) for a, w in zip(answers, weights, strict=True)]


def trimmed(context: str, answers: list[Answer], by_score: bool,
            leading_words: frozenset[str] = frozenset()) -> list[Answer]:
    """The ranked answers without sentence punctuation at their ends ("جنوب الأردن،" → "جنوب الأردن",
    TRIMMED_PUNCTUATION) and without a first word of `leading_words` (drop_leading_word); those that become one answer
    are merged (their probabilities summed), a span of punctuation alone is dropped. `by_score`: ranked by probability
    again (max-score decoding); else each keeps the first place of its parts (expected-F1's order).

    After decoding, not before it: the candidates' distribution, and so the decoder the dev sets chose, stay as they
    were (trimming the candidates first merged them and cost the previous default 1.2 dev F1)."""
    bounds = np.asarray([(a.start, a.end) for a in answers], dtype=np.int64).reshape(-1, 2)
    starts, ends = trim_spans(context, bounds[:, 0], bounds[:, 1])
    merged: dict[tuple[int, int], Answer] = {}
    for answer, start, end in zip(answers, starts.tolist(), ends.tolist(), strict=True):
        if leading_words:
            start = drop_leading_word(context, start, end, leading_words)
        if not any(map(is_word_character, context[start:end])):
            continue
        if (start, end) in merged:
            kept = merged[start, end]
            merged[start, end] = dataclasses.replace(kept, score=kept.score + answer.score)
        else:
            merged[start, end] = Answer(context[start:end], start, end, answer.score)
    found = list(merged.values())
    return sorted(found, key=lambda a: -a.score) if by_score else found


@dataclasses.dataclass
class Logits:
    """What a QA model computed for a list of examples (QAModel.logits): each example's preprocessed question and
    aligned context (`prepared`, QAModel.prepare), their windows, and each window's start and end logits."""

    prepared: list[tuple[str, Any]]  # (preprocessed question, align.AlignedText of the context) per example
    windows: Windows
    start: np.ndarray  # (windows, tokens), 0 past each window's end
    end: np.ndarray

    def head(self, n: int) -> Logits:
        """The logits of the first `n` examples alone (their windows, in order)."""
        keep = np.flatnonzero(self.windows.example_index < n)
        return Logits(self.prepared[:n], self.windows.select(keep), self.start[keep], self.end[keep])


# Per example, the reader's log p(start) and log p(end) per preprocessed-context character (bonuses.reader_scores).
ReaderScores: TypeAlias = list[tuple[np.ndarray, np.ndarray]]


def candidates(logits: Logits, settings: QASettings, *, sentence_idf: KeyIDF | None = None,
               reader: Companion | None = None, reader_scores: ReaderScores | None = None, top_k: int = 1,
               whole_words: bool = True,
               every_candidate: bool = False) -> list[list[Answer]]:
    """Per example, its distinct candidate spans of the original context, best score first, with the score the
    settings give them (start + end logit, sentence prior, reader), before the expected-F1 order: what `decode`
    chooses from. Max-score decoding keeps only the best few, unless `every_candidate` (as expected-F1 weighs
    them: up to EXPECTED_F1_CANDIDATES). `reader_scores`: bonuses.reader_scores of the same examples, when the caller
    decodes them many times; `whole_words`: spans widened to whole words of the original context."""
    return _candidates(logits, settings, sentence_idf=sentence_idf, reader=reader, reader_scores=reader_scores,
                       top_k=top_k, whole_words=whole_words, every_candidate=every_candidate)[0]


# The reader weight at which the reader alone ranks the spans (the transformer's logits, a few units, then only break
# its ties): the reader's own best span, for the calibration's reader-f1.
READER_ALONE = 1000.0


def _candidates(logits: Logits, settings: QASettings, *, sentence_idf: KeyIDF | None = None,
                reader: Companion | None = None, reader_scores: ReaderScores | None = None, top_k: int = 1,
                whole_words: bool = True, every_candidate: bool = False,
                own_best: bool = False) -> tuple[list[list[Answer]], list[list[Answer | None]]]:
    """`candidates`, and with `own_best` (and a reader weighed) the transformer's and the reader's own best span of
    each example: [transformer's, reader's], each a list over the examples (None where an example has none), the
    spans `candidates` would rank first with the reader weight 0 and READER_ALONE under max-score decoding. The
    three rankings share one pass: the same candidate spans, the reader run once, each scored with its own bonuses."""
    prepared = logits.prepared
    sentences = [sentence_spans(aligned.text) for _, aligned in prepared] \
        if settings.sentence_prior > 0 or settings.within_sentence else None
    start_bonus = sentence_bonus(prepared, sentence_idf, settings.sentence_prior, sentences) \
        if settings.sentence_prior > 0 else None
    end_bonus = None
    # The bonuses of each ranking: (start, end, limit, spans per example kept, whether max-score's cut applies).
    # The probabilities are a softmax over `pool` distinct spans, whatever top_k is. Distinct preprocessed spans
    # can map back to one original span (a `+` marker token, a placeholder): decode a few more than needed.
    pool = max(top_k, settings.n_best)
    limit = 4 * pool
    if settings.decoding == "expected-f1" or every_candidate:
        limit = max(limit, EXPECTED_F1_CANDIDATES)
    rankings: list[tuple[list[np.ndarray] | None, list[np.ndarray] | None, int, int, bool]] = []
    own_best = own_best and settings.reader_weight > 0
    if settings.reader_weight > 0:
        if reader is None and reader_scores is None:
            raise ConfigError(f"reader_weight {settings.reader_weight} needs the model's reader (reader/)")
        reader_scores = reader_scores if reader_scores is not None else reader_log_probs(prepared, reader)
        if own_best:  # as candidates() alone would rank them: max-score, top_k 1
            alone_pool = max(1, settings.n_best)
            rankings.append((start_bonus, None, 4 * alone_pool, alone_pool, True))
            weight = np.float32(READER_ALONE)
            starts = [weight * s for s, _ in reader_scores]
            alone_starts = starts if start_bonus is None else [a + b for a, b in zip(start_bonus, starts, strict=True)]
            rankings.append((alone_starts, [weight * e for _, e in reader_scores], 4 * alone_pool, alone_pool, True))
        weight = np.float32(settings.reader_weight)
        starts = [weight * s for s, _ in reader_scores]
        start_bonus = starts if start_bonus is None else [a + b for a, b in zip(start_bonus, starts, strict=True)]
        end_bonus = [weight * e for _, e in reader_scores]
    rankings.insert(0, (start_bonus, end_bonus, limit, pool, settings.decoding == "max-score" and not every_candidate))
    ranked = decode_spans_under(
        logits.start,
        logits.end,
        logits.windows.offsets,
        logits.windows.example_index,
        n_examples=len(prepared),
        n_best=settings.n_best,
        max_answer_tokens=settings.max_answer_tokens,
        bonuses=[(starts, ends, cut) for starts, ends, cut, _, _ in rankings],
        sentence_index=[sentence_numbers(aligned.text, found)
                        for (_, aligned), found in zip(prepared, sentences, strict=True)]
        if settings.within_sentence and sentences is not None else None,
    )
    found_per_ranking = []
    for spans, (_, _, _, kept, cut) in zip(ranked, rankings, strict=True):
        found_per_ranking.append([_answers(aligned, found_spans, kept, cut, whole_words)
                                  for (_, aligned), found_spans in zip(prepared, spans, strict=True)])
    own = [[found[0] if found else None for found in per_example] for per_example in found_per_ranking[1:]]
    return found_per_ranking[0], own


def _answers(aligned: AlignedText, found_spans: list[tuple[int, int, float]], pool: int, cut: bool,
             whole_words: bool) -> list[Answer]:
    """An example's ranked spans of its preprocessed context as distinct Answers of the original context, best first
    (at most `pool` of them when `cut`)."""
    found_spans = [c for c in found_spans if c[1] > c[0]]  # an empty span maps to nothing
    bounds = np.asarray([c[:2] for c in found_spans], dtype=np.int64).reshape(-1, 2)
    first, last = aligned.to_original_many(bounds[:, 0], bounds[:, 1])
    if whole_words:
        first, last = snap_spans_to_words(aligned.original, first, last)
    found: dict[tuple[int, int], Answer] = {}
    for start, end, (_, _, score) in zip(first.tolist(), last.tolist(), found_spans, strict=True):
        if end > start and (start, end) not in found:
            found[start, end] = Answer(aligned.original[start:end], start, end, score)
            if len(found) == pool and cut:
                break
    return list(found.values())


def decode(logits: Logits, settings: QASettings, *, top_k: int = 1, whole_words: bool = True,
           features: list[np.ndarray] | None = None, **bonuses: Any) -> list[list[Answer]]:
    """Window logits → at most `top_k` answers per example in original-context coordinates, best first; `bonuses`:
    `candidates`' sentence_idf, reader and reader_scores. `features`: a list that receives, per example, the
    calibration.answer_features of its answers (all of them, before the cut to top_k), whatever the map."""
    from .calibration import answer_features, monotone

    pool = max(top_k, settings.n_best)
    leading_words = frozenset(settings.leading_words)
    calibration = settings.calibration
    tabled = features is not None or (calibration is not None and calibration.method == "logistic")
    # With the candidates, the transformer's and the reader's own best spans, for the features that say whether they
    # agree (none without a reader: the features default to the top span's).
    found_per_example, own_best = _candidates(logits, settings, top_k=top_k, whole_words=whole_words,
                                              own_best=tabled, **bonuses)
    answers = []
    for index, ((question, aligned), ranked) in enumerate(zip(logits.prepared, found_per_example, strict=True)):
        every = ranked
        if settings.decoding == "expected-f1" and ranked:
            order, _ = rank_by_expected_f1(aligned.original, [(a.start, a.end) for a in ranked],
                                           [a.score for a in ranked], settings.expected_f1_temperature)
            ranked = [ranked[i] for i in order]
        ranked = with_probabilities(ranked[:pool])
        if whole_words:
            ranked = trimmed(aligned.original, ranked, by_score=settings.decoding == "max-score",
                             leading_words=leading_words)
        if ranked and tabled:
            # What a logistic map reads (calibration.FEATURES): the answer's probability, its expected F1 under the
            # distribution over every candidate, its agreement with the best-scoring span, its question and context.
            spans = [(a.start, a.end) for a in ranked]
            expected = expected_f1(aligned.original, spans, [(a.start, a.end) for a in every],
                                   [a.score for a in every], settings.expected_f1_temperature)
            top = max(every, key=lambda a: a.score)
            agreement = expected_f1(aligned.original, spans, [(top.start, top.end)], [0.0])
            own = [None if b is None else expected_f1(aligned.original, spans, [(b.start, b.end)], [0.0])
                   for b in (best[index] for best in own_best)]
            table = answer_features(question, aligned.original, spans, np.asarray([a.score for a in ranked]),
                                    expected, agreement, *own)
            if features is not None:
                features.append(table)
            if calibration is not None and calibration.method == "logistic":
                ranked = [dataclasses.replace(a, score=float(s))
                          for a, s in zip(ranked, monotone(calibration.apply(table)), strict=True)]
        elif features is not None:
            features.append(answer_features(question, aligned.original, [], np.zeros(0), np.zeros(0), np.zeros(0)))
        if calibration is not None and calibration.method != "logistic" and ranked:
            if calibration.input == "expected-f1":
                # The map reads each answer's expected F1 under the distribution over every candidate, not its
                # probability.
                expected = expected_f1(aligned.original, [(a.start, a.end) for a in ranked],
                                       [(a.start, a.end) for a in every], [a.score for a in every],
                                       settings.expected_f1_temperature)
                ranked = [dataclasses.replace(a, score=float(e)) for a, e in zip(ranked, expected, strict=True)]
            # Mapped, then never increasing down the list: under max-score decoding the answers are ordered by
            # probability while a map may read their expected F1.
            mapped = monotone(calibration.apply(np.asarray([a.score for a in ranked])))
            ranked = [dataclasses.replace(a, score=float(s)) for a, s in zip(ranked, mapped, strict=True)]
        answers.append(ranked[:top_k])
    return answers

"""The static reader's inputs: words, their features and the gold spans (DrQA's `vector.py`).

Words are the whitespace tokens of the text once preprocessed the way the embeddings' corpus was (with arabertv2,
Farasa segments such as `ال+` are words of their own), so every word has the vector it was trained with. A gold answer
comes in through QAPreprocessing's offset map, as the words it touches; one that does not map is skipped and counted,
never guessed. Each context word carries N_FEATURES features: it is a question word (its surface form; overlap.py's
match keys, which forgive clitics and spelling variants) and its term frequency.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from ...errors import InputError

PAD, UNK = 0, 1  # rows before the embeddings' own words
N_FEATURES = 3  # surface match, match-key match, term frequency
_WORD = re.compile(r"\S+")


@dataclasses.dataclass
class Encoded:
    id: str
    context: str
    aligned: Any  # AlignedText
    word_spans: np.ndarray  # (n, 2) character spans of the words in aligned.text
    context_ids: np.ndarray
    features: np.ndarray  # (n, N_FEATURES)
    question_ids: np.ndarray
    gold: tuple[int, int] | None  # first aligned answer as (first word, last word)


def word_spans(text: str) -> np.ndarray:
    spans = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    return np.asarray(spans, dtype=np.int64).reshape(len(spans), 2)


def word_features(context_words: list[str], question_words: list[str]) -> np.ndarray:
    from ..overlap import match_keys

    surface = set(question_words)
    keys = frozenset().union(*map(match_keys, question_words)) if question_words else frozenset()
    counts: dict[str, int] = {}
    for word in context_words:
        counts[word] = counts.get(word, 0) + 1
    n = max(len(context_words), 1)
    return np.asarray([[word in surface, not keys.isdisjoint(match_keys(word)), counts[word] / n]
                       for word in context_words], dtype=np.float32).reshape(len(context_words), N_FEATURES)


def _char_span_to_words(word_spans: np.ndarray, start: int, end: int) -> tuple[int, int] | None:
    """The words a preprocessed character span [start, end) touches: a gold answer cut inside a word takes it whole,
    as the metric's normalisation would read it anyway."""
    touched = np.flatnonzero((word_spans[:, 0] < end) & (word_spans[:, 1] > start))
    return (int(touched[0]), int(touched[-1])) if touched.size else None


class Vocabulary:
    """Word → row of the reader's embedding table: PAD, UNK, then the embeddings' words in their order."""

    def __init__(self, words: list[str]):
        self.index = {word: i + 2 for i, word in enumerate(words)}

    def ids(self, words: list[str]) -> np.ndarray:
        return np.asarray([self.index.get(w, UNK) for w in words], dtype=np.int64)


def encode_examples(examples: list[dict], preprocessor, vocabulary: Vocabulary) -> tuple[list[Encoded], list[str]]:
    """Encoded examples (all of them, gold None where no answer aligns) and the ids whose answers did not align."""
    from ..align import align_examples

    aligned_examples, _ = align_examples(examples, preprocessor)
    out, unaligned = [], []
    for example, item in zip(examples, aligned_examples, strict=True):
        aligned = item["aligned"]
        spans = word_spans(aligned.text)
        context_words = [aligned.text[a:b] for a, b in spans]
        question_words = item["question"].split()
        gold = None
        for start, end in item["spans"]:
            gold = _char_span_to_words(spans, start, end)
            if gold is not None:
                break
        if gold is None and (example.get("answers") or {}).get("text"):
            unaligned.append(item["id"])
        if not context_words or not question_words:
            raise InputError("context or question is empty once preprocessed", field=f"question {item['id']}")
        out.append(Encoded(item["id"], example["context"], aligned, spans, vocabulary.ids(context_words),
                           word_features(context_words, question_words), vocabulary.ids(question_words), gold))
    return out, unaligned


def batch(items: list[Encoded]):
    """Padded (context ids, features, question ids) tensors of a list of encoded questions."""
    import torch

    n_c = max(len(e.context_ids) for e in items)
    n_q = max(len(e.question_ids) for e in items)
    context = torch.zeros(len(items), n_c, dtype=torch.long)
    question = torch.zeros(len(items), n_q, dtype=torch.long)
    features = torch.zeros(len(items), n_c, N_FEATURES)
    for row, e in enumerate(items):
        context[row, : len(e.context_ids)] = torch.from_numpy(e.context_ids)
        question[row, : len(e.question_ids)] = torch.from_numpy(e.question_ids)
        features[row, : len(e.context_ids)] = torch.from_numpy(e.features)
    return context, features, question


def most_frequent_question_words(train: list[Encoded], k: int) -> np.ndarray:
    """The rows of the `k` most frequent question words of the training questions (ties: the embeddings' order)."""
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    ids = np.concatenate([e.question_ids for e in train])
    ids = ids[ids >= 2]  # UNK has no vector to start from, PAD is never read
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    rows, counts = np.unique(ids, return_counts=True)
    order = np.lexsort((rows, -counts))  # ties by row: the embeddings' own frequency order
    return rows[order[:k]]

"""Offset maps between an original text and the model's preprocessed text, as every task uses them: QA maps gold
answers in and predicted spans back (qa/align.py), NER maps words to their tokens and entities back to character spans
of the original text (ner/align.py).

`Preprocessor.preprocess_with_offsets` gives, for every output character, the half-open span of the original text it
comes from; `AlignedText` holds both texts and those spans and maps spans either way. No fuzzy search: a span either
maps through the offsets or does not.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ..errors import ConfigError


@dataclasses.dataclass
class AlignedText:
    """A preprocessed text with, per output character, the original span [starts[i], ends[i]) it comes from."""

    original: str
    text: str
    starts: np.ndarray
    ends: np.ndarray

    def to_preprocessed(self, start: int, end: int) -> tuple[int, int] | None:
        """Original [start, end) → the output span covering it (edge whitespace trimmed), or None if nothing maps."""
        inside = np.flatnonzero((self.starts < end) & (self.ends > start))
        if inside.size == 0:
            return None
        first, last = int(inside[0]), int(inside[-1]) + 1
        while first < last and self.text[first].isspace():
            first += 1
        while last > first and self.text[last - 1].isspace():
            last -= 1
        return (first, last) if first < last else None

    def to_original(self, start: int, end: int) -> tuple[int, int]:
        """Output [start, end) → the original span its characters come from (edge whitespace trimmed)."""
        if start >= end:
            return start, start
        first, last = self.to_original_many(np.asarray([start]), np.asarray([end]))
        return int(first[0]), int(last[0])

    def to_original_many(self, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`to_original` for many non-empty output spans at once."""
        starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
        if self._monotone:  # then a span's sources start at its first character's and end at its last's
            first, last = self.starts[starts], self.ends[ends - 1]
        else:
            first = np.asarray([self.starts[a:b].min() for a, b in zip(starts, ends, strict=True)], dtype=np.int64)
            last = np.asarray([self.ends[a:b].max() for a, b in zip(starts, ends, strict=True)], dtype=np.int64)
        next_text, text_end = self._space_tables
        trimmed = np.minimum(next_text[first], last)
        return np.where(first < last, trimmed, first), np.where(first < last, np.maximum(text_end[last], trimmed), last)

    @functools.cached_property
    def _monotone(self) -> bool:
        return bool(np.all(np.diff(self.starts) >= 0) and np.all(np.diff(self.ends) >= 0))

    @functools.cached_property
    def _space_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """Over positions 0..len(original): the first non-space character at or after each, and the end of the last
        non-space character before each (0 if none)."""
        n = len(self.original)
        text = np.fromiter((not c.isspace() for c in self.original), dtype=bool, count=n)
        index = np.arange(n + 1)
        next_text = np.minimum.accumulate(np.where(np.append(text, True), index, n)[::-1])[::-1]
        text_end = np.maximum.accumulate(np.where(np.insert(text, 0, False), index, 0))
        return next_text, text_end


def preprocess_aligned(text: str, preprocessor, name: str = "") -> AlignedText:
    """`text` through `preprocessor` (an object with preprocess_with_offsets; None: the identity), with its offsets."""
    if preprocessor is None:
        index = np.arange(len(text), dtype=np.int64)
        return AlignedText(text, text, index, index + 1)
    out, offsets = preprocessor.preprocess_with_offsets(text)
    if len(offsets) != len(out):
        raise ConfigError(f"preprocessing {name!r} returned {len(offsets)} offsets for {len(out)} characters")
    spans = np.asarray(offsets, dtype=np.int64).reshape(len(out), 2)
    return AlignedText(text, out, spans[:, 0].copy(), spans[:, 1].copy())

"""Passages: the pieces of a document a retriever ranks and a reader reads, each with its exact character offsets.

    split_passages("الفقرة الأولى.\nالفقرة الثانية.", max_chars=600)   # [Passage(document=0, start=0, end=31)]

A passage is `text[start:end]`, never padded with whitespace. Paragraphs (the text between line breaks, as
`str.splitlines` breaks lines) are packed whole, one after another, while the passage stays within `max_chars`; a
paragraph longer than that is split at sentence ends (a `. ! ? ; ؟ ؛ …` followed by whitespace, closing quotes or
brackets kept with their sentence) and its sentences packed the same way, never with the neighbouring paragraphs; a
sentence longer than `max_chars` is split between words. No passage starts or ends inside a word, so a word longer
than `max_chars` (a URL) is a passage of its own, longer than the limit. Every non-whitespace character of the text is
in exactly one passage, in order. Deterministic: the same text and limit give the same passages.
"""
from __future__ import annotations

import dataclasses
import re

from ..errors import ConfigError

# Fits an ARCD or MLQA paragraph (median 500-600 characters) whole and a reader window (384 tokens) several times over.
DEFAULT_PASSAGE_CHARS = 600
MIN_PASSAGE_CHARS = 20
MAX_PASSAGE_CHARS = 100_000

# What str.splitlines() breaks lines at.
_LINE_BREAK = re.compile("\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
# A sentence ends after its closing punctuation and any closing quotes or brackets, where whitespace follows.
_SENTENCE_END = re.compile(r"""[.!?;؟؛…]+["'»”’)\]}]*(?=\s)""")
_WORD = re.compile(r"\S+")


@dataclasses.dataclass(frozen=True, order=True)
class Passage:
    """`document`'s text from `start` to `end` (character offsets: `text[start:end]` is the passage)."""

    document: int
    start: int
    end: int


def check_passage_chars(max_chars: object, what: str = "passage_chars") -> int:
    if type(max_chars) is not int or not MIN_PASSAGE_CHARS <= max_chars <= MAX_PASSAGE_CHARS:
        raise ConfigError(f"{what} {max_chars!r}: use a whole number of characters from {MIN_PASSAGE_CHARS} to "
                          f"{MAX_PASSAGE_CHARS:,}")
    return max_chars


def _trimmed(text: str, start: int, end: int) -> tuple[int, int] | None:
    """(start, end) without the whitespace at either end, or None when only whitespace is left."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _between(text: str, start: int, end: int, breaks: re.Pattern[str]) -> list[tuple[int, int]]:
    """The trimmed, non-empty pieces of text[start:end] between the matches of `breaks` (each match ends a piece)."""
    pieces, last = [], start
    for found in breaks.finditer(text, start, end):
        pieces.append((last, found.end()))
        last = found.end()
    pieces.append((last, end))
    return [span for span in (_trimmed(text, s, e) for s, e in pieces) if span is not None]


def _units(text: str, start: int, end: int, level: int) -> list[tuple[int, int]]:
    if level == 0:
        return _between(text, start, end, _LINE_BREAK)
    if level == 1:
        return _between(text, start, end, _SENTENCE_END)
    return [found.span() for found in _WORD.finditer(text, start, end)]


def _pack(text: str, start: int, end: int, level: int, max_chars: int, out: list[tuple[int, int]]) -> None:
    """Greedy packing of the units of one level; a unit over the limit is split at the next level on its own."""
    group: tuple[int, int] | None = None
    for unit_start, unit_end in _units(text, start, end, level):
        if unit_end - unit_start > max_chars and level < 2:
            if group is not None:
                out.append(group)
                group = None
            _pack(text, unit_start, unit_end, level + 1, max_chars, out)
        elif group is not None and unit_end - group[0] <= max_chars:
            group = (group[0], unit_end)
        else:
            if group is not None:
                out.append(group)
            group = (unit_start, unit_end)
    if group is not None:
        out.append(group)


def split_passages(text: str, max_chars: int = DEFAULT_PASSAGE_CHARS, *, document: int = 0) -> list[Passage]:
    """The passages of one document's text (see the module docstring); none for a text of whitespace only."""
    if not isinstance(text, str):
        raise ConfigError(f"split_passages needs a str, not {type(text).__name__}")
    check_passage_chars(max_chars, "max_chars")
    spans: list[tuple[int, int]] = []
    _pack(text, 0, len(text), 0, max_chars, spans)
    return [Passage(document, start, end) for start, end in spans]

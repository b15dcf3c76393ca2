"""The Arabic analysis that turns a passage or a question into index terms, built on the preprocessing stage.

Every analysis starts from the package's own preprocessing (preprocess/): AraBERT v0.2 normalization (`normalize`:
diacritics and tatweel removed, Hindi digits made ASCII, punctuation split off) or, for `arabertv2`, the same plus
Farasa segmentation (`Preprocessor("arabertv2")`). On top of it, what matching text with text forgives and a
tokenizer for a language model must not:

- `arabertv02`: the normalized words, Latin letters lower-cased; punctuation is no term.
- `arabertv02-light`: also the spelling variants folded (alef forms → ا, ى → ي, ة → ه: `LETTER_VARIANTS`) and the
  article with its proclitics stripped, as a light stemmer (the prefixes of Larkey et al.'s light stemmers, which
  Lucene's ArabicStemmer strips too): و/ف then ب/ك/ل then ال (وال، بال، فبال، ...), لل and ولل/فلل (ل + ال), and a
  lone و before a word of 3 letters or more. A bare ب/ك/ل/ف is never stripped: كتاب, فيلم and بيت start with them.
- `arabertv02-light10`: `arabertv02-light`, then one suffix stripped where two letters or more remain (Larkey's
  light10 and Lucene's suffixes, longest first: ها ان ات ون ين يه ية ه ة ي, as they read after folding), so that
  المدينة / مدينتها / مدن and their plural and pronoun forms meet more often.
- `arabertv2-light`: Farasa's segments (the `arabertv2` preprocessing); the clitics it marks (`و+`, `ال+`, `+ها`)
  are dropped, the stems folded as above.

Levers added to a name with `+` (in this order):

- `+qwords`: the question words (`QUESTION_WORDS`) are no terms: a question's متى or كيف would match the few
  passages that happen to hold one, with the weight of a rare word.
- `+bigrams`: each pair of neighbouring terms is a term too (`a_b`), so a passage holding a question's phrase ranks
  above one holding its words apart.

A name is stable: an index records the name it was built with, and a change of what a name does is a new name.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Iterable

from ..errors import ConfigError
from ..preprocess.normalize import LETTER_VARIANTS, normalize

BASES = ("arabertv02", "arabertv02-light", "arabertv02-light10", "arabertv2-light")
LEVERS = ("qwords", "bigrams")
# Chosen on dev (docs/experiments/retrieval.md): recall@1 +2.0 [+0.8, +3.4] over arabertv02-light10 alone among
# 49,221 passages of news and dev paragraphs. Farasa's stems (arabertv2-light+qwords) recall more at 5 and 20 passages
# but cost 40-110 ms for each new long context's words where this costs 2-5 ms (rank_passages) and build an index
# about 6x slower: the option for a collection, not the default.
DEFAULT_ANALYSIS = "arabertv02-light10+qwords"

# After LETTER_VARIANTS (أين → اين, متى → متي, أية → ايه) and the light stemmer (the forms with و or ال).
QUESTION_WORDS = frozenset("ما ماذا من متي اين كم كيف لماذا هل اي ايه ايها لم".split())

_ARTICLE = re.compile("^(?:[وف]?[بكل]?ال|[وف]?لل)")
_MIN_STEM = 2
_WORD_CHAR = re.compile(r"\w")
_CACHE = 1 << 20


@functools.lru_cache(maxsize=_CACHE)
def _plain(word: str) -> str | None:
    """A normalized word as a term: lower-cased; None for punctuation."""
    return word.lower() if _WORD_CHAR.search(word) else None


@functools.lru_cache(maxsize=_CACHE)
def _light(word: str) -> str | None:
    """A normalized word, its spelling variants folded and its article and proclitics stripped; None for punctuation."""
    if not _WORD_CHAR.search(word):
        return None
    word = word.lower().translate(LETTER_VARIANTS)
    found = _ARTICLE.match(word)
    if found is not None and len(word) - found.end() >= _MIN_STEM:
        return word[found.end():]
    if word.startswith("و") and len(word) >= 4:
        return word[1:]
    return word


# Longest first, as they read after LETTER_VARIANTS (ية is يه, ة is ه).
_SUFFIXES = ("ها", "ان", "ات", "ون", "ين", "يه", "ه", "ي")


@functools.lru_cache(maxsize=_CACHE)
def _light10(word: str) -> str | None:
    """`_light`, then one suffix stripped where at least _MIN_STEM letters remain."""
    stem = _light(word)
    if stem is None:
        return None
    for suffix in _SUFFIXES:
        if stem.endswith(suffix) and len(stem) - len(suffix) >= _MIN_STEM:
            return stem[:-len(suffix)]
    return stem


def _words(text: str) -> list[str]:
    return normalize(text).split()


def _segmented_stems(texts: list[str]) -> list[list[str]]:
    """Farasa's stems of each text (arabertv2 preprocessing), the clitics it marks with `+` dropped."""
    segmented = _segmenting_preprocessor().preprocess_batch(texts)
    return [[piece for piece in line.split() if not (piece.startswith("+") or piece.endswith("+"))]
            for line in segmented]


@functools.lru_cache(maxsize=1)
def _segmenting_preprocessor():
    from ..preprocess import Preprocessor

    return Preprocessor("arabertv2")


@functools.lru_cache(maxsize=_CACHE)
def _folded(stem: str) -> str | None:
    return stem.lower().translate(LETTER_VARIANTS) if _WORD_CHAR.search(stem) else None


_WORD_TERMS = {"arabertv02": _plain, "arabertv02-light": _light, "arabertv02-light10": _light10}


@dataclasses.dataclass(frozen=True)
class Analysis:
    """Text → terms under one stable `name` (see the module docstring); `terms_batch` analyses many texts at once
    (Farasa segments each distinct word of the batch once)."""

    name: str
    base: str
    question_words: bool  # dropped
    bigrams: bool

    def terms(self, text: str) -> list[str]:
        return self.terms_batch([text])[0]

    def terms_batch(self, texts: Iterable[str]) -> list[list[str]]:
        texts = list(texts)
        if self.base == "arabertv2-light":
            rows = [[t for t in map(_folded, stems) if t is not None] for stems in _segmented_stems(texts)]
        else:
            word_term: Callable[[str], str | None] = _WORD_TERMS[self.base]
            rows = [[t for t in map(word_term, _words(text)) if t is not None] for text in texts]
        if self.question_words:
            rows = [[t for t in row if t not in QUESTION_WORDS] for row in rows]
        if self.bigrams:
            # Adjacent pairs: row[1:] is one shorter, so the last term pairs with nothing.
            rows = [row + [f"{a}_{b}" for a, b in zip(row, row[1:], strict=False)] for row in rows]
        return rows


def analysis_names() -> list[str]:
    """Every name `get_analysis` accepts."""
    names = []
    for base in BASES:
        for qwords in (False, True):
            for bigrams in (False, True):
                names.append(base + ("+qwords" if qwords else "") + ("+bigrams" if bigrams else ""))
    return names


def get_analysis(name: object) -> Analysis:
    """The analysis a name stands for, or a ConfigError listing the names."""
    if not isinstance(name, str):  # before the cache, which would hash it
        raise ConfigError(f"an analysis name must be a string, not {type(name).__name__}")
    return _analysis(name)


@functools.cache
def _analysis(name: str) -> Analysis:
    base, *levers = name.split("+")
    if base not in BASES or levers != [lever for lever in LEVERS if lever in levers]:
        raise ConfigError(f"unknown analysis {name!r}: use one of {', '.join(BASES)}, optionally followed by "
                          f"+qwords and +bigrams in that order (e.g. {DEFAULT_ANALYSIS}, "
                          "arabertv2-light+qwords+bigrams)")
    return Analysis(name, base, "qwords" in levers, "bigrams" in levers)

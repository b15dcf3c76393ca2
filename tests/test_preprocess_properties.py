"""Properties of normalization and segmentation that hold for any input (hypothesis)."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("hypothesis", reason="property tests need hypothesis (the `dev` extra)")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arabert_pipeline import Preprocessor
from arabert_pipeline.preprocess.normalize import char_class, normalize
from arabert_pipeline.preprocess.segment import PREFIXES, SUFFIXES, CachedSegmenter, desegment

ARABIC = "ءآأؤإئابةتثجحخدذرزسشصضطظعغفقكلمنهوىي"
FRAGMENTS = [
    "http://", "https://www.", "www.", ".com", ".org/a?b=1", "@", "user", "info@example.org", "<br />", "<b>", "</p>",
    "&amp;", "&quot;", "&#1575;", "&lt;", "ـ", "ــــ", "ّ", "َ", "ٰ", "٠١٢", "٣", "۴", "12", "3.5", "/", "\u200b",
    "\ufe0f", "😀", "❤", "پ", "ک", "ی", "[رابط]", "[", "]", "رابط", "لل", "ال", "و", "ك", "ة", "!!!", "؟", "،", "«",
    "»", "+", ";", "-", "—", "…", " ", "  ", "\t", "\n", "\u00a0", "C", "abc", "x2", "é",
]
text = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(alphabet=ARABIC, min_size=1, max_size=6), st.characters()),
    max_size=25,
).map("".join)
ASCII_DIGIT_BY_ARABIC = re.compile("[0-9][\u0621-\u063a\u0641-\u064a]|[\u0621-\u063a\u0641-\u064a][0-9]")
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.slow  # a CPU second: the quick loop keeps this file's cheaper properties
@FAST
@given(text)
def test_normalized_text_is_clean(x):
    out = normalize(x)
    assert out == " ".join(out.split()) and "  " not in out
    # the whitelist: only characters the reference keeps, and the only whitespace is a single space
    assert all(ch == " " or char_class(ch) != "space" for ch in out), out
    assert not set(out) & set("ًٌٍَُِّْـ٠١٢٣٤٥٦٧٨٩/")
    assert not ASCII_DIGIT_BY_ARABIC.search(out)
    assert not re.search(r"(\D)\1\1", out)


@FAST
@given(text)
def test_normalize_is_idempotent(x):
    once = normalize(x)
    assert normalize(once) == once


@FAST
@given(st.lists(text, max_size=5))
@pytest.mark.slow
def test_batch_equals_one_by_one(lines):
    p = Preprocessor("arabertv02")
    assert p.preprocess_batch(lines) == [p.preprocess(line) for line in lines]


class TableSegmenter(CachedSegmenter):
    name = "table"

    def __init__(self, table):
        super().__init__()
        self.table = table

    def _segment_new(self, words):
        return [self.table[w] for w in words]


stem = st.text(alphabet=ARABIC, min_size=2, max_size=6).filter(lambda s: s not in SUFFIXES and s not in PREFIXES)
# A Farasa-like segmentation: prefixes, a stem, suffixes, whose pieces concatenate to the word, written with
# Farasa's `لل` → `ل+ال` rewrite at the start of a word.
segmentation = st.tuples(
    st.lists(st.sampled_from(sorted(PREFIXES - {"لل"})), max_size=2), stem,
    st.lists(st.sampled_from(sorted(SUFFIXES)), max_size=2),
)


@FAST
@given(st.lists(segmentation, min_size=1, max_size=8))
@pytest.mark.slow
def test_desegment_inverts_marking(segmentations):
    words, table = [], {}
    for prefixes, stem_, suffixes in segmentations:
        word = "".join(prefixes) + stem_ + "".join(suffixes)
        farasa = "+".join([*prefixes, stem_, *suffixes])
        if (normalize(word) != word or "ال+ال" in farasa or "للل" in word or word.startswith("لال")
                or ("ل+ال" in farasa and not word.startswith("لل"))):
            # Not normalized text, or where the reference's desegmentation is ambiguous by design: it reads every
            # ل+ال as Farasa's rewrite of a leading لل, so a prefix ل before a stem or prefix ال joins into لل.
            continue
        if word.startswith("لل"):  # Farasa reads a leading لل as ل+ال
            farasa = farasa.replace("ل+ل+", "ل+ال+", 1) if farasa.startswith("ل+ل+") else farasa
        table.setdefault(word, farasa)
        words.append(word)
    line = " ".join(words)
    p = Preprocessor("arabertv2", segmenter=TableSegmenter(table))
    segmented = p.preprocess(line)
    assert desegment(segmented) == line
    pieces = segmented.split()
    assert all(piece == "+" or piece.count("+") <= 1 for piece in pieces)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(alphabet=ARABIC, min_size=1, max_size=8), min_size=1, max_size=6))
def test_port_marking_is_well_formed(words):
    p = _port()
    out = p.preprocess(" ".join(words))
    for piece in out.split():
        assert piece.count("+") <= 1
        if piece.endswith("+"):
            assert piece[:-1] in PREFIXES
        elif piece.startswith("+"):
            assert piece[1:] in SUFFIXES
    # segmentation only ever adds markers (and Farasa's لل → لال reading) to the normalized text, which already
    # shortens letters repeated more than twice (AraBERT's elongation rule: 'ءءء' → 'ءء')
    normalized = _unsegmented().preprocess(" ".join(words))
    assert desegment(out).replace(" ", "").replace("لال", "لل") == normalized.replace(" ", "").replace("لال", "لل")


_PORT, _UNSEGMENTED = [], []


def _unsegmented() -> Preprocessor:
    if not _UNSEGMENTED:
        _UNSEGMENTED.append(Preprocessor("arabertv02"))
    return _UNSEGMENTED[0]


def _port() -> Preprocessor:
    if not _PORT:
        _PORT.append(Preprocessor("arabertv2"))
    return _PORT[0]


# The reference's patterns as it writes them (arabert's preprocess.py): the spec the linear-time ones must match.
REFERENCE_PLACEHOLDER_PATTERNS = [
    r"(http(s)?:\/\/.)?(www\.)?[-a-zA-Z0-9@:%._\+~#=]{2,256}\.[a-z]{2,6}\b([-a-zA-Z0-9@:%_\+.~#?&//=]*)",
    r"http[s]?://[a-zA-Z0-9_\-./~\?=%&]+", r"www[a-zA-Z0-9_\-?=%&/.~]+", r"[a-zA-Z]+\.com", r"(?=http)[^\s]+",
    r"(?=www)[^\s]+", r"://", r"[\w-]+@([\w-]+\.)+[\w-]+", r"\S+@\S+", r"@[\w\d]+",
]
# Runs of each pattern's leading class cut by what it needs next, so that matches start inside runs, right after
# other matches and never.
URLISH = st.lists(st.sampled_from(["a", "b", "co", "com", "m", ".", ".com", ".c", "@", "-", "_", "ب", "1", " ", "\n",
                                   "x.comy", "www", "http", "://", "\u00a0"]), max_size=30).map("".join)


@settings(max_examples=1500, deadline=None)
@given(URLISH)
@pytest.mark.slow
def test_placeholder_passes_match_the_reference_patterns(x):
    from arabert_pipeline.preprocess.normalize import _PLACEHOLDER_PASSES

    assert len(_PLACEHOLDER_PASSES) == len(REFERENCE_PLACEHOLDER_PATTERNS)
    for (pattern, placeholder), reference in zip(_PLACEHOLDER_PASSES, REFERENCE_PLACEHOLDER_PATTERNS, strict=True):
        assert pattern.sub(placeholder, x) == re.sub(reference, placeholder, x), (reference, x)

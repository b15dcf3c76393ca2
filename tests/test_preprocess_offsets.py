"""`preprocess_with_offsets`: same text as `preprocess`, spans monotone, copied characters traceable."""
from __future__ import annotations

import html
import itertools
import json
from pathlib import Path

import pytest

from arabert_pipeline import Preprocessor
from arabert_pipeline.preprocess.normalize import HINDI_DIGITS, PLACEHOLDERS, TASHKEEL, TATWEEL

EDGE_CASES = Path(__file__).parent / "golden" / "preprocess_edge_cases.jsonl"
_TO_ASCII = str.maketrans(HINDI_DIGITS + "/", "0123456789-", TASHKEEL + TATWEEL)


def check_offsets(p: Preprocessor, text: str) -> None:
    out, offsets = p.preprocess_with_offsets(text)
    assert out == p.preprocess(text)
    assert len(offsets) == len(out)
    for (s1, e1), (s2, e2) in itertools.pairwise(offsets):
        assert s1 <= s2 and e1 <= e2, (text, out, offsets)
    assert all(0 <= s <= e <= len(text) for s, e in offsets)
    if p.name == "none":
        assert offsets == [(i, i + 1) for i in range(len(text))]
        return
    for i, (ch, (s, e)) in enumerate(zip(out, offsets, strict=True)):
        if ch in " +" or s == e:
            continue  # inserted: a space, a segment marker, or Farasa's ا in ل+ال
        source = text[s:e]
        if ch not in html.unescape(source).translate(_TO_ASCII):
            # from a URL, e-mail or mention: part of its placeholder, segmented or not. (Whether a source matches
            # AraBERT's URL / e-mail patterns depends on its neighbours — '٠١٢info@example.org' is one e-mail after
            # 'http://' and digits + a URL alone — so the check is on the output word, not on the source alone.)
            word = out[out.rfind(" ", 0, i) + 1 : (out.find(" ", i) + 1 or len(out) + 1) - 1].replace("+", "").strip()
            assert word in PLACEHOLDERS, (text, ch, source, word)


@pytest.fixture(scope="module")
def edge_inputs() -> list[str]:
    with open(EDGE_CASES, encoding="utf-8") as f:
        return [json.loads(line)["input"] for line in f]


@pytest.mark.parametrize("name", ["none", "arabertv02", "arabertv2"])
def test_edge_cases(name, edge_inputs):
    p = Preprocessor(name)
    for text in edge_inputs:
        check_offsets(p, text)


def test_examples():
    p = Preprocessor("arabertv2")
    text = "زوروا http://x.com وللأسف الْكِتَابُ"
    out, offsets = p.preprocess_with_offsets(text)
    assert out == "زور +وا [رابط] و+ ل+ ال+ أسف ال+ كتاب"
    spans = dict(zip(range(len(out)), offsets, strict=True))
    url = out.index("[")
    assert text[slice(*spans[url])] == "http://x.com"
    # the last word's span covers its diacritics in the original
    assert text[offsets[-4][0]:offsets[-1][1]] == "كِتَابُ"
    # `none` maps each character to itself
    assert Preprocessor("none").preprocess_with_offsets("ab") == ("ab", [(0, 1), (1, 2)])


@pytest.mark.slow
def test_hypothesis_properties():
    hypothesis = pytest.importorskip("hypothesis", reason="property tests need hypothesis (the `dev` extra)")
    from hypothesis import strategies as st

    from test_preprocess_properties import FAST, text

    v02 = Preprocessor("arabertv02")

    @FAST
    @hypothesis.given(text)
    def normalized(x):
        check_offsets(v02, x)

    normalized()

    v2 = Preprocessor("arabertv2")

    @hypothesis.settings(max_examples=60, deadline=None)
    @hypothesis.given(st.lists(st.sampled_from(["وللأسف", "للكتاب", "[رابط]", "[كتاب]", "+", ";", "كتابك",
                                                "وسيكتبونها", "C2و", "١٢كتاب", "http://a.com", "ـــ", "َ"]),
                               max_size=8).map(" ".join))
    def segmented(x):
        check_offsets(v2, x)

    segmented()

"""Preprocessor API, AraBERT marking rules and the segmenter cache (no reference tool needed)."""
from __future__ import annotations

import pytest

from arabert_pipeline import Preprocessor
from arabert_pipeline.errors import BackendError, ConfigError
from arabert_pipeline.preprocess import PREPROCESSING_NAMES, segmenter_backend
from arabert_pipeline.preprocess.segment import CachedSegmenter, desegment, mark_tokens


class FakeSegmenter(CachedSegmenter):
    """Segments from a fixed table, so marking tests do not depend on Farasa's choices."""

    name = "fake"

    def __init__(self, table: dict[str, str], cache_size: int = 100):
        super().__init__(cache_size)
        self.table = table
        self.calls: list[list[str]] = []

    def _segment_new(self, words):
        self.calls.append(list(words))
        return [self.table.get(w, w) for w in words]


def test_names():
    assert PREPROCESSING_NAMES == ("arabertv02", "arabertv2", "none")
    assert Preprocessor("arabertv02").segmenter is None
    assert segmenter_backend("arabertv02") is None
    assert segmenter_backend("arabertv2") == "farasa-py-0.0.1"
    with pytest.raises(ConfigError, match="arabertv3"):
        Preprocessor("arabertv3")


def test_arabert_model_names_as_arabert_preprocessor_takes_them():
    assert Preprocessor("aubmindlab/bert-base-arabertv02").name == "arabertv02"
    assert Preprocessor("bert-large-arabertv02").preprocess("قال:مرحبا") == Preprocessor("arabertv02").preprocess(
        "قال:مرحبا")
    assert Preprocessor("araelectra-base-discriminator").name == "arabertv02"
    assert segmenter_backend("aubmindlab/bert-base-arabertv2") == "farasa-py-0.0.1"
    for refused in ("bert-base-arabertv02-twitter", "aubmindlab/bert-base-arabert"):
        with pytest.raises(ConfigError, match="not one this package reproduces"):
            Preprocessor(refused)


def test_non_text_is_an_input_error():
    from arabert_pipeline.errors import InputError

    with pytest.raises(InputError, match=r"line 2: expected text \(str\), got NoneType"):
        Preprocessor("arabertv02").preprocess_batch(["نص", None])
    for name in ("none", "arabertv02", "arabertv2"):  # "none" returned None unchanged (issue 13)
        for wrong in (None, b"\xd9\x86\xd8\xb5", 3):
            with pytest.raises(InputError, match=f"expected text \\(str\\), got {type(wrong).__name__}"):
                Preprocessor(name).preprocess(wrong)
            with pytest.raises(InputError, match="expected text"):
                Preprocessor(name).preprocess_with_offsets(wrong)


def test_none_is_identity():
    p = Preprocessor("none")
    text = "  Ｘ ـــ http://a.com ١٢ "
    assert p.preprocess(text) == text
    assert p.preprocess_batch([text, ""]) == [text, ""]
    assert p.unpreprocess(text) == text


def test_v02_examples():
    p = Preprocessor("arabertv02")
    assert p.preprocess("العـــــربيّة!!!! ١٢/٥ 😀 پ") == "العربية ! ! 12 - 5"
    assert p.preprocess("زوروا http://example.com أو info@example.org و @user") == "زوروا [رابط] أو [رابط] و [مستخدم]"
    assert p.preprocess("") == ""
    assert p.preprocess(" \t\n ") == ""
    assert p.preprocess_batch(["كتاب3", "3كتاب"]) == ["كتاب 3", "3 كتاب"]


@pytest.mark.parametrize("farasa,marked", [
    ("و+س+يكتب+ون+ها", "و+ س+ يكتب +ون +ها"),
    ("ك+ال+كتاب", "ك+ ال+ كتاب"),  # kaf first: prefix
    ("و+ك+ال+بيت", "و+ ك+ ال+ بيت"),  # kaf after a prefix: prefix
    ("كتاب+ك+م", "كتاب +ك م"),  # kaf after a stem: suffix; a middle piece in no list stays bare
    ("كتاب+ك", "كتاب +ك"),  # the last piece is only checked against the suffixes
    ("ب+ال", "ب+ ال"),  # ... so a final ال stays bare
    ("ل+ال+كتاب", "ل+ ال+ كتاب"),
    ("ال+كتاب+ين", "ال+ كتاب +ين"),
])
def test_marking(farasa, marked):
    assert " ".join(mark_tokens([farasa])) == marked


def test_placeholders_and_brackets():
    # Farasa splits brackets off; bracket tokens vanish and placeholder words after one are rejoined.
    assert mark_tokens(["[", "رابط", "]", "و+رابط"]) == ["[رابط]", "و+", "رابط"]
    assert mark_tokens(["رابط", "كتاب"]) == ["رابط", "كتاب"]
    # the reference looks at tokens[index - 1], which for the first token is the line's last token
    assert mark_tokens(["رابط", "كتاب", "]"]) == ["[رابط]", "كتاب"]


def test_v2_with_fake_segmenter_batches_distinct_words():
    seg = FakeSegmenter({"وسيكتبونها": "و+س+يكتب+ون+ها", "[رابط]": "[ رابط ]"})
    p = Preprocessor("arabertv2", segmenter=seg)
    out = p.preprocess_batch(["وسيكتبونها http://a.com", "وسيكتبونها + 1", ""])
    assert out == ["و+ س+ يكتب +ون +ها [رابط]", "و+ س+ يكتب +ون +ها 1", ""]
    # placeholders never reach the backend; every word occurrence is a lookup, the repeat and the placeholder hits
    assert seg.calls == [["وسيكتبونها", "1"]]
    assert (seg.lookups, seg.hits) == (4, 2)
    p.preprocess("وسيكتبونها")
    assert seg.calls == [["وسيكتبونها", "1"]] and seg.hits == 3


def test_placeholders_are_never_segmented():
    seg = FakeSegmenter({"[بريد]": "[ ب+ريد ]", "بريد": "ب+ريد"})
    p = Preprocessor("arabertv2", segmenter=seg)
    assert p.preprocess("a@b.cc x@y بريد") == "[رابط] [بريد] ب+ ريد"
    seg.preload({"[بريد]": "[ ب+ريد ]"})
    assert p.preprocess("x@y") == "[بريد]"


def test_cache_export_preload_and_bound():
    seg = FakeSegmenter({"وكتابه": "و+كتاب+ه"}, cache_size=10)
    assert seg.segment_words(["وكتابه", "وكتابه"]) == [["و+كتاب+ه"], ["و+كتاب+ه"]]
    assert seg.drain_new() == {"وكتابه": "و+كتاب+ه"}
    assert seg.drain_new() == {}
    other = FakeSegmenter({})
    other.preload(seg.cache_items())
    assert other.segment_words(["وكتابه"]) == [["و+كتاب+ه"]] and other.calls == []
    seg.segment_words([f"w{i}" for i in range(25)])
    assert len(seg.cache_items()) <= 10 + 3  # + the three fixed placeholders
    assert list(seg.drain_new()) == [f"w{i}" for i in range(15, 25)]  # undrained words are bounded too
    assert seg.segment_words(["w0"]) == [["w0"]]  # evicted words are segmented again


def test_empty_segmentation_raises():
    seg = FakeSegmenter({"كتاب": " "})
    with pytest.raises(BackendError, match="empty segmentation"):
        seg.segment_words(["كتاب"])
    with pytest.raises(BackendError, match="empty"):
        seg.preload({"كتاب": ""})


@pytest.mark.parametrize("text,plain", [
    ("و+ س+ يكتب +ون +ها", "وسيكتبونها"),
    ("ل+ ال+ كتاب", "للكتاب"),
    ("ال+ ال+ كتاب", "اللكتاب"),  # the reference's rule, quirk included
    ("[رابط] ب+ ال+ بيت", "[رابط] بالبيت"),
])
def test_desegment(text, plain):
    assert desegment(text) == plain
    assert Preprocessor("arabertv2", segmenter=FakeSegmenter({})).unpreprocess(text) == plain


def test_unpreprocess_v02():
    p = Preprocessor("arabertv02")
    assert p.unpreprocess('قال " مرحبا بكم " ثم ( نعم ) 3 . 5 %') == 'قال "مرحبا بكم" ثم (نعم) 3.5%'
    assert p.unpreprocess("ا ` ب ج ` د") == "ا \\`ب ج\\` د"  # the reference's stray backslashes


def test_port_segments_offline():
    p = Preprocessor("arabertv2")
    assert p.preprocess("وسيكتبونها للكتاب") == "و+ س+ يكتب +ون +ها ل+ ال+ كتاب"
    assert p.unpreprocess(p.preprocess("وسيكتبونها للكتاب")) == "وسيكتبونها للكتاب"

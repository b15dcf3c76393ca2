"""Exact answer alignment through the model's preprocessing, and back to the original context."""
from __future__ import annotations

import pytest

from arabert_pipeline.qa.align import QAPreprocessing, align_examples
from arabert_pipeline.qa.data import read_squad

# ARCD answers written only (or mostly) in scripts AraBERT's character whitelist deletes: Chinese, Greek, Cyrillic...
FOREIGN_SCRIPT_ANSWERS = {"555832005630", "930272774853", "841341891743", "173618209805", "570613924812",
                          "802819858675"}


class SegmentingStub:
    """Mimics Preprocessor("arabertv2") on two phrases: inserted `+`/spaces get empty spans, a URL a placeholder."""

    def preprocess(self, text):  # questions
        return text

    def preprocess_with_offsets(self, text):
        assert text == "والكتاب جديد http://a.b/c"
        out = "و+ ال+ كتاب جديد [رابط]"
        spans = [(0, 1), (1, 1), (1, 1), (1, 2), (2, 3), (3, 3), (3, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 8)]
        spans += [(8, 9), (9, 10), (10, 11), (11, 12), (12, 13)] + [(13, 25)] * 6
        return out, spans


@pytest.mark.parametrize(
    "answer, preprocessed",
    [("الكتاب", "ال+ كتاب"), ("كتاب", "كتاب"), ("والكتاب جديد", "و+ ال+ كتاب جديد"), ("http://a.b/c", "[رابط]"),
     ("a.b", "[رابط]")],
)
def test_spans_map_through_inserted_characters_and_placeholders(answer, preprocessed):
    context = "والكتاب جديد http://a.b/c"
    start = context.index(answer)
    example = {"id": "q", "question": "ما؟", "context": context, "answers": {"text": [answer], "answer_start": [start]}}
    [aligned], report = align_examples([example], QAPreprocessing("arabertv2", preprocessor=SegmentingStub()))
    (first, last), = aligned["spans"]
    assert aligned["aligned"].text[first:last] == preprocessed
    back = aligned["aligned"].to_original(first, last)
    assert context[back[0] : back[1]] == ("http://a.b/c" if answer == "a.b" else answer)
    assert report.aligned == 1 and report.exact == (answer != "a.b")


def test_answers_align_exactly_without_preprocessing(full_data):
    _, report = align_examples(read_squad("arcd", misaligned="keep").examples, QAPreprocessing("none"))
    print(report.summary())
    assert (report.answers, report.aligned, report.exact, report.not_in_context) == (1389, 1389, 1389, 6)


def test_answers_align_through_arabertv02(full_data):
    examples = read_squad("arcd", misaligned="keep").examples
    aligned, report = align_examples(examples, QAPreprocessing("arabertv02"))
    print(report.summary())
    assert set(report.unaligned_ids) == FOREIGN_SCRIPT_ANSWERS
    assert report.aligned == 1389 - 6 and report.exact >= 1380 and report.rate > 0.995
    for example, entry in zip(examples, aligned, strict=True):
        for first, last in entry["spans"]:
            start, end = entry["aligned"].to_original(first, last)
            assert example["context"][start:end] in example["answers"]["text"][0]


def test_answers_align_through_arabertv2_segmentation(shared_data):
    examples = read_squad("arcd-test", misaligned="keep").examples[:240]
    aligned, report = align_examples(examples, QAPreprocessing("arabertv2"))
    print(report.summary())
    assert set(report.unaligned_ids) <= FOREIGN_SCRIPT_ANSWERS and report.rate > 0.99
    assert any(" +" in entry["aligned"].text for entry in aligned)  # segmentation really happened
    for example, entry in zip(examples, aligned, strict=True):
        for first, last in entry["spans"]:
            start, end = entry["aligned"].to_original(first, last)
            assert example["context"][start:end] in example["answers"]["text"][0]


@pytest.mark.slow
def test_the_context_cache_keeps_repeated_contexts_and_a_bounded_number_of_characters():
    """Questions on one context share its alignment; a server sent a new context per request kept every one of them
    (its memory grew without bound)."""
    from arabert_pipeline.qa.align import CONTEXT_CACHE_CHARS

    preprocessing = QAPreprocessing("arabertv02")
    popular = "ذهب الولد إلى المدرسة."
    first = preprocessing.context(popular)
    assert preprocessing.context(popular) is first
    size = 10_000
    for i in range(3 * CONTEXT_CACHE_CHARS // size):
        context = f"{'ب ' * (size // 2 - 4)}رقم {i:04d}"
        assert len(context) == size
        aligned = preprocessing.context(context)
        assert aligned.original == context and aligned.text.endswith(f"رقم {i:04d}")
        assert preprocessing.context(context) is aligned  # the one just asked stays
        assert preprocessing.context(popular) is first  # and one asked all along: the least recent go first
    kept = sum(len(text) for text in preprocessing._contexts)
    assert kept == preprocessing.cached_chars <= CONTEXT_CACHE_CHARS
    assert kept >= CONTEXT_CACHE_CHARS - size  # full up to one context: still a cache

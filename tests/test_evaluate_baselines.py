"""The lexical reference baselines on hand-made contexts (no shared data needed)."""
from __future__ import annotations

from arabert_pipeline.evaluate import baselines
from arabert_pipeline.evaluate.cli import BASELINE_NAMES
from arabert_pipeline.qa.overlap import KeyIDF

CONTEXT = ("تقع مدينة الرياض في وسط شبه الجزيرة العربية. وهي عاصمة المملكة العربية السعودية منذ عام 1932. "
           "يبلغ عدد سكان المدينة أكثر من سبعة ملايين نسمة.")
EXAMPLE = {"id": "q1", "question": "منذ متى الرياض عاصمة السعودية؟", "context": CONTEXT,
           "answers": {"text": ["1932"], "answer_start": [CONTEXT.index("1932")]}}
# Another context, so that the IDF has more than this one to count over.
OTHER = {"id": "q2", "question": "كم عدد سكان المدينة؟", "context": "عدد سكان المدينة كبير. المدينة قديمة.",
         "answers": {"text": ["كبير"], "answer_start": [17]}}


def test_cli_lists_every_baseline():
    assert BASELINE_NAMES == baselines.BASELINES


def test_sentence_baselines_return_sentences_with_their_offsets():
    for name in baselines.BASELINES:
        predictions = baselines.baseline_predictions(name, [EXAMPLE, OTHER], seed=0)
        for example in (EXAMPLE, OTHER):
            text, start = predictions[example["id"]]
            assert text and example["context"][start : start + len(text)] == text, name


def test_tfidf_sentence_picks_the_sentence_sharing_the_rarest_question_words():
    text, _ = baselines.baseline_predictions("tfidf-sentence", [EXAMPLE, OTHER])["q1"]
    assert text == "وهي عاصمة المملكة العربية السعودية منذ عام 1932."


def test_overlap_span_keeps_the_longest_run_without_question_words():
    text, _ = baselines.baseline_predictions("overlap-span", [EXAMPLE, OTHER])["q1"]
    # "عاصمة" and "السعودية" are question words ("منذ" is a function word: never one), so three runs remain.
    assert text == "منذ عام 1932."


def test_sliding_window_answers_near_the_question_words_with_no_question_word_in_it():
    idf = KeyIDF.from_texts([CONTEXT, OTHER["context"]])
    start, end = baselines.sliding_window_span(EXAMPLE["question"], CONTEXT, idf, max_words=2)
    answer = CONTEXT[start:end]
    assert answer and "عاصمة" not in answer and "الرياض" not in answer
    sentence = "وهي عاصمة المملكة العربية السعودية منذ عام 1932."
    assert answer in sentence

"""Stored QA settings are checked; the sentence prior, the sentence limit and expected-F1 decoding do what they say."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from arabert_pipeline.errors import ConfigError
from arabert_pipeline.qa.overlap import KeyIDF
from arabert_pipeline.qa.transformer.decode import decode_spans, rank_by_expected_f1, sentence_numbers, trimmed
from arabert_pipeline.qa.transformer.model import QAModel
from arabert_pipeline.qa.transformer.settings import QASettings

SHIPPED = Path(__file__).resolve().parents[1] / "arabert_pipeline" / "models" / "arabert-mini"


@pytest.mark.parametrize("field, value", [("n_best", "abc"), ("doc_stride", -5), ("max_seq_length", 1.5),
                                          ("question_overlap", "yes"), ("sentence_prior", -1.0),
                                          ("within_sentence", 1), ("decoding", "mbr")])
def test_bad_stored_settings_name_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        QASettings.from_metadata({field: value}, "model/arabert_pipeline.json")


def test_stored_settings_round_trip():
    settings = QASettings(max_seq_length=256, question_overlap=True, sentence_prior=2.0, within_sentence=True,
                          decoding="expected-f1")
    assert QASettings.from_metadata(dataclasses.asdict(settings)) == settings
    assert QASettings.from_metadata({"sentence_prior": 3}).sentence_prior == 3.0


def test_start_bonus_adds_to_the_spans_starting_there():
    offsets = np.full((1, 6, 2), -1)
    offsets[0, 1:5] = [(0, 2), (3, 5), (6, 8), (9, 11)]
    start = np.array([[0, 5.0, 0, 4.0, 0, 0]])
    end = np.array([[0, 5.0, 0, 4.0, 0, 0]])
    plain = decode_spans(start, end, offsets, np.array([0]), n_examples=1, max_answer_tokens=1)
    assert plain[0][0][:2] == (0, 2)
    bonus = np.zeros(12)
    bonus[6:] = 3.0
    moved = decode_spans(start, end, offsets, np.array([0]), n_examples=1, max_answer_tokens=1, start_bonus=[bonus])
    assert moved[0][0] == (6, 8, 11.0)


def test_sentence_numbers_put_the_gap_with_the_next_sentence():
    text = "ab cd. ef gh."
    numbers = sentence_numbers(text, [(0, 6), (7, 13)])
    assert list(numbers[:6]) == [0] * 6 and list(numbers[6:13]) == [1] * 7 and len(numbers) == len(text) + 1


def test_within_sentence_drops_spans_across_a_boundary_unless_none_is_left():
    text = "aa bb. cc dd."
    offsets = np.full((1, 6, 2), -1)
    offsets[0, 1:5] = [(0, 2), (3, 6), (7, 9), (10, 13)]
    start = np.array([[0, 1.0, 5.0, 0, 0, 0]])  # the best span, "bb. cc", crosses the boundary
    end = np.array([[0, 0, 1.0, 5.0, 0, 0]])
    index = [sentence_numbers(text, [(0, 6), (7, 13)])]
    plain = decode_spans(start, end, offsets, np.array([0]), n_examples=1, max_answer_tokens=2)
    assert plain[0][0][:2] == (3, 9)
    inside = decode_spans(start, end, offsets, np.array([0]), n_examples=1, max_answer_tokens=2,
                          sentence_index=index)
    assert all(index[0][a] == index[0][b - 1] for a, b, _ in inside[0]) and inside[0][0][:2] == (3, 6)
    one_span = decode_spans(start, end, offsets, np.array([0]), n_examples=1, max_answer_tokens=2, n_best=1,
                            sentence_index=index)
    assert [span[:2] for span in one_span[0]] == [(3, 9)]  # the only candidate crosses: kept rather than no answer


def test_expected_f1_prefers_the_span_that_overlapping_guesses_share():
    text = "w0 w1 w2 w3 w4 w5"
    word = [(m, m + 2) for m in range(0, 18, 3)]
    # Three overlapping guesses (w1-w2, w2-w3, w1-w3) outweigh a single better-scored span elsewhere (w5).
    spans = [(word[5][0], word[5][1]), (word[1][0], word[2][1]), (word[2][0], word[3][1]), (word[1][0], word[3][1])]
    scores = [1.0, 0.7, 0.7, 0.5]
    order, expected = rank_by_expected_f1(text, spans, scores)
    assert order[0] == 3 and np.argmax(scores) == 0
    probability = np.exp(scores) / np.exp(scores).sum()
    # By hand: F1(w1-w3, w1-w2) = 2·2/(3+2) = 0.8, likewise against w2-w3; 1 against itself; 0 against w5.
    assert expected[3] == pytest.approx(0.8 * probability[1] + 0.8 * probability[2] + probability[3])


@pytest.mark.slow
def test_sentence_prior_moves_the_answer_to_the_sentence_holding_the_question_words():
    model = QAModel.load(SHIPPED)
    # The only date is in the first sentence, which shares no word with the question: the reader alone answers there,
    # so the prior has to do the moving for the answer to land in the second.
    context = "في عام 1900 كان عدد السكان قليلا. تأسست مدينة الرياض قديما على يد دهام بن دواس."
    example = {"question": "متى تأسست الرياض؟", "context": context}
    idf = KeyIDF.from_texts([context, "المدينة كبيرة. المدينة قديمة."])

    def answer(prior):
        qa = QAModel(model.model, model.tokenizer, "arabertv02",
                     dataclasses.replace(model.settings, sentence_prior=prior), sentence_idf=idf, reader=model.reader)
        return qa.predict([example])[0][0]

    second = context.index("تأسست")
    assert answer(0.0).end <= second
    assert answer(100.0).start >= second
    with pytest.raises(ConfigError, match="IDF"):
        QAModel(model.model, model.tokenizer, "arabertv02", dataclasses.replace(model.settings, sentence_prior=1.0),
                reader=model.reader)


def test_null_margin_is_the_lowest_cls_score_minus_the_best_span_of_any_window():
    from arabert_pipeline.qa.transformer.decode import null_margins

    offsets = np.full((3, 5, 2), -1)
    offsets[:, 2:5] = [(0, 2), (3, 5), (6, 8)]
    start = np.array([[4.0, 0, 1.0, 0, 0], [2.0, 0, 0, 3.0, 0], [9.0, 0, 0, 0, 0]])
    end = np.array([[1.0, 0, 0, 2.0, 0], [1.0, 0, 0, 0, 1.5], [0.0, 0, 0, 0, 0]])
    example_index = np.array([0, 0, 1])
    # Example 0: CLS scores 5 and 3 (lowest 3); best span 3 + 1.5 = 4.5 in window 1 (window 0: 1 + 2 = 3).
    # Example 1: CLS 9, best span 0; a span of 2 tokens at most is allowed.
    margins = null_margins(start, end, offsets, example_index, n_examples=2, max_answer_tokens=2)
    assert margins.tolist() == [3.0 - 4.5, 9.0 - 0.0]
    # The span 3.0 → 1.5 is two tokens long: with one token at most, window 1's best is 3 + 0.
    assert null_margins(start, end, offsets, example_index, n_examples=2, max_answer_tokens=1)[0] == 3.0 - 3.0


def test_unanswerable_examples_pair_a_question_with_another_paragraph_of_its_article_without_the_answer():
    from arabert_pipeline.qa.data import unanswerable_examples

    def example(qid, title, context, answer):
        return {"id": qid, "title": title, "context": context, "question": "q",
                "answers": {"text": [answer], "answer_start": [context.index(answer)]}}

    examples = [example("a", "T", "الرياض عاصمة السعودية", "الرياض"), example("b", "T", "جدة على البحر", "جدة"),
                example("c", "T", "الرياض وجدة مدينتان", "مدينتان"), example("d", "U", "مكة", "مكة")]
    negatives = {n["id"]: n for n in unanswerable_examples(examples)}
    assert set(negatives) == {"a-no-answer", "b-no-answer", "c-no-answer"}  # "d" has no other paragraph
    assert negatives["a-no-answer"]["context"] == "جدة على البحر"  # the third paragraph holds "الرياض" too
    assert negatives["b-no-answer"]["context"] == "الرياض عاصمة السعودية"
    assert all(n["answers"] == {"text": [], "answer_start": []} for n in negatives.values())
    assert unanswerable_examples(examples) == list(negatives.values())  # the same draw every time


@pytest.mark.slow
def test_allow_no_answer_abstains_where_the_margin_is_above_the_threshold():
    from arabert_pipeline import Pipeline

    model = QAModel.load(SHIPPED)
    example = {"question": "متى تأسست الرياض؟", "context": "تأسست مدينة الرياض عام 1746 على يد دهام بن دواس."}
    margin = model.null_margins(model.logits([example], 8))[0]
    for threshold, answered in ((margin - 1.0, False), (margin + 1.0, True)):
        qa = QAModel(model.model, model.tokenizer, "arabertv02",
                     dataclasses.replace(model.settings, null_score_diff_threshold=float(threshold)),
                     sentence_idf=model.sentence_idf, reader=model.reader)
        assert bool(qa.predict([example], allow_no_answer=True)[0]) is answered
        assert qa.predict([example])[0]  # without allow_no_answer there is always an answer
        pipeline = Pipeline(qa)
        assert (pipeline.answer(example["question"], example["context"], allow_no_answer=True) is not None) is answered


@pytest.mark.slow  # over a CPU second: the quick loop keeps this file's cheaper tests
def test_decode_answers_with_one_of_the_candidates_it_is_given():
    """`candidates` is what decode chooses from: the max-score answer is the best candidate, the expected-F1 answer
    one of the candidates (as trimmed: end punctuation and a leading word such as عام aside), and every_candidate
    widens max-score's few to expected-F1's many."""
    model = QAModel.load(SHIPPED)
    context = "يبلغ عدد سكان المدينة مليون نسمة. تأسست مدينة الرياض عام 1746 على يد دهام بن دواس، في نجد."
    logits = model.logits([{"question": "متى تأسست الرياض؟", "context": context}], 8)
    max_score = dataclasses.replace(model.settings, decoding="max-score")
    few = model.candidates(logits, settings=max_score)[0]
    many = model.candidates(logits, settings=max_score, every_candidate=True)[0]
    assert len(few) == max_score.n_best < len(many)
    assert [a.score for a in many] == sorted((a.score for a in many), reverse=True)
    assert [(a.start, a.end) for a in few] == [(a.start, a.end) for a in many[: len(few)]]
    leading_words = frozenset(model.settings.leading_words)

    def as_answered(candidate):
        return trimmed(context, [candidate], by_score=True, leading_words=leading_words)[0].text

    best = model.decode(logits, settings=max_score)[0][0]
    assert as_answered(few[0]) == best.text
    chosen = model.decode(logits)[0][0]
    assert any(as_answered(a) == chosen.text for a in many)

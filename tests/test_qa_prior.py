"""Stored QA settings are checked, and the sentence prior moves answers to the sentence sharing the question's words."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from arabert_pipeline.errors import ConfigError
from arabert_pipeline.qa.infer import QAModel, QASettings
from arabert_pipeline.qa.overlap import KeyIDF
from arabert_pipeline.qa.postprocess import decode_spans

SHIPPED = Path(__file__).resolve().parents[1] / "arabert_pipeline" / "models" / "arabert-mini"


@pytest.mark.parametrize("field, value", [("n_best", "abc"), ("doc_stride", -5), ("max_seq_length", 1.5),
                                          ("question_overlap", "yes"), ("sentence_prior", -1.0)])
def test_bad_stored_settings_name_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        QASettings.from_metadata({field: value}, "model/arabert_pipeline.json")


def test_stored_settings_round_trip():
    settings = QASettings(max_seq_length=256, question_overlap=True, sentence_prior=2.0)
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


def test_sentence_prior_moves_the_answer_to_the_sentence_holding_the_question_words():
    model = QAModel.load(SHIPPED)
    context = "يبلغ عدد سكان المدينة مليون نسمة. تأسست مدينة الرياض عام 1746 على يد دهام بن دواس."
    example = {"question": "متى تأسست الرياض؟", "context": context}
    idf = KeyIDF.from_texts([context, "المدينة كبيرة. المدينة قديمة."])
    with_prior = QAModel(model.model, model.tokenizer, "arabertv02",
                         dataclasses.replace(model.settings, sentence_prior=100.0), sentence_idf=idf)
    answer = with_prior.predict([example])[0][0]
    assert answer.start >= context.index("تأسست")
    with pytest.raises(ConfigError, match="IDF"):
        QAModel(model.model, model.tokenizer, "arabertv02", dataclasses.replace(model.settings, sentence_prior=1.0))

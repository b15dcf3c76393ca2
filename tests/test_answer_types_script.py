"""scripts/answer_types.py: question words and answer kinds as the confusion table counts them."""
from __future__ import annotations

import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import answer_types


def test_question_words_and_answer_kinds():
    assert answer_types.question_word("متى بني برج إيفل؟") == "متى"
    assert answer_types.question_word("وكم عدد زوار البرج؟") == "كم"
    assert answer_types.question_word("في أي عام بني؟") == "أي"
    assert answer_types.question_word("ماذا قال؟") == "ما"
    assert answer_types.question_word("اذكر اسم المهندس") == "other"
    assert answer_types.kind("عام 1889") == "date" and answer_types.kind("١٨٨٩") == "date"
    assert answer_types.kind("في مارس الماضي") == "date"
    assert answer_types.kind("330 مترا") == "number" and answer_types.kind("٧ ملايين") == "number"
    assert answer_types.kind("غوستاف إيفل") == "words" and answer_types.kind("") == "none"


@pytest.mark.slow
def test_the_table_counts_kinds_lengths_and_f1():
    examples = [
        {"id": "1", "question": "متى بني البرج؟", "context": "بني البرج عام 1889 في باريس.",
         "answers": {"text": ["1889"], "answer_start": [14]}},
        {"id": "2", "question": "متى افتتح؟", "context": "افتتح في باريس سنة 1889.",
         "answers": {"text": ["1889"], "answer_start": [19]}},
    ]
    rows = answer_types.table(examples, {"1": {"text": "1889", "start": 14}, "2": {"text": "في باريس", "start": 6}})
    [row] = rows
    assert row["question_word"] == "متى" and row["questions"] == 2
    assert row["gold_number_or_date"] == 100 and row["pred_number_or_date"] == 50 and row["same_kind"] == 50
    assert row["pred_words"] == 1.5 and row["f1"] == 50

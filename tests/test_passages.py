"""Answers from long contexts and collections (issue 59, qa/transformer/passages.py): a context of more windows than
the model's `long_context_windows` is read by its best passages, an index's hits the same way; the answers' offsets
are exact in the text as given, and an index's answers name their document."""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from arabert_pipeline import Pipeline
from arabert_pipeline.errors import ConfigError, InputError
from arabert_pipeline.qa.transformer.passages import PassageRead, chosen_answers, passage_order
from arabert_pipeline.qa.transformer.settings import QASettings
from arabert_pipeline.retrieval.index import Hit, Index
from arabert_pipeline.retrieval.passages import Passage

NILE = "يعد نهر النيل أطول أنهار العالم، إذ يبلغ طوله نحو 6650 كيلومترا، ويمر بإحدى عشرة دولة أفريقية."
PETRA = "تقع مدينة البتراء الأثرية في جنوب الأردن، وقد نحتها الأنباط في الصخر الوردي قبل أكثر من ألفي عام."
# Paragraphs about other things, none sharing a content word with the questions below.
FILLER = [
    "شهدت الأسواق المحلية ارتفاعا ملحوظا في أسعار الخضروات والفواكه خلال الأسبوع الماضي بسبب موجة الحر.",
    "أعلنت وزارة التعليم عن مواعيد الامتحانات النهائية للمرحلة الثانوية وطالبت الطلاب بالاستعداد المبكر.",
    "افتتح المعرض الدولي للكتاب أبوابه أمس بمشاركة مئات دور النشر العربية والأجنبية وسط إقبال كبير.",
    "فاز المنتخب الوطني لكرة القدم على نظيره بهدفين نظيفين في المباراة الودية التي أقيمت مساء الجمعة.",
]


@pytest.fixture(scope="module")
def qa():
    return Pipeline("arabert")


def long_document(gold: str, copies: int = 15) -> str:
    """`gold` in the middle of `copies` rounds of the filler paragraphs: many windows long."""
    paragraphs = FILLER * copies
    paragraphs.insert(len(paragraphs) // 2, gold)
    return "\n".join(paragraphs)


def test_a_long_context_is_read_by_its_best_passages_with_exact_offsets(qa, monkeypatch):
    context = long_document(NILE)
    read = []
    original = type(qa.qa).window_logits
    monkeypatch.setattr(type(qa.qa), "window_logits",
                        lambda self, windows, batch: read.append(len(windows)) or original(self, windows, batch))
    answer = qa.answer("كم يبلغ طول نهر النيل؟", context)
    assert answer is not None and "6650" in answer.text
    assert context[answer.start:answer.end] == answer.text
    assert answer.document is None  # a context given, not an index
    whole = len(qa.qa.windows(qa.qa.prepare([{"question": "كم يبلغ طول نهر النيل؟", "context": context}])))
    assert whole > qa.qa.settings.long_context_windows
    assert sum(read) <= qa.qa.settings.passages_read < whole  # the passages read, not every window


def test_contexts_of_at_most_long_context_windows_are_read_whole_as_before(qa):
    """A paragraph's answers are those of the whole read, whatever the passage settings say."""
    question, context = "أين تقع البتراء؟", PETRA + "\n" + NILE
    before = qa.answer(question, context, top_k=3)
    narrow = dataclasses.replace(qa.qa.settings, passage_chars=40, passages_read=1)
    qa.qa.settings, saved = narrow, qa.qa.settings
    try:
        assert qa.answer(question, context, top_k=3) == before
    finally:
        qa.qa.settings = saved
    assert "الأردن" in before[0].text


def test_a_batch_mixing_short_and_long_contexts_keeps_each_answer_in_its_own_context(qa):
    contexts = [PETRA, long_document(NILE), long_document(PETRA, copies=12), NILE]
    questions = ["أين تقع البتراء؟", "كم يبلغ طول نهر النيل؟", "أين تقع البتراء؟", "كم يبلغ طول نهر النيل؟"]
    answers = qa.answer(questions, contexts)
    for answer, context in zip(answers, contexts, strict=True):
        assert context[answer.start:answer.end] == answer.text
    assert [("الأردن" in a.text, "6650" in a.text) for a in answers] == [(True, False), (False, True),
                                                                         (True, False), (False, True)]
    alone = [qa.answer(q, c) for q, c in zip(questions, contexts, strict=True)]
    assert answers == alone


def test_a_long_context_sharing_no_word_with_the_question_still_gets_an_answer_from_its_first_passages(qa):
    context = long_document(NILE)
    answer = qa.answer("ماذا؟", context)  # a question word only: nothing left to retrieve by
    assert answer is not None and context[answer.start:answer.end] == answer.text


def test_passages_are_ordered_by_bm25_and_the_null_margin_together():
    def read(score: float, margin: float, start: int) -> PassageRead:
        return PassageRead(Hit(Passage(0, start, start + 5), score, "0", None, "x" * 5), [], margin)

    # BM25 alone prefers the first; a far lower null margin (the model sure an answer is there) the second.
    reads = [read(5.0, 9.0, 0), read(4.9, -9.0, 10), read(1.0, 0.0, 20)]
    assert passage_order(reads, 0.0) == [0, 1, 2]
    assert passage_order(reads, 1.5) == [1, 0, 2]
    assert passage_order(reads[:1], 1.5) == [0]
    # Equal evidence: retrieval order
    assert passage_order([read(1.0, 0.0, 0), read(1.0, 0.0, 10)], 1.5) == [0, 1]


def test_chosen_answers_take_the_best_passage_first_and_count_a_span_once():
    from arabert_pipeline.qa.transformer.decode import Answer

    first = PassageRead(Hit(Passage(0, 0, 50), 3.0, "0", None, ""), [Answer("a", 1, 2, 0.9), Answer("b", 3, 4, 0.1)],
                        -5.0)
    second = PassageRead(Hit(Passage(0, 0, 50), 2.0, "0", None, ""), [Answer("a", 1, 2, 0.8), Answer("c", 5, 6, 0.2)],
                         5.0)
    chosen, best = chosen_answers([second, first], 1.0, top_k=3)
    assert best is first
    assert [a.text for a, _ in chosen] == ["a", "b", "c"]


def test_an_index_answers_name_their_document_and_offsets_into_its_text(qa):
    texts = [NILE, PETRA, *FILLER]
    index = Index.build(texts, ids=["nile", "petra", *[f"f{i}" for i in range(len(FILLER))]],
                        titles=["النيل", "البتراء", *[None] * len(FILLER)])
    answer = qa.answer("أين تقع البتراء؟", index=index)
    assert (answer.document, answer.title) == ("petra", "البتراء")
    assert PETRA[answer.start:answer.end] == answer.text and "الأردن" in answer.text
    many = qa.answer(["كم يبلغ طول نهر النيل؟", "أين تقع البتراء؟"], index=index, top_k=2)
    assert [found[0].document for found in many] == ["nile", "petra"]
    for found in many:
        for a in found:
            assert texts[["nile", "petra"].index(a.document)][a.start:a.end] == a.text


def test_an_index_answer_names_the_passage_it_was_read_from(qa):
    """The passage around the span (what serve's page shows): one of the index's passages, in the answer's document."""
    texts = [PETRA, long_document(NILE)]
    index = Index.build(texts, ids=["petra", "long"], passage_chars=200)
    answer = qa.answer("كم يبلغ طول نهر النيل؟", index=index)
    passage = answer.passage
    assert answer.document == "long" and passage.document == 1
    assert passage in [index.passage(row) for row in range(len(index))]
    assert passage.start <= answer.start < answer.end <= passage.end and passage.end - passage.start < len(texts[1])
    assert index.document_text(passage.document)[passage.start:passage.end] == texts[1][passage.start:passage.end]
    assert qa.answer("كم يبلغ طول نهر النيل؟", long_document(NILE)).passage is None  # a context given


def test_an_index_answer_is_withheld_where_the_chosen_passage_null_margin_passes_the_threshold(qa):
    index = Index.build([NILE, *FILLER])
    unanswerable, answerable = "كم يبلغ عدد سكان مصر؟", "كم يبلغ طول نهر النيل؟"  # both retrieve the Nile
    found = qa.qa.logits([{"question": q, "context": NILE} for q in (unanswerable, answerable)])
    margins = qa.qa.null_margins(found)
    assert margins[0] > margins[1]  # the model is surer the Nile paragraph answers the second
    saved = qa.qa.settings
    qa.qa.settings = dataclasses.replace(saved, index_null_threshold=float(margins.mean()))
    try:
        assert qa.answer(unanswerable, index=index, allow_no_answer=True) is None
        assert qa.answer(unanswerable, index=index) is not None  # without allow_no_answer: always an answer
        assert qa.answer(answerable, index=index, allow_no_answer=True) is not None
    finally:
        qa.qa.settings = saved


def test_index_arguments_are_checked(qa):
    index = Index.build([NILE])
    with pytest.raises(InputError, match="not both"):
        qa.answer("كم يبلغ طول نهر النيل؟", NILE, index=index)
    with pytest.raises(InputError, match="must be an Index"):
        qa.answer("كم يبلغ طول نهر النيل؟", index="runs/index")
    with pytest.raises(InputError, match="question"):
        qa.answer("", index=index)
    with pytest.raises(InputError, match="question\\[1\\]"):
        qa.answer(["كم يبلغ طول نهر النيل؟", 3], index=index)
    with pytest.raises(InputError, match="a context is needed"):
        qa.answer("كم يبلغ طول نهر النيل؟")


def test_an_index_of_another_analysis_is_named_in_a_warning(qa):
    index = Index.build([NILE], analysis="arabertv2-light")
    with pytest.warns(UserWarning, match="arabertv2-light"):
        qa.answer("كم يبلغ طول نهر النيل؟", index=index)
    same = Index.build([NILE])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        qa.answer("كم يبلغ طول نهر النيل؟", index=same)


@pytest.mark.parametrize(("field", "value"), [("passage_chars", 5), ("passages_read", 0), ("long_context_windows", 0),
                                              ("passage_null_weight", -1.0), ("index_null_threshold", np.inf)])
def test_passage_settings_out_of_range_are_refused_naming_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        QASettings.from_metadata({field: value}, source="arabert_pipeline.json")

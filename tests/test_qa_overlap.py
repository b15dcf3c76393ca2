"""Question-overlap keys, sentence scores, and the token types they give QA windows (no shared data needed)."""
from __future__ import annotations

from pathlib import Path

import pytest

from arabert_pipeline.qa.overlap import KeyIDF, match_keys, matching_word_spans, sentence_overlap_scores, sentence_spans

SHIPPED = Path(__file__).resolve().parents[1] / "arabert_pipeline" / "models" / "arabert-mini"


@pytest.mark.parametrize("a, b", [
    ("المدينة", "مدينتها"), ("والمدينة", "مدينة"), ("عاصمة", "عاصمتها"), ("الأردن", "الاردنية"),
    ("مُحَمَّد", "محمد"), ("مصطفى", "مصطفي"), ("(القاهرة)،", "القاهرة"), ("وقت", "وقتها"), ("1932", "1932."),
])
def test_spelling_and_clitic_variants_match(a, b):
    assert match_keys(a) & match_keys(b)


@pytest.mark.parametrize("a, b", [("كتاب", "كاتب"), ("مدينة", "دين"), ("وقت", "قت"), ("سعودي", "سعد")])
def test_different_words_do_not(a, b):
    assert not match_keys(a) & match_keys(b)


def test_function_words_and_clitics_written_alone_have_no_key():
    for word in ("في", "من", "التي", "متى", "ما", "+ها", "ال+", "و+", ".", "؟", ""):
        assert not match_keys(word), word


def test_matching_word_spans_are_context_words_shared_with_the_question():
    context = "عمّان هي عاصمة المملكة الأردنية الهاشمية."
    spans = matching_word_spans("ما هي عاصمة الأردن؟", context)
    assert [context[s:e] for s, e in spans] == ["عاصمة", "الأردنية"]


def test_sentences_end_at_arabic_question_marks_and_newlines():
    text = "ما اسمك؟ اسمي علي.\nوأنت من أين؟"
    assert [text[s:e] for s, e in sentence_spans(text)] == ["ما اسمك؟", "اسمي علي.", "وأنت من أين؟"]


def test_sentence_scores_weight_rare_words_more():
    idf = KeyIDF.from_texts(["المدينة كبيرة. المدينة قديمة. المدينة جميلة. النهر طويل."])
    context = "المدينة كبيرة. النهر طويل."
    common, rare = sentence_overlap_scores("المدينة", context, idf), sentence_overlap_scores("النهر", context, idf)
    assert common[0] > 0 and common[1] == 0 and rare[1] > common[0]
    restored = KeyIDF.from_json(idf.to_json(min_frequency=1))
    assert sentence_overlap_scores("النهر", context, restored) == rare


def test_windows_mark_context_tokens_of_question_words_with_type_2():
    from transformers import AutoTokenizer

    from arabert_pipeline.qa.transformer.features import build_windows

    tokenizer = AutoTokenizer.from_pretrained(SHIPPED)
    question, context = "ما هي عاصمة الأردن ؟", "عمان هي عاصمة المملكة الأردنية الهاشمية ."
    plain = build_windows(tokenizer, [question], [context], max_seq_length=64, doc_stride=16)
    marked = build_windows(tokenizer, [question], [context], max_seq_length=64, doc_stride=16, question_overlap=True)
    assert plain.input_ids == marked.input_ids
    types, offsets = marked.token_type_ids[0], marked.offsets[0]
    words = {context[offsets[t, 0] : offsets[t, 1]].strip() for t, kind in enumerate(types) if kind == 2}
    assert words and all(w in ("عاصم", "ة", "الأردنية", "عاصمة") for w in words)
    # Everything else is as the tokenizer typed it: the question and [CLS]/[SEP] 0, the rest of the context 1.
    assert [min(k, 1) for k in types] == plain.token_type_ids[0]

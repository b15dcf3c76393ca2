"""EM / F1 / Sentence-Match in both variants, Punkt emulation, bootstrap statistics."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from arabert_pipeline.evaluate import metrics as m
from conftest import SLICES

GOLDEN_PUNKT = Path(__file__).parent / "golden" / "evaluate_punkt_spans.json"


def example(context: str, *answers: tuple[str, int]) -> dict:
    return {"id": "q", "context": context, "question": "؟",
            "answers": {"text": [a for a, _ in answers], "answer_start": [s for _, s in answers]}}


def sentences(text, split):
    return [text[s:e] for s, e in split(text)]


# ---------------------------------------------------------------------------------------------------- normalization


def test_soqal_normalize_removes_every_al_even_inside_words():
    assert m.soqal_normalize("قال الرجل") == "ق رجل"
    assert m.soqal_normalize("The U.S. Army!") == "us army"
    assert m.soqal_normalize("الرجل،") == "رجل،"  # Arabic comma kept
    assert m.soqal_normalize("مُحَمَّد") == "مُحَمَّد"  # diacritics kept


def test_arabic_normalize_strips_article_only_as_prefix():
    assert m.arabic_normalize("قال الرجل") == "قال رجل"
    assert m.arabic_normalize("الرَّجُلُ،") == "رجل"
    assert m.arabic_normalize("«والكتاب» بالمدرسة للعلم") == "كتاب مدرسه علم"
    assert m.arabic_normalize("أحمد إلى ٱلقرآن مكتـــبة") == "احمد الي قران مكتبه"
    assert m.arabic_normalize("ألف") == "الف"  # hamza: not the article, so nothing is stripped before alef folding
    assert m.arabic_normalize("The U.S. Army") == "u s army"


@pytest.mark.parametrize(
    "word, stripped",
    [("الرجل", "رجل"), ("والرجل", "رجل"), ("فالأمر", "أمر"), ("بالقلم", "قلم"), ("كالبحر", "بحر"), ("للعلم", "علم"),
     ("وللعلم", "علم"), ("قال", "قال"), ("الا", "الا"), ("والي", "والي"), ("لله", "لله"), ("ٱلقرآن", "قرآن")],
)
def test_strip_article(word, stripped):
    assert m.strip_article(word) == stripped


# ---------------------------------------------------------------------------------------------------------- EM / F1


def test_soqal_quirk_makes_different_words_equal():
    ex = example("قال الرجل كلمة", ("ق", 0))
    scores = m.score_question(ex, "قال")
    assert scores["soqal_em"] == 1.0  # "قال" → "ق"
    assert scores["arabic_em"] == 0.0


def test_f1_hand_computed():
    # SOQAL: "ذهب ولد إلى مدرسة" vs "ولد مدرسة": overlap 2, P 2/4, R 2/2 → F1 2/3.
    assert m.token_f1("ذهب الولد إلى المدرسة", "الولد المدرسة", m.soqal_normalize,
                      empty_matches_empty=False) == pytest.approx(2 / 3)
    # Arabic: "ولد" vs "ولد ذهب مدرسه": P 1, R 1/3 → F1 1/2.
    assert m.token_f1("الوَلَدُ", "الولد ذهب للمدرسة", m.arabic_normalize,
                      empty_matches_empty=True) == pytest.approx(0.5)


def test_max_over_gold_answers_and_variants_disagree_on_orthography():
    ex = example("وُلد محمد في القاهرة، مصر", ("القاهرة،", 11), ("مصر", 20))
    scores = m.score_question(ex, "القاهرة")
    assert scores["soqal_em"] == 0.0 and scores["soqal_f1"] == 0.0  # "ق هرة" vs "ق هرة،"
    assert scores["arabic_em"] == 1.0 and scores["arabic_f1"] == 1.0
    assert m.score_question(ex, "مصر")["soqal_em"] == 1.0  # second gold answer


def test_f1_is_the_best_over_every_gold_answer():
    # Against the first gold answer "عاصمة مصر القاهرة" alone, "القاهرة" has P 1, R 1/3: F1 1/2; the second is it.
    ex = example("عاصمة مصر القاهرة", ("عاصمة مصر القاهرة", 0), ("القاهرة", 10))
    scores = m.score_question(ex, "القاهرة")
    assert scores["arabic_f1"] == 1.0 and scores["arabic_em"] == 1.0
    assert scores["soqal_f1"] == 1.0 and scores["soqal_em"] == 1.0


def test_f1_counts_repeated_tokens_as_often_as_both_sides_have_them():
    # "باب باب" vs "باب باب بيت": 2 tokens in common (a multiset), P 2/2, R 2/3 → F1 4/5; counted as sets, 1 in
    # common would give P 1/2, R 1/3 → 2/5.
    for normalize, empty in ((m.arabic_normalize, True), (m.soqal_normalize, False)):
        assert m.token_f1("باب باب", "باب باب بيت", normalize, empty_matches_empty=empty) == pytest.approx(0.8)
        # Three in the prediction, two in the gold: only two count. P 2/3, R 2/2 → F1 4/5.
        assert m.token_f1("باب باب باب", "باب باب", normalize, empty_matches_empty=empty) == pytest.approx(0.8)


def test_empty_answers():
    assert m.token_f1("", "", m.soqal_normalize, empty_matches_empty=False) == 0.0
    assert m.exact_match("", "", m.soqal_normalize) == 1.0
    assert m.token_f1("", "", m.arabic_normalize, empty_matches_empty=True) == 1.0
    assert m.token_f1("", "كلمة", m.arabic_normalize, empty_matches_empty=True) == 0.0


def test_missing_prediction_scores_zero_everywhere():
    ex = example("نص قصير.", ("نص", 0))
    assert m.score_question(ex, None) == dict.fromkeys(m.SCORE_KEYS, 0.0)
    assert m.score_question(ex, "نص") == dict.fromkeys(m.SCORE_KEYS, 1.0)


# ----------------------------------------------------------------------------------------------- sentence splitting


def test_punkt_question_mark_arabic_is_not_a_boundary():
    text = "ما اسمك؟ اسمي علي. أين تسكن؟ في بيروت."
    assert sentences(text, m.punkt_sentence_spans) == ["ما اسمك؟ اسمي علي.", "أين تسكن؟ في بيروت."]
    assert sentences(text, m.arabic_sentence_spans) == ["ما اسمك؟", "اسمي علي.", "أين تسكن؟", "في بيروت."]


def test_punkt_rules():
    split = lambda text: sentences(text, m.punkt_sentence_spans)  # noqa: E731  a one-line local helper
    assert split("وصل Dr. Smith إلى U.S. Army أمس. ثم عاد") == ["وصل Dr. Smith إلى U.S. Army أمس.", "ثم عاد"]
    assert split("بلغ 3.5 مليون. ثم") == ["بلغ 3.5 مليون.", "ثم"]
    assert split("هذا... ثم ذاك! وماذا?نعم") == ["هذا... ثم ذاك!", "وماذا?نعم"]  # no space after "?": no boundary
    assert split('قال "مرحبا." ثم (ذهب.) بعد') == ['قال "مرحبا."', "ثم (ذهب.)", "بعد"]
    assert split("عام 1990 م. ذهب د. محمد.") == ["عام 1990 م.", "ذهب د.", "محمد."]
    assert split("سطر أول\nسطر ثان.  ") == ["سطر أول\nسطر ثان."]  # a newline is no boundary for Punkt


def test_arabic_split_on_newlines_and_arabic_stops():
    text = "سطر أول\nسطر ثان۔ ثالث… رابع «قال.» خامس 3.5 بالمئة.[1][2] سادس"
    assert sentences(text, m.arabic_sentence_spans) == [
        "سطر أول", "سطر ثان۔", "ثالث…", "رابع «قال.»", "خامس 3.5 بالمئة.[1][2]", "سادس"]


def test_punkt_matches_nltk_on_every_shared_context(shared_data):
    golden = json.loads(GOLDEN_PUNKT.read_text(encoding="utf-8"))
    contexts = {}
    for relative in golden["files"]:
        for article in json.loads((shared_data / relative).read_text(encoding="utf-8"))["data"]:
            for paragraph in article["paragraphs"]:
                contexts[hashlib.sha1(paragraph["context"].encode()).hexdigest()[:16]] = paragraph["context"]
    assert contexts and set(contexts) <= set(golden["spans"])
    assert shared_data.resolve() == SLICES.resolve() or set(contexts) == set(golden["spans"])  # full data: all of them
    wrong = [key for key, context in contexts.items()
             if [b for span in m.punkt_sentence_spans(context) for b in span] != golden["spans"][key]]
    assert wrong == [], f"{len(wrong)} of {len(contexts)} contexts split differently from nltk 3.5"


# --------------------------------------------------------------------------------------------------- Sentence-Match


def test_sentence_match_variants():
    context = "ما اسمك؟ اسمي علي. أين تسكن؟ في بيروت."
    ex = example(context, ("علي", context.index("علي")))
    # Same Punkt sentence (؟ does not split) but a different Arabic sentence.
    assert m.score_question(ex, "ما اسمك")["soqal_sm"] == 1.0
    assert m.score_question(ex, "ما اسمك")["arabic_sm"] == 0.0
    assert m.score_question(ex, "اسمي")["arabic_sm"] == 1.0
    assert m.score_question(ex, "بيروت")["soqal_sm"] == 0.0


def test_arabic_sm_is_the_best_over_every_gold_answer_and_soqal_sm_reads_the_first():
    """Arabic SM, as F1 and EM, counts a prediction in the sentence of any gold answer, whichever is listed first;
    SOQAL's SM, by its definition, the first gold answer's sentence only. The two gold answers lie in two sentences."""
    context = "ولد علي في بيروت. ثم درس في القاهرة."
    beirut, cairo = ("بيروت", context.index("بيروت")), ("القاهرة", context.index("القاهرة"))
    in_first, in_second = ("علي", context.index("علي")), ("درس في القاهرة", context.index("درس في القاهرة"))
    for golds, soqal in (((beirut, cairo), (1.0, 0.0)), ((cairo, beirut), (0.0, 1.0))):
        ex = example(context, *golds)
        for (prediction, start), expected in zip((in_first, in_second), soqal, strict=True):
            scores = m.score_question(ex, prediction, start)
            assert (scores["arabic_sm"], scores["soqal_sm"]) == (1.0, expected), (golds, prediction)
            assert m.arabic_sentence_match(context, prediction, ex["answers"], prediction_start=start) == 1.0
    assert m.score_question(example(context, cairo), *in_first)["arabic_sm"] == 0.0  # in neither gold's sentence


def test_span_crossing_sentences_scores_zero_in_soqal():
    context = "ولد في بيروت. درس في القاهرة."
    ex = example(context, ("بيروت. درس", 7))
    scores = m.score_question(ex, "بيروت. درس")
    assert scores["soqal_sm"] == 0.0
    assert scores["arabic_sm"] == 1.0  # the gold answer covers both sentences
    assert scores["soqal_em"] == 1.0


def test_soqal_sm_takes_the_last_sentence_holding_the_answer():
    """SOQAL's script keeps the last Punkt sentence that holds the first gold answer's text (and the prediction's)."""
    context = "ذهب علي إلى السوق. ثم عاد علي إلى البيت."
    assert sentences(context, m.punkt_sentence_spans) == ["ذهب علي إلى السوق.", "ثم عاد علي إلى البيت."]
    ex = example(context, ("علي", context.index("علي")))  # in both sentences
    assert m.score_question(ex, "البيت")["soqal_sm"] == 1.0
    assert m.score_question(ex, "السوق")["soqal_sm"] == 0.0
    assert m.soqal_sentence_match(context, "البيت", "علي") == 1.0


def test_arabic_sm_refuses_a_prediction_that_runs_past_the_gold_sentence():
    context = "ولد في بيروت. ثم درس في القاهرة."
    answers = {"text": ["بيروت"], "answer_start": [context.index("بيروت")]}
    assert m.arabic_sentence_match(context, "في بيروت.", answers, prediction_start=4) == 1.0
    past = "بيروت. ثم درس"  # starts in the gold sentence, ends in the next
    assert m.arabic_sentence_match(context, past, answers, prediction_start=context.index(past)) == 0.0
    assert m.score_question({"context": context, "answers": answers}, past, context.index(past))["arabic_sm"] == 0.0
    before = {"text": ["القاهرة"], "answer_start": [context.index("القاهرة")]}  # ends in it, starts before it
    assert m.arabic_sentence_match(context, past, before, prediction_start=context.index(past)) == 0.0


def test_soqal_empty_prediction_quirk():
    context = "جملة أولى. جملة ثانية فيها الجواب."
    assert m.soqal_sentence_match(context, "", "الجواب") == 1.0  # "" is in every sentence, so in the last one
    assert m.soqal_sentence_match(context, "", "أولى") == 0.0
    assert m.arabic_sentence_match(context, "", {"text": ["الجواب"], "answer_start": [context.index("الجواب")]}) == 0.0


def test_arabic_sm_uses_offsets_when_given():
    context = "ولد عام 1990. وتوفي بعد 1990 بقليل."
    answers = {"text": ["1990"], "answer_start": [context.rindex("1990")]}
    assert m.arabic_sentence_match(context, "1990", answers) == 0.0  # text only and twice in the context: ambiguous
    assert m.arabic_sentence_match(context, "1990", answers, prediction_start=context.index("1990")) == 0.0
    assert m.arabic_sentence_match(context, "1990", answers, prediction_start=context.rindex("1990")) == 1.0
    assert m.arabic_sentence_match(context, "بقليل", answers) == 1.0  # text only, once: located there


def test_arabic_sm_cannot_be_gamed_by_text_search():
    """Issue 13: "ا" scored 100 and "." 99 on 100 ARCD-test questions, and a start that does not point at the
    prediction was ignored in favour of a search for its text."""
    context = "ولد الشاعر في بيروت. ثم انتقل إلى القاهرة وعاش فيها. وتوفي هناك عام 1990."
    answers = {"text": ["القاهرة"], "answer_start": [context.index("القاهرة")]}
    for letter in ("ا", ".", "ي"):  # in every sentence, the gold one included
        assert m.arabic_sentence_match(context, letter, answers) == 0.0
        assert m.score_question({"context": context, "answers": answers}, letter)["arabic_sm"] == 0.0
    assert m.arabic_sentence_match(context, ".", answers, prediction_start=0) == 0.0  # context[0] is not "."
    assert m.arabic_sentence_match(context, ".", answers, prediction_start=-1) == 0.0
    second_sentence_dot = context.index(".", context.index("القاهرة"))
    assert m.arabic_sentence_match(context, ".", answers, prediction_start=second_sentence_dot) == 1.0
    assert m.arabic_sentence_match(context, "وعاش", answers) == 1.0


def test_arabic_sm_gold_answer_located_by_answer_start_or_its_one_occurrence():
    context = "في بيروت ولد. وفي بيروت مات."
    at_second = {"text": ["بيروت"], "answer_start": [context.rindex("بيروت")]}
    assert m.arabic_sentence_match(context, "مات", at_second) == 1.0
    assert m.arabic_sentence_match(context, "ولد", at_second) == 0.0
    misaligned_repeated = {"text": ["بيروت"], "answer_start": [0]}
    for prediction in ("ولد", "مات"):  # no way to tell which one is meant (the first occurrence was a guess)
        assert m.arabic_sentence_match(context, prediction, misaligned_repeated) == 0.0
    misaligned_once = {"text": ["مات"], "answer_start": [0]}
    assert m.arabic_sentence_match(context, "وفي", misaligned_once) == 1.0


def test_one_letter_for_every_question_scores_below_the_first_sentence(full_data):
    """Issue 13, on the first 100 ARCD-test questions: "ا" scored Arabic SM 100.0 and "." 99.0, the first sentence of
    the context 65.0. Located by offset, a constant answer can only hit where the context leaves no choice."""
    import numpy as np

    from arabert_pipeline.evaluate.baselines import baseline_predictions
    from arabert_pipeline.qa.data import read_squad

    examples = read_squad("arcd-test", misaligned="keep").examples[:100]
    first = baseline_predictions("first-sentence", examples)
    assert np.mean([m.score_question(e, *first[e["id"]])["arabic_sm"] for e in examples]) == 0.65
    for prediction, start in (("ا", None), (".", None), (".", 0), ("ا", 0)):
        sm = np.mean([m.score_question(e, prediction, start)["arabic_sm"] for e in examples])
        assert sm <= 0.33, (prediction, start, sm)


# ------------------------------------------------------------------------------------------------------- statistics


def test_bootstrap_ci_contains_mean_and_is_deterministic():
    rng = np.random.default_rng(1)
    scores = np.stack([rng.random(300) < 0.4, rng.random(300)], axis=1).astype(float)
    first = m.bootstrap_ci(scores, resamples=2000, seed=7)
    again = m.bootstrap_ci(scores, resamples=2000, seed=7)
    other = m.bootstrap_ci(scores, resamples=2000, seed=8)
    np.testing.assert_allclose(first["mean"], 100 * scores.mean(axis=0))
    assert np.all(first["low"] < first["mean"]) and np.all(first["mean"] < first["high"])
    assert np.all(first["high"] - first["low"] < 15)
    np.testing.assert_array_equal(first["low"], again["low"])
    assert not np.array_equal(first["low"], other["low"])


def test_paired_bootstrap_detects_planted_difference():
    rng = np.random.default_rng(0)
    better = (rng.random(400) < 0.6).astype(float)
    worse = better * (rng.random(400) < 0.8)  # loses about 12 points, never gains
    result = m.paired_bootstrap(better, worse, resamples=2000, seed=0)
    assert result["diff"][0] == pytest.approx(100 * (better - worse).mean())
    assert result["low"][0] > 0 and result["p_value"][0] < 0.01
    same = m.paired_bootstrap(better, better, resamples=500, seed=0)
    assert same["diff"][0] == 0 and same["p_value"][0] == 1.0
    assert m.mcnemar_exact(better, worse) < 1e-6
    assert m.mcnemar_exact([1, 1, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0]) == pytest.approx(2 / 32)
    assert m.mcnemar_exact(better, better) == 1.0


def test_arabic_sm_ignores_edge_whitespace_of_the_prediction():
    context = " جملة أولى فيها الجواب. جملة ثانية."
    answers = {"text": ["الجواب"], "answer_start": [context.index("الجواب")]}
    assert m.arabic_sentence_match(context, " جملة أولى فيها الجواب. ", answers, prediction_start=0) == 1.0

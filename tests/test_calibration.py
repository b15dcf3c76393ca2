"""Answer-score calibration: the maps, their choice out of fold, their checks when read back, and their use."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from arabert_pipeline.errors import ConfigError
from arabert_pipeline.qa.transformer.calibration import (
    Calibration,
    choose_calibration,
    expected_calibration_error,
    fit,
    reliability_table,
)
from arabert_pipeline.qa.transformer.settings import QASettings


def overconfident(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Scores whose answers are right with probability score² (a model surer than it should be)."""
    rng = np.random.default_rng(seed)
    scores = rng.uniform(0.05, 1.0, n)
    return scores, rng.uniform(size=n) < scores**2


def test_ece_and_reliability_table_by_hand():
    scores = np.array([0.05, 0.05, 0.95, 0.95])
    correct = np.array([0, 0, 1, 0])
    rows = reliability_table(scores, correct)
    assert [(r["low"], r["count"], r["right"]) for r in rows] == [(0.0, 2, 0.0), (0.9, 2, 0.5)]
    assert expected_calibration_error(scores, correct) == pytest.approx((2 * 0.05 + 2 * 0.45) / 4)
    assert expected_calibration_error(np.array([1.0]), np.array([1])) == 0.0  # a score of 1 is in the top bin


@pytest.mark.parametrize("method", ["isotonic", "platt"])
def test_a_fitted_map_corrects_an_overconfident_model_out_of_sample(method):
    scores, correct = overconfident(4000)
    calibration = fit(method, scores, correct)
    held_scores, held_correct = overconfident(4000, seed=1)
    before = expected_calibration_error(held_scores, held_correct)
    after = expected_calibration_error(calibration.apply(held_scores), held_correct)
    assert before > 0.1 and after < 0.04
    order = np.argsort(held_scores)
    assert np.all(np.diff(calibration.apply(held_scores)[order]) >= -1e-12)  # answers keep their order


def test_the_choice_is_made_out_of_fold_and_keeps_a_calibrated_score():
    calibration, report = choose_calibration(*overconfident(3000))
    assert report["method"] in ("isotonic", "platt") and calibration.method == report["method"]
    assert report["ece_out_of_fold"][report["method"]] < report["ece_before"] / 3
    assert sum(row["count"] for row in report["reliability_out_of_fold"]) == 3000
    rng = np.random.default_rng(3)
    scores = rng.uniform(size=3000)
    honest, report = choose_calibration(scores, rng.uniform(size=3000) < scores)
    none = next(row for row in report["candidates"] if row["method"] == "none")
    assert report["brier_out_of_fold"] <= none["brier"]
    with pytest.raises(ConfigError, match="at least 10"):
        choose_calibration(np.array([0.5] * 4), np.array([1, 0, 1, 0]))


@pytest.mark.parametrize("stored, field", [
    ({"method": "magic"}, "method"),
    ({"method": "isotonic", "x": [0.1, 0.5], "y": [0.3]}, "equal length"),
    ({"method": "isotonic", "x": [0.5, 0.1], "y": [0.1, 0.3]}, "must not decrease"),
    ({"method": "isotonic", "x": [0.1, float("nan")], "y": [0.1, 0.3]}, "between 0 and 1"),
    ({"method": "isotonic", "x": [0.1, 2.0], "y": [0.1, 0.3]}, "between 0 and 1"),
    ({"method": "platt", "a": -1.0, "b": 0.0}, r"\.a must be"),
    ({"method": "platt", "a": "1", "b": 0.0}, r"\.a must be"),
    ([0.1, 0.2], "must be an object"),
    ({"method": "none", "input": "logits"}, r"\.input must be"),
])
def test_a_damaged_calibration_is_refused_naming_the_file_and_field(stored, field):
    with pytest.raises(ConfigError, match=f"model/arabert_pipeline.json: calibration.*{field}"):
        QASettings.from_metadata({"calibration": stored}, "model/arabert_pipeline.json")


def test_stored_settings_round_trip_through_the_metadata():
    import dataclasses
    import json

    settings = QASettings(calibration=Calibration("isotonic", (0.1, 0.9), (0.05, 0.6)))
    stored = json.loads(json.dumps(dataclasses.asdict(settings)))
    again = QASettings.from_metadata(stored)
    assert again.calibration == settings.calibration and again.calibration(0.5) == pytest.approx(0.325)
    assert QASettings.from_metadata({"calibration": None}).calibration is None


def test_the_decoder_reports_calibrated_scores(tmp_path):
    import dataclasses

    pytest.importorskip("torch")
    from arabert_pipeline.qa.transformer.model import QAModel
    from test_pipeline import PLANTED_WRITTEN, build_model

    qa = QAModel.load(build_model(tmp_path / "model", "arabertv02", planted=True, max_seq_length=96, doc_stride=32))
    example = [{"question": "إلى أين وصلنا؟", "context": f"سافرنا طويلا ثم وصلنا إلى {PLANTED_WRITTEN} في المساء."}]
    raw = qa.predict(example, top_k=3)[0]
    assert len(raw) == 3 and raw[0].text == PLANTED_WRITTEN
    qa.settings = dataclasses.replace(qa.settings, calibration=Calibration("isotonic", (0.0, 1.0), (0.0, 0.5)))
    mapped = qa.predict(example, top_k=3)[0]
    assert [(a.start, a.end) for a in mapped] == [(a.start, a.end) for a in raw]
    assert [a.score for a in mapped] == pytest.approx([a.score / 2 for a in raw])


def test_the_input_that_separates_right_from_wrong_is_chosen_not_the_one_easiest_to_flatten():
    # "probability": says nothing about which answers are right (any map's best is the base rate, ECE near 0);
    # "expected-f1": right with probability equal to it. ECE alone could prefer the first; the Brier score does not.
    rng = np.random.default_rng(5)
    informative = rng.uniform(size=2000)
    correct = rng.uniform(size=2000) < informative
    noise = rng.uniform(size=2000)
    calibration, report = choose_calibration({"probability": noise, "expected-f1": informative}, correct)
    assert calibration.input == report["input"] == "expected-f1"
    assert report["brier_out_of_fold"] < report["brier_base_rate"] - 0.05
    flattened = min(row["brier"] for row in report["candidates"] if row["input"] == "probability")
    assert flattened > report["brier_out_of_fold"] + 0.05
    assert Calibration.from_json(calibration.to_json()) == calibration
    assert Calibration.from_json({"method": "none"}).input == "probability"  # models written before inputs existed


def test_a_map_of_expected_f1_reads_each_answers_expected_f1(tmp_path):
    import dataclasses

    pytest.importorskip("torch")
    from arabert_pipeline.qa.transformer.decode import rank_by_expected_f1
    from arabert_pipeline.qa.transformer.model import QAModel
    from test_pipeline import PLANTED_WRITTEN, build_model

    qa = QAModel.load(build_model(tmp_path / "model", "arabertv02", planted=True, max_seq_length=96, doc_stride=32))
    qa.settings = dataclasses.replace(qa.settings, decoding="expected-f1", expected_f1_temperature=1.0)
    example = [{"question": "إلى أين وصلنا؟", "context": f"سافرنا طويلا ثم وصلنا إلى {PLANTED_WRITTEN} في المساء."}]
    logits = qa.logits(example)
    raw = qa.decode(logits, top_k=3)[0]
    ranked = qa.candidates(logits, top_k=3)[0]
    _, expected = rank_by_expected_f1(example[0]["context"], [(a.start, a.end) for a in ranked],
                                      [a.score for a in ranked], 1.0)
    by_span = {(a.start, a.end): e for a, e in zip(ranked, expected, strict=True)}
    qa.settings = dataclasses.replace(qa.settings, calibration=Calibration("none", input="expected-f1"))
    read = qa.decode(logits, top_k=3)[0]
    assert [(a.start, a.end) for a in read] == [(a.start, a.end) for a in raw]  # the same answers, in order
    assert [a.score for a in read] == pytest.approx([by_span[a.start, a.end] for a in read])
    assert [a.score for a in read] != pytest.approx([a.score for a in raw])  # not the probabilities


def test_a_few_right_answers_at_the_top_do_not_map_the_highest_scores_to_one():
    rng = np.random.default_rng(7)
    scores = rng.uniform(0.0, 0.9, 500)
    correct = rng.uniform(size=500) < 0.4  # the score says nothing below 0.9
    scores = np.concatenate([scores, [0.995, 0.999, 0.9995]])
    correct = np.concatenate([correct, [True, True, True]])  # three lucky answers on top
    calibration = fit("isotonic", scores, correct)
    assert calibration(1.0) < 0.8 and calibration(0.0) > 0.1
    assert len(calibration.x) <= 2 * (len(scores) // 20)  # steps rest on runs of answers, not on single ones


# ------------------------------------------------------------------------------------- the multi-feature map (issue 54)

def shifted_questions(n: int, easy_share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """answer_features rows of answers to two kinds of question: on "easy" ones (the answer's sentence repeats the
    question's words, a short context) an answer is right far more often than its decoder score says. A set's share
    of easy questions is what differs between sets, as between dev and a user's questions."""
    from arabert_pipeline.qa.transformer.calibration import FEATURES

    rng = np.random.default_rng(seed)
    easy = rng.uniform(size=n) < easy_share
    score = rng.normal(0.0, 1.0, n)  # the decoder's expected F1, as a logit
    rows = np.zeros((n, len(FEATURES)))
    rows[:, FEATURES.index("expected-f1")] = score
    rows[:, FEATURES.index("probability")] = score + rng.normal(0, 0.5, n)
    rows[:, FEATURES.index("question-overlap")] = np.where(easy, rng.uniform(0.7, 1.0, n), rng.uniform(0.0, 0.4, n))
    rows[:, FEATURES.index("context-words")] = np.where(easy, np.log1p(40), np.log1p(300)) + rng.normal(0, 0.2, n)
    right = rng.uniform(size=n) < 1 / (1 + np.exp(-(0.8 * score + np.where(easy, 1.5, -1.0))))
    return rows, right


def test_a_logistic_map_reads_the_features_and_transfers_where_a_one_input_map_does_not():
    from arabert_pipeline.qa.transformer.calibration import FEATURES, auroc, fit_logistic

    train_x, train_y = shifted_questions(3000, 0.2, seed=0)  # dev: hard questions
    held_x, held_y = shifted_questions(3000, 0.8, seed=1)  # a user's: mostly easy ones
    read = ("expected-f1", "probability", "question-overlap", "context-words")
    logistic = fit_logistic(train_x, train_y, read, ceiling=None)
    one_input = fit("platt", 1 / (1 + np.exp(-train_x[:, 0])), train_y, input="expected-f1")
    new, old = logistic.apply(held_x), one_input.apply(held_x)
    assert expected_calibration_error(old, held_y) > 0.15  # carries dev's base rate to the easy questions
    assert expected_calibration_error(new, held_y) < 0.05
    assert auroc(new, held_y) > auroc(old, held_y) + 0.05
    # The features are read: the same answers on other questions get other scores, and blanking them changes them.
    blank = held_x.copy()
    blank[:, [FEATURES.index("question-overlap"), FEATURES.index("context-words")]] = 0.0
    assert np.abs(logistic.apply(blank) - new).max() > 0.2
    assert logistic.weights[logistic.features.index("question-overlap")] > 0
    again = Calibration.from_json(json.loads(json.dumps(logistic.to_json())))
    assert again == logistic and np.allclose(again.apply(held_x), new)
    # By default a wrong dev answer above 0.8 caps the map there (issue 39: none above 0.8 on dev).
    capped = fit_logistic(train_x, train_y, read)
    assert capped.ceiling == 0.8 and capped.apply(held_x).max() == 0.8
    assert Calibration.from_json(json.loads(json.dumps(capped.to_json()))) == capped


def test_mapped_scores_never_increase_down_an_answer_list():
    from arabert_pipeline.qa.transformer.calibration import FEATURES, monotone

    # A map that prefers long answers would score a later, longer answer above the first one.
    rows = np.zeros((3, len(FEATURES)))
    rows[:, FEATURES.index("answer-words")] = [0.5, 2.0, 1.0]
    favour_length = Calibration("logistic", input="expected-f1", features=("answer-words",), weights=(3.0,))
    raw = favour_length.apply(rows)
    assert raw[1] > raw[0]
    assert list(monotone(raw)) == [raw[0], raw[0], raw[0]]  # each capped by the answer above it
    backwards = monotone(raw[::-1])
    assert backwards[0] == raw[2] and np.all(np.diff(backwards) <= 0) and np.all(backwards <= raw[::-1])
    assert monotone(np.array([])).size == 0


@pytest.mark.parametrize("stored, field", [
    ({"method": "logistic", "features": ["bogus"], "weights": [1.0], "bias": 0.0}, r"\.features must be"),
    ({"method": "logistic", "features": ["margin", "margin"], "weights": [1.0, 1.0], "bias": 0.0}, r"\.features"),
    ({"method": "logistic", "features": ["margin"], "weights": [1.0, 2.0], "bias": 0.0}, r"\.weights must be"),
    ({"method": "logistic", "features": ["margin"], "weights": [float("inf")], "bias": 0.0}, r"\.weights must be"),
    ({"method": "logistic", "features": ["margin"], "weights": [1.0]}, r"\.weights must be"),
])
def test_a_damaged_logistic_map_is_refused(stored, field):
    with pytest.raises(ConfigError, match=f"model/arabert_pipeline.json: calibration.*{field}"):
        QASettings.from_metadata({"calibration": stored}, "model/arabert_pipeline.json")


def test_answer_features_type_overlap_and_length():
    from arabert_pipeline.qa.transformer.calibration import FEATURES, answer_features, question_type

    assert question_type("متى تأسست المدينة؟") == "date" and question_type("في أي عام تأسست؟") == "date"
    assert question_type("كم عدد سكانها؟") == "number" and question_type("من أسس المدينة؟") is None
    context = "تأسست مدينة البصرة عام 636 م على يد عتبة بن غزوان. ويبلغ عدد سكانها 2,600,000 نسمة."
    year, founder = context.index("636"), context.index("عتبة")
    spans = [(year, year + 3), (founder, founder + len("عتبة بن غزوان"))]
    one = np.array([0.6, 0.3])
    rows = answer_features("متى تأسست مدينة البصرة؟", context, spans, one, one, np.array([1.0, 0.0]))
    fit_, miss = FEATURES.index("type-fit"), FEATURES.index("type-miss")
    assert list(rows[:, fit_]) == [1.0, 0.0] and list(rows[:, miss]) == [0.0, 1.0]
    assert rows[0, FEATURES.index("question-overlap")] == 1.0  # تأسست, مدينة, البصرة: all in the answer's sentence
    assert rows[1, FEATURES.index("answer-words")] == pytest.approx(np.log1p(3))
    assert rows[0, FEATURES.index("margin")] == pytest.approx(np.log(2)) and rows[1, FEATURES.index("margin")] < 0
    other = answer_features("من أسس البصرة؟", context, spans, one, one, np.array([1.0, 0.0]))
    assert not other[:, [fit_, miss]].any()  # no type asked: neither fit nor miss


@pytest.mark.parametrize("decoding", ["max-score", "expected-f1"])
def test_a_logistic_map_keeps_the_answers_and_their_order_under_every_decoding(tmp_path, decoding):
    import dataclasses

    pytest.importorskip("torch")
    from arabert_pipeline.qa.transformer.model import QAModel
    from test_pipeline import PLANTED_WRITTEN, build_model

    qa = QAModel.load(build_model(tmp_path / "model", "arabertv02", planted=True, max_seq_length=96, doc_stride=32))
    qa.settings = dataclasses.replace(qa.settings, decoding=decoding, calibration=None)
    example = [{"question": "إلى أين وصلنا؟", "context": f"سافرنا طويلا ثم وصلنا إلى {PLANTED_WRITTEN} في المساء."}]
    logits = qa.logits(example)
    raw = qa.decode(logits, top_k=5)[0]
    tables: list = []
    qa.decode(logits, top_k=5, features=tables)
    # Long answers and answers unlike the top span favoured: unchecked, later answers would outscore the first.
    reverse = Calibration("logistic", input="expected-f1", features=("answer-words", "top-span-f1"),
                          weights=(4.0, -4.0), bias=-1.0)
    assert np.any(np.diff(reverse.apply(tables[0][:len(raw)])) > 0)
    qa.settings = dataclasses.replace(qa.settings, calibration=reverse)
    mapped = qa.decode(logits, top_k=5)[0]
    assert [(a.text, a.start, a.end) for a in mapped] == [(a.text, a.start, a.end) for a in raw]
    assert all(b.score <= a.score for a, b in itertools.pairwise(mapped))
    assert mapped[0].score == pytest.approx(float(reverse.apply(tables[0][:1])[0]))


def two_dev_sets(n: int):
    """(features, labels, set of each answer, the expected-F1 input) of two dev sets of n answers each, one with 20%
    easy questions and one with 80% (shifted_questions): the same kinds of question in other shares."""
    hard_x, hard_y = shifted_questions(n, 0.2, seed=2)
    easy_x, easy_y = shifted_questions(n, 0.8, seed=3)
    x, y = np.concatenate([hard_x, easy_x]), np.concatenate([hard_y, easy_y])
    return x, y, np.repeat([0, 1], n), {"expected-f1": 1 / (1 + np.exp(-x[:, 0]))}


def test_with_two_dev_sets_the_map_is_chosen_by_leaving_one_set_out():
    x, y, groups, expected = two_dev_sets(1500)
    calibration, report = choose_calibration(expected, y, features=x, groups=groups)
    assert report["scheme"] == "leave one dev set out" and report["folds"] == 2
    assert calibration.method == report["method"] == "logistic" and report["input"] == "features"
    one_input = min(row["brier"] for row in report["candidates"] if row["method"] != "logistic")
    assert report["brier_out_of_fold"] < one_input - 0.01
    assert all(row["ece_held_out"] < 0.1 for row in report["per_set"].values())  # capped at 0.8: not 0
    # Without features, the one-input maps alone; without groups, random folds.
    plain, report = choose_calibration(expected, y)
    assert plain.method in ("isotonic", "platt") and report["scheme"] == "5 random folds"
    with pytest.raises(ConfigError, match="needs the answers' features"):
        choose_calibration(expected, y, "logistic")


def test_the_features_say_whether_the_answer_is_the_transformers_or_the_readers_own_span(tmp_path):
    import dataclasses

    pytest.importorskip("torch")
    from arabert_pipeline.qa.transformer.calibration import FEATURES
    from arabert_pipeline.qa.transformer.model import QAModel
    from test_pipeline import PLANTED_WRITTEN, build_model

    qa = QAModel.load(build_model(tmp_path / "model", "arabertv02", planted=True, max_seq_length=96, doc_stride=32))
    example = [{"question": "إلى أين وصلنا؟", "context": f"سافرنا طويلا ثم وصلنا إلى {PLANTED_WRITTEN} في المساء."}]
    logits = qa.logits(example)
    text = logits.prepared[0][1].text  # the preprocessed context the reader's scores index
    word = text.index("المساء")
    start, end = np.full(len(text), -30.0, dtype=np.float32), np.full(len(text), -30.0, dtype=np.float32)
    start[word:word + len("المساء")] = end[word:word + len("المساء")] = 0.0  # a reader sure of "المساء"
    settings = dataclasses.replace(qa.settings, reader_weight=1.0, decoding="expected-f1", calibration=None)
    tables: list = []
    found = qa.decode(logits, top_k=20, settings=settings, reader_scores=[(start, end)], features=tables)[0]
    transformer, reader = FEATURES.index("transformer-f1"), FEATURES.index("reader-f1")

    def f1(answer: str, own: str) -> float:  # word F1 of two spans of this context (their words are distinct)
        shared = len(set(answer.split()) & set(own.split()))
        return 2 * shared / (len(answer.split()) + len(own.split()))

    assert len(found) >= 3 and any(a.text == "المساء" for a in found)
    # The transformer's own span: the planted word; the reader's: المساء.
    for answer, row in zip(found, tables[0], strict=True):
        assert row[transformer] == pytest.approx(f1(answer.text, PLANTED_WRITTEN))
        assert row[reader] == pytest.approx(f1(answer.text, "المساء"))
    # Without a reader both read the transformer's span.
    tables = []
    qa.decode(logits, top_k=20, settings=dataclasses.replace(settings, reader_weight=0.0), features=tables)
    assert np.array_equal(tables[0][:, transformer], tables[0][:, reader])


def test_open_questions_by_their_first_words_and_not_by_a_pronoun_alone():
    from arabert_pipeline.qa.transformer.calibration import FEATURES, answer_features, is_open_question

    for question in ("ما هو الحمض النووي؟", "ما هي عاصمة فرنسا؟", "ماهو الضوء؟", "كيف تتكون السحب؟",
                     "لماذا سقطت الدولة؟", "و ماذا فعل بعدها؟"):
        assert is_open_question(question), question
    for question in ("من هو مؤسس الدولة الأموية؟", "من هي أول ملكة؟", "هو من أسس المدينة؟", "أين هي المدينة؟",
                     "متى تأسست المدينة؟", ""):
        assert not is_open_question(question), question
    context = "أسس معاوية بن أبي سفيان الدولة الأموية."
    spans, one = [(0, 3)], np.array([1.0])
    column = FEATURES.index("open-question")
    assert answer_features("من هو مؤسس الدولة الأموية؟", context, spans, one, one, one)[0, column] == 0.0
    assert answer_features("ما هي الدولة الأموية؟", context, spans, one, one, one)[0, column] == 1.0


def test_the_per_set_report_names_the_dev_sets():
    """tune-decoding's calibration report compares the dev sets by their names, not by the passes' indices."""
    from arabert_pipeline.qa.transformer.calibration import FEATURES
    from arabert_pipeline.qa.transformer.decode import Answer
    from arabert_pipeline.qa.transformer.tune import DevAnswers, DevPass, calibrate, dev_answers, dev_set_names

    x, y, groups, expected = two_dev_sets(600)
    _, report = choose_calibration(expected, y, features=x, groups=groups, group_names=("arcd-dev", "mlqa-ar-dev"))
    assert set(report["per_set"]) == {"arcd-dev", "mlqa-ar-dev"}
    assert report["per_set"]["arcd-dev"]["answers"] == 600
    _, unnamed = choose_calibration(expected, y, features=x, groups=groups)
    assert set(unnamed["per_set"]) == {"0", "1"}
    assert unnamed["per_set"]["0"] == report["per_set"]["arcd-dev"]  # the names only

    answers = DevAnswers(np.where(y, 1.0, 0.0), expected, np.zeros(len(y)), np.zeros(0), x, groups,
                         ("arcd-dev", "mlqa-ar-dev"))
    _, report = calibrate(answers, threshold=0.0)
    assert set(report["per_set"]) == {"arcd-dev", "mlqa-ar-dev"}

    # dev_answers records each pass's name; two passes of one name are told apart by their index.
    context = "تأسست مدينة البصرة عام 636 م."
    example = {"id": "q", "question": "متى تأسست البصرة؟", "context": context,
               "answers": {"text": ["636"], "answer_start": [context.index("636")]}}

    class Run(DevPass):
        def answerable(self):
            return self.logits, None

    class Model:
        settings = QASettings()

        def null_margins(self, logits):
            return np.zeros(2)

        def decode(self, logits, settings, reader_scores, features=None):
            if features is not None:
                features.append(np.zeros((1, len(FEATURES))))
            return [[Answer("636", context.index("636"), context.index("636") + 3, 0.9)]]

    passes = [Run([example], None, None, "arcd-dev"), Run([example], None, None, "mlqa-ar-dev")]
    found = dev_answers(Model(), passes)
    assert found.dev_set_names == ("arcd-dev", "mlqa-ar-dev") and list(found.dev_set) == [0, 1]
    assert dev_set_names([Run([], None, None, "a"), Run([], None, None, "a"), Run([], None, None)]) == \
        ("0: a", "1: a", "2: 2")


def test_a_logistic_map_over_a_reader_ranks_the_candidates_once(tmp_path, monkeypatch):
    """decode's transformer-only and reader-only best spans (the features' transformer-f1, reader-f1) come from the
    candidates' one pass, and are the spans candidates() ranks first with the reader weight 0 and READER_ALONE."""
    import dataclasses

    pytest.importorskip("torch")
    from arabert_pipeline.qa.transformer import decode as decoding
    from arabert_pipeline.qa.transformer.calibration import LOGISTIC_FEATURES
    from arabert_pipeline.qa.transformer.model import QAModel
    from test_pipeline import PLANTED_WRITTEN, build_model

    qa = QAModel.load(build_model(tmp_path / "model", "arabertv02", planted=True, max_seq_length=96, doc_stride=32))
    examples = [{"question": "إلى أين وصلنا؟", "context": f"سافرنا طويلا ثم وصلنا إلى {PLANTED_WRITTEN} في المساء."},
                {"question": "متى وصلنا؟", "context": f"وصلنا إلى {PLANTED_WRITTEN} في المساء بعد سفر طويل."}]
    logits = qa.logits(examples)
    scores = []
    for _, aligned in logits.prepared:
        text = aligned.text
        word = text.index("المساء")
        start, end = np.full(len(text), -30.0, dtype=np.float32), np.full(len(text), -30.0, dtype=np.float32)
        start[word:word + len("المساء")] = end[word:word + len("المساء")] = 0.0
        scores.append((start, end))
    logistic = Calibration("logistic", input="expected-f1", features=LOGISTIC_FEATURES, weights=(0.8, 1.2, 0.5, 0.7),
                           bias=-1.0)
    settings = dataclasses.replace(qa.settings, reader_weight=1.0, decoding="expected-f1", calibration=logistic)
    passes = []
    rank = decoding.decode_spans_under
    monkeypatch.setattr(decoding, "decode_spans_under",
                        lambda *a, **k: passes.append(len(k["bonuses"])) or rank(*a, **k))
    found = qa.decode(logits, top_k=5, settings=settings, reader_scores=scores)
    assert passes == [3] and all(found)
    _, own = decoding._candidates(logits, settings, reader_scores=scores, own_best=True)
    for i, weight in enumerate((0.0, decoding.READER_ALONE)):
        alone = dataclasses.replace(settings, reader_weight=weight, decoding="max-score", calibration=None)
        assert [f[0] for f in qa.candidates(logits, settings=alone, reader_scores=scores)] == own[i]
    assert [a.text for a in own[1]] == ["المساء", "المساء"]

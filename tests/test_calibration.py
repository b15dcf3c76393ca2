"""Answer-score calibration: the maps, their choice out of fold, their checks when read back, and their use."""
from __future__ import annotations

import numpy as np
import pytest

from arabert_pipeline.errors import ConfigError
from arabert_pipeline.qa.transformer.calibration import (
    Calibration, choose_calibration, expected_calibration_error, fit, reliability_table,
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
    from test_pipeline import PLANTED_WRITTEN, build_model

    from arabert_pipeline.qa.transformer.model import QAModel

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
    from test_pipeline import PLANTED_WRITTEN, build_model

    from arabert_pipeline.qa.transformer.decode import rank_by_expected_f1
    from arabert_pipeline.qa.transformer.model import QAModel

    qa = QAModel.load(build_model(tmp_path / "model", "arabertv02", planted=True, max_seq_length=96, doc_stride=32))
    qa.settings = dataclasses.replace(qa.settings, decoding="expected-f1", expected_f1_temperature=1.0)
    example = [{"question": "إلى أين وصلنا؟", "context": f"سافرنا طويلا ثم وصلنا إلى {PLANTED_WRITTEN} في المساء."}]
    logits = qa.logits(example)
    raw = qa.decode(logits, top_k=3)[0]
    ranked = qa.candidates(logits, top_k=3)[0]
    _, expected = rank_by_expected_f1(example[0]["context"], [(a.start, a.end) for a in ranked],
                                      [a.score for a in ranked], 1.0)
    by_span = {(a.start, a.end): e for a, e in zip(ranked, expected)}
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

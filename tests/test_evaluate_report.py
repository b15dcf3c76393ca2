"""`arabert-pipeline evaluate` end to end on slices of ARCD-test, the baselines, and the report files."""
from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest

from arabert_pipeline.cli import main
from arabert_pipeline.evaluate import buckets, load, report
from arabert_pipeline.evaluate.metrics import SCORE_KEYS, punkt_sentence_spans
from arabert_pipeline.qa.data import read_squad
from conftest import build_tiny_bert

FAST = ["--resamples", "300"]


def write_slice(path, articles: int = 3):
    data = json.loads(read_squad("arcd-test", misaligned="keep").path.read_text(encoding="utf-8"))
    data["data"] = data["data"][:articles]
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path, read_squad(str(path), misaligned="keep").examples


def first_sentences(examples) -> dict[str, str]:
    answers = {}
    for ex in examples:
        start, end = punkt_sentence_spans(ex["context"])[0]
        answers[ex["id"]] = ex["context"][start:end]
    return answers


def test_question_words_and_answer_lengths():
    cases = {"من هو حمزة بن عبد المطلب؟": "من", "في أي عام ولد؟": "أي", "من أي بلد جاء؟": "أي",
             "بماذا وصفه رسول الله؟": "ما", "متي ولد؟": "متى", "لماذا هاجر؟": "لماذا", "أين يقع النهر؟": "أين",
             "كم عدد السكان؟": "كم", "هل هو متزوج؟": "هل", "اذكر اسمه": buckets.OTHER}
    assert {q: buckets.question_word(q) for q in cases} == cases
    assert [buckets.answer_length_bucket(a) for a in ("نعم", "في 1990", "أ ب ج د", " ".join("x" * 12))] == \
        ["1", "2", "4-5", "11+"]


def test_first_sentence_baseline_on_arcd_test(full_data, capsys):
    examples = read_squad("arcd-test", misaligned="keep").examples
    records = report.score_system(examples, report.baseline_predictions("first-sentence", examples, seed=0))
    summary = report.summarize(records, None, resamples=1000, seed=0)
    means = {key: round(summary["scores"][key]["mean"], 2) for key in SCORE_KEYS}
    with capsys.disabled():
        print(f"\nfirst-sentence baseline, ARCD-test ({len(examples)} questions): {means}")
    assert summary["questions"] == 702 and summary["missing"] == 0
    assert means["soqal_f1"] == pytest.approx(14.5, abs=0.05)  # the reference value for this baseline
    assert 50 < means["soqal_sm"] < 60 and 50 < means["arabic_sm"] < 62
    assert means["soqal_em"] < 1 and means["arabic_em"] < 1


@pytest.mark.slow
def test_cli_end_to_end_with_prediction_files(shared_data, tmp_path, capsys):
    data, examples = write_slice(tmp_path / "arcd-test-slice.json")
    first = tmp_path / "first.json"
    first.write_text(json.dumps(first_sentences(examples), ensure_ascii=False), encoding="utf-8")
    answered = examples[::2]  # gold answers for half of the questions, none for the others
    oracle = tmp_path / "oracle.json"
    oracle.write_text(json.dumps({ex["id"]: {"text": ex["answers"]["text"][0],
                                             "start": ex["answers"]["answer_start"][0]}
                                  for ex in answered}, ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "report"
    code = main(["evaluate", "--predictions", str(oracle), "--predictions", str(first), "--label", "oracle-half",
                 "--data", str(data), "-o", str(out), *FAST])
    assert code == 0
    printed = capsys.readouterr().out
    assert "oracle-half" in printed and "random-sentence" in printed

    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    entry = results["datasets"]["arcd-test-slice"]
    n = len(examples)
    assert entry["questions"] == n and results["reference"] == "oracle-half"
    assert list(entry["systems"]) == ["oracle-half", "first", *report.BASELINES]
    oracle_summary = entry["systems"]["oracle-half"]
    assert oracle_summary["missing"] == n - len(answered)
    for key in SCORE_KEYS:  # every answered question is its own gold answer, every missing one scores 0
        assert oracle_summary["scores"][key]["mean"] == pytest.approx(100 * len(answered) / n)
    first_summary = entry["systems"]["first"]
    assert first_summary["scores"] == entry["systems"]["first-sentence"]["scores"]
    paired = first_summary["paired_vs_reference"]["soqal_em"]
    assert paired["diff"] > 0 and paired["low"] > 0 and paired["p_value"] < 0.05 and paired["mcnemar_p"] < 0.05

    table = (out / "table.md").read_text(encoding="utf-8")
    assert report.MBERT_NOTE in table and "| AraBERTv1 | 30.6 | 62.7 | 92.0 |" in table
    assert "*first-sentence* (baseline)" in table and "Paired differences, oracle-half − system" in table
    rows = list(csv.DictReader((out / "table.csv").open(encoding="utf-8")))
    assert len(rows) == (2 + len(report.BASELINES)) * len(SCORE_KEYS) + 9
    per_question = load.load_per_question(out, "arcd-test-slice", "oracle-half")
    assert len(per_question) == n and sum(r["missing"] for r in per_question) == n - len(answered)
    assert {r["id"] for r in per_question} == {ex["id"] for ex in examples}
    for name in ("metrics", "f1_by_question_word", "f1_by_answer_length"):
        assert (out / "plots" / f"arcd-test-slice_{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert not (out / "predictions").exists()  # no model ran
    assert load.load_results(out)["systems"][1]["info"]["ids_not_evaluated"] == 0


@pytest.mark.slow
def test_cli_with_a_model(shared_data, tmp_path):
    """A tiny random QA model: the run goes through QAModel and saves reusable predictions with offsets."""
    pytest.importorskip("torch")
    from arabert_pipeline.artifacts.metadata import write_metadata

    data, examples = write_slice(tmp_path / "slice.json", articles=1)
    model_dir = build_tiny_bert(tmp_path / "tiny-qa", (ex["context"] for ex in examples), "BertForQuestionAnswering",
                                vocab_size=600, max_positions=512)

    out = tmp_path / "report"
    assert main(["evaluate", "--model", str(model_dir), "--data", str(data), "--baselines", "none", "-o", str(out),
                 *FAST]) == 0
    results = load.load_results(out)
    assert results["systems"][0]["info"]["preprocessing"] == "none"
    assert results["systems"][0]["info"]["hidden_size"] == 64
    saved = json.loads((out / "predictions" / "tiny-qa.json").read_text(encoding="utf-8"))
    contexts = {ex["id"]: ex["context"] for ex in examples}
    assert saved and set(saved) <= set(contexts)
    for qid, answer in saved.items():
        assert contexts[qid][answer["start"]:answer["start"] + len(answer["text"])] == answer["text"]
    # The saved answers score the same when given back as a predictions file.
    again = tmp_path / "again"
    assert main(["evaluate", "--predictions", str(out / "predictions" / "tiny-qa.json"), "--data", str(data),
                 "--baselines", "none", "-o", str(again), *FAST]) == 0
    first = results["datasets"]["slice"]["systems"]["tiny-qa"]["scores"]
    assert load.load_results(again)["datasets"]["slice"]["systems"]["tiny-qa"]["scores"] == first

    # --no-answer: the same questions plus their negatives; at a threshold below every margin nothing is answered.
    write_metadata(model_dir, null_score_diff_threshold=-1000.0)  # the lowest a model may store
    abstaining = tmp_path / "no-answer"
    assert main(["evaluate", "--model", str(model_dir), "--data", str(data), "--baselines", "none", "--no-answer",
                 "-o", str(abstaining), *FAST]) == 0
    row = load.load_results(abstaining)["datasets"]["slice"]["no_answer"]["tiny-qa"]
    assert row["unanswerable"] > 0 and row["answered"] == 0.0 and row["no_ans_accuracy"] == 100.0
    share = row["unanswerable"] / (row["answerable"] + row["unanswerable"])
    assert row["soqal"]["has_ans_f1"] == 0.0 and row["soqal"]["overall_f1"]["mean"] == pytest.approx(100 * share)
    assert row["soqal"]["always_answer_f1"] == pytest.approx(first["soqal_f1"]["mean"] * (1 - share))
    assert "No answer in this context" in (abstaining / "table.md").read_text(encoding="utf-8")

    # --no-answer-data: a SQuAD 2.0 file's unanswerable questions (its answerable one left out), drawn by the limit,
    # measured at the model's threshold and along the curve drawn from the answerable questions' null margins.
    contexts = sorted({ex["context"] for ex in examples})
    negatives = tmp_path / "impossible.json"
    negatives.write_text(json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": [{"id": f"n{i}", "question": "ما اسم مدينة لم يذكرها النص؟", "answers": [],
                                      "is_impossible": True}, {**examples[0], "id": f"a{i}", "is_impossible": False,
                                                               "answers": [{"text": examples[0]["answers"]["text"][0],
                                                                            "answer_start": 0}]}]}
        for i, context in enumerate(contexts)]}]}, ensure_ascii=False), encoding="utf-8")
    write_metadata(model_dir, null_score_diff_threshold=1000.0)  # the highest: every question answered
    curve_out = tmp_path / "no-answer-data"
    assert main(["evaluate", "--model", str(model_dir), "--data", str(data), "--baselines", "none", "--no-answer",
                 "--no-answer-data", str(negatives), "--no-answer-limit", str(len(contexts) - 1),
                 "-o", str(curve_out), *FAST]) == 0
    found = load.load_results(curve_out)["no_answer_data"]["impossible"]
    assert (found["questions"], found["of"]) == (len(contexts) - 1, len(contexts))
    row = found["systems"]["tiny-qa"]
    assert row["answerable"] == len(examples) and row["unanswerable"] == len(contexts) - 1
    assert row["at_model_threshold"]["answered"] == 100.0 and row["at_model_threshold"]["no_ans_accuracy"]["mean"] == 0
    def margins(records):  # None: nothing a threshold could make an answer
        return np.array([np.inf if r["null_margin"] is None else r["null_margin"] for r in records])

    negative_margins = margins(load.load_no_answer(curve_out, "impossible", "tiny-qa"))
    answerable_margins = margins(load.load_per_question(curve_out, "slice", "tiny-qa"))
    for point in row["curve"]:
        assert 100 * np.mean(answerable_margins <= point["threshold"]) >= 100 * point["keep"] - 1e-9
        assert point["no_ans_accuracy"]["mean"] == pytest.approx(100 * np.mean(negative_margins > point["threshold"]))
    # At a threshold amid the negatives' margins, the report refuses what QAModel.predict with allow_no_answer (the
    # path `answer` takes) refuses, counted here question by question.
    finite = negative_margins[np.isfinite(negative_margins)]
    write_metadata(model_dir, null_score_diff_threshold=float((finite.min() + finite.max()) / 2))
    middle = tmp_path / "no-answer-middle"
    assert main(["evaluate", "--model", str(model_dir), "--data", str(data), "--baselines", "none", "--no-answer",
                 "--no-answer-data", str(negatives), "-o", str(middle), *FAST]) == 0
    from arabert_pipeline.qa.data import read_unanswerable
    from arabert_pipeline.qa.transformer.model import QAModel

    refused = [not found for found in QAModel.load(model_dir).predict(read_unanswerable(negatives),
                                                                       allow_no_answer=True)]
    assert 0 < sum(refused) < len(refused) == len(contexts)
    at = load.load_results(middle)["no_answer_data"]["impossible"]["systems"]["tiny-qa"]["at_model_threshold"]
    assert at["no_ans_accuracy"]["mean"] == pytest.approx(100 * np.mean(refused))
    assert "### impossible" in (curve_out / "table.md").read_text(encoding="utf-8")
    assert main(["evaluate", "--model", str(model_dir), "--data", str(data), "--no-answer", "--no-answer-data",
                 str(negatives), str(negatives), "-o", str(tmp_path / "twice"), *FAST]) == 2
    assert main(["evaluate", "--model", str(model_dir), "--data", str(data), "--no-answer-data", str(negatives),
                 "-o", str(tmp_path / "refused"), *FAST]) == 2


@pytest.mark.slow
def test_user_errors_are_clear_and_leave_reports_untouched(shared_data, tmp_path, capsys, monkeypatch):
    data, examples = write_slice(tmp_path / "slice.json", articles=1)
    unrelated = tmp_path / "unrelated.json"
    unrelated.write_text(json.dumps({"no-such-id": "نص"}), encoding="utf-8")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({examples[0]["id"]: 42}), encoding="utf-8")
    out = tmp_path / "report"
    assert main(["evaluate", "--data", str(data), "-o", str(out), *FAST]) == 0
    before = (out / "results.json").read_bytes()
    capsys.readouterr()

    assert main(["evaluate", "--data", str(data), "-o", str(out), *FAST]) == 2
    assert "holds an earlier `arabert-pipeline evaluate` output: pass --overwrite" in capsys.readouterr().err
    replace = ["-o", str(out), "--overwrite"]
    assert main(["evaluate", "--predictions", str(unrelated), "--data", str(data), *replace, *FAST]) == 2
    assert "no answer for any of the" in capsys.readouterr().err
    assert main(["evaluate", "--predictions", str(bad), "--data", str(data), *replace, *FAST]) == 2
    assert f"question {examples[0]['id']}" in capsys.readouterr().err
    assert main(["evaluate", "--data", str(data), "--baselines", "first-sentence,oracle", *replace]) == 2
    assert "unknown baseline" in capsys.readouterr().err
    assert main(["evaluate", "--data", str(data), "--baselines", "none", *replace]) == 2
    assert "nothing to evaluate" in capsys.readouterr().err
    not_a_report = tmp_path / "elsewhere"
    not_a_report.mkdir()
    (not_a_report / "keep.txt").write_text("mine")
    assert main(["evaluate", "--data", str(data), "-o", str(not_a_report), "--overwrite", *FAST]) == 2
    assert "was not written by `arabert-pipeline evaluate` (it holds keep.txt)" in capsys.readouterr().err
    # Issue 13: scoring a report's own predictions into that report would delete them with the old report.
    inside = out / "predictions" / "x.json"
    inside.parent.mkdir()
    inside.write_text(json.dumps({examples[0]["id"]: "نص"}), encoding="utf-8")
    assert main(["evaluate", "--predictions", str(inside), "--data", str(data), *replace, *FAST]) == 2
    assert "contains the input" in capsys.readouterr().err
    shutil.rmtree(inside.parent)

    def broken_plot(*args, **kwargs):
        raise RuntimeError("plotting failed")

    monkeypatch.setattr(report, "plot_dataset", broken_plot)
    with pytest.raises(RuntimeError):
        main(["evaluate", "--data", str(data), *replace, *FAST])
    assert (out / "results.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.slow
def test_pretraining_logs_become_a_table_curves_and_copies(shared_data, tmp_path, capsys):
    data, examples = write_slice(tmp_path / "arcd-test-slice.json", articles=1)
    first = tmp_path / "first.json"
    first.write_text(json.dumps(first_sentences(examples), ensure_ascii=False), encoding="utf-8")
    mlm, electra = tmp_path / "mlm.jsonl", tmp_path / "electra.jsonl"
    mlm.write_text("".join(json.dumps(r) + "\n" for r in [
        {"step": 10, "tokens": 80000, "elapsed": 30.0, "loss": 9.1, "mlm_loss": 9.1},
        {"step": 20, "tokens": 160000, "elapsed": 60.0, "loss": 7.4, "mlm_loss": 7.4},
        {"step": 20, "eval_mlm_loss": 7.25, "eval_mlm_accuracy": 0.125, "eval_mlm_perplexity": 1408.1},
    ]), encoding="utf-8")
    electra.write_text(json.dumps({"step": 10, "tokens": 70000, "elapsed": 33.0, "loss": 30.0,
                                   "generator_loss": 9.5, "rtd_loss": 0.4}) + "\n", encoding="utf-8")
    out = tmp_path / "report"
    assert main(["evaluate", "--predictions", str(first), "--data", str(data), "-o", str(out), *FAST,
                 "--pretraining-log", f"mlm={mlm}", "--pretraining-log", f"electra={electra}"]) == 0
    results = load.load_results(out)
    assert results["pretraining"]["mlm"]["eval"]["eval_mlm_loss"] == 7.25
    assert results["pretraining"]["mlm"]["tokens"] == 160000 and results["pretraining"]["electra"]["eval"] == {}
    table = (out / "table.md").read_text(encoding="utf-8")
    assert "| mlm | 20 | 0.16 M | 1.0 | 7.250 | 1408.100 | 0.125 |" in table
    assert (out / "plots" / "pretraining.png").stat().st_size > 0
    assert (out / "pretraining" / "electra.jsonl").read_text(encoding="utf-8") == electra.read_text(encoding="utf-8")

    capsys.readouterr()
    mlm.write_text('{"step": 1, "loss": 2.0}\nnot json\n', encoding="utf-8")
    assert main(["evaluate", "--predictions", str(first), "--data", str(data), "-o", str(tmp_path / "r2"), *FAST,
                 "--pretraining-log", f"mlm={mlm}"]) == 2
    assert "mlm.jsonl: line 2: not JSON" in capsys.readouterr().err
    assert main(["evaluate", "--data", str(data), "-o", str(tmp_path / "r2"), "--pretraining-log", str(mlm)]) == 2
    assert "write LABEL=PATH/log.jsonl" in capsys.readouterr().err
    assert not (tmp_path / "r2").exists()

"""Classification data and scores (issue 40): a user's CSV / TSV / JSON lines sets read with one-line errors naming the
file and line (a bad row, an unknown label, an empty file), and the scores, alone and in `evaluate --task
classification`, equal to scikit-learn's on random labels."""
from __future__ import annotations

import json

import numpy as np
import pytest

from arabert_pipeline.classification.data import read_texts
from arabert_pipeline.classification.metrics import classification_report
from arabert_pipeline.errors import InputError

sklearn_metrics = pytest.importorskip("sklearn.metrics")


def write(tmp_path, name: str, content: str):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    return path


def test_csv_tsv_and_json_lines_read_alike(tmp_path):
    expected = [("نص جميل، حقا", "POS"), ("نص\nمن سطرين", "NEG")]
    csv = write(tmp_path, "a.csv", 'text,label\n"نص جميل، حقا",POS\n\n"نص\nمن سطرين", NEG \n')
    tsv = write(tmp_path, "a.tsv", 'label\ttext\nPOS\tنص جميل، حقا\nNEG\t"نص\nمن سطرين"\n')
    jsonl = write(tmp_path, "a.jsonl", "".join(json.dumps({"text": t, "label": y}, ensure_ascii=False) + "\n"
                                               for t, y in expected))
    for path in (csv, tsv, jsonl):
        read = read_texts(path)
        assert [(e["text"], e["label"]) for e in read.examples] == expected
    # An example's id is the line its row starts on (a quoted newline spans two), or a JSON line's own "id".
    assert [e["id"] for e in read_texts(csv).examples] == ["2", "4"]
    named = write(tmp_path, "b.jsonl", '{"id": "t1", "tweet": "رائع", "sentiment": 1}\n')
    assert read_texts(named, text_column="tweet", label_column="sentiment").examples == [
        {"id": "t1", "text": "رائع", "label": "1"}]


@pytest.mark.parametrize("name, content, options, message", [
    ("a.csv", "text,label\nنص,POS\nنص آخر,NEG,زائد\n", {}, r"a\.csv: line 3: 3 fields, but the header has 2"),
    ("a.csv", "text,label\nنص,POS\nنص آخر,NEU\n", {"labels": ["POS", "NEG"]},
     r"a\.csv: line 3: label: unknown label 'NEU' \(labels: NEG, POS\)"),
    ("a.csv", "text,label\nنص,POS\n , NEG\n", {}, r"a\.csv: line 3: text: empty text"),
    ("a.csv", "text,label\nنص,\n", {}, r"a\.csv: line 2: label: empty label"),
    ("a.tsv", "tweet\tlabel\nنص\tPOS\n", {}, r"a\.tsv: line 2: no column 'text' \(the row has tweet, label\)"),
    ("a.csv", "", {}, r"a\.csv: no examples in the file"),
    ("a.csv", "text,label\n\n", {}, r"a\.csv: no examples in the file \(it is empty or holds only a header\)"),
    ("a.jsonl", '{"text": "نص", "label": "POS"}\n{"text": "نص"\n', {}, r"a\.jsonl: line 2: invalid JSON"),
    ("a.jsonl", '{"text": "نص", "label": "POS"}\n["نص", "POS"]\n', {},
     r"a\.jsonl: line 2: expected a JSON object, got list"),
    ("a.jsonl", '{"text": "نص", "label": "POS"}\n{"text": 3, "label": "POS"}\n', {},
     r"a\.jsonl: line 2: text: the text must be a string, got int"),
    ("a.jsonl", '{"id": 1, "text": "نص", "label": "POS"}\n{"id": 1, "text": "نص", "label": "NEG"}\n', {},
     r"a\.jsonl: line 2: id: duplicate id '1' \(first on line 1\)"),
    ("a.txt", "نص\tPOS\n", {}, r"a\.txt: cannot tell the format from the name: pass --format"),
])
def test_bad_rows_are_one_line_errors_naming_file_and_line(tmp_path, name, content, options, message):
    with pytest.raises(InputError, match=message):
        read_texts(write(tmp_path, name, content), **options)


def random_labels(rng, n: int, labels: list[str]) -> tuple[list[str], list[str]]:
    gold = list(rng.choice(labels, n))
    # Predictions right about half the time, so that every score is far from 0 and 100.
    predicted = [g if rng.random() < 0.5 else rng.choice(labels) for g in gold]
    return gold, predicted


@pytest.mark.parametrize("seed", range(5))
def test_scores_are_scikit_learns(seed):
    rng = np.random.default_rng(seed)
    labels = ["NEG", "NEU", "POS"]
    gold, predicted = random_labels(rng, 80, labels)
    if seed == 0:  # a class never predicted: F1 0, counted in the macro mean (zero_division=0)
        predicted = [p if p != "NEU" else "POS" for p in predicted]
    report = classification_report(gold, predicted, labels)
    assert report["accuracy"] == pytest.approx(100 * sklearn_metrics.accuracy_score(gold, predicted))
    assert report["macro_f1"] == pytest.approx(100 * sklearn_metrics.f1_score(
        gold, predicted, labels=labels, average="macro", zero_division=0))
    per_class = sklearn_metrics.f1_score(gold, predicted, labels=labels, average=None, zero_division=0)
    assert [report["per_class"][label]["f1"] for label in labels] == pytest.approx(100 * per_class)
    assert report["f1_pn"] == pytest.approx(100 * (per_class[0] + per_class[2]) / 2)
    precision = sklearn_metrics.precision_score(gold, predicted, labels=labels, average=None, zero_division=0)
    assert [report["per_class"][label]["precision"] for label in labels] == pytest.approx(100 * precision)


def test_evaluate_scores_systems_as_scikit_learn_with_cis_and_paired_differences(tmp_path):
    from arabert_pipeline.evaluate.tasks import TaskEvaluateConfig, run_task_evaluation

    rng = np.random.default_rng(7)
    labels = ["NEG", "NEU", "POS"]
    gold, first = random_labels(rng, 150, labels)
    second = [g if rng.random() < 0.7 else p for g, p in zip(gold, first, strict=True)]  # better than the first
    data = write(tmp_path, "data.jsonl", "".join(json.dumps({"id": i, "text": f"نص {i}", "label": g},
                                                            ensure_ascii=False) + "\n" for i, g in enumerate(gold)))
    files = []
    for name, predicted in (("first", first), ("second", second)):
        files.append(write(tmp_path, f"{name}.jsonl", "".join(json.dumps({"id": str(i), "label": p}) + "\n"
                                                              for i, p in enumerate(predicted))))
    results = run_task_evaluation(TaskEvaluateConfig(
        task="classification", data=[str(data)], out=tmp_path / "out", systems=[("predictions", str(f)) for f in files],
        resamples=500), log=lambda _: None)
    assert results["metrics"] == ["f1_pn", "macro_f1", "accuracy"]
    rows = results["datasets"][str(data)]["systems"]
    for name, predicted in (("first.jsonl", first), ("second.jsonl", second)):
        scores = rows[name]["scores"]
        f1 = sklearn_metrics.f1_score(gold, predicted, labels=labels, average=None, zero_division=0)
        assert scores["f1_pn"] == pytest.approx(100 * (f1[0] + f1[2]) / 2)
        assert scores["macro_f1"] == pytest.approx(100 * f1.mean())
        assert scores["accuracy"] == pytest.approx(100 * sklearn_metrics.accuracy_score(gold, predicted))
        for metric, (low, high) in rows[name]["ci"].items():
            assert low < scores[metric] < high
    paired = rows["second.jsonl"]["vs_reference"]["accuracy"]  # the reference (the first system) minus this one
    assert paired["diff"] == pytest.approx(rows["first.jsonl"]["scores"]["accuracy"]
                                           - rows["second.jsonl"]["scores"]["accuracy"])
    assert paired["low"] < paired["diff"] < paired["high"] < 0 and paired["p_value"] < 0.05


def test_evaluate_reads_a_file_of_any_name_with_format_and_names_a_predicted_label_outside_the_data(tmp_path):
    from arabert_pipeline.cli import main

    data = write(tmp_path, "data.txt", "text,label\nجيد,POS\nسيء,NEG\n")
    predictions = write(tmp_path, "p.jsonl", '{"id": "2", "label": "POSITIVE"}\n{"id": "3", "label": "NEG"}\n')
    argv = ["--debug", "evaluate", "--task", "classification", "--predictions", str(predictions), "--data", str(data),
            "--baselines", "none", "--resamples", "100", "-o", str(tmp_path / "out")]
    with pytest.raises(InputError, match=r"data\.txt: cannot tell the format from the name: pass --format"):
        main(argv)
    with pytest.raises(InputError, match=r"p\.jsonl: line 1: label: label 'POSITIVE' is not a class of the data"):
        main([*argv, "--format", "csv"])


def test_a_file_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "cp1256.csv"
    path.write_bytes("text,label\nجيد,POS\n".encode() + "سيء,NEG\n".encode("cp1256"))
    with pytest.raises(InputError, match=r"cp1256\.csv: line 3: not UTF-8 \(invalid .* at byte 23 of the file\)"):
        read_texts(path)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())  # counted from the file's first byte, mark included
    with pytest.raises(InputError, match=r"cp1256\.csv: line 3: not UTF-8 \(invalid .* at byte 26 of the file\)"):
        read_texts(path)

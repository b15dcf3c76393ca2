"""Nothing silently wrong, round four (issue 52, classes 9–12 and 14–18 and its minor list): the text tasks' inputs
read as written or refused with a one-line error naming the file, line or field — a header naming a column twice, a
stray quote, CR line ends, raw U+2028 in JSON lines, JSON nested past the recursion limit, dev labels no model or
baseline knows, seeds and counts no option means, special and broken files in a classifier's `lexical/`, and a task
model's metadata that does not fit its weights."""
from __future__ import annotations

import io
import json
import re
import shutil

import pytest

from arabert_pipeline.classification.data import read_texts
from arabert_pipeline.errors import InputError

DEEP = "[" * 5_000 + "]" * 5_000


def squad_file(qid: str, question: str, context: str, answer: str) -> dict:
    return {"data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": qid, "question": question, "answers": [{"text": answer, "answer_start": context.index(answer)}]}]}]}]}


def write(tmp_path, name: str, content: str):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8", newline="")
    return path


# 9, 10: CSV / TSV -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, header", [("a.csv", "text,label,label"), ("a.tsv", "label\ttext\tlabel")])
def test_a_header_naming_a_column_twice_is_refused(tmp_path, name, header):
    sep = "," if name.endswith("csv") else "\t"
    path = write(tmp_path, name, header + "\n" + sep.join(["نص", "POS", "NEG"]) + "\n")
    with pytest.raises(InputError, match=rf"a\.{name[-3:]}: line 1: label: the header names column 'label' twice"):
        read_texts(path)


@pytest.mark.parametrize("rows, line", [
    # the stray quote swallows rows 3–4 up to the next quote, inside row 5's text, and the row after it still parses
    (['"مطعم جيد,POS', "خدمة بطيئة,NEG", "سعر مناسب,POS", 'قال "رائع" حقا,POS', "مكان نظيف,POS"], 2),
    # a stray quote that never closes
    (["مطعم جيد,POS", '"خدمة بطيئة,NEG', "سعر مناسب,POS"], 3),
])
def test_a_stray_quote_opening_a_field_is_refused_not_merged(tmp_path, rows, line):
    for name, sep in (("a.csv", ","), ("a.tsv", "\t")):
        path = write(tmp_path, name, "".join(r.replace(",", sep) + "\n" for r in ["text,label", *rows]))
        with pytest.raises(InputError, match=rf"a\.{name[-3:]}: line {line}: not {name[-3:].upper()} .*stray quote"):
            read_texts(path)


def test_quoted_fields_over_several_lines_still_read(tmp_path):
    path = write(tmp_path, "a.csv", 'text,label\n"سطر أول\nسطر ثان, و""اقتباس""",POS\nنص,NEG\n')
    assert [(e["id"], e["text"]) for e in read_texts(path).examples] == [
        ("2", 'سطر أول\nسطر ثان, و"اقتباس"'), ("4", "نص")]


@pytest.mark.parametrize("name", ["a.csv", "a.tsv"])
def test_a_stray_quote_closing_before_a_delimiter_is_refused_not_merged(tmp_path, name):
    # strict mode accepts this: the quote of line 2 closes on line 4 right before a delimiter, so lines 2-4 make one
    # well-formed row whose text holds line 3, itself a whole row (5 rows read as 2, silently)
    sep = "," if name.endswith("csv") else "\t"
    rows = ["text,label", '"hello there,pos', "world,neg", 'third row is long",pos', "last,neg"]
    path = write(tmp_path, name, "".join(r.replace(",", sep) + "\n" for r in rows))
    with pytest.raises(InputError, match=rf"a\.{name[-3:]}: line 2: not {name[-3:].upper()}: .* line 2 runs on to "
                                         r"line 4, and line 3 inside it reads as a row of its own; a stray quote\?"):
        read_texts(path)


# 11: CR line ends -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("ends", ["\r", "\r\n", "\n"])
def test_txt_files_and_stdin_with_any_line_end_are_a_text_a_line(tmp_path, ends):
    from arabert_pipeline.pipeline.taskcli import read_texts as read_task_texts

    data = ends.join(["الخدمة ممتازة", "", "التطبيق بطيء", "نص ثالث"]) + ends
    path = tmp_path / "texts.txt"
    path.write_bytes(data.encode("utf-8"))
    for found in (read_task_texts(path, 1000), read_task_texts(path, 1000, stream=io.BytesIO(data.encode("utf-8")))):
        assert [(r["id"], r["text"]) for r in found] == [(1, "الخدمة ممتازة"), (3, "التطبيق بطيء"), (4, "نص ثالث")]


# 12, 14: JSON lines ---------------------------------------------------------------------------------------------------

def test_json_lines_holding_raw_line_separators_read_whole(tmp_path):
    rows = [{"text": "سطر\u2028فاصل", "label": "POS"}, {"text": "بعد\x85هذا\x0cو", "label": "NEG"},
            {"text": "الأخير", "label": "POS"}]
    path = write(tmp_path, "a.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    assert [(e["id"], e["text"]) for e in read_texts(path).examples] == [(str(i), r["text"])
                                                                        for i, r in enumerate(rows, 1)]
    path.write_text(path.read_text(encoding="utf-8").replace("\n", "\r\n") + '{"text": "x"', encoding="utf-8",
                    newline="")
    with pytest.raises(InputError, match=r"a\.jsonl: line 4: invalid JSON"):  # numbered as an editor numbers them
        read_texts(path)


def test_deeply_nested_json_lines_are_one_line_errors(tmp_path):
    from arabert_pipeline.evaluate.tasks import TaskEvaluateConfig, run_task_evaluation

    data = write(tmp_path, "data.jsonl", '{"text": "جيد", "label": "POS"}\n{"text": ' + DEEP + ', "label": "NEG"}\n')
    with pytest.raises(InputError, match=r"data\.jsonl: line 2: invalid JSON \(nested too deeply\)"):
        read_texts(data)
    data = write(tmp_path, "data.jsonl", '{"text": "جيد", "label": "POS"}\n{"text": "سيء", "label": "NEG"}\n')
    predictions = write(tmp_path, "p.jsonl", '{"id": "1", "label": "POS"}\n{"id": "2", "label": ' + DEEP + "}\n")
    with pytest.raises(InputError, match=r"p\.jsonl: line 2: invalid JSON \(nested too deeply\)"):
        run_task_evaluation(TaskEvaluateConfig(task="classification", data=[str(data)], out=tmp_path / "out",
                                               systems=[("p", str(predictions))], resamples=100), log=lambda _: None)


# 15: dev labels no model or baseline knows ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_task_models(tmp_path_factory):
    """An untrained text classifier (NEG / POS) and tagger (O / B-LOC / I-LOC), torch only: what the checks before
    and while loading need, at no training's cost."""
    pytest.importorskip("torch")
    import task_toys as toys
    from arabert_pipeline.artifacts.metadata import write_metadata
    from conftest import build_tiny_bert

    root = tmp_path_factory.mktemp("round4-models")
    rows = toys.texts(40, 0)
    corpus = [r["text"] for r in rows]
    classifier = build_tiny_bert(root / "cls", corpus, "BertForSequenceClassification", vocab_size=200,
                                 max_positions=64)
    write_metadata(classifier, task="text-classification", labels=["NEG", "POS"], preprocessing="none",
                   max_seq_length=32)
    tagger = build_tiny_bert(root / "ner", corpus, "BertForMaskedLM", vocab_size=200, max_positions=64)
    import transformers

    labels = ["O", "B-LOC", "I-LOC"]
    config = transformers.BertConfig.from_pretrained(tagger, id2label=dict(enumerate(labels)),
                                                     label2id={t: i for i, t in enumerate(labels)})
    transformers.BertForTokenClassification(config).save_pretrained(tagger)
    write_metadata(tagger, task="token-classification", labels=labels, preprocessing="none", max_seq_length=32)
    from arabert_pipeline.finetuning.taskexport import export_task_onnx

    onnx_tagger = root / "ner-onnx"
    shutil.copytree(tagger, onnx_tagger)
    export_task_onnx(onnx_tagger)
    return {"cls": classifier, "ner": tagger, "ner_onnx": onnx_tagger, "rows": rows}


def test_add_lexical_refuses_a_dev_label_outside_the_models_classes_before_loading_it(tiny_task_models, tmp_path,
                                                                                      monkeypatch):
    from arabert_pipeline.classification import model as model_module
    from arabert_pipeline.classification.addlexical import add_lexical

    rows = tiny_task_models["rows"]
    train = write(tmp_path, "train.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows[:30]))
    dev_rows = [*rows[30:], {"text": "نص محايد", "label": "NEU"}]
    dev = write(tmp_path, "dev.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in dev_rows))

    def no_load(*_, **__):
        raise AssertionError("the model was loaded before the sets were checked")

    monkeypatch.setattr(model_module.TextClassifier, "load", no_load)
    with pytest.raises(InputError, match=r"dev\.jsonl: line 11: label: unknown label 'NEU' \(labels: NEG, POS\)"):
        add_lexical(tiny_task_models["cls"], [str(train)], [str(dev)], tmp_path / "out", say=lambda _: None)


def test_evaluate_baselines_refuse_a_dev_label_outside_train_and_data(tmp_path):
    from arabert_pipeline.evaluate.tasks import TaskEvaluateConfig, run_task_evaluation

    train = write(tmp_path, "train.csv", "text,label\nجيد جدا,POS\nسيء جدا,NEG\nرائع,POS\nرديء,NEG\n")
    dev = write(tmp_path, "dev.csv", "text,label\nجيد,POS\nعادي,NEU\n")
    data = write(tmp_path, "data.csv", "text,label\nممتاز,POS\nسيء,NEG\n")
    with pytest.raises(InputError, match=r"dev\.csv: label: label 'NEU' \(id 3\) is not a class of the training or "
                                         r"evaluated data \(NEG, POS\)"):
        run_task_evaluation(TaskEvaluateConfig(task="classification", data=[str(data)], out=tmp_path / "out",
                                               systems=[], train=[str(train)], dev=[str(dev)],
                                               baselines=("tfidf-lr",), resamples=100), log=lambda _: None)


# 16: seeds, resamples, labels and batch sizes no option means -----------------------------------------------------

def _tiny_sets(tmp_path):
    train = write(tmp_path, "train.csv", "text,label\nجيد جدا,POS\nسيء جدا,NEG\nرائع,POS\nرديء,NEG\n")
    data = write(tmp_path, "data.csv", "text,label\nممتاز,POS\nسيء,NEG\n")
    return train, data


@pytest.mark.parametrize("flags, message", [
    (["--seed", "-1"], "--seed -1: use an integer between 0 and 4294967295"),
    (["--seed", "99999999999"], "--seed 99999999999: use an integer between 0 and 4294967295"),
    (["--resamples", "2000000"], "--resamples 2000000: use between 100 and 1,000,000"),
    (["--label", "one", "--label", "two"], "2 --label for 1 --model/--predictions"),
    (["--batch-size", "0"], "--batch-size 0: use at least 1"),
    (["--batch-size", "-5"], "--batch-size -5: use at least 1"),
])
def test_evaluate_task_refuses_numbers_and_labels_no_option_means_before_reading(tmp_path, monkeypatch, capsys,
                                                                                   flags, message):
    from arabert_pipeline.cli import main
    from arabert_pipeline.evaluate import tasks

    train, data = _tiny_sets(tmp_path)
    predictions = write(tmp_path, "p.jsonl", '{"id": "2", "label": "POS"}\n{"id": "3", "label": "NEG"}\n')
    monkeypatch.setattr(tasks.ClassificationTask, "read", lambda *_: pytest.fail("a set was read"))
    code = main(["evaluate", "--task", "classification", "--predictions", str(predictions), "--data", str(data),
                 "--train", str(train), "--baselines", "tfidf-lr", "-o", str(tmp_path / "out"), *flags])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err, err


def test_make_synthetic_qa_refuses_a_seed_before_its_gazetteer_pass(tmp_path, monkeypatch, capsys):
    from arabert_pipeline.cli import main
    from arabert_pipeline.qa import synthetic

    corpus = write(tmp_path, "corpus.txt", "قال الرئيس سلمان العدنان إن المدينة جميلة.\n")
    hold_out = write(tmp_path, "dev.json", json.dumps(squad_file("q1", "عن ماذا النص؟", "نص عن موضوع آخر", "موضوع")))
    monkeypatch.setattr(synthetic, "collect_gazetteers", lambda *_: pytest.fail("the gazetteer pass ran"))
    for seed in ("-1", "99999999999"):
        assert main(["make-synthetic-qa", str(corpus), "-o", str(tmp_path / "out.json"), "--hold-out",
                     str(hold_out), "--seed", seed, "--no-progress"]) == 2
        assert f"--seed {seed}: use an integer between 0 and" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "dev.json"]


def test_add_lexical_refuses_a_seed_before_reading(tiny_task_models, tmp_path, capsys, monkeypatch):
    from arabert_pipeline.classification import data as data_module
    from arabert_pipeline.cli import main

    train, data = _tiny_sets(tmp_path)
    monkeypatch.setattr(data_module, "read_texts", lambda *_, **__: pytest.fail("a set was read"))
    for seed in ("-1", "99999999999"):
        assert main(["add-lexical", str(tiny_task_models["cls"]), "--train", str(train), "--dev", str(data),
                     "-o", str(tmp_path / "out"), "--seed", seed]) == 2
        assert f"--seed {seed}: use an integer between 0 and" in capsys.readouterr().err


# 17: the files of a classifier's lexical/ -----------------------------------------------------------------------------

LOAD_COMPANION = """
from pathlib import Path
from arabert_pipeline.classification.lexical import LexicalCompanion
from arabert_pipeline.errors import ArabertPipelineError
try:
    LexicalCompanion.load(Path({directory!r}), ["NEG", "POS"], "none")
except ArabertPipelineError as exc:
    print("REFUSED", exc)
else:
    print("READ")
"""


@pytest.fixture
def companion(tmp_path):
    import task_toys as toys
    from arabert_pipeline.classification.baselines import fit_baseline
    from arabert_pipeline.classification.lexical import LexicalCompanion

    rows = toys.texts(40, 0)
    baseline = fit_baseline("tfidf-lr", rows, [], ["NEG", "POS"], preprocessing="none", max_word_features=50,
                            max_char_features=200)
    directory = tmp_path / "lexical"
    LexicalCompanion.from_pipeline(baseline.model, "none").save(directory)
    return directory


@pytest.mark.parametrize("name, damage, expected", [
    *[(name, "fifo", "not a regular file (it is a FIFO)") for name in ("lexical.json", "weights.npz")],
    *[(name, "zero", "not a regular file (it is a character device)") for name in ("lexical.json", "weights.npz")],
    ("lexical.json", "truncated", "invalid JSON"),
    ("weights.npz", "truncated", "unreadable (BadZipFile"),
    ("lexical.json", "nested", "invalid JSON (nested too deeply)"),
    ("weights.npz", "npy", "unreadable (ValueError: not an .npz archive"),
])
def test_a_special_or_broken_file_in_lexical_is_a_one_line_error_naming_it(companion, name, damage, expected):
    import os

    import numpy as np

    from test_hostile_round3 import in_child

    path = companion / name
    if damage == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif damage == "zero":
        path.unlink()
        path.symlink_to("/dev/zero")
    elif damage == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif damage == "nested":
        path.write_text(DEEP, encoding="utf-8")
    else:
        with open(path, "wb") as f:
            np.save(f, np.zeros(3))
    code, out = in_child(LOAD_COMPANION.format(directory=str(companion)))
    assert code == 0 and out.startswith(f"REFUSED {path}: ") and expected in out and len(out.splitlines()) == 1, out


# 18: a task model's metadata against its weights ----------------------------------------------------------------------

@pytest.mark.parametrize("model, change, expected", [
    ("ner", {"labels": ["O", "B-LOC"]}, "2 tag names in arabert_pipeline.json 'labels' for a head of 3 outputs"),
    ("ner_onnx", {"labels": ["O", "B-LOC"]}, "2 tag names in arabert_pipeline.json 'labels' for a head of 3 outputs"),
    ("ner", {"labels": ["O", "B-LOC", "I-LOC", "B-ORG"]}, "4 tag names in arabert_pipeline.json 'labels' for a head "
                                                           "of 3 outputs"),
    ("ner", {"labels": ["O", "B-LOC", "B-LOC"]}, "'labels' names 'B-LOC' twice"),
    ("ner_onnx", {"labels": ["O", "O", "I-LOC"]}, "'labels' names 'O' twice"),
    ("cls", {"labels": ["NEG", "NEG"]}, "'labels' names 'NEG' twice"),
    ("cls", {"labels": ["NEG", "NEU", "POS"]}, "3 class names in arabert_pipeline.json 'labels' for a head of 2"),
    *[(model, {"max_seq_length": value}, f"max_seq_length must be an integer between 1 and 64 "
                                          f"(max_position_embeddings in config.json), not {value!r}")
      for model in ("cls", "ner", "ner_onnx") for value in (0, 100_000, 65, "32", 32.0)],
])
def test_task_model_metadata_that_does_not_fit_the_model_is_refused(tiny_task_models, tmp_path, model, change,
                                                                     expected):
    from arabert_pipeline.artifacts.metadata import write_metadata
    from arabert_pipeline.classification.model import TextClassifier
    from arabert_pipeline.errors import ConfigError
    from arabert_pipeline.ner.model import OnnxTokenTagger, TokenTagger

    directory = tmp_path / model
    shutil.copytree(tiny_task_models[model], directory)
    write_metadata(directory, **change)
    load = {"cls": TextClassifier.load, "ner": TokenTagger.load, "ner_onnx": OnnxTokenTagger.load}[model]
    with pytest.raises(ConfigError, match=re.escape(f"{directory}: ") + ".*" + re.escape(expected)):
        load(directory)


def test_task_models_whose_metadata_fits_load(tiny_task_models):
    from arabert_pipeline.classification.model import TextClassifier
    from arabert_pipeline.ner.model import OnnxTokenTagger, TokenTagger

    assert TextClassifier.load(tiny_task_models["cls"]).max_seq_length == 32
    for load in (TokenTagger.load, OnnxTokenTagger.load):
        tagger = load(tiny_task_models["ner" if load is TokenTagger.load else "ner_onnx"])
        assert tagger.labels == ["O", "B-LOC", "I-LOC"] and tagger.max_seq_length == 32


# The minor list -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("verb", ["classify", "tag"])
def test_output_dash_is_stdout_as_for_answer(verb, tmp_path, monkeypatch, capsys):
    from arabert_pipeline.cli import main

    monkeypatch.chdir(tmp_path)
    assert main([verb, "--output", "-", "زار الرئيس مدينة بيروت"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["id"] for line in lines] == [1] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ['{"a": 1}', "NaN", "null", "true", "1.5", "[1]"])
def test_a_json_line_id_that_is_not_a_string_or_an_integer_is_refused(tmp_path, value):
    path = write(tmp_path, "a.jsonl", '{"id": "x", "text": "نص", "label": "POS"}\n'
                                      f'{{"id": {value}, "text": "نص آخر", "label": "NEG"}}\n')
    with pytest.raises(InputError, match=r"a\.jsonl: line 2: id: must be a string or an integer, got "):
        read_texts(path)


def test_only_a_docstart_marker_is_dropped_from_conll(tmp_path):
    from arabert_pipeline.ner.data import read_conll

    path = write(tmp_path, "a.conll", "-DOCSTART- -X- -X- O\n\n-DOCSTART-x\tB-ORG\nزار\tO\n\n-DOCSTART-\tO\n\n"
                                      "-DOCSTART-\tB-MISC\nفي\tO\n\n")
    assert [e["words"] for e in read_conll(path).examples] == [["-DOCSTART-x", "زار"], ["-DOCSTART-", "في"]]


def test_make_synthetic_qa_leaves_no_parts_after_an_input_error(tmp_path, capsys):
    from arabert_pipeline.cli import main

    corpus = write(tmp_path, "corpus.txt", "قال الرئيس سلمان العدنان إن المدينة جميلة.\n")
    hold_out = write(tmp_path, "dev.json", json.dumps(squad_file("q1", "عن ماذا النص؟", "نص عن موضوع آخر", "موضوع")))
    broken_hold_out = write(tmp_path, "broken.json", '{"data": [')
    broken_corpus = tmp_path / "broken.txt"
    broken_corpus.write_bytes("سطر\n".encode() + b"\xff\xfe\n")
    for corpus_file, hold in ((corpus, broken_hold_out), (broken_corpus, hold_out)):
        assert main(["make-synthetic-qa", str(corpus_file), "-o", str(tmp_path / "out.json"), "--hold-out", str(hold),
                     "--no-progress"]) == 2
        assert "broken" in capsys.readouterr().err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.json", "broken.txt", "corpus.txt", "dev.json"]


def test_a_model_onnx_that_is_not_a_regular_file_is_named_not_missing(tiny_task_models, tmp_path):
    import os

    from arabert_pipeline import Pipeline
    from test_hostile_round3 import within

    for source in (tiny_task_models["ner"], tiny_task_models["ner_onnx"]):
        directory = tmp_path / source.name
        shutil.copytree(source, directory)
        (directory / "model.onnx").unlink(missing_ok=True)
        os.mkfifo(directory / "model.onnx")
        for backend in ("auto", "onnx"):
            with within(20), pytest.raises(InputError, match=r"model\.onnx: is a FIFO, not a regular file"):
                Pipeline(str(directory), backend=backend)
    qa = tmp_path / "qa"
    shutil.copytree(tiny_task_models["cls"], qa, ignore=shutil.ignore_patterns("arabert_pipeline.json"))
    os.mkfifo(qa / "model.onnx")
    with within(20), pytest.raises(InputError, match=r"model\.onnx: is a FIFO, not a regular file"):
        Pipeline(str(qa), preprocessing="none")


def test_task_pipelines_are_named_as_given_not_by_the_package_path():
    from arabert_pipeline import Pipeline

    assert Pipeline("arabert-sentiment").source == "arabert-sentiment"
    assert Pipeline("arabert", task="ner").source == "arabert"


@pytest.mark.parametrize("name, task", [("arabert-ner", "qa"), ("arabert-sentiment", "question-answering"),
                                        ("arabert-ner", None)])
def test_a_shipped_task_model_asked_to_answer_questions_is_named_at_once(name, task, monkeypatch):
    import huggingface_hub

    from arabert_pipeline import Pipeline
    from arabert_pipeline.errors import ConfigError
    from arabert_pipeline.pipeline.core import Pipeline as QAPipeline

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *_, **__: pytest.fail("the hub was asked"))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *_, **__: pytest.fail("the hub was asked"))
    expected = f"'{name}' is the shipped {'ner' if 'ner' in name else 'sentiment'} model, not a question-answering one"
    with pytest.raises(ConfigError, match=expected):  # noqa: PT012  either branch is the one call that raises
        if task is None:
            QAPipeline.__init__(object.__new__(QAPipeline), name)
        else:
            Pipeline(name, task=task)


def test_tune_decoding_resolves_a_shipped_models_name(tmp_path, capsys):
    from arabert_pipeline.cli import main

    missing = tmp_path / "no-such-dev.json"
    assert main(["tune-decoding", "arabert-mini", "--dev", str(missing), "-o", str(tmp_path / "tuned")]) == 2
    err = capsys.readouterr().err
    assert "no-such-dev.json" in err and "arabert_pipeline.json not found" not in err, err


def test_model_dir_verbs_refuse_an_output_inside_an_input_model(tiny_task_models, tmp_path):
    """soup, tune-decoding and add-lexical make a model dir from model dirs: one made inside an input (its lock file
    first) would change the run it reads."""
    from arabert_pipeline.classification.addlexical import add_lexical
    from arabert_pipeline.errors import ConfigError
    from arabert_pipeline.qa.transformer.soup import make_soup
    from arabert_pipeline.qa.transformer.tune import tune_model_decoding
    from test_soup import tiny_qa_models

    models = tiny_qa_models(tmp_path, [r["text"] for r in tiny_task_models["rows"]], 2)
    classifier = tmp_path / "cls"
    shutil.copytree(tiny_task_models["cls"], classifier)
    dev = str(tmp_path / "dev.json")
    for model, make in ((models[0], lambda out: make_soup(models, [dev], out, say=lambda _: None)),
                        (models[1], lambda out: tune_model_decoding(models[1], [dev], out)),
                        (classifier, lambda out: add_lexical(classifier, [dev], [dev], out, say=lambda _: None))):
        before = sorted(p.name for p in model.iterdir())
        with pytest.raises(ConfigError, match=rf"-o .*{model.name}/inner is inside the input .*{model.name}: inputs "
                                              "are read, never written"):
            make(model / "inner")
        assert sorted(p.name for p in model.iterdir()) == before

"""Nothing lost, nothing silently wrong, round three (issue 24): special files where inputs belong (a FIFO must not
hang a verb, /dev/zero must not fill the memory, and neither is "no such file"), JSON that breaks the parser in every
reader (SQuAD files, predictions, pretraining logs, sentence_idf.json, preprocess checkpoints), numbers no option
means (NaN, infinity, negative seeds, absurd sizes), report file names that collide, and full disks in writers that
named no file or raised a library's own exception.

Readers of special files run in a child process with a time limit and a 4 GB address space (`in_child`), so that a
regression fails there instead of stalling the suite or filling this machine's memory; full disks run in a child
process under RLIMIT_FSIZE, as in test_hostile_outputs.py.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from arabert_pipeline.artifacts.metadata import read_metadata, write_metadata
from arabert_pipeline.cli import main
from arabert_pipeline.errors import ConfigError, InputError
from test_hostile_outputs import C, Q, one_line_error, run_cli
from test_preprocess_corpus import make_lines, write_text

DEEP = "[" * 100_000 + "]" * 100_000
BIG_INT = "9" * 5000


@contextlib.contextmanager
def within(seconds: int):
    """Fail (instead of hanging the suite) when the block blocks, e.g. on opening a FIFO for reading."""
    def expired(*_):
        raise AssertionError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    return path


@pytest.fixture
def zero_link(tmp_path):
    """A regular-looking name that leads to /dev/zero: endless bytes, never EOF."""
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero on this platform")
    path = tmp_path / "zero.json"
    path.symlink_to("/dev/zero")
    return path


def squad(**qa) -> dict:
    answer = "جنوب الأردن"
    entry = {"id": "q1", "question": Q, "answers": [{"text": answer, "answer_start": C.index(answer)}], **qa}
    return {"data": [{"title": "t", "paragraphs": [{"context": C, "qas": [entry]}]}]}


# Special files as inputs ---------------------------------------------------------------------------------------------

def test_a_fifo_as_metadata_is_refused_at_once_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "arabert_pipeline.json")
    with within(10), pytest.raises(ConfigError, match=r"arabert_pipeline.json: not a regular file \(it is a FIFO\)"):
        read_metadata(tmp_path)


def in_child(code: str) -> tuple[int, str]:
    """Run Python `code` in a child process with 4 GB of address space and a minute: a reader that regresses to
    reading /dev/zero whole, or to waiting on a FIFO, then fails there instead of taking this machine's memory (the
    kernel's OOM killer picks any process) or hanging the suite."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))

    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, preexec_fn=limit,
                              timeout=60, env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=Path(__file__).parent)
    except subprocess.TimeoutExpired:
        raise AssertionError("still blocked after 60 s") from None
    return done.returncode, done.stdout + done.stderr


READERS = """
from arabert_pipeline.errors import InputError
from arabert_pipeline.evaluate.report import load_predictions_file, load_pretraining_log
from arabert_pipeline.pretrain.data import check_corpus_preprocessing
from arabert_pipeline.qa.data import read_squad
from arabert_pipeline.tokenizer.report import read_held_out
path, tokenizer = {path!r}, {tokenizer!r}
for read in (read_squad, load_predictions_file, load_pretraining_log, read_held_out,
             lambda p: check_corpus_preprocessing([p], tokenizer)):
    try:
        read(path)
    except InputError as exc:
        print("REFUSED", exc)
    else:
        print("READ", path)
"""


@pytest.mark.parametrize("special", ["fifo", "zero_link"])
def test_special_files_as_data_inputs_are_named_for_what_they_are(special, request, tmp_path):
    path = request.getfixturevalue(special)
    what = "a FIFO" if special == "fifo" else "a character device"
    write_metadata(tmp_path / "tok", preprocessing="none")
    code, out = in_child(READERS.format(path=str(path), tokenizer=str(tmp_path / "tok")))
    assert code == 0, out
    lines = out.splitlines()
    assert len(lines) == 5 and all(f"is {what}, not a regular file" in line for line in lines), out
    assert "no such" not in out and "not found" not in out


def test_answer_names_a_fifo_given_as_input(fifo, tmp_path, capsys):
    with within(10):
        assert main(["answer", "--model", str(tmp_path / "unused"), "--input", str(fifo),
                     "--output", str(tmp_path / "out.jsonl")]) == 2
    one_line_error(capsys.readouterr().err, "pipe.json: is a FIFO, not a regular file")


# JSON that breaks the parser ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [(DEEP, "nested too deeply"),
                                            ('{"data": ' + BIG_INT + "}", "Exceeds the limit")])
def test_squad_files_that_break_the_json_parser_are_named(tmp_path, text, expected):
    from arabert_pipeline.qa.data import read_squad

    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(InputError, match=f"bad.json: invalid JSON .*{expected}"):
        read_squad(path)
    path.write_text("\ufeff" + json.dumps(squad(), ensure_ascii=False), encoding="utf-8")  # a BOM is still fine
    assert [e["id"] for e in read_squad(path).examples] == ["q1"]


@pytest.mark.parametrize("text, expected", [
    ('{"q1": ' + DEEP + "}", "RecursionError"),
    ('{"q1": {"text": "x", "start": ' + BIG_INT + "}}", "Exceeds the limit"),
    ('{"q1": {"text": "x", "start": true}}', r'expected an answer string or \{"text": str, "start": int\}'),
])
def test_bad_predictions_files_are_one_line_errors(tmp_path, text, expected):
    from arabert_pipeline.evaluate.report import load_predictions_file

    path = tmp_path / "preds.json"
    path.write_text(text)
    with pytest.raises(InputError, match=f"preds.json: .*{expected}"):
        load_predictions_file(path)


def test_a_pretraining_log_line_that_breaks_the_parser_is_named(tmp_path):
    from arabert_pipeline.evaluate.report import load_pretraining_log

    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1, "loss": 2.0}\n' + DEEP + "\n")
    with pytest.raises(InputError, match="log.jsonl: line 2: not JSON"):
        load_pretraining_log(log)


@pytest.mark.parametrize("make, expected", [
    (lambda p: p.symlink_to("/dev/zero"), "is a character device"),
    (lambda p: os.mkfifo(p), "is a FIFO"),
    (lambda p: p.write_text('{"documents": 1, "document_frequency": ' + DEEP + "}"), "nested too deeply"),
    (lambda p: p.write_text('{"documents": -3, "document_frequency": {}}'), "documents must be a non-negative"),
    (lambda p: p.write_text('{"documents": 3, "document_frequency": {"k": "x"}}'), "document_frequency['k']"),
])
def test_a_broken_sentence_idf_table_is_a_config_error(tmp_path, make, expected):
    make(tmp_path / "sentence_idf.json")
    code, out = in_child(f"""
from arabert_pipeline.errors import ConfigError
from arabert_pipeline.qa.transformer.bonuses import read_sentence_idf
try:
    read_sentence_idf({str(tmp_path)!r}, required=True)
except ConfigError as exc:
    print("REFUSED", exc)
""")
    assert code == 0 and out.startswith("REFUSED") and expected in out, out


@pytest.mark.slow  # about half a CPU second: the quick loop keeps this file's cheaper tests
def test_a_broken_preprocess_checkpoint_is_a_one_line_error(tmp_path, capsys):
    corpus = tmp_path / "in.txt"
    write_text(corpus, make_lines(200))
    out = tmp_path / "out.txt"
    args = ["preprocess", str(corpus), "-o", str(out), "--preprocessing", "none", "--no-progress", "--resume"]
    (tmp_path / "out.txt.part").write_text("")
    for state, expected in (("[1]", "expected a JSON object, found list"), (DEEP, "nested too deeply")):
        (tmp_path / "out.txt.part.json").write_text(state)
        assert main(args) == 2
        one_line_error(capsys.readouterr().err, "out.txt.part.json", expected, "remove")
    # The checkpoint of this very run (its fingerprint matches) with a counter edited by hand.
    (tmp_path / "out.txt.part").unlink()
    (tmp_path / "out.txt.part.json").unlink()
    assert run_cli(args[:-1] + ["--chunk-lines", "5", "--checkpoint-chunks", "1"], file_size_limit=10_000)[0] == 2
    state = json.loads((tmp_path / "out.txt.part.json").read_text())
    state["report"]["lines"] = "many"
    (tmp_path / "out.txt.part.json").write_text(json.dumps(state))
    assert main(args + ["--chunk-lines", "5", "--checkpoint-chunks", "1"]) == 2
    one_line_error(capsys.readouterr().err, "out.txt.part.json: a field is missing or of the wrong type")


# Numbers no option means --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, expected", [
    (["finetune", "--model", "m", "-o", "o", "--train", "t.json", "--lr", "nan"], "--lr nan: must be a finite number"),
    (["pretrain", "--tokenizer", "t", "--corpus", "c.txt", "-o", "o", "--weight-decay", "inf"], "--weight-decay inf"),
    (["train-tokenizer", "c.txt", "-o", "o", "--character-coverage", "nan"], "--character-coverage nan"),
])
def test_nan_and_infinity_are_refused_for_every_verb(argv, expected, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert expected in capsys.readouterr().err


@pytest.mark.parametrize("field, value, expected", [
    ("lr", -1.0, "lr must be a finite number ≥ 0"), ("seed", -1, "seed must be between 0 and"),
    ("seed", 2**64, "seed must be between 0 and"), ("save_every", -1, "save_every must be ≥ 0"),
    ("warmup", float("nan"), "warmup must be a finite number"),
])
def test_training_loop_numbers_are_checked_before_any_setup(field, value, expected):
    from arabert_pipeline.training import LoopSettings

    with pytest.raises(ConfigError, match=expected):
        LoopSettings(**{"output": "o", "lr": 1e-4, "warmup": 0.1, "seed": 0, field: value})


@pytest.mark.parametrize("field, value, expected", [
    ("seed", -1, "seed must be between"), ("seed", 10**20, "seed must be between"),
    ("vocab_size", 10**11, "is more than the"), ("threads", 100_000, "threads must be at most 1024"),
    ("min_frequency", 0, "min_frequency must be at least 1"), ("min_frequency", -1, "min_frequency must be at least 1"),
])
def test_train_tokenizer_numbers_beyond_the_trainers_limits(tmp_path, field, value, expected):
    from arabert_pipeline.tokenizer.train import TokenizerConfig, _check_config

    config = TokenizerConfig(inputs=["c.txt"], output_dir=str(tmp_path / "tk"), vocab_size=300)
    setattr(config, field, value)
    with pytest.raises(ConfigError, match=expected):
        _check_config(config)


def test_preprocess_refuses_thousands_of_workers(tmp_path):
    # The check itself, not the verb: should it regress, the verb would start the workers (a fork bomb).
    from arabert_pipeline.preprocess.corpus import CorpusConfig, _validate

    corpus = tmp_path / "in.txt"
    write_text(corpus, make_lines(10))
    config = CorpusConfig([str(corpus)], str(tmp_path / "o.txt"), preprocessing="none", workers=100_000)
    with pytest.raises(ConfigError, match="workers must be at most"):
        _validate(config, [corpus], tmp_path / "o.txt")
    _validate(dataclasses.replace(config, workers=2), [corpus], tmp_path / "o.txt")


@pytest.mark.parametrize("change, expected", [
    (dict(resamples=10**11), "--resamples"), (dict(seed=-1), "--seed -1"), (dict(batch_size=0), "--batch-size 0"),
    (dict(labels=["a/b", "a_b"]), "make the same file name 'a_b'"), (dict(labels=["", "b"]), "an empty --label"),
])
def test_evaluate_settings_and_colliding_labels_fail_before_any_work(tmp_path, change, expected):
    from arabert_pipeline.evaluate.report import EvaluateConfig, _systems

    systems = [("predictions", str(tmp_path / "one.json")), ("predictions", str(tmp_path / "two.json"))]
    config = EvaluateConfig(data=["x.json"], out=tmp_path / "ev", systems=systems, baselines=(), resamples=100)
    for name, value in change.items():
        setattr(config, name, value)
    with pytest.raises(ConfigError, match=expected):
        _systems(config)


# Full disks ---------------------------------------------------------------------------------------------------------

def test_a_rust_library_s_failed_write_becomes_an_os_error_naming_the_output(tmp_path):
    from arabert_pipeline.artifacts.writes import naming_io_errors

    class SafetensorError(Exception):
        pass

    with pytest.raises(OSError) as caught, naming_io_errors(tmp_path / "model"):  # noqa: PT011  errno checked below
        raise SafetensorError("Error while serializing: I/O error: File too large (os error 27)")
    assert caught.value.errno == 27 and caught.value.filename == str(tmp_path / "model")
    with pytest.raises(ValueError, match="unrelated"), naming_io_errors(tmp_path):
        raise ValueError("unrelated")


@pytest.mark.slow
def test_finetune_on_a_full_disk_names_its_output(tmp_path):
    from test_pipeline import build_model

    model = build_model(tmp_path / "model", "arabertv02", max_seq_length=96, doc_stride=32)
    data = tmp_path / "squad.json"
    data.write_text(json.dumps(squad(), ensure_ascii=False), encoding="utf-8")
    code, err = run_cli(["finetune", "--model", model, "--train", data, "--eval", data, "-o", tmp_path / "ft",
                         "--epochs", "1", "--no-progress", "--allow-leakage", "--max-seq-length", "96",
                         "--doc-stride", "32"], file_size_limit=100_000)
    assert code == 2, err
    one_line_error(err, "ft", "File too large")


@pytest.mark.slow
def test_evaluate_and_preprocess_on_a_full_disk_name_their_outputs(tmp_path):
    data = tmp_path / "squad.json"
    data.write_text(json.dumps(squad(), ensure_ascii=False), encoding="utf-8")
    predictions = tmp_path / "preds.json"
    predictions.write_text(json.dumps({"q1": "جنوب الأردن"}, ensure_ascii=False), encoding="utf-8")
    code, err = run_cli(["evaluate", "--predictions", predictions, "--data", data, "-o", tmp_path / "ev",
                         "--baselines", "none", "--resamples", "100"], file_size_limit=1000)
    assert code == 2, err
    one_line_error(err, f"{tmp_path / 'ev'}: File too large")
    assert not (tmp_path / "ev").exists()
    corpus = tmp_path / "in.txt"
    write_text(corpus, make_lines(200))
    code, err = run_cli(["preprocess", corpus, "-o", tmp_path / "out.txt", "--preprocessing", "none",
                         "--no-progress"], file_size_limit=1000)
    assert code == 2, err
    one_line_error(err, "out.txt.part: File too large")


@pytest.mark.parametrize("name, expected", [
    ("tokenizer.json", r"tokenizer.json: not a regular file \(it is a FIFO\): not a tokenizer file"),
    ("config.json", "config.json is not a regular file")])
def test_model_files_that_are_fifos_are_named_for_what_they_are(tmp_path, name, expected):
    from arabert_pipeline import Pipeline
    from arabert_pipeline.tokenizer.load import load_pretrained_tokenizer

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / name).unlink(missing_ok=True)
    os.mkfifo(model / name)
    with pytest.raises(ConfigError, match=expected):  # noqa: PT012  either branch is the one call that raises
        if name == "config.json":
            Pipeline(model, backend="torch")
        else:
            load_pretrained_tokenizer(model)

"""Bad input found by trying the CLI and the API as a careless or hostile user (issue 13): each is an
ArabertPipelineError naming the file, line or field, exit code 2 and no traceback (unless --debug), and is found
before a model loads wherever it can be."""
from __future__ import annotations

import json
import re
import shutil
import socket

import pytest

from arabert_pipeline.cli import main
from arabert_pipeline.errors import ArabertPipelineError, ConfigError, InputError
from arabert_pipeline.pipeline import cli as answer_cli
from test_pipeline import DEMO, model_dir  # noqa: F401 (fixture)

torch = pytest.importorskip("torch")
Q, C = DEMO[0]["question"], DEMO[0]["context"]


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if the answer verb gets as far as loading a model."""
    def refuse(args):
        raise AssertionError("the model was loaded before the input was checked")

    monkeypatch.setattr(answer_cli, "_load_pipeline", refuse)


def run(*argv) -> int:
    return main([str(a) for a in argv])


def jsonl(path, *records) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")


# answer: input and output files -------------------------------------------------------------------------------

def test_invalid_utf8_in_the_input_names_the_line(tmp_path, capsys, no_model_load):
    source = tmp_path / "in.jsonl"
    source.write_bytes(json.dumps({"question": Q, "context": C}, ensure_ascii=False).encode() + b"\n"
                       + b'{"question": "\xff\xfe", "context": "x"}\n')
    assert run("answer", "--model", tmp_path, "--input", source) == 2
    err = capsys.readouterr().err
    assert f"{source}: line 2: invalid UTF-8 at byte 15" in err and "Traceback" not in err


@pytest.mark.parametrize("field", ["question", "context", "id"])
def test_a_lone_surrogate_is_refused_before_inference(tmp_path, capsys, no_model_load, field):
    source = tmp_path / "in.jsonl"
    record = {"id": "q1", "question": Q, "context": C}
    record[field] = record[field] + "\ud800"
    source.write_text(json.dumps(record) + "\n", encoding="ascii")  # the JSON escape \ud800, valid ASCII
    assert run("answer", "--model", tmp_path, "--input", source, "--output", tmp_path / "out.jsonl") == 2
    assert f"line 1: {field}: holds a lone surrogate U+D800" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()
    assert run("answer", "--model", tmp_path, "--question", Q, "--context", C + "\udcff") == 2
    assert "--context: holds a lone surrogate U+DCFF" in capsys.readouterr().err


def test_output_that_is_the_input_a_directory_or_an_existing_file(tmp_path, capsys, no_model_load):
    source = tmp_path / "in.jsonl"
    jsonl(source, {"question": Q, "context": C})
    before = source.read_bytes()
    assert run("answer", "--model", tmp_path, "--input", source, "--output", source, "--overwrite") == 2
    assert "--output" in (err := capsys.readouterr().err) and "is the input" in err
    assert source.read_bytes() == before
    assert run("answer", "--model", tmp_path, "--input", source, "--output", tmp_path) == 2
    assert f"--output {tmp_path} is a directory" in capsys.readouterr().err
    existing = tmp_path / "answers.jsonl"
    existing.write_text("earlier answers")
    assert run("answer", "--model", tmp_path, "--input", source, "--output", existing) == 2
    assert "exists: pass --overwrite" in capsys.readouterr().err
    assert existing.read_text() == "earlier answers"


@pytest.mark.slow
def test_overwrite_replaces_an_existing_output(model_dir, tmp_path):  # noqa: F811  an imported fixture
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    jsonl(source, {"question": Q, "context": C})
    out.write_text("earlier answers")
    assert run("answer", "--model", model_dir(), "--input", source, "--output", out, "--overwrite") == 0
    assert json.loads(out.read_text(encoding="utf-8"))["id"] == 1


# answer: devices, model directories -----------------------------------------------------------------------------

@pytest.mark.parametrize("device, expected", [
    ("bogus", "device 'bogus' is not a torch device"),
    ("cuda:99", "device 'cuda:99'"),
])
def test_devices_this_machine_lacks(model_dir, capsys, device, expected):  # noqa: F811  an imported fixture
    assert run("answer", "--model", model_dir(), "--question", Q, "--context", C, "--device", device) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_on_a_machine_without_it(model_dir, capsys):  # noqa: F811  an imported fixture
    assert run("answer", "--model", model_dir(), "--question", Q, "--context", C, "--device", "cuda") == 2
    assert "device 'cuda' is not available on this machine" in capsys.readouterr().err


def _edit_json(path, change):
    path.write_text(json.dumps(change(json.loads(path.read_text(encoding="utf-8")))), encoding="utf-8")


def _set(key, value):
    def change(data):
        data[key] = value
        return data
    return change


BROKEN_MODELS = {
    "metadata-array": (lambda d: (d / "arabert_pipeline.json").write_text("[1, 2]"),
                       "arabert_pipeline.json: expected a JSON object, found list"),
    "n-best-text": (lambda d: _edit_json(d / "arabert_pipeline.json", _set("n_best", "abc")),
                    "arabert_pipeline.json: n_best must be a int, not 'abc'"),
    "negative-stride": (lambda d: _edit_json(d / "arabert_pipeline.json", _set("doc_stride", -5)),
                        "arabert_pipeline.json: doc_stride must be between 1 and 8,192, got -5"),
    "truncated-weights": (lambda d: (d / "model.safetensors").write_bytes(
        (d / "model.safetensors").read_bytes()[:5000]), "model.safetensors: not a readable safetensors file"),
    "hidden-size": (lambda d: _edit_json(d / "config.json", _set("hidden_size", 32)),
                    "config.json: hidden_size 32 does not fit the weights"),
    "invalid-config": (lambda d: (d / "config.json").write_text("{bad"), "config.json: invalid JSON"),
    "config-array": (lambda d: (d / "config.json").write_text("[]"), "config.json: expected a JSON object"),
    # Sizes in config.json that disagree with the weights: transformers only warns and builds another model. They are
    # compared with the weights file's header before anything is built (issue 60).
    "fewer-layers": (lambda d: _edit_json(d / "config.json", _set("num_hidden_layers", 1)),
                     "config.json: num_hidden_layers is 1, but"),
    "more-layers": (lambda d: _edit_json(d / "config.json", _set("num_hidden_layers", 3)),
                    "config.json: num_hidden_layers is 3, but"),
    "negative-layers": (lambda d: _edit_json(d / "config.json", _set("num_hidden_layers", -1)),
                        "config.json: num_hidden_layers must be an integer ≥ 0, not -1"),
    "vocab-size-text": (lambda d: _edit_json(d / "config.json", _set("vocab_size", "32000")),
                        "config.json: vocab_size must be an integer ≥ 1, not '32000'"),
    # Numbers in arabert_pipeline.json that would turn scores into NaN, never abstain, or crash on a long context.
    "prior-infinite": (lambda d: _edit_json(d / "arabert_pipeline.json", _set("sentence_prior", float("inf"))),
                       "sentence_prior must be a finite number between 0 and 1000, got inf"),
    "prior-huge": (lambda d: _edit_json(d / "arabert_pipeline.json", _set("sentence_prior", 1e308)),
                   "sentence_prior must be a finite number between 0 and 1000"),
    "prior-nan": (lambda d: _edit_json(d / "arabert_pipeline.json", _set("sentence_prior", float("nan"))),
                  "sentence_prior must be a finite number"),
    "threshold-nan": (lambda d: _edit_json(d / "arabert_pipeline.json", _set("null_score_diff_threshold",
                                                                              float("nan"))),
                      "null_score_diff_threshold must be a finite number"),
    "window-beyond-positions": (lambda d: _edit_json(d / "arabert_pipeline.json", _set("max_seq_length", 1000)),
                                "max_seq_length 1000 exceeds the model's 512 positions"),
    "window-absurd": (lambda d: _edit_json(d / "arabert_pipeline.json", _set("max_seq_length", 10**9)),
                      "max_seq_length must be between 1 and 8,192"),
    "stride-beyond-window": (lambda d: _edit_json(d / "arabert_pipeline.json", _set("doc_stride", 96)),
                             "doc_stride (96) must be below max_seq_length (96)"),
    # Metadata that is no small regular file of JSON.
    "metadata-dev-zero": (lambda d: ((d / "arabert_pipeline.json").unlink(),
                                     (d / "arabert_pipeline.json").symlink_to("/dev/zero")),
                          "arabert_pipeline.json: not a regular file"),
    "metadata-huge": (lambda d: (d / "arabert_pipeline.json").write_text("{" + " " * (64 * 2**20) + "}"),
                      "more than the 67,108,864 such a file may have"),
    "metadata-long-int": (lambda d: (d / "arabert_pipeline.json").write_text('{"n_best": ' + "9" * 5000 + "}"),
                          "arabert_pipeline.json: invalid JSON (Exceeds the limit"),
    "metadata-deep": (lambda d: (d / "arabert_pipeline.json").write_text("[" * 200_000 + "]" * 200_000),
                      "arabert_pipeline.json: invalid JSON (nested too deeply)"),
    "no-tokenizer": (lambda d: [(d / n).unlink() for n in ("tokenizer.json", "tokenizer_config.json", "vocab.txt")],
                     "holds no tokenizer files"),
    "other-tokenizer": (lambda d: [(d / "tokenizer.json").unlink(),
                                   (d / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nفي\n")],
                        "the tokenizer has 6 tokens but the model has"),
}


@pytest.mark.parametrize("name", list(BROKEN_MODELS))
def test_broken_model_directories_are_named(model_dir, tmp_path, capsys, name):  # noqa: F811  an imported fixture
    from arabert_pipeline import Pipeline

    broken = tmp_path / name
    shutil.copytree(model_dir(), broken)
    damage, expected = BROKEN_MODELS[name]
    damage(broken)
    assert run("answer", "--model", broken, "--question", Q, "--context", C) == 2
    err = capsys.readouterr().err
    assert expected in err and str(broken) in err and "Traceback" not in err
    with pytest.raises(ArabertPipelineError, match=re.escape(expected)):
        Pipeline(broken)
    with pytest.raises(ArabertPipelineError):
        run("--debug", "answer", "--model", broken, "--question", Q, "--context", C)


def test_evaluate_refuses_a_model_without_its_tokenizer(model_dir, tmp_path, capsys):  # noqa: F811  an imported fixture
    broken = tmp_path / "bare"
    shutil.copytree(model_dir(), broken, ignore=shutil.ignore_patterns("tokenizer*", "vocab.txt"))
    squad = tmp_path / "demo.json"
    squad.write_text(json.dumps({"version": "1.1", "data": [{"title": "demo", "paragraphs": [
        {"context": e["context"], "qas": [{"id": e["id"], "question": e["question"],
                                           "answers": [{"text": e["answers"]["text"][0],
                                                        "answer_start": e["answers"]["answer_start"][0]}]}]}
        for e in DEMO]}]}, ensure_ascii=False), encoding="utf-8")
    assert run("evaluate", "--model", broken, "--data", squad, "-o", tmp_path / "report", "--baselines", "none",
               "--resamples", "100") == 2
    assert "bare holds no tokenizer files" in capsys.readouterr().err
    assert not (tmp_path / "report").exists()


def test_a_mistyped_local_path_fails_at_once_without_network(tmp_path, monkeypatch, capsys):
    def no_network(*args, **kwargs):
        raise AssertionError(f"network used: {args}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    for typo in ("runs/qa-smal", "./qa-smal", "runs/x/qa-smal"):
        assert run("answer", "--model", typo, "--question", Q, "--context", C) == 2
        assert f"model directory {typo} does not exist" in capsys.readouterr().err
    from arabert_pipeline.qa.transformer.finetune import FinetuneConfig, run_finetune

    with pytest.raises(ConfigError, match="model directory runs/qa-smal does not exist"):
        run_finetune(FinetuneConfig(model="runs/qa-smal", output="out", train=["x.json"]), log=lambda message: None)


def test_debug_shows_the_traceback(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        run("--debug", "answer", "--input", tmp_path / "missing.jsonl")
    assert run("answer", "--input", tmp_path / "missing.jsonl") == 2

"""`arabert-pipeline weights` (finetuning/weightscli.py), which `export-onnx --standalone`'s error on an int8-row model
dir sends users to: a plain copy (--plain OUT) or int8 rows in place (--int8-rows), each written whole under a
temporary name and a lock; bad input is a one-line error naming the path, and nothing the user had is changed."""
from __future__ import annotations

import json
import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from arabert_pipeline.cli import main
from arabert_pipeline.outputs import OutputLock
from arabert_pipeline.weights.header import storage_of
from arabert_pipeline.weights.rows import INT8_ROWS
from arabert_pipeline.weights.shared_tokenizer import SHARED_TOKENIZER_FILE
from conftest import REPO, build_tiny_bert

torch = pytest.importorskip("torch")

TEXTS = ["ذهب الولد إلى المدرسة", "قرأ الطالب الكتاب في المكتبة", "زار الرئيس مدينة بيروت"]


LARGE = "bert.encoder.layer.0.intermediate.dense.weight"  # 1024 x 64: of the size stored in int8 rows


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A random BERT MLM model dir whose feed-forward weights are large enough for int8 rows (weights.MIN_ELEMENTS)."""
    from transformers import BertConfig, BertForMaskedLM

    directory = build_tiny_bert(tmp_path_factory.mktemp("weights-verb") / "model", TEXTS, "BertForMaskedLM",
                                vocab_size=100, max_positions=64)
    config = BertConfig.from_pretrained(directory)
    config.intermediate_size = 1024
    torch.manual_seed(0)
    BertForMaskedLM(config).save_pretrained(directory)
    return directory


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def one_line_error(capsys, *argv: str) -> str:
    assert main(["weights", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("arabert-pipeline weights: error: ") and err.count("\n") == 1, err
    return err


def file_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.fixture
def umask_027():
    previous = os.umask(0o027)
    yield 0o640
    os.umask(previous)


def test_int8_rows_then_plain_round_trip_with_files_that_follow_the_umask(tiny, tmp_path, capsys, umask_027):
    from transformers import AutoModelForMaskedLM

    model = tmp_path / "model"
    shutil.copytree(tiny, model)
    original = AutoModelForMaskedLM.from_pretrained(model).state_dict()
    assert main(["weights", str(model), "--int8-rows"]) == 0
    assert "tensors in int8 rows" in capsys.readouterr().out
    assert storage_of(model / "model.safetensors") == INT8_ROWS
    assert file_mode(model / "model.safetensors") == umask_027  # not safetensors' 0600
    assert not [p.name for p in model.iterdir() if p.name.startswith(".")]  # no temporary, no lock left

    out = tmp_path / "plain"
    assert main(["weights", str(model), "--plain", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert storage_of(out / "model.safetensors") is None
    assert {file_mode(p) for p in out.iterdir()} == {umask_027}  # weights as the config beside them
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    plain = AutoModelForMaskedLM.from_pretrained(out).state_dict()  # transformers alone
    assert not torch.equal(plain[LARGE], original[LARGE])  # int8 rows, widened
    step = original[LARGE].abs().amax(dim=1, keepdim=True) / 127
    assert ((plain[LARGE] - original[LARGE]).abs() <= step / 2 + 1e-7).all()
    small = "bert.embeddings.LayerNorm.weight"
    assert torch.equal(plain[small], original[small])


def test_an_existing_out_the_model_dir_or_a_dir_inside_it_is_refused_and_left_as_it_was(tiny, tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(tiny, model)
    before = snapshot(model)
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    assert str(out) in one_line_error(capsys, str(model), "--plain", str(out))
    assert snapshot(out) == {"notes.txt": b"mine"}
    (out / "notes.txt").unlink()
    (out / "model.safetensors").write_bytes(b"an earlier copy, or anyone's")
    assert "exists" in one_line_error(capsys, str(model), "--plain", str(out))
    for target, words in ((model, "is the input"), (model / "plain", "is inside the input"),
                          (tmp_path, "contains the input")):
        assert words in one_line_error(capsys, str(model), "--plain", str(target))
    assert snapshot(model) == before and not (model / "plain").exists()
    empty = tmp_path / "empty"
    empty.mkdir()  # made beforehand, as users do: written
    assert main(["weights", str(model), "--plain", str(empty)]) == 0


def test_a_dir_without_weights_or_no_dir_at_all_is_named(tiny, tmp_path, capsys):
    assert "no such model directory" in one_line_error(capsys, str(tmp_path / "missing"), "--int8-rows")
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text("{}", encoding="utf-8")
    assert f"{bare} has no model.safetensors" in one_line_error(capsys, str(bare), "--plain", str(tmp_path / "o"))
    (bare / "model.onnx").write_bytes(b"")  # a standalone task model's form: its weights are inside its graph
    assert "inside its model.onnx" in one_line_error(capsys, str(bare), "--int8-rows")
    os.mkfifo(bare / "model.safetensors")
    assert "is a FIFO" in one_line_error(capsys, str(bare), "--plain", str(tmp_path / "o"))
    assert not (tmp_path / "o").exists()


def test_compacting_an_int8_file_or_reading_a_damaged_one_is_named_and_changes_nothing(tiny, tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(tiny, model)
    assert main(["weights", str(model), "--int8-rows"]) == 0
    capsys.readouterr()
    compacted = snapshot(model)
    assert "already stored in int8 rows" in one_line_error(capsys, str(model), "--int8-rows")
    assert snapshot(model) == compacted
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])  # truncated: the header promises more
    assert f"{weights}: not a readable safetensors file" in one_line_error(capsys, str(model), "--plain",
                                                                          str(tmp_path / "o"))
    plain = tmp_path / "plain-model"
    shutil.copytree(tiny, plain)
    (plain / "model.safetensors").write_bytes((plain / "model.safetensors").read_bytes()[:-1000])
    damaged = snapshot(plain)
    assert "not a readable safetensors file" in one_line_error(capsys, str(plain), "--int8-rows")
    assert snapshot(plain) == damaged and not (tmp_path / "o").exists()


def test_a_failed_plain_copy_leaves_no_out_and_the_rerun_writes_it(tiny, tmp_path, capsys):
    """The weights are written first; a tokenizer.shared.json naming a sibling that is not there fails the copy after
    them: nothing is left under OUT's name, and once the sibling is there the same command succeeds."""
    root = tmp_path / "models"
    model = root / "task"
    shutil.copytree(tiny, model)
    text = (model / "tokenizer.json").read_bytes()
    (model / "tokenizer.json").unlink()
    import hashlib

    (model / SHARED_TOKENIZER_FILE).write_text(json.dumps({"file": "../encoder/tokenizer.json",
                                                            "sha256": hashlib.sha256(text).hexdigest()}))
    out = tmp_path / "out"
    assert "encoder" in one_line_error(capsys, str(model), "--plain", str(out))
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["models"]
    (root / "encoder").mkdir()
    (root / "encoder" / "tokenizer.json").write_bytes(text)
    assert main(["weights", str(model), "--plain", str(out)]) == 0
    assert (out / "tokenizer.json").read_bytes() == text and (out / "model.safetensors").is_file()


def test_a_running_copy_locks_out_a_second_and_a_killed_ones_leftovers_are_cleared(tiny, tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(tiny, model)
    out = tmp_path / "out"
    with OutputLock(out, "weights --plain"):
        assert "is in use by PID" in one_line_error(capsys, str(model), "--plain", str(out))
    with OutputLock(model / "model.safetensors", "weights --int8-rows"):
        assert "is in use by PID" in one_line_error(capsys, str(model), "--int8-rows")
    assert storage_of(model / "model.safetensors") is None and not out.exists()
    staged = tmp_path / ".out.k1ll3d.tmp"  # what atomic_directory was building when the run was killed
    staged.mkdir()
    (staged / "model.safetensors").write_bytes(b"half")
    (model / ".model.safetensors.int8.tmp").write_bytes(b"half")
    assert main(["weights", str(model), "--plain", str(out)]) == 0
    assert main(["weights", str(model), "--int8-rows"]) == 0
    assert not staged.exists() and not (model / ".model.safetensors.int8.tmp").exists()


def test_the_former_module_command_says_where_the_verb_is():
    done = subprocess.run([sys.executable, "-m", "arabert_pipeline.weights", "x", "--plain", "y"], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert done.returncode == 1 and "arabert-pipeline weights MODEL_DIR --plain OUT" in done.stderr
    assert "Traceback" not in done.stderr
    # The module that says it (weights/__main__.py), run in this process too.
    with pytest.raises(SystemExit, match="arabert-pipeline weights MODEL_DIR --plain OUT"):
        runpy.run_module("arabert_pipeline.weights.__main__", run_name="__main__")

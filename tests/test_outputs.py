"""What verbs do with an existing output (issue 13): never delete or overwrite what they did not write, refuse an
output that is or holds an input, replace an earlier output only with --overwrite, and refuse a second run on an
output that a first run holds locked."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from arabert_pipeline.cli import main
from arabert_pipeline.errors import ConfigError
from arabert_pipeline.outputs import OutputLock
from arabert_pipeline.preprocess import corpus
from arabert_pipeline.preprocess.corpus import preprocess_corpus
from test_preprocess_corpus import make_lines, write_text

TOKENIZER = ["--model-type", "wordpiece", "--vocab-size", "120", "--preprocessing", "none", "--no-progress"]


def tree(directory) -> dict[str, bytes]:
    """Every file under `directory` (hidden ones included) with its bytes."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "corpus.txt"
    write_text(path, make_lines(60))
    return path


def hold_lock(output, verb):
    """A separate process holding `output`'s lock until killed."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom arabert_pipeline.outputs import OutputLock\n"
         "OutputLock(sys.argv[1], sys.argv[2]).acquire()\nprint('locked', flush=True)\ntime.sleep(120)",
         str(output), verb], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


# train-tokenizer --------------------------------------------------------------------------------------------------

def test_train_tokenizer_never_deletes_the_directory_holding_its_input(tmp_path, text, capsys):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "corpus.txt").write_bytes(text.read_bytes())
    (folder / "notes.md").write_text("mine")
    before = tree(folder)
    for extra in ([], ["--overwrite"]):
        assert main(["train-tokenizer", str(folder / "corpus.txt"), "-o", str(folder), *TOKENIZER, *extra]) == 2
        assert "contains the input" in capsys.readouterr().err
    (folder / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nكتب\n", encoding="utf-8")
    before = tree(folder)
    assert main(["train-tokenizer", "--from-vocab", str(folder / "vocab.txt"), "-o", str(folder),
                 "--preprocessing", "none", "--overwrite"]) == 2
    assert "contains the input" in capsys.readouterr().err
    assert tree(folder) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "d"]


def test_train_tokenizer_refuses_foreign_outputs_and_replaces_its_own_only_with_overwrite(tmp_path, text, capsys):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "config.json").write_text("{}")
    for extra in ([], ["--overwrite"]):
        assert main(["train-tokenizer", str(text), "-o", str(foreign), *TOKENIZER, *extra]) == 2
        err = capsys.readouterr().err
        assert "was not written by `arabert-pipeline train-tokenizer` (it holds config.json)" in err
    assert tree(foreign) == {"config.json": b"{}"}

    a_file = tmp_path / "file"
    a_file.write_text("keep")
    assert main(["train-tokenizer", str(text), "-o", str(a_file), *TOKENIZER]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err
    assert a_file.read_text() == "keep" and not (tmp_path / ".file.old").exists()

    output = tmp_path / "tok"
    assert main(["train-tokenizer", str(text), "-o", str(output), *TOKENIZER]) == 0
    first = tree(output)
    assert main(["train-tokenizer", str(text), "-o", str(output), *TOKENIZER, "--vocab-size", "100"]) == 2
    assert "holds an earlier `arabert-pipeline train-tokenizer` output: pass --overwrite" in capsys.readouterr().err
    assert tree(output) == first
    assert main(["train-tokenizer", str(text), "-o", str(output), *TOKENIZER, "--vocab-size", "100",
                 "--overwrite"]) == 0
    assert tree(output) != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "file", "mine", "tok"]  # no lock, no temp


def test_train_tokenizer_is_refused_while_another_run_holds_the_output(tmp_path, text, capsys):
    output = tmp_path / "tok"
    holder = hold_lock(output, "train-tokenizer")
    try:
        assert main(["train-tokenizer", str(text), "-o", str(output), *TOKENIZER]) == 2
        assert f"{output} is in use by PID {holder.pid}" in capsys.readouterr().err
        assert not output.exists()
    finally:
        holder.kill()
        holder.wait(60)
    assert main(["train-tokenizer", str(text), "-o", str(output), *TOKENIZER]) == 0  # a dead holder blocks nothing


def test_tokenizer_report_files_are_not_overwritten_without_overwrite(tmp_path, text, capsys):
    tokenizer = tmp_path / "tok"
    assert main(["train-tokenizer", str(text), "-o", str(tokenizer), *TOKENIZER]) == 0
    prefix = tmp_path / "report"
    (tmp_path / "report.md").write_text("my notes")
    report = ["tokenizer-report", "--tokenizer", str(tokenizer), "--text", str(text), "--no-progress", "-o",
              str(prefix)]
    assert main(report) == 2
    assert "report.md exists: pass --overwrite" in capsys.readouterr().err
    assert (tmp_path / "report.md").read_text() == "my notes" and not (tmp_path / "report.json").exists()
    assert main([*report, "--overwrite"]) == 0
    assert json.loads((tmp_path / "report.json").read_text())["tokenizers"]
    assert main(["tokenizer-report", "--tokenizer", str(tokenizer), "--text", str(tmp_path / "report.md"),
                 "--no-progress", "-o", str(prefix), "--overwrite"]) == 2
    assert "report.md is the input" in capsys.readouterr().err


# preprocess -------------------------------------------------------------------------------------------------------

def test_preprocess_never_overwrites_a_file_it_did_not_write(tmp_path, text, capsys):
    output = tmp_path / "out.txt"
    output.write_text("the user's file")
    for extra in ([], ["--overwrite"]):
        assert main(["preprocess", str(text), "-o", str(output), "--preprocessing", "none", "--no-progress",
                     *extra]) == 2
    err = capsys.readouterr().err
    assert "out.txt exists: pass --overwrite" in err and "was not written by `arabert-pipeline preprocess`" in err
    assert output.read_text() == "the user's file"

    output.unlink()
    assert main(["preprocess", str(text), "-o", str(output), "--preprocessing", "none", "--no-progress"]) == 0
    assert main(["preprocess", str(text), "-o", str(output), "--preprocessing", "none", "--no-progress"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["preprocess", str(text), "-o", str(output), "--preprocessing", "arabertv02", "--no-progress",
                 "--overwrite"]) == 0
    assert json.loads((tmp_path / "out.txt.arabert_pipeline.json").read_text())["preprocessing"] == "arabertv02"

    part = tmp_path / "in.txt.part"
    part.write_text("not an output")
    assert main(["preprocess", str(part), "-o", str(tmp_path / "in.txt"), "--preprocessing", "none"]) == 2
    assert "in.txt.part is the input" in capsys.readouterr().err
    assert part.read_text() == "not an output"


def test_word_cache_errors_never_ask_to_remove_the_users_file(tmp_path, text, capsys):
    mine = tmp_path / "notes.tsv"
    mine.write_text("my notes\n")
    assert main(["preprocess", str(text), "-o", str(tmp_path / "out.txt"), "--word-cache", str(mine),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "is not a word cache" in err and "choose another --word-cache" in err and "emove" not in err
    assert mine.read_text() == "my notes\n"
    assert main(["preprocess", str(text), "-o", str(tmp_path / "out.txt"), "--word-cache", str(text)]) == 2
    assert f"--word-cache {text} is the input" in capsys.readouterr().err
    assert main(["preprocess", str(text), "-o", str(tmp_path / "out.txt"), "--word-cache",
                 str(tmp_path / "out.txt")]) == 2
    assert "is the output" in capsys.readouterr().err


def test_a_second_preprocess_run_on_the_same_output_is_refused_while_the_first_runs(tmp_path, monkeypatch, capsys):
    source = tmp_path / "in.txt"
    write_text(source, make_lines(400))
    output = tmp_path / "out.txt"
    save = corpus._save_checkpoint
    attempts = []

    def second_run_during_the_first(*args, **kwargs):
        save(*args, **kwargs)
        if not attempts:
            attempts.append(main(["preprocess", str(source), "-o", str(output), "--preprocessing", "none", "--resume",
                                  "--no-progress"]))

    monkeypatch.setattr(corpus, "_save_checkpoint", second_run_during_the_first)
    report = preprocess_corpus([source], output, preprocessing="none", chunk_lines=50, checkpoint_chunks=1,
                               progress=False)
    assert attempts == [2]
    assert f"{output} is in use by PID {os.getpid()}" in capsys.readouterr().err
    assert report.lines == 400 and output.read_text(encoding="utf-8").count("\n") == 400
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.txt", "out.txt.arabert_pipeline.json"]


def test_lock_is_exclusive_names_its_holder_and_leaves_nothing(tmp_path):
    target = tmp_path / "run"
    with OutputLock(target, "pretrain"), pytest.raises(
            ConfigError, match=r"run is in use by PID \d+ \(another `arabert-pipeline pretrain`"):
        OutputLock(target, "pretrain").acquire()
    assert list(tmp_path.iterdir()) == []
    with OutputLock(target, "pretrain"):  # free again
        pass


# finetune ---------------------------------------------------------------------------------------------------------

def finetune_config(model, output, train, **options):
    from arabert_pipeline.qa.transformer.finetune import FinetuneConfig
    from test_qa_model import SMALL

    return FinetuneConfig(model=str(model), output=str(output), train=[str(train)], epochs=1, **{**SMALL, **options})


@pytest.mark.slow
def test_finetune_output_rules(tiny_mlm, qa_slices, tmp_path):
    from arabert_pipeline.qa.transformer.finetune import run_finetune

    quiet = lambda message: None  # noqa: E731  a one-line local helper
    train, _ = qa_slices
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.json").write_bytes(train.read_bytes())
    with pytest.raises(ConfigError, match="contains the input .*train.json"):
        run_finetune(finetune_config(tiny_mlm, folder, folder / "train.json", overwrite=True), log=quiet)
    with pytest.raises(ConfigError, match="is the input"):
        run_finetune(finetune_config(tiny_mlm, tiny_mlm, train, overwrite=True), log=quiet)

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "model.safetensors").write_text("the user's")
    for resume in (False, True):
        with pytest.raises(ConfigError, match="was not written by `arabert-pipeline finetune`"):
            run_finetune(finetune_config(tiny_mlm, foreign, train, overwrite=True, resume=resume), log=quiet)
    assert tree(foreign) == {"model.safetensors": b"the user's"}

    output = tmp_path / "qa"
    holder = hold_lock(output, "finetune")
    try:
        with pytest.raises(ConfigError, match=f"is in use by PID {holder.pid}"):
            run_finetune(finetune_config(tiny_mlm, output, train), log=quiet)
    finally:
        holder.kill()
        holder.wait(60)
    run_finetune(finetune_config(tiny_mlm, output, train), log=quiet)
    first = tree(output)
    with pytest.raises(ConfigError, match="holds an earlier `arabert-pipeline finetune` output: pass --resume"):
        run_finetune(finetune_config(tiny_mlm, output, train, lr=1e-4), log=quiet)
    with pytest.raises(ConfigError, match="no checkpoint to resume"):
        run_finetune(finetune_config(tiny_mlm, output, train, resume=True), log=quiet)
    assert tree(output) == first
    run_finetune(finetune_config(tiny_mlm, output, train, lr=1e-4, overwrite=True), log=quiet)
    assert json.loads((output / "arabert_pipeline.json").read_text())["finetune"]["lr"] == 1e-4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "foreign", "qa"]


def test_finetune_refuses_a_model_without_its_tokenizer(tiny_mlm, qa_slices, tmp_path):
    import shutil

    from arabert_pipeline.qa.transformer.finetune import run_finetune

    train, _ = qa_slices
    bare = tmp_path / "bare"
    shutil.copytree(tiny_mlm, bare, ignore=shutil.ignore_patterns("tokenizer*", "vocab.txt", "special_tokens*"))
    with pytest.raises(ConfigError, match="bare holds no tokenizer files"):
        run_finetune(finetune_config(bare, tmp_path / "out", train), log=lambda message: None)
    other = tmp_path / "other"
    shutil.copytree(tiny_mlm, other)
    lines = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted({ch for ch in train.read_text() if ch.isalpha()})]
    (other / "vocab.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (other / "tokenizer.json").unlink()
    with pytest.raises(ConfigError, match=rf"other: the tokenizer has {len(lines)} tokens but the model has 2000"):
        run_finetune(finetune_config(other, tmp_path / "out", train), log=lambda message: None)
    assert not (tmp_path / "out").exists()


# pretrain ---------------------------------------------------------------------------------------------------------

@pytest.fixture
def pretrain_setup(tmp_path, text):
    """A tokenizer and a preprocessing-"none" corpus of a few hundred lines, in tmp_path."""
    tokenizer = tmp_path / "tok"
    assert main(["train-tokenizer", str(text), "-o", str(tokenizer), *TOKENIZER]) == 0
    write_text(text, make_lines(400))
    return tokenizer, text


def pretrain_args(tokenizer, corpus, output, *extra):
    return ["pretrain", "--tokenizer", str(tokenizer), "--corpus", str(corpus), "--model-size", "tiny", "-o",
            str(output), "--max-seq-length", "32", "--steps", "4", "--batch-size", "4", "--save-every", "2",
            "--eval-sequences", "4", "--cache-dir", str(output.parent / "cache"), "--no-progress", *extra]


@pytest.mark.slow
def test_pretrain_never_overwrites_a_foreign_directory_and_replaces_its_own_only_with_overwrite(pretrain_setup,
                                                                                                  tmp_path, capsys):
    tokenizer, corpus = pretrain_setup
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"mine": true}')
    for extra in ([], ["--overwrite"], ["--resume"]):
        assert main(pretrain_args(tokenizer, corpus, mine, *extra)) == 2
        assert "was not written by `arabert-pipeline pretrain`" in capsys.readouterr().err
    assert tree(mine) == {"config.json": b'{"mine": true}'}
    assert main(pretrain_args(tokenizer, corpus, tmp_path, "--overwrite")) == 2
    assert "contains the input" in capsys.readouterr().err
    assert main(pretrain_args(tokenizer, corpus, tokenizer, "--overwrite")) == 2
    assert "is the input" in capsys.readouterr().err

    run = tmp_path / "run"
    assert main(pretrain_args(tokenizer, corpus, run)) == 0
    assert main(pretrain_args(tokenizer, corpus, run)) == 2
    assert "holds an earlier `arabert-pipeline pretrain` output: pass --resume" in capsys.readouterr().err
    (run / "checkpoints" / ".step-00000006.abc123.tmp").mkdir()  # left by a kill -9 during a save
    (run / ".final.xyz.tmp").mkdir()
    assert main(pretrain_args(tokenizer, corpus, run, "--overwrite", "--seed", "7")) == 0
    assert json.loads((run / "arabert_pipeline.json").read_text())["pretrain"]["config"]["seed"] == 7
    assert [p.name for p in run.rglob(".*")] == []
    assert [json.loads(line)["step"] for line in (run / "log.jsonl").read_text().splitlines()] == [4, 4]  # one run

    holder = hold_lock(run, "pretrain")
    try:
        assert main(pretrain_args(tokenizer, corpus, run, "--resume")) == 2
        assert f"is in use by PID {holder.pid}" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait(60)


@pytest.mark.slow
def test_resume_removes_what_a_kill_during_a_save_left(pretrain_setup, tmp_path):
    from arabert_pipeline.pretrain.trainer import pretrain
    from test_pretrain import tiny_config

    tokenizer, corpus = pretrain_setup
    run = tmp_path / "run"
    config = tiny_config(tokenizer, corpus, run, steps=6, save_every=2, batch_size=4, eval_sequences=4)
    assert not pretrain(config, on_step=lambda trainer: setattr(trainer, "stop_signal", 2)
                        if trainer.state.step == 2 else None)
    stale = run / "checkpoints" / ".step-00000004.k9x2.tmp"
    stale.mkdir()
    (stale / "state.pt").write_bytes(b"half")
    config.resume = "latest"
    assert pretrain(config)
    assert not stale.exists() and [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith(".")] == []


def test_pretrain_refuses_a_tokenizer_directory_without_tokenizer_files(pretrain_setup, tmp_path, capsys):
    tokenizer, corpus = pretrain_setup
    for name in ("tokenizer.json", "vocab.txt"):
        (tokenizer / name).unlink()
    assert main(pretrain_args(tokenizer, corpus, tmp_path / "run")) == 2
    assert "tok holds no tokenizer files" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_pretrain_names_a_truncated_compressed_corpus(pretrain_setup, tmp_path, capsys):
    import lzma

    tokenizer, corpus = pretrain_setup
    truncated = tmp_path / "corpus.txt.xz"
    truncated.write_bytes(lzma.compress(corpus.read_bytes())[:-200])
    (tmp_path / "corpus.txt.xz.arabert_pipeline.json").write_text('{"preprocessing": "none"}')
    assert main(pretrain_args(tokenizer, truncated, tmp_path / "run")) == 2
    assert "corpus.txt.xz: line" in capsys.readouterr().err


@pytest.mark.slow
def test_pretrain_names_a_broken_init_from_model(pretrain_setup, tmp_path, capsys):
    import shutil

    tokenizer, corpus = pretrain_setup
    run = tmp_path / "run"
    assert main(pretrain_args(tokenizer, corpus, run, "--steps", "2")) == 0
    truncated, invalid = tmp_path / "truncated", tmp_path / "invalid"
    for copy in (truncated, invalid):
        shutil.copytree(run, copy, ignore=shutil.ignore_patterns("checkpoints", "log.jsonl"))
    (truncated / "model.safetensors").write_bytes((run / "model.safetensors").read_bytes()[:3000])
    (invalid / "config.json").write_text("{bad")
    for model, expected in ((truncated, "truncated/model.safetensors: not a readable safetensors file"),
                            (invalid, "invalid/config.json: invalid JSON")):
        args = [a for a in pretrain_args(tokenizer, corpus, tmp_path / "next") if a not in ("--model-size", "tiny")]
        assert main([*args, "--init-from", str(model)]) == 2
        err = capsys.readouterr().err
        assert re.search(expected, err) and "Traceback" not in err, err


def test_portable_path_keeps_no_machine_path(tmp_path, monkeypatch):
    from arabert_pipeline.artifacts.paths import portable_path

    monkeypatch.setenv("ARABERT_PIPELINE_DATA", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path / "..")
    assert portable_path(tmp_path / "data" / "qa" / "arcd-test.json") == "$ARABERT_PIPELINE_DATA/qa/arcd-test.json"
    assert portable_path(tmp_path / "runs" / "qa") == f"{tmp_path.name}/runs/qa"
    assert portable_path("/elsewhere/runs/qa-model") == "qa-model"
    assert portable_path("runs/qa") == "runs/qa" and portable_path("aubmindlab/bert-base-arabertv02") == \
        "aubmindlab/bert-base-arabertv02"
    # A data root given relative (ARABERT_PIPELINE_DATA=../shared/data) records its files as under the data root too.
    (tmp_path / "data" / "qa").mkdir(parents=True)
    (tmp_path / "data" / "qa" / "arcd-dev.json").write_text("{}", encoding="utf-8")
    monkeypatch.setenv("ARABERT_PIPELINE_DATA", f"{tmp_path.name}/data")
    assert portable_path(f"{tmp_path.name}/data/qa/arcd-dev.json") == "$ARABERT_PIPELINE_DATA/qa/arcd-dev.json"


def test_old_flag_names_still_work_with_a_deprecation_warning(tmp_path, text, capsys):
    output = tmp_path / "out.txt"
    assert main(["preprocess", str(text), "-o", str(output), "--config", "none", "--no-progress"]) == 0
    assert "--config is deprecated" in capsys.readouterr().err and output.read_text(encoding="utf-8")
    from arabert_pipeline.preprocess.corpus import preprocess_corpus

    with pytest.warns(DeprecationWarning, match="config= is deprecated"):
        report = preprocess_corpus([text], tmp_path / "api.txt", config="none", overwrite=False, progress=False)
    assert report.preprocessing == "none"
    assert main(["train-tokenizer", str(output), "--output-dir", str(tmp_path / "tok"), "--model-type", "wordpiece",
                 "--vocab-size", "120", "--preprocess", "none", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "--output-dir is deprecated" in err and "--preprocess is deprecated" in err
    assert (tmp_path / "tok" / "tokenizer.json").is_file()
    from arabert_pipeline.cli import build_parser

    parsed = build_parser().parse_args(["pretrain", "--tokenizer", "t", "--corpus", "c", "-o", "o", "--bf16", "yes"])
    assert parsed.bf16 == "on"
    assert "--bf16 yes is deprecated" in capsys.readouterr().err

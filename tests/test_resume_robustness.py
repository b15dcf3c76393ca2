"""Resuming from damaged or foreign checkpoints, mistyped local paths and unusable preprocess files (issue 24): each is
one line naming the file (and the field or line) with exit code 2, found before any training, and never a traceback,
a hub lookup, a checkpoint named from a bad step or a deleted folder that is not a checkpoint."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from arabert_pipeline.cli import build_parser, main
from arabert_pipeline.errors import ConfigError, InputError
from conftest import REPO, SHARED_DATA, build_tiny_bert
from data_slices import write_first_articles, write_first_documents

torch = pytest.importorskip("torch")
SHARD = SHARED_DATA / "corpus" / "ant-jawharafm-000.txt.xz"


# A tiny pretraining run and a tiny fine-tuning run, each stopped after its first step with a checkpoint -------------

@pytest.fixture(scope="module")
def pretrain_run(tmp_path_factory):
    """(OUT of a tiny pretraining run stopped at step 1 of 3, the command line without -o that continues it)."""
    if not SHARD.exists():
        pytest.skip(f"needs the shared corpus at {SHARD} (set ARABERT_PIPELINE_TEST_DATA to use another folder)")
    import dataclasses

    from arabert_pipeline.pretrain.config import PretrainConfig
    from arabert_pipeline.pretrain.trainer import pretrain
    from arabert_pipeline.tokenizer import train_tokenizer

    torch.set_num_threads(1)
    work = tmp_path_factory.mktemp("resume-pretrain")
    corpus = write_first_documents(SHARD, work / "corpus.txt", 60)
    train_tokenizer([str(corpus)], work / "tok", model_type="wordpiece", vocab_size=500, preprocess="none",
                    threads=1, progress=False)
    argv = ["pretrain", "--tokenizer", str(work / "tok"), "--corpus", str(corpus), "--model-size", "tiny",
            "--max-seq-length", "32", "--steps", "3", "--batch-size", "4", "--eval-sequences", "8", "--eval-every",
            "100", "--log-every", "1", "--save-every", "1", "--keep-checkpoints", "5", "--cache-dir",
            str(work / "cache"), "--no-progress"]
    args = build_parser().parse_args([*argv, "-o", str(work / "run")])
    fields = {f.name for f in dataclasses.fields(PretrainConfig)}
    config = PretrainConfig(**{k: v for k, v in vars(args).items() if k in fields})

    def stop_after_the_first_step(trainer):
        if trainer.state.step == 1:
            trainer.request_stop()

    assert not pretrain(config, on_step=stop_after_the_first_step)
    return work / "run", argv


@pytest.fixture(scope="module")
def finetune_run(shared_data, tmp_path_factory):
    """(OUT of a tiny fine-tuning run stopped at step 1, the command line without -o that continues it)."""
    from arabert_pipeline.qa.data import read_squad
    from arabert_pipeline.qa.transformer.finetune import QATrainer

    torch.set_num_threads(1)
    work = tmp_path_factory.mktemp("resume-finetune")
    train = write_first_articles("arcd-train", work / "train1.json", 1)
    contexts = [e["context"] for e in read_squad(str(train), misaligned="keep").examples]
    model = build_tiny_bert(work / "mlm", contexts, "BertForMaskedLM", vocab_size=300, max_positions=128)
    argv = ["finetune", "--model", str(model), "--train", str(train), "--epochs", "2", "--batch-size", "4",
            "--max-seq-length", "64", "--doc-stride", "32", "--max-question-tokens", "16", "--save-steps", "1",
            "--skip-misaligned", "--no-progress"]
    after_step = QATrainer.after_step

    def stop_after_the_first_step(trainer, board):
        stop = after_step(trainer, board)
        if trainer.state.step == 1:
            trainer.request_stop()
        return stop

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(QATrainer, "after_step", stop_after_the_first_step)
        assert main([*argv, "-o", str(work / "run")]) == 130
    return work / "run", argv


CHECKPOINT = Path("checkpoints") / "step-00000001"


@pytest.fixture(params=["pretrain_run", "finetune_run"], ids=["pretrain", "finetune"])
def stopped_run(request):
    """Each of the two stopped runs in turn (resolved here, before the test's own capture starts)."""
    return request.getfixturevalue(request.param)


def copy_of(run: Path, tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(run, target)
    return target


def resume(argv: list[str], out: Path, capsys) -> tuple[int, str]:
    """The verb's exit code and its stderr's last line (what follows the progress messages)."""
    code = main([*argv, "-o", str(out), "--resume"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, (err.strip().splitlines() or [""])[-1]


# 1. state.pt ----------------------------------------------------------------------------------------------------

def _emptied(saved):
    return {}


def _bare_tensor(saved):
    return torch.zeros(3)


def _without_optimizer(saved):
    return {k: v for k, v in saved.items() if k != "optimizer"}


def _no_process_states(saved):
    return {**saved, "processes": []}


def _rng_as_float(saved):
    return {**saved, "processes": [{**saved["processes"][0], "torch": torch.zeros(3)}]}


def _other_model(saved):
    return {**saved, "model": {"encoder.weight": torch.zeros(2, 2)}}


@pytest.mark.parametrize("damage, expected", [
    pytest.param(_emptied, "model: missing", id="empty"),
    pytest.param(_bare_tensor, "expected the saved model, optimizer and process states, found a Tensor",
                 id="bare-tensor"),
    pytest.param(_without_optimizer, "optimizer: missing", id="no-optimizer"),
    pytest.param(_no_process_states, "processes: holds the states of 0 processes, but the run has 1",
                 id="no-processes"),
    pytest.param(_rng_as_float, "processes[0].torch: expected a random generator state", id="float-rng"),
    pytest.param(_other_model, "model: the weights do not fit this run's model", id="other-model"),
])
def test_a_damaged_state_pt_is_named(stopped_run, damage, expected, tmp_path, capsys):
    run, argv = stopped_run
    out = copy_of(run, tmp_path)
    state = out / CHECKPOINT / "state.pt"
    torch.save(damage(torch.load(state, weights_only=True)), state)
    code, line = resume(argv, out, capsys)
    assert code == 2
    assert line.startswith(f"arabert-pipeline {argv[0]}: error: {state}: {expected}"), line


# 1, 2. trainer_state.json ---------------------------------------------------------------------------------------

def _set_step(value):
    def edit(saved):
        saved["state"]["step"] = value
        return saved
    return edit


def _add(key, value):
    def edit(saved):
        saved[key] = value
        return saved
    return edit


def _drop(*keys):
    def edit(saved):
        record = saved
        for key in keys[:-1]:
            record = record[key]
        del record[keys[-1]]
        return saved
    return edit


@pytest.mark.parametrize("edit, expected", [
    pytest.param(_set_step("5"), 'state.step: expected a non-negative integer, found "5"', id="step-string"),
    pytest.param(_set_step(-4), "state.step: expected a non-negative integer, found -4", id="step-negative"),
    pytest.param(_set_step(1.5), "state.step: expected a non-negative integer, found 1.5", id="step-fraction"),
    pytest.param(_set_step(True), "state.step: expected a non-negative integer, found true", id="step-bool"),
    pytest.param(_set_step(99), "state.step: step 99 is past the run's end", id="step-past-end"),
    pytest.param(_add("note", "best so far"), "note: unknown field", id="unknown-field"),
    pytest.param(_add("state", "step 1"), 'state: expected a JSON object, found "step 1"', id="state-string"),
    pytest.param(_add("processes", "1"), 'processes: expected an integer, found "1"', id="processes-string"),
    pytest.param(_drop("data_key"), "data_key: missing", id="no-data-key"),
    pytest.param(_drop("state", "epoch"), "state.epoch: missing", id="no-epoch"),
    pytest.param(lambda saved: {**saved, "state": {**saved["state"], "speed": 3}}, "state.speed: unknown field",
                 id="unknown-state-field"),
    pytest.param(lambda saved: [saved], "expected a JSON object, found list", id="list"),
])
def test_a_damaged_trainer_state_is_named(stopped_run, edit, expected, tmp_path, capsys):
    run, argv = stopped_run
    out = copy_of(run, tmp_path)
    stored = out / CHECKPOINT / "trainer_state.json"
    stored.write_text(json.dumps(edit(json.loads(stored.read_text(encoding="utf-8")))), encoding="utf-8")
    code, line = resume(argv, out, capsys)
    assert code == 2
    assert line.startswith(f"arabert-pipeline {argv[0]}: error: {stored}: {expected}"), line
    assert [p.name for p in (out / "checkpoints").iterdir() if p.name.startswith("step-")] == [CHECKPOINT.name]


@pytest.mark.parametrize("stopped_run, extra, expected", [
    ("pretrain_run", {"losses": []}, "extra.losses: unknown field"),
    ("finetune_run", {"losses": [], "running": [1.0]}, "extra.dev: missing"),
    ("finetune_run", {"losses": "1.0", "running": [], "dev": []}, "extra.losses: expected a list of numbers"),
    ("finetune_run", {"losses": [], "running": [], "dev": [], "best": 1}, "extra.best: unknown field"),
], indirect=["stopped_run"], ids=["pretrain-unknown", "finetune-missing", "finetune-not-numbers",
                                  "finetune-unknown"])
def test_a_damaged_stage_state_is_named(stopped_run, extra, expected, tmp_path, capsys):
    run, argv = stopped_run
    out = copy_of(run, tmp_path)
    stored = out / CHECKPOINT / "trainer_state.json"
    stored.write_text(json.dumps({**json.loads(stored.read_text(encoding="utf-8")), "extra": extra}),
                      encoding="utf-8")
    code, line = resume(argv, out, capsys)
    assert code == 2
    assert line.startswith(f"arabert-pipeline {argv[0]}: error: {stored}: {expected}"), line


def test_checkpoint_names_come_only_from_non_negative_integer_steps():
    from arabert_pipeline.training import checkpoint_name

    assert checkpoint_name(0) == "step-00000000" and checkpoint_name(4) == "step-00000004"
    for step in (-4, 1.5, "5", True, None):
        with pytest.raises(ConfigError, match="non-negative integer step"):
            checkpoint_name(step)


def test_a_damaged_log_row_is_named(pretrain_run, tmp_path, capsys):
    run, argv = pretrain_run
    out = copy_of(run, tmp_path)
    log = out / "log.jsonl"
    log.write_text('{"loss": 1.0}\n' + log.read_text(encoding="utf-8"), encoding="utf-8")
    code, line = resume(argv, out, capsys)
    assert code == 2
    assert line.startswith(f"arabert-pipeline pretrain: error: {log}: line 1: not a log row with a step"), line


# 3. foreign entries in checkpoints/ -----------------------------------------------------------------------------

def test_only_step_digit_directories_are_checkpoints(tmp_path):
    from arabert_pipeline.training import list_checkpoints

    checkpoints = tmp_path / "checkpoints"
    for name in ("step-10", "step-2", "step-best", "step-٣", "step--0000004", "step-00000005-old", "notes", "step-7"):
        (checkpoints / name).mkdir(parents=True)
        if name != "step-7":  # a directory without its trainer state is no checkpoint either
            (checkpoints / name / "trainer_state.json").write_text("{}", encoding="utf-8")
    (checkpoints / "step-12.txt").write_text("notes", encoding="utf-8")
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-2", "step-10"]


def test_foreign_entries_in_checkpoints_are_neither_resumed_nor_rotated(pretrain_run, tmp_path, capsys):
    run, argv = pretrain_run
    out = copy_of(run, tmp_path)
    checkpoints = out / "checkpoints"
    shutil.copytree(checkpoints / "step-00000001", checkpoints / "step-best")
    (checkpoints / "notes").mkdir()
    (checkpoints / "notes" / "todo.txt").write_text("compare with step-best", encoding="utf-8")
    (checkpoints / "step-12.txt").write_text("eval at 12", encoding="utf-8")
    # A careless parser takes these for the latest checkpoints (int() reads ٣ as 3): their state would stop it.
    for name in ("step-99999999-old", "step-٣"):
        (checkpoints / name).mkdir()
        (checkpoints / name / "trainer_state.json").write_text("{not json", encoding="utf-8")
    foreign = sorted(p.name for p in checkpoints.iterdir() if p.name != "step-00000001")
    # A row torn by a run killed while logging it is not part of the run: resuming drops it.
    with open(out / "log.jsonl", "a", encoding="utf-8") as f:
        f.write('{"step": 2, "lo')

    assert main([*argv, "-o", str(out), "--resume", "--keep-checkpoints", "1"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert sorted(p.name for p in checkpoints.iterdir()) == sorted([*foreign, "step-00000003"])
    assert (checkpoints / "notes" / "todo.txt").read_text(encoding="utf-8") == "compare with step-best"
    assert (checkpoints / "step-best" / "state.pt").is_file()
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [row["step"] for row in rows if "loss" in row] == [1, 2, 3]
    assert (out / "config.json").is_file()


# 4. local-looking paths never reach the hub -----------------------------------------------------------------------

LOADED: list[str] = []  # what offline_in saw built or loaded, in case a verb turned the AssertionError into its own


@pytest.fixture
def offline_in(tmp_path, monkeypatch):
    """cwd = tmp_path, which holds the directory sub/; any network use fails the test, and so does any model,
    tokenizer or ONNX session built or loaded: "at once" means before them, whatever the machine's speed."""
    import transformers

    def no_network(*args, **kwargs):
        raise AssertionError(f"network used: {args}")

    def refuse(what):
        def loading(*args, **kwargs):
            LOADED.append(what)
            raise AssertionError(f"{what} reached before the inputs were checked")
        return loading

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    LOADED.clear()
    monkeypatch.setattr(transformers.PreTrainedModel, "__init__", refuse("a model"))
    monkeypatch.setattr(transformers.PreTrainedTokenizerBase, "__init__", refuse("a tokenizer"))
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", refuse("a model config"))
    try:
        import onnxruntime
    except ImportError:
        pass
    else:
        monkeypatch.setattr(onnxruntime.InferenceSession, "__init__", refuse("an ONNX session"))
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def fails_at_once(capsys, *argv) -> str:
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert not LOADED, LOADED
    assert code == 2 and "Traceback" not in err, err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("typo", ["sub/qa-smal", "./qa-smal", "/nonexistent-dir/qa-smal"])
def test_evaluate_refuses_a_mistyped_model_path(offline_in, capsys, typo):
    squad = offline_in / "dev.json"
    context = "قال الرئيس إن الحكومة ستعمل على خفض الأسعار."
    squad.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": "q1", "question": "ماذا قال الرئيس؟", "answers": [{"text": "خفض الأسعار", "answer_start": 32}]}]}]}]},
        ensure_ascii=False), encoding="utf-8")
    line = fails_at_once(capsys, "evaluate", "--model", typo, "--data", squad, "-o", "report", "--baselines", "none")
    assert f"model directory {typo} does not exist" in line
    assert not (offline_in / "report").exists()


@pytest.mark.parametrize("typo", ["sub/tok", "./tok", "/nonexistent-dir/tok"])
def test_pretrain_refuses_a_mistyped_tokenizer_path(offline_in, capsys, typo):
    line = fails_at_once(capsys, "pretrain", "--tokenizer", typo, "--corpus", "corpus.txt", "--model-size", "tiny",
                         "-o", "out/run")
    assert f"tokenizer directory {typo} does not exist" in line
    assert not (offline_in / "out").exists(), "nothing is written before the inputs are checked"


def test_pretrain_refuses_a_mistyped_init_from_path(offline_in, capsys):
    (offline_in / "tok").mkdir()
    line = fails_at_once(capsys, "pretrain", "--tokenizer", "tok", "--corpus", "corpus.txt", "--init-from",
                         "sub/bert", "-o", "out/run")
    assert "--init-from sub/bert: neither it nor sub/bert/model holds a config.json" in line
    assert not (offline_in / "out").exists()


def test_tokenizer_verbs_refuse_mistyped_paths(offline_in, capsys):
    text = offline_in / "held-out.txt"
    text.write_text("قال الرئيس إن الحكومة ستعمل\n", encoding="utf-8")
    line = fails_at_once(capsys, "tokenizer-report", "--tokenizer", "sub/tok,preprocessing=none", "--text", text)
    assert "sub/tok: no such file or directory" in line
    line = fails_at_once(capsys, "train-tokenizer", "--from-vocab", "sub/vocab", "--preprocessing", "none", "-o",
                         "tok")
    assert "sub/vocab: no such file" in line


# 5. preprocess: the word cache and unwritable places ----------------------------------------------------------

@pytest.fixture
def text(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("قال الرئيس إن الحكومة ستعمل\n\nوكتب بالقلم\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("bad_line, problem", [
    ("كتب".encode(), "0 tabs instead of one"),
    ("كتب\tك+تب\tزائد".encode(), "2 tabs instead of one"),
    (b"\xff\tx", "not UTF-8 (invalid start byte at byte 1 of the line)"),
], ids=["no-tab", "two-tabs", "not-utf8"])
def test_a_damaged_word_cache_names_the_file_and_line(tmp_path, text, capsys, bad_line, problem):
    from arabert_pipeline.preprocess.preprocessor import segmenter_backend
    from arabert_pipeline.preprocess.wordcache import cache_header

    cache = tmp_path / "words.tsv"
    cache.write_bytes(cache_header(segmenter_backend("arabertv2")) + "وكتب\tو+كتب\n".encode() + bad_line
                      + b"\n")
    assert main(["preprocess", str(text), "-o", str(tmp_path / "out.txt"), "--word-cache", str(cache),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"error: {cache}: line 3: damaged word cache: {problem}" in err


def test_word_cache_lines_are_counted_from_the_start_when_read_from_an_offset(tmp_path):
    from arabert_pipeline.preprocess.wordcache import read_new_entries

    cache = tmp_path / "words.tsv"
    cache.write_bytes("#header\nوكتب\tو+كتب\nبالقلم\tب+ال+قلم\nبلا تاب\nناقص\tن".encode())
    with open(cache, "rb") as f:
        offset = len("#header\nوكتب\tو+كتب\n".encode())
        with pytest.raises(InputError, match=r"words\.tsv: line 4: damaged word cache") as error:
            read_new_entries(f, offset)
    assert error.value.line == 4
    cache.write_bytes("#header\nوكتب\tو+كتب\nناقص\tن".encode())  # a torn last line is not damage
    with open(cache, "rb") as f:
        assert read_new_entries(f, len(b"#header\n"))[0] == {"وكتب": "و+كتب"}


def _run_honouring_permissions(argv: list[str], directory: Path, capsys) -> tuple[int, str]:
    """(exit code, stderr) of the CLI in a process for which the read-only `directory` is read-only: this one, or as
    root a child without the capabilities that let root write anywhere; skipped where neither can be had."""
    probe = directory / "probe"
    try:
        probe.write_text("")
    except PermissionError:
        code = main(argv)
        return code, capsys.readouterr().err
    probe.unlink()
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("this process writes into read-only directories (root) and cannot drop that")
    caps = "-dac_override,-dac_read_search,-fowner"
    done = subprocess.run([setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}", sys.executable, "-m",
                           "arabert_pipeline.cli", *argv], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})
    if done.returncode != 0 and done.stderr.startswith("setpriv"):
        pytest.skip(f"setpriv cannot drop root's capabilities here: {done.stderr.strip()}")
    return done.returncode, done.stderr


@pytest.mark.parametrize("target", ["-o", pytest.param("--word-cache", marks=pytest.mark.slow)])
def test_an_unwritable_output_or_word_cache_is_named(tmp_path, text, capsys, target):
    locked = tmp_path / "read-only"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        argv = ["preprocess", str(text), "-o", str(tmp_path / "out.txt"), "--word-cache", str(tmp_path / "w.tsv"),
                "--no-progress"]
        argv[argv.index(target) + 1] = str(locked / "file.txt")
        code, err = _run_honouring_permissions(argv, locked, capsys)
        assert code == 2 and "Traceback" not in err, err
        assert f"arabert-pipeline preprocess: error: {target}: cannot write in {locked}" in err
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o755)

"""Nothing lost, round five (issue 60, classes 2–5 and the minor ones): model directories from strangers. The shared
tokenizer read without bounds; config.json's sizes built before they were compared with the weights; safetensors
headers that gave tracebacks, or blamed model.onnx; reader/ parts that match their checksums but not each other; NaN
row scales, a changed tokenizer its siblings record, tags that are no tags, a shipped task model copied alone, int8
weights without their storage metadata or scales.

Every case runs on a copy of the shipped models (arabert_pipeline/models, never changed) or a tiny model. Readers that
could hang or fill the memory run in a child process with a time and memory limit (test_hostile_round3.in_child);
the server runs as a child whose every wait is bounded.
"""
from __future__ import annotations

import errno
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_hostile_outputs import one_line_error
from test_hostile_round3 import in_child

from arabert_pipeline.artifacts import PACKAGED_MODELS_DIR
from arabert_pipeline.errors import ConfigError
from arabert_pipeline.weights import SHARED_TOKENIZER_FILE, read_tokenizer_json


def copy_models(tmp_path: Path, *names: str, ignore=None) -> Path:
    """The shipped model dirs `names`, copied side by side into TMP/models (as the package holds them)."""
    root = tmp_path / "models"
    for name in names:
        shutil.copytree(PACKAGED_MODELS_DIR / name, root / name, ignore=ignore)
    return root


def sibling_sharing(tmp_path: Path) -> tuple[Path, Path]:
    """(TMP/models/arabert-sentiment, its sibling `mini/` without a tokenizer.json yet), its reference renamed to it."""
    root = copy_models(tmp_path, "arabert-sentiment")
    model, mini = root / "arabert-sentiment", root / "mini"
    mini.mkdir()
    ref = json.loads((model / SHARED_TOKENIZER_FILE).read_text())
    (model / SHARED_TOKENIZER_FILE).write_text(json.dumps({**ref, "file": "../mini/tokenizer.json"}))
    return model, mini


# 2. The shared tokenizer, read as every other model-dir file is -----------------------------------------------------

READ_TOKENIZER = """
from arabert_pipeline.errors import ArabertPipelineError
from arabert_pipeline.weights import read_tokenizer_json
try:
    read_tokenizer_json({model!r})
except ArabertPipelineError as exc:
    print("REFUSED", exc)
else:
    print("READ")
"""


@pytest.mark.parametrize("special, expected", [
    ("fifo", "mini/tokenizer.json: not a regular file (it is a FIFO)"),
    ("zero_link", "mini/tokenizer.json: not a regular file (it is a character device)"),
    ("sparse", "mini/tokenizer.json: 6,442,450,944 bytes, more than the 67,108,864"),
    ("reference_fifo", f"{SHARED_TOKENIZER_FILE}: not a regular file (it is a FIFO)"),
    ("own_sparse", "arabert-sentiment/tokenizer.json: 6,442,450,944 bytes, more than"),
])
def test_a_shared_tokenizer_that_is_no_bounded_regular_file_is_named_not_waited_on(tmp_path, special, expected):
    """A FIFO hung classify, Pipeline, serve and weights --plain; /dev/zero or a 6 GB sparse file ended in a
    MemoryError; so did a model dir's own oversized tokenizer.json."""
    model, mini = sibling_sharing(tmp_path)
    if special == "fifo":
        os.mkfifo(mini / "tokenizer.json")
    elif special == "zero_link":
        if not os.path.exists("/dev/zero"):
            pytest.skip("no /dev/zero on this platform")
        (mini / "tokenizer.json").symlink_to("/dev/zero")
    elif special == "reference_fifo":
        (model / SHARED_TOKENIZER_FILE).unlink()
        os.mkfifo(model / SHARED_TOKENIZER_FILE)
    else:  # sparse: no disk space taken
        with open(model / "tokenizer.json" if special == "own_sparse" else mini / "tokenizer.json", "wb") as f:
            f.truncate(6 * 2**30)
    code, out = in_child(READ_TOKENIZER.format(model=str(model)))
    assert code == 0 and out.startswith("REFUSED") and expected in out, out


def test_the_torch_backends_tokenizer_refuses_an_oversized_tokenizer_json(tmp_path):
    from arabert_pipeline.tokenizer.load import load_pretrained_tokenizer

    model = copy_models(tmp_path, "arabert-mini", ignore=shutil.ignore_patterns("model.*", "reader")) / "arabert-mini"
    with open(model / "tokenizer.json", "r+b") as f:
        f.truncate(6 * 2**30)
    with pytest.raises(ConfigError, match=r"tokenizer.json: 6,442,450,944 bytes, more than"):
        load_pretrained_tokenizer(model)


def test_a_nul_in_the_shared_tokenizers_name_is_a_config_error(tmp_path):
    model, _ = sibling_sharing(tmp_path)
    (model / SHARED_TOKENIZER_FILE).write_text(json.dumps({"file": "../mi\0ni/tokenizer.json", "sha256": "0" * 64}))
    with pytest.raises(ConfigError, match=r"file must be \.\./MODEL/tokenizer\.json"):
        read_tokenizer_json(model)


def lines_of(stream) -> queue.Queue:
    """The lines of a child's stream, read by a thread of their own so that every wait on them can be bounded."""
    lines: queue.Queue = queue.Queue()

    def read():
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def default_signals():
    """In the child: SIGINT and SIGTERM as a fresh process has them (a suite started as a background job ignores
    SIGINT, and a child would inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def opened_for_writing(fifo: Path) -> int | None:
    """A write end of `fifo` once a reader has it open (else None): the reader's open returns, and its read waits for
    bytes that never come."""
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # no reader yet
            return None
        raise


def test_a_server_whose_task_model_shares_a_fifo_stops_on_sigterm(tmp_path):
    """The load read the FIFO forever, in a thread the interpreter waits for at exit: the server ignored SIGTERM."""
    model, mini = sibling_sharing(tmp_path)
    fifo = mini / "tokenizer.json"
    os.mkfifo(fifo)
    server = subprocess.Popen(
        [sys.executable, "-m", "arabert_pipeline.cli", "serve", "--port", "0", "--classify-model", str(model),
         "--tag-model", "none"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"}, preexec_fn=default_signals)
    lines, writer = lines_of(server.stderr), None
    try:
        # Until the load has reached the FIFO: it refused it (and the server stops), or it is reading it.
        deadline = time.monotonic() + 120
        while server.poll() is None and writer is None and time.monotonic() < deadline:
            writer = opened_for_writing(fifo)
            time.sleep(0.05)
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)
        if writer is not None:
            os.close(writer)
    seen = []
    while (line := lines.get(timeout=30)) is not None:
        seen.append(line)
    output = "".join(seen)
    # Stopped: by the load's refusal of the FIFO (the one-line error), or by the SIGTERM (exit 0).
    assert code in (0, 2) and "Traceback" not in output, output
    if code == 2:
        one_line_error(output, "mini/tokenizer.json: not a regular file (it is a FIFO)")


# 2, minor: the tokenizer its siblings share; a shipped task model copied or linked elsewhere ------------------------

def test_the_tokenizer_its_siblings_share_is_checked_against_their_digest(tmp_path):
    """Two vocabulary pieces of arabert-mini's tokenizer.json swapped: every answer of the three models changed."""
    from arabert_pipeline.tokenizer.load import load_pretrained_tokenizer

    root = copy_models(tmp_path, "arabert-mini", "arabert-sentiment", "arabert-ner",
                       ignore=shutil.ignore_patterns("model.*", "reader", "lexical"))
    mini = root / "arabert-mini"
    assert read_tokenizer_json(mini)[1] == mini / "tokenizer.json"  # as shipped: the digest the siblings record
    tokenizer = json.loads((mini / "tokenizer.json").read_text(encoding="utf-8"))
    pieces = tokenizer["model"]["vocab"]
    pieces[1000], pieces[1001] = pieces[1001], pieces[1000]
    (mini / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")
    expected = (r"arabert-mini/tokenizer\.json is not the tokenizer .*/arabert-(ner|sentiment)/"
                r"tokenizer\.shared\.json records for it")
    with pytest.raises(ConfigError, match=expected):
        read_tokenizer_json(mini)
    with pytest.raises(ConfigError, match=expected):
        load_pretrained_tokenizer(mini)


def test_a_shipped_task_model_linked_elsewhere_finds_its_sibling_where_it_lives(tmp_path):
    from arabert_pipeline.finetuning.tokenizer_adapter import TokenizerAdapter

    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "sentiment").symlink_to(PACKAGED_MODELS_DIR / "arabert-sentiment")
    text, path = read_tokenizer_json(tmp_path / "deploy" / "sentiment")
    assert path.resolve() == (PACKAGED_MODELS_DIR / "arabert-mini" / "tokenizer.json").resolve()
    assert len(TokenizerAdapter.from_directory(tmp_path / "deploy" / "sentiment")) == 32000


def test_a_shipped_task_model_copied_alone_names_the_command_that_makes_it_stand_alone(tmp_path, monkeypatch, capsys):
    from arabert_pipeline.cli import main

    copied = copy_models(tmp_path, "arabert-sentiment") / "arabert-sentiment"  # cp -r, without arabert-mini
    with pytest.raises(ConfigError) as refused:
        read_tokenizer_json(copied)
    message = str(refused.value)
    assert "`arabert-pipeline export-onnx MODEL --standalone DIR`" in message and "incomplete" not in message
    # That command, on the shipped model's name: a directory that stands alone and answers as the shipped one does.
    monkeypatch.chdir(tmp_path)
    assert main(["export-onnx", "arabert-sentiment", "--standalone", "deploy/sentiment"]) == 0
    deployed = tmp_path / "deploy" / "sentiment"
    assert (deployed / "tokenizer.json").read_bytes() == (PACKAGED_MODELS_DIR / "arabert-mini" /
                                                          "tokenizer.json").read_bytes()
    assert not (deployed / SHARED_TOKENIZER_FILE).exists() and (deployed / "README.md").is_file()
    capsys.readouterr()
    answers = []
    for model in ("arabert-sentiment", str(deployed)):
        assert main(["classify", "--model", model, "الخدمة ممتازة جدا", "الفيلم سيء"]) == 0
        answers.append(capsys.readouterr().out)
    assert answers[0] == answers[1] and answers[0].count("\n") == 2

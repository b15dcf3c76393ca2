"""Nothing lost, nothing silently wrong (issue 24): lock files that are symlinks or someone's own file, outputs that
are devices, FIFOs or symlinks, full disks and missing permissions. Each case ends in a one-line error naming the
file (exit 2) or works, and nothing outside the verb's own outputs changes.

Disk-full runs in a child process under a small file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored: writes past it fail
with EFBIG as on a full disk); permissions in a child process without the capabilities that let root ignore them
(CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH dropped from its bounding set before it starts Python).
"""
from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from arabert_pipeline.cli import main
from arabert_pipeline.errors import ConfigError
from arabert_pipeline.outputs import OutputLock
from test_preprocess_corpus import make_lines, write_text

PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2
Q, C = "أين تقع البتراء؟", "تقع مدينة البتراء الأثرية في جنوب الأردن، وهي من عجائب الدنيا السبع."


def run_cli(args, *, file_size_limit: int | None = None, drop_root_powers: bool = False, cwd=None):
    """`arabert-pipeline ARGS` in a child process: (exit code, stderr)."""
    def limit():
        if file_size_limit is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))
        if drop_root_powers and os.geteuid() == 0:
            libc = ctypes.CDLL(None, use_errno=True)
            for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
                if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                    os._exit(99)

    done = subprocess.run([sys.executable, "-m", "arabert_pipeline.cli", *map(str, args)], capture_output=True,
                          text=True, preexec_fn=limit, cwd=cwd, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          timeout=300)
    if done.returncode == 99:
        pytest.skip("this process may not drop capabilities (PR_CAPBSET_DROP), so root would ignore permissions")
    return done.returncode, done.stderr


def one_line_error(stderr: str, *needles: str) -> None:
    lines = [line for line in stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "small.txt"
    write_text(path, make_lines(40))
    return path


@pytest.fixture(scope="module")
def qa_model(tmp_path_factory):
    from test_pipeline import build_model

    return build_model(tmp_path_factory.mktemp("hostile") / "model", "arabertv02", max_seq_length=96, doc_stride=32)


@pytest.fixture
def questions(tmp_path):
    path = tmp_path / "good.jsonl"
    path.write_text("".join(json.dumps({"id": i, "question": Q, "context": C}, ensure_ascii=False) + "\n"
                            for i in range(3)), encoding="utf-8")
    return path


# The output lock ----------------------------------------------------------------------------------------------------

def test_a_symlink_planted_as_the_lock_is_refused_and_its_target_untouched(tmp_path, text, capsys):
    precious = tmp_path / "precious.txt"
    precious.write_text("years of work")
    (tmp_path / ".lk.txt.lock").symlink_to(precious)
    assert main(["preprocess", str(text), "-o", str(tmp_path / "lk.txt"), "--preprocessing", "none",
                 "--no-progress"]) == 2
    one_line_error(capsys.readouterr().err, ".lk.txt.lock is a symbolic link", "left untouched")
    assert precious.read_text() == "years of work"
    assert (tmp_path / ".lk.txt.lock").is_symlink() and not (tmp_path / "lk.txt").exists()
    # A dangling symlink is no better: following it would create the file it names.
    (tmp_path / ".run.lock").symlink_to(tmp_path / "created-by-the-lock")
    with pytest.raises(ConfigError, match="is a symbolic link"):
        OutputLock(tmp_path / "run", "pretrain").acquire()
    assert not (tmp_path / "created-by-the-lock").exists()


def test_a_users_own_file_named_like_the_lock_is_neither_truncated_nor_deleted(tmp_path, text, capsys):
    mine = tmp_path / ".lk2.txt.lock"
    mine.write_text("my shopping list")
    assert main(["preprocess", str(text), "-o", str(tmp_path / "lk2.txt"), "--preprocessing", "none",
                 "--no-progress"]) == 2
    one_line_error(capsys.readouterr().err, "holds something other than an arabert-pipeline lock")
    assert mine.read_text() == "my shopping list"
    os.mkfifo(tmp_path / ".fifo.lock")
    with pytest.raises(ConfigError, match="is a FIFO"):  # refused at once, without blocking on the open
        OutputLock(tmp_path / "fifo", "preprocess").acquire()
    assert stat.S_ISFIFO(os.lstat(tmp_path / ".fifo.lock").st_mode)


def test_a_lock_left_by_a_killed_run_is_taken_over_and_removed(tmp_path, text):
    stale = tmp_path / ".out.txt.lock"
    stale.write_text("4242\n")  # what a lock of ours holds: its holder's PID (here long gone)
    assert main(["preprocess", str(text), "-o", str(tmp_path / "out.txt"), "--preprocessing", "none",
                 "--no-progress"]) == 0
    assert not stale.exists()
    stale.write_text("")  # killed between creating the file and writing its PID
    with OutputLock(tmp_path / "out.txt", "preprocess") as lock:
        assert stale.read_text() == f"{os.getpid()}\n" and lock.fd is not None
    assert not stale.exists()


# Outputs that are no regular files --------------------------------------------------------------------------------

def special_files(tmp_path):
    """name → a symlink, a FIFO and (where this process may make one) a character device like /dev/null."""
    made = {}
    target = tmp_path / "target.jsonl"
    target.write_text("someone's data\n")
    (tmp_path / "link.jsonl").symlink_to(target)
    made["link.jsonl"] = "a symbolic link"
    os.mkfifo(tmp_path / "fifo.jsonl")
    made["fifo.jsonl"] = "a FIFO"
    try:
        os.mknod(tmp_path / "null.jsonl", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        made["null.jsonl"] = "a character device"
    except PermissionError:
        pass  # no CAP_MKNOD: the symlink and the FIFO still cover the rule
    return made


def kinds(tmp_path, names):
    return {name: stat.S_IFMT(os.lstat(tmp_path / name).st_mode) for name in names}


def test_answer_overwrite_never_replaces_devices_fifos_or_symlinks(qa_model, questions, tmp_path, capsys):
    made = special_files(tmp_path)
    before = kinds(tmp_path, made)
    for name, kind in made.items():
        assert main(["answer", "--model", str(qa_model), "--input", str(questions), "--output", str(tmp_path / name),
                     "--overwrite"]) == 2
        one_line_error(capsys.readouterr().err, f"--output {tmp_path / name} is {kind}")
    assert kinds(tmp_path, made) == before
    assert (tmp_path / "target.jsonl").read_text() == "someone's data\n"
    # `-` is how a user asks for stdout.
    assert main(["answer", "--model", str(qa_model), "--input", str(questions), "--output", "-"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3


def test_preprocess_overwrite_never_replaces_devices_fifos_or_symlinks(text, tmp_path, capsys):
    made = special_files(tmp_path)
    before = kinds(tmp_path, made)
    for name, kind in made.items():
        assert main(["preprocess", str(text), "-o", str(tmp_path / name), "--preprocessing", "none", "--overwrite",
                     "--no-progress"]) == 2
        one_line_error(capsys.readouterr().err, f"{tmp_path / name} is {kind}")
    assert kinds(tmp_path, made) == before
    assert (tmp_path / "target.jsonl").read_text() == "someone's data\n"


# Full disks and missing permissions -----------------------------------------------------------------------------

@pytest.mark.slow
def test_a_full_disk_is_a_one_line_error_naming_the_output(qa_model, questions, text, tmp_path):
    out = tmp_path / "answers.jsonl"
    code, err = run_cli(["answer", "--model", qa_model, "--input", questions, "--output", out], file_size_limit=64)
    assert code == 2
    one_line_error(err, str(out), "File too large")
    assert not out.exists() and not list(tmp_path.glob(".answers.jsonl.*"))

    corpus_out = tmp_path / "big.txt"
    write_text(text, make_lines(400))
    code, err = run_cli(["preprocess", text, "-o", corpus_out, "--preprocessing", "none", "--no-progress"],
                        file_size_limit=4096)
    assert code == 2
    one_line_error(err, "File too large")
    assert not corpus_out.exists()


@pytest.mark.slow
def test_permission_denied_is_a_one_line_error_found_before_the_model_loads(qa_model, questions, text, tmp_path):
    locked = tmp_path / "read-only"
    locked.mkdir()
    locked.chmod(0o555)
    unreadable = tmp_path / "secret.jsonl"
    unreadable.write_bytes(questions.read_bytes())
    unreadable.chmod(0o000)
    try:
        # --output is checked before the model loads: a model dir that does not exist is never reached.
        code, err = run_cli(["answer", "--model", tmp_path / "no-model-here", "--input", questions, "--output",
                             locked / "a.jsonl"], drop_root_powers=True)
        assert code == 2
        one_line_error(err, f"cannot write in {locked}", "Permission denied")
        code, err = run_cli(["answer", "--model", qa_model, "--input", unreadable], drop_root_powers=True)
        assert code == 2
        one_line_error(err, str(unreadable), "Permission denied")
        code, err = run_cli(["preprocess", text, "-o", locked / "out.txt", "--preprocessing", "none",
                             "--no-progress"], drop_root_powers=True)
        assert code == 2
        one_line_error(err, str(locked), "Permission denied")
        model_copy = tmp_path / "model"
        subprocess.run(["cp", "-r", str(qa_model), str(model_copy)], check=True)
        (model_copy / "arabert_pipeline.json").chmod(0o000)
        code, err = run_cli(["answer", "--model", model_copy, "--question", Q, "--context", C],
                            drop_root_powers=True)
        assert code == 2
        one_line_error(err, "arabert_pipeline.json: unreadable (Permission denied)")
    finally:
        locked.chmod(0o755)
        unreadable.chmod(0o644)
    assert list(locked.iterdir()) == []


# Input that is real but unusual --------------------------------------------------------------------------------------

def test_contexts_without_an_arabic_letter_are_answered_with_a_warning(qa_model):
    from arabert_pipeline import Pipeline

    pipeline = Pipeline(qa_model)
    bibliography = "Everyday Sexism, 2014, Simon & Schuster, London, 384 pages."
    with pytest.warns(UserWarning, match="1 of 2 contexts .first: context.1.. have no Arabic letter") as warned:
        found = pipeline.answer([Q, Q], [C, bibliography])
    assert found[1] is not None and bibliography[found[1].start : found[1].end] == found[1].text
    # The warning names the line that asked, here, through either call.
    assert [w.filename for w in warned] == [__file__]
    with pytest.warns(UserWarning, match="the context has no Arabic letter") as warned:
        pipeline(Q, bibliography)
    assert [w.filename for w in warned] == [__file__]


@pytest.mark.slow
def test_a_context_past_the_limit_is_refused_before_the_model_runs(qa_model, tmp_path, capsys):
    huge = tmp_path / "huge.jsonl"
    huge.write_text(json.dumps({"question": Q, "context": "ق " * 60_000}, ensure_ascii=False) + "\n", encoding="utf-8")
    assert main(["answer", "--model", str(qa_model), "--input", str(huge)]) == 2
    one_line_error(capsys.readouterr().err, "line 1: context: is 120,000 characters long, more than the 100,000")
    assert main(["answer", "--model", str(qa_model), "--input", str(huge), "--max-context-chars", "200000"]) == 0
    assert json.loads(capsys.readouterr().out)["answer"]


def test_a_pickled_checkpoint_is_refused_in_one_line(tmp_path):
    import torch

    from arabert_pipeline.artifacts.reads import load_tensor_state
    from arabert_pipeline.errors import InputError

    class Payload:
        def __reduce__(self):
            return (print, ("this ran on load",))

    torch.save({"optimizer": Payload()}, tmp_path / "state.pt")
    with pytest.raises(InputError) as caught:
        load_tensor_state(tmp_path / "state.pt")
    assert str(caught.value) == f"{tmp_path / 'state.pt'}: not a plain tensor checkpoint, refused (it would run " \
                                "print on loading)"
    assert Path(tmp_path / "state.pt").is_file()

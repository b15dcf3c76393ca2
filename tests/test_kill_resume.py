"""Resume after a real kill: pretraining, fine-tuning and preprocessing runs stopped by SIGKILL, SIGTERM or SIGINT
and continued with --resume end exactly where an uninterrupted run ends (issue 43).

SIGKILL goes to a real `arabert-pipeline` subprocess, at full speed: it may land inside a step, a checkpoint being
written or a log row. SIGTERM and SIGINT reach the trainer's own handlers (the engine finishes the step, saves a
checkpoint and exits 130); for training they are sent by a run in this process to itself, which spares another start
of torch (seconds each). Preprocessing has no handler: SIGINT interrupts it mid-chunk. Tiny sizes; a few seconds per
test, so marked slow."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from arabert_pipeline.cli import main
from conftest import REPO, SHARED_DATA, build_tiny_bert
from data_slices import write_first_articles, write_first_documents

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow
SHARD = SHARED_DATA / "corpus" / "ant-jawharafm-000.txt.xz"

# AS_FROM_A_TERMINAL: the children below take SIGINT as a command started from a terminal does (Python's
# KeyboardInterrupt), whatever this test run inherited: under `nohup pytest &` or any runner that starts the suite as a
# background job of a script, SIGINT arrives ignored and every child inherits that. The CLI keeps an inherited ignore,
# as a shell's background job must (test_a_run_started_with_sigint_ignored_keeps_it_ignored), so the test, the
# parent here, sets what it means to send.

# The CLI, as `arabert-pipeline` runs it, announcing each optimizer step from HOLD_AFTER_STEP on in the file
# HOLD_MARKER, and slowed from three steps later: the signal lands at full speed, unless this test was slow to send
# it, and the run cannot end first however slow that was.
HELD_CLI = r"""
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # see AS_FROM_A_TERMINAL
from arabert_pipeline.cli import main
from arabert_pipeline.training.engine import Engine

after, marker = int(os.environ["HOLD_AFTER_STEP"]), os.environ["HOLD_MARKER"]
train_step = Engine.train_step

def held(self):
    metrics = train_step(self)
    if self.state.step >= after:
        with open(marker, "a") as f:
            f.write(f"{self.state.step}\n")
        if self.state.step >= after + 3:
            time.sleep(0.2)
    return metrics

Engine.train_step = held
sys.exit(main(sys.argv[1:]))
"""


def signal_when(command: list[str], ready, signum: int, env: dict | None = None, timeout: float = 300,
                group: bool = False) -> int:
    """Run `command`, send it `signum` as soon as `ready()` holds, and return its exit code. `group`: the command
    runs as a process group of its own and the signal goes to all of it, as Ctrl-C or a cluster's scheduler send it."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as stderr:  # a pipe left unread could fill and block it
        process = subprocess.Popen(command, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO),
                                                 **(env or {})}, stdout=subprocess.DEVNULL, stderr=stderr,
                                   start_new_session=group)
        deadline = time.monotonic() + timeout
        try:
            while not ready():
                if process.poll() is not None:
                    stderr.seek(0)
                    pytest.fail(f"the run ended ({process.returncode}) before the point to stop it at: "
                                f"{stderr.read()[-2000:]}")
                assert time.monotonic() < deadline, "the point to stop the run at never came"
                time.sleep(0.005)
            if group:
                os.killpg(process.pid, signum)
            else:
                process.send_signal(signum)
            return process.wait(timeout=timeout)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=60)


def held_run(argv: list[str], out: Path, step: int, signum: int, group: bool = False) -> int:
    marker = out.parent / f"{out.name}.step"
    marker.unlink(missing_ok=True)
    return signal_when([sys.executable, "-c", HELD_CLI, *argv, "-o", str(out)], marker.exists, signum,
                       env={"HOLD_AFTER_STEP": str(step), "HOLD_MARKER": str(marker)}, group=group)


@pytest.fixture
def sigint_as_from_a_terminal():
    """SIGINT taken, by a run in this process, as in a command started from a terminal (AS_FROM_A_TERMINAL)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def signal_self_at(monkeypatch, step: int, signum: int) -> None:
    """The run in this process sends itself `signum` right after optimizer step `step`."""
    from arabert_pipeline.training.engine import Engine

    # The engine's handlers are installed from the main thread only; elsewhere the signal would end the test run.
    assert threading.current_thread() is threading.main_thread()
    train_step = Engine.train_step

    def then_signal(self):
        metrics = train_step(self)
        if self.state.step == step:
            # Without the engine's handler SIGTERM would end pytest itself, and SIGINT skip the checkpoint.
            if signal.getsignal(signum) in (signal.SIG_DFL, signal.SIG_IGN, signal.default_int_handler):
                pytest.fail(f"no handler of the engine's for {signal.Signals(signum).name} during training")
            os.kill(os.getpid(), signum)
        return metrics

    monkeypatch.setattr(Engine, "train_step", then_signal)


def checkpoint_steps(out: Path) -> list[int]:
    return sorted(int(p.name.removeprefix("step-")) for p in (out / "checkpoints").glob("step-*"))


def same_weights(a: Path, b: Path) -> None:
    from safetensors.torch import load_file

    first, second = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first), "the resumed model differs"


def curve(run: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (run / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    return [(r["step"], r.get("loss"), r.get("eval_loss")) for r in rows]


# Pretraining -------------------------------------------------------------------------------------------------------

def tiny_pretraining(tmp_path: Path, steps: int) -> list[str]:
    """`pretrain` arguments for a tiny run of `steps` steps on 60 documents of the shard (the tokenizer trained
    here)."""
    if not SHARD.exists():
        pytest.skip(f"needs the shared corpus at {SHARD}")
    from arabert_pipeline.tokenizer import train_tokenizer

    torch.set_num_threads(1)
    corpus = write_first_documents(SHARD, tmp_path / "corpus.txt", 60)
    train_tokenizer([str(corpus)], tmp_path / "tok", model_type="wordpiece", vocab_size=500, preprocess="none",
                    threads=1, progress=False)
    return ["pretrain", "--tokenizer", str(tmp_path / "tok"), "--corpus", str(corpus), "--model-size", "tiny",
            "--max-seq-length", "32", "--steps", str(steps), "--batch-size", "4", "--eval-sequences", "8",
            "--eval-every", "6", "--log-every", "1", "--bf16", "off", "--cache-dir", str(tmp_path / "cache"),
            "--no-progress"]


def test_pretraining_killed_then_terminated_resumes_to_the_uninterrupted_model(tmp_path, monkeypatch):
    argv = [*tiny_pretraining(tmp_path, steps=16), "--keep-checkpoints", "2"]
    straight, out = tmp_path / "straight", tmp_path / "run"
    assert main([*argv, "-o", str(straight), "--save-every", "16"]) == 0
    argv += ["--save-every", "1"]  # a checkpoint at every step: the kill may well land in the writing of one

    assert held_run(argv, out, step=3, signum=signal.SIGKILL) == -signal.SIGKILL
    killed_at = checkpoint_steps(out)
    assert killed_at and 2 <= killed_at[-1] < 15 and not (out / "config.json").exists()
    stop = min(killed_at[-1] + 5, 15)
    signal_self_at(monkeypatch, step=stop, signum=signal.SIGTERM)
    assert main([*argv, "-o", str(out), "--resume"]) == 130
    assert checkpoint_steps(out)[-1] == stop  # the handler let the step finish and saved it
    monkeypatch.undo()
    assert main([*argv, "-o", str(out), "--resume"]) == 0
    assert curve(out) == curve(straight)
    same_weights(out, straight)


def test_pretraining_with_loader_workers_stops_cleanly_on_a_sigterm_to_its_process_group(tmp_path):
    """A cluster's scheduler (or Ctrl-C) signals the whole process group, the loader's workers with the trainer: the
    trainer still finishes its step, saves a checkpoint and exits 130, and the resumed run ends as an uninterrupted
    one trained in one process."""
    argv = [*tiny_pretraining(tmp_path, steps=12), "--save-every", "100", "--whole-word-masking"]
    straight, out = tmp_path / "straight", tmp_path / "run"
    assert main([*argv, "-o", str(straight), "--loader-workers", "0"]) == 0
    with_workers = [*argv, "--loader-workers", "2"]
    for signum in (signal.SIGTERM, signal.SIGINT):
        code = held_run(with_workers + (["--resume"] if out.exists() else []), out, step=3, signum=signum, group=True)
        assert code == 130, f"{signal.Signals(signum).name} to the group: exit {code}"
        assert checkpoint_steps(out) and not (out / "config.json").exists()
    assert main([*with_workers, "-o", str(out), "--resume"]) == 0
    assert curve(out) == curve(straight)
    same_weights(out, straight)


def test_a_run_started_with_sigint_ignored_keeps_it_ignored(tmp_path):
    """A script's background job (`arabert-pipeline pretrain ... &`) starts with SIGINT ignored, so that the Ctrl-C
    meant for the script's foreground leaves it running: the engine keeps that (Python itself installs no
    KeyboardInterrupt then). SIGINT sent to such a run changes nothing; SIGTERM still stops it at a checkpoint."""
    argv = [*tiny_pretraining(tmp_path, steps=10), "--save-every", "100"]
    out = tmp_path / "run"
    ignoring = HELD_CLI.replace("signal.signal(signal.SIGINT, signal.default_int_handler)",
                                "signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `&` in a script starts it")
    assert ignoring != HELD_CLI
    marker = tmp_path / "run.step"
    assert signal_when([sys.executable, "-c", ignoring, *argv, "-o", str(out)], marker.exists, signal.SIGINT,
                       env={"HOLD_AFTER_STEP": "3", "HOLD_MARKER": str(marker)}) == 0
    assert (out / "config.json").exists() and curve(out)[-1][0] == 10  # every step run
    marker.unlink()
    code = signal_when([sys.executable, "-c", ignoring, *argv, "-o", str(tmp_path / "again")], marker.exists,
                       signal.SIGTERM, env={"HOLD_AFTER_STEP": "3", "HOLD_MARKER": str(marker)})
    assert code == 130 and checkpoint_steps(tmp_path / "again") and not (tmp_path / "again" / "config.json").exists()


# Fine-tuning -------------------------------------------------------------------------------------------------------

def test_finetuning_interrupted_by_sigint_resumes_to_the_uninterrupted_model(shared_data, tmp_path, monkeypatch,
                                                                              sigint_as_from_a_terminal):
    """The fine-tuning side of the engine's handler (the SIGKILL of a subprocess is the pretraining test's: the same
    engine, and another torch start would cost seconds)."""
    from arabert_pipeline.qa.data import read_squad

    torch.set_num_threads(1)
    train = write_first_articles("arcd-train", tmp_path / "train1.json", 1)
    contexts = [e["context"] for e in read_squad(str(train), misaligned="keep").examples]
    model = build_tiny_bert(tmp_path / "mlm", contexts, "BertForMaskedLM", vocab_size=300, max_positions=128)
    argv = ["finetune", "--model", str(model), "--train", str(train), "--epochs", "2", "--batch-size", "4",
            "--max-seq-length", "64", "--doc-stride", "32", "--max-question-tokens", "16", "--skip-misaligned",
            "--bf16", "off", "--no-progress"]
    straight, out = tmp_path / "straight", tmp_path / "run"
    assert main([*argv, "-o", str(straight), "--save-steps", "0"]) == 0

    argv += ["--save-steps", "2"]
    signal_self_at(monkeypatch, step=3, signum=signal.SIGINT)  # between two checkpoints: one is saved for it
    assert main([*argv, "-o", str(out)]) == 130
    assert checkpoint_steps(out)[-1] == 3 and not (out / "config.json").exists()
    monkeypatch.undo()
    assert main([*argv, "-o", str(out), "--resume"]) == 0
    same_weights(out, straight)


# Preprocessing -----------------------------------------------------------------------------------------------------

# The CLI, as `arabert-pipeline` runs it, held for good inside the chunk write that takes this process past
# HOLD_AFTER_LINES lines: that chunk's bytes are on disk in OUT.part, past the last checkpoint, when HOLD_MARKER
# appears. The signal then lands at that point whatever the machine's speed: the run cannot finish first, and the
# resumed run must cut OUT.part back to its checkpoint.
HELD_PREPROCESS = r"""
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # see AS_FROM_A_TERMINAL
from arabert_pipeline.cli import main
from arabert_pipeline.preprocess import corpus

after, marker = int(os.environ["HOLD_AFTER_LINES"]), os.environ["HOLD_MARKER"]
write, written = corpus._PartWriter.write, [0]

def held(self, lines):
    write(self, lines)
    written[0] += len(lines)
    if written[0] >= after:
        self.raw.flush()
        with open(marker, "w") as f:
            f.write(str(self.raw.tell()))
        time.sleep(3600)

corpus._PartWriter.write = held
sys.exit(main(sys.argv[1:]))
"""


def test_preprocessing_killed_then_interrupted_resumes_to_the_uninterrupted_output(tmp_path):
    from arabert_pipeline.preprocess.corpus import preprocess_corpus

    if not SHARD.exists():
        pytest.skip(f"needs the shared corpus at {SHARD}")
    corpus = write_first_documents(SHARD, tmp_path / "corpus.txt", 40)
    options = dict(preprocessing="arabertv2", workers=1, chunk_lines=10, checkpoint_chunks=1, progress=False)
    straight = tmp_path / "straight.txt"
    preprocess_corpus([str(corpus)], str(straight), **options)
    lines = len(straight.read_text(encoding="utf-8").splitlines())
    out = tmp_path / "out.txt"
    argv = ["preprocess", str(corpus), "-o", str(out), "--preprocessing", "arabertv2", "--workers", "1",
            "--chunk-lines", "10", "--checkpoint-chunks", "1", "--no-progress"]
    part, checkpoint = Path(f"{out}.part"), Path(f"{out}.part.json")

    def held(extra: list[str], after_lines: int, signum: int) -> int:
        marker = tmp_path / "held"
        marker.unlink(missing_ok=True)
        return signal_when([sys.executable, "-c", HELD_PREPROCESS, *argv, *extra], marker.exists, signum,
                           env={"HOLD_AFTER_LINES": str(after_lines), "HOLD_MARKER": str(marker)})

    def checkpointed() -> dict:
        return json.loads(checkpoint.read_text(encoding="utf-8"))

    assert held([], lines // 4, signal.SIGKILL) == -signal.SIGKILL
    assert not out.exists()
    # Killed inside a chunk's write: bytes past the checkpoint, which the resumed run must cut away.
    assert part.stat().st_size > checkpointed()["part_bytes"] > 0
    # A machine that goes down with it can leave a torn tail past the checkpoint instead (zeros, where pages were
    # lost); made longer than the whole output, so that only a resume that cuts back to the checkpoint ends right.
    os.truncate(part, straight.stat().st_size + 4096)
    assert held(["--resume"], lines // 4, signal.SIGINT) == 130  # another quarter, counted from where it resumed
    assert not out.exists() and lines // 4 < checkpointed()["lines"] < lines
    assert part.stat().st_size > checkpointed()["part_bytes"]
    assert main(argv + ["--resume"]) == 0
    assert out.read_bytes() == straight.read_bytes()

"""`finetune --task classification|ner` interrupted and continued with --resume ends where an uninterrupted run with the
same seed ends: the same steps, epoch losses, dev scores, epoch kept and weights, bit for bit (docs/finetuning.md:
--resume "continues bit-for-bit"). test_kill_resume.py checks the engine under pretraining and QA; the text tasks
bring their own rows and labels (hashed into the checkpoints' data key and batched by their epoch plan), their loss
(class weights) and their dev scoring, and what a checkpoint must carry for them: the epoch losses, the running loss,
the dev history and the best epoch's weights (OUT/checkpoints/best.safetensors, written before the interruption and
read after it).

A restart from step 0 with the same seed would end at the same weights too, so each test also counts the optimizer
steps the resumed run takes: exactly those after its checkpoint. As in test_kill_resume.py, the classifier is stopped
by a SIGKILL of a real `arabert-pipeline` subprocess (with a checkpoint at every step, the kill may land in the
writing of one), the tagger by SIGTERM sent by the run in this process to itself (the engine's handler finishes the
step and saves a checkpoint), after the first epoch's end so that the checkpoint carries dev scores. Tiny sizes."""
from __future__ import annotations

import signal
from pathlib import Path

import pytest

import task_toys as toys
from test_kill_resume import checkpoint_steps, held_run, same_weights, signal_self_at

torch = pytest.importorskip("torch")

from arabert_pipeline.artifacts.metadata import read_metadata  # noqa: E402  after the importorskip above
from arabert_pipeline.cli import main  # noqa: E402  after the importorskip above


def counting_steps(monkeypatch) -> list[int]:
    """The steps the engine takes in this process from now on, as a list that grows."""
    from arabert_pipeline.training.engine import Engine

    steps, train_step = [], Engine.train_step

    def counted(self):
        metrics = train_step(self)
        steps.append(self.state.step)
        return metrics

    monkeypatch.setattr(Engine, "train_step", counted)
    return steps


def same_run(resumed: Path, straight: Path) -> None:
    first, second = read_metadata(resumed)["finetune"], read_metadata(straight)["finetune"]
    for key in ("steps", "epoch_losses", "dev_scores", "epoch"):
        assert first[key] == second[key], key
    assert not (resumed / "checkpoints").exists()
    same_weights(resumed, straight)


@pytest.mark.slow  # a second start of torch, in the subprocess: seconds
def test_classification_killed_then_resumed_ends_as_the_uninterrupted_run(tmp_path, monkeypatch):
    train = toys.texts(96, 0)
    dev = toys.texts(32, 1, exclude={r["text"] for r in train})
    encoder = toys.tiny_encoder(tmp_path / "encoder", [r["text"] for r in train])
    argv = ["finetune", "--task", "classification", "--model", str(encoder),
            "--train", str(toys.write_jsonl(tmp_path / "train.jsonl", train)),
            "--dev", str(toys.write_jsonl(tmp_path / "dev.jsonl", dev)), "--class-weights", "--epochs", "4",
            "--lr", "2e-3", "--batch-size", "8", "--max-seq-length", "32", "--bf16", "off", "--no-progress"]
    straight, out = tmp_path / "straight", tmp_path / "run"
    with toys.one_thread():
        assert main([*argv, "-o", str(straight)]) == 0
    finished = read_metadata(straight)["finetune"]
    total = finished["steps"]
    assert total == 48 and len(finished["dev_scores"]) == 4  # 12 steps an epoch
    # The toy is learnt by the third epoch and the fourth is no better: the epoch kept is the third, its weights
    # saved to best.safetensors before the kill, by the killed process.
    assert finished["epoch"] == 3 and finished["dev_scores"][0] < finished["dev_scores"][2]

    argv += ["--save-steps", "1"]  # a checkpoint at every step: the kill may land in the writing of one
    assert held_run(argv, out, step=38, signum=signal.SIGKILL) == -signal.SIGKILL  # in the fourth epoch
    stopped = checkpoint_steps(out)[-1]
    assert 37 <= stopped < total - 1 and not (out / "config.json").exists()
    steps = counting_steps(monkeypatch)
    with toys.one_thread():
        assert main([*argv, "-o", str(out), "--resume"]) == 0
    assert steps == list(range(stopped + 1, total + 1))  # continued from the checkpoint, not from step 0
    same_run(out, straight)


def test_ner_interrupted_by_sigterm_then_resumed_ends_as_the_uninterrupted_run(tmp_path, monkeypatch):
    train = toys.sentences(64, 0)
    dev = toys.sentences(24, 1, exclude={" ".join(w) for w, _ in train})
    encoder = toys.tiny_encoder(tmp_path / "encoder", [" ".join(w) for w, _ in train])
    argv = ["finetune", "--task", "ner", "--model", str(encoder),
            "--train", str(toys.write_conll(tmp_path / "train.conll", train)),
            "--dev", str(toys.write_conll(tmp_path / "dev.conll", dev)), "--epochs", "3", "--lr", "1e-3",
            "--batch-size", "16", "--max-seq-length", "32", "--bf16", "off", "--no-progress"]
    straight, out = tmp_path / "straight", tmp_path / "run"
    with toys.one_thread():
        assert main([*argv, "-o", str(straight)]) == 0
        total = read_metadata(straight)["finetune"]["steps"]
        assert total == 12  # 4 steps an epoch

        signal_self_at(monkeypatch, step=6, signum=signal.SIGTERM)  # mid second epoch, no --save-steps
        assert main([*argv, "-o", str(out)]) == 130
        assert checkpoint_steps(out) == [6] and not (out / "config.json").exists()
        monkeypatch.undo()
        steps = counting_steps(monkeypatch)
        assert main([*argv, "-o", str(out), "--resume"]) == 0
    assert steps == list(range(7, total + 1))
    same_run(out, straight)


@pytest.mark.slow  # dynamo traces each task's training step, again after the resume: seconds
@pytest.mark.parametrize("task", ["classification", "ner"])
def test_compiled_text_task_resumes_to_the_eager_run_and_writes_the_plain_models_keys(task, tmp_path, monkeypatch):
    """`finetune --task ... --compile` wraps the training steps of every task in torch.compile, and what the run writes
    (the checkpoint's state.pt and model dir, the best epoch's weights, the model dir, the eval predictions, the ONNX
    export) holds the bare module's keys, though the wrapper's own carry `_orig_mod.`. Compiled here with dynamo's eager
    backend, which runs the traced graph on eager's kernels: the interrupted and resumed run ends bit for bit as an
    uncompiled one, without inductor's compile time (test_qa_model.py compiles with inductor)."""
    from safetensors.torch import load_file

    compile_model, wrappers = torch.compile, []

    def traced(model, **options):
        wrappers.append(compile_model(model, backend="eager", **options))
        return wrappers[-1]

    if task == "classification":
        train = toys.texts(48, 0)
        dev = toys.texts(16, 1, exclude={r["text"] for r in train})
        encoder = toys.tiny_encoder(tmp_path / "encoder", [r["text"] for r in train])
        train_file = toys.write_jsonl(tmp_path / "train.jsonl", train)
        dev_file = toys.write_jsonl(tmp_path / "dev.jsonl", dev)
    else:
        train = toys.sentences(64, 0)
        dev = toys.sentences(16, 1, exclude={" ".join(w) for w, _ in train})
        encoder = toys.tiny_encoder(tmp_path / "encoder", [" ".join(w) for w, _ in train])
        train_file = toys.write_conll(tmp_path / "train.conll", train)
        dev_file = toys.write_conll(tmp_path / "dev.conll", dev)
    argv = ["finetune", "--task", task, "--model", str(encoder), "--train", str(train_file), "--dev", str(dev_file),
            "--eval", str(dev_file), "--epochs", "3", "--lr", "1e-3", "--batch-size", "16", "--max-seq-length", "32",
            "--bf16", "off", "--no-progress"]
    straight, out = tmp_path / "straight", tmp_path / "run"
    with toys.one_thread():
        assert main([*argv, "-o", str(straight)]) == 0
        monkeypatch.setattr(torch, "compile", traced)
        with pytest.MonkeyPatch.context() as patch:
            signal_self_at(patch, step=5, signum=signal.SIGTERM)  # in the second epoch: the first one's best kept
            assert main([*argv, "--compile", "-o", str(out)]) == 130
        assert len(wrappers) == 1 and all(key.startswith("_orig_mod.") for key in wrappers[0].state_dict())

        plain = set(load_file(straight / "model.safetensors"))
        checkpoint = out / "checkpoints" / "step-00000005"
        assert set(load_file(checkpoint / "model" / "model.safetensors")) == plain
        state = torch.load(checkpoint / "state.pt", weights_only=True)["model"]
        best = load_file(out / "checkpoints" / "best.safetensors")
        assert set(best) == set(state) and not any("_orig_mod" in key for key in state)
        assert main([*argv, "--compile", "-o", str(out), "--resume"]) == 0
        assert len(wrappers) == 2
    same_run(out, straight)
    predictions = lambda run: (run / "eval" / "dev.predictions.jsonl").read_text(encoding="utf-8")  # noqa: E731  a one-line local helper
    assert predictions(out) == predictions(straight)
    assert main(["export-onnx", str(out)]) == 0 and (out / "model.onnx").is_file()

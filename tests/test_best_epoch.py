"""The weights a fine-tuning run saves are those of its best dev epoch (finetuning/selection.py, shared by the text
tasks' TaskTrainer and QA's QATrainer): a run that completes every epoch, its last scoring worse than an earlier one,
and a --max-steps run that ends inside an epoch, after the epoch it keeps.

The epochs' dev scores are set here (the task's own dev scoring still runs, on the weights it is given), so that the
best epoch is a middle one whatever the toy learns: keeping the last epoch's weights, the first's, or writing the
"best" weights after every epoch each saves other weights than the ones scored best. The weights each scoring saw are
recorded, and the model dir's must be those of the epoch kept, bit for bit. Tiny sizes: seconds a run."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import task_toys as toys

torch = pytest.importorskip("torch")

from arabert_pipeline.artifacts.metadata import read_metadata  # noqa: E402
from arabert_pipeline.cli import main  # noqa: E402


def scripted_dev_scores(monkeypatch, trainer_class, scores: list[float]) -> list[dict]:
    """Each epoch's dev score becomes the next of `scores`, after the task's own scoring has run; returns the list of
    the weights each scoring saw (one state dict an epoch), which grows as the run goes."""
    seen, real = [], trainer_class.dev_score

    def scored(self) -> float:
        real(self)
        seen.append({k: v.detach().clone() for k, v in self.unwrapped().state_dict().items()})
        return scores[len(seen) - 1]

    monkeypatch.setattr(trainer_class, "dev_score", scored)
    return seen


def assert_saved_weights_are(model_dir: Path, expected: dict, others: list[dict]) -> None:
    """model_dir/model.safetensors holds `expected`, tensor for tensor, and differs from each of `others`."""
    from safetensors.torch import load_file

    saved = load_file(model_dir / "model.safetensors")
    assert saved and set(saved) <= set(expected)
    for name, values in saved.items():
        assert torch.equal(values, expected[name]), f"{name} is not the kept epoch's"
    for other in others:
        assert any(not torch.equal(values, other[name]) for name, values in saved.items())


def classification_argv(tmp_path: Path, epochs: int) -> list[str]:
    train = toys.texts(96, 0)  # 12 steps an epoch
    dev = toys.texts(32, 1, exclude={r["text"] for r in train})
    encoder = toys.tiny_encoder(tmp_path / "encoder", [r["text"] for r in train])
    return ["finetune", "--task", "classification", "--model", str(encoder),
            "--train", str(toys.write_jsonl(tmp_path / "train.jsonl", train)),
            "--dev", str(toys.write_jsonl(tmp_path / "dev.jsonl", dev)), "--epochs", str(epochs),
            "--lr", "2e-3", "--batch-size", "8", "--max-seq-length", "32", "--bf16", "off", "--no-progress"]


def test_a_task_run_past_its_best_epoch_saves_the_best_epochs_weights(tmp_path, monkeypatch):
    from arabert_pipeline.finetuning.tasktrainer import TaskTrainer

    seen = scripted_dev_scores(monkeypatch, TaskTrainer, [40.0, 60.0, 50.0])
    out = tmp_path / "run"
    with toys.one_thread():
        assert main([*classification_argv(tmp_path, epochs=3), "-o", str(out)]) == 0
    finished = read_metadata(out)["finetune"]
    assert finished["steps"] == 36 and finished["dev_scores"] == [40.0, 60.0, 50.0] and finished["epoch"] == 2
    assert len(seen) == 3
    assert_saved_weights_are(out, seen[1], others=[seen[0], seen[2]])


@pytest.mark.parametrize("scores, kept", [([60.0, 40.0], 1), pytest.param([40.0, 60.0], 2, marks=pytest.mark.slow)])
def test_a_task_run_cut_inside_an_epoch_by_max_steps_keeps_the_best_scored_epoch(tmp_path, monkeypatch, scores,
                                                                                 kept):
    """--max-steps 30 of 3 epochs of 12 steps: two epochs scored, six steps of the third trained after them. The kept
    epoch's weights come back whether it is the last one scored (the six steps changed them after their score) or
    not."""
    from arabert_pipeline.finetuning.tasktrainer import TaskTrainer

    seen = scripted_dev_scores(monkeypatch, TaskTrainer, scores)
    out = tmp_path / "run"
    with toys.one_thread():
        assert main([*classification_argv(tmp_path, epochs=3), "--max-steps", "30", "-o", str(out)]) == 0
    finished = read_metadata(out)["finetune"]
    assert finished["steps"] == 30 and finished["dev_scores"] == scores and finished["epoch"] == kept
    assert_saved_weights_are(out, seen[kept - 1], others=[seen[2 - kept]])


def qa_argv(tmp_path: Path, epochs: int) -> list[str]:
    """QA fine-tuning of a tiny BERT on the first article of ARCD-train, its next three as the dev set (the no-answer
    calibration after the kept epoch needs ten dev questions)."""
    from arabert_pipeline.qa.data import read_squad
    from conftest import build_tiny_bert
    from data_slices import write_first_articles

    articles = write_first_articles("arcd-train", tmp_path / "four.json", 4)
    data = json.loads(articles.read_text(encoding="utf-8"))
    train, dev = tmp_path / "train.json", tmp_path / "dev.json"
    for path, part in ((train, data["data"][:1]), (dev, data["data"][1:])):
        path.write_text(json.dumps({**data, "data": part}, ensure_ascii=False), encoding="utf-8")
    contexts = [e["context"] for e in read_squad(str(articles), misaligned="keep").examples]
    model = build_tiny_bert(tmp_path / "mlm", contexts, "BertForMaskedLM", vocab_size=300, max_positions=128)
    return ["finetune", "--model", str(model), "--train", str(train), "--dev", str(dev), "--epochs", str(epochs),
            "--batch-size", "8", "--max-seq-length", "64", "--doc-stride", "32", "--max-question-tokens", "16",
            "--skip-misaligned", "--bf16", "off", "--sentence-prior", "0", "--within-sentence", "off",
            "--decoding", "max-score", "--no-progress"]


@pytest.mark.slow  # over a CPU second: the quick loop keeps this file's cheaper tests
def test_a_qa_run_past_its_best_epoch_saves_the_best_epochs_weights(shared_data, tmp_path, monkeypatch):
    from arabert_pipeline.qa.transformer.finetune import QATrainer

    seen = scripted_dev_scores(monkeypatch, QATrainer, [10.0, 30.0, 20.0])
    out = tmp_path / "run"
    with toys.one_thread():
        assert main([*qa_argv(tmp_path, epochs=3), "-o", str(out)]) == 0
    finished = read_metadata(out)["finetune"]
    assert finished["dev_scores"] == [10.0, 30.0, 20.0] and finished["epoch"] == 2
    assert_saved_weights_are(out, seen[1], others=[seen[0], seen[2]])

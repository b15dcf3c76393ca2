"""Nothing lost, round four (issue 52, classes 1–8): a model that is not the one its metadata says was chosen, or one
chosen on its own training data; outputs one verb run writes over another's. Tiny models and the toys of
task_toys.py, as test_tasks.py uses them."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import task_toys as toys

torch = pytest.importorskip("torch")

from arabert_pipeline.artifacts.metadata import read_metadata, write_metadata  # noqa: E402  after the importorskip above
from arabert_pipeline.cli import main  # noqa: E402  after the importorskip above
from arabert_pipeline.errors import ConfigError  # noqa: E402  after the importorskip above


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A small train / dev split of the sentiment toy and a tiny encoder of its words."""
    root = tmp_path_factory.mktemp("round4")
    train = toys.texts(64, 0)
    dev = toys.texts(24, 1, exclude={r["text"] for r in train})
    encoder = toys.tiny_encoder(root / "encoder", [r["text"] for r in train])
    return root, toys.write_jsonl(root / "train.jsonl", train), toys.write_jsonl(root / "dev.jsonl", dev), encoder


def finetune_classifier(toy, output: Path, *extra: str) -> int:
    root, train, dev, encoder = toy
    with toys.one_thread():
        return main(["finetune", "--task", "classification", "--model", str(encoder), "-o", str(output),
                     "--train", str(train), "--dev", str(dev), "--epochs", "2", "--lr", "1e-3", "--batch-size", "16",
                     "--max-seq-length", "32", "--no-progress", *extra])


# 1. The kept epoch's weights are the ones saved --------------------------------------------------------------------

def record_scored_weights(monkeypatch) -> list[dict]:
    """A copy of the weights each time the engine keeps an epoch as its best so far, in order."""
    from arabert_pipeline.finetuning import selection

    scored: list[dict] = []
    save = selection.save_best_weights

    def keeping_a_copy(output, model):
        scored.append({k: v.detach().cpu().clone() for k, v in model.state_dict().items()})
        save(output, model)

    monkeypatch.setattr(selection, "save_best_weights", keeping_a_copy)
    return scored


def test_a_run_ended_inside_an_epoch_saves_the_kept_epochs_weights(toy, tmp_path, monkeypatch):
    """--max-steps ends the run two steps into epoch 2: epoch 1 is the only one scored and the one the metadata says
    was kept, so its weights, not the two later steps', are the model's."""
    from safetensors.torch import load_file

    scored = record_scored_weights(monkeypatch)
    output = tmp_path / "cls"
    assert finetune_classifier(toy, output, "--max-steps", "6") == 0  # 64 texts / 16: 4 steps an epoch
    metadata = read_metadata(output)
    assert metadata["finetune"]["steps"] == 6 and len(metadata["finetune"]["dev_scores"]) == 1
    assert metadata["finetune"]["epoch"] == 1 and len(scored) == 1
    saved = load_file(output / "model.safetensors")
    assert saved.keys() <= scored[0].keys()
    assert all(torch.equal(saved[k], scored[0][k]) for k in saved)



@pytest.mark.slow
def test_qa_finetune_ended_inside_an_epoch_saves_the_kept_epochs_weights(tiny_mlm, qa_slices, tmp_path, monkeypatch):
    """The same engine under QA's finetune: the run capped one step into epoch 2."""
    from safetensors.torch import load_file

    from arabert_pipeline.finetuning import selection
    from arabert_pipeline.qa.transformer.finetune import FinetuneConfig, run_finetune
    from test_qa_model import SMALL

    scored = record_scored_weights(monkeypatch)
    monkeypatch.setattr(selection.FinetuneEngine, "step_cap", lambda self: self.steps_per_epoch() + 1)
    train, dev = qa_slices
    config = FinetuneConfig(model=str(tiny_mlm), output=str(tmp_path / "qa"), train=[str(train)], dev=[str(dev)],
                            epochs=2, sentence_prior=0.0, **SMALL)
    with toys.one_thread():
        run_finetune(config, log=lambda message: None)
    metadata = read_metadata(tmp_path / "qa")
    assert len(metadata["finetune"]["dev_scores"]) == 1 and metadata["finetune"]["epoch"] == 1 and len(scored) == 1
    saved = load_file(tmp_path / "qa" / "model.safetensors")
    assert saved.keys() <= scored[0].keys()
    assert all(torch.equal(saved[k], scored[0][k]) for k in saved)

# 2. A dev set the model trained on is known by its content, not by the name it is given by ---------------------------

def test_tune_decoding_and_soup_refuse_the_training_set_under_any_name(qa_slices, tmp_path, monkeypatch):
    from arabert_pipeline.qa.data import read_squad
    from arabert_pipeline.qa.transformer.finetune import _describe
    from arabert_pipeline.qa.transformer.soup import make_soup
    from arabert_pipeline.qa.transformer.tune import tune_model_decoding
    from test_soup import tiny_qa_models

    train, test = qa_slices
    texts = [e["context"] for e in read_squad(train, misaligned="keep").examples]
    models = tiny_qa_models(tmp_path, texts, 2)
    # m1 trained on `test` as finetune records it; the same bytes given by another name, in another folder
    write_metadata(models[1], **{**read_metadata(models[1]), "training_data": [_describe(read_squad(str(test)), {})]})
    (tmp_path / "elsewhere").mkdir()
    renamed = tmp_path / "elsewhere" / "my-dev.json"
    renamed.write_bytes(Path(test).read_bytes())
    monkeypatch.chdir(tmp_path)
    for dev in (str(renamed), "./elsewhere/../elsewhere/my-dev.json"):
        with pytest.raises(ConfigError, match=f"m1 was trained on {dev}"):
            make_soup(models, [dev], tmp_path / "soup", batch_size=8, say=lambda m: None)
        with pytest.raises(ConfigError, match=f"m1 was trained on {dev}"):
            tune_model_decoding(models[1], [dev], tmp_path / "tuned")
    # a model dir written before the digest was recorded: the file its recorded path names, here
    (tmp_path / "data" / "qa").mkdir(parents=True)
    (tmp_path / "data" / "qa" / "set.json").write_bytes(Path(test).read_bytes())
    monkeypatch.setenv("ARABERT_PIPELINE_DATA", str(tmp_path / "data"))
    legacy = {"name": "some-set", "path": "$ARABERT_PIPELINE_DATA/qa/set.json", "questions": 1}
    write_metadata(models[1], **{**read_metadata(models[1]), "training_data": [legacy]})
    with pytest.raises(ConfigError, match="m1 was trained on"):
        tune_model_decoding(models[1], [str(renamed)], tmp_path / "tuned")
    assert not (tmp_path / "soup").exists() and not (tmp_path / "tuned").exists()


# 4. A classifier answers with the lexical companion its metadata records, or not at all -------------------------------

@pytest.fixture(scope="module")
def classifier(toy, tmp_path_factory):
    """A classifier fine-tuned on the toy, exported."""
    base = tmp_path_factory.mktemp("classifier") / "cls"
    assert finetune_classifier(toy, base) == 0
    assert main(["export-onnx", str(base)]) == 0
    return base


@pytest.fixture(scope="module")
def classifier_with_lexical(toy, classifier):
    """The classifier with a lexical companion at weight 0.5."""
    root, train, dev, _ = toy
    base = classifier
    with_lexical = base.with_name("cls-lexical")
    assert main(["add-lexical", str(base), "--train", str(train), "--dev", str(dev), "-o", str(with_lexical),
                 "--weight", "0.5"]) == 0
    return with_lexical


def test_a_classifier_without_the_companion_its_metadata_records_is_refused(classifier_with_lexical, tmp_path,
                                                                             capsys):
    from arabert_pipeline.classification.model import OnnxTextClassifier, TextClassifier

    copied = tmp_path / "files-only"  # `cp DIR/* new/`: the files, not lexical/
    copied.mkdir()
    for path in classifier_with_lexical.iterdir():
        if path.is_file():
            (copied / path.name).write_bytes(path.read_bytes())
    for backend in (TextClassifier, OnnxTextClassifier):
        with pytest.raises(ConfigError, match="records a lexical companion .* no lexical/ folder"):
            backend.load(copied)
    capsys.readouterr()
    assert main(["classify", "--model", str(copied), "نص"]) == 2
    assert "no lexical/ folder" in capsys.readouterr().err


@pytest.mark.slow
def test_the_standalone_export_carries_the_lexical_companion(classifier_with_lexical, tmp_path):
    import numpy as np

    from arabert_pipeline.classification.model import OnnxTextClassifier

    shipped = tmp_path / "shipped"
    assert main(["export-onnx", str(classifier_with_lexical), "--standalone", str(shipped)]) == 0
    assert sorted(p.name for p in (shipped / "lexical").iterdir()) == sorted(
        p.name for p in (classifier_with_lexical / "lexical").iterdir())
    model = OnnxTextClassifier.load(shipped)
    assert model.lexical is not None and model.lexical_weight == 0.5
    texts = ["الفيلم جميل جدا", "الخدمة سيء اليوم"]
    source = OnnxTextClassifier.load(classifier_with_lexical, quantize=True)  # the shipped graph is int8
    assert np.allclose(model.predict_proba(texts), source.predict_proba(texts), atol=1e-4)
    # rebuilt with --overwrite: the companion is the export's own to replace
    assert main(["export-onnx", str(classifier_with_lexical), "--standalone", str(shipped), "--overwrite"]) == 0


# 5. Two --eval sets never share a file name under OUT/eval/ ----------------------------------------------------------

@pytest.mark.parametrize("names", [("a/test.jsonl", "b/test.jsonl"), ("x y.jsonl", "x_y.jsonl")])
def test_finetune_refuses_eval_sets_that_would_share_a_file_name_before_training(toy, tmp_path, capsys, names):
    from arabert_pipeline.qa.transformer.config import FinetuneConfig

    root, train, dev, _ = toy
    evals = ["--eval"]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        evals.append(str(toys.write_jsonl(tmp_path / name, toys.texts(8, 5))))
    capsys.readouterr()
    assert finetune_classifier(toy, tmp_path / "out", *evals) == 2
    error = capsys.readouterr().err
    assert str(tmp_path / names[0]) in error and str(tmp_path / names[1]) in error and "another file name" in error
    assert not (tmp_path / "out").exists()
    # QA's finetune writes OUT/eval/ the same way and checks the same
    with pytest.raises(ConfigError, match="another file name"):
        FinetuneConfig(model="m", output=str(tmp_path / "qa"), train=["arcd-train"],
                       eval=[str(tmp_path / n) for n in names]).resolved()


# 6, 7. evaluate --task writes one predictions file a system and set, each readable back -------------------------------

def _labelled(path: Path, n: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return toys.write_jsonl(path, [{"id": i, "text": f"نص {i}", "label": "POS" if i % 2 else "NEG"}
                                   for i in range(n)])


def _predicted(path: Path, n: int) -> Path:
    return toys.write_jsonl(path, [{"id": str(i), "label": "POS"} for i in range(n)])


@pytest.mark.parametrize("labels, files", [(["run 1", "run_1"], ["p.jsonl", "q.jsonl"]),
                                           ([], ["a b.jsonl", "a_b.jsonl"])])
def test_evaluate_task_refuses_system_names_that_make_one_file_name(tmp_path, capsys, labels, files):
    data = _labelled(tmp_path / "data.jsonl", 6)
    predictions = [str(_predicted(tmp_path / name, 6)) for name in files]
    out = tmp_path / "out"
    capsys.readouterr()
    systems = [a for p in predictions for a in ("--predictions", p)] + [a for n in labels for a in ("--label", n)]
    assert main(["evaluate", "--task", "classification", "--data", str(data), *systems, "--baselines", "none",
                 "--resamples", "100", "-o", str(out)]) == 2
    error = capsys.readouterr().err
    assert "make the same file name" in error and "--label" in error
    assert not out.exists()


def test_evaluate_task_on_several_sets_writes_each_sets_predictions_apart(tmp_path):
    from arabert_pipeline.evaluate.tasks import TASKS, TaskEvaluateConfig, read_predictions, run_task_evaluation

    sets = [_labelled(tmp_path / "a" / "test.jsonl", 6), _labelled(tmp_path / "b" / "test.jsonl", 4)]
    predicted = _predicted(tmp_path / "p.jsonl", 6)  # ids 0..5: every id of both sets
    config = TaskEvaluateConfig(task="classification", data=[str(s) for s in sets], out=tmp_path / "out",
                                systems=[("predictions", str(predicted))], labels=["mine"], resamples=100)
    run_task_evaluation(config, log=lambda _: None)
    task = TASKS["classification"](config)
    read = [task.read(str(data)) for data in sets]
    task.setup([], [], read)
    written = sorted(p for p in (tmp_path / "out" / "predictions").rglob("*.jsonl") if p.is_file())
    assert len(written) == 2 and not (tmp_path / "out" / "predictions" / "mine.jsonl").exists()
    for data, labelled in zip(sets, read, strict=True):
        examples = labelled.examples
        [path] = [p for p in written if p.parent.name.endswith(f"{data.parent.name}_test.jsonl")]
        assert read_predictions(task, str(path), examples) == ["POS"] * len(examples)
        assert len(path.read_text(encoding="utf-8").splitlines()) == len(examples)


# 8. classify / tag --output: a concurrent run never replaces the other's file -----------------------------------------

def test_a_concurrent_classify_on_the_same_output_is_refused_not_replacing(classifier, tmp_path, monkeypatch, capsys):
    """Run B starts while run A, past its check that --output is free, is labelling: before, both passed the check,
    both exited 0 and A's rename replaced B's finished file."""
    from arabert_pipeline.pipeline import tasks

    output = tmp_path / "labels.jsonl"
    real, inner = tasks.task_pipeline, []

    def while_labelling(*args, **kwargs):
        if not inner:
            inner.append(None)
            inner[0] = main(["classify", "--model", str(classifier), "--output", str(output), "نص ثان", "وثالث"])
        return real(*args, **kwargs)

    monkeypatch.setattr(tasks, "task_pipeline", while_labelling)
    capsys.readouterr()
    assert main(["classify", "--model", str(classifier), "--output", str(output), "الفيلم جميل"]) == 0
    assert inner == [2] and "is in use by PID" in capsys.readouterr().err
    assert [json.loads(line)["id"] for line in output.read_text(encoding="utf-8").splitlines()] == [1]
    # and after it: the finished file is refused without --overwrite, replaced with it
    assert main(["classify", "--model", str(classifier), "--output", str(output), "نص", "آخر"]) == 2
    assert main(["classify", "--model", str(classifier), "--output", str(output), "--overwrite", "نص", "آخر"]) == 0
    assert len(output.read_text(encoding="utf-8").splitlines()) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.jsonl"]  # no lock or temporary left

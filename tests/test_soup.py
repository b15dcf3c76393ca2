"""`arabert-pipeline soup` (qa/transformer/soup.py) and the GPU script's `soup` mode, at tiny size on the CPU."""
from __future__ import annotations

import lzma
import os
import subprocess
import sys
import tarfile

import pytest

from conftest import REPO, build_tiny_bert
from data_slices import write_first_articles

torch = pytest.importorskip("torch")
SCRIPT = REPO / "scripts" / "gpu_pretrain.sh"


def test_average_is_the_mean_and_refuses_other_shapes():
    from arabert_pipeline.errors import ConfigError
    from arabert_pipeline.qa.transformer.soup import average

    a = {"w": torch.tensor([1.0, 2.0]), "ids": torch.tensor([0, 1])}
    b = {"w": torch.tensor([3.0, 6.0]), "ids": torch.tensor([0, 1])}
    mean = average([a, b])
    assert torch.equal(mean["w"], torch.tensor([2.0, 4.0])) and mean["ids"].dtype == torch.int64
    with pytest.raises(ConfigError, match="model 2: the shapes of"):
        average([a, {"w": torch.zeros(3), "ids": b["ids"]}])
    with pytest.raises(ConfigError, match="model 2: its tensors differ"):
        average([a, {"w": b["w"]}])


def test_a_soups_metadata_is_what_it_was_scored_with():
    from arabert_pipeline.qa.transformer.soup import soup_metadata

    best = {"task": "question-answering", "calibration": {"method": "platt"}, "reader_weight": 2.0,
            "sentence_prior": 4.0, "decoding": "expected-f1", "leading_words": ["عام"], "int8_decision": {},
            "null_score_diff_threshold": 3.5, "training_data": [{"name": "arcd-train-rest"}]}
    other = {"training_data": [{"name": "xquad-ar"}, {"name": "arcd-train-rest"}]}
    written = soup_metadata(best, [best, other], {"members": ["a", "b"]})
    assert "calibration" not in written and "int8_decision" not in written
    assert (written["reader_weight"], written["sentence_prior"], written["decoding"], written["leading_words"],
            written["null_score_diff_threshold"]) == (0.0, 0.0, "max-score", [], 0.0)
    assert [e["name"] for e in written["training_data"]] == ["arcd-train-rest", "xquad-ar"]


def tiny_qa_models(tmp_path, texts, count, *, noise=0.05, max_positions=256, prefix="m"):
    """`count` random tiny BERT QA models with QA metadata, each one's weights perturbed by its own seed."""
    from safetensors.torch import load_file, save_file

    from arabert_pipeline.artifacts.metadata import read_metadata, write_metadata

    models = []
    for i in range(count):
        model = build_tiny_bert(tmp_path / f"{prefix}{i}", texts, "BertForQuestionAnswering", vocab_size=600,
                                max_positions=max_positions)
        weights = load_file(model / "model.safetensors")
        torch.manual_seed(i)
        save_file({k: v + noise * torch.randn_like(v) if v.is_floating_point() else v for k, v in weights.items()},
                  model / "model.safetensors", metadata={"format": "pt"})
        write_metadata(model, **{**read_metadata(model), "task": "question-answering",
                                 "training_data": [{"name": f"set-{i}"}]})
        if models:  # one start: one tokenizer
            for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
                (model / name).write_bytes((models[0] / name).read_bytes())
        models.append(model)
    return models


def test_soup_keeps_what_helps_on_dev_and_writes_the_average(qa_slices, tmp_path, monkeypatch):
    """A scorer that prefers the mean of m0 and m1: the soup must keep both, leave m2 out and write their mean."""
    from safetensors.torch import load_file

    from arabert_pipeline.artifacts.metadata import read_metadata
    from arabert_pipeline.qa.data import read_squad
    from arabert_pipeline.qa.transformer import soup as soup_module

    train, test = qa_slices
    texts = [e["context"] for e in read_squad(train, misaligned="keep").examples]
    models = tiny_qa_models(tmp_path, texts, 3)
    states = [load_file(m / "model.safetensors") for m in models]
    target = (states[0]["qa_outputs.weight"] + states[1]["qa_outputs.weight"]) / 2
    monkeypatch.setattr(soup_module, "dev_score",
                        lambda qa, files, batch_size: -float((qa.model.qa_outputs.weight.detach().cpu() - target)
                                                             .norm()))
    report = soup_module.make_soup(models, [str(test)], tmp_path / "soup", batch_size=8, say=lambda m: None)
    assert sorted(report["members"]) == ["m0", "m1"] and report["dev"] == pytest.approx(0.0, abs=1e-6)
    assert [row["kept"] for row in report["tried"]] == [True, False]
    written = load_file(tmp_path / "soup" / "model.safetensors")
    assert all(torch.allclose(written[k], (states[0][k] + states[1][k]) / 2) for k in written
               if written[k].is_floating_point())
    metadata = read_metadata(tmp_path / "soup")
    assert {e["name"] for e in metadata["training_data"]} == {"set-0", "set-1", "set-2"}
    assert metadata["soup"] == report


@pytest.mark.slow
def test_soup_verb_on_real_dev_scores_and_its_refusals(qa_slices, tmp_path, capsys):
    from arabert_pipeline.artifacts.metadata import read_metadata, write_metadata
    from arabert_pipeline.cli import main
    from arabert_pipeline.errors import ConfigError
    from arabert_pipeline.qa.data import read_squad
    from arabert_pipeline.qa.transformer.model import QAModel
    from arabert_pipeline.qa.transformer.soup import make_soup

    train, test = qa_slices
    texts = [e["context"] for e in read_squad(train, misaligned="keep").examples]
    models = tiny_qa_models(tmp_path, texts, 2)
    soup = tmp_path / "soup"
    assert main(["soup", *map(str, models), "--dev", str(test), "-o", str(soup), "--batch-size", "8"]) == 0
    assert "tune-decoding" in capsys.readouterr().out
    report = read_metadata(soup)["soup"]
    assert set(report["dev_alone"]) == {"m0", "m1"} and len(report["tried"]) == 1
    assert report["members"][0] == max(report["dev_alone"], key=report["dev_alone"].get)
    assert (soup / "soup.json").exists() and (soup / "tokenizer.json").exists()
    QAModel.load(soup).predict([{"question": "ما هذا؟", "context": texts[0]}])

    def refused(match, these=models, output="refused", **options):
        with pytest.raises(ConfigError, match=match):
            make_soup(these, [str(test)], tmp_path / output, **{"batch_size": 8, "say": lambda m: None, **options})

    # an earlier soup is replaced only with --overwrite, a directory of something else never
    refused("overwrite", output="soup")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    refused("other", output="other")
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"
    refused("at least two", these=models[:1])
    refused("positive integer", batch_size=0)
    # runs of another recipe, another start, or trained on the dev set, are named before anything is scored
    original = read_metadata(models[1])
    write_metadata(models[1], **{**original, "max_seq_length": 128})
    refused("m1: its max_seq_length")
    write_metadata(models[1], **{**original, "max_seq_length": original.get("max_seq_length"),
                                 "training_data": [{"name": read_squad(str(test)).name}]})
    refused("m1 was trained on")
    other = tiny_qa_models(tmp_path, texts, 1, max_positions=128, prefix="other-start")[0]
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        (other / name).write_bytes((models[0] / name).read_bytes())
    refused("other-start0: the shapes of", these=[models[0], other])
    unfinished = tiny_qa_models(tmp_path, texts, 1, prefix="unfinished")[0]
    (unfinished / "arabert_pipeline.json").unlink()
    refused("unfinished0", these=[models[0], unfinished])


@pytest.mark.slow
def test_script_soup_mode_fine_tunes_seeds_and_packs_their_soup(qa_slices, tmp_path):
    """What a lent GPU runs: pieces of a QA model and a data root (one set compressed) in, the soup's pieces out."""
    train, test = qa_slices
    from arabert_pipeline.qa.data import read_squad

    texts = [e["context"] for e in read_squad(train, misaligned="keep").examples]
    start = build_tiny_bert(tmp_path / "random", texts, "BertForQuestionAnswering", vocab_size=600, max_positions=256)
    env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1")
    common = ["--question-overlap", "--max-seq-length", "64", "--doc-stride", "32", "--skip-misaligned",
              "--no-progress", "--batch-size", "8"]
    # the start, as in real use, is itself a fine-tuned QA model (token type 2 added)
    tuned = subprocess.run([sys.executable, "-m", "arabert_pipeline.cli", "finetune", "--model", str(start),
                            "--train", str(train), "--epochs", "1", "-o", str(tmp_path / "start"), *common],
                           env=env, capture_output=True, text=True, timeout=600)
    assert tuned.returncode == 0, tuned.stderr

    carried = tmp_path / "carried"
    (carried / "data").mkdir(parents=True)
    with tarfile.open(tmp_path / "model.tar", "w") as tar:
        for path in sorted((tmp_path / "start").iterdir()):
            if path.is_file():
                tar.add(path, arcname=path.name)
    (carried / "model.tar.part-00").write_bytes((tmp_path / "model.tar").read_bytes())
    (carried / "data" / "train.json").write_bytes(train.read_bytes())
    (carried / "data" / "dev.json.xz").write_bytes(lzma.compress(test.read_bytes()))
    held = write_first_articles("tydiqa-goldp-ar-dev", carried / "data" / "held.json", 2)
    work, out = tmp_path / "work", tmp_path / "out"
    ran = subprocess.run(["bash", str(SCRIPT), "soup", str(carried), str(out)], env=dict(
        env, WORK=str(work), TRAIN=str(work / "data" / "train.json"), DEV=str(work / "data" / "dev.json"),
        HOLD_OUT=str(held), SEEDS="1 2", EPOCHS="1", SEQ="64", STRIDE="32", BATCH="8", DEVICE="cpu",
        SEED_SECONDS="5", HARD_LIMIT="500"), capture_output=True, text=True, timeout=900)
    log = (out / "run.log").read_text()
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "seed 1 exit 0" in log and "seed 2 exit 0" in log, log
    model = tmp_path / "model"
    unpacked = subprocess.run(["bash", str(SCRIPT), "unpack", str(out), str(model)], env=env, capture_output=True,
                              text=True)
    assert unpacked.returncode == 0, unpacked.stderr
    from arabert_pipeline.artifacts.metadata import read_metadata

    soup = read_metadata(model)["soup"]
    assert set(soup["dev_alone"]) == {"start", "seed-1", "seed-2"} and soup["members"]

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


def test_a_soups_metadata_drops_what_belonged_to_one_model():
    from arabert_pipeline.qa.transformer.soup import soup_metadata

    best = {"task": "question-answering", "calibration": {"method": "platt"}, "reader_weight": 2.0,
            "sentence_prior": 4.0}
    several = soup_metadata(best, {"members": ["a", "b"]})
    assert "calibration" not in several and several["reader_weight"] == 0.0 and several["sentence_prior"] == 4.0
    alone = soup_metadata(best, {"members": ["a"]})
    assert alone["calibration"] == {"method": "platt"} and alone["soup"] == {"members": ["a"]}


def test_soup_starts_from_the_best_and_writes_a_loadable_model(qa_slices, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    from arabert_pipeline.artifacts import read_metadata
    from arabert_pipeline.cli import main
    from arabert_pipeline.errors import ConfigError
    from arabert_pipeline.qa.data import read_squad
    from arabert_pipeline.qa.transformer.model import QAModel
    from arabert_pipeline.qa.transformer.soup import average, greedy_soup, make_soup

    train, test = qa_slices
    texts = [e["context"] for e in read_squad(train, misaligned="keep").examples]
    models = []
    for i in range(3):
        model = build_tiny_bert(tmp_path / f"m{i}", texts, "BertForQuestionAnswering", vocab_size=600,
                                max_positions=256)
        weights = load_file(model / "model.safetensors")
        torch.manual_seed(i)
        save_file({k: v + 0.05 * torch.randn_like(v) if v.is_floating_point() else v for k, v in weights.items()},
                  model / "model.safetensors", metadata={"format": "pt"})
        models.append(model)
    chosen, state, report = greedy_soup(models, [str(test)], batch_size=8, say=lambda message: None)
    alone = report["dev_alone"]
    assert chosen[0] == max(models, key=lambda m: alone[m.name])
    assert len(report["tried"]) == 2 and report["dev"] >= max(alone.values())
    assert [p.name for p in chosen] == report["members"]

    soup = tmp_path / "soup"
    assert main(["soup", *map(str, models), "--dev", str(test), "-o", str(soup), "--batch-size", "8"]) == 0
    assert "wrote" in capsys.readouterr().out
    written = read_metadata(soup)["soup"]
    assert written["members"] == report["members"] and (soup / "soup.json").exists()
    averaged = load_file(soup / "model.safetensors")
    expected = average([load_file(m / "model.safetensors") for m in chosen])
    assert all(torch.allclose(averaged[k], expected[k]) for k in expected)
    QAModel.load(soup).predict([{"question": "ما هذا؟", "context": texts[0]}])
    # an earlier soup is replaced only with --overwrite; a directory of something else never; one model is no soup
    with pytest.raises(ConfigError, match="overwrite"):
        make_soup(models, [str(test)], soup, batch_size=8, say=lambda message: None)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError):
        make_soup(models, [str(test)], tmp_path / "other", batch_size=8, say=lambda message: None)
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"
    with pytest.raises(ConfigError, match="at least two"):
        make_soup(models[:1], [str(test)], tmp_path / "one")
    # a model from another start (here: other position embeddings) is named, before any averaging
    other = build_tiny_bert(tmp_path / "other-start", texts, "BertForQuestionAnswering", vocab_size=600,
                            max_positions=128)
    with pytest.raises(ConfigError, match="other-start: the shapes of"):
        make_soup([models[0], other], [str(test)], tmp_path / "mixed", batch_size=8, say=lambda message: None)


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
    from arabert_pipeline.artifacts import read_metadata

    soup = read_metadata(model)["soup"]
    assert set(soup["dev_alone"]) == {"start", "seed-1", "seed-2"} and soup["members"]

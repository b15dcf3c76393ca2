"""Issue 41: the paper's protocol with the published checkpoints, on offline stand-ins of them.

The stand-ins (scripts/hub_standins.py) are laid out as the hub repositories are, with the real vocabularies from the
shared data and random weights at tiny size, and are read from a temporary hub cache with the hub offline: the same
`from_pretrained(repo_id)` path a user with the network takes.
"""
from __future__ import annotations

import importlib.util
import json
import os
import stat
import subprocess
import sys

import pytest

from conftest import REPO, SHARED_DATA
from data_slices import write_first_articles

pytest.importorskip("torch")

V2, V02, MBERT = "aubmindlab/bert-base-arabertv2", "aubmindlab/bert-base-arabertv02", "bert-base-multilingual-cased"
QA_HUB = "someone/bert-base-arabertv2-arcd"  # a QA checkpoint fine-tuned by someone else, without our metadata
# Preprocessed (arabertv2) ARCD-style text: markers, a placeholder, punctuation.
SEGMENTED = "و+ قال ال+ رئيس إن +ه س+ يزور ال+ مدينة [رابط] ، و+ ب+ ال+ تالي ف+ إن ال+ زيارة مهمة ."


def _standins():
    spec = importlib.util.spec_from_file_location("hub_standins", REPO / "scripts" / "hub_standins.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    vocab = SHARED_DATA / "vocab"
    if not (vocab / "arabertv2-farasa-segmented-vocab.txt").is_file():
        pytest.skip(f"needs the shared vocabularies in {vocab}")
    standins, cache = _standins(), tmp_path_factory.mktemp("hub")
    for repo_id in (V2, V02, MBERT):
        standins.build_standin(cache, repo_id, vocab)
    standins.build_standin(cache, QA_HUB, vocab, like=V2, model_class="BertForQuestionAnswering")
    return cache


@pytest.fixture
def offline_hub(hub_cache, monkeypatch):
    """The stand-ins' cache as the hub cache, the hub offline: in this process and in the commands it starts."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return hub_cache


@pytest.fixture(scope="module")
def slices(tmp_path_factory, shared_data):
    directory = tmp_path_factory.mktemp("slices")
    return write_first_articles("arcd-train", directory / "train.json", 2), \
        write_first_articles("arcd-test", directory / "test.json", 1)


def _finetune(args: list[str]) -> int:
    from arabert_pipeline.cli import main

    return main(["finetune", "--epochs", "1", "--batch-size", "4", "--no-progress", *args])


@pytest.fixture(scope="module")
def finetuned_v2(hub_cache, slices, tmp_path_factory):
    """AraBERTv2's stand-in fine-tuned for one epoch (module-scoped: its offline hub patched by hand)."""
    with pytest.MonkeyPatch.context() as patch:
        from huggingface_hub import constants

        patch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
        patch.setattr(constants, "HF_HUB_OFFLINE", True)
        out = tmp_path_factory.mktemp("qa") / "v2"
        assert _finetune(["--model", V2, "--preprocessing", "arabertv2", "--train", str(slices[0]),
                          "-o", str(out)]) == 0
    return out


# 1. Farasa markers ----------------------------------------------------------------------------------------------

def test_hub_arabertv2_tokenizer_keeps_farasa_markers_and_placeholders_whole(offline_hub):
    from arabert_pipeline.tokenizer.load import load_pretrained_tokenizer

    tokenizer = load_pretrained_tokenizer(V2)
    vocab = tokenizer.get_vocab()
    tokens = tokenizer.tokenize(SEGMENTED)
    assert "+" not in tokens
    words = SEGMENTED.split()
    for marker in ("و+", "ال+", "+ه", "س+", "ب+", "ف+", "[رابط]"):
        assert tokens.count(marker) == words.count(marker), marker
    ids = tokenizer(SEGMENTED)["input_ids"]
    assert ids.count(vocab["ال+"]) == words.count("ال+")
    assert len(tokenizer) == len(vocab) and all(vocab[t] == tokenizer.convert_tokens_to_ids(t) for t in tokens)


def test_markers_are_kept_whole_only_where_the_vocabulary_has_them(offline_hub):
    """mBERT was pretrained with BERT's own splitting: its `+` stays a token of its own; AraBERTv0.2's vocabulary has
    no markers, only its placeholders are kept whole."""
    from arabert_pipeline.tokenizer.load import load_pretrained_tokenizer

    mbert = load_pretrained_tokenizer(MBERT).tokenize("ال+ كتاب [رابط]")
    assert mbert[:2] == ["ال", "+"] and "[" in mbert
    v02 = load_pretrained_tokenizer(V02).tokenize("ال+ كتاب [رابط]")
    assert v02[:2] == ["ال", "+"]
    if "[رابط]" in load_pretrained_tokenizer(V02).get_vocab():
        assert v02[-1] == "[رابط]"


@pytest.mark.slow
def test_finetuned_hub_arabertv2_saves_the_mended_tokenizer(finetuned_v2):
    """The model dir is loaded by plain transformers (no package): it must split as the model was trained."""
    from transformers import AutoTokenizer

    tokens = AutoTokenizer.from_pretrained(finetuned_v2).tokenize(SEGMENTED)
    assert "+" not in tokens and tokens.count("ال+") == SEGMENTED.split().count("ال+")


# 2 and 3. Gradient accumulation, short runs ---------------------------------------------------------------------

@pytest.mark.slow
def test_finetune_accumulates_gradients_and_stops_at_max_steps(offline_hub, slices, tmp_path):
    from arabert_pipeline.artifacts.metadata import read_metadata

    full, accumulated, short = tmp_path / "full", tmp_path / "accumulated", tmp_path / "short"
    common = ["--model", V2, "--preprocessing", "arabertv2", "--train", str(slices[0]), "--batch-size", "2"]
    assert _finetune([*common, "-o", str(full)]) == 0
    windows = read_metadata(full)["finetune"]["train_windows"]
    assert read_metadata(full)["finetune"]["steps"] == -(-windows // 2)
    assert _finetune([*common, "-o", str(accumulated), "--grad-accum", "3"]) == 0
    assert read_metadata(accumulated)["finetune"]["steps"] == -(-windows // 2) // 3
    assert _finetune([*common, "-o", str(short), "--max-steps", "2", "--epochs", "3"]) == 0
    run = read_metadata(short)["finetune"]
    assert (run["steps"], run["max_steps"]) == (2, 2)
    last = json.loads((short / "log.jsonl").read_text().splitlines()[-1])
    assert last["step"] == 2 and last["peak_rss_gib"] > 0
    from arabert_pipeline.training import warmup_steps
    from arabert_pipeline.training.optim import lr_factor

    def logged_lr(total: int) -> float:  # the log row's mean over its steps, 0 and 1
        warmup = warmup_steps(0.1, total)
        return 3e-5 * (lr_factor(0, warmup, total) + lr_factor(1, warmup, total)) / 2

    planned = 3 * (-(-windows // 2))  # the 3 epochs' steps
    assert last["lr"] == pytest.approx(logged_lr(2)) and last["lr"] != pytest.approx(logged_lr(planned))


@pytest.mark.slow
def test_a_checkpoint_from_before_these_settings_resumes(offline_hub, slices, tmp_path):
    """A run interrupted under the previous version (its checkpoint's config lacks grad_accum, max_steps,
    time_budget) continues: it ran with their defaults."""
    from arabert_pipeline.qa.transformer.finetune import FinetuneConfig, QATrainer, run_finetune

    config = FinetuneConfig(model=V2, output=str(tmp_path / "qa"), train=[str(slices[0])], preprocessing="arabertv2",
                            epochs=1, batch_size=4, progress=False)
    trainer = QATrainer(config.resolved(), log=lambda _: None)
    trainer.on_step = lambda engine: engine.request_stop() if engine.state.step == 1 else None
    assert not trainer.train()
    (state_file,) = (tmp_path / "qa" / "checkpoints").glob("*/trainer_state.json")
    state = json.loads(state_file.read_text())
    for name in ("grad_accum", "max_steps", "time_budget"):
        del state["config"][name]
    state_file.write_text(json.dumps(state))
    config.resume = "latest"
    assert run_finetune(config).completed


@pytest.mark.slow
def test_finetune_time_budget_fits_the_schedule_and_saves_the_model(offline_hub, slices, tmp_path):
    from arabert_pipeline.artifacts.metadata import read_metadata

    out = tmp_path / "budget"
    assert _finetune(["--model", V2, "--preprocessing", "arabertv2", "--train", str(slices[0]), "--batch-size", "1",
                      "--epochs", "1000", "--time-budget", "0.05", "-o", str(out)]) == 0
    run = read_metadata(out)["finetune"]
    windows = run["train_windows"]
    assert 0 < run["steps"] < windows * 1000 and run["time_budget"] == 0.05
    assert (out / "model.safetensors").is_file()


def test_finetune_flags_are_checked(offline_hub, slices, tmp_path):
    from arabert_pipeline.errors import ConfigError
    from arabert_pipeline.qa.transformer.finetune import FinetuneConfig, run_finetune

    for field, value in (("grad_accum", 0), ("max_steps", 0)):
        config = FinetuneConfig(model=V2, output=str(tmp_path / field), train=[str(slices[0])],
                                preprocessing="arabertv2", **{field: value})
        with pytest.raises(ConfigError, match=field):
            run_finetune(config)


# 5. evaluate and tune-decoding on a device; a hub QA checkpoint ---------------------------------------------------

@pytest.mark.slow
def test_evaluate_scores_a_hub_qa_checkpoint_with_its_preprocessing(offline_hub, slices, tmp_path):
    from arabert_pipeline.cli import main

    out = tmp_path / "report"
    assert main(["evaluate", "--model", QA_HUB, "--preprocessing", "arabertv2", "--device", "cpu", "--data",
                 str(slices[1]), "-o", str(out), "--resamples", "100", "--baselines", "none"]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    system = results["systems"][0]
    # The stand-in's vocabulary is the shared file's (64,000 entries; the slice a fresh clone tests with has fewer).
    vocab = (SHARED_DATA / "vocab" / "arabertv2-farasa-segmented-vocab.txt").read_text(encoding="utf-8").splitlines()
    assert system["info"]["hub_id"] == QA_HUB and system["info"]["vocab_size"] == len(vocab)
    assert results["config"]["preprocessing"] == "arabertv2"
    assert main(["evaluate", "--model", QA_HUB, "--data", str(slices[1]), "-o", str(tmp_path / "r2"),
                 "--resamples", "100", "--baselines", "none"]) == 2  # no preprocessing recorded, none given


@pytest.mark.slow
def test_evaluate_and_tune_decoding_refuse_a_missing_device_before_work(finetuned_v2, tmp_path, capsys, monkeypatch):
    import torch

    from arabert_pipeline.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["evaluate", "--model", str(finetuned_v2), "--device", "cuda", "--data", "arcd-test",
                 "-o", str(tmp_path / "r")]) == 2
    assert "not available" in capsys.readouterr().err and not (tmp_path / "r").exists()
    assert main(["tune-decoding", str(finetuned_v2), "--dev", "arcd-dev", "--device", "cuda",
                 "-o", str(tmp_path / "t")]) == 2
    assert "not available" in capsys.readouterr().err


# 6. The report's notes from what was run ------------------------------------------------------------------------

@pytest.mark.slow
def test_report_notes_say_what_the_models_are(finetuned_v2, slices, tmp_path):
    from arabert_pipeline.cli import main
    from arabert_pipeline.evaluate.report import System, describe_setup

    out = tmp_path / "report"
    assert main(["evaluate", "--model", str(finetuned_v2), "--label", "v2", "--data", str(slices[1]), "-o", str(out),
                 "--resamples", "100", "--baselines", "none"]) == 0
    table = (out / "table.md").read_text(encoding="utf-8")
    assert "base_model=aubmindlab/bert-base-arabertv2" in table and "training_data=train.json" in table
    assert "much smaller" not in table and "not BERT-base (L2/H32): v2" in table
    assert "**mBERT.**" not in table  # no mBERT row, nothing to say about one

    base = dict(hidden_size=768, num_hidden_layers=12, training_data="arabic-squad + arcd-train")
    mbert_note, paper_note, comparable = describe_setup([
        System("mBERT", "model", "runs/m", {"base_model": MBERT, "vocab_size": 119_547, **base}),
        System("AraBERTv2", "model", "runs/a", {"base_model": V2, "vocab_size": 64_000, **base}),
    ])
    assert comparable and "follow that protocol" in paper_note and "not comparable" not in paper_note
    assert f"fine-tuned from `{MBERT}`" in mbert_note and "stand-in" not in mbert_note
    _, paper_note, comparable = describe_setup([
        System("small", "model", "runs/s", {"base_model": "runs/pretrain/t6-mbert-vocab", "vocab_size": 119_547,
                                             "hidden_size": 256, "num_hidden_layers": 4,
                                             "training_data": "arcd-train + xquad-ar"})])
    assert not comparable and "pretrained here" in paper_note and "not Arabic-SQuAD" in paper_note


# 7. Wrong preprocessing -------------------------------------------------------------------------------------------

def test_unsegmented_preprocessing_is_refused_for_a_segmented_vocabulary(offline_hub, slices, tmp_path):
    from arabert_pipeline.errors import ConfigError
    from arabert_pipeline.qa.transformer.finetune import FinetuneConfig, run_finetune

    config = FinetuneConfig(model=V2, output=str(tmp_path / "qa"), train=[str(slices[0])], preprocessing="arabertv02")
    with pytest.raises(ConfigError, match="Farasa-segmented text.*--preprocessing arabertv2"):
        run_finetune(config)


@pytest.mark.slow
def test_segmented_preprocessing_for_a_vocabulary_without_markers_is_warned(offline_hub, slices, tmp_path):
    from arabert_pipeline.qa.transformer.finetune import FinetuneConfig, run_finetune

    said = []
    run_finetune(FinetuneConfig(model=MBERT, output=str(tmp_path / "qa"), train=[str(slices[0])],
                                preprocessing="arabertv2", max_steps=1, batch_size=4, progress=False), log=said.append)
    assert any(line.startswith("WARNING") and "none of the Farasa segmentation markers" in line for line in said)


# 8. Minor ---------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_no_progress_means_no_bar_and_outputs_are_not_private(offline_hub, slices, tmp_path, capfd):
    out = tmp_path / "qa"
    capfd.readouterr()
    assert _finetune(["--model", MBERT, "--preprocessing", "none", "--train", str(slices[0]), "-o", str(out),
                      "--max-steps", "1"]) == 0
    printed = capfd.readouterr()
    assert "it/s]" not in printed.err + printed.out  # no tqdm bar (transformers' "Loading weights" was one)
    umask = os.umask(0)
    os.umask(umask)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o666 & ~umask, name


def test_a_hub_model_without_a_qa_head_is_named_as_such(offline_hub):
    from arabert_pipeline.errors import ConfigError
    from arabert_pipeline.pipeline.core import Pipeline

    with pytest.raises(ConfigError) as raised:
        Pipeline(V2, preprocessing="arabertv2", backend="torch")
    assert "no trained question-answering head" in str(raised.value)
    assert "did not provide" not in str(raised.value)


# 4. The paper's protocol as one command ---------------------------------------------------------------------------

@pytest.mark.slow
def test_paper_protocol_script_dry_run(tmp_path, shared_data):
    """Every step of scripts/paper_table6.sh at stand-in size: five checkpoints, the paper's recipe, one report."""
    if not (shared_data / "vocab" / "arabertv2-farasa-segmented-vocab.txt").is_file():
        pytest.skip("needs the shared vocabularies")
    env = dict(os.environ, DRY_RUN="1", ARABERT_PIPELINE_DATA=str(shared_data), PYTHON=sys.executable,
               OMP_NUM_THREADS="1")
    ran = subprocess.run(["bash", str(REPO / "scripts" / "paper_table6.sh"), str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=900)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    expected = {"mbert": "none", "arabertv01": "arabertv02", "arabertv1": "arabertv2", "arabertv02": "arabertv02",
                "arabertv2": "arabertv2"}
    for system, preprocessing in expected.items():
        metadata = json.loads((tmp_path / "paper-table6" / f"{system}-s0" / "arabert_pipeline.json").read_text())
        run = metadata["finetune"]
        assert metadata["preprocessing"] == preprocessing
        assert (run["lr"], run["max_seq_length"], run["doc_stride"], run["batch_size"] * run["grad_accum"]) == (
            3e-5, 384, 128, 8)
        assert [d["name"] for d in metadata["training_data"]] == ["arabic-squad", "arcd-train"]
        assert [d["name"] for d in metadata["evaluation_data"]] == ["arcd-test"]
        assert run["steps"] == 2 and run["seed"] == 0
    results = json.loads((tmp_path / "report" / "results.json").read_text())
    assert [s["label"] for s in results["systems"] if s["kind"] == "model"] == [
        "mBERT-s0", "AraBERTv0.1-s0", "AraBERTv1-s0", "AraBERTv0.2-s0", "AraBERTv2-s0"]
    assert results["systems"][0]["info"]["base_model"] == MBERT
    for name in ("table.md", "seeds.md", "pooled.md"):
        assert (tmp_path / "report" / name).stat().st_size > 0

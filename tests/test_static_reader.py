"""The DrQA-style reader over static vectors (qa/static/), at toy size: a vocabulary of a few dozen words and
a task whose answer is always the word after a marker word, so that a reader that learns at all gets it right."""
from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

from arabert_pipeline.cli import main
from arabert_pipeline.errors import ConfigError

FILLER = ["كان", "في", "المدينة", "سوق", "كبير", "يبيع", "الناس", "فيه", "الخبز", "والتمر", "والقهوة", "كل", "يوم",
          "بعد", "الظهر", "قرب", "النهر"]
MARKER = "اسمه"
# Diacritics and tatweel in the original text: arabertv02 removes them, so the preprocessed context differs from the
# original and a span can only come back exact through the offset map.
NAMES = ["مُحَمَّد", "خـالد", "سَعِيد", "يوسف", "عُمَر", "طارق", "ليلى", "هِنْد"]


def _bare(word: str) -> str:
    from arabert_pipeline.preprocess import Preprocessor

    return Preprocessor("arabertv02").preprocess(word)


@pytest.fixture(scope="module")
def embeddings_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("vectors")
    words = sorted({_bare(w) for w in FILLER + NAMES + [MARKER, "ما", "اذكر", "؟", "قال", "الراوي"]})
    vectors = np.random.default_rng(0).normal(size=(len(words), 16)).astype(np.float32)
    np.save(directory / "vectors.npy", vectors, allow_pickle=False)
    (directory / "words.txt").write_text("".join(f"{w}\t{10}\n" for w in words), encoding="utf-8")
    (directory / "arabert_pipeline.json").write_text(json.dumps(
        {"task": "word-embeddings", "preprocessing": "arabertv02", "dim": 16, "model": "word2vec"}), encoding="utf-8")
    return directory


def _squad(path, count: int, seed: int, extra: list[dict] = (), asking: str = "ما") -> list[dict]:
    """`asking`: the question word. Dev sets ask with another one than training sets: the same question with the same
    answer in both would be a leak, which train-reader drops as finetune does."""
    rng = random.Random(seed)
    paragraphs, examples = [], []
    for i in range(count):
        before = rng.sample(FILLER, rng.randint(1, 8))
        after = rng.sample(FILLER, rng.randint(1, 8))
        name = rng.choice(NAMES)
        context = " ".join(before) + f" {MARKER} {name} " + " ".join(after) + "."
        start = context.index(f" {MARKER} ") + len(MARKER) + 2
        qa = {"id": f"q{seed}-{i}", "question": f"{asking} {MARKER} ؟",
              "answers": [{"text": name, "answer_start": start}]}
        paragraphs.append({"context": context, "qas": [qa]})
        examples.append({"id": qa["id"], "context": context, "answers": {"text": [name], "answer_start": [start]}})
    for item in extra:
        paragraphs.append({"context": item["context"], "qas": [{"id": item["id"], "question": f"ما {MARKER} ؟",
                                                                "answers": item["answers"]}]})
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "toy", "paragraphs": paragraphs}]},
                               ensure_ascii=False), encoding="utf-8")
    return examples


@pytest.fixture(scope="module")
def trained(embeddings_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("reader")
    # Chinese is outside AraBERT's character whitelist: the answer vanishes in preprocessing and must be skipped.
    lost = {"id": "lost", "context": f"قال الراوي {MARKER} 中文 في المدينة.",
            "answers": [{"text": "中文", "answer_start": len(f"قال الراوي {MARKER} ")}]}
    _squad(base / "train.json", 120, seed=1, extra=[lost])
    dev = _squad(base / "dev.json", 30, seed=2, asking="اذكر")
    out = base / "reader"
    code = main(["train-reader", "--embeddings", str(embeddings_dir), "--train", str(base / "train.json"),
                 "--dev", str(base / "dev.json"), "-o", str(out), "--hidden", "24", "--layers", "1",
                 "--epochs", "12", "--batch-size", "16", "--lr", "0.01", "--dropout", "0.1", "--tune-top-k", "3",
                 "--no-progress"])
    assert code == 0
    return base, out, dev


def test_training_writes_the_output_and_counts_skipped_answers(trained):
    _, out, _ = trained
    assert sorted(p.name for p in out.iterdir()) == ["arabert_pipeline.json", "log.jsonl", "reader.safetensors",
                                                     "reader_config.json"]
    metadata = json.loads((out / "arabert_pipeline.json").read_text(encoding="utf-8"))
    assert metadata["task"] == "static-reader" and metadata["preprocessing"] == "arabertv02"
    assert metadata["skipped_unaligned"] == 1 and metadata["train_questions"] == 120
    assert len(metadata["epochs"]) == 12
    # The epoch is chosen on the transformer's dev metric (SOQAL F1); the first of equal scores is kept.
    assert metadata["dev_metric"] == "soqal_f1"
    best = max(metadata["epochs"], key=lambda row: row["dev_soqal_f1"])
    assert metadata["best_epoch"] == best["epoch"] and metadata["best_dev_soqal_f1"] == best["dev_soqal_f1"]
    assert metadata["best_dev_f1"] == best["dev_f1"]
    losses = [row["loss"] for row in map(json.loads, (out / "log.jsonl").read_text().splitlines()) if "loss" in row]
    assert losses and losses[-1] < losses[0]
    assert metadata["best_dev_em"] >= 90, metadata["epochs"]
    config = json.loads((out / "reader_config.json").read_text(encoding="utf-8"))
    assert len(config["tuned_words"]) == 3 and _bare(MARKER) in config["tuned_words"]


def test_predictions_are_exact_original_spans_and_right(trained, tmp_path):
    base, out, dev = trained
    predictions = tmp_path / "predictions.json"
    assert main(["reader-predict", str(out), "--data", str(base / "dev.json"), "-o", str(predictions)]) == 0
    answers = json.loads(predictions.read_text(encoding="utf-8"))
    assert set(answers) == {e["id"] for e in dev}
    correct = 0
    for example in dev:
        answer = answers[example["id"]]
        # The original's characters, diacritics and tatweel included: never the preprocessed form.
        assert example["context"][answer["start"]: answer["start"] + len(answer["text"])] == answer["text"]
        correct += answer["text"] == example["answers"]["text"][0]
    assert correct >= 0.9 * len(dev)
    assert any(answers[e["id"]]["text"] != _bare(answers[e["id"]]["text"]) for e in dev)


@pytest.mark.slow
def test_predictions_load_in_evaluate(trained, tmp_path):
    base, out, dev = trained
    predictions = tmp_path / "p.json"
    assert main(["reader-predict", str(out), "--data", str(base / "dev.json"), "-o", str(predictions)]) == 0
    from arabert_pipeline.evaluate.report import load_predictions_file

    assert len(load_predictions_file(predictions)) == len(dev)
    report = tmp_path / "report"
    assert main(["evaluate", "--predictions", str(predictions), "--label", "reader", "--data",
                 str(base / "dev.json"), "-o", str(report), "--baselines", "none", "--resamples", "100"]) == 0
    results = json.loads((report / "results.json").read_text(encoding="utf-8"))
    (dataset,) = results["datasets"].values() if isinstance(results["datasets"], dict) else results["datasets"]
    summary = dataset["systems"]["reader"]
    assert summary["questions"] == len(dev) and summary["missing"] == 0
    assert summary["scores"]["arabic_em"]["mean"] >= 90  # a percentage: 0.9 would pass with 1 answer right in 30


def test_an_answer_does_not_depend_on_its_batch(trained):
    from arabert_pipeline.qa.data import read_squad
    from arabert_pipeline.qa.static.predict import StaticReader

    base, out, _ = trained
    reader = StaticReader.load(out)
    examples = read_squad(base / "dev.json").examples
    together = reader.predict(examples)
    alone = {}
    for example in examples[:6]:
        alone.update(reader.predict([example]))
    assert all(alone[k] == together[k] for k in alone)


def test_best_span_respects_order_and_length():
    import torch

    from arabert_pipeline.qa.static.model import best_spans

    start = torch.tensor([[0.0, 0.0, 20.0, 0.0, 0.0, 0.0]])
    end = torch.tensor([[0.0, 9.0, 0.0, 0.0, 0.0, 5.0]])  # the best end lies before the best start
    assert best_spans(start, end, 15) == [(2, 5)]
    assert best_spans(start, end, 2) == [(2, 2)]  # 5 words would be too long; the tie goes to the shorter
    end[0, 5] = float("-inf")
    end[0, 3] = 4.0
    assert best_spans(start, end, 2) == [(2, 3)]


def test_output_is_claimed_and_embeddings_checked(trained, embeddings_dir, tmp_path, capsys):
    base, out, _ = trained
    args = ["train-reader", "--embeddings", str(embeddings_dir), "--train", str(base / "train.json"), "--dev",
            str(base / "dev.json"), "-o", str(out), "--epochs", "1", "--no-progress"]
    assert main(args) == 2
    assert "--overwrite" in capsys.readouterr().err
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert main(args[:-4] + [str(foreign), "--epochs", "1", "--no-progress"]) == 2
    assert (foreign / "notes.txt").read_text() == "mine"
    changed = tmp_path / "changed"
    changed.mkdir()
    for name in ("vectors.npy", "arabert_pipeline.json"):
        (changed / name).write_bytes((embeddings_dir / name).read_bytes())
    lines = (embeddings_dir / "words.txt").read_text(encoding="utf-8").splitlines()
    (changed / "words.txt").write_text("\n".join(lines[1:] + lines[:1]) + "\n", encoding="utf-8")
    from arabert_pipeline.qa.static.predict import StaticReader

    with pytest.raises(ConfigError, match="not the embeddings directory"):
        StaticReader.load(out, changed)


def test_training_questions_that_leak_into_a_held_out_set_are_dropped(tmp_path):
    """train-reader reads its sets as finetune does (policy "drop"): what leaks into a held-out set is not trained
    on."""
    from arabert_pipeline.qa.data import read_squad, read_squad_sets

    _squad(tmp_path / "train.json", 20, seed=3)
    train = read_squad(str(tmp_path / "train.json")).examples
    held_out = tmp_path / "held-out.json"
    held_out.write_text((tmp_path / "train.json").read_text(encoding="utf-8"), encoding="utf-8")  # the same articles
    sets = read_squad_sets(train=[str(tmp_path / "train.json")], hold_out=[str(held_out)], policy="drop",
                           say=lambda message: None)
    assert sets.dropped == {str(tmp_path / "train.json"): len(train)} and sets.examples == []
    assert read_squad_sets(train=[str(tmp_path / "train.json")], policy="drop", say=lambda m: None).examples == train


# Issue 37: the files the reader trusts ------------------------------------------------------------------------------

def _copy_embeddings(embeddings_dir, target):
    target.mkdir()
    for path in embeddings_dir.iterdir():
        (target / path.name).write_bytes(path.read_bytes())
    return target


def _train_tiny(embeddings, base, out, *extra):
    return main(["train-reader", "--embeddings", str(embeddings), "--train", str(base / "train.json"), "--dev",
                 str(base / "dev.json"), "-o", str(out), "--hidden", "8", "--layers", "1", "--epochs", "1",
                 "--tune-top-k", "2", "--no-progress", *extra])


def test_the_reader_is_bound_to_the_vectors_read_at_the_start(trained, embeddings_dir, tmp_path, monkeypatch, caplog):
    """Embeddings replaced while train-reader runs: the reader records the checksums of what it read, so it loads with
    the vectors it was trained on and refuses the new ones (it recorded the new words.txt's checksum at the end)."""
    from arabert_pipeline.qa.static import train as static_train
    from arabert_pipeline.qa.static.predict import StaticReader

    base, _, _ = trained
    live = _copy_embeddings(embeddings_dir, tmp_path / "live")
    original = _copy_embeddings(embeddings_dir, tmp_path / "original")
    lines = (live / "words.txt").read_text(encoding="utf-8").splitlines()
    read_sets = static_train.read_squad_sets
    replaced = []

    def replace_then_read(**kwargs):
        if not replaced:  # the vectors are read; then someone retrains the embeddings in place
            (live / "words.txt").write_text("\n".join(lines[1:] + lines[:1]) + "\n", encoding="utf-8")
            replaced.append(True)
        return read_sets(**kwargs)

    monkeypatch.setattr(static_train, "read_squad_sets", replace_then_read)
    assert _train_tiny(live, base, tmp_path / "reader") == 0
    assert replaced and "changed while train-reader ran" in caplog.text
    StaticReader.load(tmp_path / "reader", original)
    with pytest.raises(ConfigError, match="not the embeddings directory"):
        StaticReader.load(tmp_path / "reader", live)


def test_vectors_replaced_under_the_same_words_are_refused(trained, embeddings_dir, tmp_path):
    from arabert_pipeline.qa.static.predict import StaticReader

    _, out, _ = trained
    retrained = _copy_embeddings(embeddings_dir, tmp_path / "retrained")
    vectors = np.load(retrained / "vectors.npy")
    np.save(retrained / "vectors.npy", vectors[::-1].copy(), allow_pickle=False)
    with pytest.raises(ConfigError, match="not the embeddings directory"):
        StaticReader.load(out, retrained)


def _edited_reader(out, tmp_path, edit):
    copy = tmp_path / "edited"
    copy.mkdir()
    for path in out.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    config = json.loads((copy / "reader_config.json").read_text(encoding="utf-8"))
    edit(config)
    (copy / "reader_config.json").write_text(json.dumps(config), encoding="utf-8")
    return copy


@pytest.mark.parametrize("edit, expected", [
    (lambda c: c.pop("hidden"), "hidden is missing"),
    (lambda c: c.pop("embeddings_words_sha256"), "embeddings_words_sha256 is missing"),
    (lambda c: c.update(layers="1"), "layers must be an integer between 1 and"),
    (lambda c: c.update(layers=1000), "layers must be an integer between 1 and"),
    (lambda c: c.update(hidden=True), "hidden must be an integer between 1 and"),
    (lambda c: c.update(max_span_words=-1), "max_span_words must be an integer between 1 and"),
    (lambda c: c.update(dropout=float("nan")), r"dropout must be a number in \[0, 1\)"),
    (lambda c: c.update(dropout="0.1"), r"dropout must be a number in \[0, 1\)"),
    (lambda c: c.update(tuned_words=["كلمةمجهولة"]), "tuned_words: 'كلمةمجهولة' is not a word of"),
    (lambda c: c.update(tuned_words="اسمه"), "tuned_words must be a list of words"),
    (lambda c: c.update(embeddings_words_sha256=7), "embeddings_words_sha256 must be a SHA-256 hex digest"),
    (lambda c: c.update(embeddings=None), "embeddings must be a path"),
    (lambda c: c.update(dim=32), "dim is 32 but"),
])
def test_a_damaged_reader_config_is_named_field_by_field(trained, embeddings_dir, tmp_path, edit, expected):
    from arabert_pipeline.qa.static.predict import StaticReader

    _, out, _ = trained
    copy = _edited_reader(out, tmp_path, edit)
    with pytest.raises(ConfigError, match=f"reader_config.json: {expected}"):
        StaticReader.load(copy, embeddings_dir)


def test_a_damaged_reader_config_is_a_one_line_error_of_reader_predict(trained, tmp_path, capsys):
    base, out, _ = trained
    copy = _edited_reader(out, tmp_path, lambda c: c.update(layers=1000))
    assert main(["reader-predict", str(copy), "--data", str(base / "dev.json"), "-o", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "reader_config.json: layers must be an integer" in err, err


@pytest.mark.parametrize("field", ["layers", "hidden", "max_span_words"])
def test_train_reader_refuses_the_sizes_a_load_would_refuse(field):
    # The check itself, not the verb: should it regress, the verb would build a million LSTM layers.
    from arabert_pipeline.qa.static.config import ReaderConfig, check_config

    config = ReaderConfig(embeddings="e", train=["t.json"], dev=["d.json"], output_dir="o", **{field: 10**6})
    with pytest.raises(ConfigError, match=f"^{field} must be an integer between 1 and"):
        check_config(config)


def test_reader_weights_follow_the_umask_like_every_output(trained):
    _, out, _ = trained
    mask = os.umask(0)
    os.umask(mask)
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in out.iterdir()} == \
        {p.name: oct(0o666 & ~mask) for p in out.iterdir()}


@pytest.mark.slow  # about half a CPU second: the quick loop keeps this file's cheaper tests
def test_a_reader_started_from_another_keeps_what_it_learnt(trained, embeddings_dir, tmp_path, capsys):
    """--init-from: the synthetic-then-real recipe. A reader started from the trained one at a learning rate too small
    to move it answers as that one does from its first epoch (a fresh one cannot: its dev EM starts near 0), keeps its
    fine-tuned question words and records where it started; other vectors or sizes are refused, naming the flag."""
    base, out, _ = trained
    started = tmp_path / "started"
    code = main(["train-reader", "--embeddings", str(embeddings_dir), "--train", str(base / "train.json"),
                 "--dev", str(base / "dev.json"), "-o", str(started), "--hidden", "24", "--layers", "1",
                 "--epochs", "1", "--lr", "1e-9", "--tune-top-k", "7", "--init-from", str(out), "--no-progress"])
    assert code == 0
    before = json.loads((out / "arabert_pipeline.json").read_text(encoding="utf-8"))
    after = json.loads((started / "arabert_pipeline.json").read_text(encoding="utf-8"))
    assert after["epochs"][0]["dev_em"] == before["best_dev_em"] >= 90
    assert after["init_from"] == out.name  # portable_path: outside the working directory, the last component
    tuned = lambda d: json.loads((d / "reader_config.json").read_text(encoding="utf-8"))["tuned_words"]  # noqa: E731  a one-line local helper
    assert tuned(started) == tuned(out)

    fresh = tmp_path / "fresh"
    assert _train_tiny(embeddings_dir, base, fresh, "--lr", "1e-9") == 0
    assert json.loads((fresh / "arabert_pipeline.json").read_text(encoding="utf-8"))["epochs"][0]["dev_em"] < 50

    assert _train_tiny(embeddings_dir, base, tmp_path / "other-size", "--init-from", str(out)) == 2
    assert "--init-from" in capsys.readouterr().err.split("hidden is 24, not the 8")[0]
    other = _copy_embeddings(embeddings_dir, tmp_path / "other-vectors")
    np.save(other / "vectors.npy", np.load(other / "vectors.npy")[::-1].copy(), allow_pickle=False)
    assert main(["train-reader", "--embeddings", str(other), "--train", str(base / "train.json"), "--dev",
                 str(base / "dev.json"), "-o", str(tmp_path / "other-reader"), "--hidden", "24", "--layers", "1",
                 "--epochs", "1", "--init-from", str(out), "--no-progress"]) == 2
    assert "not the embeddings directory" in capsys.readouterr().err
    assert not (tmp_path / "other-size").exists() and not (tmp_path / "other-reader").exists()

"""The fine-tuning levers: dev-chosen epoch and decoding settings (also for a trained model: tune-decoding), early
stopping, layer-wise lr, the overlap type."""
from __future__ import annotations

import json

import pytest

from arabert_pipeline.errors import ConfigError
from arabert_pipeline.qa.transformer.bonuses import SENTENCE_IDF_FILE
from arabert_pipeline.qa.transformer.finetune import FinetuneConfig, run_finetune
from arabert_pipeline.qa.transformer.model import QAModel
from arabert_pipeline.qa.transformer.tune import (
    READER_WEIGHT_GRID,
    SENTENCE_PRIOR_GRID,
    TEMPERATURE_GRID,
    decoding_grid,
    dev_score,
)
from test_qa_model import SMALL

torch = pytest.importorskip("torch")


@pytest.mark.slow
def test_dev_chooses_the_epoch_and_the_prior_and_the_model_keeps_both(tiny_mlm, qa_slices, tmp_path):
    from transformers import AutoConfig

    from arabert_pipeline.qa.data import read_squad

    train, dev = qa_slices
    output = tmp_path / "qa"
    config = FinetuneConfig(model=str(tiny_mlm), output=str(output), train=[str(train)], dev=[str(dev)], epochs=3,
                            question_overlap=True, layer_lr_decay=0.8, **SMALL)
    run_finetune(config, log=lambda message: None)
    metadata = json.loads((output / "arabert_pipeline.json").read_text(encoding="utf-8"))
    scores = metadata["finetune"]["dev_scores"]
    assert len(scores) == 3 and metadata["finetune"]["epoch"] == scores.index(max(scores)) + 1
    assert metadata["sentence_prior"] in SENTENCE_PRIOR_GRID and metadata["question_overlap"] is True
    tried = metadata["finetune"]["decoding_dev_scores"]
    # within sentence or not × (max-score + expected-F1 at each temperature)
    assert len(tried) == 2 * (1 + len(TEMPERATURE_GRID)) * len(SENTENCE_PRIOR_GRID)
    best = max(row["score"] for row in tried)
    assert any(row["score"] == best and all(metadata[k] == row[k] for k in ("sentence_prior", "within_sentence",
                                                                             "decoding")) for row in tried)
    assert AutoConfig.from_pretrained(output).type_vocab_size == 3
    assert (output / SENTENCE_IDF_FILE).is_file() and not (output / "checkpoints").exists()

    model = QAModel.load(output)
    assert model.settings.question_overlap and model.sentence_idf is not None
    # The saved weights are the best epoch's: without the prior they score what that epoch scored on dev.
    plain = QAModel(model.model, model.tokenizer, "none", model.settings.__class__(
        **{**model.settings.__dict__, "sentence_prior": 0.0, "within_sentence": False, "decoding": "max-score"}))
    assert dev_score(plain, [read_squad(str(dev), misaligned="keep")], 16) == pytest.approx(max(scores))


def test_fixed_decoding_settings_are_not_tuned():
    rows = decoding_grid({"sentence_prior": None, "within_sentence": True, "decoding": None})
    assert len(rows) == (1 + len(TEMPERATURE_GRID)) * len(SENTENCE_PRIOR_GRID) * len(READER_WEIGHT_GRID)
    assert all(row["within_sentence"] for row in rows)
    assert all(row["expected_f1_temperature"] == 1.0 for row in rows if row["decoding"] == "max-score")
    assert decoding_grid({"sentence_prior": 2.0, "within_sentence": False, "decoding": "expected-f1",
                          "expected_f1_temperature": 0.5, "reader_weight": 0.0}) == [
        {"sentence_prior": 2.0, "within_sentence": False, "decoding": "expected-f1", "expected_f1_temperature": 0.5,
         "reader_weight": 0.0}]
    with pytest.raises(ConfigError, match="decoding"):
        FinetuneConfig(model="m", output="o", train=["t"], decoding="mbr").resolved()


@pytest.mark.slow
def test_patience_stops_when_dev_does_not_improve(tiny_mlm, qa_slices, tmp_path):
    train, dev = qa_slices
    messages = []
    config = FinetuneConfig(model=str(tiny_mlm), output=str(tmp_path / "qa"), train=[str(train)], dev=[str(dev)],
                            epochs=5, patience=1, sentence_prior=0.0, **{**SMALL, "lr": 0.0})
    result = run_finetune(config, log=messages.append)
    assert len(result.losses) == 2  # nothing learns at lr 0: epoch 2 is no better than epoch 1, so it stops
    assert any(message.startswith("early stop") for message in messages)
    with pytest.raises(ConfigError, match="dev"):
        FinetuneConfig(model="m", output="o", train=["t"], patience=2).resolved()


@pytest.mark.slow
def test_held_out_sets_are_guarded_against_leakage_but_never_scored(tiny_mlm, qa_slices, tmp_path):
    from data_slices import write_first_articles

    train, _ = qa_slices
    held_out = write_first_articles(str(train), tmp_path / "held-out.json", 1)  # an article that is also trained on
    settings = dict(model=str(tiny_mlm), train=[str(train)], hold_out=[str(held_out)], epochs=1, **SMALL)
    with pytest.raises(ConfigError, match="leak"):
        run_finetune(FinetuneConfig(output=str(tmp_path / "refused"), **settings), log=lambda message: None)
    messages = []
    result = run_finetune(FinetuneConfig(output=str(tmp_path / "qa"), drop_leaking_train=True, **settings),
                          log=messages.append)
    assert any("dropped training questions involved in a leak" in message for message in messages)
    assert result.metrics == {} and result.predictions == {} and not (tmp_path / "qa" / "eval").exists()


def test_layer_wise_learning_rates_decay_from_the_head_down():
    from transformers import BertConfig, BertForQuestionAnswering

    model = BertForQuestionAnswering(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=3,
                                                num_attention_heads=2, intermediate_size=32))
    from arabert_pipeline.training import parameter_groups

    groups = parameter_groups(model, 0.01, layer_lr_decay=0.5, layers=3)
    lr_of = {id(p): g["lr_scale"] for g in groups for p in g["params"]}
    named = dict(model.named_parameters())
    assert lr_of[id(named["qa_outputs.weight"])] == 1.0
    assert lr_of[id(named["bert.encoder.layer.2.output.dense.weight"])] == 0.5
    assert lr_of[id(named["bert.encoder.layer.0.output.dense.weight"])] == 0.125
    assert lr_of[id(named["bert.embeddings.word_embeddings.weight"])] == 0.0625
    decay_of = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    assert decay_of[id(named["bert.encoder.layer.0.output.dense.bias"])] == 0.0
    assert sum(len(g["params"]) for g in groups) == len(named)


def test_epoch_batches_cover_every_window_once_in_batches_of_similar_length():
    import math

    import numpy as np

    from arabert_pipeline.qa.transformer.features import Windows
    from arabert_pipeline.qa.transformer.finetune import epoch_batches

    rng = np.random.default_rng(0)
    lengths = rng.integers(20, 257, size=3301)
    windows = Windows([[1] * n for n in lengths], None, np.arange(len(lengths)), np.zeros((len(lengths), 1, 2)))
    batches = epoch_batches(windows, 32, seed=0, epoch=3)
    assert len(batches) == math.ceil(len(lengths) / 32)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(lengths)))
    assert [b.tolist() for b in batches] == [b.tolist() for b in epoch_batches(windows, 32, seed=0, epoch=3)]
    assert [b.tolist() for b in batches] != [b.tolist() for b in epoch_batches(windows, 32, seed=0, epoch=4)]
    padded = sum(lengths[b].max() * len(b) for b in batches)
    random_order = rng.permutation(len(lengths))
    unsorted = sum(lengths[random_order[i : i + 32]].max() * len(random_order[i : i + 32])
                   for i in range(0, len(lengths), 32))
    assert padded < 0.75 * unsorted


@pytest.mark.slow
def test_tune_decoding_chooses_on_dev_and_writes_a_copy_with_the_same_weights(tiny_mlm, qa_slices,
                                                                              tmp_path):
    from arabert_pipeline.cli import main
    from arabert_pipeline.qa.transformer.tune import (
        LEADING_WORD_CANDIDATES,
        MIN_LEADING_WORD_ANSWERS,
        tune_model_decoding,
    )

    train, dev = qa_slices
    trained = tmp_path / "qa"
    messages = []
    run_finetune(FinetuneConfig(model=str(tiny_mlm), output=str(trained), train=[str(train)], epochs=1,
                                question_overlap=True, negatives=True, **SMALL), log=messages.append)
    before = json.loads((trained / "arabert_pipeline.json").read_text(encoding="utf-8"))
    # --negatives: every question of an article with more than one paragraph is also trained as unanswerable.
    assert 0 < before["finetune"]["train_negatives"] <= before["finetune"]["train_questions"]
    assert any("unanswerable pairs" in message for message in messages)
    assert (before["sentence_prior"], before["within_sentence"], before["decoding"]) == (0.0, False, "max-score")

    tuned = tmp_path / "tuned"
    assert main(["tune-decoding", str(trained), "--dev", str(dev), "-o", str(tuned), "--within-sentence", "on"]) == 0
    metadata = json.loads((tuned / "arabert_pipeline.json").read_text(encoding="utf-8"))
    no_answer = metadata["decoding_tuning"]["no_answer"]
    assert no_answer["unanswerable"] > 0 and metadata["null_score_diff_threshold"] == no_answer["threshold"]
    # The rule: the best NoAns accuracy among thresholds that answer ≥ 80% of the answerable dev questions.
    at = no_answer["at_threshold"]
    assert at["answered"] >= 80 and at["no_ans_accuracy"] >= no_answer["always_answer"]["no_ans_accuracy"]
    assert all(point["answered"] >= share - 1e-9
               for point, share in zip(no_answer["curve"], (50, 60, 70, 80, 90, 100), strict=True))
    assert all(point["no_ans_accuracy"] <= at["no_ans_accuracy"] for point in no_answer["curve"]
               if point["answered"] >= 80)
    rows = metadata["decoding_tuning"]["scores"]
    assert len(rows) == (1 + len(TEMPERATURE_GRID)) * len(SENTENCE_PRIOR_GRID)
    assert all(row["within_sentence"] for row in rows)
    best = max(row["score"] for row in rows)
    assert any(row["score"] == best and all(metadata[k] == row[k] for k in ("sentence_prior", "within_sentence",
                                                                             "decoding")) for row in rows)
    assert (tuned / "model.safetensors").read_bytes() == (trained / "model.safetensors").read_bytes()
    assert metadata["decoding_tuning"]["previous"]["decoding"] == "max-score"
    assert QAModel.load(tuned).settings.within_sentence
    # Leading words: each candidate tried alone, those that raise the dev metric kept, and the kept set scored.
    leading = metadata["decoding_tuning"]["leading_words"]
    assert [row["word"] for row in leading["candidates"]] == list(LEADING_WORD_CANDIDATES)
    assert metadata["leading_words"] == [row["word"] for row in leading["candidates"]
                                         if row["gain"] > 0 and row["changed"] >= MIN_LEADING_WORD_ANSWERS]
    assert all(row["gain"] == 0 for row in leading["candidates"] if row["changed"] == 0)
    assert leading["score_with"] >= leading["score_without"]
    fixed = tmp_path / "fixed"
    assert main(["tune-decoding", str(trained), "--dev", str(dev), "-o", str(fixed), "--within-sentence", "on",
                 "--leading-words", "none"]) == 0
    metadata = json.loads((fixed / "arabert_pipeline.json").read_text(encoding="utf-8"))
    assert metadata["leading_words"] == [] and metadata["decoding_tuning"]["leading_words"] is None

    # Refused: writing over the model, re-writing without --overwrite, and tuning on the training data.
    with pytest.raises(ConfigError, match="input"):
        tune_model_decoding(trained, [str(dev)], trained)
    with pytest.raises(ConfigError, match="overwrite"):
        tune_model_decoding(trained, [str(dev)], tuned)
    with pytest.raises(ConfigError, match="trained on"):
        tune_model_decoding(trained, [str(train)], tmp_path / "other")
    assert not (tmp_path / "other").exists()


def test_a_lower_expected_f1_temperature_gives_the_surer_shorter_answer():
    from arabert_pipeline.qa.transformer.decode import rank_by_expected_f1

    text = "ولد ابن سينا في قرية أفشنة قرب بخارى سنة 980"
    words = [(m.start(), m.end()) for m in __import__("re").finditer(r"\S+", text)]
    span = lambda a, b: (words[a][0], words[b][1])  # noqa: E731  words a..b
    # The likeliest answer is "أفشنة"; many less likely ones overlap it inside a longer phrase.
    spans = [span(5, 5), span(4, 7), span(4, 6), span(5, 7), span(3, 7), span(6, 7)]
    scores = [3.0, 2.5, 2.5, 2.5, 2.0, 2.0]
    hedged, _ = rank_by_expected_f1(text, spans, scores)
    sure, _ = rank_by_expected_f1(text, spans, scores, temperature=0.1)
    assert spans[hedged[0]] != span(5, 5) and spans[sure[0]] == span(5, 5)

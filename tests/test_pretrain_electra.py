"""The electra objective at tiny size (L2/H64) on a small authored corpus: labels, GDES gradients, export, trainer."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from objective_corpus import train_losses, write_corpus_and_tokenizer  # noqa: E402  after the importorskip above


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    torch.set_num_threads(1)
    return write_corpus_and_tokenizer(tmp_path_factory.mktemp("electra"))


def config(setup, output="unused", **overrides):
    from arabert_pipeline.pretrain.config import PretrainConfig

    corpus, tokenizer = setup
    options = dict(model_size="tiny", objective="electra", max_seq_length=32, steps=8, batch_size=4, lr=2e-3,
                   log_every=1, eval_every=4, save_every=100, eval_sequences=4, progress=False,
                   cache_dir=str(Path(corpus).parent / "cache"))
    options.update(overrides)
    return PretrainConfig(tokenizer=tokenizer, corpus=[corpus], output=str(output), **options)


def build(setup, **overrides):
    from transformers import AutoTokenizer

    from arabert_pipeline.pretrain.objectives import build_objective

    cfg = config(setup, **overrides)
    torch.manual_seed(0)
    return build_objective(cfg, AutoTokenizer.from_pretrained(cfg.tokenizer)), cfg


def examples(setup, cfg, rows=6):
    """Packed training sequences of the corpus (a few padded to show padding)."""
    from transformers import AutoTokenizer

    from arabert_pipeline.pretrain.data import PretrainingData, SpecialIds, TokenStore, tokenize_corpus

    tokenizer = AutoTokenizer.from_pretrained(cfg.tokenizer)
    store = TokenStore.open(tokenize_corpus(cfg.corpus, tokenizer, Path(cfg.cache_dir), progress=False))
    data = PretrainingData(store, SpecialIds.from_tokenizer(tokenizer), cfg.max_seq_length, 10_000, 4, 0)
    order = np.argsort(data.train.length)[::-1]
    picked = np.concatenate([order[: rows - 2], order[-2:]])  # longest rows and the two shortest
    return data.examples(data.train, picked, np.random.default_rng(0))


def batch_of(objective, setup, cfg, seed=0):
    return objective.collator(examples(setup, cfg), np.random.default_rng(seed))


# ------------------------------------------------------------------------------------------------ labels, sampling


def test_replaced_token_labels(setup):
    from arabert_pipeline.pretrain.electra import corrupt

    objective, cfg = build(setup)
    exs = examples(setup, cfg)
    batch = objective.collator(exs, np.random.default_rng(1))
    positions, originals = batch["mlm_positions"], batch["mlm_labels"]
    # Half of the samples repeat the original token, the other half differ from it.
    sampled = originals.clone()
    sampled[::2] = (originals[::2] + 1) % 50 + 5
    # The collator pads the positions to a multiple of 64 with ignored labels: corrupt must leave those alone.
    assert len(positions) % 64 == 0 and (originals == -100).any()
    corrupted, labels = corrupt(batch["input_ids"], positions, originals, sampled, batch["rtd_mask"])
    real = originals != -100
    positions, originals, sampled = positions[real], originals[real], sampled[real]
    assert len(positions) > 4
    width = batch["input_ids"].shape[1]
    original = torch.zeros_like(corrupted)
    scored = torch.zeros_like(corrupted, dtype=torch.bool)
    for row, example in enumerate(exs):
        original[row, : len(example.input_ids)] = torch.from_numpy(example.input_ids)
        scored[row, : len(example.input_ids)] = torch.from_numpy(~example.special)
    expected = torch.zeros_like(labels)
    flat = expected.view(-1)
    flat[positions] = (sampled != originals).long()
    expected[~scored] = -100
    assert torch.equal(labels, expected)
    assert (labels == 1).sum() == (sampled != originals).sum() > 0
    assert (labels[:, 0] == -100).all(), "[CLS] is not scored"
    assert (labels.view(-1)[(original == 0).view(-1)] == -100).all(), "padding is not scored"
    # The discriminator reads the originals except where a different token was sampled (no [MASK] left over).
    replaced = labels == 1
    assert torch.equal(corrupted[~replaced & scored], original[~replaced & scored])
    assert not (corrupted == objective.collator.mlm.specials.mask).any()
    assert torch.equal(corrupted.view(-1)[positions], sampled)
    assert width == corrupted.shape[1]


def test_sampling_follows_the_generator_distribution_and_is_seeded():
    from arabert_pipeline.pretrain.electra import sample_replacements

    logits = torch.tensor([[0.0, np.log(3.0), -float("inf"), 0.0]]).repeat(20000, 1)
    uniforms = torch.from_numpy(np.random.default_rng(0).random(20000, dtype=np.float32))
    drawn = sample_replacements(logits, uniforms)
    frequencies = torch.bincount(drawn, minlength=4).float() / len(drawn)
    assert frequencies[2] == 0, "a zero-probability token was drawn"
    assert torch.allclose(frequencies, torch.tensor([0.2, 0.6, 0.0, 0.2]), atol=0.015)
    assert torch.equal(drawn, sample_replacements(logits, uniforms))
    assert sample_replacements(torch.tensor([[0.0, 0.0]]), torch.tensor([0.0])).item() == 0
    assert sample_replacements(torch.tensor([[0.0, 0.0]]), torch.tensor([0.9999])).item() == 1


def test_collated_batches_are_reproducible_and_dynamic(setup):
    objective, cfg = build(setup)
    exs = examples(setup, cfg)
    a = objective.collator(exs, np.random.default_rng([1, 0, 3, 1]))
    b = objective.collator(exs, np.random.default_rng([1, 0, 3, 1]))
    c = objective.collator(exs, np.random.default_rng([1, 1, 3, 1]))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["mlm_positions"], c["mlm_positions"]), "masks must change with the epoch"
    assert not torch.equal(a["sample_uniforms"], c["sample_uniforms"])


# ------------------------------------------------------------------------------------------------ sharing


def test_generator_is_a_narrower_electra_sharing_the_embedding_width(setup):
    from transformers import ElectraConfig

    from arabert_pipeline.pretrain.electra import generator_config

    disc = ElectraConfig(vocab_size=100, embedding_size=256, hidden_size=256, num_hidden_layers=4,
                         num_attention_heads=4, intermediate_size=1024)
    gen = generator_config(disc, 0.25, 0.5, "gdes")
    assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size, gen.num_hidden_layers) == (64, 1, 256, 2)
    assert gen.embedding_size == 256
    assert generator_config(disc, 0.25, 1.0, "none").embedding_size == 64
    base = ElectraConfig(vocab_size=100, embedding_size=768, hidden_size=768, num_hidden_layers=12,
                         num_attention_heads=12, intermediate_size=3072)
    assert generator_config(base, 1 / 3, 1.0, "full").hidden_size == 256  # ELECTRA-base's generator


def test_gdes_disentangles_the_gradients(setup):
    objective, cfg = build(setup, electra_embedding_sharing="gdes")
    e_gen, e_delta = objective.generator_embeddings, objective.discriminator_embeddings
    assert e_gen is not e_delta and not e_delta.detach().any(), "E_delta starts at zero"
    batch = batch_of(objective, setup, cfg)

    generator_loss, rtd_loss, _ = objective.losses(batch)
    rtd_loss.backward()
    assert all(p.grad is None or not p.grad.any() for p in objective.generator.parameters()), \
        "the discriminator loss reached the generator (E_gen included)"
    assert e_delta.grad is not None and e_delta.grad.abs().sum() > 0

    objective.zero_grad(set_to_none=True)
    generator_loss, rtd_loss, _ = objective.losses(batch)
    generator_loss.backward()
    assert e_delta.grad is None or not e_delta.grad.any(), "the generator loss reached E_delta"
    assert all(p.grad is None or not p.grad.any() for p in objective.discriminator.parameters())
    assert e_gen.grad is not None and e_gen.grad.abs().sum() > 0


def test_full_sharing_shares_one_embedding_module(setup):
    objective, cfg = build(setup, electra_embedding_sharing="full")
    assert objective.generator.electra.embeddings is objective.discriminator.electra.embeddings
    assert objective.generator.generator_lm_head.weight is objective.discriminator_embeddings
    assert hasattr(objective.generator.electra, "embeddings_project"), "the narrower generator projects"
    generator_loss, rtd_loss, _ = objective.losses(batch_of(objective, setup, cfg))
    rtd_loss.backward()
    assert objective.discriminator_embeddings.grad.abs().sum() > 0
    none, _ = build(setup, electra_embedding_sharing="none")
    assert none.generator.electra.embeddings is not none.discriminator.electra.embeddings
    assert none.generator.config.embedding_size == none.generator.config.hidden_size


@pytest.mark.slow
def test_a_few_steps_reduce_the_loss(setup):
    objective, cfg = build(setup)
    batches = [batch_of(objective, setup, cfg, seed) for seed in range(2)]
    losses, out = train_losses(objective, batches[:2])
    assert np.mean(losses[-4:]) < 0.8 * np.mean(losses[:2]), losses
    assert {"generator_loss", "generator_accuracy", "rtd_loss", "rtd_accuracy", "replaced_rate",
            "replaced_share"} <= out.keys()


# ------------------------------------------------------------------------------------------------ export, init-from


@pytest.mark.parametrize("sharing", ["gdes", "full", "none"])
def test_export_loads_for_question_answering_with_the_trained_hidden_states(setup, tmp_path, sharing):
    from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining, AutoModelForQuestionAnswering

    objective, cfg = build(setup, electra_embedding_sharing=sharing)
    # Train a little so that E_delta is not zero any more.
    optimizer = torch.optim.AdamW(objective.parameters(), lr=1e-2)
    for seed in range(2):
        objective(batch_of(objective, setup, cfg, seed))["loss"].backward()
        optimizer.step()
        optimizer.zero_grad()
    objective.export(tmp_path)

    qa = AutoModelForQuestionAnswering.from_pretrained(tmp_path)
    assert type(qa).__name__ == "ElectraForQuestionAnswering"
    folded = qa.electra.embeddings.word_embeddings.weight
    expected = objective.generator_embeddings + objective.discriminator_embeddings if sharing == "gdes" \
        else objective.discriminator_embeddings
    assert torch.equal(folded, expected.detach())
    if sharing == "gdes":
        assert objective.discriminator_embeddings.detach().any(), "E_delta was trained"

    objective.eval()
    qa.eval()
    batch = batch_of(objective, setup, cfg)
    ids, mask = batch["input_ids"], batch.get("attention_mask")
    with torch.no_grad():
        trained = objective.discriminator_encoder(ids, mask)
        assert torch.allclose(qa.electra(input_ids=ids, attention_mask=mask).last_hidden_state, trained, atol=1e-5)
        assert torch.allclose(AutoModel.from_pretrained(tmp_path)(input_ids=ids, attention_mask=mask)
                              .last_hidden_state, trained, atol=1e-5)
        head = AutoModelForPreTraining.from_pretrained(tmp_path)
        assert torch.allclose(head.eval()(input_ids=ids, attention_mask=mask).logits,
                              objective.discriminator.discriminator_predictions(trained), atol=1e-5)
    generator = AutoModelForMaskedLM.from_pretrained(tmp_path / "generator")
    assert type(generator).__name__ == "ElectraForMaskedLM"
    assert torch.equal(generator.electra.embeddings.word_embeddings.weight, objective.generator_embeddings.detach())


def test_init_from_restores_the_pair_and_allows_a_longer_second_phase(setup, tmp_path):
    objective, cfg = build(setup)
    optimizer = torch.optim.AdamW(objective.parameters(), lr=1e-2)
    objective(batch_of(objective, setup, cfg))["loss"].backward()
    optimizer.step()
    objective.export(tmp_path / "phase1")

    again, cfg2 = build(setup, model_size=None, init_from=str(tmp_path / "phase1"), max_seq_length=64)
    for mine, theirs in ((objective.generator, again.generator), (objective.discriminator, again.discriminator)):
        a, b = mine.state_dict(), theirs.state_dict()
        assert a.keys() == b.keys()
        assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert torch.equal(again.exported_discriminator().electra.embeddings.word_embeddings.weight,
                       objective.exported_discriminator().electra.embeddings.word_embeddings.weight)


def test_bad_options_are_refused(setup, tmp_path):
    from arabert_pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match="embedding"):
        build(setup, electra_embedding_sharing="half")
    with pytest.raises(ConfigError, match="fractions"):
        build(setup, electra_generator_size=2.0)
    with pytest.raises(ConfigError, match="nsp"):
        build(setup, nsp=True)
    from transformers import BertConfig, BertForMaskedLM

    bert = BertForMaskedLM(BertConfig(vocab_size=10, hidden_size=16, num_hidden_layers=1, num_attention_heads=1,
                                      intermediate_size=32))
    bert.save_pretrained(tmp_path / "bert")
    with pytest.raises(ConfigError, match="'bert' model"):
        build(setup, model_size=None, init_from=str(tmp_path / "bert"))
    objective, _ = build(setup)
    objective.export(tmp_path / "electra")
    with pytest.raises(ConfigError, match="model-size mini"):
        build(setup, model_size="mini", init_from=str(tmp_path / "electra"))
    with pytest.raises(ConfigError, match="exceeds the 512 positions"):
        build(setup, model_size=None, init_from=str(tmp_path / "electra"), max_seq_length=600)


# ------------------------------------------------------------------------------------------------ through the trainer


@pytest.mark.slow
def test_trainer_runs_resumes_and_exports_electra(setup, tmp_path):
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer, pipeline

    from arabert_pipeline.artifacts.metadata import read_metadata
    from arabert_pipeline.pretrain.trainer import pretrain

    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    assert pretrain(config(setup, straight))

    def stop_at_three(trainer):
        if trainer.state.step == 3:
            trainer.request_stop()

    cfg = config(setup, interrupted)
    assert not pretrain(cfg, on_step=stop_at_three)
    cfg.resume = "latest"
    assert pretrain(cfg)
    log = lambda run: [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]  # noqa: E731  a one-line local helper
    curve = lambda run: [(r["step"], r.get("loss"), r.get("eval_rtd_loss")) for r in log(run)]  # noqa: E731  a one-line local helper
    assert curve(straight) == curve(interrupted)
    assert "eval_rtd_accuracy" in log(straight)[-1]

    assert read_metadata(straight)["objective"] == "electra"
    qa = AutoModelForQuestionAnswering.from_pretrained(straight)
    assert type(qa).__name__ == "ElectraForQuestionAnswering"
    tokenizer = AutoTokenizer.from_pretrained(straight / "generator")
    fill = pipeline("fill-mask", model=str(straight / "generator"), tokenizer=tokenizer)
    predictions = fill("وقال وزير [MASK] محمد العلي")
    assert len(predictions) == 5 and all("token_str" in p for p in predictions)


def test_a_collapsed_discriminator_is_reported():
    from arabert_pipeline.pretrain.electra import ReplacedTokenDetection

    warn = ReplacedTokenDetection.health_warning
    constant = -(0.15 * math.log(0.15) + 0.85 * math.log(0.85))  # 0.423: always answering "original"
    collapsed = {"eval_rtd_recall": 0.0, "eval_replaced_share": 0.15, "eval_rtd_loss": constant}
    assert "collapsed" in warn(collapsed)
    assert "collapsed" in warn({**collapsed, "eval_rtd_recall": 0.004, "eval_rtd_loss": 0.99 * constant})
    assert warn({**collapsed, "eval_rtd_recall": 0.31}) is None
    assert warn({**collapsed, "eval_rtd_loss": 0.333}) is None  # under-confident, yet better than the base rate
    assert warn({**collapsed, "eval_replaced_share": 0.0}) is None  # nothing to detect: no verdict
    assert warn({"eval_mlm_loss": 5.0}) is None

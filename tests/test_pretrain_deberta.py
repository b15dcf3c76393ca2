"""`--architecture deberta-v2` at tiny size (L2/H64): presets, the enhanced mask decoder against a hand-written
reference, DeBERTaV3 (RTD + GDES), exports loading with the Auto classes, --init-from, static masking, the trainer."""
from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from objective_corpus import build_tiny, padded_examples, tiny_config, train_losses, write_corpus_and_tokenizer  # noqa: E402  after the importorskip above


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    torch.set_num_threads(1)
    return write_corpus_and_tokenizer(tmp_path_factory.mktemp("deberta"))


def config(setup, output="unused", **overrides):
    return tiny_config(setup, output, **{"objective": "mlm", "architecture": "deberta-v2", **overrides})


def build(setup, **overrides):
    return build_tiny(setup, **{"objective": "mlm", "architecture": "deberta-v2", **overrides})


def batch_of(objective, setup, cfg, seed=0):
    return objective.collator(padded_examples(cfg), np.random.default_rng(seed))


def train_a_little(objective, setup, cfg, steps=2):
    optimizer = torch.optim.AdamW(objective.parameters(), lr=1e-2)
    for seed in range(steps):
        objective(batch_of(objective, setup, cfg, seed))["loss"].backward()
        optimizer.step()
        optimizer.zero_grad()


# ------------------------------------------------------------------------------------------------ architecture


@pytest.mark.parametrize("size", ["tiny", "mini"])
def test_presets_are_deberta_v3_with_the_parameters_of_the_bert_presets(size):
    from transformers import BertConfig, BertForMaskedLM, DebertaV2ForMaskedLM

    from arabert_pipeline.pretrain.config import bert_config_kwargs
    from arabert_pipeline.pretrain.deberta import deberta_config

    config = deberta_config(1000, 0, size)
    assert config.relative_attention and sorted(config.pos_att_type) == ["c2p", "p2c"]
    assert config.position_buckets == 256 and config.share_att_key and not config.position_biased_input
    assert config.type_vocab_size == 2
    deberta = DebertaV2ForMaskedLM(config)
    assert deberta.deberta.embeddings.position_embeddings is None, "no absolute positions at the input"
    bert = BertForMaskedLM(BertConfig(vocab_size=1000, **bert_config_kwargs(size)))
    count = lambda model: sum(p.numel() for p in model.parameters())  # noqa: E731  a one-line local helper
    # 2 × 256 relative embeddings replace 512 absolute ones; their LayerNorm is the only extra.
    assert count(deberta) - count(bert) == 2 * config.hidden_size


def reference_layer(layer, rel_embeddings, query_in, kv_in, mask, span):
    """One DeBERTa layer with shared attention keys, written out from its weights: queries from `query_in`, keys and
    values from `kv_in`, scores = (content·content + content→position + position→content) / sqrt(3d) with the
    relative position i − j of query i and key j (exact below `span`) indexing the relative embeddings, as the
    official implementation does for both terms."""
    attention = layer.attention.self
    heads, width = attention.num_attention_heads, attention.attention_head_size
    batch, length, _ = query_in.shape

    def split(x):  # (…, n, heads·d) → (…, heads, n, d)
        return x.view(*x.shape[:-1], heads, width).transpose(-3, -2)

    q = split(attention.query_proj(query_in))
    k = split(attention.key_proj(kv_in))
    v = split(attention.value_proj(kv_in))
    q_rel = split(attention.query_proj(rel_embeddings))  # (heads, 2·span, d)
    k_rel = split(attention.key_proj(rel_embeddings))
    i = torch.arange(length)
    index = (i[:, None] - i[None, :] + span).clamp(0, 2 * span - 1)  # [query i, key j]
    content = torch.einsum("bhid,bhjd->bhij", q, k)
    c2p = torch.einsum("bhid,hijd->bhij", q, k_rel[:, index])
    p2c = torch.einsum("bhjd,hijd->bhij", k, q_rel[:, index])
    scores = (content + c2p + p2c) / math.sqrt(3 * width)
    visible = mask[:, None, :, None].bool() & mask[:, None, None, :].bool()
    scores = scores.masked_fill(~visible, torch.finfo(scores.dtype).min)
    context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, heads * width)
    out = layer.attention.output
    attended = out.LayerNorm(out.dense(context) + query_in)
    ffn = layer.output
    return ffn.LayerNorm(ffn.dense(layer.intermediate(attended)) + attended)


def test_enhanced_mask_decoder_matches_a_hand_written_reference(setup):
    import torch.nn.functional as F

    from arabert_pipeline.pretrain.mlm import masked_logits, mlm_hidden_states

    objective, cfg = build(setup, enhanced_mask_decoder=True)
    train_a_little(objective, setup, cfg)  # E_delta, P and the layers away from their initialisation
    objective.eval()
    model = objective.model
    deberta, encoder = model.deberta, model.deberta.encoder
    ids = torch.tensor([[2, 40, 41, 42, 43, 44, 45, 3], [2, 50, 51, 52, 3, 0, 0, 0]])
    mask = (ids != 0).long()
    mask[1, 5:] = 0
    types = torch.zeros_like(ids)
    types[0, 4:] = 1
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types,
             "mlm_positions": torch.tensor([1, 3, 6, 9, 10])}
    with torch.no_grad():
        # H: the next-to-last layer's output, from transformers' own forward.
        hidden = deberta(input_ids=ids, attention_mask=mask, token_type_ids=types,
                         output_hidden_states=True).hidden_states[-2]
        positions = deberta.embeddings.position_embeddings.weight[: ids.size(1)]
        rel_embeddings = encoder.LayerNorm(encoder.rel_embeddings.weight)
        span = encoder.position_buckets
        last = encoder.layer[-1]
        query = reference_layer(last, rel_embeddings, hidden + positions, hidden, mask, span)
        query = reference_layer(last, rel_embeddings, query, hidden, mask, span)
        picked = query.reshape(-1, query.size(-1))[batch["mlm_positions"]]
        head = model.cls.predictions
        transformed = head.transform.LayerNorm(F.gelu(head.transform.dense(picked)))
        expected = transformed @ deberta.embeddings.word_embeddings.weight.T + head.bias

        decoded = mlm_hidden_states(model, batch, enhanced_mask_decoder=True)
        real = mask.bool()
        assert torch.allclose(decoded[real], query[real], atol=1e-5)
        assert torch.allclose(masked_logits(model, decoded, batch["mlm_positions"]), expected, atol=1e-4)
        # The plain encoder output differs: EMD is what the absolute positions change.
        plain = mlm_hidden_states(model, batch)
        assert not torch.allclose(plain[real], decoded[real], atol=1e-3)
        # Without EMD the reference is one ordinary application of the last layer.
        assert torch.allclose(plain[real], reference_layer(last, rel_embeddings, hidden, hidden, mask, span)[real],
                              atol=1e-5)


@pytest.mark.slow
def test_mlm_with_and_without_the_decoder_learns(setup):
    for emd in (False, True):
        objective, cfg = build(setup, enhanced_mask_decoder=emd)
        batches = [batch_of(objective, setup, cfg, seed) for seed in range(2)]
        losses, out = train_losses(objective, batches)
        assert np.mean(losses[-4:]) < 0.7 * np.mean(losses[:2]), (emd, losses)
        assert {"mlm_loss", "mlm_accuracy"} <= out.keys()


# ------------------------------------------------------------------------------------------------ exports


def test_mlm_export_loads_with_the_auto_classes_and_keeps_the_decoder_positions(setup, tmp_path):
    from safetensors import safe_open
    from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForQuestionAnswering

    from arabert_pipeline.artifacts.models import load_pretrained_model
    from arabert_pipeline.pretrain.deberta import POSITIONS_KEY

    objective, cfg = build(setup, enhanced_mask_decoder=True)
    train_a_little(objective, setup, cfg)
    objective.export(tmp_path)
    objective.eval()
    table = objective.model.deberta.embeddings.position_embeddings.weight.detach()
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as weights:
        assert torch.equal(weights.get_tensor(POSITIONS_KEY), table)

    batch = batch_of(objective, setup, cfg)
    ids, mask = batch["input_ids"], batch.get("attention_mask")
    with torch.no_grad():
        trained = objective.model.deberta(input_ids=ids, attention_mask=mask).last_hidden_state
        mlm = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
        assert type(mlm).__name__ == "DebertaV2ForMaskedLM"
        assert torch.allclose(mlm(input_ids=ids, attention_mask=mask).logits,
                              objective.model.cls.predictions(trained), atol=1e-5)
        assert torch.allclose(AutoModel.from_pretrained(tmp_path)(input_ids=ids, attention_mask=mask)
                              .last_hidden_state, trained, atol=1e-5)
    qa, info = load_pretrained_model(AutoModelForQuestionAnswering, tmp_path)
    assert type(qa).__name__ == "DebertaV2ForQuestionAnswering"
    assert sorted(info["missing_keys"]) == ["qa_outputs.bias", "qa_outputs.weight"]
    assert qa.deberta.embeddings.position_embeddings is None, "EMD's positions stay out of fine-tuning"

    again, _ = build(setup, model_size=None, init_from=str(tmp_path), enhanced_mask_decoder=True, max_seq_length=64)
    mine, theirs = objective.state_dict(), again.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_deberta_v3_gdes_disentangles_the_gradients(setup):
    objective, cfg = build(setup, objective="electra", electra_embedding_sharing="gdes", enhanced_mask_decoder=True)
    assert type(objective.discriminator).__name__ == "DebertaV2ForReplacedTokenDetection"
    assert type(objective.generator).__name__ == "DebertaV2ForMaskedLM"
    assert objective.generator.config.hidden_size == 16, "a quarter of the discriminator's width"
    e_gen, e_delta = objective.generator_embeddings, objective.discriminator_embeddings
    assert e_gen.shape == e_delta.shape and not e_delta.detach().any(), "E_delta starts at zero"
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
    assert objective.generator.deberta.embeddings.position_embeddings.weight.grad.abs().sum() > 0, "EMD trains P"


def test_deberta_v3_full_sharing_shares_the_token_embeddings(setup):
    objective, cfg = build(setup, objective="electra", electra_embedding_sharing="full")
    generator, discriminator = objective.generator, objective.discriminator
    assert generator.deberta.embeddings.word_embeddings is discriminator.deberta.embeddings.word_embeddings
    assert generator.cls.predictions.decoder.weight is objective.discriminator_embeddings
    assert generator.deberta.embeddings.embed_proj is not None, "the narrower generator projects"
    generator_loss, rtd_loss, _ = objective.losses(batch_of(objective, setup, cfg))
    (generator_loss + rtd_loss).backward()
    assert objective.discriminator_embeddings.grad.abs().sum() > 0


def test_deberta_v3_export_loads_for_question_answering_and_init_from_restores_the_pair(setup, tmp_path):
    from transformers import AutoModelForMaskedLM, AutoModelForQuestionAnswering

    from arabert_pipeline.pretrain.deberta import DebertaV2ForReplacedTokenDetection

    objective, cfg = build(setup, objective="electra", enhanced_mask_decoder=True)
    train_a_little(objective, setup, cfg)
    assert objective.discriminator_embeddings.detach().any(), "E_delta was trained"
    objective.export(tmp_path)
    objective.eval()

    qa = AutoModelForQuestionAnswering.from_pretrained(tmp_path).eval()
    assert type(qa).__name__ == "DebertaV2ForQuestionAnswering"
    folded = objective.generator_embeddings + objective.discriminator_embeddings
    assert torch.equal(qa.deberta.embeddings.word_embeddings.weight, folded.detach())
    batch = batch_of(objective, setup, cfg)
    ids, mask = batch["input_ids"], batch.get("attention_mask")
    with torch.no_grad():
        trained = objective.discriminator_encoder(ids, mask)
        assert torch.allclose(qa.deberta(input_ids=ids, attention_mask=mask).last_hidden_state, trained, atol=1e-5)
        head = DebertaV2ForReplacedTokenDetection.from_pretrained(tmp_path).eval()
        assert torch.allclose(head(input_ids=ids, attention_mask=mask).logits, objective.rtd_head(trained), atol=1e-5)
    generator = AutoModelForMaskedLM.from_pretrained(tmp_path / "generator")
    assert torch.equal(generator.deberta.embeddings.word_embeddings.weight, objective.generator_embeddings.detach())

    again, _ = build(setup, objective="electra", model_size=None, init_from=str(tmp_path), enhanced_mask_decoder=True)
    for mine, theirs in ((objective.generator, again.generator), (objective.discriminator, again.discriminator)):
        a, b = mine.state_dict(), theirs.state_dict()
        assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_span_selection_builds_a_deberta_and_continues_one(setup, tmp_path):
    objective, _ = build(setup, objective="span-selection")
    assert type(objective.model).__name__ == "DebertaV2ForQuestionAnswering"
    mlm, _ = build(setup)
    mlm.export(tmp_path)
    continued, cfg = build(setup, objective="span-selection", model_size=None, init_from=str(tmp_path))
    assert type(continued.model).__name__ == "DebertaV2ForQuestionAnswering"
    assert torch.equal(continued.model.deberta.encoder.rel_embeddings.weight,
                       mlm.model.deberta.encoder.rel_embeddings.weight)
    assert continued(batch_of(continued, setup, cfg))["loss"].isfinite()


# ------------------------------------------------------------------------------------------------ static masking


def test_static_masking_gives_each_sequence_ten_fixed_masks(setup):
    from arabert_pipeline.pretrain.mlm import STATIC_MASKS

    objective, cfg = build(setup, masking="static", architecture="bert")
    dynamic, _ = build(setup, architecture="bert")
    sequences = padded_examples(cfg)

    def masks_of_first(collator, seed, order):
        batch = collator([sequences[i] for i in order], np.random.default_rng(seed))
        width = batch["input_ids"].size(1)
        row = order.index(0)
        positions = batch["mlm_positions"][batch["mlm_labels"] != -100]
        mine = positions[positions // width == row] % width
        return tuple(mine.tolist()), tuple(batch["input_ids"][row].tolist())

    seen = {masks_of_first(objective.collator, seed, [0, 1, 2]) for seed in range(60)}
    # Another batch, another row: still one of the same masks (and the same corrupted tokens).
    seen_elsewhere = {masks_of_first(objective.collator, seed, [3, 0]) for seed in range(60)}
    assert 2 <= len(seen) <= STATIC_MASKS and seen_elsewhere <= seen
    assert len({masks_of_first(dynamic.collator, seed, [0, 1, 2]) for seed in range(60)}) > STATIC_MASKS
    batch = objective.collator(sequences, np.random.default_rng(0))
    assert (batch["mlm_labels"] != -100).sum() == sum(max(1, round(0.15 * (len(s.input_ids) - 2))) for s in sequences)


# ------------------------------------------------------------------------------------------------ options, trainer


def test_bad_options_are_refused(setup, tmp_path):
    from arabert_pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match="--architecture 'roberta'"):
        build(setup, architecture="roberta")
    with pytest.raises(ConfigError, match="--enhanced-mask-decoder is DeBERTa's"):
        build(setup, architecture="bert", enhanced_mask_decoder=True)
    with pytest.raises(ConfigError, match="--enhanced-mask-decoder is an MLM head option"):
        build(setup, objective="span-selection", enhanced_mask_decoder=True)
    with pytest.raises(ConfigError, match="--nsp needs --architecture bert"):
        build(setup, nsp=True)
    with pytest.raises(ConfigError, match="--masking static applies to the mlm and electra"):
        build(setup, objective="span-selection", masking="static")
    with pytest.raises(ConfigError, match="--masking 'fixed'"):
        build(setup, masking="fixed")
    mlm, _ = build(setup)
    mlm.export(tmp_path / "mlm")
    with pytest.raises(ConfigError, match="a 'deberta-v2' model, not a --architecture bert encoder; add "
                                          "--architecture deberta-v2"):
        build(setup, architecture="bert", model_size=None, init_from=str(tmp_path / "mlm"))
    with pytest.raises(ConfigError, match="discriminators written by --objective electra"):
        build(setup, objective="electra", model_size=None, init_from=str(tmp_path / "mlm"))
    with pytest.raises(ConfigError, match="not the --model-size mini"):
        build(setup, model_size="mini", init_from=str(tmp_path / "mlm"))


def test_checkpoints_written_before_the_new_options_still_resume(setup):
    cfg = config(setup, architecture="bert")
    stored = cfg.to_dict()
    for name in ("architecture", "masking", "enhanced_mask_decoder"):
        del stored[name]
    assert cfg.differences(stored) == []
    assert config(setup).differences(stored) == ["architecture"]


@pytest.mark.slow
def test_trainer_runs_resumes_and_exports_a_deberta_mlm_with_the_decoder(setup, tmp_path):
    from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

    from arabert_pipeline.artifacts.metadata import read_metadata
    from arabert_pipeline.pretrain.trainer import pretrain

    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    options = dict(enhanced_mask_decoder=True, masking="static", dropout=0.0)
    assert pretrain(config(setup, straight, **options))

    def stop_at_three(trainer):
        if trainer.state.step == 3:
            trainer.request_stop()

    cfg = config(setup, interrupted, **options)
    assert not pretrain(cfg, on_step=stop_at_three)
    cfg.resume = "latest"
    assert pretrain(cfg)
    log = lambda run: [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]  # noqa: E731  a one-line local helper
    curve = lambda run: [(r["step"], r.get("loss"), r.get("eval_mlm_loss")) for r in log(run)]  # noqa: E731  a one-line local helper
    assert curve(straight) == curve(interrupted)
    assert read_metadata(straight)["pretrain"]["config"]["architecture"] == "deberta-v2"
    model = AutoModelForMaskedLM.from_pretrained(straight)
    assert type(model).__name__ == "DebertaV2ForMaskedLM" and model.config.hidden_dropout_prob == 0.1
    fill = pipeline("fill-mask", model=model, tokenizer=AutoTokenizer.from_pretrained(straight))
    assert len(fill("وقال وزير [MASK] محمد العلي")) == 5


def test_cli_lists_the_architecture_flags(capsys):
    from arabert_pipeline.cli import main

    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    out = capsys.readouterr().out
    for flag in ("--architecture", "deberta-v2", "--enhanced-mask-decoder", "--masking"):
        assert flag in out


def test_init_from_reads_a_model_dir_stored_in_int8_rows(setup, tmp_path):
    """The shipped QA model is stored in int8 rows (issue 53), which transformers refuses: --init-from reads it
    widened, the same weights as its plain fp32 copy."""
    from arabert_pipeline.weights.loading import dequantized_arrays, write_plain
    from arabert_pipeline.weights.rows import compact

    mlm, _ = build(setup)
    mlm.export(tmp_path / "fp32")
    stored = tmp_path / "int8"
    shutil.copytree(tmp_path / "fp32", stored)
    compact(tmp_path / "fp32" / "model.safetensors", stored / "model.safetensors", min_elements=1024,
            exact_rows={"word_embeddings": [0, 1, 2]})
    widened = dequantized_arrays(stored / "model.safetensors")
    write_plain(stored, tmp_path / "plain")
    for objective, init in (("span-selection", stored), ("mlm", stored), ("span-selection", tmp_path / "plain")):
        continued, _ = build(setup, objective=objective, model_size=None, init_from=str(init))
        weights = continued.model.state_dict()
        assert all(torch.equal(weights[k], torch.from_numpy(v)) for k, v in widened.items() if k in weights)
        assert sum(k in weights for k in widened) >= 10

"""`pretrain --deberta-attention sdpa` (pretrain/deberta_attention.py): DeBERTa's disentangled attention as the bias
of one scaled_dot_product_attention call, against transformers' eager attention at tiny size: outputs and every
parameter's gradient with padding in the batch, with and without the enhanced mask decoder, under the settings
transformers' attention takes; the same state dict; the flag's checks; and (slow) a run that trains, resumes exactly
and exports a plain DeBERTa whose eager forward is the trained model's."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from objective_corpus import build_tiny, padded_examples, tiny_config, write_corpus_and_tokenizer  # noqa: E402  after the importorskip above

# fp32 on the CPU: the two attentions add the same terms in another order.
ATOL, GRAD_RTOL, GRAD_FLOOR = 1e-5, 1e-4, 1e-6


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    torch.set_num_threads(1)
    return write_corpus_and_tokenizer(tmp_path_factory.mktemp("deberta-attention"))


def build(setup, **overrides):
    return build_tiny(setup, **{"objective": "mlm", "architecture": "deberta-v2", **overrides})


def padded_batch(objective, cfg, rows=6):
    """A training batch of the corpus whose two last rows are its shortest sequences, padded."""
    batch = objective.collator(padded_examples(cfg, rows), np.random.default_rng(0))
    assert (batch["attention_mask"] == 0).any(), "the batch has padding"
    return batch


def assert_gradients_match(eager: torch.nn.Module, sdpa: torch.nn.Module) -> None:
    theirs = dict(sdpa.named_parameters())
    gradients = [p.grad for p in eager.parameters() if p.grad is not None]
    assert len(gradients) > 10
    # Relative to each parameter's largest entry, with a floor relative to the model's for gradients that are zero
    # but for rounding (a key bias without relative terms; the last LayerNorm bias under the QA head's softmax over
    # positions).
    floor = GRAD_FLOOR * max(float(g.abs().max()) for g in gradients)
    for name, parameter in eager.named_parameters():
        if parameter.grad is None:
            assert theirs[name].grad is None or not theirs[name].grad.any(), name
            continue
        tolerance = float(parameter.grad.abs().max()) * GRAD_RTOL + floor
        assert torch.allclose(theirs[name].grad, parameter.grad, rtol=0, atol=tolerance), name


def eager_and_sdpa(setup, **overrides):
    """The same objective (same seed, so the same weights) built with each attention, dropout off."""
    from arabert_pipeline.pretrain.deberta_attention import SdpaDisentangledSelfAttention
    from arabert_pipeline.pretrain.trainer import set_dropout

    eager, cfg = build(setup, **overrides)
    sdpa, _ = build(setup, deberta_attention="sdpa", **overrides)
    for objective in (eager, sdpa):
        set_dropout(objective, 0.0)
    assert not any(isinstance(m, SdpaDisentangledSelfAttention) for m in eager.modules())
    mine, theirs = eager.state_dict(), sdpa.state_dict()
    assert list(mine) == list(theirs), "the state-dict keys are the eager model's"
    assert all(torch.equal(mine[key], theirs[key]) for key in mine)
    return eager, sdpa, cfg


# --------------------------------------------------------------------------------------------------- equivalence


@pytest.mark.parametrize("emd", [False, True], ids=["plain", "emd"])
def test_mlm_outputs_and_gradients_equal_eager_with_padding(setup, emd):
    from arabert_pipeline.pretrain.deberta_attention import SdpaDisentangledSelfAttention
    from arabert_pipeline.pretrain.mlm import mlm_hidden_states

    eager, sdpa, cfg = eager_and_sdpa(setup, enhanced_mask_decoder=emd)
    swapped = [m for m in sdpa.modules() if isinstance(m, SdpaDisentangledSelfAttention)]
    assert len(swapped) == sdpa.model.config.num_hidden_layers
    batch = padded_batch(eager, cfg)
    assert_same_loss_and_gradients(eager, sdpa, batch)
    with torch.no_grad():
        # Every position, padding included (eager averages the values there; so does SDPA).
        expected = mlm_hidden_states(eager.model, batch, emd)
        assert torch.allclose(mlm_hidden_states(sdpa.model, batch, emd), expected, atol=ATOL)


def assert_same_loss_and_gradients(eager, sdpa, batch):
    out_eager, out_sdpa = eager(batch), sdpa(batch)
    assert torch.allclose(out_sdpa["loss"], out_eager["loss"], atol=ATOL)
    out_eager["loss"].backward()
    out_sdpa["loss"].backward()
    assert_gradients_match(eager, sdpa)


def test_every_objective_gets_the_sdpa_attention(setup):
    from arabert_pipeline.pretrain.deberta_attention import SdpaDisentangledSelfAttention

    electra, _ = build(setup, objective="electra", deberta_attention="sdpa")
    assert sum(isinstance(m, SdpaDisentangledSelfAttention) for m in electra.modules()) == 4, \
        "the generator's layers and the discriminator's"
    # Span selection's loss reads the logits of every position, padding included, so gradients reach padding rows:
    # eager passes them on to the values only, and so must SDPA.
    eager, sdpa, cfg = eager_and_sdpa(setup, objective="span-selection")
    batch = padded_batch(eager, cfg)
    assert_same_loss_and_gradients(eager, sdpa, batch)


def deberta_pair(**settings):
    """A tiny transformers DebertaV2Model under `settings`, and its copy with the SDPA attention."""
    from transformers import DebertaV2Config, DebertaV2Model

    from arabert_pipeline.pretrain.deberta import DEBERTA_V3_SETTINGS
    from arabert_pipeline.pretrain.deberta_attention import use_sdpa_attention

    options = {**DEBERTA_V3_SETTINGS, "vocab_size": 200, "hidden_size": 32, "num_hidden_layers": 2,
               "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 512,
               "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "type_vocab_size": 2, **settings}
    torch.manual_seed(0)
    eager = DebertaV2Model(DebertaV2Config(**options))
    with torch.no_grad():  # relative embeddings and biases away from their zero/identity start
        for parameter in eager.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    sdpa = copy.deepcopy(eager)
    assert use_sdpa_attention(sdpa) == options["num_hidden_layers"]
    return eager, sdpa


@pytest.mark.parametrize("settings", [
    {},  # the presets' DeBERTaV3 settings
    {"share_att_key": False},  # own position projections (pos_key_proj / pos_query_proj)
    {"share_att_key": False, "pos_att_type": ["c2p"]},
    {"pos_att_type": ["p2c"]},
    {"position_buckets": -1, "max_relative_positions": 48},  # no log buckets: distances clamped at ±48
    {"relative_attention": False, "pos_att_type": []},
], ids=["v3", "own-keys", "c2p-only", "p2c-only", "no-buckets", "no-relative"])
@pytest.mark.parametrize("length", [24, 150], ids=["exact", "log-buckets"])
def test_transformers_settings_give_eager_outputs_and_gradients(settings, length):
    eager, sdpa = deberta_pair(**settings)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 200, (3, length), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, length // 2:] = 0
    mask[2, 3:] = 0
    weights = torch.randn(3, length, 32, generator=generator)
    outputs = []
    for model in (eager, sdpa):
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
        (hidden * weights).sum().backward()  # every position, padding included
        outputs.append(hidden.detach())
    assert torch.allclose(outputs[1], outputs[0], atol=ATOL)
    assert_gradients_match(eager, sdpa)


def test_probabilities_asked_for_come_from_the_eager_path():
    eager, sdpa = deberta_pair()
    ids = torch.randint(5, 200, (2, 10))
    with torch.no_grad():
        theirs = eager(input_ids=ids, output_attentions=True).attentions
        mine = sdpa(input_ids=ids, output_attentions=True).attentions
    assert len(mine) == 2 and all(torch.allclose(a, b) for a, b in zip(mine, theirs, strict=True))


def test_the_relative_rows_are_exactly_those_the_positions_index():
    from transformers.models.deberta_v2.modeling_deberta_v2 import build_relative_position

    from arabert_pipeline.pretrain.deberta_attention import relative_rows

    for buckets, max_position in ((256, 512), (-1, 48), (-1, 512)):
        span = buckets if buckets > 0 else max_position
        for length in (1, 2, 31, 49, 127, 128, 129, 130, 131, 200, 257, 512):
            probe = torch.empty(length, 1)
            relative = build_relative_position(probe, probe, bucket_size=buckets, max_position=max_position)
            used = torch.cat([(relative + span).clamp(0, 2 * span - 1).flatten(),
                              (-relative + span).clamp(0, 2 * span - 1).flatten()])
            first, end = relative_rows(length, span, buckets)
            assert first <= int(used.min()) and int(used.max()) < end, (buckets, length)
            if buckets < 0 or length - 1 <= buckets // 2:  # the exact range: no row more than the positions use
                assert (first, end) == (int(used.min()), int(used.max()) + 1), (buckets, length)


# ------------------------------------------------------------------------------------------------ the option


def test_the_option_is_checked_parsed_and_resumable(setup):
    from arabert_pipeline.cli import build_parser
    from arabert_pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match="--deberta-attention sdpa is DeBERTa's"):
        build(setup, architecture="bert", deberta_attention="sdpa")
    with pytest.raises(ConfigError, match="--deberta-attention 'flash'"):
        build(setup, deberta_attention="flash")
    corpus, tokenizer = setup
    args = build_parser().parse_args(["pretrain", "--tokenizer", tokenizer, "--corpus", corpus, "-o", "x",
                                      "--architecture", "deberta-v2", "--deberta-attention", "sdpa"])
    assert args.deberta_attention == "sdpa"
    default = build_parser().parse_args(["pretrain", "--tokenizer", tokenizer, "--corpus", corpus, "-o", "x"])
    assert default.deberta_attention == "eager"
    # Speed only, as --compile: a run may continue with the other attention, and runs from before the option
    # resume unchanged.
    sdpa = tiny_config(setup, architecture="deberta-v2", deberta_attention="sdpa")
    stored = tiny_config(setup, architecture="deberta-v2").to_dict()
    assert sdpa.differences(stored) == []
    del stored["deberta_attention"]
    assert sdpa.differences(stored) == []


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_sdpa_runs_eager_on_a_gpu_and_refuses_an_explicit_compile_there(setup, attention):
    """Compiled, `--deberta-attention sdpa` failed in the backward pass on an H200 at the first batch of another width
    (2026-11-28, torch 2.11; a CUDA-only path, docs/pretraining.md): on a GPU the default leaves it eager, and
    `--compile` is refused before anything is loaded; on a CPU, and with the eager attention, compile is as asked."""
    from arabert_pipeline.errors import ConfigError
    from arabert_pipeline.pretrain.trainer import Trainer, loop_settings

    def choice(compile, device):
        trainer = Trainer.__new__(Trainer)  # the rule alone: no data, model or output
        trainer.config = tiny_config(setup, architecture="deberta-v2", deberta_attention=attention, compile=compile)
        trainer.loop = loop_settings(trainer.config)
        return trainer.compile_choice(torch.device(device))

    assert choice(None, "cuda") is (attention == "eager")
    assert choice(False, "cuda") is False
    assert (choice(None, "cpu"), choice(True, "cpu")) == (False, True)
    if attention == "sdpa":
        with pytest.raises(ConfigError, match="--deberta-attention sdpa with --compile on a GPU"):
            choice(True, "cuda")
    else:
        assert choice(True, "cuda") is True


# ------------------------------------------------------------------------------------------------ the trainer


@pytest.mark.slow
def test_a_run_trains_resumes_exactly_and_exports_a_model_whose_eager_forward_matches(setup, tmp_path):
    from transformers import AutoModel

    from arabert_pipeline.pretrain.deberta_attention import SdpaDisentangledSelfAttention
    from arabert_pipeline.pretrain.trainer import Trainer, pretrain

    def config(output, **overrides):
        options = {"objective": "mlm", "architecture": "deberta-v2", "enhanced_mask_decoder": True,
                   "deberta_attention": "sdpa", **overrides}
        return tiny_config(setup, tmp_path / output, **options)

    def curve(output):
        rows = [json.loads(line) for line in (tmp_path / output / "log.jsonl").read_text().splitlines()]
        return [(r["step"], r.get("loss"), r.get("eval_mlm_loss")) for r in rows]

    def stop_at_three(trainer):
        if trainer.state.step == 3:
            trainer.request_stop()

    # With dropout (the architecture's 0.1, SDPA's own dropout in the attention): stopped and resumed = straight.
    straight = Trainer(config("straight"))
    assert straight.train()
    interrupted = config("interrupted")
    assert not pretrain(interrupted, on_step=stop_at_three)
    interrupted.resume = "latest"
    assert pretrain(interrupted)
    assert curve("straight") == curve("interrupted")
    losses = [loss for _, loss, _ in curve("straight") if loss is not None]
    assert len(losses) == 6 and all(np.isfinite(losses))

    # The export is a plain DeBERTa: loaded, it runs eager attention, and its forward is the trained model's.
    trained = straight.unwrapped().model.eval()
    assert any(isinstance(m, SdpaDisentangledSelfAttention) for m in trained.modules())
    exported = AutoModel.from_pretrained(tmp_path / "straight").eval()
    assert not any(isinstance(m, SdpaDisentangledSelfAttention) for m in exported.modules())
    batch = padded_batch(straight.unwrapped(), straight.config)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        expected = trained.deberta(input_ids=ids, attention_mask=mask).last_hidden_state
        assert torch.allclose(exported(input_ids=ids, attention_mask=mask).last_hidden_state, expected, atol=ATOL)

    # Without dropout the two attentions train the same model to float rounding, also when an eager run is
    # continued with the SDPA one.
    assert pretrain(config("eager", deberta_attention="eager", dropout=0.0))
    assert pretrain(config("sdpa", dropout=0.0))
    switched = config("switched", deberta_attention="eager", dropout=0.0)
    assert not pretrain(switched, on_step=stop_at_three)
    switched.resume, switched.deberta_attention = "latest", "sdpa"
    assert pretrain(switched)
    reference = curve("eager")
    for other in ("sdpa", "switched"):
        assert [step for step, _, _ in curve(other)] == [step for step, _, _ in reference]
        for (_, loss, eval_loss), (_, their_loss, their_eval) in zip(curve(other), reference, strict=True):
            for mine, theirs in ((loss, their_loss), (eval_loss, their_eval)):
                assert (mine is None) == (theirs is None)
                if mine is not None:
                    assert mine == pytest.approx(theirs, rel=1e-4, abs=1e-4), other

"""The "electra" objective: ELECTRA's replaced-token detection (Clark et al. 2020), with DeBERTaV3's embedding sharing.

A small generator (an MLM) fills the masked positions with tokens *sampled* from its distribution; the discriminator
reads the corrupted sequence and classifies every token as original (0) or replaced (1). A sampled token equal to the
original counts as original. loss = generator MLM loss + λ · discriminator loss (λ = 50, as in the paper). Because
the discriminator learns from every token rather than 15% of them, it needs far less compute than MLM for the same
downstream quality, which is what a CPU budget needs.

Masking is the mlm objective's (its `MLMCollator`: BERT's 15%, 80/10/10, optional whole-word masking). The sampling
noise also comes from the trainer's seeded generator (one uniform per masked position, inverse-CDF sampling: the same
distribution as ELECTRA's Gumbel sampling), so a resumed run sees the same corrupted sequences.

Generator size (`--electra-generator-size`, `--electra-generator-layers`): ELECTRA found generators of 1/4–1/2 of
the discriminator's width best (1/4 for small/large, 1/3 for base), at the same depth; both ratios are options.
The width is rounded to whole 64-wide attention heads (narrower generators get one head).

Embedding sharing (`--electra-embedding-sharing`):
- "none": separate embeddings;
- "full" (ELECTRA): one embedding module (token, position, type embeddings and their LayerNorm) serves both; the
  generator's width is smaller, so it projects the shared embeddings to its width (`embeddings_project`), and its
  output layer is tied to the shared token embeddings. Both losses update them ("tug-of-war", DeBERTaV3 §3);
- "gdes" (DeBERTaV3's gradient-disentangled sharing, default): the discriminator's token embeddings are
  stop_gradient(E_gen) + E_delta. E_gen (the generator's, tied to its output layer) is updated by the generator loss
  only; E_delta starts at zero and is updated by the discriminator loss only. E_delta is stored as the
  discriminator's own `word_embeddings` weight during training, and the export folds it: E_gen + E_delta.
  Position/type embeddings stay the discriminator's own, as in DeBERTaV3, which shares token embeddings only.

DeBERTaV3 (`--architecture deberta-v2`, deberta.py): generator and discriminator are DeBERTa encoders, the generator a
`DebertaV2ForMaskedLM` (with `--enhanced-mask-decoder`, DeBERTa's EMD in its MLM head, as DeBERTaV3's generator), the
discriminator a `DebertaV2ForReplacedTokenDetection` with DeBERTaV3's replaced-token head. Sharing is of token
embeddings only ("full" shares the token embedding module and ties the generator's output layer to it; a DeBERTa
embedding module cannot be shared whole, its LayerNorm has the encoder's width); "gdes" is DeBERTaV3's own recipe.

Export. The output directory is the discriminator as an `ElectraForPreTraining` (model type "electra", HF's ELECTRA
architecture; with DeBERTa a `DebertaV2ForReplacedTokenDetection`, model type "deberta-v2"), and `generator/` holds
the generator (`ElectraForMaskedLM` + tokenizer files, for fill-mask checks and
for `--init-from`). Why ELECTRA's architecture rather than converting to BERT: the QA stage loads any checkpoint with
`AutoModelForQuestionAnswering`, which maps "electra" to `ElectraForQuestionAnswering` (the same `qa_outputs` head on
the encoder output as BERT's), and `AutoModel`/`AutoModelForPreTraining` give the bare encoder / the trained
replaced-token head back, as for the published AraELECTRA. It also keeps the generator, whose embedding width
differs from its hidden width, loadable at all (`BertModel` has no embedding projection), and keeps `--init-from`
(e.g. the second, 512-token phase) able to restore exactly the pair that was trained. With equal embedding and
hidden sizes the discriminator's encoder is layer for layer a BERT encoder, so the MLM vs ELECTRA comparison is
between objectives, not architectures.

Sequence length for QA (any objective). Position embeddings past the pretraining length get no gradient, so a model
pretrained at 128 tokens meets untrained positions when QA fine-tunes at 384. BERT's fix is a second, short phase at
512; here it is a second run that starts from the first (`--init-from` restores generator and discriminator exactly;
batches are token budgets, so --batch-size 8 at 512 reads as many tokens per step as 32 at 128; the second run has its
own warm-up and decay, so give it a lower --lr):

    arabert-pipeline pretrain --objective electra --model-size mini --max-seq-length 128 --time-budget 135 \\
        --tokenizer TOK --corpus CORPUS -o runs/electra-128
    arabert-pipeline pretrain --objective electra --init-from runs/electra-128 --max-seq-length 512 --batch-size 8 \\
        --lr 2.5e-4 --warmup 0.1 --time-budget 15 --tokenizer TOK --corpus CORPUS -o runs/electra-512

and the same two calls with `--objective mlm`. Span selection (span_selection.py) then continues either at the QA
length: `--objective span-selection --init-from runs/electra-512 --max-seq-length 384 --batch-size 10`.
"""
from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from ..tokenizer.export import save_pretrained_tokenizer
from ..weights.loading import from_pretrained
from .config import bert_config_kwargs
from .data import IGNORE, Example, SpecialIds
from .mlm import MLMCollator, make_collator, masked_accuracy, masked_logits, mlm_hidden_states
from .objectives import check_init_from, init_model_dir

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel

EMBEDDING_SHARING = ("none", "full", "gdes")
GENERATOR_DIR = "generator"
HEAD_WIDTH = 64
DEBERTA_DISCRIMINATOR = "DebertaV2ForReplacedTokenDetection"
# The discriminator's replaced-token head, by model type.
RTD_HEADS = {"electra": "discriminator_predictions", "deberta-v2": "mask_predictions"}


def embedding_size(config) -> int:
    """The token embeddings' width (DeBERTa's config has the field only when it differs from the hidden size)."""
    return getattr(config, "embedding_size", None) or config.hidden_size


class ElectraCollator:
    """The mlm batch plus `rtd_mask` (tokens the discriminator is scored on) and `sample_uniforms` (sampling noise)."""

    def __init__(self, mlm: MLMCollator):
        self.mlm = mlm

    def __call__(self, examples: list[Example], rng: np.random.Generator) -> dict[str, torch.Tensor]:
        batch = self.mlm(examples, rng)
        rows, width = batch["input_ids"].shape
        scored = np.zeros((rows, width), dtype=bool)
        for row, example in enumerate(examples):
            scored[row, : len(example.input_ids)] = ~example.special
        batch["rtd_mask"] = torch.from_numpy(scored)
        batch["sample_uniforms"] = torch.from_numpy(rng.random(len(batch["mlm_positions"]), dtype=np.float32))
        return batch


def sample_replacements(logits: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One token per row of `logits`, drawn from softmax(logits) by inverse CDF with the given U(0,1) draws."""
    cdf = torch.softmax(logits.float(), dim=-1).cumsum(dim=-1)
    target = (uniforms.float() * cdf[:, -1]).unsqueeze(-1)
    # right=True: the first index whose cumulative mass exceeds the draw, so a zero-probability token is never drawn.
    return torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_max(logits.size(-1) - 1)


def corrupt(input_ids: torch.Tensor, positions: torch.Tensor, originals: torch.Tensor, sampled: torch.Tensor,
            scored: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(discriminator input, labels): originals with `sampled` at the flat `positions`; labels 1 where the token
    differs from the original, 0 elsewhere, -100 where not scored (padding, [CLS], [SEP])."""
    real = originals != IGNORE  # the collator pads the positions to a multiple (see BatchShape)
    positions, originals, sampled = positions[real], originals[real], sampled[real]
    clean = input_ids.reshape(-1).clone()
    clean[positions] = originals  # the mlm collator's [MASK]/random tokens go back to the originals first
    corrupted = clean.clone()
    corrupted[positions] = sampled
    labels = (corrupted != clean).long()
    labels[~scored.reshape(-1)] = IGNORE
    return corrupted.view_as(input_ids), labels.view_as(input_ids)


def generator_config(discriminator, width_ratio: float, depth_ratio: float, sharing: str):
    """The generator's config (`ElectraConfig` or `DebertaV2Config`, as the discriminator's): a narrower (and
    optionally shallower) copy of the discriminator's."""
    hidden = max(1, round(discriminator.hidden_size * width_ratio))
    head = min(HEAD_WIDTH, hidden)
    heads = max(1, round(hidden / head))
    hidden = heads * head
    settings = discriminator.to_dict()
    for key in ("architectures", "model_type", "transformers_version", "dtype", "torch_dtype", "pooler_hidden_size"):
        settings.pop(key, None)
    settings.update(
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        num_hidden_layers=max(1, round(discriminator.num_hidden_layers * depth_ratio)),
        # Shared token embeddings have the discriminator's width; the generator projects them to its own.
        embedding_size=embedding_size(discriminator) if sharing != "none" else hidden,
        tie_word_embeddings=True,
    )
    return type(discriminator)(**settings)


class ReplacedTokenDetection(nn.Module):
    """Generator + discriminator; `forward(batch)` → loss and metrics; `export(dir)` writes both HF models."""

    def __init__(self, generator, discriminator, collator: ElectraCollator, sharing: str, rtd_weight: float,
                 tokenizer=None, enhanced_mask_decoder: bool = False):
        super().__init__()
        if sharing not in EMBEDDING_SHARING:
            raise ConfigError(f"--electra-embedding-sharing {sharing!r}: choose one of {', '.join(EMBEDDING_SHARING)}")
        generator_width, discriminator_width = embedding_size(generator.config), embedding_size(discriminator.config)
        if sharing != "none" and generator_width != discriminator_width:
            raise ConfigError(
                f"embedding sharing {sharing!r} needs the generator's embedding size "
                f"({generator_width}) to equal the discriminator's ({discriminator_width})"
            )
        self.generator, self.discriminator = generator, discriminator
        self.collator, self.sharing, self.rtd_weight = collator, sharing, rtd_weight
        self.tokenizer, self.enhanced_mask_decoder = tokenizer, enhanced_mask_decoder
        if sharing == "full" and generator.config.model_type == "electra":
            generator.electra.embeddings = discriminator.electra.embeddings
            generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight
        elif sharing == "full":
            generator.base_model.embeddings.word_embeddings = discriminator.base_model.embeddings.word_embeddings
            generator.get_output_embeddings().weight = self.discriminator_embeddings

    @property
    def generator_embeddings(self) -> nn.Parameter:
        return self.generator.base_model.embeddings.word_embeddings.weight

    @property
    def discriminator_embeddings(self) -> nn.Parameter:
        """The discriminator's own token embedding weight; with "gdes" this is E_delta."""
        return self.discriminator.base_model.embeddings.word_embeddings.weight

    @property
    def rtd_head(self) -> nn.Module:
        """The discriminator's replaced-token head: hidden states → one logit per token."""
        return getattr(self.discriminator, RTD_HEADS[self.discriminator.config.model_type])

    def discriminator_encoder(self, input_ids, attention_mask=None, token_type_ids=None) -> torch.Tensor:
        """The discriminator's last hidden states, with the token embeddings the training uses."""
        if self.sharing == "gdes":
            # Two lookups rather than one in (E_gen + E_delta): the same sums, without adding the whole tables.
            embedded = F.embedding(input_ids, self.generator_embeddings.detach()) + F.embedding(
                input_ids, self.discriminator_embeddings)
            out = self.discriminator.base_model(inputs_embeds=embedded,
                                                attention_mask=attention_mask, token_type_ids=token_type_ids)
        else:
            out = self.discriminator.base_model(input_ids=input_ids, attention_mask=attention_mask,
                                                token_type_ids=token_type_ids)
        return out.last_hidden_state

    def losses(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """(generator MLM loss, discriminator loss, detached metrics), kept apart so tests can backward each."""
        attention_mask, token_type_ids = batch.get("attention_mask"), batch.get("token_type_ids")
        positions, originals = batch["mlm_positions"], batch["mlm_labels"]
        hidden = mlm_hidden_states(self.generator, batch, self.enhanced_mask_decoder)
        logits = masked_logits(self.generator, hidden, positions).float()
        generator_loss = F.cross_entropy(logits, originals, ignore_index=IGNORE)
        predicted_positions = originals != IGNORE
        with torch.no_grad():
            sampled = sample_replacements(logits.detach(), batch["sample_uniforms"])
            corrupted, labels = corrupt(batch["input_ids"], positions, originals, sampled, batch["rtd_mask"])
        disc_hidden = self.discriminator_encoder(corrupted, attention_mask, token_type_ids)
        # Every position through the head (one output per token: cheap), the unscored ones weighted 0: selecting the
        # scored ones instead would make the shapes data-dependent and wait on the GPU every step.
        scored = (labels >= 0).float()
        disc_logits = self.rtd_head(disc_hidden).float()
        targets = labels.clamp_min(0).float()
        count = scored.sum()
        rtd_loss = (F.binary_cross_entropy_with_logits(disc_logits, targets, reduction="none") * scored).sum() / \
            count.clamp_min(1)
        with torch.no_grad():
            predicted = (disc_logits > 0).float()
            replaced = (targets * scored).sum()
            metrics = {
                "generator_loss": generator_loss.detach(),
                "generator_accuracy": masked_accuracy(logits, originals, predicted_positions),
                "rtd_loss": rtd_loss.detach(),
                "rtd_accuracy": ((predicted == targets).float() * scored).sum() / count.clamp_min(1),
                "rtd_recall": (predicted * targets * scored).sum() / replaced.clamp_min(1),
                "replaced_rate": replaced / predicted_positions.sum().clamp_min(1),
                # The share of scored tokens that were replaced: the constant answer "original" has its entropy as loss.
                "replaced_share": replaced / count.clamp_min(1),
                "weight": count,
            }
        return generator_loss, rtd_loss, metrics

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        generator_loss, rtd_loss, metrics = self.losses(batch)
        return {"loss": generator_loss + self.rtd_weight * rtd_loss, **metrics}

    @staticmethod
    def health_warning(metrics: dict[str, float]) -> str | None:
        """A message when held-out metrics show the discriminator has learned nothing beyond the base rate.

        Recall alone does not tell: an under-confident discriminator never crosses 0.5 yet already beats the
        constant answer. Collapsed means both: recall < 1% and a loss within 2% of the constant answer's (the
        entropy of the replaced share). Seen here with mini (L4/H256, generator H64), with GDES and with separate
        embeddings, lr 3e-4 to 8e-4: the discriminator beats the constant answer while the generator samples
        near-uniformly (rare tokens, recognisable by identity alone), then falls back to it as the generator learns
        the frequent tokens, whose replacements only context gives away: the discriminator's form of MLM's unigram
        plateau.
        """
        share = metrics.get("eval_replaced_share", 0.0)
        if not 0.0 < share < 1.0 or metrics.get("eval_rtd_recall", 1.0) >= 0.01:
            return None
        constant_loss = -(share * math.log(share) + (1 - share) * math.log(1 - share))
        if metrics.get("eval_rtd_loss", constant_loss) < 0.98 * constant_loss:
            return None
        return ("the discriminator predicts 'original' for (almost) every token and its loss is the constant "
                "answer's: it has collapsed and only the generator is learning; the MLM objective is the safer "
                "choice at this budget")

    def exported_discriminator(self):
        """A copy of the discriminator whose token embeddings are the ones it was trained with (E_delta folded)."""
        model = copy.deepcopy(self.discriminator)
        if self.sharing == "gdes":
            with torch.no_grad():
                model.base_model.embeddings.word_embeddings.weight.add_(self.generator_embeddings.detach())
        return model

    def export(self, directory) -> None:
        directory = Path(directory)
        self.exported_discriminator().save_pretrained(directory)
        self.generator.save_pretrained(directory / GENERATOR_DIR)
        if self.tokenizer is not None:
            save_pretrained_tokenizer(self.tokenizer, directory / GENERATOR_DIR)


def model_classes(architecture: str) -> tuple[type[PreTrainedModel], type[PreTrainedModel], dict[str, str]]:
    """(generator class, discriminator class, their attention keyword) for an --architecture."""
    if architecture == "deberta-v2":
        from transformers import DebertaV2ForMaskedLM

        from .deberta import DebertaV2ForReplacedTokenDetection

        return DebertaV2ForMaskedLM, DebertaV2ForReplacedTokenDetection, {}  # no SDPA kernel for DeBERTa
    from transformers import ElectraForMaskedLM, ElectraForPreTraining

    return ElectraForMaskedLM, ElectraForPreTraining, {"attn_implementation": "sdpa"}


def load_pair(config, tokenizer):
    """(generator, discriminator) from `--init-from` (an electra export or checkpoint), the generator rebuilt if
    absent."""
    from transformers import AutoConfig

    from .config import ARCHITECTURES

    generator_class, discriminator_class, attention = model_classes(config.architecture)
    directory = init_model_dir(config.init_from)
    stored = AutoConfig.from_pretrained(directory)
    discriminator_written = stored.model_type == "electra" or DEBERTA_DISCRIMINATOR in (stored.architectures or ())
    if stored.model_type in ARCHITECTURES[config.architecture] and not discriminator_written:
        raise ConfigError(
            f"--init-from {directory}: a {stored.model_type!r} model; the electra objective continues "
            "discriminators written by --objective electra"
        )
    check_init_from(config, stored, directory, tokenizer)
    discriminator = from_pretrained(discriminator_class, directory, **attention)
    if (directory / GENERATOR_DIR / "config.json").is_file():
        generator = from_pretrained(generator_class, directory / GENERATOR_DIR, **attention)
    else:
        settings = generator_config(stored, config.electra_generator_size, config.electra_generator_layers,
                                    config.electra_embedding_sharing)
        generator = generator_class._from_config(settings, **attention)
    if config.enhanced_mask_decoder:
        from .deberta import add_enhanced_mask_decoder

        add_enhanced_mask_decoder(generator, directory / GENERATOR_DIR)
    if config.electra_embedding_sharing == "gdes":
        # The export holds E_gen + E_delta; training goes on with E_delta = that minus the generator's E_gen.
        with torch.no_grad():
            discriminator.base_model.embeddings.word_embeddings.weight.sub_(
                generator.base_model.embeddings.word_embeddings.weight)
    return generator, discriminator


def build(config, tokenizer) -> ReplacedTokenDetection:
    from transformers import ElectraConfig

    if config.nsp:
        raise ConfigError("--nsp is an mlm option; the electra objective has no next-sentence prediction")
    if not 0 < config.electra_generator_size <= 1 or not 0 < config.electra_generator_layers <= 1:
        raise ConfigError("--electra-generator-size and --electra-generator-layers are fractions in (0, 1] of the "
                          "discriminator's width and depth")
    if config.electra_rtd_weight <= 0:
        raise ConfigError(f"--electra-rtd-weight {config.electra_rtd_weight}: must be positive")
    specials = SpecialIds.from_tokenizer(tokenizer)
    if config.init_from:
        generator, discriminator = load_pair(config, tokenizer)
    else:
        generator_class, discriminator_class, attention = model_classes(config.architecture)
        disc_config: PretrainedConfig
        if config.architecture == "deberta-v2":
            from .deberta import deberta_config

            disc_config = deberta_config(len(tokenizer), specials.pad, config.model_size)
        else:
            kwargs = bert_config_kwargs(config.model_size)
            disc_config = ElectraConfig(vocab_size=len(tokenizer), embedding_size=kwargs["hidden_size"],
                                        pad_token_id=specials.pad, **kwargs)
        discriminator = discriminator_class._from_config(disc_config, **attention)
        gen_config = generator_config(disc_config, config.electra_generator_size, config.electra_generator_layers,
                                      config.electra_embedding_sharing)
        generator = generator_class._from_config(gen_config, **attention)
        if config.enhanced_mask_decoder:
            from .deberta import add_enhanced_mask_decoder

            add_enhanced_mask_decoder(generator)
        if config.electra_embedding_sharing == "gdes":
            with torch.no_grad():
                discriminator.base_model.embeddings.word_embeddings.weight.zero_()  # E_delta starts at zero
    generator.train()
    discriminator.train()
    return ReplacedTokenDetection(generator, discriminator, ElectraCollator(make_collator(config, tokenizer)),
                                  config.electra_embedding_sharing, config.electra_rtd_weight, tokenizer,
                                  config.enhanced_mask_decoder)

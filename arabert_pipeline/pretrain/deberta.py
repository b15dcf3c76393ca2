"""`--architecture deberta-v2`: DeBERTa-v2/v3 encoders (He et al. 2021, 2023) for the pretraining objectives.

The encoder is transformers' `DebertaV2Model` set as DeBERTaV3 sets it: disentangled attention whose scores add a
content-to-position and a position-to-content term (`pos_att_type` c2p|p2c) over relative positions, exact up to ±128
and in log buckets beyond (`position_buckets` 256), one table of relative-position embeddings shared by all layers
(layer-normalised, `norm_rel_ebd`) and projected by each layer's own query/key projections (`share_att_key`), and no
absolute positions at the input (`position_biased_input` false). The presets are BERT's (config.MODEL_SIZES) and so
are the parameter counts, to within the relative table's LayerNorm: its 2 × 256 rows replace BERT's 512 absolute
positions and the shared projections add nothing. Two token types as in BERT, although DeBERTa-v2's default has
none, so the QA stage's question/context types (and its third, question-overlap type) have an embedding to use.
transformers has no SDPA kernel for disentangled attention: DeBERTa runs its own ("eager") attention, or with
`--deberta-attention sdpa` deberta_attention.py's, the relative terms as the bias of one SDPA call.

Enhanced mask decoder (EMD, `--enhanced-mask-decoder`, DeBERTa §3.2). Relative positions alone do not tell apart two
words in the same local context ("a new store opened beside the new mall": store and mall), which absolute positions
do, so DeBERTa adds absolute positions back just before the MLM softmax, as its official code does: with H the output
of the next-to-last layer and P the absolute position embeddings, the last encoder layer runs EMD_STEPS = 2 more times
with H as keys and values, the first time with H + P as the query, then with its own previous output; the MLM head
reads the last query. The layer is the last encoder layer itself (shared weights), so EMD adds no parameters but P.
The last layer's ordinary output is not computed in pretraining (nothing reads it), which makes EMD cost one layer,
not two. EMD runs on the full sequence (the keys, values and relative positions need it); the masked positions are
gathered after it, so the head's transform and vocabulary projection run on the masked 15% only, as without EMD.

Export. An MLM run writes a plain `DebertaV2ForMaskedLM`, an ELECTRA run a `DebertaV2ForReplacedTokenDetection`
(below) and a `DebertaV2ForMaskedLM` generator; all load with `AutoModel` and `AutoModelForQuestionAnswering` (model
type "deberta-v2"), the MLMs with `AutoModelForMaskedLM`. P is saved as `deberta.embeddings.position_embeddings`,
the key under which Microsoft's DeBERTa checkpoints keep EMD's positions: transformers' DeBERTa classes skip it
(position_biased_input is false) and `--init-from` reads it back. What no export keeps is EMD's computation:
`DebertaV2ForMaskedLM` predicts from the last layer's ordinary output (its query is H, without P), a path the head
was never trained on, so fill-mask through it falls short of the held-out MLM accuracy the run logged. Fine-tuning
reads that ordinary output, as DeBERTa's own fine-tuning does.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import DebertaV2Config, DebertaV2Model
from transformers.activations import ACT2FN
from transformers.modeling_outputs import TokenClassifierOutput
from transformers.models.deberta_v2.modeling_deberta_v2 import DebertaV2PreTrainedModel

from ..errors import ConfigError
from .config import bert_config_kwargs

EMD_STEPS = 2  # applications of the shared last layer (DeBERTa's n = 2)
POSITIONS_KEY = "deberta.embeddings.position_embeddings.weight"
# DeBERTaV3's relative-attention settings; everything else follows the BERT presets.
DEBERTA_V3_SETTINGS: dict[str, Any] = {
    "relative_attention": True,
    "pos_att_type": ["p2c", "c2p"],
    "position_buckets": 256,
    "max_relative_positions": -1,  # = max_position_embeddings
    "norm_rel_ebd": "layer_norm",
    "share_att_key": True,
    "position_biased_input": False,
    "layer_norm_eps": 1e-7,
}


def deberta_config(vocab_size: int, pad_token_id: int, model_size: str) -> DebertaV2Config:
    return DebertaV2Config(vocab_size=vocab_size, pad_token_id=pad_token_id, **bert_config_kwargs(model_size),
                           **DEBERTA_V3_SETTINGS)


class DebertaV2MaskPredictions(nn.Module):
    """DeBERTaV3's replaced-token head (its MaskPredictionHead): dense, activation, LayerNorm, one logit per token."""

    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = ACT2FN[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.classifier = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.LayerNorm(self.activation(self.dense(hidden_states)))).squeeze(-1)


class DebertaV2ForReplacedTokenDetection(DebertaV2PreTrainedModel):
    """A DeBERTa discriminator: `deberta` + `mask_predictions`, the names of DeBERTaV3's released checkpoints, whose
    `mask_predictions.*` weights transformers' task classes leave unused as they do ELECTRA's discriminator head."""

    def __init__(self, config: DebertaV2Config):
        super().__init__(config)
        self.deberta = DebertaV2Model(config)
        self.mask_predictions = DebertaV2MaskPredictions(config)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, inputs_embeds=None,
                **kwargs) -> TokenClassifierOutput:
        hidden = self.deberta(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                              inputs_embeds=inputs_embeds).last_hidden_state
        return TokenClassifierOutput(logits=self.mask_predictions(hidden))


def stored_position_table(directory: Path) -> torch.Tensor | None:
    """EMD's absolute positions as saved in a model directory (see the module docstring), if it holds them."""
    from safetensors import safe_open

    index = directory / "model.safetensors.index.json"
    name = json.loads(index.read_text(encoding="utf-8"))["weight_map"].get(POSITIONS_KEY) if index.is_file() \
        else "model.safetensors"
    if name is None or not (directory / name).is_file():
        return None
    with safe_open(str(directory / name), framework="pt") as weights:
        stored = weights.keys()  # safe_open has no __contains__
        return weights.get_tensor(POSITIONS_KEY) if POSITIONS_KEY in stored else None


def add_enhanced_mask_decoder(model, init_from: Path | None = None) -> None:
    """Give a DeBERTa MLM (`DebertaV2ForMaskedLM`) EMD's absolute position table: the one saved in `init_from` if it
    holds one, else a new one (initialised as transformers initialises embeddings)."""
    config = model.config
    if getattr(config, "conv_kernel_size", 0) > 0:
        raise ConfigError("--enhanced-mask-decoder: DeBERTa-v2 models with a convolution layer (conv_kernel_size, "
                          "as xlarge/xxlarge) are not supported")
    embeddings = model.base_model.embeddings
    table = nn.Embedding(config.max_position_embeddings, config.hidden_size)
    stored = stored_position_table(init_from) if init_from is not None else None
    with torch.no_grad():
        if stored is not None and stored.shape == table.weight.shape:
            table.weight.copy_(stored)
        else:
            table.weight.normal_(0.0, config.initializer_range)
    embeddings.position_embeddings = table.to(embeddings.word_embeddings.weight.device)


def enhanced_mask_decoder_states(deberta, input_ids=None, attention_mask=None, token_type_ids=None,
                                 inputs_embeds=None) -> torch.Tensor:
    """EMD's output at every position (batch × length × hidden) of a `DebertaV2Model` given EMD's position table.

    The layers below the last run as `DebertaV2Model.forward` runs them (mask, relative positions, shared relative
    embeddings); the last one then runs EMD_STEPS times with query H + P first.
    """
    reference = input_ids if input_ids is not None else inputs_embeds[..., 0]
    if attention_mask is None:
        attention_mask = torch.ones_like(reference, dtype=torch.long)
    if token_type_ids is None:
        token_type_ids = torch.zeros_like(reference, dtype=torch.long)
    encoder = deberta.encoder
    hidden = deberta.embeddings(input_ids=input_ids, token_type_ids=token_type_ids, mask=attention_mask,
                                inputs_embeds=inputs_embeds)
    mask = encoder.get_attention_mask(attention_mask)
    relative_pos = encoder.get_rel_pos(hidden)
    rel_embeddings = encoder.get_rel_embedding()
    for layer in encoder.layer[:-1]:
        hidden = layer(hidden, mask, relative_pos=relative_pos, rel_embeddings=rel_embeddings)[0]
    query = hidden + deberta.embeddings.position_embeddings.weight[: hidden.size(1)]
    for _ in range(EMD_STEPS):
        query = encoder.layer[-1](hidden, mask, query_states=query, relative_pos=relative_pos,
                                  rel_embeddings=rel_embeddings)[0]
    return query

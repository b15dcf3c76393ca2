"""`--deberta-attention sdpa`: DeBERTa's disentangled attention through `scaled_dot_product_attention` (issue 51).

transformers' `DisentangledSelfAttention` (the "eager" attention every DeBERTa here runs by default) builds the scores
itself: the content scores, the content-to-position products against the whole 2 × 256-row relative table (four
times the L × L scores at L = 128), their gather, the same twice for position-to-content, the sum, the masked copy,
the softmax and its dropout, each a batch × heads × L × L tensor (or larger) that autograd keeps for the backward
pass: 44% of what a DeBERTa-base layer keeps at L = 128 under bf16 autocast (counted with saved-tensor hooks on the
CPU; eager saves the same tensors on a GPU), in the 43.4 GiB issue 51 measured at batch 256.

Here the two relative terms are computed as one additive bias with the same gathers, bucketing, scale (1 / sqrt(d ×
(1 + number of relative terms))) and shared keys (`share_att_key`) as transformers', and the rest (content scores,
mask, softmax, dropout, the product with the values) is one `scaled_dot_product_attention` call. On a GPU that is
the memory-efficient kernel (flash attention takes no bias; this one also returns the bias's gradient), which keeps
neither the scores nor the probabilities, so the bias is the one L × L tensor a layer keeps; a CPU runs SDPA's math
fallback, which keeps them as eager does. The gathers keep only their index (GatherColumns), not the products they
read. Two further savings are exact: the relative table is projected only over the rows a sequence of length L can
index (2L − 1 rows while L − 1 is within the exact, unbucketed range of ±position_buckets / 2; the whole table
beyond), and the projections are broadcast over the batch instead of repeated.

The module swapped in is a subclass of transformers' with only `forward` replaced, so its parameters, their names and
everything that reads them (checkpoints, `--resume`, the export, `--init-from`) are the eager model's: an exported
model is a plain transformers DeBERTa that runs eager attention wherever it is loaded.

What it assumes: the relative positions are the ones `DebertaV2Encoder` builds (query i to key j, i − j, bucketed),
as every call in transformers and in deberta.py's enhanced mask decoder passes. Where queries and keys differ in
length (transformers' `build_rpos` path), or the attention probabilities are asked for, it runs the eager forward.
Padded query rows see every key masked and come out as eager's do: the average of all the values.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from transformers.models.deberta_v2.modeling_deberta_v2 import DisentangledSelfAttention, build_relative_position


def relative_rows(length: int, span: int, position_buckets: int) -> tuple[int, int]:
    """[first, end) of the rows of the 2 × span relative table that the positions of a `length`-token sequence index.

    Relative distances up to position_buckets / 2 are their own bucket (transformers' `make_log_bucket_position`
    keeps |d| ≤ mid as d), so while the longest distance stays there the rows are span − (L − 1) … span + (L − 1),
    clamped as the gathers clamp; past it, the log buckets may reach any row, and all are used.
    """
    reach = length - 1
    if position_buckets > 0 and reach > position_buckets // 2:
        return 0, 2 * span
    return max(0, span - reach), min(2 * span, span + reach + 1)


class GatherColumns(torch.autograd.Function):
    """`torch.gather(source, -1, index)` whose backward pass keeps only the index: torch.gather's keeps its whole
    source, here the batch × heads × L × (2L − 1) products with the relative table, twice a layer."""

    @staticmethod
    def forward(ctx, source: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(index)
        ctx.source_shape = source.shape
        return torch.gather(source, -1, index)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (index,) = ctx.saved_tensors
        return grad.new_zeros(ctx.source_shape).scatter_add_(-1, index, grad), None


class SdpaDisentangledSelfAttention(DisentangledSelfAttention):
    """transformers' disentangled self-attention with the relative terms as a bias of one SDPA call (see the module
    docstring); the same parameters, the same outputs to float rounding."""

    def forward(self, hidden_states, attention_mask, output_attentions=False, query_states=None, relative_pos=None,
                rel_embeddings=None):
        if query_states is None:
            query_states = hidden_states
        if output_attentions or query_states.size(1) != hidden_states.size(1):
            return super().forward(hidden_states, attention_mask, output_attentions, query_states=query_states,
                                   relative_pos=relative_pos, rel_embeddings=rel_embeddings)
        batch, length, _ = hidden_states.shape
        visible = attention_mask.bool()
        seen = visible.any(-1, keepdim=True)  # the query sees some key: not a padding row
        # Keys a query must not see get the dtype's minimum, as eager's masked_fill gives them. A query that sees none
        # (a padding row) averages all the values in eager (its scores all equal the minimum); here its query and its
        # bias row are zeroed, which averages them too, keeps the gradient away from its scores as eager's fill
        # does, and keeps its log-sum-exp a plain number: one taken over minimums loses the log L that the backward
        # pass of the SDPA kernels subtracts again (it rounds away), which would scale that row's gradient L-fold.
        # The query is zeroed before it is split into heads, so that the relative terms (whose padding rows are
        # overwritten) and SDPA read, and keep for the backward pass, the one tensor.
        query = self.heads(self.query_proj(query_states).masked_fill(~seen.reshape(-1, length, 1), 0.0))
        key = self.heads(self.key_proj(hidden_states))
        value = self.heads(self.value_proj(hidden_states))
        terms = 1 + ("c2p" in self.pos_att_type) + ("p2c" in self.pos_att_type)
        scale = 1.0 / math.sqrt(self.attention_head_size * terms)

        bias = self.relative_bias(query, key, relative_pos, self.pos_dropout(rel_embeddings)) \
            if self.relative_attention else None
        bias = query.new_zeros(()) if bias is None else (bias * scale).to(query.dtype)
        bias = torch.where(visible, bias, seen.to(query.dtype) * torch.finfo(query.dtype).min)
        context = nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=bias, dropout_p=self.dropout.p if self.training else 0.0, scale=scale)
        return context.transpose(1, 2).reshape(batch, length, -1), None

    def heads(self, projected: torch.Tensor) -> torch.Tensor:
        """(…, n, heads × d) → (…, heads, n, d)."""
        return projected.view(*projected.shape[:-1], self.num_attention_heads, -1).transpose(-3, -2)

    def relative_bias(self, query: torch.Tensor, key: torch.Tensor, relative_pos, rel_embeddings: torch.Tensor):
        """content→position + position→content (batch × heads × L × L, unscaled), or None if neither is asked."""
        batch, heads, length, _ = query.shape
        if relative_pos is None:
            relative_pos = build_relative_position(query, key, bucket_size=self.position_buckets,
                                                   max_position=self.max_relative_positions)
        relative_pos = relative_pos.to(device=query.device, dtype=torch.long)
        while relative_pos.dim() < 4:
            relative_pos = relative_pos.unsqueeze(-3)
        span = self.pos_ebd_size
        first, end = relative_rows(length, span, self.position_buckets)
        table = rel_embeddings[first:end]
        grid = (batch, heads, length, length)
        bias = None
        if "c2p" in self.pos_att_type:
            position_keys = self.heads(self.key_proj(table) if self.share_att_key else self.pos_key_proj(table))
            index = torch.clamp(relative_pos + span, 0, 2 * span - 1) - first
            # [query i, key j] = q_i · k_rel[δ(i, j)]
            bias = GatherColumns.apply(torch.einsum("bhld,hwd->bhlw", query, position_keys), index.expand(grid))
        if "p2c" in self.pos_att_type:
            position_queries = self.heads(self.query_proj(table) if self.share_att_key else self.pos_query_proj(table))
            index = torch.clamp(-relative_pos + span, 0, 2 * span - 1) - first
            # Gathered along each key's row as transformers does ([key j, query i] = k_j · q_rel[δ(i, j)]), then
            # turned to [query, key].
            p2c = GatherColumns.apply(torch.einsum("bhld,hwd->bhlw", key, position_queries), index.expand(grid))
            p2c = p2c.transpose(-1, -2)
            bias = p2c if bias is None else bias + p2c
        return bias


def use_sdpa_attention(module: nn.Module) -> int:
    """Swap every transformers disentangled self-attention inside `module` for the SDPA one, in place (same
    parameters, same state-dict keys); returns how many were swapped."""
    swapped = 0
    for child in module.modules():
        if type(child) is DisentangledSelfAttention:
            child.__class__ = SdpaDisentangledSelfAttention
            swapped += 1
    return swapped

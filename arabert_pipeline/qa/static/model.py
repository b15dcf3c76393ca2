"""The static reader's network: DrQA's document reader (Chen et al. 2017; its `layers.py` and `rnn_reader.py`).

Frozen word vectors (the `tune_top_k` most frequent training-question words fine-tuned, as DrQA does: question words
like "متى" carry what the answer looks like), stacked BiLSTMs over context and question, the context features of
features.py plus the aligned question embedding, a self-attentive question summary and two bilinear pointers.
Decoding (`best_spans`) takes the span with end >= start and at most `max_span_words` words maximising
p_start * p_end.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ...finetuning.rnn import StackedBiLSTM
from .features import N_FEATURES, PAD


class Reader(nn.Module):
    """Word ids and context features → start and end logits over the context words."""

    frozen: torch.Tensor  # buffers (registered in __init__): the vectors, and each row's tuned slot (0: none)
    slot: torch.Tensor

    def __init__(self, vectors: np.ndarray, tuned_rows: np.ndarray, hidden: int, layers: int, dropout: float):
        super().__init__()
        self.dropout = dropout
        dim = vectors.shape[1]
        table = np.zeros((len(vectors) + 2, dim), dtype=np.float32)
        table[2:] = vectors
        # Not persistent: the vectors are the embeddings directory's, saved once there, not in every reader.
        self.register_buffer("frozen", torch.from_numpy(table), persistent=False)
        slot = np.zeros(len(table), dtype=np.int64)
        slot[tuned_rows] = np.arange(1, len(tuned_rows) + 1)
        self.register_buffer("slot", torch.from_numpy(slot), persistent=False)
        self.tuned = nn.Embedding(len(tuned_rows) + 1, dim)
        with torch.no_grad():
            self.tuned.weight[0].zero_()
            self.tuned.weight[1:] = torch.from_numpy(table[tuned_rows])
        self.align = nn.Linear(dim, dim)
        self.context_rnn = StackedBiLSTM(2 * dim + N_FEATURES, hidden, layers, dropout)
        self.question_rnn = StackedBiLSTM(dim, hidden, layers, dropout)
        size = 2 * hidden * layers
        self.self_attention = nn.Linear(size, 1)
        self.start = nn.Linear(size, size, bias=False)
        self.end = nn.Linear(size, size, bias=False)

    def embed(self, ids):
        slot = self.slot[ids]
        return torch.where((slot > 0).unsqueeze(-1), self.tuned(slot), self.frozen[ids])

    def forward(self, context, features, question):
        c_mask, q_mask = context != PAD, question != PAD
        start, end = self.read(self.embed(context), features, self.embed(question), c_mask, q_mask)
        return start.masked_fill(~c_mask, float("-inf")), end.masked_fill(~c_mask, float("-inf"))

    def read(self, c_emb, features, q_emb, c_mask=None, q_mask=None):
        """Start and end logits from embedded words; masks None: one question, no padding."""
        c_emb = nn.functional.dropout(c_emb, self.dropout, self.training)
        q_emb = nn.functional.dropout(q_emb, self.dropout, self.training)
        # Aligned question embedding: each context word gets the question words it resembles, softly.
        c_proj, q_proj = torch.relu(self.align(c_emb)), torch.relu(self.align(q_emb))
        scores = c_proj @ q_proj.transpose(1, 2)
        if q_mask is not None:
            scores = scores.masked_fill(~q_mask.unsqueeze(1), float("-inf"))
        aligned = torch.softmax(scores, dim=-1) @ q_emb
        c_hidden = self.context_rnn(torch.cat([c_emb, aligned, features], dim=-1),
                                    None if c_mask is None else c_mask.sum(1))
        q_hidden = self.question_rnn(q_emb, None if q_mask is None else q_mask.sum(1))
        weights = self.self_attention(q_hidden).squeeze(-1)
        if q_mask is not None:
            weights = weights.masked_fill(~q_mask, float("-inf"))
        summary = (torch.softmax(weights, dim=-1).unsqueeze(-1) * q_hidden).sum(1)
        start = (c_hidden @ self.start(summary).unsqueeze(-1)).squeeze(-1)
        end = (c_hidden @ self.end(summary).unsqueeze(-1)).squeeze(-1)
        return start, end


def best_spans(start_logits, end_logits, max_span_words: int) -> list[tuple[int, int]]:
    """Per row, (first word, last word) maximising p_start * p_end with first <= last < first + max_span_words."""
    log_start, log_end = torch.log_softmax(start_logits, -1), torch.log_softmax(end_logits, -1)
    n = start_logits.shape[1]
    # One diagonal band per span length: n × max_span_words scores, not the n × n of every pair.
    padded_end = torch.nn.functional.pad(log_end, (0, max_span_words - 1), value=float("-inf"))
    band = torch.stack([log_start + padded_end[:, k: k + n] for k in range(max_span_words)], dim=-1)
    flat = band.flatten(1).argmax(1)
    starts, lengths = flat // max_span_words, flat % max_span_words
    return [(int(a), int(a + k)) for a, k in zip(starts, lengths, strict=True)]

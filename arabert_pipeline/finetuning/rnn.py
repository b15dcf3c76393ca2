"""Recurrent layers the static-vector models share: DrQA's stacked BiLSTM, read by the static QA reader
(qa/static/model.py) and the NER BiLSTM baseline (ner/bilstm.py)."""
from __future__ import annotations

import torch
from torch import nn


class StackedBiLSTM(nn.Module):
    """DrQA's encoder: BiLSTM layers whose outputs are all concatenated, dropout on every layer's input."""

    def __init__(self, size_in: int, hidden: int, layers: int, dropout: float):
        super().__init__()
        self.dropout = dropout
        self.rnns = nn.ModuleList(nn.LSTM(size_in if i == 0 else 2 * hidden, hidden, batch_first=True,
                                          bidirectional=True) for i in range(layers))

    def forward(self, x, lengths=None):
        """`lengths` None: one unpadded sequence (the graph companion.py exports)."""
        outputs = []
        for rnn in self.rnns:
            x = nn.functional.dropout(x, self.dropout, self.training)
            if lengths is None:
                x = rnn(x)[0]
            else:
                # Packed, so that the backward direction starts at each sequence's own last word, not at padding:
                # an answer must not depend on which other questions share its batch.
                packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
                x, _ = nn.utils.rnn.pad_packed_sequence(rnn(packed)[0], batch_first=True, total_length=x.shape[1])
            outputs.append(x)
        return nn.functional.dropout(torch.cat(outputs, dim=-1), self.dropout, self.training)

"""The "mlm" objective: BERT's masked language modelling (and, optionally, next-sentence prediction).

Masking follows BERT's `create_pretraining_data.py`: in each sequence, round(15% of the maskable tokens) (at least
one) are chosen; of those, 80% become [MASK], 10% a token drawn uniformly from the vocabulary, 10% stay unchanged.
[CLS]/[SEP]/padding are never chosen. Masks are drawn at batch time from the trainer's seeded generator (dynamic
masking, as RoBERTa), not once per corpus.

Whole-word masking chooses whole words, BERT's greedy way (words in random order, skipping a word that would
overshoot the count). A word is the run of tokens between two spaces of the text the tokenizer sees (data.py marks
word starts from the tokenizer's offsets), whatever the tokenizer type. With Farasa-segmented text (arabertv2) the
preprocessing writes `ال+ كتاب +ها`, so `ال+` and `+ها` are words of their own. That is deliberate: the segmented
text is what the model reads, clitics are frequent and predictable units of their own there, and grouping them
back into surface words would need the preprocessing's inverse inside masking. With SentencePiece a word starts at
a token carrying `▁`; with WordPiece, punctuation glued to a word (`كتاب،`) stays part of that word.

Speed: the model is a plain `BertForMaskedLM` (or `BertForPreTraining` with NSP) so `AutoModelForMaskedLM` loads the
output, but the loss gathers the hidden states of the masked positions before the prediction head, so the
transform and the vocabulary projection (most of the FLOPs of a small BERT) run on 15% of the tokens.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .config import bert_config_kwargs
from .data import IGNORE, POSITIONS_MULTIPLE, BatchShape, Example, SpecialIds, padded_shape, row_lengths
from .objectives import check_vocabulary, init_model_dir


class MLMCollator:
    """Examples → padded tensors with BERT masking; `mlm_positions` index the flattened (batch × length) grid."""

    def __init__(self, specials: SpecialIds, vocab_size: int, mlm_probability: float = 0.15,
                 whole_word_masking: bool = False, shape: BatchShape | None = None):
        self.specials, self.vocab_size, self.shape = specials, vocab_size, shape
        self.mlm_probability, self.whole_word_masking = mlm_probability, whole_word_masking

    def __call__(self, examples: list[Example], rng: np.random.Generator) -> dict[str, torch.Tensor]:
        rows, width = padded_shape(examples, self.shape)
        ids = np.full((rows, width), self.specials.pad, dtype=np.int64)
        maskable = np.zeros((rows, width), dtype=bool)
        word_starts = np.ones((rows, width), dtype=bool)
        for row, example in enumerate(examples):
            n = len(example.input_ids)
            ids[row, :n] = example.input_ids
            maskable[row, :n] = ~example.special
            word_starts[row, :n] = example.word_starts
        # Masks are drawn on the unpadded grid so that padding to a fixed batch shape leaves them, and the random
        # stream after them, exactly as they would be without padding.
        real_rows, longest = len(examples), max(len(example.input_ids) for example in examples)
        chosen = np.zeros((rows, width), dtype=bool)
        chosen[:real_rows, :longest] = self.choose(maskable[:real_rows, :longest], word_starts[:real_rows, :longest], rng)
        positions = np.flatnonzero(chosen)
        labels = ids.reshape(-1)[positions]
        action = rng.random(len(positions))
        masked = ids.reshape(-1).copy()
        masked[positions[action < 0.8]] = self.specials.mask
        randomised = positions[(action >= 0.8) & (action < 0.9)]
        masked[randomised] = rng.integers(0, self.vocab_size, len(randomised))
        if self.shape is not None:  # few distinct prediction-head shapes too (see BatchShape); the extra rows are ignored
            extra = -len(positions) % POSITIONS_MULTIPLE
            positions = np.append(positions, np.zeros(extra, dtype=np.int64))
            labels = np.append(labels, np.full(extra, IGNORE, dtype=np.int64))
        batch = {
            "input_ids": torch.from_numpy(masked.reshape(rows, width)),
            "mlm_positions": torch.from_numpy(positions),
            "mlm_labels": torch.from_numpy(labels),
        }
        lengths = row_lengths(examples, rows)
        if (lengths < width).any():  # without padding, SDPA runs maskless (its fastest kernel)
            batch["attention_mask"] = torch.from_numpy((np.arange(width) < lengths[:, None]).astype(np.int64))
        if examples[0].token_type_ids is not None:
            types = np.zeros((rows, width), dtype=np.int64)
            for row, example in enumerate(examples):
                types[row, : len(example.token_type_ids)] = example.token_type_ids
            batch["token_type_ids"] = torch.from_numpy(types)
            nsp_labels = np.full(rows, IGNORE, dtype=np.int64)  # padding rows are not scored
            nsp_labels[: len(examples)] = [e.next_sentence_label for e in examples]
            batch["next_sentence_label"] = torch.from_numpy(nsp_labels)
        return batch

    def choose(self, maskable: np.ndarray, word_starts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Boolean (rows × width): the positions to predict, round(p × maskable) (at least 1) per row."""
        counts = maskable.sum(axis=1)
        targets = np.where(counts > 0, np.maximum(1, np.round(counts * self.mlm_probability)), 0).astype(np.int64)
        if not self.whole_word_masking:
            keys = np.where(maskable, rng.random(maskable.shape), np.inf)
            ranks = keys.argsort(axis=1).argsort(axis=1)
            return ranks < targets[:, None]
        chosen = np.zeros_like(maskable)
        for row in range(len(maskable)):
            positions = np.flatnonzero(maskable[row])
            if not len(positions):
                continue
            # A word also starts after a special token (e.g. right after [SEP]).
            starts = word_starts[row, positions] | (np.diff(positions, prepend=-2) != 1)
            word_of = np.cumsum(starts) - 1
            sizes = np.bincount(word_of)
            picked, total = [], 0
            for word in rng.permutation(len(sizes)):
                if total + sizes[word] > targets[row]:
                    continue
                picked.append(word)
                total += sizes[word]
                if total == targets[row]:
                    break
            chosen[row, positions[np.isin(word_of, picked)]] = True
        return chosen


class MaskedLanguageModel(nn.Module):
    """A BERT with a prediction head that runs only on masked positions; `export` writes the plain HF model."""

    def __init__(self, model, collator: MLMCollator):
        super().__init__()
        self.model = model
        self.collator = collator
        self.nsp = hasattr(model.cls, "seq_relationship")

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        encoded = self.model.bert(
            input_ids=batch["input_ids"],
            attention_mask=batch.get("attention_mask"),
            token_type_ids=batch.get("token_type_ids"),
        )
        hidden = encoded.last_hidden_state
        picked = hidden.reshape(-1, hidden.size(-1)).index_select(0, batch["mlm_positions"])
        logits = self.model.cls.predictions(picked).float()
        labels = batch["mlm_labels"]
        mlm_loss = F.cross_entropy(logits, labels, ignore_index=IGNORE)
        scored = labels != IGNORE
        metrics = {
            "mlm_loss": mlm_loss.detach(),
            "mlm_accuracy": (logits.detach().argmax(-1) == labels)[scored].float().mean(),
            "weight": scored.sum().float(),
        }
        loss = mlm_loss
        if self.nsp:
            nsp_logits = self.model.cls.seq_relationship(encoded.pooler_output).float()
            nsp_labels = batch["next_sentence_label"]
            nsp_loss = F.cross_entropy(nsp_logits, nsp_labels, ignore_index=IGNORE)
            scored = nsp_labels != IGNORE
            metrics["nsp_loss"] = nsp_loss.detach()
            metrics["nsp_accuracy"] = (nsp_logits.detach().argmax(-1) == nsp_labels)[scored].float().mean()
            loss = loss + nsp_loss
        return {"loss": loss, **metrics}

    def export(self, directory) -> None:
        self.model.save_pretrained(directory)


def build(config, tokenizer) -> MaskedLanguageModel:
    from transformers import BertConfig, BertForMaskedLM, BertForPreTraining

    from ..errors import ConfigError

    specials = SpecialIds.from_tokenizer(tokenizer)
    model_class = BertForPreTraining if config.nsp else BertForMaskedLM
    if config.init_from:
        directory = init_model_dir(config.init_from)
        bert_config = BertConfig.from_pretrained(directory)
        if bert_config.model_type != "bert":
            raise ConfigError(
                f"--init-from {directory}: a {bert_config.model_type!r} model, the mlm objective needs BERT"
            )
        check_vocabulary(directory, bert_config.vocab_size, tokenizer)
        if config.model_size is not None:
            expected = bert_config_kwargs(config.model_size)
            found = {key: getattr(bert_config, key) for key in expected}
            if found != expected:
                raise ConfigError(
                    f"--init-from {directory} is {found}, not the --model-size {config.model_size} architecture "
                    f"{expected}; leave out --model-size to keep the checkpoint's"
                )
        if config.max_seq_length > bert_config.max_position_embeddings:
            raise ConfigError(
                f"--max-seq-length {config.max_seq_length} exceeds the {bert_config.max_position_embeddings} "
                f"positions of --init-from {directory}"
            )
        model = model_class.from_pretrained(directory, attn_implementation="sdpa")
    else:
        bert_config = BertConfig(
            vocab_size=len(tokenizer), pad_token_id=specials.pad, **bert_config_kwargs(config.model_size)
        )
        model = model_class._from_config(bert_config, attn_implementation="sdpa")
    model.train()
    collator = MLMCollator(specials, len(tokenizer), config.mlm_probability, config.whole_word_masking,
                           BatchShape.for_config(config))
    return MaskedLanguageModel(model, collator)

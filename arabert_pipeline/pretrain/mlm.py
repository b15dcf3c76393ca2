"""The "mlm" objective: BERT's masked language modelling (and, optionally, next-sentence prediction).

Masking follows BERT's `create_pretraining_data.py`: in each sequence, round(15% of the maskable tokens) (at least
one) are chosen; of those, 80% become [MASK], 10% a token drawn uniformly from the vocabulary, 10% stay unchanged.
[CLS]/[SEP]/padding are never chosen. Masks are drawn at batch time from the trainer's seeded generator (dynamic
masking, as RoBERTa), not once per corpus. `--masking static` is RoBERTa's baseline instead, its data duplicated
STATIC_MASKS times with a different mask each: a sequence's masks are functions of the seed and the sequence's
tokens, and each time it is read one of its STATIC_MASKS is drawn. Within one pass over the corpus (the budgets here)
each sequence is read once, so static and dynamic masking only differ from the second epoch on.

Whole-word masking chooses whole words, BERT's greedy way (words in random order, skipping a word that would
overshoot the count). A word is the run of tokens between two spaces of the text the tokenizer sees (data.py marks
word starts from the tokenizer's offsets), whatever the tokenizer type. With Farasa-segmented text (arabertv2) the
preprocessing writes `ال+ كتاب +ها`, so `ال+` and `+ها` are words of their own. That is deliberate: the segmented
text is what the model reads, clitics are frequent and predictable units of their own there, and grouping them
back into surface words would need the preprocessing's inverse inside masking. With SentencePiece a word starts at
a token carrying `▁`; with WordPiece, punctuation glued to a word (`كتاب،`) stays part of that word.

`--masking span` is SpanBERT's (Joshi et al. 2020): spans of whole words whose lengths in words follow a geometric
distribution (p = 0.2, clipped at 10), each starting at a random word not yet masked, drawn until the 15% budget of
tokens is reached (a span that would overshoot it is cut to fit), with the 80/10/10 choice made once per span. With
`--span-boundary-objective` (SBO) every masked token is also predicted from the encoder's states at the two tokens
just outside its span plus an embedding of its position in the span, through a two-layer head into the same output
vocabulary projection; the head is for pretraining only, and the export is the plain model.

Speed: the model is a plain `BertForMaskedLM` (or `BertForPreTraining` with NSP; `DebertaV2ForMaskedLM` with
`--architecture deberta-v2`, see deberta.py) so `AutoModelForMaskedLM` loads the output, but the loss gathers the
hidden states of the masked positions before the prediction head, so the transform and the vocabulary projection
(most of the FLOPs of a small BERT) run on 15% of the tokens.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from ..weights.loading import from_pretrained
from .config import bert_config_kwargs
from .data import (
    IGNORE,
    POSITIONS_MULTIPLE,
    BatchShape,
    Example,
    SpecialIds,
    needs_attention_mask,
    padded_shape,
    row_lengths,
)
from .objectives import check_init_from, init_model_dir

STATIC_MASKS = 10  # RoBERTa's duplication factor for static masking
SPAN_P, MAX_SPAN_WORDS = 0.2, 10  # SpanBERT's span lengths: geometric(p) words, clipped
MAX_SPAN_OFFSET = 32  # SBO position embeddings: positions past this inside a (long, many-token) span share the last


class MLMCollator:
    """Examples → padded tensors with BERT masking; `mlm_positions` index the flattened (batch × length) grid."""

    def __init__(self, specials: SpecialIds, vocab_size: int, mlm_probability: float = 0.15,
                 whole_word_masking: bool = False, shape: BatchShape | None = None, masking: str = "dynamic",
                 seed: int = 0):
        self.specials, self.vocab_size, self.shape = specials, vocab_size, shape
        self.mlm_probability, self.whole_word_masking = mlm_probability, whole_word_masking
        self.masking, self.seed = masking, seed

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
        boundaries = None
        if self.masking == "static":
            positions, action, random_ids = self.static_masks(examples, maskable, word_starts, width, rng)
        elif self.masking == "span":
            positions, action, boundaries = self.span_masks(examples, maskable, word_starts, width, rng)
            random_ids = None
        else:
            # Masks are drawn on the unpadded grid so that padding to a fixed batch shape leaves them, and the random
            # stream after them, exactly as they would be without padding.
            real_rows, longest = len(examples), max(len(example.input_ids) for example in examples)
            chosen = np.zeros((rows, width), dtype=bool)
            chosen[:real_rows, :longest] = self.choose(maskable[:real_rows, :longest],
                                                       word_starts[:real_rows, :longest], rng)
            positions = np.flatnonzero(chosen)
            action = rng.random(len(positions))
            random_ids = None
        labels = ids.reshape(-1)[positions]
        masked = ids.reshape(-1).copy()
        masked[positions[action < 0.8]] = self.specials.mask
        randomised = (action >= 0.8) & (action < 0.9)
        masked[positions[randomised]] = random_ids[randomised] if random_ids is not None else \
            rng.integers(0, self.vocab_size, int(randomised.sum()))
        # Few distinct prediction-head shapes too (see BatchShape); the extra rows are ignored.
        if self.shape is not None:
            extra = -len(positions) % POSITIONS_MULTIPLE
            positions = np.append(positions, np.zeros(extra, dtype=np.int64))
            labels = np.append(labels, np.full(extra, IGNORE, dtype=np.int64))
            if boundaries is not None:
                boundaries = np.concatenate([boundaries, np.zeros((extra, 3), dtype=np.int64)])
        batch = {
            "input_ids": torch.from_numpy(masked.reshape(rows, width)),
            "mlm_positions": torch.from_numpy(positions),
            "mlm_labels": torch.from_numpy(labels),
        }
        if boundaries is not None:  # per predicted position: left and right boundary (flat), offset in the span
            batch["span_boundaries"] = torch.from_numpy(boundaries)
        lengths = row_lengths(examples, rows)
        if needs_attention_mask(self.shape, lengths, width):
            batch["attention_mask"] = torch.from_numpy((np.arange(width) < lengths[:, None]).astype(np.int64))
        if examples[0].token_type_ids is not None:
            types = np.zeros((rows, width), dtype=np.int64)
            nsp_labels = np.full(rows, IGNORE, dtype=np.int64)  # padding rows are not scored
            for row, example in enumerate(examples):
                # Sentence pairs (data.py's pair_example): every example of the batch has both.
                assert example.token_type_ids is not None and example.next_sentence_label is not None
                types[row, : len(example.token_type_ids)] = example.token_type_ids
                nsp_labels[row] = example.next_sentence_label
            batch["token_type_ids"] = torch.from_numpy(types)
            batch["next_sentence_label"] = torch.from_numpy(nsp_labels)
        return batch

    def static_masks(self, examples: list[Example], maskable: np.ndarray, word_starts: np.ndarray, width: int,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(flat positions, 80/10/10 draws, random replacement ids) from each sequence's own generator: seeded by
        the run's seed, the sequence's tokens and which of its STATIC_MASKS copies `rng` picks."""
        positions, action, random_ids = [], [], []
        copies = rng.integers(0, STATIC_MASKS, len(examples))
        for row, (example, copy) in enumerate(zip(examples, copies, strict=True)):
            n = len(example.input_ids)
            digest = hashlib.blake2b(example.input_ids.tobytes(), digest_size=8).digest()
            own = np.random.default_rng([self.seed, int(copy), int.from_bytes(digest, "little")])
            chosen = np.flatnonzero(self.choose(maskable[row : row + 1, :n], word_starts[row : row + 1, :n], own)[0])
            positions.append(row * width + chosen)
            action.append(own.random(len(chosen)))
            random_ids.append(own.integers(0, self.vocab_size, len(chosen)))
        return np.concatenate(positions), np.concatenate(action), np.concatenate(random_ids)

    def span_masks(self, examples: list[Example], maskable: np.ndarray, word_starts: np.ndarray, width: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """SpanBERT: (flat positions, one 80/10/10 draw per span repeated over its tokens, per position the flat
        indices of the tokens just left and right of its span and its offset in the span)."""
        positions, action, boundaries = [], [], []
        for row, example in enumerate(examples):
            n = len(example.input_ids)
            for start, end in self.choose_spans(maskable[row, :n], word_starts[row, :n], rng):
                tokens = np.arange(start, end)
                positions.append(row * width + tokens)
                action.append(np.full(len(tokens), rng.random()))
                left, right = max(start - 1, 0), min(end, n - 1)
                boundaries.append(np.stack([np.full(len(tokens), row * width + left),
                                            np.full(len(tokens), row * width + right),
                                            np.minimum(tokens - start, MAX_SPAN_OFFSET - 1)], axis=1))
        if not positions:
            return np.zeros(0, np.int64), np.zeros(0), np.zeros((0, 3), np.int64)
        order = np.argsort(np.concatenate(positions), kind="stable")  # flat order, as the other maskings give
        return (np.concatenate(positions)[order], np.concatenate(action)[order],
                np.concatenate(boundaries)[order].astype(np.int64))

    def choose_spans(self, maskable: np.ndarray, word_starts: np.ndarray,
                     rng: np.random.Generator) -> list[tuple[int, int]]:
        """One sequence's masked spans as token ranges [start, end): whole words, lengths geometric in words."""
        positions = np.flatnonzero(maskable)
        if not len(positions):
            return []
        target = max(1, int(round(len(positions) * self.mlm_probability)))
        starts = word_starts[positions] | (np.diff(positions, prepend=-2) != 1)
        word_of = np.cumsum(starts) - 1
        first_token = positions[np.flatnonzero(starts)]  # each word's first token
        sizes = np.bincount(word_of)
        taken = np.zeros(len(sizes), dtype=bool)
        spans, total = [], 0
        for _ in range(4 * len(sizes)):  # bounded: each try either masks a span or finds its anchor taken
            if total >= target:
                break
            anchor = int(rng.integers(len(sizes)))
            if taken[anchor]:
                continue
            length = min(int(rng.geometric(SPAN_P)), MAX_SPAN_WORDS)
            last = anchor
            # Grow over free words that are contiguous tokens (a special token between two words ends the span).
            while (last + 1 < len(sizes) and last + 1 - anchor < length and not taken[last + 1]
                   and first_token[last + 1] == first_token[last] + sizes[last]):
                last += 1
            while last > anchor and total + sizes[anchor : last + 1].sum() > target:  # cut to the budget
                last -= 1
            if total + sizes[anchor] > target and total > 0:
                continue
            taken[anchor : last + 1] = True
            total += int(sizes[anchor : last + 1].sum())
            spans.append((int(first_token[anchor]), int(first_token[last] + sizes[last])))
        return sorted(spans)

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
            # The greedy walk on plain Python ints: NumPy scalars made it most of a GPU step's batch time.
            picked = np.zeros(len(sizes), dtype=bool)
            target, total, size_of = int(targets[row]), 0, sizes.tolist()
            for word in rng.permutation(len(sizes)).tolist():
                if total + size_of[word] > target:
                    continue
                picked[word] = True
                total += size_of[word]
                if total == target:
                    break
            chosen[row, positions[picked[word_of]]] = True
        return chosen


def mlm_hidden_states(model, batch: dict[str, torch.Tensor], enhanced_mask_decoder: bool = False) -> torch.Tensor:
    """What the MLM head of `model` (a `BertForMaskedLM`, `DebertaV2ForMaskedLM` or `ElectraForMaskedLM`) reads at
    every position: the encoder's last hidden states, or with DeBERTa's enhanced mask decoder its output."""
    inputs = {key: batch.get(key) for key in ("input_ids", "attention_mask", "token_type_ids")}
    if enhanced_mask_decoder:
        from .deberta import enhanced_mask_decoder_states

        return enhanced_mask_decoder_states(model.base_model, **inputs)
    return model.base_model(**inputs).last_hidden_state


def masked_accuracy(logits: torch.Tensor, labels: torch.Tensor, scored: torch.Tensor) -> torch.Tensor:
    """The share of `scored` positions whose argmax is the label (0 where none is scored), as a device tensor:
    counted under the mask rather than selected by it, so that no step waits on the GPU for the count."""
    with torch.no_grad():
        right = (logits.argmax(-1) == labels) & scored
        return right.sum().float() / scored.sum().clamp_min(1).float()


def masked_logits(model, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The MLM head's logits at the flat `positions` only: the hidden states are gathered before the head."""
    picked = hidden.reshape(-1, hidden.size(-1)).index_select(0, positions)
    if model.config.model_type == "electra":
        return model.generator_lm_head(model.generator_predictions(picked))
    return model.cls.predictions(picked)


class SpanBoundaryHead(nn.Module):
    """SpanBERT's SBO: [left boundary state; right boundary state; offset embedding] → two GeLU + LayerNorm layers,
    then the MLM head's own output projection (tied to the token embeddings)."""

    def __init__(self, hidden: int, eps: float = 1e-12):
        super().__init__()
        self.offsets = nn.Embedding(MAX_SPAN_OFFSET, hidden)
        self.layers = nn.Sequential(nn.Linear(3 * hidden, hidden), nn.GELU(), nn.LayerNorm(hidden, eps=eps),
                                    nn.Linear(hidden, hidden), nn.GELU(), nn.LayerNorm(hidden, eps=eps))

    def forward(self, hidden: torch.Tensor, boundaries: torch.Tensor, output: nn.Linear) -> torch.Tensor:
        flat = hidden.reshape(-1, hidden.size(-1))
        states = torch.cat([flat.index_select(0, boundaries[:, 0]), flat.index_select(0, boundaries[:, 1]),
                            self.offsets(boundaries[:, 2])], dim=-1)
        return F.linear(self.layers(states), output.weight, output.bias)


class MaskedLanguageModel(nn.Module):
    """An encoder with a prediction head that runs only on masked positions; `export` writes the plain HF model."""

    def __init__(self, model, collator: MLMCollator, enhanced_mask_decoder: bool = False,
                 span_boundary_objective: bool = False):
        super().__init__()
        self.model = model
        self.collator = collator
        self.enhanced_mask_decoder = enhanced_mask_decoder
        self.nsp = hasattr(model.cls, "seq_relationship")
        self.span_boundary = SpanBoundaryHead(model.config.hidden_size, model.config.layer_norm_eps) \
            if span_boundary_objective else None

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if self.nsp:
            encoded = self.model.bert(
                input_ids=batch["input_ids"],
                attention_mask=batch.get("attention_mask"),
                token_type_ids=batch.get("token_type_ids"),
            )
            hidden = encoded.last_hidden_state
        else:
            hidden = mlm_hidden_states(self.model, batch, self.enhanced_mask_decoder)
        logits = masked_logits(self.model, hidden, batch["mlm_positions"]).float()
        labels = batch["mlm_labels"]
        mlm_loss = F.cross_entropy(logits, labels, ignore_index=IGNORE)
        scored = labels != IGNORE
        metrics = {
            "mlm_loss": mlm_loss.detach(),
            "mlm_accuracy": masked_accuracy(logits, labels, scored),
            "weight": scored.sum().float(),
        }
        loss = mlm_loss
        if self.span_boundary is not None:
            sbo_logits = self.span_boundary(hidden, batch["span_boundaries"], self.model.get_output_embeddings())
            sbo_loss = F.cross_entropy(sbo_logits.float(), labels, ignore_index=IGNORE)
            metrics["sbo_loss"] = sbo_loss.detach()
            metrics["sbo_accuracy"] = masked_accuracy(sbo_logits, labels, scored)
            loss = loss + sbo_loss
        if self.nsp:
            nsp_logits = self.model.cls.seq_relationship(encoded.pooler_output).float()
            nsp_labels = batch["next_sentence_label"]
            nsp_loss = F.cross_entropy(nsp_logits, nsp_labels, ignore_index=IGNORE)
            scored = nsp_labels != IGNORE
            metrics["nsp_loss"] = nsp_loss.detach()
            metrics["nsp_accuracy"] = masked_accuracy(nsp_logits, nsp_labels, scored)
            loss = loss + nsp_loss
        return {"loss": loss, **metrics}

    def export(self, directory) -> None:
        self.model.save_pretrained(directory)


def make_collator(config, tokenizer) -> MLMCollator:
    return MLMCollator(SpecialIds.from_tokenizer(tokenizer), len(tokenizer), config.mlm_probability,
                       config.whole_word_masking, BatchShape.for_config(config), config.masking, config.seed)


def build(config, tokenizer) -> MaskedLanguageModel:
    from transformers import AutoConfig, BertConfig, BertForMaskedLM, BertForPreTraining, DebertaV2ForMaskedLM

    specials = SpecialIds.from_tokenizer(tokenizer)
    deberta = config.architecture == "deberta-v2"
    model_class = DebertaV2ForMaskedLM if deberta else BertForPreTraining if config.nsp else BertForMaskedLM
    attention = {} if deberta else {"attn_implementation": "sdpa"}  # no SDPA kernel for disentangled attention
    directory = None
    if config.init_from:
        directory = init_model_dir(config.init_from)
        stored = AutoConfig.from_pretrained(directory)
        if stored.model_type == "electra":
            raise ConfigError(f"--init-from {directory}: an ELECTRA discriminator has no MLM head; the mlm objective "
                              "continues models written by --objective mlm")
        check_init_from(config, stored, directory, tokenizer)
        model = from_pretrained(model_class, directory, **attention)
    elif deberta:
        from .deberta import deberta_config

        model = model_class._from_config(deberta_config(len(tokenizer), specials.pad, config.model_size))
    else:
        bert_config = BertConfig(
            vocab_size=len(tokenizer), pad_token_id=specials.pad, **bert_config_kwargs(config.model_size)
        )
        model = model_class._from_config(bert_config, **attention)
    if config.enhanced_mask_decoder:
        from .deberta import add_enhanced_mask_decoder

        add_enhanced_mask_decoder(model, directory)
    model.train()
    return MaskedLanguageModel(model, make_collator(config, tokenizer), config.enhanced_mask_decoder,
                               config.span_boundary_objective)

"""`--architecture xlnet --objective plm`: XLNet's permutation language modelling (Yang et al. 2019) on transformers'
`XLNetLMHeadModel`.

Each sequence gets its own factorisation order, and the tokens at the end of that order are predicted from the ones
before them, which makes the model read context on both sides of a target without ever seeing a [MASK] in its input.
What is implemented, and where it comes from:

- Partial prediction (§2.3): only the last 1/K of each order is predicted, K = PARTIAL_PREDICTION_K = 6 as in the
  paper: round(n / K) targets (at least one) among the n tokens of a sequence that are not [CLS]/[SEP].
- Span-aware targets, XLNet's data pipeline (`_sample_mask` in its data_utils.py): n-grams of n = 1..MAX_GRAM whole
  words, P(n) ∝ 1/n, each placed at a random offset inside a window of K·n tokens that slides along the sequence, so
  that about 1/K of the tokens fall in spans; an n-gram that would run into the end of the sequence is not taken (the
  sequence may cut its last word), and single tokens drawn at random top the count up when one pass falls short.
  One change: n counts words while the target count is in tokens, so a span's last words are dropped where they
  would overshoot it (XLNet keeps them and predicts more than 1/K of a text of multi-token words). A word is what
  whole-word masking calls one (mlm.py): the tokens between two spaces of the text the tokenizer sees.
- Factorisation order (`_local_perm`): the non-targets come first, then the targets in a random order. As in XLNet's
  code, all non-targets share the first place: they see each other (both ways) and no target; a target sees every
  non-target and the targets before it in the order, never itself. [CLS] and [SEP] are non-targets.
- Two-stream attention, through the model's own inputs: `perm_mask[b, i, j] = 1` where i must not see j (the query
  stream reads it as is; transformers' content stream adds each token's own position back), `target_mapping` (one-hot
  rows picking the targets: the query stream, the head and the softmax run on them only) and `plm_labels`. Rows pad
  their targets to one count per batch (IGNORE labels, zero mapping rows).
- Bidirectional data (XLNet's `bi_data` pretraining option): the first half of each batch reads relative positions
  forwards, the second half backwards (transformers' XLNetModel computes both; it needs an even number of rows, so
  the collator adds an empty row when needed). Only pretraining does this: the exported config has bi_data false, as
  XLNet fine-tunes.
- Relative positions as the model has them (sinusoidal relative encoding, no clamping), no absolute position
  table. The presets are BERT's (config.MODEL_SIZES as d_model, n_layer, n_head, d_inner = 4 · d_model) and so is
  the parameter count but for what each has of its own: BERT's 512 positions, token types, embedding LayerNorm, MLM
  transform and attention biases; XLNet's per-layer relative-position projection (d_model²), relative biases and
  segment pair (tiny: -14%, mini: +2%, base: +7%).

Left out, and why:
- Segment recurrence (Transformer-XL memory, `mem_len` / `reuse_len`): it carries hidden states from one segment to
  the next of the same text stream, but our packed sequences are independent (each starts its own [CLS] ... [SEP]
  from a document offset) and the engine's batches are length-sorted, shuffled rows, not contiguous streams, so there
  is no previous segment to remember. The config sets mem_len None and use_mems false (no memory kept at inference
  either).
- Two-segment inputs: our packed sequences are one segment (NSP pairs are BERT's), so pretraining passes no
  token_type_ids. XLNet's segment term only asks "same segment or not", which is constant over one segment (the
  softmax cancels it), so its weights (seg_embed, r_s_bias) are frozen here and first trained when fine-tuning on
  question/context pairs.

Why by hand rather than transformers' `DataCollatorForPermutationLanguageModeling`: that collator draws from torch's
global generator, while every objective here draws from the numpy Generator the engine passes (seeded by seed,
epoch and batch index), which is what makes a resumed run repeat the uninterrupted one bit for bit. It also picks
contiguous token spans blind to word boundaries and special tokens, and needs even sequence lengths.

Export: the plain `XLNetLMHeadModel` (`AutoModelForCausalLM` loads it, `AutoModelForQuestionAnswering` gives the
`XLNetForQuestionAnsweringSimple` that `arabert-pipeline finetune` trains; qa/transformer/architectures.py has the QA
side).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..weights.loading import from_pretrained
from .config import xlnet_config_kwargs
from .data import IGNORE, BatchShape, Example, SpecialIds, needs_attention_mask, padded_shape, row_lengths
from .mlm import masked_accuracy
from .objectives import check_init_from, init_model_dir

PARTIAL_PREDICTION_K = 6  # the paper's K: 1/K of each factorisation order is predicted
MAX_GRAM = 5  # XLNet's max_gram: target spans of 1..5 words
GRAM_P = (1 / np.arange(1, MAX_GRAM + 1)) / (1 / np.arange(1, MAX_GRAM + 1)).sum()
PREDICTIONS_MULTIPLE = 8  # the per-row target count is padded to a multiple of this: few head shapes (BatchShape)


class PLMCollator:
    """Examples → input_ids, perm_mask, target_mapping, plm_labels (and attention_mask when padded)."""

    def __init__(self, specials: SpecialIds, shape: BatchShape | None = None, bi_data: bool = True):
        self.specials, self.shape, self.bi_data = specials, shape, bi_data

    def __call__(self, examples: list[Example], rng: np.random.Generator) -> dict[str, torch.Tensor]:
        rows, width = padded_shape(examples, self.shape)
        if self.bi_data and rows % 2:  # bi_data splits the rows into a forward and a backward half
            rows += 1
        ids = np.full((rows, width), self.specials.pad, dtype=np.int64)
        targets = np.zeros((rows, width), dtype=bool)
        # Place in the factorisation order: -1 for every non-target (all of them first), 0.. for the targets.
        rank = np.full((rows, width), -1, dtype=np.int64)
        for row, example in enumerate(examples):
            ids[row, : len(example.input_ids)] = example.input_ids
            chosen = choose_targets(~example.special, example.word_starts, rng)
            targets[row, chosen] = True
            rank[row, chosen] = rng.permutation(len(chosen))
        # i does not see j when j is a target that does not come before i: a target misses itself and the targets
        # after it, a non-target (rank -1) misses every target.
        perm_mask = targets[:, None, :] & (rank[:, None, :] >= rank[:, :, None])
        counts = targets.sum(axis=1)
        slots = max(int(counts.max()), 1)
        if self.shape is not None:
            slots = -(-slots // PREDICTIONS_MULTIPLE) * PREDICTIONS_MULTIPLE
        row_of, position = np.nonzero(targets)
        slot = np.arange(len(position)) - np.repeat(np.cumsum(counts) - counts, counts)
        target_mapping = np.zeros((rows, slots, width), dtype=np.float32)
        target_mapping[row_of, slot, position] = 1
        labels = np.full((rows, slots), IGNORE, dtype=np.int64)
        labels[row_of, slot] = ids[row_of, position]
        batch = {
            "input_ids": torch.from_numpy(ids),
            "perm_mask": torch.from_numpy(perm_mask.astype(np.float32)),
            "target_mapping": torch.from_numpy(target_mapping),
            "plm_labels": torch.from_numpy(labels),
        }
        lengths = row_lengths(examples, rows)
        if needs_attention_mask(self.shape, lengths, width):
            batch["attention_mask"] = torch.from_numpy((np.arange(width) < lengths[:, None]).astype(np.int64))
        return batch


def choose_targets(maskable: np.ndarray, word_starts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One sequence's prediction targets (sorted token positions): XLNet's span sampling, see the module docstring."""
    positions = np.flatnonzero(maskable)
    count = len(positions)
    if not count:
        return positions
    goal = max(1, round(count / PARTIAL_PREDICTION_K))
    # A word also starts after a token that cannot be a target (a span never crosses [SEP]).
    starts = word_starts[positions] | (np.diff(positions, prepend=-2) != 1)
    chosen = np.zeros(count, dtype=bool)
    taken = cursor = 0
    while cursor < count and taken < goal:
        words = min(int(rng.choice(MAX_GRAM, p=GRAM_P)) + 1, goal - taken)
        window = PARTIAL_PREDICTION_K * words
        left = int(rng.integers(window))
        begin = cursor + left
        while begin < count and not starts[begin]:
            begin += 1
        if begin >= count:
            break
        end, seen = begin + 1, 1
        while end < count:
            if starts[end]:
                seen += 1
                if seen > words:
                    break
            end += 1
        if end >= count:
            break
        # n counts words but the goal counts tokens: drop last words that would overshoot it (XLNet keeps them).
        word_begins = begin + np.flatnonzero(starts[begin:end])
        while len(word_begins) > 1 and taken + end - begin > goal:
            end, word_begins = int(word_begins[-1]), word_begins[:-1]
        chosen[begin:end] = True
        taken += end - begin
        cursor = end + window - left
    if taken < goal:
        chosen[rng.choice(np.flatnonzero(~chosen), goal - taken, replace=False)] = True
    return positions[chosen]


class PermutationLanguageModel(nn.Module):
    """An `XLNetLMHeadModel` trained with PLM; `export` writes it as it is (bi_data off in its config)."""

    def __init__(self, model, collator: PLMCollator):
        super().__init__()
        self.model = model
        self.collator = collator
        # On the module only: the config (what the export writes) keeps bi_data false for fine-tuning.
        model.transformer.bi_data = collator.bi_data
        # The segment term's weights get no gradient from one-segment inputs (module docstring); DDP refuses
        # parameters that get none, so they stay out of training here and are exported as initialised.
        for layer in model.transformer.layer:
            layer.rel_attn.seg_embed.requires_grad_(False)
            layer.rel_attn.r_s_bias.requires_grad_(False)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        logits = self.model(
            input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask"), perm_mask=batch["perm_mask"],
            target_mapping=batch["target_mapping"], use_mems=False,
        ).logits.float()
        labels = batch["plm_labels"].reshape(-1)
        logits = logits.reshape(-1, logits.size(-1))
        loss = F.cross_entropy(logits, labels, ignore_index=IGNORE)
        scored = labels != IGNORE
        return {
            "loss": loss,
            "plm_loss": loss.detach(),
            "plm_accuracy": masked_accuracy(logits, labels, scored),
            "weight": scored.sum().float(),
        }

    def export(self, directory) -> None:
        self.model.save_pretrained(directory)


def xlnet_config(vocab_size: int, specials: SpecialIds, model_size: str):
    from transformers import XLNetConfig

    return XLNetConfig(  # type: ignore[call-arg]  # untie_r: transformers 5 takes it undeclared (kept in config.json)
        vocab_size=vocab_size, **xlnet_config_kwargs(model_size), ff_activation="gelu", untie_r=True,
        attn_type="bi", bi_data=False, clamp_len=-1, mem_len=None, reuse_len=None, use_mems_eval=False,
        use_mems_train=False, pad_token_id=specials.pad, bos_token_id=specials.cls, eos_token_id=specials.sep,
    )


def build(config, tokenizer) -> PermutationLanguageModel:
    from transformers import AutoConfig, XLNetLMHeadModel

    specials = SpecialIds.from_tokenizer(tokenizer)
    if config.init_from:
        directory = init_model_dir(config.init_from)
        stored = AutoConfig.from_pretrained(directory)
        check_init_from(config, stored, directory, tokenizer)
        model = from_pretrained(XLNetLMHeadModel, directory)
    else:
        model = XLNetLMHeadModel._from_config(xlnet_config(len(tokenizer), specials, config.model_size))
    model.train()
    return PermutationLanguageModel(model, PLMCollator(specials, BatchShape.for_config(config)))

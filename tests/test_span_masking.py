"""SpanBERT's span masking (`--masking span`) and span boundary objective (`--span-boundary-objective`): the
statistics of the masks on a fixed seed, and the objective end to end at tiny size."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from arabert_pipeline.errors import ConfigError
from test_pretrain import corpus, random_examples, tiny_config, tokenizer_dir, workdir  # noqa: F401  (fixtures)


def span_collator(vocab_size=1000):
    from arabert_pipeline.pretrain.data import SpecialIds
    from arabert_pipeline.pretrain.mlm import MLMCollator

    return MLMCollator(SpecialIds(cls=2, sep=3, pad=0, mask=4), vocab_size, 0.15, masking="span")


def word_ranges(example):
    """[start, end) token ranges of the words of one example (a special token is a word boundary)."""
    starts = [i for i in range(len(example.input_ids))
              if example.word_starts[i] or example.special[i] or (i > 0 and example.special[i - 1])]
    ends = starts[1:] + [len(example.input_ids)]
    return [(s, e) for s, e in zip(starts, ends, strict=True) if not example.special[s]]


def test_span_masks_are_whole_word_spans_of_geometric_length_within_the_budget():
    collator = span_collator()
    rng = np.random.default_rng(0)
    examples = random_examples(rng, 300, max_length=254, word_length=2)
    lengths, shares = [], []
    for example in examples:
        spans = collator.choose_spans(~example.special, example.word_starts, rng)
        maskable = int((~example.special).sum())
        masked = sum(end - start for start, end in spans)
        target = max(1, round(0.15 * maskable))
        words = word_ranges(example)
        bounds = {s for s, _ in words} | {e for _, e in words}
        for start, end in spans:
            assert start in bounds and end in bounds, "a span cuts a word"
            assert not example.special[start:end].any()
            lengths.append(sum(1 for s, e in words if start <= s and e <= end))
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), "spans overlap"
        # The budget is met (a word bigger than what is left may stop it a little short) and never exceeded,
        # except by the first word of a sequence whose budget is smaller than that word.
        assert masked <= target or len(spans) == 1
        shares.append(masked / maskable)
    lengths = np.asarray(lengths)
    assert lengths.max() <= 10 and lengths.min() >= 1
    # Geometric(0.2) clipped at 10 has mean 3.8 words; spans cut to fit the budget pull the mean down a little.
    assert 2.6 < lengths.mean() < 3.9
    assert np.mean(lengths == 1) > np.mean(lengths == 2) > np.mean(lengths == 4) > np.mean(lengths == 8)
    assert abs(np.mean(shares) - 0.15) < 0.02


def test_span_masking_draws_80_10_10_once_per_span_and_gives_sbo_its_boundaries():
    collator = span_collator()
    rng = np.random.default_rng(1)
    examples = random_examples(rng, 200, max_length=200, word_length=2)
    batch = collator(examples, rng)
    width = batch["input_ids"].shape[1]
    positions = batch["mlm_positions"].numpy()
    left, right, offset = batch["span_boundaries"].numpy().T
    assert (left < positions).all() and (right > positions).all() and (offset == positions - left - 1).all()
    now = batch["input_ids"].numpy().reshape(-1)[positions]
    labels = batch["mlm_labels"].numpy()
    kind = np.where(now == 4, 0, np.where(now == labels, 1, 2))  # masked, kept, replaced
    spans = {}
    for k, start in zip(kind, left, strict=True):
        spans.setdefault(int(start), set()).add(int(k))
    # Each span had one draw (a random replacement that equals the original counts as kept).
    assert np.mean([len(kinds) == 1 for kinds in spans.values()]) > 0.97
    firsts = np.asarray([min(kinds) for kinds in spans.values()])
    assert abs(np.mean(firsts == 0) - 0.8) < 0.05
    # The boundaries are the tokens just outside the span, in its row (a neighbouring span's token, where two touch).
    assert (left // width == positions // width).all() and (right // width == positions // width).all()


def test_sbo_needs_span_masking():
    with pytest.raises(ConfigError, match="--span-boundary-objective .* needs --objective mlm --masking span"):
        tiny_config("t", "c", "o", span_boundary_objective=True).validate()


@pytest.mark.slow
def test_span_masking_with_sbo_pretrains_resumes_and_exports_a_plain_model(tokenizer_dir, corpus, workdir):  # noqa: F811  an imported fixture
    from transformers import AutoModelForMaskedLM

    from arabert_pipeline.pretrain.trainer import pretrain

    output = workdir / "spanbert"
    config = tiny_config(tokenizer_dir, corpus, output, masking="span", span_boundary_objective=True,
                         whole_word_masking=True)

    def stop_at_five(trainer):
        if trainer.state.step == 5:
            trainer.request_stop()

    assert not pretrain(config, on_step=stop_at_five)
    config.resume = "latest"
    assert pretrain(config)
    rows = [json.loads(line) for line in (output / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    losses = [row["sbo_loss"] for row in rows if "sbo_loss" in row]
    assert losses and all(np.isfinite(losses)) and "eval_sbo_loss" in rows[-1]
    model = AutoModelForMaskedLM.from_pretrained(output)  # the SBO head stays behind
    assert not any("offsets" in name or "span_boundary" in name for name, _ in model.named_parameters())

"""The span-selection objective at tiny size: examples point at a true occurrence, training, export, trainer."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from objective_corpus import DOCUMENTS as ALL_DOCUMENTS  # noqa: E402  after the importorskip above
from objective_corpus import train_losses, write_corpus_and_tokenizer  # noqa: E402  after the importorskip above

DOCUMENTS = ALL_DOCUMENTS[:5]

@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> tuple[str, str]:
    torch.set_num_threads(1)
    return write_corpus_and_tokenizer(tmp_path_factory.mktemp("span"), DOCUMENTS, extra_words=("البيت", "المدرسة"))


def config(setup, output="unused", **overrides):
    from arabert_pipeline.pretrain.config import PretrainConfig

    corpus, tokenizer = setup
    options = dict(model_size="tiny", objective="span-selection", max_seq_length=64, steps=6, batch_size=4, lr=2e-3,
                   log_every=1, eval_every=3, save_every=100, eval_sequences=4, progress=False,
                   cache_dir=str(Path(corpus).parent / "cache"))
    options.update(overrides)
    return PretrainConfig(tokenizer=tokenizer, corpus=[corpus], output=str(output), **options)


def tokenizer_of(setup):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(setup[1])


def collator(setup, max_seq_length=64):
    from arabert_pipeline.pretrain.data import SpecialIds
    from arabert_pipeline.pretrain.span_selection import SpanSelectionCollator

    tokenizer = tokenizer_of(setup)
    return SpanSelectionCollator(tokenizer, SpecialIds.from_tokenizer(tokenizer), max_seq_length)


def example_of(tokenizer, text: str):
    """A packed sequence `[CLS] text [SEP]` with its word starts, as data.py makes them."""
    from arabert_pipeline.pretrain.data import Example, word_start_flags

    encodings = tokenizer.backend_tokenizer.encode_batch([text], add_special_tokens=False)
    n = len(encodings[0].ids)
    ids = np.array([tokenizer.cls_token_id, *encodings[0].ids, tokenizer.sep_token_id], dtype=np.int64)
    starts = np.ones(n + 2, dtype=bool)
    starts[1:-1] = word_start_flags([text], encodings, np.array([n])).astype(bool)
    special = np.zeros(n + 2, dtype=bool)
    special[[0, -1]] = True
    return Example(ids, starts, special)


def corpus_examples(setup, max_seq_length):
    from arabert_pipeline.pretrain.data import PretrainingData, SpecialIds, TokenStore, tokenize_corpus

    tokenizer = tokenizer_of(setup)
    store = TokenStore.open(tokenize_corpus([setup[0]], tokenizer, Path(setup[0]).parent / "cache", progress=False))
    data = PretrainingData(store, SpecialIds.from_tokenizer(tokenizer), max_seq_length, 10_000, 4, 0)
    return data.examples(data.train, np.arange(len(data.train)), np.random.default_rng(0))


def offsets(sequence: list[int], piece: list[int]) -> list[int]:
    return [i for i in range(len(sequence) - len(piece) + 1) if sequence[i : i + len(piece)] == piece]


def check_example(example, built, mask: int, sep: int) -> list[int] | None:
    """Assert that `built` is a faithful span-selection example of `example`; its answer tokens (None: unanswerable).

    With the span put back into the question and into the passage's question tokens, the question must be a piece
    of the original text, and so must the passage with the question re-inserted at some point (or, when the passage
    was trimmed by a token or two next to the question, the passage alone right beside the question). The answer must
    be the only place left where the span occurs.
    """
    ids, types = list(built.input_ids), list(built.token_type_ids)
    first_sep = ids.index(sep)
    question, passage = ids[1:first_sep], ids[first_sep + 1 : -1]
    assert ids[-1] == sep and types == [0] * (first_sep + 1) + [1] * (len(passage) + 1)
    assert question.count(mask) == 1, "one question token in the question"
    start, end = built.answer
    if start == 0:
        assert end == 0
        return None
    assert first_sep < start <= end < len(ids) - 1, "the answer lies in the passage"
    span = ids[start : end + 1]
    assert mask not in span
    assert len(offsets(passage, span)) == 1, "the other occurrences were replaced"
    filled_question = [t for q in question for t in (span if q == mask else [q])]
    filled_passage = [t for p in passage for t in (span if p == mask else [p])]
    original = [int(t) for t, s in zip(example.input_ids, example.special, strict=True) if not s]
    if any(offsets(original, filled_passage[:cut] + filled_question + filled_passage[cut:])
           for cut in range(len(filled_passage) + 1)):
        return span
    lq, lp = len(filled_question), len(filled_passage)
    assert any(p + lp <= q <= p + lp + 2 or q + lq <= p <= q + lq + 2
               for q in offsets(original, filled_question) for p in offsets(original, filled_passage)), \
        f"not a rearrangement of the text: question {question}, passage {passage}"
    return span


# ------------------------------------------------------------------------------------------------ examples


def test_the_answer_is_the_kept_occurrence_and_the_others_are_replaced(setup):
    tokenizer = tokenizer_of(setup)
    c = collator(setup)
    text = "قال محمد العلي إن معرض الكتاب مهم . وأكد محمد العلي أن المعرض كبير ."
    expected = tokenizer("محمد العلي", add_special_tokens=False)["input_ids"]
    example = example_of(tokenizer, text)
    answers = set()
    for seed in range(12):
        built = c.example(example, np.random.default_rng(seed))
        assert check_example(example, built, tokenizer.mask_token_id, tokenizer.sep_token_id) == expected, \
            "the maximal recurring span, not one of its words"
        answers.add(built.answer)
        question = built.input_ids[: built.input_ids.index(tokenizer.sep_token_id)]
        assert not offsets(question, expected)
    assert len(answers) == 2, "either occurrence may be the kept one"


def test_a_span_seen_three_times_leaves_one_question_token_in_the_passage(setup):
    tokenizer = tokenizer_of(setup)
    text = ("أعلنت الشركة الوطنية عن انقطاع التيار . وأوضحت الشركة الوطنية أن الانقطاع قصير . "
            "ودعت الشركة الوطنية السكان إلى الاستعداد .")
    example = example_of(tokenizer, text)
    mask, sep = tokenizer.mask_token_id, tokenizer.sep_token_id
    for seed in range(8):
        built = collator(setup).example(example, np.random.default_rng(seed))
        span = tokenizer("الشركة الوطنية", add_special_tokens=False)["input_ids"]
        assert check_example(example, built, mask, sep) == span
        passage = built.input_ids[built.input_ids.index(sep) + 1 :]
        assert passage.count(mask) == 1


def test_stopwords_and_punctuation_are_no_answers(setup):
    tokenizer = tokenizer_of(setup)
    example = example_of(tokenizer, "في البيت ، في المدرسة ، و من . من")
    for seed in range(5):
        built = collator(setup).example(example, np.random.default_rng(seed))
        assert built.answer == (0, 0)
        check_example(example, built, tokenizer.mask_token_id, tokenizer.sep_token_id)


@pytest.mark.parametrize("max_seq_length", [32, 64, 128])
def test_corpus_examples_are_faithful_and_fit(setup, max_seq_length):
    tokenizer = tokenizer_of(setup)
    c = collator(setup, max_seq_length)
    answered = 0
    examples = corpus_examples(setup, max_seq_length)
    for seed, example in enumerate(examples):
        built = c.example(example, np.random.default_rng(seed))
        assert len(built.input_ids) <= max_seq_length
        answered += check_example(example, built, tokenizer.mask_token_id, tokenizer.sep_token_id) is not None
    assert answered >= {32: 0.25, 64: 0.5, 128: 0.75}[max_seq_length] * len(examples), answered
    batch = c(examples[:4], np.random.default_rng(0))
    assert batch["input_ids"].shape[1] <= max_seq_length
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "start_positions", "end_positions"}


def test_examples_are_reproducible_and_change_with_the_seed(setup):
    c = collator(setup, 128)
    examples = corpus_examples(setup, 128)
    a = c(examples, np.random.default_rng([1, 0, 2, 1]))
    b = c(examples, np.random.default_rng([1, 0, 2, 1]))
    other = c(examples, np.random.default_rng([1, 1, 2, 1]))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["start_positions"], other["start_positions"])


# ------------------------------------------------------------------------------------------------ model


def build(setup, **overrides):
    from arabert_pipeline.pretrain.objectives import build_objective

    torch.manual_seed(0)
    return build_objective(config(setup, **overrides), tokenizer_of(setup))


@pytest.mark.slow
def test_a_few_steps_reduce_the_loss(setup):
    objective = build(setup)
    c = objective.collator
    examples = corpus_examples(setup, 64)
    batches = [c(examples[i : i + 8], np.random.default_rng(i)) for i in range(0, 16, 8)]
    losses, out = train_losses(objective, batches[:2])
    assert np.mean(losses[-4:]) < 0.6 * np.mean(losses[:2]), losses
    assert {"span_loss", "span_exact", "start_accuracy", "end_accuracy", "answerable"} <= out.keys()


@pytest.mark.parametrize("base", ["mlm", "electra"])
def test_continues_from_mlm_or_electra_and_exports_for_question_answering(setup, tmp_path, base):
    from transformers import AutoModelForQuestionAnswering

    pretrained = build(setup, objective=base, max_seq_length=32)
    pretrained.export(tmp_path / base)
    objective = build(setup, model_size=None, init_from=str(tmp_path / base))
    expected = {"mlm": "BertForQuestionAnswering", "electra": "ElectraForQuestionAnswering"}[base]
    assert type(objective.model).__name__ == expected
    encoder = objective.model.base_model.embeddings.word_embeddings.weight
    saved = AutoModelForQuestionAnswering.from_pretrained(tmp_path / base).base_model.embeddings.word_embeddings
    assert torch.equal(encoder, saved.weight), "continues from the given weights"
    objective(objective.collator(corpus_examples(setup, 64)[:4], np.random.default_rng(0)))["loss"].backward()
    objective.export(tmp_path / "qa")
    loaded = AutoModelForQuestionAnswering.from_pretrained(tmp_path / "qa")
    assert type(loaded).__name__ == expected
    assert torch.equal(loaded.qa_outputs.weight, objective.model.qa_outputs.weight), "the trained head is exported"


def test_trainer_runs_span_selection_after_mlm_at_a_longer_length(setup, tmp_path):
    """The documented two-phase recipe: MLM at 32 tokens, then span selection from it at 64 (positions 32–63 train)."""
    from transformers import AutoModelForQuestionAnswering

    from arabert_pipeline.artifacts.metadata import read_metadata
    from arabert_pipeline.cli import main

    corpus, tokenizer = setup
    common = ["--tokenizer", tokenizer, "--corpus", corpus, "--steps", "4", "--batch-size", "4", "--eval-every", "2",
              "--eval-sequences", "4", "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    assert main(["pretrain", *common, "--model-size", "tiny", "--max-seq-length", "32",
                 "-o", str(tmp_path / "mlm")]) == 0
    assert main(["pretrain", *common, "--objective", "span-selection", "--init-from", str(tmp_path / "mlm"),
                 "--max-seq-length", "64", "-o", str(tmp_path / "ss")]) == 0
    assert read_metadata(tmp_path / "ss")["objective"] == "span-selection"
    mlm = AutoModelForQuestionAnswering.from_pretrained(tmp_path / "mlm").bert.embeddings.position_embeddings.weight
    ss = AutoModelForQuestionAnswering.from_pretrained(tmp_path / "ss").bert.embeddings.position_embeddings.weight
    moved = (mlm - ss).abs().mean(-1)
    # Positions past 64 get no gradient (weight decay only shrinks them a little); 32–63 are trained now.
    assert moved[32:64].min() > 100 * moved[64:].max()
    log = [json.loads(line) for line in (tmp_path / "ss" / "log.jsonl").read_text().splitlines()]
    assert "eval_span_exact" in log[-1]

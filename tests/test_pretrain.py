"""Pretraining stage at tiny size (L2/H64, 32-token sequences, a few dozen steps) on a slice of the shared corpus."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from arabert_pipeline.errors import ConfigError, InputError
from conftest import REPO, SHARED_DATA
from data_slices import write_first_documents

SHARD = SHARED_DATA / "corpus" / "ant-jawharafm-000.txt.xz"
DOCUMENTS = 150


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    if not SHARD.exists():
        pytest.skip(f"needs the shared corpus at {SHARD} (set ARABERT_PIPELINE_TEST_DATA to use another folder)")
    directory = tmp_path_factory.mktemp("pretrain")
    write_first_documents(SHARD, directory / "corpus.txt", DOCUMENTS)
    return directory


@pytest.fixture(scope="module")
def corpus(workdir) -> str:
    return str(workdir / "corpus.txt")


def train_tiny_tokenizer(workdir: Path, corpus: str, model_type: str) -> str:
    from arabert_pipeline.tokenizer import train_tokenizer

    out = workdir / f"tok-{model_type}"
    if not out.exists():
        train_tokenizer([corpus], out, model_type=model_type, vocab_size=1000, preprocess="none", threads=1,
                        progress=False)
    return str(out)


@pytest.fixture(scope="module")
def tokenizer_dir(workdir, corpus) -> str:
    return train_tiny_tokenizer(workdir, corpus, "wordpiece")


@pytest.fixture(scope="module")
def unigram_dir(workdir, corpus) -> str:
    return train_tiny_tokenizer(workdir, corpus, "unigram")


def tiny_config(tokenizer_dir, corpus, output, **overrides):
    from arabert_pipeline.pretrain.config import PretrainConfig

    options = dict(model_size="tiny", max_seq_length=32, steps=16, batch_size=8, lr=1e-3, log_every=1, eval_every=8,
                   save_every=100, eval_sequences=16, cache_dir=str(Path(output).parent / "cache"), progress=False)
    options.update(overrides)
    return PretrainConfig(tokenizer=str(tokenizer_dir), corpus=[str(corpus)], output=str(output), **options)


@pytest.fixture(scope="module")
def finished_run(workdir, tokenizer_dir, corpus) -> Path:
    """A complete tiny run through the command line."""
    import torch

    from arabert_pipeline.cli import main

    torch.set_num_threads(1)
    out = workdir / "run"
    code = main(["pretrain", "--tokenizer", tokenizer_dir, "--corpus", corpus, "--model-size", "tiny", "-o", str(out),
                 "--max-seq-length", "32", "--steps", "30", "--batch-size", "8", "--lr", "2e-3", "--log-every", "5",
                 "--eval-every", "10", "--save-every", "10", "--keep-checkpoints", "2", "--eval-sequences", "16",
                 "--cache-dir", str(workdir / "cache"), "--no-progress"])
    assert code == 0
    return out


def store_and_tokenizer(tokenizer_dir, corpus, cache):
    from transformers import AutoTokenizer

    from arabert_pipeline.pretrain.data import TokenStore, tokenize_corpus

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    return TokenStore.open(tokenize_corpus([corpus], tokenizer, Path(cache), progress=False)), tokenizer


def read_log(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "log.jsonl").read_text(encoding="utf-8").splitlines()]


# ------------------------------------------------------------------------------------------------- masking


def make_collator(whole_word_masking=False, vocab_size=1000):
    from arabert_pipeline.pretrain.data import SpecialIds
    from arabert_pipeline.pretrain.mlm import MLMCollator

    return MLMCollator(SpecialIds(cls=2, sep=3, pad=0, mask=4), vocab_size, 0.15, whole_word_masking)


def random_examples(rng, rows, max_length=126, word_length=3, min_length=8):
    """[CLS] tokens [SEP] sequences of min_length..max_length tokens, a word starting every word_length tokens on
    average."""
    from arabert_pipeline.pretrain.data import Example

    examples = []
    for _ in range(rows):
        n = int(rng.integers(min_length, max_length + 1))
        ids = rng.integers(5, 1000, n + 2)
        ids[0], ids[-1] = 2, 3
        special = np.zeros(n + 2, dtype=bool)
        special[[0, -1]] = True
        words = rng.random(n + 2) < 1 / word_length
        words[special] = True
        examples.append(Example(ids, words, special))
    return examples


def test_masking_follows_bert_statistics():
    collator = make_collator()
    rng = np.random.default_rng(0)
    examples = random_examples(rng, 400)
    batch = collator(examples, rng)
    width = batch["input_ids"].shape[1]
    positions = batch["mlm_positions"].numpy()
    rows, columns = positions // width, positions % width
    original = np.zeros((len(examples), width), dtype=np.int64)
    for row, example in enumerate(examples):
        original[row, : len(example.input_ids)] = example.input_ids
        assert not example.special[columns[rows == row]].any(), "a special token was chosen"
        assert (columns[rows == row] < len(example.input_ids)).all(), "padding was chosen"
        maskable = int((~example.special).sum())
        assert (rows == row).sum() == max(1, round(0.15 * maskable))
    assert (batch["mlm_labels"].numpy() == original[rows, columns]).all()
    now = batch["input_ids"].numpy()[rows, columns]
    masked = np.mean(now == 4)
    unchanged = np.mean(now == original[rows, columns])
    replaced = 1 - masked - unchanged
    assert abs(masked - 0.8) < 0.03 and abs(unchanged - 0.1) < 0.02 and abs(replaced - 0.1) < 0.02
    flat = batch["input_ids"].numpy().reshape(-1).copy()
    flat[positions] = original.reshape(-1)[positions]
    assert (flat.reshape(original.shape) == original).all(), "a position outside mlm_positions changed"


def test_masks_are_dynamic_and_reproducible():
    collator = make_collator()
    examples = random_examples(np.random.default_rng(1), 8)
    first = collator(examples, np.random.default_rng([42, 0, 5, 1]))["mlm_positions"]
    again = collator(examples, np.random.default_rng([42, 0, 5, 1]))["mlm_positions"]
    next_epoch = collator(examples, np.random.default_rng([42, 1, 5, 1]))["mlm_positions"]
    assert first.tolist() == again.tolist()
    assert first.tolist() != next_epoch.tolist()


def test_whole_word_masking_masks_whole_words():
    collator = make_collator(whole_word_masking=True)
    rng = np.random.default_rng(2)
    examples = random_examples(rng, 200, word_length=3)
    batch = collator(examples, rng)
    width = batch["input_ids"].shape[1]
    positions = batch["mlm_positions"].numpy()
    total_chosen, total_target = 0, 0
    for row, example in enumerate(examples):
        chosen = set((positions[positions // width == row] % width).tolist())
        word = np.cumsum(example.word_starts | example.special) - 1
        for w in np.unique(word[list(chosen)]):
            members = set(np.flatnonzero((word == w) & ~example.special).tolist())
            assert members <= chosen, f"row {row}: word {sorted(members)} only partly chosen ({sorted(chosen)})"
        target = max(1, round(0.15 * int((~example.special).sum())))
        assert len(chosen) <= target
        total_chosen += len(chosen)
        total_target += target
    assert total_chosen > 0.9 * total_target


def test_word_starts_are_space_delimited_words(tokenizer_dir, unigram_dir, corpus, workdir):
    """For WordPiece and SentencePiece alike, a line has as many word starts as whitespace-separated words."""
    for directory in (tokenizer_dir, unigram_dir):
        store, _ = store_and_tokenizer(directory, corpus, workdir / "cache")
        lines = [line.strip() for line in Path(corpus).read_text(encoding="utf-8").splitlines() if line.strip()]
        assert len(lines) == len(store.line_starts) - 1
        for i in range(0, len(lines), 7):
            begin, end = store.line_starts[i], store.line_starts[i + 1]
            assert int(store.word_starts[begin:end].sum()) == len(lines[i].split()), (directory, lines[i])


def test_farasa_segments_are_words_of_their_own(unigram_dir):
    from transformers import AutoTokenizer

    from arabert_pipeline.pretrain.data import word_start_flags

    tokenizer = AutoTokenizer.from_pretrained(unigram_dir)
    line = "و+ قال ال+ رئيس +ها"
    encodings = tokenizer.backend_tokenizer.encode_batch([line], add_special_tokens=False)
    flags = word_start_flags([line], encodings, np.array([len(encodings[0].ids)]))
    assert int(flags.sum()) == 5


# ------------------------------------------------------------------------------------------------- packing


def test_packing_fills_sequences_within_documents(tokenizer_dir, corpus, workdir):
    from arabert_pipeline.pretrain.data import PretrainingData, SpecialIds

    store, tokenizer = store_and_tokenizer(tokenizer_dir, corpus, workdir / "cache")
    assert store.n_documents == DOCUMENTS
    data = PretrainingData(store, SpecialIds.from_tokenizer(tokenizer), 32, token_budget=8 * 32, eval_sequences=16,
                           seed=0)
    doc_start, doc_end = store.document_span(np.arange(store.n_documents))
    for chunks in (data.train, data.eval):
        assert (chunks.start >= doc_start[chunks.doc]).all()
        assert (chunks.start + chunks.length <= doc_end[chunks.doc]).all()
        assert (chunks.length <= 30).all()
    # Only the last sequence of a document is short, and together they cover the training documents exactly.
    short = data.train.length < 30
    ends_document = data.train.start + data.train.length == doc_end[data.train.doc]
    assert not (short & ~ends_document).any()
    covered = np.zeros(len(store.tokens), dtype=np.int64)
    for s, n in zip(data.train.start, data.train.length, strict=True):
        covered[s : s + n] += 1
    in_train = np.zeros(len(store.tokens), dtype=bool)
    for d in data.train_docs:
        in_train[doc_start[d] : doc_end[d]] = True
    assert (covered[in_train] == 1).all() and (covered[~in_train] == 0).all()
    assert not set(data.train.doc.tolist()) & set(data.eval.doc.tolist())
    # Every sequence once per epoch, padded batch size within the token budget, different order each epoch.
    for epoch in (0, 1):
        batches = data.epoch_batches(epoch)
        assert sorted(np.concatenate(batches).tolist()) == list(range(len(data.train)))
        for rows in batches:
            assert len(rows) * (data.train.length[rows].max() + 2) <= 8 * 32
    assert [b.tolist() for b in data.epoch_batches(0)] != [b.tolist() for b in data.epoch_batches(1)]
    example = data.examples(data.train, data.epoch_batches(0)[0], np.random.default_rng(0))[0]
    assert example.input_ids[0] == tokenizer.cls_token_id and example.input_ids[-1] == tokenizer.sep_token_id


def test_nsp_pairs_follow_bert(tokenizer_dir, corpus, workdir):
    from arabert_pipeline.pretrain.data import PretrainingData, SpecialIds

    store, tokenizer = store_and_tokenizer(tokenizer_dir, corpus, workdir / "cache")
    data = PretrainingData(store, SpecialIds.from_tokenizer(tokenizer), 64, token_budget=8 * 64, eval_sequences=16,
                           seed=0, nsp=True)
    tokens = np.asarray(store.tokens)
    rng = np.random.default_rng(3)
    examples = data.examples(data.train, np.arange(len(data.train)), rng)
    labels = [e.next_sentence_label for e in examples]
    assert 0.45 < np.mean(labels) < 0.55
    position = {}
    for example, start, doc in zip(examples, data.train.start, data.train.doc, strict=True):
        ids = example.input_ids
        assert len(ids) <= 64 and example.special.sum() == 3
        sep = int(np.flatnonzero(ids == tokenizer.sep_token_id)[0])
        a, b = ids[1:sep], ids[sep + 1 : -1]
        assert len(a) and len(b)
        assert (example.token_type_ids[: sep + 1] == 0).all() and (example.token_type_ids[sep + 1 :] == 1).all()
        if example.next_sentence_label == 0:
            # B continues A in the same document.
            assert (tokens[start : start + len(a) + len(b)] == np.concatenate([a, b])).all()
        position[int(doc)] = True
    assert len(position) > 1


# ------------------------------------------------------------------------------------------------- model, training


def test_masked_only_head_matches_full_head(tokenizer_dir, corpus, workdir):
    import torch
    from transformers import AutoTokenizer

    from arabert_pipeline.pretrain.config import PretrainConfig
    from arabert_pipeline.pretrain.data import PretrainingData, SpecialIds
    from arabert_pipeline.pretrain.mlm import MLMCollator, build

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = PretrainConfig(tokenizer=tokenizer_dir, corpus=[corpus], output="unused", model_size="tiny",
                            max_seq_length=32, batch_size=8)
    objective = build(config, tokenizer).eval()
    store, _ = store_and_tokenizer(tokenizer_dir, corpus, workdir / "cache")
    data = PretrainingData(store, SpecialIds.from_tokenizer(tokenizer), 32, 8 * 32, 16, seed=0)
    rows = max(data.epoch_batches(0), key=lambda r: np.ptp(data.train.length[r]))  # a batch with padding
    examples = data.examples(data.train, rows, np.random.default_rng(0))
    batch = objective.collator(examples, np.random.default_rng(1))
    real = batch["mlm_labels"] != -100
    assert len(batch["mlm_positions"]) % 64 == 0 and not real.all(), "the training collator pads the positions"
    labels = torch.full(batch["input_ids"].shape, -100)
    labels.view(-1)[batch["mlm_positions"][real]] = batch["mlm_labels"][real]
    with torch.no_grad():
        ours = objective(batch)
        full = objective.model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask"), labels=labels)
        # The same masks without any padding to fixed shapes: the padded rows and positions change nothing.
        exact = MLMCollator(objective.collator.specials, len(tokenizer), whole_word_masking=False)
        unpadded = objective(exact(examples, np.random.default_rng(1)))
    # Same numbers up to float summation order (thread blocking differs between the gathered and the full matmul).
    assert torch.allclose(ours["loss"], full.loss, atol=1e-5, rtol=0), (ours["loss"].item(), full.loss.item())
    assert torch.allclose(ours["loss"], unpadded["loss"], atol=1e-5, rtol=0)
    assert ours["weight"] == unpadded["weight"] == real.sum()
    predicted = full.logits.view(-1, full.logits.size(-1))[batch["mlm_positions"][real]].argmax(-1)
    expected_accuracy = (predicted == batch["mlm_labels"][real]).float().mean().item()
    assert ours["mlm_accuracy"].item() == pytest.approx(expected_accuracy) == unpadded["mlm_accuracy"].item()


def test_batches_come_in_few_shapes():
    """Every batch is padded to one of a few shapes (a new shape costs native memory for good, see BatchShape)."""
    from arabert_pipeline.pretrain.data import POSITIONS_MULTIPLE, WIDTH_MULTIPLE, BatchShape, plan_batches

    rng = np.random.default_rng(0)
    lengths = np.concatenate([np.full(3000, 256), rng.integers(10, 256, 2000)])
    shape = BatchShape(token_budget=32 * 256, max_width=256)
    collator = make_collator(whole_word_masking=True)
    collator.shape = shape
    seen = set()
    for rows in plan_batches(lengths, shape, rng)[:300]:
        examples = random_examples(rng, len(rows), max_length=int(lengths[rows].max()) - 2)
        batch = collator(examples, rng)
        assert batch["input_ids"].numel() <= shape.token_budget
        assert (batch["mlm_labels"] == -100).sum() < POSITIONS_MULTIPLE
        seen.add((tuple(batch["input_ids"].shape), len(batch["mlm_positions"])))
    widths = {width for (_, width), _ in seen}
    assert widths <= set(range(WIDTH_MULTIPLE, 257, WIDTH_MULTIPLE))
    assert len({shape for shape, _ in seen}) == len(widths), "one row count per width"
    assert len(seen) < 60, len(seen)


def test_weight_decay_skips_biases_and_layer_norms():
    import torch
    from transformers import BertConfig, BertForMaskedLM

    from arabert_pipeline.training import parameter_groups

    model = BertForMaskedLM(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=32))
    decay, no_decay = parameter_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert all("bias" in names[id(p)] or "LayerNorm" in names[id(p)] for p in no_decay["params"])
    assert all("bias" not in names[id(p)] and "LayerNorm" not in names[id(p)] for p in decay["params"])
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 0.01
    assert decay["lr_scale"] == no_decay["lr_scale"] == 1.0
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight  # tied
    assert isinstance(decay["params"][0], torch.nn.Parameter)



@pytest.mark.slow
def test_resumed_run_repeats_the_uninterrupted_one(tokenizer_dir, corpus, workdir):
    import torch
    from safetensors.torch import load_file

    from arabert_pipeline.pretrain.trainer import pretrain

    torch.set_num_threads(1)
    straight, interrupted = workdir / "straight", workdir / "interrupted"
    # log_every=3 and a stop at step 7: the resumed run must also carry over the metrics of step 7 not yet logged.
    options = dict(nsp=True, whole_word_masking=True, grad_accum=2, log_every=3)
    assert pretrain(tiny_config(tokenizer_dir, corpus, straight, **options))

    def stop_at_seven(trainer):
        if trainer.state.step == 7:
            trainer.request_stop()

    config = tiny_config(tokenizer_dir, corpus, interrupted, **options)
    assert not pretrain(config, on_step=stop_at_seven)
    assert not (interrupted / "config.json").exists(), "an interrupted run must not look finished"
    assert [r["step"] for r in read_log(interrupted)][-1] == 6
    config.resume = "latest"
    assert pretrain(config)
    curve = lambda run: [(r["step"], r.get("loss"), r.get("eval_loss")) for r in read_log(run)]  # noqa: E731  a one-line local helper
    assert curve(straight) == curve(interrupted)
    assert [step for step, _, _ in curve(straight)] == [3, 6, 8, 9, 12, 15, 16, 16]
    a, b = load_file(straight / "model.safetensors"), load_file(interrupted / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_loader_workers_train_and_resume_exactly_as_in_process(tokenizer_dir, corpus, workdir):
    """--loader-workers builds the batches in other processes, ahead of the steps, across an epoch end: the same
    batches, so the same curve and weights as batches made in process, also through an interruption and a resume."""
    import torch
    from safetensors.torch import load_file

    from arabert_pipeline.pretrain.trainer import pretrain

    torch.set_num_threads(1)
    options = dict(whole_word_masking=True, grad_accum=2, steps=150, log_every=10, eval_every=75)  # dropout on
    straight, workers = workdir / "in-process", workdir / "workers"
    config = tiny_config(tokenizer_dir, corpus, straight, loader_workers=0, **options)
    assert pretrain(config)
    epochs_crossed = []

    def stop_at_seventy(trainer):
        assert trainer.prefetcher is not None, "no loader workers started"
        epochs_crossed.append(trainer.state.epoch)
        if trainer.state.step == 70:
            trainer.request_stop()

    config = tiny_config(tokenizer_dir, corpus, workers, loader_workers=2, **options)
    assert not pretrain(config, on_step=stop_at_seventy)
    config.resume = "latest"
    assert pretrain(config, on_step=stop_at_seventy)
    assert max(epochs_crossed) >= 1, "the run should cross an epoch end"
    curve = lambda run: [(r["step"], r.get("loss"), r.get("eval_loss")) for r in read_log(run)]  # noqa: E731  a one-line local helper
    assert curve(straight) == curve(workers)
    a, b = load_file(straight / "model.safetensors"), load_file(workers / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_compiled_training_steps_train_like_eager_ones_and_save_plain_checkpoints(tokenizer_dir, corpus, workdir):
    """--compile on the CPU (inductor's C++ backend): the same curve within float tolerance, a resume from its
    checkpoint, and checkpoints and the export keyed as an eager run's (nothing of the compiled wrapper)."""
    import torch
    from safetensors.torch import load_file

    from arabert_pipeline.pretrain.trainer import pretrain

    torch.set_num_threads(1)
    options = dict(steps=8, log_every=1, eval_every=8, save_every=4, dropout=0.0, bf16="off")
    eager, compiled = workdir / "eager", workdir / "compiled"
    assert pretrain(tiny_config(tokenizer_dir, corpus, eager, **options))
    compiled_modules = []

    def stop_at_four(trainer):
        compiled_modules.append(trainer.model is not trainer.unwrapped())
        if trainer.state.step == 4:
            trainer.request_stop()

    config = tiny_config(tokenizer_dir, corpus, compiled, compile=True, **options)
    assert not pretrain(config, on_step=stop_at_four)
    config.resume = "latest"
    assert pretrain(config, on_step=stop_at_four)
    assert compiled_modules and all(compiled_modules)
    losses = lambda run: [r["loss"] for r in read_log(run) if "loss" in r]  # noqa: E731  a one-line local helper
    assert losses(compiled) == pytest.approx(losses(eager), rel=1e-4)
    state = torch.load(compiled / "checkpoints" / "step-00000004" / "state.pt", weights_only=True)
    assert not any("_orig_mod" in key for key in state["model"])
    a, b = load_file(eager / "model.safetensors"), load_file(compiled / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-4) for k in a)


@pytest.mark.slow
@pytest.mark.parametrize("architecture, attention",
                         [("deberta-v2", "eager"), ("bert", "eager"), ("deberta-v2", "sdpa")],
                         ids=["deberta-v2", "bert", "deberta-v2-sdpa"])
def test_compiled_training_traces_one_graph_for_every_batch_shape(tokenizer_dir, corpus, workdir, monkeypatch,
                                                                   architecture, attention):
    """--compile traces the model once per batch layout (DeBERTa: one, every batch masked; BERT: with and without
    a mask), though batches differ in rows, width and predicted positions: each trace costs a base-size DeBERTa tens
    of seconds on a GPU, and retraces landing in a measured run's steps made it 19× slower than eager
    (docs/performance.md). With --deberta-attention sdpa too: on a CPU its compiled backward pass takes every width
    (on a GPU it failed at the second, a CUDA-only path; the trainer runs it eager there)."""
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    from arabert_pipeline.pretrain.mlm import MLMCollator
    from arabert_pipeline.pretrain.trainer import pretrain

    torch.set_num_threads(1)
    layouts, collate = set(), MLMCollator.__call__

    def recording(self, examples, rng):
        batch = collate(self, examples, rng)
        layouts.add(tuple((key, tuple(value.shape)) for key, value in sorted(batch.items())))
        return batch

    monkeypatch.setattr(MLMCollator, "__call__", recording)
    torch._dynamo.reset()
    counters.clear()
    config = tiny_config(tokenizer_dir, corpus, workdir / f"compiled-shapes-{architecture}-{attention}",
                         architecture=architecture, deberta_attention=attention, compile=True, max_seq_length=96,
                         batch_size=4, steps=24, eval_every=24, bf16="off")
    assert pretrain(config)
    widths = {dict(layout)["input_ids"] for layout in layouts}
    assert len(widths) >= 2, f"the run should see batches of several shapes: {widths}"
    masked = {"attention_mask" in dict(layout) for layout in layouts}
    assert masked == ({True} if architecture == "deberta-v2" else {True, False})
    assert counters["stats"]["unique_graphs"] == len(masked), dict(counters["stats"])


def test_compile_defaults_to_on_for_a_gpu_and_off_for_a_cpu(tokenizer_dir, corpus, workdir):
    """`--compile` is on by default on a GPU (1.68× eager for DeBERTa-v2 base on an H200) and off on a CPU, where
    inductor's compilation costs a short run more than it saves; `--compile` / `--no-compile` insist either way. The
    choice is the engine's (the device is known only there), and what the run records and the batch shapes read is
    the choice made."""
    import torch

    from arabert_pipeline.cli import build_parser
    from arabert_pipeline.pretrain.trainer import Trainer

    def parsed(*flags):
        return build_parser().parse_args(["pretrain", "--tokenizer", "t", "--corpus", "c", "-o", "o", *flags]).compile

    assert (parsed(), parsed("--compile"), parsed("--no-compile")) == (None, True, False)
    trainer = Trainer(tiny_config(tokenizer_dir, corpus, workdir / "compile-default", steps=2))
    try:
        assert trainer.compiled is False and trainer.model is trainer.unwrapped()
        assert trainer.config.compile is False and trainer.config.to_dict()["compile"] is False
        gpu, cpu = torch.device("cuda"), torch.device("cpu")
        for setting, on_gpu, on_cpu in ((None, True, False), (True, True, True), (False, False, False)):
            trainer.loop.compile = setting
            assert (trainer.compile_choice(gpu), trainer.compile_choice(cpu)) == (on_gpu, on_cpu), setting
    finally:
        trainer.release_output()


@pytest.mark.slow
def test_two_processes_train_and_resume_exactly(tokenizer_dir, corpus, workdir):
    """DDP on CPU (gloo) through torchrun: data sharded by process, RNG per process, same curve after a resume."""
    import shutil
    import subprocess
    import sys

    import torch
    from safetensors.torch import load_file

    def launch(out: Path, *extra: str) -> None:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "arabert_pipeline.cli",
                   "pretrain", "--tokenizer", tokenizer_dir, "--corpus", corpus, "--model-size", "tiny", "-o", str(out),
                   "--max-seq-length", "32", "--steps", "12", "--batch-size", "8", "--log-every", "3", "--eval-every",
                   "6", "--save-every", "5", "--eval-sequences", "16", "--cache-dir", str(workdir / "cache"),
                   "--no-progress", *extra]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]

    straight, resumed = workdir / "ddp", workdir / "ddp-resumed"
    launch(straight)
    metadata = json.loads((straight / "arabert_pipeline.json").read_text(encoding="utf-8"))
    assert metadata["pretrain"]["processes"] == 2
    single_step_tokens = 8 * 32
    assert metadata["pretrain"]["tokens_seen"] > 12 * single_step_tokens * 1.5  # both processes' batches count
    # Resume from step 10 as if the run had died there.
    resumed.mkdir()
    shutil.copytree(straight / "checkpoints" / "step-00000010", resumed / "checkpoints" / "step-00000010")
    shutil.copy(straight / "log.jsonl", resumed / "log.jsonl")
    launch(resumed, "--resume")
    curve = lambda run: [(r["step"], r.get("loss"), r.get("eval_loss")) for r in read_log(run)]  # noqa: E731  a one-line local helper
    assert curve(straight) == curve(resumed)
    a, b = load_file(straight / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_output_is_a_hugging_face_masked_lm(finished_run):
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

    model = AutoModelForMaskedLM.from_pretrained(finished_run)
    tokenizer = AutoTokenizer.from_pretrained(finished_run)
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64
    assert model.config.vocab_size == len(tokenizer)
    fill = pipeline("fill-mask", model=model, tokenizer=tokenizer, top_k=3)
    predictions = fill(f"قال {tokenizer.mask_token} إن الحكومة")
    assert len(predictions) == 3 and all(p["token_str"] for p in predictions)
    metadata = json.loads((finished_run / "arabert_pipeline.json").read_text(encoding="utf-8"))
    assert metadata["preprocessing"] == "none" and metadata["objective"] == "mlm"
    assert metadata["pretrain"]["steps"] == 30 and metadata["pretrain"]["tokens_seen"] > 30 * 100
    assert metadata["pretrain"]["config"]["model_size"] == "tiny"
    log = read_log(finished_run)
    train_rows = [r for r in log if "loss" in r]
    eval_rows = [r for r in log if "eval_loss" in r]
    assert [r["step"] for r in eval_rows] == [10, 20, 30]
    assert {"tokens", "lr", "tokens_per_second", "eval_mlm_accuracy"} <= train_rows[0].keys() | eval_rows[0].keys()
    assert eval_rows[-1]["eval_loss"] < eval_rows[0]["eval_loss"]
    assert sorted(p.name for p in (finished_run / "checkpoints").iterdir()) == ["step-00000020", "step-00000030"]
    assert AutoModelForMaskedLM.from_pretrained(finished_run / "checkpoints" / "step-00000020" / "model")
    with torch.no_grad():  # the checkpoint's model equals the final one after the last step
        last = AutoModelForMaskedLM.from_pretrained(finished_run / "checkpoints" / "step-00000030" / "model")
        assert all(torch.equal(a, b)
                   for a, b in zip(model.state_dict().values(), last.state_dict().values(), strict=True))


def test_bf16_autocast_trains_like_fp32(tokenizer_dir, corpus, workdir):
    import torch

    from arabert_pipeline.pretrain.trainer import Trainer

    # A bf16 setting that trained in fp32 would give the same losses: the layers must be seen computing in bfloat16.
    computed = {}
    for bf16 in ("off", "on"):
        trainer = Trainer(tiny_config(tokenizer_dir, corpus, workdir / f"bf16-{bf16}", steps=3, bf16=bf16))
        dtypes = computed[bf16] = set()
        for layer in trainer.unwrapped().modules():
            if isinstance(layer, torch.nn.Linear):
                layer.register_forward_hook(lambda module, inputs, output, seen=dtypes: seen.add(output.dtype))
        assert trainer.train()
    assert computed == {"off": {torch.float32}, "on": {torch.bfloat16}}
    fp32, bf16 = (read_log(workdir / f"bf16-{b}") for b in ("off", "on"))
    assert fp32[0]["loss"] == pytest.approx(bf16[0]["loss"], abs=0.05)
    metadata = json.loads((workdir / "bf16-on" / "arabert_pipeline.json").read_text(encoding="utf-8"))
    assert metadata["pretrain"]["bf16"] is True


def test_dropout_zero_makes_training_steps_deterministic_and_export_keeps_bert_dropout(tokenizer_dir, corpus, workdir):
    import torch
    from transformers import AutoConfig

    from arabert_pipeline.pretrain.trainer import Trainer

    def two_losses(dropout):
        trainer = Trainer(tiny_config(tokenizer_dir, corpus, workdir / f"dropout-{dropout}", dropout=dropout))
        rows = trainer.data.epoch_batches(0)[0]
        batch = trainer.to_device(trainer.batches.make(trainer.data.train, rows, np.random.default_rng(0)))
        with torch.no_grad():
            return trainer, [trainer.model(batch)["loss"].item() for _ in range(2)]

    _, with_dropout = two_losses(None)
    assert with_dropout[0] != with_dropout[1]  # BERT's 0.1 dropout: two passes differ
    trainer, without = two_losses(0.0)
    assert without[0] == without[1]
    trainer.export(workdir / "dropout-export")
    assert AutoConfig.from_pretrained(workdir / "dropout-export").hidden_dropout_prob == 0.1


@pytest.mark.slow
def test_run_length_from_tokens_time_or_one_epoch(tokenizer_dir, corpus, workdir):
    from arabert_pipeline.pretrain.trainer import Trainer, pretrain

    epoch = Trainer(tiny_config(tokenizer_dir, corpus, workdir / "length", steps=None))
    assert epoch.state.total_steps == len(epoch.data.epoch_batches(0))
    assert epoch.state.warmup_steps == round(0.06 * epoch.state.total_steps)
    by_tokens = Trainer(tiny_config(tokenizer_dir, corpus, workdir / "length-tokens", steps=None, tokens=2560,
                                    grad_accum=2))
    assert 4 <= by_tokens.state.total_steps <= 6  # ~256 tokens per batch, 2 batches per step
    timed = workdir / "timed"
    budget_min = 0.01
    assert pretrain(tiny_config(tokenizer_dir, corpus, timed, steps=None, time_budget=budget_min))
    steps = json.loads((timed / "arabert_pipeline.json").read_text(encoding="utf-8"))["pretrain"]["steps"]
    # A budget ignored would run the epoch (280 steps: about 10 s on 2 slow cores, 3 s on CI's). 0.6 s end it
    # before the epoch on any machine slower than 2 ms a step, which no CPU is at this size.
    assert 1 <= steps < epoch.state.total_steps
    elapsed = [row["elapsed"] for row in read_log(timed) if "loss" in row]
    assert len(elapsed) == steps  # log_every=1
    assert steps == 1 or elapsed[-2] <= budget_min * 60 + 0.005  # no step began after the budget was spent


def test_time_budget_is_replanned_from_the_speed_of_real_steps(tokenizer_dir, corpus, workdir):
    """The trainer's side of --time-budget (the planner itself: test_training.py): evaluation time counts."""
    from arabert_pipeline.pretrain.trainer import Trainer

    trainer = Trainer(tiny_config(tokenizer_dir, corpus, workdir / "replan", steps=None, time_budget=10, warmup=0.1))
    trainer.eval_seconds_per_step = 0.5
    trainer.state.step, trainer.state.elapsed = 20, 50.0  # 2.5 s per step so far, + 0.5 s of evaluation per step
    assert trainer.replan_due()
    trainer.replan_for_budget()
    state = trainer.state
    assert state.total_steps == 20 + int((600 - 50) / 3.0)
    assert state.warmup_steps == round(0.1 * state.total_steps)
    assert state.budget_replanned and not trainer.replan_due()


@pytest.mark.slow
def test_a_run_stops_at_the_step_that_spends_its_time_budget(tokenizer_dir, corpus, workdir, monkeypatch):
    """The plan is only an estimate: whatever it says, the run ends at the first step past the budget (here a plan of
    10,000 steps that nothing corrects, and a budget of 1.2 s)."""
    from arabert_pipeline.pretrain.trainer import Trainer
    from arabert_pipeline.training.budget import BudgetPlanner

    monkeypatch.setattr(Trainer, "steps_within_budget", lambda self: 10_000)
    monkeypatch.setattr(BudgetPlanner, "due", lambda self, state: False)
    budget = 0.02 * 60
    elapsed = []

    def record(trainer):
        elapsed.append(trainer.state.elapsed)
        if trainer.state.elapsed > 10 * budget:  # a run that would not stop fails here, not after 10,000 steps
            trainer.request_stop()

    trainer = Trainer(tiny_config(tokenizer_dir, corpus, workdir / "budget-stop", steps=None, time_budget=0.02,
                                  eval_every=10_000, bf16="off"), on_step=record)
    assert trainer.state.total_steps == 10_000
    assert trainer.train()
    assert len(elapsed) == trainer.state.step < 10_000
    assert elapsed[-1] >= budget and (len(elapsed) == 1 or elapsed[-2] < budget)


def test_eval_mlm_perplexity_is_the_exp_of_the_token_weighted_held_out_loss(tokenizer_dir, corpus, workdir):
    """Recomputed here from the plain Hugging Face model's logits at every masked position of the held-out batches
    (the trainer's head runs on the masked positions only, and weights each batch by its masked tokens)."""
    import math

    import torch
    import torch.nn.functional as F

    from arabert_pipeline.pretrain.trainer import Trainer

    trainer = Trainer(tiny_config(tokenizer_dir, corpus, workdir / "perplexity", bf16="off", eval_sequences=12))
    # An untrained model guesses about uniformly over the 1,000-piece vocabulary.
    assert 500 < trainer.evaluate()["eval_mlm_perplexity"] < 2000
    model = trainer.unwrapped().model
    torch.manual_seed(0)
    with torch.no_grad():  # some pieces made likely: the batches' losses differ, and so their weighting matters
        model.cls.predictions.bias.normal_(0.0, 3.0)
    metrics = trainer.evaluate()
    model.eval()
    batches = trainer.data.eval_batches()
    assert sorted(len(rows) for rows in batches) == [4, 8]  # batches of unequal weight (eval_sequences=12)
    total, count = 0.0, 0
    with torch.no_grad():
        for index, rows in enumerate(batches):
            batch = trainer.batches.make(trainer.data.eval, rows, np.random.default_rng([0, index, 2]))
            logits = model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask")).logits
            logits = logits.reshape(-1, logits.size(-1))[batch["mlm_positions"]]
            scored = batch["mlm_labels"] != -100
            total += F.cross_entropy(logits[scored], batch["mlm_labels"][scored], reduction="sum").item()
            count += int(scored.sum())
    assert metrics["eval_mlm_loss"] == pytest.approx(total / count, rel=1e-6)
    assert metrics["eval_mlm_perplexity"] == pytest.approx(math.exp(total / count), rel=1e-6)


def test_a_budgeted_run_resumed_with_another_budget_replans_its_end(tokenizer_dir, corpus, workdir):
    """--time-budget may change on --resume (a run extended or cut short); the end of the decay moves to the new
    budget at the first check, and the run may not turn into one of a fixed length."""
    from arabert_pipeline.pretrain.trainer import Trainer, pretrain

    output = workdir / "rebudget"

    def stop_at_four(trainer):
        if trainer.state.step == 4:
            trainer.request_stop()

    assert not pretrain(tiny_config(tokenizer_dir, corpus, output, steps=None, time_budget=10), on_step=stop_at_four)
    # 10 s in, at 1 s per step: too early for the planner's own first correction (36 s into a 20-minute budget)...
    same = Trainer(tiny_config(tokenizer_dir, corpus, output, steps=None, time_budget=10, resume="latest"))
    same.state.step, same.state.elapsed = 10, 10.0
    assert not same.replan_due()
    same.release_output()
    # ...but a new budget is planned for at once.
    longer = Trainer(tiny_config(tokenizer_dir, corpus, output, steps=None, time_budget=20, resume="latest"))
    longer.state.step, longer.state.elapsed = 10, 10.0
    assert longer.replan_due()
    longer.replan_for_budget()
    assert longer.state.total_steps == 10 + (20 * 60 - 10) and not longer.replan_due()
    longer.release_output()
    with pytest.raises(ConfigError, match="time_budget: checkpoint 10, now None"):
        Trainer(tiny_config(tokenizer_dir, corpus, output, steps=16, resume="latest"))


# ------------------------------------------------------------------------------------------------- bad input


def test_init_from_a_model_with_another_vocabulary_is_refused(tokenizer_dir, unigram_dir, corpus, workdir,
                                                              finished_run):
    from arabert_pipeline.pretrain.trainer import Trainer

    # Same size, other token ids: the tokenizer saved beside the model gives it away.
    with pytest.raises(ConfigError, match="vocabulary mismatch"):
        Trainer(tiny_config(unigram_dir, corpus, workdir / "other-vocab", init_from=str(finished_run)))
    # Other size.
    from transformers import BertConfig, BertForMaskedLM

    BertForMaskedLM(BertConfig(vocab_size=1234, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=256)).save_pretrained(workdir / "vocab-1234")
    with pytest.raises(ConfigError, match="1234 token embeddings"):
        Trainer(tiny_config(tokenizer_dir, corpus, workdir / "other-size", init_from=str(workdir / "vocab-1234")))
    # The same vocabulary continues fine, from a checkpoint directory too.
    trainer = Trainer(tiny_config(tokenizer_dir, corpus, workdir / "continued", model_size=None,
                                  init_from=str(finished_run / "checkpoints" / "step-00000030")))
    assert trainer.state.total_steps == 16


def test_bad_corpora_are_refused_before_training(tokenizer_dir, workdir):
    from arabert_pipeline.pretrain.trainer import Trainer

    empty = workdir / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputError, match="no tokens"):
        Trainer(tiny_config(tokenizer_dir, empty, workdir / "bad1"))
    one_document = workdir / "one.txt"
    one_document.write_text("قال الرئيس إن الحكومة ستعمل\nسطر ثان من الوثيقة نفسها\n", encoding="utf-8")
    with pytest.raises(InputError, match="at least 2"):
        Trainer(tiny_config(tokenizer_dir, one_document, workdir / "bad2"))
    short = workdir / "short.txt"
    short.write_text("\n\n".join(["قال الرئيس إن الحكومة ستعمل"] * 30) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="too short"):
        Trainer(tiny_config(tokenizer_dir, short, workdir / "bad3", batch_size=64))
    bad_utf8 = workdir / "bad.txt"
    bad_utf8.write_bytes("سطر\n".encode() + b"\xff\xfe\n")
    with pytest.raises(InputError, match="line 2"):
        Trainer(tiny_config(tokenizer_dir, bad_utf8, workdir / "bad4"))


def test_preprocessing_mismatch_is_refused(tokenizer_dir, corpus, workdir):
    from arabert_pipeline.pretrain.trainer import Trainer

    segmented = workdir / "segmented.txt"
    segmented.write_text(Path(corpus).read_text(encoding="utf-8"), encoding="utf-8")
    Path(f"{segmented}.arabert_pipeline.json").write_text(json.dumps({"preprocessing": "arabertv2"}), encoding="utf-8")
    with pytest.raises(ConfigError, match="arabertv2.*expects 'none'"):
        Trainer(tiny_config(tokenizer_dir, segmented, workdir / "bad5"))


def test_resume_with_other_settings_is_refused(tokenizer_dir, corpus, finished_run):
    from arabert_pipeline.pretrain.trainer import Trainer

    with pytest.raises(ConfigError, match="holds an earlier `arabert-pipeline pretrain` output: pass --resume"):
        Trainer(tiny_config(tokenizer_dir, corpus, finished_run, steps=30))
    with pytest.raises(ConfigError, match="other settings.*lr"):
        Trainer(tiny_config(tokenizer_dir, corpus, finished_run, steps=30, lr=1e-4, resume="latest"))


@pytest.mark.parametrize("overrides, expected", [
    ({"model_size": "huge"}, "--model-size 'huge': choose one of"),
    ({"objective": "nope"}, "--objective 'nope': choose one of"),
    ({"steps": 5, "tokens": 10}, r"at most one of --steps, --tokens, --time-budget \(got steps, tokens\)"),
    ({"model_size": None}, "--model-size is required"),
    ({"max_seq_length": 1024}, "--max-seq-length 1024: must be between"),
    ({"bf16": "maybe"}, "--bf16 'maybe': choose"),
])
def test_options_are_checked(tokenizer_dir, corpus, workdir, overrides, expected):
    from arabert_pipeline.pretrain.trainer import Trainer

    with pytest.raises(ConfigError, match=expected):
        Trainer(tiny_config(tokenizer_dir, corpus, workdir / "bad-options", **overrides))


def test_cli_help_lists_the_flags(capsys):
    from arabert_pipeline.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["pretrain", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--model-size", "--whole-word-masking", "--nsp", "--time-budget", "--grad-accum", "--resume",
                 "--init-from", "--bf16"):
        assert flag in text


def test_model_size_takes_presets_and_layer_width_sizes():
    from arabert_pipeline.pretrain.config import bert_config_kwargs, model_dims

    assert model_dims("mini") == (4, 256, 4)
    assert model_dims("L6-H384") == (6, 384, 6)
    assert bert_config_kwargs("L6-H384")["intermediate_size"] == 1536
    for bad in ("L6-H380", "L0-H384", "huge", "L6H384", "l6-h384"):
        with pytest.raises(ConfigError, match="--model-size"):
            model_dims(bad)

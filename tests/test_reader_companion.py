"""A transformer QA model with a DrQA reader beside it (qa/transformer/companion.py): `tune-decoding --reader` writes
the reader into the model dir and weighs it on dev, both backends answer with it, and damaged reader files are refused.

The toy task of test_static_reader.py (the answer is the name after a marker word): the reader learns it, a random
transformer does not, so a weight chosen on dev must be above zero and must find the names."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

from arabert_pipeline.cli import main
from arabert_pipeline.errors import ConfigError
from test_static_reader import FILLER, MARKER, NAMES, _squad, embeddings_dir, trained  # noqa: F401 (fixtures)

torch = pytest.importorskip("torch")


def _random_qa_model(directory):
    """A random BERT QA model over the toy words, saved as export-onnx wants it."""
    from transformers import BertConfig, BertForQuestionAnswering

    from arabert_pipeline import Preprocessor
    from arabert_pipeline.tokenizer.export import save_tokenizer, wordpiece_backend

    words = sorted({w for t in Preprocessor("arabertv02").preprocess_batch(FILLER + NAMES + [MARKER, "ما", "؟"])
                    for w in t.split()})
    vocab = list(dict.fromkeys(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted({c for w in words for c in w}),
                                *words]))
    save_tokenizer(wordpiece_backend(vocab, "arabertv02"), directory, preprocessing="arabertv02",
                   task="question-answering", max_seq_length=64, doc_stride=16)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64)
    BertForQuestionAnswering(config).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def tuned(trained, tmp_path_factory):  # noqa: F811  an imported fixture
    base, reader_dir, _ = trained
    home = tmp_path_factory.mktemp("companion")
    model = _random_qa_model(home / "qa")
    dev = base / "dev.json"
    out = home / "tuned"
    code = main(["tune-decoding", str(model), "--reader", str(reader_dir), "--dev", str(dev), "-o", str(out),
                 "--within-sentence", "off", "--decoding", "max-score", "--sentence-prior", "0"])
    assert code == 0
    return model, out, reader_dir, dev


def test_the_companion_graph_gives_the_readers_own_probabilities(trained, tuned):  # noqa: F811  an imported fixture
    from arabert_pipeline.qa.align import align_examples
    from arabert_pipeline.qa.static.features import batch, encode_examples
    from arabert_pipeline.qa.static.predict import StaticReader
    from arabert_pipeline.qa.transformer.companion import Companion

    _, reader_dir, dev = trained
    _, out, _, _ = tuned
    companion = Companion.load(out, "arabertv02")
    reader = StaticReader.load(reader_dir)
    reader.model.eval()
    questions = [{**example, "question": f"ما {MARKER} ؟"} for example in dev[:8]]
    encoded, _ = encode_examples(questions, reader.preprocessor, reader.vocabulary)
    aligned, _ = align_examples(questions, reader.preprocessor)
    for item, example in zip(encoded, aligned, strict=True):
        with torch.no_grad():
            start, end = reader.model(*batch([item]))
        spans, log_start, log_end = companion.word_log_probs(example["question"], example["aligned"].text)
        assert (spans == item.word_spans).all()
        # The table is float16 in the companion: a few thousandths apart at most.
        np.testing.assert_allclose(log_start, torch.log_softmax(start, -1)[0].numpy(), atol=2e-2)
        np.testing.assert_allclose(log_end, torch.log_softmax(end, -1)[0].numpy(), atol=2e-2)


def test_tune_decoding_weighs_the_reader_on_dev_and_writes_it(tuned):
    _, out, reader_dir, _ = tuned
    metadata = json.loads((out / "arabert_pipeline.json").read_text(encoding="utf-8"))
    scores = {row["reader_weight"]: row["score"] for row in metadata["decoding_tuning"]["scores"]}
    assert set(scores) == {0.0, 2.0, 4.0, 8.0, 16.0}
    assert metadata["reader_weight"] > 0
    assert scores[metadata["reader_weight"]] > scores[0.0] + 20  # the reader knows the task, the transformer not
    assert metadata["decoding_tuning"]["reader"].endswith(reader_dir.name)
    assert sorted(p.name for p in (out / "reader").iterdir()) == ["reader.json", "reader.onnx", "vectors.npy",
                                                                 "words.txt"]


def test_the_tuned_model_s_files_follow_the_umask(tuned):
    """The random model's model.safetensors was written 0600 by safetensors; its copy in the tuned dir, like every
    file there, has the mode the umask gives (issue 37)."""
    _, out, _, _ = tuned
    mask = os.umask(0)
    os.umask(mask)
    modes = {p.relative_to(out).as_posix(): oct(p.stat().st_mode & 0o777) for p in out.rglob("*") if p.is_file()}
    assert "model.safetensors" in modes and modes == dict.fromkeys(modes, oct(0o666 & ~mask))


def test_pipeline_answers_with_the_reader_on_both_backends(tuned, tmp_path):
    from arabert_pipeline import Pipeline

    _, out, _, _ = tuned
    onnx_dir = tmp_path / "onnx"
    shutil.copytree(out, onnx_dir)
    assert main(["export-onnx", str(onnx_dir)]) == 0
    examples = _squad(tmp_path / "fresh.json", 12, seed=7)
    questions = [f"ما {MARKER} ؟"] * len(examples)
    contexts = [e["context"] for e in examples]
    gold = [e["answers"]["text"][0] for e in examples]
    by_backend = {}
    for backend, directory in (("torch", out), ("onnx", onnx_dir)):
        qa = Pipeline(str(directory), backend=backend)
        assert qa.qa.reader is not None
        answers = qa.answer(questions, contexts)
        assert sum(a.text == g for a, g in zip(answers, gold, strict=True)) >= 10
        by_backend[backend] = [(a.text, a.start) for a in answers]
    assert by_backend["torch"] == by_backend["onnx"]


@pytest.mark.slow
def test_int8_quantizes_the_reader_with_the_transformer(tuned, tmp_path, monkeypatch):
    """quantize=True runs int8 copies of both graphs (the reader's LSTMs were a third of an answer's time), cached."""
    import onnx

    from arabert_pipeline import Pipeline
    from arabert_pipeline.finetuning import runtime

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _, out, _, _ = tuned
    onnx_dir = tmp_path / "onnx"
    shutil.copytree(out, onnx_dir)
    assert main(["export-onnx", str(onnx_dir)]) == 0
    quantized = []
    quantize = runtime.int8_model
    monkeypatch.setattr(runtime, "int8_model", lambda path: quantized.append(Path(path).name) or quantize(path))
    examples = _squad(tmp_path / "fresh.json", 12, seed=7)
    questions = [f"ما {MARKER} ؟"] * len(examples)
    contexts = [e["context"] for e in examples]
    gold = [e["answers"]["text"][0] for e in examples]
    qa = Pipeline(str(onnx_dir), quantize=True)
    assert sorted(quantized) == ["model.onnx", "reader.onnx"]
    ops = {node.op_type for node in onnx.load_from_string(quantize(onnx_dir / "reader" / "reader.onnx")).graph.node}
    assert "DynamicQuantizeLSTM" in ops and "LSTM" not in ops
    # The loaded reader runs the int8 graph: near the fp32 reader's logits, not equal to them.
    exact = Pipeline(str(onnx_dir), quantize=False).qa.reader
    rng = np.random.default_rng(0)
    dim = exact.table.shape[1]
    feeds = {"context": rng.standard_normal((1, 11, dim), dtype=np.float32),
             "features": rng.random((1, 11, 3), dtype=np.float32),
             "question": rng.standard_normal((1, 4, dim), dtype=np.float32)}
    int8_logits, fp32_logits = qa.qa.reader.session.run(None, feeds), exact.session.run(None, feeds)
    assert not all(np.array_equal(a, b) for a, b in zip(int8_logits, fp32_logits, strict=True))
    assert all(np.allclose(a, b, atol=0.5) for a, b in zip(int8_logits, fp32_logits, strict=True))
    answers = qa.answer(questions, contexts)
    assert sum(a.text == g for a, g in zip(answers, gold, strict=True)) >= 10
    Pipeline(str(onnx_dir), quantize=True)  # the second load reads both graphs from the cache
    assert len(quantized) == 2 and len(list((tmp_path / "cache" / "arabert_pipeline" / "int8").glob("*.onnx"))) == 2


@pytest.mark.slow  # over half a CPU second: the quick loop keeps this file's cheaper tests
def test_retuning_keeps_the_reader_the_model_has(tuned, tmp_path):
    _, out, _, dev = tuned
    again = tmp_path / "again"
    assert main(["tune-decoding", str(out), "--dev", str(dev), "-o", str(again), "--within-sentence", "off",
                 "--decoding", "max-score", "--sentence-prior", "0", "--reader-weight", "4"]) == 0
    metadata = json.loads((again / "arabert_pipeline.json").read_text(encoding="utf-8"))
    assert metadata["reader_weight"] == 4.0
    assert (again / "reader" / "reader.onnx").read_bytes() == (out / "reader" / "reader.onnx").read_bytes()


def test_a_reader_weight_without_a_reader_and_a_missing_reader_are_refused(tuned, tmp_path, capsys):
    model, _, _, dev = tuned
    code = main(["tune-decoding", str(model), "--dev", str(dev), "-o", str(tmp_path / "x"), "--reader-weight", "2"])
    assert code != 0
    assert "needs a reader" in capsys.readouterr().err
    code = main(["tune-decoding", str(model), "--dev", str(dev), "-o", str(tmp_path / "x"), "--reader", "nowhere"])
    assert code != 0
    assert "--reader nowhere: no such directory" in capsys.readouterr().err
    code = main(["tune-decoding", str(model), "--dev", str(dev), "-o", str(tmp_path / "x"), "--reader", str(model)])
    assert code != 0
    assert "not written by `arabert-pipeline train-reader`" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def _damaged(out, tmp_path, name: str):
    copy = tmp_path / name.replace("/", "-")
    shutil.copytree(out, copy)
    return copy


@pytest.mark.parametrize("damage, message", [
    (lambda d: shutil.rmtree(d / "reader"), "reader is missing: the model's arabert_pipeline.json weighs a reader"),
    (lambda d: (d / "reader" / "vectors.npy").write_bytes(
        (d / "reader" / "vectors.npy").read_bytes()[:-2] + b"\x00\x3c"), "checksum differs"),
    (lambda d: (d / "reader" / "words.txt").write_text("كلمة\t3\n", encoding="utf-8"), "has 1 words"),
    (lambda d: _reorder_lines(d / "reader" / "words.txt"), "words.txt is not the file reader.json records"),
    (lambda d: _drop_json(d / "reader" / "reader.json", "words_sha256"), "reader.json: words_sha256 is missing"),
    (lambda d: _edit_json(d / "reader" / "reader.json", table_sha256=5), "table_sha256 must be a SHA-256 hex digest"),
    (lambda d: _edit_json(d / "reader" / "reader.json", words=True), "words must be a positive integer"),
    (lambda d: _edit_json(d / "reader" / "reader.json", preprocessing="none"), "must read the same"),
    (lambda d: _edit_json(d / "reader" / "reader.json", dim="16"), "dim must be a positive integer"),
    (lambda d: _edit_json(d / "arabert_pipeline.json", reader_weight=float("nan")), "reader_weight must be"),
    (lambda d: _edit_json(d / "arabert_pipeline.json", reader_weight=-1.0), "reader_weight must be"),
])
def test_damaged_reader_files_are_refused_by_name(tuned, tmp_path, damage, message):
    from arabert_pipeline import Pipeline

    _, out, _, _ = tuned
    copy = tmp_path / "damaged"
    shutil.copytree(out, copy)
    damage(copy)
    with pytest.raises(ConfigError, match=message):
        Pipeline(str(copy), backend="torch")


def _edit_json(path, **fields):
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(fields)
    path.write_text(json.dumps(data), encoding="utf-8")


def _drop_json(path, field):
    data = json.loads(path.read_text(encoding="utf-8"))
    del data[field]
    path.write_text(json.dumps(data), encoding="utf-8")


def _reorder_lines(path):
    """The same words and counts, two of them swapped: as many lines as reader.json says, another table order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[0], lines[1] = lines[1], lines[0]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_the_shipped_reader_records_the_checksum_of_each_of_its_files():
    from arabert_pipeline.qa.transformer.companion import Companion
    from arabert_pipeline.weights.files import file_digest

    model = Path(__file__).resolve().parents[1] / "arabert_pipeline" / "models" / "arabert-mini"
    config = json.loads((model / "reader" / "reader.json").read_text(encoding="utf-8"))
    for name, field in (("words.txt", "words_sha256"), ("vectors.npy", "table_sha256"),
                        ("reader.onnx", "graph_sha256"), ("vector_scales.npy", "scales_sha256"),
                        ("vectors_int4.npy", "int4_sha256")):
        if field in config or (model / "reader" / name).exists():
            assert config[field] == file_digest(model / "reader" / name), name
    assert len(Companion.load(model, "arabertv02").vocabulary.index) == config["words"]


def test_the_compact_reader_reads_its_int8_rows_and_refuses_other_scales(tuned, tmp_path):
    """Issue 53's compact reader: the table as int8 rows with float32 row scales, reader.onnx's weights as int8 rows
    widened in the graph; the rows it looks up are the int8 values times their scales, on both backends, and scales
    that are not the recorded file are refused."""
    import numpy as np

    from arabert_pipeline import Pipeline
    from arabert_pipeline.qa.transformer.companion import Companion, compact_companion
    from arabert_pipeline.weights.rows import dequantize_rows

    _, out, _, _ = tuned
    compact = tmp_path / "compact"
    shutil.copytree(out, compact)
    before = np.load(out / "reader" / "vectors.npy").astype(np.float32)
    compact_companion(compact, min_elements=1024)  # the toy reader's LSTMs are small
    table = np.load(compact / "reader" / "vectors.npy")
    scales = np.load(compact / "reader" / "vector_scales.npy")
    assert table.dtype == np.int8 and scales.dtype == np.float32 and scales.shape == (len(table),)
    widened = dequantize_rows(table, scales[:, None])
    assert np.abs(widened - before).max() <= np.abs(before).max(axis=1).max() / 254 + 1e-6
    companion = Companion.load(compact, "arabertv02")
    assert np.array_equal(companion.table[[3, 5]].astype(np.float32) * companion.scales[[3, 5]][:, None],
                          widened[[3, 5]])
    assert (compact / "reader" / "reader.onnx").stat().st_size < 0.5 * (out / "reader" / "reader.onnx").stat().st_size
    examples = _squad(tmp_path / "fresh.json", 12, seed=7)
    questions, contexts = [f"ما {MARKER} ؟"] * len(examples), [e["context"] for e in examples]
    gold = [e["answers"]["text"][0] for e in examples]
    answers = Pipeline(str(compact), backend="torch").answer(questions, contexts)
    assert sum(a.text == g for a, g in zip(answers, gold, strict=True)) >= 10
    np.save(compact / "reader" / "vector_scales.npy", scales * 2)
    with pytest.raises(ConfigError, match="vector_scales.npy is missing or not the file"):
        Pipeline(str(compact), backend="torch")


def test_the_rarer_words_rows_in_4bit_are_read_as_stored_and_the_rest_unchanged(tuned, tmp_path):
    """compact_companion(int8_words=N): rows of words past the first N of words.txt in 4-bit (vectors_int4.npy, one
    scale a row), the others the int8 rows they were; lookups on both sides of the boundary give the stored values;
    a damaged or missing 4-bit file, or a wrong row count, is refused by name."""
    import numpy as np

    from arabert_pipeline import Pipeline
    from arabert_pipeline.qa.transformer.companion import Companion, compact_companion
    from arabert_pipeline.weights.rows import dequantize_rows, unpack_int4

    _, out, _, _ = tuned
    int8, mixed = tmp_path / "int8", tmp_path / "mixed"
    shutil.copytree(out, int8)
    compact_companion(int8, min_elements=1024)
    shutil.copytree(int8, mixed)
    words = len(Companion.load(int8, "arabertv02").vocabulary.index)
    compact_companion(mixed, int8_words=words // 2)
    reference = Companion.load(int8, "arabertv02")
    companion = Companion.load(mixed, "arabertv02")
    head = 2 + words // 2
    config = json.loads((mixed / "reader" / "reader.json").read_text(encoding="utf-8"))
    assert config["int4_rows"] == words + 2 - head and len(companion.table) == words + 2
    assert np.array_equal(np.load(mixed / "reader" / "vectors.npy"), np.load(int8 / "reader" / "vectors.npy")[:head])
    ids = np.array([0, 3, head - 1, head, words + 1])
    expected = reference.table[ids].astype(np.float32) * reference.scales[ids][:, None]
    found = companion.table[ids].astype(np.float32) * companion.scales[ids][:, None]
    assert np.array_equal(found[:3], expected[:3])  # int8 rows untouched
    assert not np.array_equal(found[3:], expected[3:])
    assert np.abs(found[3:] - expected[3:]).max() <= np.abs(expected[3:]).max() / 14 + 1e-6  # half a 4-bit step
    packed = np.load(mixed / "reader" / "vectors_int4.npy")
    assert packed.dtype == np.uint8 and packed.shape[1] * 2 == config["dim"]
    values = unpack_int4(packed, config["dim"])
    assert values.min() >= -7 and values.max() <= 7
    assert np.array_equal(dequantize_rows(values, companion.scales[head:, None]),
                          companion.table[np.arange(head, words + 2)] * companion.scales[head:, None])
    Pipeline(str(mixed), backend="torch")
    with pytest.raises(ConfigError, match="already 4-bit"):
        compact_companion(mixed, int8_words=2)
    np.save(mixed / "reader" / "vectors_int4.npy", packed[::-1])
    with pytest.raises(ConfigError, match="vectors_int4.npy is missing or not the file"):
        Companion.load(mixed, "arabertv02")
    (mixed / "reader" / "vectors_int4.npy").unlink()
    with pytest.raises(ConfigError, match="vectors_int4.npy is missing or not the file"):
        Companion.load(mixed, "arabertv02")
    _edit_json(mixed / "reader" / "reader.json", int4_rows=3)
    with pytest.raises(ConfigError, match=r"vectors.npy: expected \("):
        Companion.load(mixed, "arabertv02")


def test_compacting_the_reader_is_all_or_nothing(tuned, tmp_path, monkeypatch):
    """A compaction that fails midway (here: writing reader.onnx, after the table) leaves the reader as it was, every
    file matching reader.json's checksums; an int8 table whose scales are gone is refused by name, nothing written."""
    import onnx

    from arabert_pipeline.qa.transformer.companion import Companion, compact_companion

    _, out, _, _ = tuned
    compact = tmp_path / "compact"
    shutil.copytree(out, compact)
    before = {p.name: p.read_bytes() for p in (compact / "reader").iterdir()}

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(onnx, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        compact_companion(compact, min_elements=1024)
    assert {p.name: p.read_bytes() for p in (compact / "reader").iterdir()} == before
    Companion.load(compact, "arabertv02")  # its checksums still hold
    monkeypatch.undo()
    compact_companion(compact, min_elements=1024)
    (compact / "reader" / "vector_scales.npy").unlink()
    after = {p.name: p.read_bytes() for p in (compact / "reader").iterdir()}
    with pytest.raises(ConfigError, match="vectors.npy is already int8 but vector_scales.npy is missing"):
        compact_companion(compact, min_elements=1024)
    assert {p.name: p.read_bytes() for p in (compact / "reader").iterdir()} == after


def _exported(tuned, tmp_path):
    _, out, _, _ = tuned
    onnx_dir = tmp_path / "onnx"
    shutil.copytree(out, onnx_dir)
    assert main(["export-onnx", str(onnx_dir)]) == 0
    return onnx_dir


@pytest.mark.slow
def test_a_damaged_int8_cache_entry_of_the_reader_is_rebuilt(tuned, tmp_path, monkeypatch):
    from arabert_pipeline import Pipeline
    from arabert_pipeline.finetuning import runtime

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    onnx_dir = _exported(tuned, tmp_path)
    examples = _squad(tmp_path / "fresh.json", 6, seed=7)
    questions, contexts = [f"ما {MARKER} ؟"] * len(examples), [e["context"] for e in examples]
    before = [(a.text, a.start) for a in Pipeline(str(onnx_dir), quantize=True).answer(questions, contexts)]
    for entry in (tmp_path / "cache" / "arabert_pipeline" / "int8").glob("*.onnx"):
        entry.write_bytes(b"")  # a disk that filled while it was written, a cleaner gone wrong
    quantized = []
    quantize = runtime.int8_model
    monkeypatch.setattr(runtime, "int8_model", lambda path: quantized.append(Path(path).name) or quantize(path))
    qa = Pipeline(str(onnx_dir), quantize=True)
    assert sorted(quantized) == ["model.onnx", "reader.onnx"]
    assert [(a.text, a.start) for a in qa.answer(questions, contexts)] == before
    Pipeline(str(onnx_dir), quantize=True)
    assert len(quantized) == 2  # rebuilt entries are trusted again


def test_an_int8_reader_graph_that_cannot_load_is_named_by_its_cache_file(tuned, tmp_path, monkeypatch):
    from arabert_pipeline import Pipeline
    from arabert_pipeline.finetuning import runtime

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    onnx_dir = _exported(tuned, tmp_path)
    quantize = runtime.int8_model
    monkeypatch.setattr(runtime, "int8_model",
                        lambda path: b"not a graph" if Path(path).name == "reader.onnx" else quantize(path))
    with pytest.raises(ConfigError) as caught:
        Pipeline(str(onnx_dir), quantize=True)
    message = str(caught.value)
    assert message.startswith(str(tmp_path / "cache" / "arabert_pipeline" / "int8")), message
    assert "int8 copy of" in message and "reader.onnx" in message

"""The ONNX Runtime backend: `export-onnx`, windows from `tokenizers` alone, answers equal to the torch path's, no
torch or transformers import, stale or foreign exports refused."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from arabert_pipeline.errors import ConfigError
from arabert_pipeline.pipeline.cli import DEMO_FILE

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

SHIPPED = Path(__file__).resolve().parents[1] / "arabert_pipeline" / "models" / "arabert-mini"
DEMO = json.loads(DEMO_FILE.read_text(encoding="utf-8"))
QUESTION = "ماذا شاهدنا في القاهرة؟"
CONTEXT = ("شاهدنا مسرحيّة «مصرع كليوباتـــرا» سنة ١٩٢٧ في القاهرة، وكتبنا عنها على http://example.com/a?b=1 "
           "ثم راسلنا info@example.org وقلنا: يا للروعة!!!! ولم يكن ابنُ سينا هناك. " * 3)


def _examples(n: int | None = None) -> list[dict]:
    from arabert_pipeline.qa.data import read_squad

    examples = read_squad("arcd-test", misaligned="keep").examples
    return examples[:n] if n else examples


@pytest.fixture(scope="session")
def tiny_onnx(tmp_path_factory) -> Path:
    """A random BERT QA model with every input the ONNX path must carry: token type 2 (question overlap), a sentence
    prior with its IDF table, weights stored in fp16 as the shipped model's are; exported."""
    from transformers import BertConfig, BertForQuestionAnswering

    from arabert_pipeline import Preprocessor
    from arabert_pipeline.qa.overlap import KeyIDF
    from arabert_pipeline.qa.transformer.bonuses import SENTENCE_IDF_FILE
    from arabert_pipeline.qa.transformer.export import export_onnx
    from arabert_pipeline.tokenizer.export import save_tokenizer, wordpiece_backend

    directory = tmp_path_factory.mktemp("tiny-onnx") / "model"
    texts = Preprocessor("arabertv02").preprocess_batch([e["context"] + " " + e["question"] for e in DEMO]
                                                        + [CONTEXT])
    words = sorted({w for t in texts for w in t.split()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted({c for w in words for c in w}), *words[:300]]
    save_tokenizer(wordpiece_backend(list(dict.fromkeys(vocab)), "arabertv02"), directory,
                   preprocessing="arabertv02", max_seq_length=64, doc_stride=24, question_overlap=True,
                   sentence_prior=2.0, within_sentence=True, decoding="expected-f1")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(dict.fromkeys(vocab)), hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=128, type_vocab_size=3)
    BertForQuestionAnswering(config).half().save_pretrained(directory)
    (directory / SENTENCE_IDF_FILE).write_text(json.dumps(KeyIDF.from_texts(texts).to_json(), ensure_ascii=False),
                                               encoding="utf-8")
    export_onnx(directory)
    return directory


def _spans(found) -> list:
    return [[(a.start, a.end) for a in answers] for answers in found]


# Windows ------------------------------------------------------------------------------------------------------------

def _assert_same_windows(a, b) -> None:
    assert a.input_ids == b.input_ids
    assert a.token_type_ids == b.token_type_ids
    assert np.array_equal(a.example_index, b.example_index)
    assert np.array_equal(a.offsets, b.offsets)


@pytest.mark.parametrize("max_seq_length, doc_stride, max_question_tokens, overlap", [
    (256, 128, 64, False),  # the shipped model's settings
    (384, 128, 64, True),   # the project defaults, with question-overlap token types
    (64, 24, 8, True),      # many windows per context, questions cut
])
def test_windows_from_tokenizers_equal_the_transformers_windows_on_arcd_test(shared_data, max_seq_length, doc_stride,
                                                                            max_question_tokens, overlap):
    from arabert_pipeline.finetuning.tokenizer_adapter import TokenizerAdapter
    from arabert_pipeline.qa.align import QAPreprocessing
    from arabert_pipeline.qa.transformer.features import build_windows
    from arabert_pipeline.tokenizer.load import load_pretrained_tokenizer

    preprocessing = QAPreprocessing("arabertv02")
    examples = _examples()[::4]  # a slice through all the articles, the longest contexts included
    questions = [preprocessing.question(e["question"]) for e in examples]
    contexts = [preprocessing.context(e["context"]).text for e in examples]
    settings = dict(max_seq_length=max_seq_length, doc_stride=doc_stride, max_question_tokens=max_question_tokens,
                    question_overlap=overlap)
    reference = build_windows(load_pretrained_tokenizer(SHIPPED), questions, contexts, **settings)
    adapter = TokenizerAdapter.from_directory(SHIPPED)
    _assert_same_windows(build_windows(adapter, questions, contexts, **settings), reference)
    # several windows per context somewhere (windows of 384 hold every context of the test-data slices whole)
    assert len(reference) > len(examples) or max_seq_length > 256


def test_windows_equal_with_a_wordpiece_tokenizer(tiny_onnx):
    from arabert_pipeline.finetuning.tokenizer_adapter import TokenizerAdapter
    from arabert_pipeline.qa.transformer.features import build_windows
    from arabert_pipeline.tokenizer.load import load_pretrained_tokenizer

    questions = [e["question"] for e in DEMO] + ["؟" * 40]
    contexts = [e["context"] for e in DEMO] + [CONTEXT]
    for overlap in (False, True):
        settings = dict(max_seq_length=48, doc_stride=16, max_question_tokens=12, question_overlap=overlap)
        _assert_same_windows(build_windows(TokenizerAdapter.from_directory(tiny_onnx), questions, contexts, **settings),
                             build_windows(load_pretrained_tokenizer(tiny_onnx), questions, contexts, **settings))


# Answers ------------------------------------------------------------------------------------------------------------

def test_onnx_answers_equal_torch_answers_with_overlap_types_prior_decoding_and_fp16_weights(tiny_onnx):
    from arabert_pipeline import Pipeline

    onnx, plain = Pipeline(tiny_onnx), Pipeline(tiny_onnx, backend="torch")
    assert (onnx.backend, plain.backend) == ("onnx", "torch")
    assert onnx.qa.settings.question_overlap and onnx.qa.settings.sentence_prior == 2.0
    assert onnx.qa.settings.within_sentence and onnx.qa.settings.decoding == "expected-f1"
    questions = [e["question"] for e in DEMO] + [QUESTION]
    contexts = [e["context"] for e in DEMO] + [CONTEXT]
    ours, theirs = onnx.answer(questions, contexts, top_k=5), plain.answer(questions, contexts, top_k=5)
    assert _spans(ours) == _spans(theirs)
    for a, b, context in zip(ours, theirs, contexts, strict=True):
        assert [x.score for x in a] == pytest.approx([x.score for x in b], abs=1e-4)
        assert all(x.text == context[x.start : x.end] for x in a)
    # The graph holds no weights: it reads them, in fp16, from model.safetensors.
    import onnx

    graph = onnx.load(str(tiny_onnx / "model.onnx"), load_external_data=False).graph
    external = [t for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert not [t.name for t in graph.initializer if t not in external and np.prod(t.dims) >= 64]
    assert {e.value for t in external for e in t.external_data if e.key == "location"} == {"model.safetensors"}
    assert {t.data_type for t in external} == {onnx.TensorProto.FLOAT16}


def _assert_int8_answers_as_fp32(exact, int8) -> None:
    """The answers' texts are sliced from the context whatever the weights: only the logits and the best span compared
    with fp32's show the int8 weights to be the model's. Here the context logits spread over about 0.5 and int8 moves
    them by under 0.01."""
    logits = []
    for qa in (exact, int8):
        found = qa.qa.logits([{"question": QUESTION, "context": CONTEXT}], 8)
        inside = found.windows.offsets[..., 0] >= 0
        logits.append([found.start[inside], found.end[inside]])
    for got, expected in zip(logits[1], logits[0], strict=True):
        np.testing.assert_allclose(got, expected, rtol=0, atol=0.03)
    expected, answers = exact.answer(QUESTION, CONTEXT, top_k=3), int8.answer(QUESTION, CONTEXT, top_k=3)
    assert answers and all(a.text == CONTEXT[a.start : a.end] for a in answers)
    assert (answers[0].start, answers[0].end) == (expected[0].start, expected[0].end)
    assert answers[0].score == pytest.approx(expected[0].score, abs=0.01)


def _int8_rows_by_hand(original: dict, stored: dict) -> dict:
    """{name: fp32 table} of the tables a file of int8 rows (`stored`: its raw tensors) stands for, rebuilt here from
    the module docstring of weights/rows.py rather than through it, after checking each against the weights it was made
    from (`original`): every scale is its block's largest |value| / 127 and every int8 value within half a step of the
    value it stands for. Scales stored 0.5% off would still leave the weights within 1% of the originals and both
    backends agreeing with each other."""
    from arabert_pipeline.weights.rows import EXACT_SUFFIX, INDEX_SUFFIX, SCALE_SUFFIX

    rebuilt = {}
    for name, quantized in stored.items():
        if name + SCALE_SUFFIX not in stored:
            continue
        scale, index = stored[name + SCALE_SUFFIX], stored.get(name + INDEX_SUFFIX)
        values = original[name].astype(np.float64)
        rows = values if index is None else values[index < 0]  # the int8 rows, in table order
        grouped = rows.reshape(len(rows), scale.shape[1], -1)
        largest = np.abs(grouped).max(axis=2)
        assert scale.dtype == np.float32 and quantized.dtype == np.int8, name
        np.testing.assert_allclose(scale, np.where(largest > 0, largest / 127, 1.0), rtol=1e-6, err_msg=name)
        widened = quantized.astype(np.float32).reshape(grouped.shape) * scale[..., None]
        assert (np.abs(widened - grouped) <= scale[..., None] * (0.5 + 1e-5)).all(), name
        widened = widened.reshape(quantized.shape)
        if index is not None:
            table = np.empty(values.shape, dtype=np.float32)
            table[index >= 0] = stored[name + EXACT_SUFFIX][index[index >= 0]].astype(np.float32)
            table[index < 0] = widened[-1 - index[index < 0]]
            widened = table
        rebuilt[name] = widened
    return rebuilt


def _assert_int8_per_output_column(graph, weight_matmuls: int) -> None:
    """The form quantize=True specifies for the ONNX backend: every MatMul over a weight runs as MatMulInteger on int8
    weights with one scale per output column (per channel) and zero points of 0 (symmetric); activations quantized on
    the fly (DynamicQuantizeLinear). Per-tensor scales or uint8 weights also stay within the logit tolerance of the
    answer tests, so the graph's form is checked itself."""
    import onnx
    from onnx import numpy_helper

    initializers = {i.name: i for i in graph.initializer}
    assert not [n.name for n in graph.node if n.op_type == "MatMul" and any(i in initializers for i in n.input)], \
        "a MatMul over a weight left in fp32"
    matmuls = [n for n in graph.node if n.op_type == "MatMulInteger"]
    assert len(matmuls) == weight_matmuls
    consumers = {i for n in graph.node for i in n.input}
    for node in matmuls:
        weight, zero_point = initializers[node.input[1]], initializers[node.input[3]]
        scale = initializers[node.input[1].removesuffix("_quantized") + "_scale"]
        columns = weight.dims[1]
        assert len(weight.dims) == 2 and weight.data_type == onnx.TensorProto.INT8, node.name
        assert list(zero_point.dims) == [columns] and zero_point.data_type == onnx.TensorProto.INT8, node.name
        assert not numpy_helper.to_array(zero_point).any(), node.name
        assert list(scale.dims) == [columns] and scale.data_type == onnx.TensorProto.FLOAT, node.name
        scales = numpy_helper.to_array(scale)
        assert (scales > 0).all() and scale.name in consumers, node.name
        # one scale per column: each column's largest weight reaches the int8 range's end
        assert (np.abs(numpy_helper.to_array(weight).astype(np.int16)).max(axis=0) >= 127).all(), node.name


@pytest.mark.parametrize("block, exact", [(None, False), *(pytest.param(*case, marks=pytest.mark.slow)
                                                      for case in [(16, False), (None, True), (16, True)])])
def test_int8_row_storage_runs_the_same_fp32_weights_on_both_backends(tiny_onnx, tmp_path, block, exact):
    """Issue 53's compact storage: int8 rows in model.safetensors, widened to fp32 by the torch loader and by the
    graph (the word embeddings looked up before they are widened; with `exact`, some of their rows kept as stored and
    the others int8); both backends give the same answers, a stale export is refused, and --plain writes a checkpoint
    transformers loads alone."""
    import onnx
    from safetensors.numpy import load_file
    from transformers import AutoModelForQuestionAnswering

    from arabert_pipeline import Pipeline
    from arabert_pipeline.qa.transformer.export import export_onnx
    from arabert_pipeline.weights.header import storage_of
    from arabert_pipeline.weights.loading import dequantized_arrays, write_plain
    from arabert_pipeline.weights.rows import compact

    directory = tmp_path / "int8"
    shutil.copytree(tiny_onnx, directory)
    original = load_file(str(tiny_onnx / "model.safetensors"))
    table = next(name for name in original if name.endswith("word_embeddings.weight"))
    kept_rows = np.arange(3, len(original[table]), 2) if exact else None  # every other row from 3: interleaved
    counts = compact(tiny_onnx / "model.safetensors", directory / "model.safetensors", min_elements=1024,
                     blocks={"": block},  # one scale per row, or per 16 values of a row
                     exact_rows={"word_embeddings": kept_rows} if exact else None)
    assert counts["quantized"] >= 5
    assert storage_of(directory / "model.safetensors") == ("int8-rows+exact-rows" if exact else "int8-rows")
    by_hand = _int8_rows_by_hand(original, load_file(str(directory / "model.safetensors")))
    assert len(by_hand) == counts["quantized"]
    for name, values in dequantized_arrays(directory / "model.safetensors").items():
        assert np.array_equal(values, by_hand.get(name, original[name])), name
    widened = by_hand[table]
    if exact:  # the kept rows are the stored values, the others within int8's rounding of them
        assert np.array_equal(widened[kept_rows], original[table][kept_rows].astype(np.float32))
        others = np.setdiff1d(np.arange(len(widened)), kept_rows)
        assert not np.array_equal(widened[others], original[table][others].astype(np.float32))
    np.testing.assert_allclose(widened, original[table].astype(np.float32), atol=0.01 * np.abs(original[table]).max())
    with pytest.raises(ConfigError, match="re-export"):
        Pipeline(directory, backend="onnx")
    export_onnx(directory)
    graph = onnx.load(str(directory / "model.onnx"), load_external_data=False).graph
    gathers = [n for n in graph.node if n.op_type == "Gather" and n.input[0].endswith("word_embeddings.weight")]
    assert gathers
    assert {i.data_type for i in graph.initializer if i.name == gathers[0].input[0]} == {onnx.TensorProto.INT8}
    if exact:  # looked up in both stores, the row index choosing
        assert {"Where", "GreaterOrEqual"} <= {n.op_type for n in graph.node}
        assert any(n.op_type == "Gather" and n.input[0].endswith("word_embeddings.weight/exact") for n in graph.node)
    onnx_qa, torch_qa = Pipeline(directory), Pipeline(directory, backend="torch")
    assert (onnx_qa.backend, torch_qa.backend) == ("onnx", "torch")
    stored = {**original, **by_hand}
    for name, values in torch_qa.qa.model.state_dict().items():
        if name in stored:
            assert np.array_equal(values.numpy(), stored[name].astype(np.float32)), name
    questions = [e["question"] for e in DEMO] + [QUESTION]
    contexts = [e["context"] for e in DEMO] + [CONTEXT]
    ours, theirs = onnx_qa.answer(questions, contexts, top_k=5), torch_qa.answer(questions, contexts, top_k=5)
    assert _spans(ours) == _spans(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert [x.score for x in a] == pytest.approx([x.score for x in b], abs=1e-4)
    assert Pipeline(directory, quantize=True).answer(questions[0], contexts[0]) is not None  # dynamic int8 still runs
    from arabert_pipeline.finetuning.runtime import int8_model, write_standalone

    dynamic = onnx.load_from_string(int8_model(directory / "model.onnx")).graph
    assert not [i.name for i in dynamic.initializer if "/scale_quantized" in i.name], "the row scales quantized again"
    with pytest.raises(ConfigError, match="int8 rows, which the 4-bit quantizer does not read"):
        write_standalone(directory, tmp_path / "int4", weight_bits=4)
    if exact:  # a damaged row index is refused by name before the graph runs on it (the fingerprint is the layout's)
        from arabert_pipeline.weights.header import read_safetensors_header
        from arabert_pipeline.weights.rows import INDEX_SUFFIX

        damaged = tmp_path / "damaged"
        shutil.copytree(directory, damaged)
        weights = damaged / "model.safetensors"
        header = read_safetensors_header(weights)
        begin = header.data_start + header.tensors[table + INDEX_SUFFIX]["data_offsets"][0]
        data = bytearray(weights.read_bytes())
        data[begin + 4 * 3 : begin + 4 * 4] = data[begin + 4 * 5 : begin + 4 * 6]  # two ids on one row, in place
        weights.write_bytes(bytes(data))
        with pytest.raises(ConfigError, match="not a whole int8 table") as caught:
            Pipeline(damaged).answer(questions[0], contexts[0])
        assert str(damaged / "model.safetensors") in str(caught.value)
    plain = write_plain(directory, tmp_path / "plain")
    model = AutoModelForQuestionAnswering.from_pretrained(plain, dtype=torch.float32)
    for name, values in model.state_dict().items():
        if name in stored:
            assert np.array_equal(values.numpy(), stored[name].astype(np.float32)), name


def test_int8_onnx_model_answers_spans(tiny_onnx):
    import onnx

    from arabert_pipeline import Pipeline
    from arabert_pipeline.finetuning.runtime import int8_model

    graph = onnx.load_from_string(int8_model(tiny_onnx / "model.onnx")).graph
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= {node.op_type for node in graph.node}
    _assert_int8_per_output_column(graph, weight_matmuls=6 * 2 + 1)  # q, k, v, out, up, down a layer; qa_outputs
    qa = Pipeline(tiny_onnx, quantize=True)
    assert qa.backend == "onnx" and qa.quantized
    _assert_int8_answers_as_fp32(Pipeline(tiny_onnx, backend="torch"), qa)


@pytest.mark.slow
def test_an_fp32_model_dir_quantizes_too(tiny_onnx, tmp_path, monkeypatch):
    """Weights used without a Cast stay references into model.safetensors after ONNX Runtime's folding; in an fp32
    dir that is all of them, and the quantizer once failed looking for them beside its temporary copy."""
    from safetensors.torch import load_file, save_file

    from arabert_pipeline import Pipeline
    from arabert_pipeline.qa.transformer.export import export_onnx

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    fp32 = tmp_path / "fp32"
    shutil.copytree(tiny_onnx, fp32)
    weights = load_file(fp32 / "model.safetensors")
    save_file({k: v.float() for k, v in weights.items()}, fp32 / "model.safetensors", metadata={"format": "pt"})
    export_onnx(fp32)
    int8 = Pipeline(fp32, quantize=True)
    assert int8.quantized
    _assert_int8_answers_as_fp32(Pipeline(fp32, quantize=False), int8)


def test_int8_answers_do_not_depend_on_the_questions_asked_with_them(tiny_onnx):
    """Dynamic int8 scales activations per tensor: windows batched together would change each other's logits."""
    from arabert_pipeline import Pipeline

    examples = DEMO + [{"question": QUESTION, "context": CONTEXT * 3}]  # several windows of different lengths
    qa = Pipeline(tiny_onnx, quantize=True)
    together = qa.answer([e["question"] for e in examples], [e["context"] for e in examples], top_k=3)
    alone = [qa.answer(e["question"], e["context"], top_k=3) for e in examples]
    assert _spans(together) == [_spans([found])[0] for found in alone]
    assert [[a.score for a in found] for found in together] == [[a.score for a in found] for found in alone]


def test_the_int8_graph_is_quantized_once_and_then_read_from_the_cache(tiny_onnx, tmp_path, monkeypatch):
    from arabert_pipeline import Pipeline
    from arabert_pipeline.finetuning import runtime

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []
    quantize = runtime.int8_model
    monkeypatch.setattr(runtime, "int8_model", lambda path: calls.append(path) or quantize(path))
    first = Pipeline(tiny_onnx, quantize=True).answer(QUESTION, CONTEXT, top_k=3)
    second = Pipeline(tiny_onnx, quantize=True).answer(QUESTION, CONTEXT, top_k=3)
    assert len(calls) == 1 and len(list((tmp_path / "arabert_pipeline" / "int8").glob("*.onnx"))) == 1
    assert [(a.start, a.end, a.score) for a in first] == [(a.start, a.end, a.score) for a in second]


@pytest.mark.parametrize("damage", [lambda p: p.write_bytes(b""), lambda p: p.write_bytes(p.read_bytes()[:-100]),
                                    lambda p: p.with_name(p.name + ".sha256").unlink()])
def test_a_damaged_int8_cache_entry_is_rebuilt(tiny_onnx, tmp_path, monkeypatch, damage):
    from arabert_pipeline import Pipeline
    from arabert_pipeline.finetuning import runtime

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = Pipeline(tiny_onnx, quantize=True).answer(QUESTION, CONTEXT, top_k=3)
    (entry,) = (tmp_path / "arabert_pipeline" / "int8").glob("*.onnx")
    damage(entry)
    calls = []
    quantize = runtime.int8_model
    monkeypatch.setattr(runtime, "int8_model", lambda path: calls.append(path) or quantize(path))
    again = Pipeline(tiny_onnx, quantize=True).answer(QUESTION, CONTEXT, top_k=3)
    assert len(calls) == 1
    assert [(a.start, a.end, a.score) for a in first] == [(a.start, a.end, a.score) for a in again]
    Pipeline(tiny_onnx, quantize=True)
    assert len(calls) == 1


def test_an_int8_graph_that_cannot_load_is_named_by_its_cache_file(tiny_onnx, tmp_path, monkeypatch):
    from arabert_pipeline import Pipeline
    from arabert_pipeline.errors import ConfigError
    from arabert_pipeline.finetuning import runtime

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(runtime, "int8_model", lambda path: b"not a graph")
    with pytest.raises(ConfigError) as caught:
        Pipeline(tiny_onnx, quantize=True)
    (entry,) = (tmp_path / "arabert_pipeline" / "int8").glob("*.onnx")
    assert str(caught.value).startswith(f"{entry} (the int8 copy of {tiny_onnx / 'model.onnx'}): ONNX Runtime cannot")


def test_a_model_that_chose_int8_on_dev_serves_int8_unless_told_otherwise(tiny_onnx, tmp_path):
    import shutil

    from arabert_pipeline import Pipeline
    from arabert_pipeline.artifacts.metadata import write_metadata

    assert not Pipeline(tiny_onnx).quantized  # no decision recorded: fp32
    chose = tmp_path / "chose-int8"
    shutil.copytree(tiny_onnx, chose)
    write_metadata(chose, quantize_by_default=True)
    assert Pipeline(chose).quantized and Pipeline(chose, quantize=True).quantized
    assert not Pipeline(chose, quantize=False).quantized
    # The decision was measured on ONNX Runtime's int8 graph: torch keeps fp32 unless asked.
    assert not Pipeline(chose, backend="torch").quantized


@pytest.mark.slow
def test_shipped_model_runs_on_onnx_with_the_torch_answers_on_arcd_test(shared_data):
    from arabert_pipeline import Pipeline
    from arabert_pipeline.evaluate.metrics import score_question

    examples = _examples(120)
    onnx = Pipeline("arabert", whole_words=False, quantize=False)  # fp32 against fp32: int8 has its own test
    assert onnx.backend == "onnx"
    plain = Pipeline("arabert", whole_words=False, backend="torch")
    questions, contexts = [e["question"] for e in examples], [e["context"] for e in examples]
    ours, theirs = onnx.answer(questions, contexts), plain.answer(questions, contexts)
    same = sum((a.start, a.end) == (b.start, b.end) for a, b in zip(ours, theirs, strict=True)) / len(examples)
    assert same >= 0.99
    f1 = [np.mean([score_question(e, a.text, a.start)["soqal_f1"] for e, a in zip(examples, found, strict=True)])
          for found in (ours, theirs)]
    assert f1[0] == pytest.approx(f1[1], abs=0.005)


@pytest.mark.slow
def test_the_onnx_path_imports_neither_torch_nor_transformers():
    code = (
        "import sys\n"
        "from arabert_pipeline import Pipeline\n"
        "from arabert_pipeline.cli import main\n"
        "answer = Pipeline('arabert').answer('ما هي عاصمة الأردن؟', 'عمّان هي عاصمة الأردن وأكبر مدنها.')\n"
        "assert answer.text, answer\n"
        "assert main(['answer', '--question', 'أين تقع البتراء؟', '--context', 'تقع البتراء في جنوب الأردن.']) == 0\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


# Refusals -----------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_stale_foreign_or_missing_exports_are_refused(tiny_onnx, tmp_path):
    from arabert_pipeline import Pipeline
    from arabert_pipeline.qa.transformer.export import export_onnx

    copy = tmp_path / "model"
    shutil.copytree(tiny_onnx, copy)
    config = json.loads((copy / "config.json").read_text(encoding="utf-8"))
    (copy / "config.json").write_text(json.dumps({**config, "layer_norm_eps": 1e-5}), encoding="utf-8")
    with pytest.raises(ConfigError, match="exported from another config.json or weights file.*export-onnx"):
        Pipeline(copy)
    assert Pipeline(copy, backend="torch").backend == "torch"
    export_onnx(copy)  # an earlier export of ours is replaced
    assert Pipeline(copy).backend == "onnx"

    # the damaged file is named, not the graph that reads it (issue 60)
    (copy / "model.safetensors").write_bytes((copy / "model.safetensors").read_bytes()[:1000])
    with pytest.raises(ConfigError, match="model.safetensors: not a readable safetensors file"):
        Pipeline(copy)

    (copy / "model.onnx").write_bytes(b"not onnx")
    with pytest.raises(ConfigError, match="not written by export-onnx"):
        export_onnx(copy)

    (copy / "model.onnx").unlink()
    assert Pipeline(tiny_onnx, backend="auto").backend == "onnx"
    with pytest.raises(ConfigError, match="has no model.onnx"):
        Pipeline(copy, backend="onnx")
    with pytest.raises(ConfigError, match="backend must be one of"):
        Pipeline(tiny_onnx, backend="tensorflow")
    with pytest.raises(ConfigError, match="runs on the CPU"):
        Pipeline(tiny_onnx, backend="onnx", device="cuda")


def test_export_refuses_a_tokenizer_that_tokenizers_alone_reads_otherwise(tiny_onnx, tmp_path):
    from arabert_pipeline.qa.transformer.export import export_onnx

    copy = tmp_path / "model"
    shutil.copytree(tiny_onnx, copy)
    config = json.loads((copy / "tokenizer_config.json").read_text(encoding="utf-8"))
    del config["model_input_names"]  # BertTokenizer implies token types; tokenizer.json alone cannot say so
    (copy / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "BertTokenizer"}),
                                                encoding="utf-8")
    with pytest.raises(ConfigError, match="model_input_names"):
        export_onnx(copy)


@pytest.mark.slow
def test_cli_export_onnx_then_answer_on_onnx(tiny_onnx, tmp_path, capsys):
    from arabert_pipeline.cli import main

    copy = tmp_path / "model"
    shutil.copytree(tiny_onnx, copy)
    (copy / "model.onnx").unlink()
    assert main(["export-onnx", str(copy)]) == 0
    assert "logits checked against torch" in capsys.readouterr().out
    for backend in ("onnx", "torch"):
        assert main(["answer", "--model", str(copy), "--backend", backend, "--question", QUESTION,
                     "--context", CONTEXT]) == 0
    first, second = capsys.readouterr().out.split("answer: ")[1:]
    assert first.splitlines()[0] == second.splitlines()[0]
    assert main(["export-onnx", str(tmp_path / "nothing")]) == 2
    assert "no config.json" in capsys.readouterr().err


def test_answering_sessions_hold_no_memory_arena(tiny_onnx):
    """ONNX Runtime's CPU arena keeps the peak memory of any run for the session's life: a server's memory rose to the
    largest input it was ever sent and stayed there."""
    from arabert_pipeline import Pipeline
    from arabert_pipeline.finetuning.runtime import session_options

    assert session_options().enable_cpu_mem_arena is False
    for quantize in (False, True):
        session = Pipeline(tiny_onnx, quantize=quantize).qa.session
        assert session.get_session_options().enable_cpu_mem_arena is False

"""Pipeline.answer and `arabert-pipeline answer` with tiny models built here (no shared data needed).

Two kinds of model: a random BERT L2/H64 (answers are arbitrary, but must always be spans of the original context)
and a "planted" model with no transformer layer whose QA head fires on one vocabulary token only, so the right
answer is known: it checks long contexts (answer in a late window) and offsets through normalization/segmentation.
"""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

from arabert_pipeline.errors import ConfigError, InputError
from arabert_pipeline.pipeline import core
from arabert_pipeline.pipeline.cli import DEMO_FILE

torch = pytest.importorskip("torch")

DEMO = json.loads(DEMO_FILE.read_text(encoding="utf-8"))
PLANTED = "زنجبار"  # one vocabulary token; neither normalization nor Farasa changes it
# The planted word as written in the context: with diacritics and tatweel, which preprocessing removes.
PLANTED_WRITTEN = "زَنْجِبـــار"
NOISY_CONTEXT = ("شاهدنا مسرحيّة «مصرع كليوباتـــرا» سنة ١٩٢٧ في القاهرة، وكتبنا عنها على http://example.com/a?b=1 "
                 "ثم راسلنا info@example.org 😀 وقلنا: يا للروعة!!!! ولم يكن ابنُ سينا هناك.")


def _long_context(repeats: int = 6) -> str:
    body = " ".join(e["context"] for e in DEMO)
    return " ".join([body] * repeats) + f" وفي آخر الرحلة وصلنا إلى {PLANTED_WRITTEN} حيث انتهت القصة."


def build_model(directory, preprocessing: str, *, planted: bool = False, **settings):
    """A WordPiece vocab trained on the demo texts (preprocessed) and a random or planted BERT QA model."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig, BertForQuestionAnswering, BertTokenizerFast

    from arabert_pipeline import Preprocessor
    from arabert_pipeline.artifacts.metadata import write_metadata

    texts = [e["context"] + " " + e["question"] for e in DEMO] + [NOISY_CONTEXT] + [PLANTED] * 50
    wordpiece = BertWordPieceTokenizer(lowercase=False, strip_accents=False)
    wordpiece.train_from_iterator(Preprocessor(preprocessing).preprocess_batch(texts), vocab_size=600,
                                  show_progress=False)
    directory.mkdir(parents=True, exist_ok=True)
    wordpiece.save_model(str(directory))
    tokenizer = BertTokenizerFast(vocab=str(directory / "vocab.txt"), do_lower_case=False, strip_accents=False)
    tokenizer.save_pretrained(directory)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=0 if planted else 2,
                        num_attention_heads=2, intermediate_size=128, max_position_embeddings=512)
    model = BertForQuestionAnswering(config)
    if planted:
        assert tokenizer.tokenize(PLANTED) == [PLANTED]
        with torch.no_grad():
            embeddings = model.bert.embeddings
            embeddings.position_embeddings.weight.zero_()
            embeddings.token_type_embeddings.weight.zero_()
            embeddings.word_embeddings.weight[tokenizer.convert_tokens_to_ids(PLANTED), 0] = 10.0
            model.qa_outputs.weight.zero_()
            model.qa_outputs.weight[:, 0] = 3.0  # start and end logits both read dimension 0
            model.qa_outputs.bias.zero_()
    model.save_pretrained(directory)
    write_metadata(directory, preprocessing=preprocessing, **settings)
    return directory


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """model_dir(preprocessing, planted) → a model dir built on first use (build_model), the same one after."""
    built = {}

    def make(preprocessing: str = "arabertv02", planted: bool = False):
        key = (preprocessing, planted)
        if key not in built:
            directory = tmp_path_factory.mktemp(f"qa-{preprocessing}-{'planted' if planted else 'random'}")
            # Small windows, so that a few hundred characters already need several of them.
            built[key] = build_model(directory / "model", preprocessing, planted=planted,
                                     max_seq_length=96, doc_stride=32)
        return built[key]

    return make


@pytest.fixture(scope="session")
def pipeline(model_dir):
    from arabert_pipeline import Pipeline

    return Pipeline(model_dir())


def _check_spans(context: str, answers) -> None:
    assert answers, "no answer at all"
    for a in answers:
        assert a.text and a.text == context[a.start : a.end], a
        assert a.text == a.text.strip()
        assert 0 < a.score <= 1


def _context_logits(qa, question: str, context: str):
    """The start and end logits of a Pipeline's model at the context's tokens, window after window."""
    logits = qa.qa.logits([{"question": question, "context": context}], 8)
    inside = logits.windows.offsets[..., 0] >= 0
    return logits.start[inside], logits.end[inside]


def _assert_same_model(reference, qa, question: str, context: str, atol: float, top: int) -> None:
    """`qa` computes the `reference` model's logits, give or take `atol`, and answers with the reference's spans: its
    first among the reference's first `top` (near-ties may swap under rounding; other weights answer elsewhere)."""
    for got, expected in zip(_context_logits(qa, question, context), _context_logits(reference, question, context),
                             strict=True):
        np.testing.assert_allclose(got, expected, rtol=0, atol=atol)
    answers = qa.answer(question, context, top_k=3)
    _check_spans(context, answers)
    expected = reference.answer(question, context, top_k=max(top, 2))[:top]  # top_k=1 answers an Answer, no list
    assert (answers[0].start, answers[0].end) in [(a.start, a.end) for a in expected]


# Answers are spans of the original context ---------------------------------------------------------------------

@pytest.mark.parametrize("preprocessing", [pytest.param("none", marks=pytest.mark.slow),
                                           pytest.param("arabertv02", marks=pytest.mark.slow), "arabertv2"])
def test_answers_are_spans_of_the_original_context(model_dir, preprocessing):
    from arabert_pipeline import Pipeline

    qa = Pipeline(model_dir(preprocessing))
    assert qa.preprocessing == preprocessing
    contexts = [NOISY_CONTEXT, DEMO[1]["context"], _long_context(2)]
    for context in contexts:
        answers = qa.answer("ماذا شاهدنا في القاهرة؟", context, top_k=8)
        _check_spans(context, answers)
        assert len(answers) == 8
    # A random model's spans are sliced from the context whatever the offsets: only a known answer shows them right.
    planted = Pipeline(model_dir(preprocessing, planted=True))
    word = PLANTED if preprocessing == "none" else PLANTED_WRITTEN  # "none" keeps the diacritics: another token
    for context in contexts:
        for cut in (0, context.index("،") + 1, len(context)):  # first word, after the noisy part, last word
            text = f"{context[:cut]} {word} {context[cut:]}"
            start = len(context[:cut]) + 1
            answer = planted.answer("ماذا شاهدنا في القاهرة؟", text)
            assert (answer.text, answer.start, answer.end) == (word, start, start + len(word)), (preprocessing, cut)


@pytest.mark.parametrize("preprocessing", ["none", "arabertv02", "arabertv2"])
def test_answer_offsets_are_exact_without_widening_before_punctuation_and_at_the_end(model_dir, preprocessing):
    """The decoded span itself, not widened to whole words: widening puts back a start shifted inside the word, and an
    end read one character late is hidden where a space follows the answer. Here punctuation or the end of the text
    follows it, and its expected span is where it was put."""
    from arabert_pipeline import Pipeline

    planted = Pipeline(model_dir(preprocessing, planted=True), whole_words=False)
    word = PLANTED if preprocessing == "none" else PLANTED_WRITTEN  # "none" keeps the diacritics: another token
    other = DEMO[1]["context"]
    for before, after in (("", "، " + other), (other + " «", "»."), (other + " ", ""), (other + " (", ")؟"),
                          (other + " ", "."), (other + "\n", "؛ " + other)):
        text = before + word + after
        answer = planted.answer("إلى أين وصلنا؟", text)
        assert (answer.text, answer.start, answer.end) == (word, len(before), len(before) + len(word)), \
            (preprocessing, before[-3:], after[:3])


@pytest.mark.parametrize("preprocessing", ["arabertv02", "arabertv2"])
def test_planted_answer_in_a_late_window_comes_back_in_original_spelling(model_dir, preprocessing):
    from arabert_pipeline import Pipeline

    qa = Pipeline(model_dir(preprocessing, planted=True))
    context = _long_context()
    windows = qa.qa.tokenizer(qa.qa.preprocessor.context(context).text, return_length=True)["length"][0]
    assert windows > 10 * qa.qa.settings.max_seq_length  # the answer is far beyond the first window
    answer = qa.answer("إلى أين وصلنا في آخر الرحلة؟", context)
    start = context.index(PLANTED_WRITTEN)
    assert (answer.text, answer.start, answer.end) == (PLANTED_WRITTEN, start, start + len(PLANTED_WRITTEN))
    assert answer.score > 0.5


def test_an_answer_inside_a_word_farasa_splits_comes_back_as_its_exact_original_span(model_dir, tmp_path):
    """arabertv2 turns "وَالكِتَابُ" into "و+ ال+ كتاب": a model whose span is "ال+ كتاب" answers "الكِتَابُ", the
    original characters of those segments (diacritics included, the conjunction left out) with whole_words=False, and
    the whole word by default. The planted word of the other tests is one Farasa leaves whole."""
    from transformers import BertForQuestionAnswering

    from arabert_pipeline import Pipeline

    directory = tmp_path / "split"
    shutil.copytree(model_dir("arabertv2", planted=True), directory)
    model = BertForQuestionAnswering.from_pretrained(directory)
    vocab = (directory / "vocab.txt").read_text(encoding="utf-8").splitlines()
    with torch.no_grad():  # the start logit fires on the token "ال", the end logit on "كتاب"
        embeddings = model.bert.embeddings.word_embeddings.weight
        embeddings[vocab.index("ال"), 1] = 10.0
        embeddings[vocab.index("كتاب"), 2] = 10.0
        model.qa_outputs.weight.zero_()
        model.qa_outputs.weight[0, 1] = model.qa_outputs.weight[1, 2] = 3.0
    model.save_pretrained(directory)
    context = "قرأ خالد «وَالكِتَابُ» معه في بيته، ثم نام."  # the only "ال" segment of the context
    word = context.index("وَالكِتَابُ")
    exact = Pipeline(directory, whole_words=False).answer("ماذا قرأ خالد؟", context)
    assert (exact.text, exact.start, exact.end) == ("الكِتَابُ", word + 2, word + len("وَالكِتَابُ"))
    whole = Pipeline(directory).answer("ماذا قرأ خالد؟", context)
    assert (whole.text, whole.start, whole.end) == ("وَالكِتَابُ", word, word + len("وَالكِتَابُ"))


def test_top_k_is_ordered_distinct_and_consistent_with_top_1(pipeline):
    context = DEMO[0]["context"]
    answers = pipeline.answer(DEMO[0]["question"], context, top_k=5)
    _check_spans(context, answers)
    scores = [a.score for a in answers]
    assert scores == sorted(scores, reverse=True)
    assert len({(a.start, a.end) for a in answers}) == len(answers) == 5
    assert sum(scores) <= 1 + 1e-6  # probabilities over the candidate spans
    best = pipeline.answer(DEMO[0]["question"], context)
    assert (best.start, best.end) == (answers[0].start, answers[0].end)
    assert best.score == pytest.approx(answers[0].score)


@pytest.mark.slow
def test_batch_gives_the_individual_results(pipeline, monkeypatch):
    questions = [e["question"] for e in DEMO] + ["ماذا شاهدنا؟"]
    contexts = [e["context"] for e in DEMO] + [_long_context(2)]
    one_by_one = [pipeline.answer(q, c, top_k=3) for q, c in zip(questions, contexts, strict=True)]
    monkeypatch.setattr(core, "EXAMPLES_PER_CHUNK", 3)  # several chunks, and batches mixing windows of examples
    monkeypatch.setattr(pipeline, "batch_size", 4)
    batched = pipeline.answer(questions, contexts, top_k=3)
    assert len(batched) == len(questions)
    for single, many, context in zip(one_by_one, batched, contexts, strict=True):
        _check_spans(context, many)
        assert [(a.start, a.end) for a in many] == [(a.start, a.end) for a in single]
        assert [a.score for a in many] == pytest.approx([a.score for a in single], abs=1e-4)
    best = pipeline.answer(tuple(questions), tuple(contexts))
    assert [(a.start, a.end) for a in best] == [(r[0].start, r[0].end) for r in one_by_one]


# Bad input ------------------------------------------------------------------------------------------------------

Q, C = DEMO[0]["question"], DEMO[0]["context"]


@pytest.mark.parametrize("question, context, top_k, expected", [
    ("", C, 1, "question: is empty"),
    (" \n\t", C, 1, "question: is empty"),
    ("?!", C, 1, "question: has no letter or digit"),
    (Q, "\u064b\u064c", 1, "context: has no letter or digit"),  # diacritics alone are not letters
    (Q, "ق" * 1001, 1, "context: is 1,001 characters long, more than the 1,000 allowed"),
    (None, C, 1, "question: must be a str or a list of str, got NoneType"),
    (Q, 42, 1, "context: must be a str or a list of str, got int"),
    ([Q, Q], [C], 1, "2 questions but 1 contexts"),
    ([Q, ""], [C, C], 1, "question[1]: is empty"),
    ([Q, Q], [C, b"bytes"], 1, "context[1]: must be a str, got bytes"),
    ([Q, Q], [C, "... !!"], 1, "context[1]: has no letter or digit"),
    (Q, "ـــــ", 1, "context: nothing left after 'arabertv02' preprocessing"),  # tatweel: a letter, then nothing
    ([Q, "ـــ"], [C, C], 1, "question[1]: nothing left after 'arabertv02' preprocessing"),
    ([], [], 1, "empty lists"),
    (Q, [C], 1, "both as str, or both as lists"),
    (Q, C, 0, "top_k: must be a positive integer"),
    (Q, C, "3", "top_k: must be a positive integer"),
    (Q, C, True, "top_k: must be a positive integer"),
])
def test_bad_input_is_a_value_error_naming_the_argument(pipeline, question, context, top_k, expected, monkeypatch):
    monkeypatch.setattr(pipeline, "max_context_chars", 1000)
    with pytest.raises(ValueError) as caught:  # noqa: PT011  the type and message are checked below
        pipeline.answer(question, context, top_k=top_k)
    assert isinstance(caught.value, InputError)
    assert expected in str(caught.value)


# Loading ----------------------------------------------------------------------------------------------------------

def test_bundled_name_without_the_model_is_a_clear_error(tmp_path, monkeypatch):
    from arabert_pipeline import Pipeline

    monkeypatch.setattr("arabert_pipeline.pipeline.inputs.MODELS_DIR", tmp_path)
    with pytest.raises(ConfigError, match="default model 'arabert' is not bundled in this checkout"):
        Pipeline()
    with pytest.raises(ConfigError, match="does not exist"):
        Pipeline("./no/such/model")
    (tmp_path / "not-a-model").mkdir()
    with pytest.raises(ConfigError, match="no config.json"):
        Pipeline(tmp_path / "not-a-model")


def test_local_models_load_without_network(model_dir, tmp_path, monkeypatch):
    from arabert_pipeline import Pipeline
    from arabert_pipeline.qa.transformer.model import QAModel

    def no_network(*args, **kwargs):
        raise AssertionError(f"network used: {args}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    # The bundled name resolves to arabert_pipeline/models/<BUNDLED_MODELS[name]>.
    shutil.copytree(model_dir(), tmp_path / core.BUNDLED_MODELS["arabert"])
    monkeypatch.setattr("arabert_pipeline.pipeline.inputs.MODELS_DIR", tmp_path)
    for qa in (Pipeline(), Pipeline("arabert"), Pipeline(str(model_dir())),
               Pipeline(QAModel.load(model_dir()), batch_size=2)):
        _check_spans(C, [qa.answer(Q, C)])
    with pytest.raises(ConfigError, match="trained with preprocessing 'arabertv02', not 'arabertv2'"):
        Pipeline(model_dir(), preprocessing="arabertv2")


def _fp32_reference(directory):
    """A Pipeline on the stored weights loaded here by transformers in fp32 and checked against the file, not through
    the loader under test (whose own fp32 load is then compared with it)."""
    from safetensors.torch import load_file
    from transformers import AutoModelForQuestionAnswering

    from arabert_pipeline import Pipeline
    from arabert_pipeline.qa.transformer.model import QAModel

    model = AutoModelForQuestionAnswering.from_pretrained(directory, dtype=torch.float32).eval()
    stored = load_file(str(directory / "model.safetensors"))
    weights = model.state_dict()
    assert stored and all(torch.equal(weights[name], tensor.float()) for name, tensor in stored.items())
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    settings_only = QAModel.load(directory)  # its tokenizer and settings; its weights are replaced
    return Pipeline(QAModel(model, settings_only.tokenizer, settings_only.preprocessing, settings_only.settings))


def test_torch_quantize_true_makes_every_linear_an_int8_dynamic_module(model_dir):
    """quantize=True on the torch backend is int8 dynamic quantization of every nn.Linear (qint8 weights, activations
    quantized on the fly): fp16 dynamic quantization, or a layer left in fp32, also stays within the logit tolerance of
    the answer tests, so the module's form is checked itself."""
    from arabert_pipeline import Pipeline

    plain, int8 = Pipeline(model_dir(), backend="torch"), Pipeline(model_dir(), backend="torch", quantize=True)
    linears = {name: m for name, m in plain.qa.model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert len(linears) == 6 * 2 + 1  # q, k, v, out, up, down a layer; qa_outputs
    quantized = dict(int8.qa.model.named_modules())
    assert not [name for name, m in quantized.items() if isinstance(m, torch.nn.Linear)], "a Linear left in fp32"
    for name, linear in linears.items():
        module = quantized[name]
        assert isinstance(module, torch.ao.nn.quantized.dynamic.Linear), name
        weight = module.weight()
        assert weight.dtype == torch.qint8 and weight.qscheme() in (torch.per_tensor_affine, torch.per_channel_affine)
        # the int8 values stand for the fp32 weights: within half a step of each
        steps = weight.q_per_channel_scales()[:, None] if weight.qscheme() == torch.per_channel_affine \
            else weight.q_scale()
        assert ((weight.dequantize() - linear.weight).abs() <= steps / 2 + 1e-7).all(), name


@pytest.mark.slow
def test_quantized_and_fp16_models_answer_spans(model_dir, tmp_path):
    from arabert_pipeline import Pipeline

    # The answers' texts are sliced from the context whatever the weights: only a comparison with fp32 shows the
    # int8 and fp16 weights to be the model's. A random model's context logits spread over about 0.5; int8 moves
    # them by under 0.01 here, fp16 weights by under 2e-4.
    fp32 = _fp32_reference(model_dir())
    asked = [("ماذا شاهدنا؟", NOISY_CONTEXT), (Q, C)]
    loaded = Pipeline(model_dir())
    for question, context in asked:  # the loader's fp32 is the file's: the same logits, bit for bit
        for got, expected in zip(_context_logits(loaded, question, context), _context_logits(fp32, question, context),
                                 strict=True):
            np.testing.assert_array_equal(got, expected)
    qa = Pipeline(model_dir(), quantize=True)
    assert any("quantized.dynamic" in type(m).__module__ for m in qa.qa.model.modules())
    for question, context in asked:
        _assert_same_model(fp32, qa, question, context, atol=0.03, top=10)
        # int8 weights are not the fp32 ones: an int8 request answered in fp32 would compute these logits exactly.
        assert any(not np.array_equal(got, expected) for got, expected in
                   zip(_context_logits(qa, question, context), _context_logits(fp32, question, context), strict=True))
    half = tmp_path / "fp16"
    shutil.copytree(model_dir(), half)
    from transformers import AutoModelForQuestionAnswering

    AutoModelForQuestionAnswering.from_pretrained(half).half().save_pretrained(half)  # shipped in fp16 to save space
    qa = Pipeline(half)
    assert {p.dtype for p in qa.qa.model.parameters()} == {torch.float32}  # computed in fp32 on CPU
    for question, context in asked:
        _assert_same_model(fp32, qa, question, context, atol=1e-3, top=1)
    with pytest.raises(ConfigError, match="device='cpu'"):
        Pipeline(model_dir(), quantize=True, device="cuda")
    with pytest.raises(ConfigError, match="batch_size"):
        Pipeline(model_dir(), batch_size=0)


def test_import_does_not_load_torch():
    code = ("import sys, arabert_pipeline, arabert_pipeline.pipeline, arabert_pipeline.pipeline.cli; "
            "print(sorted(m for m in ('torch', 'transformers', 'farasa', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# CLI --------------------------------------------------------------------------------------------------------------

def _cli(*argv) -> int:
    from arabert_pipeline.cli import main

    return main([str(a) for a in argv])


def test_cli_jsonl_round_trip(model_dir, tmp_path, capsys):
    source = tmp_path / "in.jsonl"
    lines = [{"id": e["id"], "question": e["question"], "context": e["context"]} for e in DEMO[:3]]
    lines.append({"question": DEMO[3]["question"], "context": DEMO[3]["context"]})  # no id: the line number
    source.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines[:2]) + "\n\n"
                      + "\n".join(json.dumps(x, ensure_ascii=False) for x in lines[2:]) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert _cli("answer", "--model", model_dir(), "--input", source, "--output", out) == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in records] == [e["id"] for e in DEMO[:3]] + [5]
    for record, line in zip(records, lines, strict=True):
        assert set(record) == {"id", "answer", "score", "start", "end"}
        assert line["context"][record["start"] : record["end"]] == record["answer"]
        assert 0 < record["score"] <= 1
    assert "4 answers written" in capsys.readouterr().err

    assert _cli("answer", "--model", model_dir(), "--input", source, "--top-k", "2") == 0  # to stdout
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(records) == 4 and all(len(r["top_k"]) == 2 and r["top_k"][0]["answer"] == r["answer"] for r in records)


@pytest.mark.parametrize("line, expected", [
    ("{not json", "line 2: invalid JSON"),
    ('{"n": ' + "9" * 5000 + "}", "line 2: invalid JSON (Exceeds the limit"),
    ("[" * 200_000 + "]" * 200_000, "line 2: invalid JSON (nested too deeply)"),
    ('["a list"]', "line 2: expected a JSON object"),
    ('{"question": "أين؟"}', "line 2: context: missing"),
    ('{"question": "؟!", "context": "تقع البتراء في الأردن"}', "line 2: question: has no letter or digit"),
    ('{"question": "أين؟", "context": "   "}', "line 2: context: is empty"),
    ('{"id": "demo-nile", "question": "أين؟", "context": "في الأردن"}', "line 2: id: duplicate id 'demo-nile'"),
    ('{"question": "أين؟", "context": "ـــــ"}', "line 2: context: nothing left after 'arabertv02' preprocessing"),
])
def test_cli_bad_line_is_named(model_dir, tmp_path, capsys, line, expected):
    source = tmp_path / "in.jsonl"
    first = json.dumps({"id": "demo-nile", "question": Q, "context": C}, ensure_ascii=False)
    source.write_text(first + "\n" + line + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert _cli("answer", "--model", model_dir(), "--input", source, "--output", out) == 2
    err = capsys.readouterr().err
    assert f"{source}: {expected}" in err and "Traceback" not in err
    assert not out.exists()


def test_cli_single_question_top_k_and_errors(model_dir, capsys):
    assert _cli("answer", "--model", model_dir(), "--question", Q, "--context", C, "--top-k", "2") == 0
    out = capsys.readouterr().out
    assert out.count("answer: ") == 2 and "score: " in out
    answer = out.split("answer: ", 1)[1].splitlines()[0]
    assert answer and answer in C
    assert _cli("answer", "--model", model_dir(), "--question", Q) == 2
    assert "--question needs --context" in capsys.readouterr().err
    assert _cli("answer", "--model", model_dir(), "--question", "؟?", "--context", C) == 2
    assert "--question: has no letter or digit" in capsys.readouterr().err


def test_cli_demo_prints_question_prediction_and_expected_answer(model_dir, tmp_path, monkeypatch, capsys):
    shutil.copytree(model_dir("arabertv02", planted=True), tmp_path / core.BUNDLED_MODELS["arabert"])
    monkeypatch.setattr("arabert_pipeline.pipeline.inputs.MODELS_DIR", tmp_path)
    assert _cli("answer", "--demo") == 0
    out = capsys.readouterr().out
    for e in DEMO:
        assert f"question:  {e['question']}" in out and f"expected:  {e['answers']['text'][0]}" in out
    assert out.count("predicted: ") == len(DEMO)
    monkeypatch.setattr("arabert_pipeline.pipeline.inputs.MODELS_DIR", tmp_path / "empty")
    assert _cli("answer", "--demo") == 2
    assert "not bundled in this checkout" in capsys.readouterr().err


def test_demo_partial_credit_counts_shared_words_only():
    from arabert_pipeline.pipeline.cli import shares_a_word

    assert shares_a_word("6650", "6650 كيلومترا") and shares_a_word("(الأردن)،", "جنوب الأردن")
    assert shares_a_word("والقانون", "القانون في الطب") and not shares_a_word("في البيت", "القانون في الطب")
    assert not shares_a_word("859", "عام 1859 للميلاد") and not shares_a_word("،", "،")


def test_demo_file_is_valid():
    assert len({e["id"] for e in DEMO}) == len(DEMO) >= 5
    for e in DEMO:
        assert core.has_arabic_letter(e["question"]) and core.has_arabic_letter(e["context"])
        for text, start in zip(e["answers"]["text"], e["answers"]["answer_start"], strict=True):
            assert e["context"][start : start + len(text)] == text


def test_call_takes_and_returns_what_hugging_face_s_qa_pipeline_does(pipeline):
    question, context = "ما هي عاصمة الأردن؟", "عمّان هي عاصمة المملكة الأردنية الهاشمية وأكبر مدنها."
    best = pipeline.answer(question, context)
    expected = {"score": best.score, "start": best.start, "end": best.end, "answer": best.text}
    assert pipeline(question=question, context=context) == expected
    assert pipeline(question, context) == expected
    assert pipeline({"question": question, "context": context}) == expected
    assert pipeline([{"question": question, "context": context}] * 2) == [expected, expected]
    ranked = pipeline(question=question, context=context, top_k=3)
    assert [r["answer"] for r in ranked] == [a.text for a in pipeline.answer(question, context, top_k=3)]
    assert ranked[0] == expected and set(ranked[1]) == {"score", "start", "end", "answer"}
    with pytest.raises(InputError, match="context"):
        pipeline({"question": question})
    with pytest.raises(InputError, match="context"):
        pipeline(question=question)


def test_decoding_override_is_the_model_with_that_setting_and_leaves_the_model_alone(model_dir):
    import dataclasses

    from arabert_pipeline import Pipeline

    plain = Pipeline(model_dir(), backend="torch")
    assert plain.qa.settings.decoding == "max-score"
    hedging = Pipeline(plain.qa, decoding="expected-f1")
    assert hedging.qa.settings.decoding == "expected-f1" and plain.qa.settings.decoding == "max-score"
    reference = plain.qa.__class__(plain.qa.model, plain.qa.tokenizer, plain.preprocessing,
                                   dataclasses.replace(plain.qa.settings, decoding="expected-f1"),
                                   sentence_idf=plain.qa.sentence_idf)
    examples = [{"question": d["question"], "context": d["context"]} for d in json.loads(DEMO_FILE.read_text())]
    assert ([a.text for a in hedging.answer([e["question"] for e in examples], [e["context"] for e in examples])]
            == [answers[0].text for answers in reference.predict(examples)])
    with pytest.raises(ConfigError, match="decoding must be one of max-score, expected-f1, got 'greedy'"):
        Pipeline(model_dir(), decoding="greedy")

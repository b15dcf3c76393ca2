"""Classification and NER end to end at tiny size (issue 40): `finetune --task classification|ner` learns the toys of
task_toys.py (high dev scores, or the recipe is broken), `export-onnx` exports them and writes the shipped int8 form,
and `Pipeline(task=...)`, `classify` and `tag` answer with them on ONNX Runtime as torch does, in Hugging Face's
output shapes, with entity offsets exact in the original text (diacritics, tatweel, Farasa's clitics)."""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

import task_toys as toys

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from arabert_pipeline.artifacts.metadata import read_metadata  # noqa: E402  after the importorskip above
from arabert_pipeline.cli import main  # noqa: E402  after the importorskip above
from arabert_pipeline.errors import ConfigError, InputError  # noqa: E402  after the importorskip above

REPO = Path(__file__).resolve().parents[1]
# Seeded training on a seeded toy: the scores are the same on every run; these bounds are what learning means here
# (chance is 50 for the classifier, ~0 entity F1 for a tagger that has not learnt where names are).
LEARNT = 95.0


def finetune(task: str, encoder: Path, output: Path, train: Path, dev: Path, *extra: str) -> dict:
    code = main(["finetune", "--task", task, "--model", str(encoder), "-o", str(output), "--train", str(train),
                 "--dev", str(dev), "--epochs", "4", "--lr", "1e-3", "--batch-size", "16", "--max-seq-length", "32",
                 "--no-progress", *extra])
    assert code == 0
    return read_metadata(output)


@pytest.fixture(scope="session")
def task_models(tmp_path_factory):
    """The toys' files, and the classifier and taggers fine-tuned on them, exported (model.onnx beside the weights)
    and in their shipped int8 form."""
    from arabert_pipeline.preprocess import Preprocessor

    root = tmp_path_factory.mktemp("task-toys")
    train_texts = toys.texts(240, 0)
    dev_texts = toys.texts(60, 1, exclude={r["text"] for r in train_texts})
    train_sentences = toys.sentences(160, 0)
    dev_sentences = toys.sentences(40, 1, exclude={" ".join(w) for w, _ in train_sentences})
    m = types.SimpleNamespace(root=root, dev_texts=dev_texts, dev_sentences=dev_sentences)
    m.train_jsonl = toys.write_jsonl(root / "train.jsonl", train_texts)
    m.dev_jsonl = toys.write_jsonl(root / "dev.jsonl", dev_texts)
    m.train_conll = toys.write_conll(root / "train.conll", train_sentences)
    m.dev_conll = toys.write_conll(root / "dev.conll", dev_sentences)
    corpus = [r["text"] for r in train_texts] + [" ".join(w) for w, _ in train_sentences]
    encoder = toys.tiny_encoder(root / "encoder", corpus)
    # A tagger of Farasa-segmented text (arabertv2), trained with the conjunction و on some names and verbs.
    segmented_train = toys.sentences(200, 2, clitics=True)
    segmented_dev = toys.sentences(40, 3, clitics=True, exclude={" ".join(w) for w, _ in segmented_train})
    m.train_clitics = toys.write_conll(root / "train-clitics.conll", segmented_train)
    m.dev_clitics = toys.write_conll(root / "dev-clitics.conll", segmented_dev)
    segmenter = Preprocessor("arabertv2")
    encoder_v2 = toys.tiny_encoder(root / "encoder-v2", segmenter.preprocess_batch(
        [" ".join(w) for w, _ in segmented_train]), preprocessing="arabertv2")
    with toys.one_thread():
        m.cls_meta = finetune("classification", encoder, root / "cls", m.train_jsonl, m.dev_jsonl)
        m.ner_meta = finetune("ner", encoder, root / "ner", m.train_conll, m.dev_conll)
        m.ner_v2_meta = finetune("ner", encoder_v2, root / "ner-v2", m.train_clitics, m.dev_clitics)
        for name in ("cls", "ner", "ner-v2"):
            assert main(["export-onnx", str(root / name), "--standalone", str(root / f"{name}-int8")]) == 0
    m.cls, m.ner, m.ner_v2 = root / "cls", root / "ner", root / "ner-v2"
    m.cls_int8, m.ner_int8, m.ner_v2_int8 = root / "cls-int8", root / "ner-int8", root / "ner-v2-int8"
    return m


# Fine-tuning learns ---------------------------------------------------------------------------------------------------

def test_the_classifier_learns_the_toy(task_models):
    meta = task_models.cls_meta
    assert meta["task"] == "text-classification" and meta["labels"] == ["NEG", "POS"]
    assert meta["dev_metric"] == "macro_f1" and max(meta["finetune"]["dev_scores"]) >= LEARNT
    assert meta["finetune"]["dev_scores"][0] < LEARNT  # it learnt: one epoch was not enough


def test_the_taggers_learn_the_toys(task_models):
    for meta in (task_models.ner_meta, task_models.ner_v2_meta):
        assert meta["task"] == "token-classification"
        assert meta["labels"] == ["O", "B-LOC", "I-LOC", "B-PERS", "I-PERS"]  # O, then each type's B- and I-
        assert meta["dev_metric"] == "micro_f1" and max(meta["finetune"]["dev_scores"]) >= LEARNT
        assert meta["finetune"]["dev_scores"][0] < LEARNT
    assert task_models.ner_v2_meta["preprocessing"] == "arabertv2"


# Export -----------------------------------------------------------------------------------------------------------

def test_the_shipped_form_holds_one_int8_copy_of_the_weights(task_models):
    for name in ("cls-int8", "ner-int8"):
        directory = task_models.root / name
        assert sorted(p.name for p in directory.iterdir()) == [
            "arabert_pipeline.json", "config.json", "model.onnx", "tokenizer.json", "tokenizer_config.json"]
        meta = read_metadata(directory)
        assert meta["weights"].startswith("int8") and meta["preprocessing"] == "none"
        assert meta["task"] == read_metadata(task_models.root / name.removesuffix("-int8"))["task"]


@pytest.mark.slow
def test_the_standalone_export_never_replaces_what_it_did_not_write(task_models, tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not written by `arabert-pipeline export-onnx --standalone`"):
        main(["--debug", "export-onnx", str(task_models.cls), "--standalone", str(foreign), "--overwrite"])
    for inside in (task_models.cls, task_models.cls / "int8"):
        with pytest.raises(ConfigError, match="is, holds or lies inside the model dir"):
            main(["--debug", "export-onnx", str(task_models.cls), "--standalone", str(inside)])
    assert not (task_models.cls / "int8").exists()
    with pytest.raises(ConfigError, match="nowhere: no such model directory"):
        main(["--debug", "export-onnx", str(tmp_path / "nowhere"), "--standalone", str(tmp_path / "x")])
    with pytest.raises(ConfigError, match="not a classification or NER model dir"):
        main(["--debug", "export-onnx", str(task_models.root / "encoder"), "--standalone", str(tmp_path / "x")])
    shipped = tmp_path / "shipped"
    assert main(["export-onnx", str(task_models.cls), "--standalone", str(shipped)]) == 0
    with pytest.raises(ConfigError, match="pass --overwrite"):
        main(["--debug", "export-onnx", str(task_models.cls), "--standalone", str(shipped)])
    (shipped / "README.md").write_text("the model card")
    assert main(["export-onnx", str(task_models.cls), "--standalone", str(shipped), "--overwrite"]) == 0
    assert (shipped / "README.md").read_text() == "the model card" and (shipped / "model.onnx").is_file()
    assert (foreign / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_the_4bit_form_is_smaller_answers_as_torch_and_may_replace_the_int8_form(task_models, tmp_path):
    import onnx

    from arabert_pipeline import Pipeline
    from arabert_pipeline.finetuning.runtime import INT8_KEY, STANDALONE_KEY

    shipped = tmp_path / "ner-4bit"
    shutil.copytree(task_models.ner_int8, shipped)
    with toys.one_thread():
        assert main(["export-onnx", str(task_models.ner), "--standalone", str(shipped), "--weight-bits", "4",
                     "--overwrite"]) == 0  # an int8 dir this export wrote is its own too
    assert read_metadata(shipped)["weights"].startswith("4-bit")
    graph = onnx.load(str(shipped / "model.onnx"))
    ops = {node.op_type for node in graph.graph.node}
    assert {"MatMulNBits", "GatherBlockQuantized"} <= ops and "MatMulInteger" not in ops
    props = {p.key: p.value for p in graph.metadata_props}
    assert STANDALONE_KEY in props and INT8_KEY not in props  # fp32 activations: batches need not be split
    assert (shipped / "model.onnx").stat().st_size < 0.6 * (task_models.ner_int8 / "model.onnx").stat().st_size
    sentences = [" ".join(words) for words, _ in task_models.dev_sentences]
    spans = [[(e["entity_group"], e["start"], e["end"]) for e in found]
             for found in Pipeline(task_models.ner, backend="torch")(sentences)]
    found = [[(e["entity_group"], e["start"], e["end"]) for e in f] for f in Pipeline(shipped)(sentences)]
    assert sum(a == b for a, b in zip(found, spans, strict=True)) >= 0.9 * len(spans)
    with pytest.raises(ConfigError, match="--weight-bits applies to --standalone"):
        main(["--debug", "export-onnx", str(task_models.ner), "--weight-bits", "4"])


def test_large_constants_are_stored_int8_and_dequantized_when_the_graph_runs():
    """int4_model's pass over the constants the weight-only quantizer leaves (DeBERTa's projected relative-position
    tables): a large one becomes int8 + scales behind a DequantizeLinear, a small one is left alone."""
    import numpy as np
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    from arabert_pipeline.finetuning.runtime import _int8_constants

    rng = np.random.default_rng(0)
    table = rng.normal(size=(2, 256, 160)).astype(np.float32)  # 81,920 values: above the threshold
    bias = rng.normal(size=(1, 160)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 256])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 160])
    graph = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "table"], ["xt"]), helper.make_node("Add", ["xt", "bias"], ["y"])],
        "g", [x], [y], [numpy_helper.from_array(table, "table"), numpy_helper.from_array(bias, "bias")]),
        opset_imports=[helper.make_opsetid("", 17)])
    inputs = {"x": rng.normal(size=(2, 3, 256)).astype(np.float32)}
    before = onnxruntime.InferenceSession(graph.SerializeToString())
    expected = before.run(None, inputs)[0]
    _int8_constants(graph)
    onnx.checker.check_model(graph)
    stored = {t.name: t.data_type for t in graph.graph.initializer}
    assert stored == {"table/int8": TensorProto.INT8, "table/scale": TensorProto.FLOAT, "bias": TensorProto.FLOAT}
    got = onnxruntime.InferenceSession(graph.SerializeToString()).run(None, inputs)[0]
    assert not np.array_equal(got, expected)  # quantized, and close
    assert np.abs(got - expected).max() < 0.02 * np.abs(expected).max()


def test_rare_embedding_rows_in_4bit_keep_the_frequent_rows_exact(task_models, tmp_path):
    """int4_rare_rows (the shipped sentiment graph's storage): texts whose tokens are all kept score exactly as
    before; with one row kept the others are 4-bit, close to the uint8 values and smaller; a graph without a uint8
    table, or no row kept, is refused by name."""
    import shutil

    import numpy as np
    import onnx
    from tokenizers import Tokenizer

    from arabert_pipeline import Pipeline
    from arabert_pipeline.errors import ConfigError
    from arabert_pipeline.finetuning.runtime import int4_rare_rows

    texts = [r["text"] for r in task_models.dev_texts]
    tokenizer = Tokenizer.from_file(str(task_models.cls_int8 / "tokenizer.json"))
    used = sorted({i for text in Pipeline(task_models.cls_int8).model.preprocess(texts)
                   for i in tokenizer.encode(text).ids})

    def scores(directory):
        model = Pipeline(directory).model
        return np.asarray(model.predict_proba(model.preprocess(texts), 16, preprocessed=True))

    expected = scores(task_models.cls_int8)
    sizes = {}
    for name, keep in (("kept", used), ("one-kept", [0])):
        directory = tmp_path / name
        shutil.copytree(task_models.cls_int8, directory)
        graph = onnx.load(str(directory / "model.onnx"))
        table = int4_rare_rows(graph, keep)
        onnx.save(graph, str(directory / "model.onnx"))
        sizes[name] = (directory / "model.onnx").stat().st_size
        assert "word_embeddings" in table
        if name == "kept":
            assert np.array_equal(scores(directory), expected)
        else:
            got = scores(directory)
            assert not np.array_equal(got, expected) and np.abs(got - expected).max() < 0.05
    assert sizes["one-kept"] < sizes["kept"] < (task_models.cls_int8 / "model.onnx").stat().st_size
    with pytest.raises(ConfigError, match="no uint8 embedding table"):
        int4_rare_rows(onnx.load(str(task_models.cls / "model.onnx"), load_external_data=False), [0])
    with pytest.raises(ConfigError, match="1 or more"):
        int4_rare_rows(onnx.load(str(task_models.cls_int8 / "model.onnx")), [])
    with pytest.raises(ConfigError, match="already split"):
        int4_rare_rows(onnx.load(str(tmp_path / "kept" / "model.onnx")), used)


# Answering: ONNX as torch, Hugging Face's shapes ------------------------------------------------------------------

def test_onnx_labels_are_torch_labels(task_models):
    from arabert_pipeline import Pipeline

    texts = [r["text"] for r in task_models.dev_texts]
    expected = [r["label"] for r in task_models.dev_texts]
    torch_labels = [r["label"] for r in Pipeline(task_models.cls, backend="torch")(texts)]
    for model in (task_models.cls, task_models.cls_int8):
        pipeline = Pipeline(model)
        assert pipeline.backend == "onnx"
        assert [r["label"] for r in pipeline(texts)] == torch_labels
    assert sum(a == b for a, b in zip(torch_labels, expected, strict=True)) >= 0.95 * len(expected)


@pytest.mark.parametrize("name", ["ner", "ner_v2"])
def test_onnx_entities_are_torch_entities(task_models, name):
    from arabert_pipeline import Pipeline

    sentences = [" ".join(words) for words, _ in task_models.dev_sentences]
    spans = [[(e["entity_group"], e["start"], e["end"]) for e in found]
             for found in Pipeline(getattr(task_models, name), backend="torch")(sentences)]
    for model in (getattr(task_models, name), getattr(task_models, f"{name}_int8")):
        found = Pipeline(model, task="ner")(sentences)
        assert [[(e["entity_group"], e["start"], e["end"]) for e in f] for f in found] == spans


def test_text_classification_shapes_are_hugging_faces(task_models):
    from arabert_pipeline import Pipeline

    pipeline = Pipeline(task_models.cls_int8, task="sentiment")
    one = pipeline("الفيلم جميل جدا")
    assert isinstance(one, list) and len(one) == 1 and set(one[0]) == {"label", "score"}
    assert one[0]["label"] == "POS" and 0.5 < one[0]["score"] <= 1
    many = pipeline(["الفيلم جميل جدا", "الخدمة سيء اليوم"])
    assert [r["label"] for r in many] == ["POS", "NEG"] and all(isinstance(r, dict) for r in many)
    ranked = pipeline("الفيلم جميل جدا", top_k=None)
    assert [r["label"] for r in ranked] == ["POS", "NEG"] and sum(r["score"] for r in ranked) == pytest.approx(1)
    assert pipeline(["الفيلم جميل جدا"], top_k=5) == [ranked]  # top_k past the classes: every class
    with pytest.raises(InputError, match=r"inputs\[1\]: is empty"):
        pipeline(["جميل", " "])
    with pytest.raises(InputError, match="top_k: must be a positive integer"):
        pipeline("جميل", top_k=0)


def test_token_classification_shape_and_offsets_in_the_text_as_given(task_models):
    from arabert_pipeline import Pipeline

    ner = Pipeline(task_models.ner_int8)
    text = "السيد حمدان بن سلمان زار مدينة نجران أمس"
    found = ner(text)
    assert [set(e) for e in found] == [{"entity_group", "score", "word", "start", "end"}] * 2
    assert [(e["entity_group"], e["word"]) for e in found] == [("PERS", "حمدان بن سلمان"), ("LOC", "نجران")]
    assert all(text[e["start"]:e["end"]] == e["word"] and 0 < e["score"] <= 1 for e in found)
    assert ner([text, text]) == [found, found]


def test_offsets_are_exact_through_diacritics_tatweel_and_farasa_clitics(task_models):
    """The arabertv2 tagger reads normalized, segmented text (`و+ حمدان`, diacritics and tatweel gone); its entities are
    whole words of the text as given, clitics and marks included."""
    from arabert_pipeline import Pipeline

    text = "السيدُ وحمدانُ بن سلمـــان زارَ مدينةَ ونجرانَ أمسِ!"
    expected = [("PERS", "وحمدانُ بن سلمـــان"), ("LOC", "ونجرانَ")]
    for backend in ("torch", "onnx"):
        found = Pipeline(task_models.ner_v2, task="ner", backend=backend)(text)
        assert [(e["entity_group"], text[e["start"]:e["end"]]) for e in found] == expected
        assert [e["word"] for e in found] == [w for _, w in expected]
        assert [e["start"] for e in found] == [text.index(w) for _, w in expected]


def test_task_names_resolve_to_shipped_models_and_a_missing_one_says_how_to_build_it(task_models, tmp_path,
                                                                                      monkeypatch):
    from arabert_pipeline import Pipeline

    monkeypatch.setattr("arabert_pipeline.pipeline.inputs.MODELS_DIR", tmp_path)
    for task, model in (("sentiment", "arabert-sentiment"), ("ner", "arabert-ner")):
        with pytest.raises(ConfigError, match=rf"'{model}' is not shipped.*export-onnx runs/\w+ --standalone "
                                              rf"arabert_pipeline/models/{model}"):
            Pipeline("arabert", task=task)
    shutil.copytree(task_models.cls_int8, tmp_path / "arabert-sentiment")
    assert Pipeline("arabert", task="sentiment").task == "text-classification"
    assert Pipeline("arabert-sentiment").backend == "onnx"
    with pytest.raises(ConfigError, match="is a text-classification model, not one for task 'ner'"):
        Pipeline(task_models.cls, task="ner")
    with pytest.raises(ConfigError, match="task 'summarization': use one of question-answering"):
        Pipeline("arabert", task="summarization")
    with pytest.raises(ConfigError, match="holds no torch weights"):
        Pipeline(task_models.cls_int8, backend="torch")
    with pytest.raises(ConfigError, match="not an option of the text-classification pipeline"):
        Pipeline(task_models.cls, decoding="max-score")


def test_a_text_with_nothing_left_after_preprocessing_is_refused_not_labelled(task_models, tmp_path):
    """Tatweel alone, a symbol, a letter of another script: the model would answer its empty input with a made-up
    label (or no entity), so the text is refused, as a QA context is."""
    from arabert_pipeline import Pipeline
    from arabert_pipeline.artifacts.metadata import write_metadata

    # The toy classifier reads raw text: the same model, recorded as normalized.
    normalized = tmp_path / "cls-arabertv02"
    shutil.copytree(task_models.cls_int8, normalized)
    write_metadata(normalized, preprocessing="arabertv02")
    for pipeline, name in ((Pipeline(normalized), "arabertv02"), (Pipeline(task_models.ner_v2_int8), "arabertv2")):
        with pytest.raises(InputError, match=rf"^inputs: nothing left after '{name}' preprocessing"):
            pipeline("ـــــ")
        with pytest.raises(InputError, match=r"^inputs\[1\]: nothing left after"):
            pipeline(["جميل", "²"])


def test_evaluate_resolves_a_shipped_models_name_as_pipeline_does(tmp_path, monkeypatch):
    from arabert_pipeline.evaluate.cli import shipped_or_given

    monkeypatch.setattr("arabert_pipeline.artifacts.models.PACKAGED_MODELS_DIR", tmp_path / "models")
    assert shipped_or_given("model", "arabert-sentiment") == ("model", str(tmp_path / "models" / "arabert-sentiment"))
    assert shipped_or_given("model", "arabert") == ("model", str(tmp_path / "models" / "arabert-mini"))
    assert shipped_or_given("model", "arabert", "ner") == ("model", str(tmp_path / "models" / "arabert-ner"))
    assert shipped_or_given("model", "arabert", "classification")[1].endswith("arabert-sentiment")
    assert shipped_or_given("model", "aubmindlab/bert-base-arabertv02") == ("model", "aubmindlab/bert-base-arabertv02")
    assert shipped_or_given("predictions", "arabert-ner") == ("predictions", "arabert-ner")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "arabert-ner").mkdir()  # a directory of that name where the user stands is theirs
    assert shipped_or_given("model", "arabert-ner") == ("model", "arabert-ner")


def test_an_unknown_preprocessing_is_named_as_such(task_models):
    from arabert_pipeline import Pipeline

    with pytest.raises(ConfigError, match="unknown preprocessing 'bogus'"):
        Pipeline(task_models.cls_int8, preprocessing="bogus")


def test_the_onnx_task_pipeline_never_imports_torch(task_models):
    script = ("import sys; from arabert_pipeline import Pipeline; "
              f"print(Pipeline({str(task_models.cls_int8)!r})('جميل')[0]['label'], "
              f"len(Pipeline({str(task_models.ner_int8)!r})('السيد حمدان زار مدينة نجران')), "
              "'torch' in sys.modules, 'transformers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["POS", "2", "False", "False"]


# The verbs ----------------------------------------------------------------------------------------------------------

def run_verb(argv: list[str], capsys, stdin: str | None = None, monkeypatch=None) -> list[dict]:
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8"))
    assert main(argv) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_classify_reads_arguments_stdin_and_files(task_models, capsys, monkeypatch, tmp_path):
    from arabert_pipeline import Pipeline

    model = ["--model", str(task_models.cls_int8)]
    texts = ["الفيلم جميل جدا", "الخدمة سيء اليوم"]
    assert run_verb(["classify", *model, *texts], capsys) == [
        {"id": i, **r} for i, r in enumerate(Pipeline(task_models.cls_int8)(texts), start=1)]
    lines = run_verb(["classify", *model, "--top-k", "2"], capsys, "\nالفيلم جميل جدا\n", monkeypatch)
    assert [line["id"] for line in lines] == [2] and [r["label"] for r in lines[0]["labels"]] == ["POS", "NEG"]
    source = tmp_path / "texts.jsonl"
    source.write_text('{"id": "a", "text": "الخدمة سيء اليوم"}\n\n{"text": "هذا رائع"}\n', encoding="utf-8")
    out = tmp_path / "labels.jsonl"
    assert main(["classify", *model, "--input", str(source), "--output", str(out)]) == 0
    assert [(r["id"], r["label"]) for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())] == [
        ("a", "NEG"), (3, "POS")]


def test_tag_writes_entities_with_offsets_into_each_line(task_models, capsys, tmp_path):
    source = tmp_path / "texts.txt"
    source.write_text("السيد حمدان زار مدينة نجران أمس\nلا أحد هنا\n", encoding="utf-8")
    lines = run_verb(["tag", "--model", str(task_models.ner_int8), "--input", str(source)], capsys)
    assert [line["id"] for line in lines] == [1, 2]
    assert [(e["entity_group"], e["word"], e["start"]) for e in lines[0]["entities"]] == [
        ("PERS", "حمدان", 6), ("LOC", "نجران", 22)]


@pytest.mark.parametrize("field, name", [("sep_token", "[MASK]"),
                                         *(pytest.param(*case, marks=pytest.mark.slow)
                                           for case in [("cls_token", "<s>"), ("cls_token", "[SEP]")])])
def test_tag_frames_texts_by_the_tokenizers_template_not_by_the_token_names_of_tokenizer_config(
        task_models, capsys, tmp_path, field, name):
    """[CLS] and [SEP] come from tokenizer.json's template, as QA's and classification's texts get them: a
    tokenizer_config.json naming another token ("<s>", not in the vocabulary; "[MASK]") changes no tag, on either
    backend, through `tag` as through the tagger. (transformers adds a token it does not find to the vocabulary, which
    the torch backend then refuses by name, as it does for QA and classification.)"""
    from arabert_pipeline.ner.model import OnnxTokenTagger, TokenTagger

    sentences = [words for words, _ in task_models.dev_sentences]
    source = tmp_path / "texts.txt"
    source.write_text("".join(" ".join(words) + "\n" for words in sentences), encoding="utf-8")
    for kind, model in ((TokenTagger, task_models.ner), (OnnxTokenTagger, task_models.ner_int8)):
        expected = kind.load(model).tag_words(sentences)
        entities = run_verb(["tag", "--model", str(model), "--input", str(source)], capsys)
        edited = tmp_path / f"{model.name}-{field}"
        shutil.copytree(model, edited)
        config = json.loads((edited / "tokenizer_config.json").read_text(encoding="utf-8"))
        assert config[field] != name
        (edited / "tokenizer_config.json").write_text(json.dumps({**config, field: name}), encoding="utf-8")
        if kind is TokenTagger and name == "<s>":
            with pytest.raises(ConfigError, match="the tokenizer files do not belong to this model"):
                kind.load(edited)
            continue
        assert kind.load(edited).tag_words(sentences) == expected, kind.__name__
        assert run_verb(["tag", "--model", str(edited), "--input", str(source)], capsys) == entities


@pytest.mark.parametrize("content, argv, message", [
    ('{"text": "جميل"}\n{"id": "b"}\n', [], r"texts.jsonl: line 2: text: missing"),
    ('{"text": "جميل"}\n{"text": 5}\n', [], r"texts.jsonl: line 2: text: must be a str, got int"),
    ('{"text": "جميل"}\n[1]\n', [], r"texts.jsonl: line 2: expected a JSON object, got list"),
    ('{"id": 7, "text": "جميل"}\n{"id": 7, "text": "رائع"}\n', [], r"texts.jsonl: line 2: id: duplicate id 7"),
    ("\n\n", [], r"texts.jsonl: no texts"),
    ('{"text": "جميل جدا"}\n', ["--max-chars", "3"], r"texts.jsonl: line 1: text: is 8 characters long"),
])
def test_bad_input_files_are_refused_naming_the_file_line_and_field(task_models, tmp_path, content, argv, message):
    source = tmp_path / "texts.jsonl"
    source.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=message):
        main(["--debug", "classify", "--model", str(task_models.cls_int8), "--input", str(source), *argv])


def test_the_verbs_read_past_a_byte_order_mark_and_name_the_line_a_text_fails_on(task_models, capsys, tmp_path):
    model = ["--model", str(task_models.ner_int8)]
    for name, content in (("texts.txt", "السيد حمدان زار مدينة نجران\n"),
                          ("texts.jsonl", '{"text": "السيد حمدان زار مدينة نجران"}\n')):
        source = tmp_path / name
        source.write_bytes(b"\xef\xbb\xbf" + content.encode("utf-8"))
        entities = run_verb(["tag", *model, "--input", str(source)], capsys)[0]["entities"]
        assert [(e["word"], e["start"]) for e in entities] == [("حمدان", 6), ("نجران", 22)]
    segmented = ["--model", str(task_models.ner_v2_int8)]  # the toy tagger that normalizes (and segments)
    source = tmp_path / "empty.txt"
    source.write_text("جميل\nـــ\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"empty\.txt: line 2: text: nothing left after 'arabertv2' preprocessing"):
        main(["--debug", "tag", *segmented, "--input", str(source)])
    with pytest.raises(InputError, match=r"^TEXT 2: nothing left after"):
        main(["--debug", "tag", *segmented, "جميل", "ـــ"])


def test_the_verbs_refuse_bad_arguments_before_loading(tmp_path, capsys):
    missing = str(tmp_path / "nowhere")
    assert main(["classify", "--model", missing, "..."]) != 0
    assert "TEXT 1: has no letter or digit" in capsys.readouterr().err
    assert main(["tag", "--model", missing, "نص", "--input", "x.jsonl"]) != 0
    assert "give texts as arguments or --input, not both" in capsys.readouterr().err
    assert main(["classify", "--model", missing, "--top-k", "0", "نص"]) != 0
    assert "--top-k: must be ≥ 1" in capsys.readouterr().err


def test_a_dev_entity_type_training_never_saw_counts_as_missed(task_models, tmp_path):
    """The warning says so, and the dev score must then count it, not fail on it after training."""
    dev = toys.write_conll(tmp_path / "dev-org.conll", [(["زار", "وزارة", "الصحة"], ["O", "B-ORG", "I-ORG"]),
                                                        *toys.sentences(10, 1)])
    meta = finetune("ner", task_models.root / "encoder", tmp_path / "ner-org", task_models.train_conll, dev,
                    "--epochs", "1")
    assert "B-ORG" not in meta["labels"] and meta["entity_types"] == ["LOC", "PERS"]
    assert 0 <= meta["finetune"]["dev_scores"][0] < 100  # the ORG entity is a miss


def test_finetune_refuses_a_label_named_twice(task_models, tmp_path):
    with pytest.raises(ConfigError, match="--labels names POS more than once"):
        main(["--debug", "finetune", "--task", "classification", "--model", str(task_models.root / "encoder"),
              "-o", str(tmp_path / "out"), "--train", str(task_models.train_jsonl), "--dev", str(task_models.dev_jsonl),
              "--labels", "POS", "POS", "NEG"])
    assert not (tmp_path / "out").exists()


# The lexical companion (add-lexical) ---------------------------------------------------------------------------------

def _three_class_texts(n: int, seed: int) -> list[dict]:
    import random

    rng = random.Random(seed)
    rows = toys.texts(n, seed)
    for row in rows[::3]:  # a third NEU: filler words only
        row.update(label="NEU", text=" ".join(rng.sample(toys.FILLER, 5)))
    return rows


@pytest.mark.parametrize("classes", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_the_lexical_companion_is_scikit_learns_model_stored_as_arrays(tmp_path, classes):
    """Saved (JSON + an npz read without pickle) and loaded back, the companion gives the probabilities of the
    scikit-learn pipeline it was taken from, two classes (one coefficient row in sklearn) or three."""
    from arabert_pipeline.classification.baselines import _normalized, fit_baseline
    from arabert_pipeline.classification.lexical import LexicalCompanion

    rows = toys.texts(120, 0) if classes == 2 else _three_class_texts(120, 0)
    for row in rows[::4]:  # what the transform must get right too: one- and two-letter words, case, repeats
        row["text"] += " و في لا AB ab Ok ي ي ي"
    labels = sorted({r["label"] for r in rows})
    baseline = fit_baseline("tfidf-lr", rows[:90], rows[90:], labels, max_word_features=50, max_char_features=300)
    LexicalCompanion.from_pipeline(baseline.model, "arabertv02").save(tmp_path / "lexical")
    companion = LexicalCompanion.load(tmp_path / "lexical", labels[::-1], "arabertv02")
    texts = _normalized([r["text"] for r in rows[90:]] + ["نص لم يره أحد", "", "ي", "في  في\tو AB"])
    expected = baseline.model.predict_proba(texts)
    assert list(baseline.model.classes_) == companion.labels
    assert abs(companion.predict_proba(texts) - expected).max() < 1e-5
    assert abs(companion.predict_proba(texts, labels[::-1]) - expected[:, ::-1]).max() < 1e-5
    with pytest.raises(ConfigError, match="lexical.json: labels"):
        LexicalCompanion.load(tmp_path / "lexical", ["A", "B"], "arabertv02")
    with pytest.raises(ConfigError, match="fitted on 'arabertv02' text, but the model reads 'arabertv2'"):
        LexicalCompanion.load(tmp_path / "lexical", labels, "arabertv2")


@pytest.mark.slow
def test_add_lexical_weighs_the_companion_on_dev_and_the_model_answers_with_it(task_models, tmp_path, capsys):
    import numpy as np

    from arabert_pipeline import Pipeline
    from arabert_pipeline.classification.lexical import WEIGHT_GRID, LexicalCompanion
    from arabert_pipeline.classification.model import OnnxTextClassifier

    m = task_models
    base = ["add-lexical", str(m.cls_int8), "--train", str(m.train_jsonl), "--dev", str(m.dev_jsonl)]
    assert main([*base, "-o", str(tmp_path / "chosen")]) == 0
    record = read_metadata(tmp_path / "chosen")["lexical"]
    assert [row["weight"] for row in record["dev_scores"]] == list(WEIGHT_GRID)
    best = max(row["score"] for row in record["dev_scores"])
    assert record["weight"] == min(row["weight"] for row in record["dev_scores"] if row["score"] == best)
    assert read_metadata(tmp_path / "chosen")["lexical_weight"] == record["weight"]

    assert main([*base, "-o", str(tmp_path / "half"), "--weight", "0.5"]) == 0
    texts = [r["text"] for r in m.dev_texts[:8]]
    alone = OnnxTextClassifier.load(m.cls_int8)
    companion = LexicalCompanion.load(tmp_path / "half" / "lexical", alone.labels, alone.preprocessing)
    expected = 0.5 * alone.predict_proba(texts) + 0.5 * companion.predict_proba(alone.preprocess(texts), alone.labels)
    answered = Pipeline(str(tmp_path / "half"))(texts, top_k=None)
    got = np.asarray([[next(a["score"] for a in row if a["label"] == label) for label in alone.labels]
                      for row in answered])
    assert abs(got - expected).max() < 1e-5
    assert not np.allclose(got, alone.predict_proba(texts), atol=1e-3)  # the companion moved the scores

    capsys.readouterr()
    assert main([*base, "-o", str(tmp_path / "bad"), "--weight", "1.5"]) == 2
    assert "--weight must be a number in [0, 1]" in capsys.readouterr().err
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert main([*base, "-o", str(foreign), "--overwrite"]) == 2
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    assert main(["add-lexical", str(m.ner_int8), "--train", str(m.train_jsonl), "--dev", str(m.dev_jsonl),
                 "-o", str(tmp_path / "ner")]) == 2
    assert "not a text classifier" in capsys.readouterr().err


def test_a_damaged_companion_is_named_not_half_read(task_models, tmp_path):
    import numpy as np

    from arabert_pipeline.classification.model import OnnxTextClassifier

    m = task_models
    out = tmp_path / "with-lexical"
    assert main(["add-lexical", str(m.cls_int8), "--train", str(m.train_jsonl), "--dev", str(m.dev_jsonl),
                 "-o", str(out), "--weight", "0.3"]) == 0
    weights = out / "lexical" / "weights.npz"
    with np.load(weights) as arrays:
        kept = dict(arrays)
    np.savez(weights, **{**kept, "coef": np.array([object()], dtype=object)})  # a pickle inside the npz
    with pytest.raises(ConfigError, match="weights.npz: unreadable"):
        OnnxTextClassifier.load(out)
    np.savez(weights, **{**kept, "coef": kept["coef"][:, :-1]})
    with pytest.raises(ConfigError, match="weights.npz: coef must be"):
        OnnxTextClassifier.load(out)
    np.savez(weights, **kept)
    settings = json.loads((out / "lexical" / "lexical.json").read_text(encoding="utf-8"))
    settings["char"]["params"]["analyzer"] = "shell"
    (out / "lexical" / "lexical.json").write_text(json.dumps(settings), encoding="utf-8")
    with pytest.raises(ConfigError, match="lexical.json: char: params: analyzer 'shell'"):
        OnnxTextClassifier.load(out)
    metadata = read_metadata(out)
    (out / "arabert_pipeline.json").write_text(json.dumps({**metadata, "lexical_weight": 2}), encoding="utf-8")
    with pytest.raises(ConfigError, match="lexical_weight must be a number in \\[0, 1\\]"):
        OnnxTextClassifier.load(out)


# The documented commands, on the shipped encoder itself ---------------------------------------------------------------

def documented_finetune_commands() -> list[list[str]]:
    """docs/tasks.md's `arabert-pipeline finetune ...` commands, as argument lists (continuation lines joined)."""
    text = (REPO / "docs" / "tasks.md").read_text(encoding="utf-8").replace("\\\n", " ")
    return [line.split()[1:] for line in text.splitlines() if line.startswith("arabert-pipeline finetune ")]


@pytest.mark.slow  # over a CPU second: the quick loop keeps this file's cheaper tests
@pytest.mark.parametrize("task", ["classification", "ner"])
def test_each_documented_finetune_command_trains_from_the_shipped_encoder(task, tmp_path):
    """Issue 60: the shipped encoder is stored in int8 rows; a task head (num_labels, id2label) must still be built on
    it. The command as docs/tasks.md gives it, its dataset names swapped for toy files, two steps."""
    commands = [c for c in documented_finetune_commands() if c[c.index("--task") + 1] == task]
    assert len(commands) == 1
    argv = commands[0]
    assert argv[argv.index("--model") + 1] == "arabert_pipeline/models/arabert-mini"
    argv[argv.index("--model") + 1] = str(REPO / "arabert_pipeline" / "models" / "arabert-mini")
    argv[argv.index("-o") + 1] = str(tmp_path / "out")
    if task == "classification":
        column = argv[argv.index("--label-column") + 1]
        rows = toys.texts(24, 0)
        files = [toys.write_jsonl(tmp_path / f"{part}.jsonl", [{"id": r["id"], "text": r["text"], column: r["label"]}
                                                              for r in rows[i::3]]) for i, part in enumerate("abc")]
    else:
        sentences = toys.sentences(24, 0)
        files = [toys.write_conll(tmp_path / f"{part}.conll", sentences[i::3]) for i, part in enumerate("abc")]
    for flag, file in zip(("--train", "--dev", "--hold-out"), files, strict=True):
        argv[argv.index(flag) + 1] = str(file)
    with toys.one_thread():
        assert main([*argv, "--max-steps", "2", "--batch-size", "4", "--max-seq-length", "32", "--no-progress"]) == 0
    meta = read_metadata(tmp_path / "out")
    assert meta["labels"]
    labels = json.loads((tmp_path / "out" / "config.json").read_text(encoding="utf-8"))["id2label"]
    assert sorted(labels.values()) == sorted(meta["labels"])

"""Nothing lost, round five (issue 60, classes 2–5 and the minor ones): model directories from strangers. The shared
tokenizer read without bounds; config.json's sizes built before they were compared with the weights; safetensors
headers that gave tracebacks, or blamed model.onnx; reader/ parts that match their checksums but not each other; NaN
row scales, a changed tokenizer its siblings record, tags that are no tags, a shipped task model copied alone, int8
weights without their storage metadata or scales.

Every case runs on a copy of the shipped models (arabert_pipeline/models, never changed) or a tiny model. Readers that
could hang or fill the memory run in a child process with a time and memory limit (test_hostile_round3.in_child);
the server runs as a child whose every wait is bounded.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from arabert_pipeline.artifacts.models import PACKAGED_MODELS_DIR, load_pretrained_model
from arabert_pipeline.errors import ConfigError
from arabert_pipeline.weights.header import read_safetensors_header
from arabert_pipeline.weights.rows import SCALE_SUFFIX, STORAGE_KEY
from arabert_pipeline.weights.shared_tokenizer import SHARED_TOKENIZER_FILE, read_tokenizer_json
from test_hostile_outputs import one_line_error
from test_hostile_round3 import in_child


def copy_models(tmp_path: Path, *names: str, ignore=None) -> Path:
    """The shipped model dirs `names`, copied side by side into TMP/models (as the package holds them)."""
    root = tmp_path / "models"
    for name in names:
        shutil.copytree(PACKAGED_MODELS_DIR / name, root / name, ignore=ignore)
    return root


def sibling_sharing(tmp_path: Path) -> tuple[Path, Path]:
    """(TMP/models/arabert-sentiment, its sibling `mini/` without a tokenizer.json yet), its reference renamed to it."""
    root = copy_models(tmp_path, "arabert-sentiment")
    model, mini = root / "arabert-sentiment", root / "mini"
    mini.mkdir()
    ref = json.loads((model / SHARED_TOKENIZER_FILE).read_text())
    (model / SHARED_TOKENIZER_FILE).write_text(json.dumps({**ref, "file": "../mini/tokenizer.json"}))
    return model, mini


# 2. The shared tokenizer, read as every other model-dir file is -----------------------------------------------------

READ_TOKENIZER = """
from arabert_pipeline.errors import ArabertPipelineError
from arabert_pipeline.weights.shared_tokenizer import read_tokenizer_json
try:
    read_tokenizer_json({model!r})
except ArabertPipelineError as exc:
    print("REFUSED", exc)
else:
    print("READ")
"""


@pytest.mark.parametrize("special, expected", [
    ("fifo", "mini/tokenizer.json: not a regular file (it is a FIFO)"),
    ("zero_link", "mini/tokenizer.json: not a regular file (it is a character device)"),
    ("sparse", "mini/tokenizer.json: 6,442,450,944 bytes, more than the 67,108,864"),
    ("reference_fifo", f"{SHARED_TOKENIZER_FILE}: not a regular file (it is a FIFO)"),
    ("own_sparse", "arabert-sentiment/tokenizer.json: 6,442,450,944 bytes, more than"),
])
def test_a_shared_tokenizer_that_is_no_bounded_regular_file_is_named_not_waited_on(tmp_path, special, expected):
    """A FIFO hung classify, Pipeline, serve and weights --plain; /dev/zero or a 6 GB sparse file ended in a
    MemoryError; so did a model dir's own oversized tokenizer.json."""
    model, mini = sibling_sharing(tmp_path)
    if special == "fifo":
        os.mkfifo(mini / "tokenizer.json")
    elif special == "zero_link":
        if not os.path.exists("/dev/zero"):
            pytest.skip("no /dev/zero on this platform")
        (mini / "tokenizer.json").symlink_to("/dev/zero")
    elif special == "reference_fifo":
        (model / SHARED_TOKENIZER_FILE).unlink()
        os.mkfifo(model / SHARED_TOKENIZER_FILE)
    else:  # sparse: no disk space taken
        with open(model / "tokenizer.json" if special == "own_sparse" else mini / "tokenizer.json", "wb") as f:
            f.truncate(6 * 2**30)
    code, out = in_child(READ_TOKENIZER.format(model=str(model)))
    assert code == 0 and out.startswith("REFUSED") and expected in out, out


def test_the_torch_backends_tokenizer_refuses_an_oversized_tokenizer_json(tmp_path):
    from arabert_pipeline.tokenizer.load import load_pretrained_tokenizer

    model = copy_models(tmp_path, "arabert-mini", ignore=shutil.ignore_patterns("model.*", "reader")) / "arabert-mini"
    with open(model / "tokenizer.json", "r+b") as f:
        f.truncate(6 * 2**30)
    with pytest.raises(ConfigError, match=r"tokenizer.json: 6,442,450,944 bytes, more than"):
        load_pretrained_tokenizer(model)


def test_a_nul_in_the_shared_tokenizers_name_is_a_config_error(tmp_path):
    model, _ = sibling_sharing(tmp_path)
    (model / SHARED_TOKENIZER_FILE).write_text(json.dumps({"file": "../mi\0ni/tokenizer.json", "sha256": "0" * 64}))
    with pytest.raises(ConfigError, match=r"file must be \.\./MODEL/tokenizer\.json"):
        read_tokenizer_json(model)


def lines_of(stream) -> queue.Queue:
    """The lines of a child's stream, read by a thread of their own so that every wait on them can be bounded."""
    lines: queue.Queue = queue.Queue()

    def read():
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def default_signals():
    """In the child: SIGINT and SIGTERM as a fresh process has them (a suite started as a background job ignores
    SIGINT, and a child would inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def opened_for_writing(fifo: Path) -> int | None:
    """A write end of `fifo` once a reader has it open (else None): the reader's open returns, and its read waits for
    bytes that never come."""
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # no reader yet
            return None
        raise


@pytest.mark.slow  # over a CPU second: the quick loop keeps this file's cheaper tests
def test_a_server_whose_task_model_shares_a_fifo_stops_on_sigterm(tmp_path):
    """The load read the FIFO forever, in a thread the interpreter waits for at exit: the server ignored SIGTERM."""
    model, mini = sibling_sharing(tmp_path)
    fifo = mini / "tokenizer.json"
    os.mkfifo(fifo)
    server = subprocess.Popen(
        [sys.executable, "-m", "arabert_pipeline.cli", "serve", "--port", "0", "--classify-model", str(model),
         "--tag-model", "none"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"}, preexec_fn=default_signals)
    lines, writer = lines_of(server.stderr), None
    try:
        # Until the load has reached the FIFO: it refused it (and the server stops), or it is reading it.
        deadline = time.monotonic() + 120
        while server.poll() is None and writer is None and time.monotonic() < deadline:
            writer = opened_for_writing(fifo)
            time.sleep(0.05)
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)
        if writer is not None:
            os.close(writer)
    seen = []
    while (line := lines.get(timeout=30)) is not None:
        seen.append(line)
    output = "".join(seen)
    # Stopped: by the load's refusal of the FIFO (the one-line error), or by the SIGTERM (exit 0).
    assert code in (0, 2) and "Traceback" not in output, output
    if code == 2:
        one_line_error(output, "mini/tokenizer.json: not a regular file (it is a FIFO)")


# 2, minor: the tokenizer its siblings share; a shipped task model copied or linked elsewhere ------------------------

def test_the_tokenizer_its_siblings_share_is_checked_against_their_digest(tmp_path):
    """Two vocabulary pieces of arabert-mini's tokenizer.json swapped: every answer of the three models changed."""
    from arabert_pipeline.tokenizer.load import load_pretrained_tokenizer

    root = copy_models(tmp_path, "arabert-mini", "arabert-sentiment", "arabert-ner",
                       ignore=shutil.ignore_patterns("model.*", "reader", "lexical"))
    mini = root / "arabert-mini"
    assert read_tokenizer_json(mini)[1] == mini / "tokenizer.json"  # as shipped: the digest the siblings record
    tokenizer = json.loads((mini / "tokenizer.json").read_text(encoding="utf-8"))
    pieces = tokenizer["model"]["vocab"]
    pieces[1000], pieces[1001] = pieces[1001], pieces[1000]
    (mini / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")
    expected = (r"arabert-mini/tokenizer\.json is not the tokenizer .*/arabert-(ner|sentiment)/"
                r"tokenizer\.shared\.json records for it")
    with pytest.raises(ConfigError, match=expected):
        read_tokenizer_json(mini)
    with pytest.raises(ConfigError, match=expected):
        load_pretrained_tokenizer(mini)


def test_a_shipped_task_model_linked_elsewhere_finds_its_sibling_where_it_lives(tmp_path):
    from arabert_pipeline.finetuning.tokenizer_adapter import TokenizerAdapter

    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "sentiment").symlink_to(PACKAGED_MODELS_DIR / "arabert-sentiment")
    text, path = read_tokenizer_json(tmp_path / "deploy" / "sentiment")
    assert path.resolve() == (PACKAGED_MODELS_DIR / "arabert-mini" / "tokenizer.json").resolve()
    assert len(TokenizerAdapter.from_directory(tmp_path / "deploy" / "sentiment")) == 32000


def test_a_shipped_task_model_copied_alone_names_the_command_that_makes_it_stand_alone(tmp_path, monkeypatch, capsys):
    from arabert_pipeline.cli import main

    copied = copy_models(tmp_path, "arabert-sentiment") / "arabert-sentiment"  # cp -r, without arabert-mini
    with pytest.raises(ConfigError) as refused:
        read_tokenizer_json(copied)
    message = str(refused.value)
    assert "`arabert-pipeline export-onnx MODEL --standalone DIR`" in message and "incomplete" not in message
    # That command, on the shipped model's name: a directory that stands alone and answers as the shipped one does.
    monkeypatch.chdir(tmp_path)
    assert main(["export-onnx", "arabert-sentiment", "--standalone", "deploy/sentiment"]) == 0
    deployed = tmp_path / "deploy" / "sentiment"
    assert (deployed / "tokenizer.json").read_bytes() == (PACKAGED_MODELS_DIR / "arabert-mini" /
                                                          "tokenizer.json").read_bytes()
    assert not (deployed / SHARED_TOKENIZER_FILE).exists() and (deployed / "README.md").is_file()
    capsys.readouterr()
    answers = []
    for model in ("arabert-sentiment", str(deployed)):
        assert main(["classify", "--model", model, "الخدمة ممتازة جدا", "الفيلم سيء"]) == 0
        answers.append(capsys.readouterr().out)
    assert answers[0] == answers[1] and answers[0].count("\n") == 2


# 3. config.json's sizes against the weights, before anything is built -----------------------------------------------

def refuse_building(monkeypatch, *classes) -> None:
    def built(*_, **__):
        raise AssertionError("a model was built before config.json was checked against the weights")

    for cls in classes:
        monkeypatch.setattr(cls, "from_pretrained", built)


@pytest.mark.parametrize("field, value, expected", [
    ("num_hidden_layers", 200, "config.json: num_hidden_layers is 200, but"),
    ("vocab_size", 10**9, "config.json: vocab_size 1000000000 does not fit the weights"),
    ("intermediate_size", 10**7, "config.json: intermediate_size 10000000 does not fit the weights"),
    ("position_buckets", 10**8, "config.json: its sizes do not fit the weights: deberta.encoder.rel_embeddings"),
])
def test_config_sizes_are_checked_against_the_weights_before_the_model_is_built(tmp_path, monkeypatch, field, value,
                                                                                expected):
    """num_hidden_layers 200 took 1.8 GB before the error (400: 3.2 GB, 14.6 s); 10⁹ words more than any machine."""
    import transformers

    model = copy_models(tmp_path, "arabert-mini", ignore=shutil.ignore_patterns("model.onnx", "reader"))
    model = model / "arabert-mini"
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, field: value}))
    refuse_building(monkeypatch, transformers.DebertaV2ForQuestionAnswering)
    with pytest.raises(ConfigError, match=expected.replace(".", r"\.")):
        load_pretrained_model(transformers.AutoModelForQuestionAnswering, model)


def test_a_plain_checkpoints_layers_are_counted_before_the_model_is_built(tmp_path, monkeypatch):
    import transformers

    from conftest import build_tiny_bert

    model = build_tiny_bert(tmp_path / "qa", ["نص قصير للتجربة", "كلمات أخرى هنا"], "BertForQuestionAnswering",
                            vocab_size=60, max_positions=64)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 300}))
    refuse_building(monkeypatch, transformers.AutoModelForQuestionAnswering)
    with pytest.raises(ConfigError, match=r"config\.json: num_hidden_layers is 300, but .*model\.safetensors holds 2"):
        load_pretrained_model(transformers.AutoModelForQuestionAnswering, model)


# 4. model.safetensors headers on the default backend ----------------------------------------------------------------

def qa_copy(tmp_path: Path) -> Path:
    return copy_models(tmp_path, "arabert-mini", ignore=shutil.ignore_patterns("reader")) / "arabert-mini"


def test_a_header_nested_past_the_recursion_limit_is_a_config_error(tmp_path):
    path = tmp_path / "model.safetensors"
    header = b"[" * 60_000
    path.write_bytes(len(header).to_bytes(8, "little") + header)
    with pytest.raises(ConfigError, match="model.safetensors: not a readable safetensors file .*nested too deeply"):
        read_safetensors_header(path)


@pytest.mark.parametrize("damage", ["appended", "truncated"])
def test_a_damaged_weights_file_is_named_before_onnx_runtime_loads_the_graph(tmp_path, damage):
    """Bytes after the last tensor: the graph loaded, then safetensors' own SafetensorError; a truncated file was
    blamed on model.onnx, with advice to re-export it."""
    from arabert_pipeline.finetuning.runtime import create_session

    model = qa_copy(tmp_path)
    weights = model / "model.safetensors"
    if damage == "appended":
        with open(weights, "ab") as f:
            f.write(b"\0" * 16)
    else:
        os.truncate(weights, weights.stat().st_size - 4096)
    with pytest.raises(ConfigError) as refused:
        create_session(model)
    message = str(refused.value)
    assert message.startswith(f"{weights}: not a readable safetensors file") and "export-onnx" not in message


def test_onnx_runtimes_own_log_line_is_not_printed_before_the_error(tmp_path, capfd):
    from safetensors.numpy import save_file

    from arabert_pipeline.finetuning.runtime import create_session

    model = qa_copy(tmp_path)
    save_file({"other": np.zeros(4, np.float32)}, model / "model.safetensors")  # readable, but not the graph's
    capfd.readouterr()
    with pytest.raises(ConfigError, match="model.onnx: ONNX Runtime cannot load it"):
        create_session(model)
    assert "onnxruntime" not in capfd.readouterr().err


# 4, minor: NaN row scales of the transformer; int8 weights without their storage metadata or scales -----------------

def overwrite_tensor(path: Path, name: str, values: np.ndarray) -> None:
    """Write `values` over the stored tensor `name`, in place: the header (so model.onnx's fingerprint) unchanged."""
    header = read_safetensors_header(path)
    start, end = header.tensors[name]["data_offsets"]
    assert values.nbytes == end - start
    with open(path, "r+b") as f:
        f.seek(header.data_start + start)
        f.write(values.tobytes())


@pytest.mark.parametrize("backend", ["onnx", "torch"])
def test_a_nan_row_scale_of_the_transformer_is_refused_at_load(tmp_path, backend):
    import transformers
    from safetensors import safe_open

    from arabert_pipeline.finetuning.runtime import create_session

    model = qa_copy(tmp_path)
    name = "deberta.encoder.layer.2.attention.self.query_proj.weight" + SCALE_SUFFIX
    with safe_open(model / "model.safetensors", framework="np") as stored:
        scales = stored.get_tensor(name)
    scales[7] = np.nan
    overwrite_tensor(model / "model.safetensors", name, scales)
    load = (lambda: create_session(model)) if backend == "onnx" else \
        (lambda: load_pretrained_model(transformers.AutoModelForQuestionAnswering, model))
    with pytest.raises(ConfigError, match=f"model.safetensors: {name.replace('.', '[.]')} holds 1 scale.s. that are "
                                          "NaN or infinite"):
        load()


def test_int8_rows_whose_storage_metadata_was_dropped_get_advice_about_that(tmp_path):
    import transformers
    from safetensors.numpy import load_file, save_file

    model = qa_copy(tmp_path)
    tensors = load_file(model / "model.safetensors")
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})  # a tool that keeps only "format"
    with pytest.raises(ConfigError) as refused:
        load_pretrained_model(transformers.AutoModelForQuestionAnswering, model)
    assert f"its metadata does not say so ({STORAGE_KEY} is missing" in str(refused.value)
    assert "num_hidden_layers" not in str(refused.value)


def test_a_plain_checkpoint_holding_an_int8_weight_without_scales_is_refused_on_torch(tmp_path):
    import transformers
    from safetensors.numpy import load_file, save_file

    from conftest import build_tiny_bert

    model = build_tiny_bert(tmp_path / "qa", ["نص قصير للتجربة", "كلمات أخرى هنا"], "BertForQuestionAnswering",
                            vocab_size=60, max_positions=64)
    tensors = load_file(model / "model.safetensors")
    name = "bert.encoder.layer.0.intermediate.dense.weight"
    tensors[name] = np.clip(np.rint(tensors[name] * 1000), -127, 127).astype(np.int8)
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ConfigError, match=f"{name.replace('.', '[.]')} is int8 without row scales in a plain "
                                          "checkpoint"):
        load_pretrained_model(transformers.AutoModelForQuestionAnswering, model)


# 5. reader/ parts that match their checksums but not each other -----------------------------------------------------

def reader_copy(tmp_path: Path) -> tuple[Path, dict]:
    root = copy_models(tmp_path, "arabert-mini", ignore=shutil.ignore_patterns("model.*"))
    reader = root / "arabert-mini" / "reader"
    return reader, json.loads((reader / "reader.json").read_text())


def rewritten(reader: Path, config: dict, **arrays: tuple[np.ndarray | bytes, str]) -> None:
    """Write each FILE=(array or raw bytes, reader.json checksum field) and record its new checksum, as a hand editor
    who knows the format would."""
    for name, (value, field) in arrays.items():
        path = reader / name.replace("__", ".")
        if isinstance(value, bytes):
            path.write_bytes(value)
        else:
            np.save(path, value, allow_pickle=False)
        config[field] = hashlib.sha256(path.read_bytes()).hexdigest()
    (reader / "reader.json").write_text(json.dumps(config))


def npy_claiming(array: np.ndarray, rows: int) -> bytes:
    """A .npy file of `array`'s bytes whose header claims `rows` rows."""
    import io

    header = np.lib.format.header_data_from_array_1_0(array)
    header["shape"] = (rows, *array.shape[1:])
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, header)
    return out.getvalue() + np.ascontiguousarray(array).tobytes()


@pytest.mark.parametrize("case, expected", [
    ("int4_not_npy", "vectors_int4.npy: not a numeric .npy array"),
    ("int4_claims_more_rows", "vectors_int4.npy: not a numeric .npy array"),
    ("dim_50_for_a_graph_of_100", "reader.onnx reads context vectors of 100 values, but reader.json dim and "
                                  "vectors.npy have 50"),
    ("nan_scale", "vector_scales.npy: 1 row scale(s) are NaN or infinite"),
])
def test_reader_parts_that_fit_their_checksums_but_not_each_other_are_refused_at_load(tmp_path, case, expected):
    from arabert_pipeline.qa.transformer.companion import Companion

    reader, config = reader_copy(tmp_path)
    int4 = np.load(reader / "vectors_int4.npy")
    if case == "int4_not_npy":
        rewritten(reader, config, vectors_int4__npy=(b"not an array" * 100, "int4_sha256"))
    elif case == "int4_claims_more_rows":
        rewritten(reader, config, vectors_int4__npy=(npy_claiming(int4, 2 * len(int4)), "int4_sha256"))
    elif case == "dim_50_for_a_graph_of_100":
        config["dim"] = 50
        rewritten(reader, config, vectors__npy=(np.load(reader / "vectors.npy")[:, :50], "table_sha256"),
                  vectors_int4__npy=(np.ascontiguousarray(int4[:, :25]), "int4_sha256"))
    else:
        scales = np.load(reader / "vector_scales.npy")
        scales[1234] = np.nan
        rewritten(reader, config, vector_scales__npy=(scales, "scales_sha256"))
    with pytest.raises(ConfigError, match=expected.replace(".", r"\.").replace("(", r"\(").replace(")", r"\)")):
        Companion.load(reader.parent, "arabertv02")


# 5, minor: tags that are no tags ------------------------------------------------------------------------------------

@pytest.mark.parametrize("source", ["metadata", "config"])
def test_tags_that_are_no_bio_tags_are_refused_at_load(tmp_path, source):
    """A Q-LOC tag was accepted, and every entity tagged with it silently dropped."""
    from arabert_pipeline.ner.model import OnnxTokenTagger

    model = copy_models(tmp_path, "arabert-ner", ignore=shutil.ignore_patterns("model.onnx")) / "arabert-ner"
    metadata = json.loads((model / "arabert_pipeline.json").read_text())
    labels = [label.replace("B-LOC", "Q-LOC") for label in metadata["labels"]]
    if source == "metadata":
        (model / "arabert_pipeline.json").write_text(json.dumps({**metadata, "labels": labels}))
        expected = "arabert_pipeline.json 'labels' holds the tag 'Q-LOC'"
    else:
        del metadata["labels"]
        (model / "arabert_pipeline.json").write_text(json.dumps(metadata))
        config = json.loads((model / "config.json").read_text())
        config["id2label"] = {str(i): label for i, label in enumerate(labels)}
        (model / "config.json").write_text(json.dumps(config))
        expected = "config.json id2label holds the tag 'Q-LOC'"
    with pytest.raises(ConfigError, match=expected):
        OnnxTokenTagger.load(model)

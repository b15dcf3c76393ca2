"""A DrQA reader beside a transformer QA model: its word probabilities join the transformer's span scores.

    arabert-pipeline tune-decoding runs/qa/deberta --reader runs/reader/w2v --dev arcd-dev mlqa-ar-dev -o runs/qa/both

Measured on the dev sets (docs/experiments/reader-companion.md): the shipped small transformer finds the answer's
sentence but places the span poorly inside it, and the reader (qa/static/: BiLSTMs over word2vec, question-word
features) places spans well but picks sentences slightly worse; a span scored by both (the transformer's start + end
logits plus `reader_weight` × the reader's log p(start word) + log p(end word)) beats either alone.

`tune-decoding --reader` writes the reader into the tuned model dir as `reader/`, self-contained and run by ONNX
Runtime (a core dependency), so both of Pipeline's backends use it and neither needs the embeddings directory:

    reader/reader.onnx    the reader from embedded words to start/end logits, for one question at a time (no padding:
                          the LSTMs read each question and context whole, as the packed training batches did)
    reader/vectors.npy    the embedding table, float16 (rows: padding, unknown word, then words.txt in order), the
                          fine-tuned question words' rows already in it; memory-mapped, looked up with numpy before
                          the graph runs. A shipped reader may store it as int8 rows instead (issue 53,
                          `compact_companion`): int8 values and, in vector_scales.npy, one float32 scale per row,
                          widened to float32 row by row as words are looked up; the rarer words' rows (the last
                          reader.json `int4_rows`) then in reader/vectors_int4.npy, 4-bit, two values a byte
    reader/words.txt      the embeddings' words.txt (word<TAB>count), whose order the table's rows follow
    reader/reader.json    preprocessing, sizes, the checksums of the three files above (each checked at load: a
                          words.txt with two lines swapped would give every word another word's row), and the
                          train-reader metadata it came from

The reader reads the context preprocessed as the QA model reads it (they must share a preprocessing), so its words
are character spans of the same preprocessed text the transformer's token offsets point into.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...artifacts.metadata import read_metadata
from ...artifacts.reads import read_json_file
from ...errors import ConfigError
from ...weights.files import file_digest
from ...weights.tables import READER_INT4, READER_SCALES, READER_TABLE, Int4TailTable, read_table, table_rows

COMPANION_DIR = "reader"
GRAPH_FILE, TABLE_FILE, WORDS_FILE, CONFIG_FILE = "reader.onnx", READER_TABLE, "words.txt", "reader.json"
# An int8 table's row scales and its 4-bit rows (compact_companion), checked against reader.json's scales_sha256 and
# int4_sha256 (weights.tables.read_table).
SCALES_FILE, INT4_FILE = READER_SCALES, READER_INT4
COMPANION_FILES = (GRAPH_FILE, TABLE_FILE, WORDS_FILE, CONFIG_FILE)
# reader.json's checksum of each file it vouches for.
CHECKSUMS = ((WORDS_FILE, "words_sha256"), (TABLE_FILE, "table_sha256"), (GRAPH_FILE, "graph_sha256"))
_SHA256 = re.compile(r"[0-9a-f]{64}")
# A word the reader all but rules out costs at most this much (nats per end): a log-probability of -60 and one of
# -20 both mean "not here", and an unbounded penalty would let the reader veto the transformer outright.
LOG_PROB_FLOOR = -20.0
OPSET = 17


def export_companion(reader_dir: str | os.PathLike, output: str | os.PathLike, *,
                     embeddings: str | os.PathLike | None = None) -> None:
    """Write the companion files of the train-reader output `reader_dir` into the new directory `output`."""
    import torch

    from ..static.predict import StaticReader

    reader_dir, output = Path(reader_dir), Path(output)
    reader = StaticReader.load(reader_dir, embeddings)
    model = reader.model.eval()
    with torch.no_grad():
        rows = torch.arange(model.frozen.shape[0])
        table = model.embed(rows).numpy()
    if not np.isfinite(table).all() or np.abs(table).max() > np.finfo(np.float16).max:
        raise ConfigError(f"{reader_dir}: its word vectors do not fit float16")

    class Graph(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.reader = model

        def forward(self, context, features, question):
            return self.reader.read(context, features, question)

    words = list(reader.vocabulary.index)
    dim = table.shape[1]
    example = (torch.zeros(1, 7, dim), torch.zeros(1, 7, 3), torch.zeros(1, 4, dim))
    output.mkdir()
    with warnings.catch_warnings():
        # Expected from the TorchScript exporter (its deprecation, "batch_size other than 1 with LSTM": the graph only
        # ever reads one question); _check_against_torch decides whether the graph is right.
        warnings.simplefilter("ignore")
        with torch.no_grad():
            torch.onnx.export(Graph().eval(), example, str(output / GRAPH_FILE), dynamo=False, opset_version=OPSET,
                              input_names=["context", "features", "question"],
                              output_names=["start_logits", "end_logits"],
                              dynamic_axes={"context": {1: "context_words"}, "features": {1: "context_words"},
                                            "question": {1: "question_words"}, "start_logits": {1: "context_words"},
                                            "end_logits": {1: "context_words"}})
    _check_against_torch(Graph().eval(), output / GRAPH_FILE, dim)
    np.save(output / TABLE_FILE, table.astype(np.float16), allow_pickle=False)
    # The embeddings' own words.txt (word<TAB>count, the format embeddings/vectors.py reads). StaticReader.load checked
    # the one it read against the checksum train-reader recorded; the copy must be that file too (the embeddings
    # directory may have changed since), and Companion.load checks it against words_sha256.
    source = reader.embeddings  # where StaticReader.load read the vectors: `embeddings` when given
    assert source is not None  # load() always records it
    shutil.copyfile(source / WORDS_FILE, output / WORDS_FILE)
    if file_digest(output / WORDS_FILE) != reader.embeddings_words_sha256:
        raise ConfigError(f"{source / WORDS_FILE} changed while the reader was exported: run tune-decoding again")
    metadata = read_metadata(reader_dir)
    config = {
        "preprocessing": reader.preprocessing, "dim": dim,
        "words": len(words), "table_sha256": file_digest(output / TABLE_FILE),
        "graph_sha256": file_digest(output / GRAPH_FILE), "words_sha256": file_digest(output / WORDS_FILE),
        "trained": {key: metadata.get(key) for key in ("embeddings", "train", "dev", "best_epoch", "best_dev_em",
                                                       "best_dev_f1", "train_questions", "created_by")},
    }
    (output / CONFIG_FILE).write_text(json.dumps(config, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def _check_against_torch(graph, path: Path, dim: int) -> None:
    """The exported graph must give torch's logits on lengths other than the traced ones."""
    import onnxruntime
    import torch

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    generator = torch.Generator().manual_seed(0)
    for words, question_words in ((31, 9), (2, 1)):
        inputs = (torch.randn(1, words, dim, generator=generator), torch.rand(1, words, 3, generator=generator),
                  torch.randn(1, question_words, dim, generator=generator))
        with torch.no_grad():
            expected = [t.numpy() for t in graph(*inputs)]
        feeds = dict(zip(("context", "features", "question"), (t.numpy() for t in inputs), strict=True))
        found = session.run(None, feeds)
        if any(not np.allclose(a, b, atol=1e-3, rtol=1e-3) for a, b in zip(expected, found, strict=True)):
            raise ConfigError(f"{path}: the exported reader does not reproduce torch's logits (ONNX Runtime "
                              f"{onnxruntime.__version__}, torch {torch.__version__})")


def copy_companion(source: Path, target: Path) -> None:
    """Copy a model dir's reader/ into another model dir being written (tune-decoding's copy of a tuned model)."""
    (target / COMPANION_DIR).mkdir()
    for name in (*COMPANION_FILES, SCALES_FILE, INT4_FILE):
        if name in COMPANION_FILES or (source / COMPANION_DIR / name).is_file():
            shutil.copy2(source / COMPANION_DIR / name, target / COMPANION_DIR / name)


def compact_companion(directory: str | os.PathLike, *, min_elements: int | None = None,
                      int8_words: int | None = None) -> None:
    """Rewrite MODEL_DIR/reader/ in its compact form (issue 53): the table as int8 rows with float32 row scales
    (SCALES_FILE), reader.onnx's fp32 weights as int8 rows widened in the graph (weights.rows.compact_graph),
    and reader.json's checksums to match (`min_elements`: the smallest graph weight stored so, weights.MIN_ELEMENTS by
    default). With `int8_words`, the rows of the words past the first `int8_words` of words.txt (the rarer ones)
    are 4-bit instead, from the values their stored rows stand for (weights.READER_INT4). Whether answers survive is
    measured by scripts/compact_gate.py."""
    import onnx

    from ...artifacts.writes import atomic_directory
    from ...weights.rows import MIN_ELEMENTS, compact_graph, dequantize_rows, pack_int4, quantize_rows

    directory = Path(directory) / COMPANION_DIR
    config = read_json_file(directory / CONFIG_FILE)
    table = np.load(directory / TABLE_FILE, allow_pickle=False)
    if table.dtype == np.int8 and not (directory / SCALES_FILE).is_file():
        raise ConfigError(f"{directory / TABLE_FILE} is already int8 but {SCALES_FILE} is missing beside it: the rows "
                          "cannot be read without their scales; restore the file or export the reader again")
    if table.dtype not in (np.float16, np.int8):
        raise ConfigError(f"{directory / TABLE_FILE}: expected float16 or int8 rows, found {table.dtype}")
    if config.get("int4_rows") and int8_words is not None:
        raise ConfigError(f"{directory}: its rarer rows are already 4-bit ({config['int4_rows']} of them)")
    head_rows = None if int8_words is None else 2 + int8_words  # padding and unknown word first
    if head_rows is not None and not 2 < head_rows < len(table):
        raise ConfigError(f"int8_words must be between 1 and {len(table) - 3} (the table has {len(table) - 2} words), "
                          f"got {int8_words}")
    graph = onnx.load(str(directory / GRAPH_FILE))
    compacted = compact_graph(graph, MIN_ELEMENTS if min_elements is None else min_elements)
    # A new reader/ replaces the old one whole: a crash midway leaves the old reader, whose files match reader.json's
    # checksums, never a mix of old and new files that every later load refuses.
    with atomic_directory(directory) as staged:
        shutil.copytree(directory, staged, dirs_exist_ok=True)
        if table.dtype == np.float16:
            quantized, scales = quantize_rows(table)
            scales = scales.reshape(-1)
        else:
            quantized, scales = table, np.load(directory / SCALES_FILE, allow_pickle=False)
        if head_rows is not None:
            rare, rare_scales = quantize_rows(dequantize_rows(quantized[head_rows:], scales[head_rows:, None]), bits=4)
            rare_scales = rare_scales.reshape(-1)
            np.save(staged / INT4_FILE, pack_int4(rare), allow_pickle=False)
            quantized, scales = quantized[:head_rows], np.concatenate([scales[:head_rows], rare_scales])
            config.update(int4_rows=len(rare), int4_sha256=file_digest(staged / INT4_FILE))
        np.save(staged / TABLE_FILE, quantized, allow_pickle=False)
        np.save(staged / SCALES_FILE, scales, allow_pickle=False)
        if compacted:
            onnx.save(graph, str(staged / GRAPH_FILE))
        config.update(table_sha256=file_digest(staged / TABLE_FILE), graph_sha256=file_digest(staged / GRAPH_FILE),
                      scales_sha256=file_digest(staged / SCALES_FILE))
        (staged / CONFIG_FILE).write_text(json.dumps(config, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def load_companion(model_dir: str | os.PathLike, preprocessing: str, *, required: bool,
                   session: Callable[[Path, Any], Any] | None = None) -> Companion | None:
    """The reader of a local model dir when its settings weigh one (`required`), else None; `session` as in
    Companion.load."""
    if not required:
        return None
    if not Path(model_dir).is_dir():
        raise ConfigError(f"{model_dir}: its reader_weight needs the reader files ({COMPANION_DIR}/), which are only "
                          "read from a local model directory: download the model dir and load it from there")
    if not (Path(model_dir) / COMPANION_DIR).is_dir():
        raise ConfigError(f"{Path(model_dir) / COMPANION_DIR} is missing: the model's arabert_pipeline.json weighs a "
                          "reader (reader_weight) that is not there")
    return Companion.load(model_dir, preprocessing, session=session)


class Companion:
    """The reader of a model dir's reader/: per context character, the log-probability that the answer starts or ends
    in its word."""

    def __init__(self, session, table: tuple[np.ndarray | Int4TailTable, np.ndarray | None], words: list[str],
                 preprocessing: str):
        from ..static.features import Vocabulary

        (self.table, self.scales), self.session, self.vocabulary = table, session, Vocabulary(words)
        self.preprocessing = preprocessing

    @classmethod
    def load(cls, model_dir: str | os.PathLike, preprocessing: str, *,
             session: Callable[[Path, Any], Any] | None = None) -> Companion:
        """The reader in MODEL_DIR/reader/, checked against the QA model's `preprocessing`; `session`, given the checked
        reader.onnx and the session options, returns the ONNX Runtime session to run instead (the ONNX backend's int8
        copy; its errors name what they load)."""
        import onnxruntime

        from ...embeddings.vectors import read_words_and_digest
        from ...finetuning.runtime import session_options

        directory = Path(model_dir) / COMPANION_DIR
        for name in COMPANION_FILES:
            if not (directory / name).is_file():
                raise ConfigError(f"{directory / name} is missing or not a regular file: the model's reader is "
                                  "incomplete (re-run `arabert-pipeline tune-decoding --reader`)")
        config = read_companion_config(directory / CONFIG_FILE, preprocessing)
        words, words_sha256 = read_words_and_digest(directory / WORDS_FILE, config["words"],
                                                    f"words {CONFIG_FILE} records")
        if len(words) != config["words"]:
            raise ConfigError(f"{directory / WORDS_FILE} has {len(words)} words, {CONFIG_FILE} says {config['words']}")
        # words.txt is digested as it is read (what was checked is what is used); the other two are read after.
        for name, field in CHECKSUMS:
            found = words_sha256 if name == WORDS_FILE else file_digest(directory / name)
            if found != config[field]:
                raise ConfigError(f"{directory / name} is not the file {CONFIG_FILE} records (its checksum differs)")
        # Memory-mapped and left in float16 (or int8): rows are read (and widened) only for the words of a question,
        # so a load neither reads nor doubles the table. The checksum above vouches that it is the finite table
        # written by export_companion (or compact_companion).
        table = read_table(directory, config, len(words) + 2)
        options = session_options()
        if session is not None:
            graph = session(directory / GRAPH_FILE, options)
        else:
            try:
                graph = onnxruntime.InferenceSession(str(directory / GRAPH_FILE), options,
                                                     providers=["CPUExecutionProvider"])
            except Exception as exc:  # ONNX Runtime's own exception types
                first_line = (str(exc).strip().splitlines() or [""])[0]
                raise ConfigError(f"{directory / GRAPH_FILE}: ONNX Runtime cannot load it ({first_line})") from exc
        check_graph_dim(graph, config["dim"], directory)
        return cls(graph, table, words, preprocessing)

    def word_log_probs(self, question: str, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(word spans in `text`, log p(start), log p(end)) for a preprocessed question and context."""
        from ..static.features import word_features, word_spans

        spans = word_spans(text)
        context_words = [text[a:b] for a, b in spans]
        question_words = question.split()
        if not context_words or not question_words:
            empty = np.zeros(len(spans), dtype=np.float32)
            return spans, empty, empty
        inputs = {"context": table_rows(self.table, self.scales, self.vocabulary.ids(context_words))[None],
                  "features": word_features(context_words, question_words)[None],
                  "question": table_rows(self.table, self.scales, self.vocabulary.ids(question_words))[None]}
        start, end = (logits[0].astype(np.float64) for logits in self.session.run(None, inputs))
        return spans, _log_softmax(start), _log_softmax(end)

    def char_log_probs(self, question: str, text: str) -> tuple[np.ndarray, np.ndarray]:
        """Per character of `text` (and one past its end): log p(start), log p(end) of its word, floored at
        LOG_PROB_FLOOR (the floor too for characters between words)."""
        spans, start, end = self.word_log_probs(question, text)
        by_char_start = np.full(len(text) + 1, LOG_PROB_FLOOR, dtype=np.float32)
        by_char_end = by_char_start.copy()
        for (a, b), s, e in zip(spans.tolist(), np.maximum(start, LOG_PROB_FLOOR), np.maximum(end, LOG_PROB_FLOOR),
                             strict=True):
            by_char_start[a:b], by_char_end[a:b] = s, e
        return by_char_start, by_char_end


def check_graph_dim(graph, dim: int, directory: Path) -> None:
    """The reader graph must read vectors of the table's `dim` (reader.json): each part matches its own checksum, so
    a table and a graph from two readers would load, and fail at the first answer."""
    for entry in graph.get_inputs():
        if entry.name in ("context", "question") and entry.shape and type(entry.shape[-1]) is int \
                and entry.shape[-1] != dim:
            raise ConfigError(f"{directory / GRAPH_FILE} reads {entry.name} vectors of {entry.shape[-1]} values, but "
                              f"{CONFIG_FILE} dim and {TABLE_FILE} have {dim}: the reader's files come from different "
                              "readers; restore them together")


def read_companion_config(path: Path, preprocessing: str) -> dict[str, Any]:
    """reader.json, checked field by field against what export_companion writes; `preprocessing` is the QA model's."""
    config = read_json_file(path)
    for field in ("dim", "words"):
        if field not in config:
            raise ConfigError(f"{path}: {field} is missing")
        if type(config[field]) is not int or not 1 <= config[field] <= 2**31:
            raise ConfigError(f"{path}: {field} must be a positive integer, not {config[field]!r}")
    if config.get("preprocessing") != preprocessing:
        raise ConfigError(f"{path}: the reader reads {config.get('preprocessing')!r} text, the model "
                          f"{preprocessing!r}: they must read the same preprocessed context")
    for name, field in CHECKSUMS:
        if field not in config:
            raise ConfigError(f"{path}: {field} is missing: the checksum of {name} (written by tune-decoding "
                              "--reader), without which a changed file would go unnoticed")
        if not isinstance(config[field], str) or not _SHA256.fullmatch(config[field]):
            raise ConfigError(f"{path}: {field} must be a SHA-256 hex digest, not {config[field]!r}")
    return config


def _log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max()
    return shifted - np.log(np.exp(shifted).sum())

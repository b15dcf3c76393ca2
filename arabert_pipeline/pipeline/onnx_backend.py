"""The ONNX Runtime backend of `Pipeline`: a QA model dir with `model.onnx` (qa/export.py), run without torch or
transformers.

Only two steps differ from the torch path (qa/infer.py QAModel), and both are swapped here:
- tokenization: `tokenizers` reads the model's tokenizer.json directly, called through qa/tokenizer_adapter.py as
  qa/features.py calls a transformers fast tokenizer, so `build_windows` runs unchanged and the windows, ids, token
  types and offsets are the same;
- the forward: an ONNX Runtime session on model.onnx, batched and padded as the torch path batches windows.
Preprocessing, question-overlap token types, the sentence prior and n-best decoding are QAModel's own code.

`quantize=True` runs an int8 copy of the graph (and of the reader's graph, when the model weighs one), made at load
with ONNX Runtime's dynamic quantization (weights int8 per output channel, activations quantized per batch) and cached:
faster, and less exact (benchmarks/bench_pipeline.py prints its F1 next to fp32's; on the shipped model and ARCD-test,
97–98% of the answers stay the same and F1 moves by < 0.3; a per-tensor or uint8 variant measured no better). It
needs the `onnx` package (the `export` extra).
"""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import numpy as np

from ..artifacts import METADATA_FILE, model_config, read_metadata
from ..errors import ConfigError
from ..qa.export import FINGERPRINT_KEY, ONNX_FILE, OUTPUT_NAMES, session_threads, weights_fingerprint
from ..qa.features import Windows
from ..qa.infer import QAModel, QASettings, _read_sentence_idf
from ..qa.reader_companion import load_companion
from ..qa.tokenizer_adapter import TokenizerAdapter


# Tokens (windows × padded length) per ONNX Runtime run. On CPU, batches beyond a few windows buy nothing (a window is
# already hundreds of rows for every matrix product) and cost cache: measured on the shipped model (one thread),
# 4 × 256 tokens ran at 13k tokens/s, 32 × 256 at 9k.
TOKENS_PER_RUN = 1024


class OnnxQAModel(QAModel):
    """QAModel whose windows come from `tokenizers` and whose forward runs on ONNX Runtime."""

    backend = "onnx"

    @classmethod
    def load(cls, directory: str | os.PathLike, *, preprocessing: str | None = None, whole_words: bool = True,
             quantize: bool = False) -> "OnnxQAModel":
        """A QA model dir with model.onnx; the same checks as QAModel.load, without importing torch."""
        directory = Path(directory)
        if not (directory / ONNX_FILE).is_file():
            raise ConfigError(f"{directory} has no {ONNX_FILE}: export it with `arabert-pipeline export-onnx "
                              f"{directory}`, or use the torch backend")
        metadata = read_metadata(directory, missing_ok=True)
        stored = metadata.get("preprocessing")
        if stored and preprocessing and stored != preprocessing:
            raise ConfigError(f"{directory} was trained with preprocessing {stored!r}, not {preprocessing!r}")
        preprocessing = preprocessing or stored
        if not preprocessing:
            raise ConfigError(f"{directory} has no {METADATA_FILE} recording its preprocessing: pass it explicitly "
                              "(e.g. preprocessing='arabertv02', or 'none' for models trained on raw text)")
        config = model_config(directory)
        settings = QASettings.from_metadata(metadata, directory / METADATA_FILE, config.get("max_position_embeddings"))
        tokenizer = TokenizerAdapter.from_directory(directory)
        rows = config.get("vocab_size")
        if rows != len(tokenizer):
            raise ConfigError(f"{directory}: the tokenizer has {len(tokenizer)} tokens but the model has {rows} token "
                              "embeddings; the tokenizer files do not belong to this model")
        idf = _read_sentence_idf(directory, required=settings.sentence_prior > 0)
        session = create_session(directory, quantize=quantize)  # first: it refuses a stale model.onnx
        # The reader's LSTMs ran 5.1 ms a question in fp32 and 3.3 in int8 (one thread, an ARCD-sized context): at
        # batch 1 a third of the answer's time. The int8 decision on dev measures both graphs together.
        reader = load_companion(directory, preprocessing, required=settings.reader_weight > 0,
                                session=int8_session if quantize else None)
        model = cls(session, tokenizer, preprocessing, settings, whole_words, idf, reader)
        # int8: dynamic quantization scales each activation tensor by its own range, and windows run together share
        # one tensor, so a window's logits would depend on the windows batched with it (and on their padding). One
        # window per run keeps every answer the one the question gets alone (serve's dynamic batching, answer lists).
        model.windows_per_run = 1 if quantize else None
        return model

    windows_per_run: int | None = None  # None: up to batch_size windows and TOKENS_PER_RUN tokens

    def window_logits(self, windows: Windows, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """As QAModel.window_logits: windows sorted by length, batches right-padded to their longest window; a batch
        holds at most `batch_size` windows and `TOKENS_PER_RUN` tokens (always one window at least)."""
        n, width = len(windows), windows.offsets.shape[1]
        start_logits = np.zeros((n, width), dtype=np.float32)
        end_logits = np.zeros((n, width), dtype=np.float32)
        lengths = np.asarray([len(ids) for ids in windows.input_ids])
        order = np.argsort(lengths, kind="stable")
        inputs = {i.name for i in self.model.get_inputs()}
        pad = self.tokenizer.pad_token_id or 0
        most = self.windows_per_run or batch_size
        i = 0
        while i < n:
            # Sorted ascending: the batch's last window is its longest.
            size = 1
            while (size < most and i + size < n
                   and (size + 1) * lengths[order[i + size]] <= TOKENS_PER_RUN):
                size += 1
            rows = order[i : i + size]
            i += size
            length = int(lengths[rows[-1]])
            feeds = {"input_ids": np.full((len(rows), length), pad, dtype=np.int64),
                     "attention_mask": np.zeros((len(rows), length), dtype=np.int64),
                     "token_type_ids": np.zeros((len(rows), length), dtype=np.int64)}
            for j, r in enumerate(rows):
                ids = windows.input_ids[r]
                feeds["input_ids"][j, : len(ids)] = ids
                feeds["attention_mask"][j, : len(ids)] = 1
                if windows.token_type_ids is not None:
                    feeds["token_type_ids"][j, : len(ids)] = windows.token_type_ids[r]
            start, end = self.model.run(list(OUTPUT_NAMES), {k: v for k, v in feeds.items() if k in inputs})
            start_logits[rows, :length] = start
            end_logits[rows, :length] = end
        return start_logits, end_logits


def create_session(directory: str | os.PathLike, *, quantize: bool = False):
    """An ONNX Runtime session on DIR/model.onnx, refused when it was exported from other weights or config."""
    import onnxruntime

    directory = Path(directory)
    path = directory / ONNX_FILE
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = session_threads()
    options.inter_op_num_threads = 1
    redo = f"re-export it with `arabert-pipeline export-onnx {directory}`, or use the torch backend"
    try:
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ONNX Runtime's own exception types, for a broken file or weights it cannot read
        first_line = (str(exc).strip().splitlines() or [""])[0]
        raise ConfigError(f"{path}: ONNX Runtime cannot load it ({first_line}); {redo}") from exc
    if session.get_modelmeta().custom_metadata_map.get(FINGERPRINT_KEY) != weights_fingerprint(directory):
        raise ConfigError(f"{path} was exported from another config.json or weights file than the ones beside it: "
                          f"{redo}")
    if quantize:
        session = int8_session(path, options, directory / "model.safetensors")
    return session


def int8_cache_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "arabert_pipeline" / "int8"


def int8_session(graph_path: Path, options, *weights: Path):
    """An ONNX Runtime session on the int8 copy of the ONNX graph `graph_path` (which reads `weights`), made once and
    cached: quantizing at every start took 0.7 s and 250 MB more than loading the cached result. A cache entry is used
    only when it is the file its recorded digest says; a damaged or refused one is made again, and when even a new one
    will not load, the error names the cache file (not the model's graph, which is fine)."""
    import onnxruntime

    for rebuild in (False, True):
        graph, cached, fresh = _int8_graph(graph_path, weights, rebuild=rebuild)
        try:
            return onnxruntime.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ONNX Runtime's own exception types
            if not fresh:
                continue
            first_line = (str(exc).strip().splitlines() or [""])[0]
            raise ConfigError(f"{cached} (the int8 copy of {graph_path}): ONNX Runtime cannot load it ({first_line}); "
                              "load the model with quantize=False (--no-quantize)") from exc
    raise AssertionError("unreachable: the second pass builds a fresh graph")


def _int8_graph(graph_path: Path, weights: tuple[Path, ...], *, rebuild: bool) -> tuple[bytes, Path, bool]:
    """(int8 graph, its cache file, whether it was just made): the cache entry, keyed by a digest of the graph, the
    weights files it reads and the ONNX Runtime version, when it matches the digest recorded beside it (KEY.onnx.sha256)
    and `rebuild` is False; else int8_model's, written to the cache when the cache can be written."""
    import hashlib

    import onnxruntime

    from ..artifacts import atomic_write, describe_exception, open_regular_file, read_text_file
    from ..errors import ArabertPipelineError

    digest = hashlib.sha256(onnxruntime.__version__.encode())
    for path in (graph_path, *weights):
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    cached = int8_cache_dir() / f"{digest.hexdigest()[:32]}.onnx"
    recorded = cached.with_name(cached.name + ".sha256")
    if not rebuild:
        try:
            with open_regular_file(cached) as f:
                graph = f.read()
            if hashlib.sha256(graph).hexdigest() == read_text_file(recorded, max_bytes=1024).strip():
                return graph, cached, False
        except (ArabertPipelineError, OSError):  # missing, not a regular file, unreadable: made again below
            pass
    try:
        graph = int8_model(graph_path)
    except ArabertPipelineError:
        raise
    except Exception as exc:  # the quantizer's and onnx's own exception types
        raise ConfigError(f"{cached} (the int8 copy of {graph_path}): cannot be made ({describe_exception(exc)}); "
                          "load the model with quantize=False (--no-quantize)") from exc
    try:
        with atomic_write(cached, "wb") as f:
            f.write(graph)
        # Written after the entry: a reader that finds the new entry beside the old digest makes it again, no harm.
        with atomic_write(recorded) as f:
            f.write(hashlib.sha256(graph).hexdigest() + "\n")
    except (OSError, ConfigError) as exc:  # a read-only home, a cache entry that is not a file: quantize next time
        logging.getLogger(__name__).debug(f"int8 graph not cached in {cached}: {exc}")
    return graph, cached, True


def int8_model(path: Path) -> bytes:
    """An ONNX graph with int8 weights (dynamic quantization of its MatMuls and LSTMs), serialized."""
    import onnxruntime

    try:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise ConfigError("quantize=True on the ONNX backend needs the onnx package: pip install "
                          "'arabert-pipeline[export]' (or use the torch backend)") from exc
    with tempfile.TemporaryDirectory(prefix="arabert-int8-") as tmp:
        # ONNX Runtime's basic level folds the Cast/Transpose nodes over the stored weights into fp32 constants: the
        # quantizer only sees MatMuls whose weight is a constant.
        folded, quantized = Path(tmp) / "folded.onnx", Path(tmp) / "int8.onnx"
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        # Weights used without a Cast (all of them in an fp32 model dir) stay references into the model dir's
        # model.safetensors, which the quantizer would look for beside the folded copy.
        graph = onnx.load(str(folded), load_external_data=False)
        onnx.external_data_helper.load_external_data_for_model(graph, str(path.parent))
        onnx.save(graph, str(folded))
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)  # the quantizer logs advice to run its shape-inference pass on every call
        try:
            quantize_dynamic(str(folded), str(quantized), weight_type=QuantType.QInt8, per_channel=True,
                             extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        finally:
            logging.disable(previous)
        return quantized.read_bytes()

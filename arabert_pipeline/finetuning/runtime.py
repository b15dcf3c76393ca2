"""ONNX Runtime for the answering backends of every task: a session on a model dir's model.onnx (refused when it
was exported from other weights or config), its thread settings, and int8 copies of a graph (dynamic quantization,
made once and cached). qa/transformer/onnx.py runs QA's model and reader on them; the task backends of issue 40 will
too.

`int8_session` runs an int8 copy of a graph, made with ONNX Runtime's dynamic quantization (weights int8 per output
channel, activations quantized per batch) and cached: faster, and less exact (benchmarks/bench_pipeline.py prints its
F1 next to fp32's; on the shipped QA model and ARCD-test, 97–98% of the answers stay the same and F1 moves by
< 0.3; a per-tensor or uint8 variant measured no better). It needs the `onnx` package (the `export` extra).

`write_standalone` writes a graph that holds its own weights, int8 as above or 4-bit (`int4_model`: weight-only, in
blocks of 64 along the input dimension; ONNX Runtime's MatMulNBits and GatherBlockQuantized), so that a model with a
larger encoder fits in the 20 MB a shipped model may take. The 4-bit form needs `onnx_ir` too (ONNX Runtime's
weight-only quantizer imports it).
"""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..weights.header import check_int8_tables, storage_of
from ..weights.rows import pack_int4, quantize_rows
from .export import FINGERPRINT_KEY, ONNX_FILE, WEIGHTS_FILE, config_digest, weights_fingerprint

if TYPE_CHECKING:
    import numpy as np

# model.onnx metadata_props of a standalone graph (write_standalone): it holds its own (quantized) weights, so it is
# checked against config.json alone; INT8_KEY marks the int8 form, whose activations are quantized per batch.
STANDALONE_KEY = "arabert_pipeline.standalone"
INT8_KEY = "arabert_pipeline.int8"
# 64 rather than 32: on the NER model of the larger encoder (ANERcorp dev, notebooks/results/ner-L6-4bit) both kept
# the int8 form's micro-F1 (Δ within ±0.4, CIs around 0), and 64 stores half the scales.
INT4_BLOCK = 64
# The standalone forms: weight bits → how arabert_pipeline.json describes the weights.
STANDALONE_WEIGHTS = {8: f"int8, inside {ONNX_FILE} (ONNX Runtime dynamic quantization, per channel)",
                      4: f"4-bit, inside {ONNX_FILE} (weight-only, blocks of {INT4_BLOCK}; int8 relative-position "
                         "tables)"}


def session_threads() -> int:
    """ONNX Runtime's intra-op threads: $OMP_NUM_THREADS when set (the limit torch obeys too), else 0 (ONNX Runtime's
    default, one per physical core)."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else 0


def session_options():
    """The session options every answering graph runs with: session_threads() within an operator, one between."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = session_threads()
    options.inter_op_num_threads = 1
    # ONNX Runtime's CPU arena keeps the most memory any run needed, for the session's life: a server sent long or
    # token-dense texts grew from 0.7 to 1.3 GB and stayed there (0.42-0.48 GB without it), and a same-size load of
    # ARCD questions and NER texts ran no slower without it (7.9 s both, best of 3).
    options.enable_cpu_mem_arena = False
    # A graph ONNX Runtime cannot load is reported by the caller in one line naming the file; its own log would print
    # the same failure first, in colour, with its C++ source location.
    options.log_severity_level = 4
    return options


def create_session(directory: str | os.PathLike, *, quantize: bool = False):
    """An ONNX Runtime session on DIR/model.onnx, refused when it was exported from other weights or config."""
    import onnxruntime

    directory = Path(directory)
    path = directory / ONNX_FILE
    options = session_options()
    redo = f"re-export it with `arabert-pipeline export-onnx {directory}`, or use the torch backend"
    if os.path.lexists(directory / WEIGHTS_FILE):
        # The graph reads its weights from there: a damaged file is named before ONNX Runtime blames the graph for it
        # (and the fingerprint covers the layout, not an int8 table's index or scales).
        check_int8_tables(directory / WEIGHTS_FILE)
    try:
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ONNX Runtime's own exception types, for a broken file or weights it cannot read
        first_line = (str(exc).strip().splitlines() or [""])[0]
        raise ConfigError(f"{path}: ONNX Runtime cannot load it ({first_line}); {redo}") from exc
    meta = session.get_modelmeta().custom_metadata_map
    if STANDALONE_KEY in meta:
        if meta[STANDALONE_KEY] != config_digest(directory):
            raise ConfigError(f"{path} was made for another config.json than the one beside it: rebuild the model "
                              "dir (its model card says how)")
        return session  # its weights are in the graph, int8 already
    if meta.get(FINGERPRINT_KEY) != weights_fingerprint(directory):
        raise ConfigError(f"{path} was exported from another config.json or weights file than the ones beside it: "
                          f"{redo}")
    if quantize:
        session = int8_session(path, options, directory / WEIGHTS_FILE)
    return session


def session_is_int8(session) -> bool:
    return session.get_modelmeta().custom_metadata_map.get(INT8_KEY) == "true"


def write_standalone(model_dir: str | os.PathLike, target: str | os.PathLike, weight_bits: int = 8) -> Path:
    """TARGET/model.onnx: MODEL_DIR's graph with its weights held inside it (no model.safetensors needed beside it),
    for shipping a model small: int8 (`int8_model`, how `int8_session` runs the cached copy) or 4-bit (`int4_model`).
    A task model of the mini encoder is ~12 MB in int8, against 23 MB of fp16 weights; one of the L6/H384 encoder 33 MB
    in int8, 15 MB in 4-bit. TARGET must hold (or receive) MODEL_DIR's config.json, tokenizer and metadata; the graph
    is checked against that config.json when loaded."""
    import onnx

    from ..artifacts.writes import atomic_write

    if weight_bits not in STANDALONE_WEIGHTS:
        raise ConfigError(f"weight bits {weight_bits}: choose one of {sorted(STANDALONE_WEIGHTS)}")
    model_dir, target = Path(model_dir), Path(target)
    if weight_bits == 4 and (model_dir / WEIGHTS_FILE).is_file() and storage_of(model_dir / WEIGHTS_FILE):
        raise ConfigError(f"{model_dir / WEIGHTS_FILE} is stored in int8 rows, which the 4-bit quantizer does not "
                          f"read: write a plain copy (arabert-pipeline weights {model_dir} --plain OUT), "
                          "export-onnx OUT, then --standalone from OUT")
    quantize = int8_model if weight_bits == 8 else int4_model
    graph = onnx.load_from_string(quantize(model_dir / ONNX_FILE))
    props = {STANDALONE_KEY: config_digest(model_dir)}
    if weight_bits == 8:
        props[INT8_KEY] = "true"
    onnx.helper.set_model_props(graph, props)
    path = target / ONNX_FILE
    with atomic_write(path, "wb") as f:
        f.write(graph.SerializeToString())
    return path


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

    from ..artifacts.models import describe_exception
    from ..artifacts.writes import atomic_write
    from ..errors import ArabertPipelineError
    from ..weights.files import open_regular_file, read_text_file

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
    try:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise ConfigError("quantize=True on the ONNX backend needs the onnx package: pip install "
                          "'arabert-pipeline[export]' (or use the torch backend)") from exc
    with tempfile.TemporaryDirectory(prefix="arabert-int8-") as tmp:
        folded, quantized = Path(tmp) / "folded.onnx", Path(tmp) / "int8.onnx"
        graph = _folded_graph(path, folded)
        onnx.save(graph, str(folded))
        # An int8 table (weights/rows.py) is looked up as stored: its rows, their scales, its fp16 exact rows and its
        # row index are no weights to quantize (an fp16 table's Gather would get an fp16 scale DequantizeLinear
        # refuses; its scales, quantized, would round the table twice). export.py names those Gathers.
        stored = {t.name for t in graph.graph.initializer if t.data_type != onnx.TensorProto.FLOAT
                  or t.name.endswith("/scale")}
        exclude = [n.name for n in graph.graph.node if n.op_type == "Gather" and n.input[0] in stored]
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)  # the quantizer logs advice to run its shape-inference pass on every call
        try:
            quantize_dynamic(str(folded), str(quantized), weight_type=QuantType.QInt8, per_channel=True,
                             nodes_to_exclude=exclude, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        finally:
            logging.disable(previous)
        return quantized.read_bytes()


def _folded_graph(path: Path, folded: Path):
    """The graph at `path` with ONNX Runtime's basic optimizations applied (which fold the Cast / Transpose nodes over
    the stored weights into constants: the quantizers only see MatMuls whose weight is a constant), its weights
    loaded into it."""
    import onnx
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(folded)
    onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    # Weights used without a Cast (all of them in an fp32 model dir) stay references into the model dir's
    # model.safetensors, which the quantizer would look for beside the folded copy.
    graph = onnx.load(str(folded), load_external_data=False)
    onnx.external_data_helper.load_external_data_for_model(graph, str(path.parent))
    return graph


def int4_model(path: Path) -> bytes:
    """An ONNX graph with 4-bit weights, serialized: the MatMuls' weights and the token embeddings in blocks of
    INT4_BLOCK (symmetric, one fp32 scale a block; ONNX Runtime's weight-only quantizer), and the large fp32 constants
    left after folding (DeBERTa's relative-position tables projected by each layer: 9 MB of an L6/H384 model, used
    through batched MatMuls the quantizer does not take) int8 per last axis, dequantized when the graph runs.
    Activations stay fp32, so texts may be batched (the int8 form scales activations per batch: one text a run)."""
    import numpy as np

    try:
        from onnxruntime.quantization import QuantFormat
        from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer
    except ImportError as exc:
        raise ConfigError("the 4-bit form needs the onnx and onnx_ir packages: pip install "
                          "'arabert-pipeline[export]'") from exc
    with tempfile.TemporaryDirectory(prefix="arabert-int4-") as tmp:
        graph = _folded_graph(path, Path(tmp) / "folded.onnx")
    config = DefaultWeightOnlyQuantConfig(block_size=INT4_BLOCK, is_symmetric=True, quant_format=QuantFormat.QOperator,
                                          op_types_to_quantize=("MatMul", "Gather"),
                                          quant_axes=(("MatMul", 0), ("Gather", 1)))
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # the quantizer logs every node it visits, and the IR version it raises to 10
    try:
        # An all-zero block (the padding token's embedding) has scale 0: the quantizer divides by it and then keeps 0
        # for it, numpy warning of the discarded 0/0 meanwhile.
        with np.errstate(divide="ignore", invalid="ignore"):
            quantizer = MatMulNBitsQuantizer(graph, algo_config=config)
            quantizer.process()
    finally:
        logging.disable(previous)
    graph = quantizer.model.model
    _int8_constants(graph)
    return graph.SerializeToString()


# fp32 constants of at least this many values are stored int8 by int4_model; the small ones (biases, LayerNorm
# weights, shape constants) stay as they are.
_INT8_CONSTANT_MIN = 1 << 16


def _int8_constants(graph) -> None:
    """Replace, in place, each large fp32 initializer of `graph` by int8 values and a per-last-axis scale, with a
    DequantizeLinear node in front giving the original name (symmetric: max |x| maps to 127)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    kept, dequantize = [], []
    for tensor in graph.graph.initializer:
        if tensor.data_type != TensorProto.FLOAT or len(tensor.dims) < 2 or np.prod(tensor.dims) < _INT8_CONSTANT_MIN:
            kept.append(tensor)
            continue
        values = numpy_helper.to_array(tensor)
        scale = np.abs(values).max(axis=tuple(range(values.ndim - 1))) / 127.0
        scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
        quantized = np.clip(np.round(values / scale), -127, 127).astype(np.int8)
        kept += [numpy_helper.from_array(quantized, f"{tensor.name}/int8"),
                 numpy_helper.from_array(scale, f"{tensor.name}/scale")]
        dequantize.append(helper.make_node("DequantizeLinear", [f"{tensor.name}/int8", f"{tensor.name}/scale"],
                                           [tensor.name], axis=values.ndim - 1))
    del graph.graph.initializer[:]
    graph.graph.initializer.extend(kept)
    for node in reversed(dequantize):
        graph.graph.node.insert(0, node)


def int4_rare_rows(graph, keep) -> str:
    """Store, in place, the token-embedding table of an int8 graph (int8_model: a Gather of uint8 rows, then a
    DequantizeLinear with one scale and zero point) in two parts: the rows of the token ids `keep` (the frequent
    ones) as they were, and the others in 4-bit, blocks of INT4_BLOCK (symmetric, of the values their uint8 rows stand
    for; ONNX Runtime's GatherBlockQuantized), placed by an int32 row index as weights/rows.py places exact rows (≥ 0: a
    kept row; -1 - r: 4-bit row r). The frequent tokens, most of what a text reads, keep their values exactly; the
    rest take half the bytes. Returns the table's name."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    initializers = {tensor.name: tensor for tensor in graph.graph.initializer}
    if any(name.endswith(("/kept_rows", "/int4_rows")) for name in initializers):
        raise ConfigError("the graph's embedding rows are already split (kept rows and 4-bit rows)")
    opset = next((entry.version for entry in graph.opset_import if entry.domain in ("", "ai.onnx")), 0)
    if opset < 13:
        raise ConfigError(f"the graph's opset is {opset}: splitting its embedding rows needs 13 or later")
    consumers = {name: node for node in graph.graph.node for name in node.input}
    lookups = [node for node in graph.graph.node if node.op_type == "Gather" and node.input[0] in initializers
               and initializers[node.input[0]].data_type == TensorProto.UINT8
               and getattr(consumers.get(node.output[0]), "op_type", None) == "DequantizeLinear"]
    if not lookups:
        raise ConfigError("the graph has no uint8 embedding table (an int8 graph's Gather + DequantizeLinear)")
    gather = max(lookups, key=lambda node: np.prod(initializers[node.input[0]].dims))
    dequantize = consumers[gather.output[0]]
    table = gather.input[0]
    if sum(table in node.input for node in graph.graph.node) > 1:
        raise ConfigError(f"{table}: read by more than its Gather (tied weights?): its rows cannot be re-stored")
    if sum(gather.output[0] in node.input for node in graph.graph.node) > 1 or \
            any(name not in initializers for name in dequantize.input[1:]):
        raise ConfigError(f"{table}: expected its Gather read by one DequantizeLinear whose scale and zero point are "
                          "initializers")
    stored = numpy_helper.to_array(initializers[table])
    scale = numpy_helper.to_array(initializers[dequantize.input[1]])
    zero_point = numpy_helper.to_array(initializers[dequantize.input[2]]) if len(dequantize.input) > 2 else 0
    if scale.size != 1 or stored.ndim != 2 or stored.shape[1] % INT4_BLOCK:
        raise ConfigError(f"{table}: expected a per-tensor uint8 table whose rows are blocks of {INT4_BLOCK}")
    keep = np.unique(np.asarray(keep, dtype=np.int64))
    if not 0 < len(keep) < len(stored) or keep[0] < 0 or keep[-1] >= len(stored):
        raise ConfigError(f"{table}: the rows kept must be 1 or more of its {len(stored)} row ids, not all")
    rare = np.setdiff1d(np.arange(len(stored)), keep)
    index = np.empty(len(stored), dtype=np.int32)
    index[keep] = np.arange(len(keep))
    index[rare] = -1 - np.arange(len(rare))
    values = (stored[rare].astype(np.float32) - np.float32(zero_point)) * np.float32(scale)
    nibbles, block_scale = quantize_rows(values, INT4_BLOCK, bits=4)

    out, ids = dequantize.output[0], gather.input[1]
    kept_name, rare_name = f"{table}/kept_rows", f"{table}/int4_rows"
    constants = [
        numpy_helper.from_array(stored[keep], kept_name),
        helper.make_tensor(rare_name, TensorProto.INT4, nibbles.shape, pack_int4(nibbles).tobytes(), raw=True),
        numpy_helper.from_array(block_scale, f"{rare_name}/scale"),
        numpy_helper.from_array(index, f"{table}/index"),
        numpy_helper.from_array(np.array(0, np.int32), f"{out}/zero"),
        numpy_helper.from_array(np.array(-1, np.int32), f"{out}/minus_one"),
        numpy_helper.from_array(np.array([-1], np.int64), f"{out}/last_axis"),
    ]
    # Both lookups run for every id (a Gather of a negative id would wrap); Where keeps the right one.
    nodes = [
        helper.make_node("Gather", [f"{table}/index", ids], [f"{out}/place"], axis=0),
        helper.make_node("Max", [f"{out}/place", f"{out}/zero"], [f"{out}/kept_id"]),
        helper.make_node("Sub", [f"{out}/minus_one", f"{out}/place"], [f"{out}/rare_place"]),
        helper.make_node("Max", [f"{out}/rare_place", f"{out}/zero"], [f"{out}/rare_id"]),
        helper.make_node("Gather", [kept_name, f"{out}/kept_id"], [f"{out}/kept_stored"], axis=0),
        helper.make_node("DequantizeLinear", [f"{out}/kept_stored", *dequantize.input[1:]], [f"{out}/kept"]),
        helper.make_node("GatherBlockQuantized", [rare_name, f"{out}/rare_id", f"{rare_name}/scale"], [f"{out}/rare"],
                         domain="com.microsoft", block_size=INT4_BLOCK, gather_axis=0, quantize_axis=1),
        helper.make_node("GreaterOrEqual", [f"{out}/place", f"{out}/zero"], [f"{out}/is_kept"]),
        helper.make_node("Unsqueeze", [f"{out}/is_kept", f"{out}/last_axis"], [f"{out}/is_kept_row"]),
        helper.make_node("Where", [f"{out}/is_kept_row", f"{out}/kept", f"{out}/rare"], [out]),
    ]
    position = list(graph.graph.node).index(gather)
    remaining = [node for node in graph.graph.node if node is not gather and node is not dequantize]
    del graph.graph.node[:]
    graph.graph.node.extend(remaining[:position] + nodes + remaining[position:])
    kept = [tensor for tensor in graph.graph.initializer if tensor.name != table]
    del graph.graph.initializer[:]
    graph.graph.initializer.extend(kept + constants)
    if not any(entry.domain == "com.microsoft" for entry in graph.opset_import):
        graph.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return table


def open_task_model(directory: Path, vocab_size: object, *, quantize: bool = False):
    """A text-classification or token-classification dir's ONNX Runtime session and tokenizer, the tokenizer checked
    against the model's embeddings, and the rows one run may take: 1 when int8 (dynamic quantization scales
    activations per tensor, so a text batched with others would get other scores), else None (the caller's batch)."""
    from .tokenizer_adapter import TokenizerAdapter

    tokenizer = TokenizerAdapter.from_directory(directory)
    if vocab_size != len(tokenizer):
        raise ConfigError(f"{directory}: the tokenizer has {len(tokenizer)} tokens but the model has {vocab_size} "
                          "token embeddings")
    session = create_session(directory, quantize=quantize)
    return session, tokenizer, 1 if quantize or session_is_int8(session) else None


def run_task_session(session, batch: dict, output_names) -> np.ndarray:
    """The logits of a task model's session on a batch of ids and masks (token types zero where the graph has them)."""
    import numpy as np

    inputs = {i.name for i in session.get_inputs()}
    if "token_type_ids" in inputs:
        batch = {**batch, "token_type_ids": np.zeros_like(batch["input_ids"])}
    return session.run(list(output_names), {k: v for k, v in batch.items() if k in inputs})[0]


def head_outputs(session, output_name: str) -> int | None:
    """The head's outputs: the last dimension of the session's `output_name`, None where the graph leaves it
    symbolic (the names are then checked against config.json's id2label only)."""
    for output in session.get_outputs():
        if output.name == output_name and output.shape:
            return output.shape[-1] if type(output.shape[-1]) is int else None
    return None


def has_onnx_graph(directory: Path) -> bool:
    """Whether DIR/model.onnx is there to run; something there that is not a regular file (a FIFO, a device, a
    folder) is an InputError naming it: told it is "missing", the user would look for a file that is there, and
    opening a FIFO would hang."""
    from ..artifacts.reads import check_input_file

    path = Path(directory) / ONNX_FILE
    if not os.path.lexists(path):
        return False
    check_input_file(path, f"ONNX graph ({ONNX_FILE})")
    return True

"""A fine-tuned model dir's forward as `MODEL_DIR/model.onnx`, for answering without torch: every task exports this way
(qa/transformer/export.py for QA: `arabert-pipeline export-onnx`).

The graph takes `input_ids`, `attention_mask` (and `token_type_ids` when the model has them), batch and sequence
axes dynamic, and returns the task head's outputs by name (QA: `start_logits`, `end_logits`): the model's forward,
nothing else. Tokenization, preprocessing and decoding stay the package's.

The weights are not copied. `model.onnx` holds the graph only and reads every weight from `model.safetensors` beside
it (ONNX external data: file, offset, length), in the dtype stored there; a weight stored in fp16 reaches the graph
through a Cast to fp32, a Linear weight through a Transpose, and ONNX Runtime folds both into fp32 constants when the
session is created, so inference runs in fp32 like the torch path. The shipped model thus adds ~0.1 MB instead of a
second 23 MB (fp16) or 46 MB (fp32) copy of its weights, and the two files can never hold different weights. What
the graph assumes of them (their names, dtypes, shapes and offsets, and config.json) is fingerprinted into
model.onnx: a model dir whose weights file or config was rewritten since the export is refused at load, never run.

The exporter is torch's TorchScript one: on the QA model its graph runs ~20% faster under ONNX Runtime than the
torch.export one (whose GELU stays unfused). Each export is checked: ONNX Runtime and torch must give the same outputs
(within 1e-3) on inputs of several lengths, padded and not, or nothing is written.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import NamedTuple

from ..errors import ConfigError
from ..weights.header import read_safetensors_header
from ..weights.rows import STORAGE_KEY

ONNX_FILE = "model.onnx"
WEIGHTS_FILE = "model.safetensors"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
# model.onnx metadata_props keys.
FINGERPRINT_KEY = "arabert_pipeline.fingerprint"
PRODUCER = "arabert-pipeline export-onnx"
OPSET = 17
# Logits of ONNX Runtime and torch differ by float rounding (~1e-6); anything near this bound is another computation.
TOLERANCE = 1e-3
# Initializers smaller than this stay inside model.onnx (scalars, shape constants): not worth an external reference.
MIN_LINKED_ELEMENTS = 64
_SAFETENSORS_TYPES = {"F32": ("FLOAT", "float32"), "F16": ("FLOAT16", "float16"), "BF16": ("BFLOAT16", None)}


# The fingerprint: what model.onnx assumes of the files beside it ---------------------------------------------------

def config_digest(model_dir: str | os.PathLike) -> str:
    """A digest of config.json's content (key order and spacing aside)."""
    path = Path(model_dir) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: unreadable ({exc})") from exc
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode("utf-8")).hexdigest()


def weights_fingerprint(model_dir: str | os.PathLike) -> str:
    """A digest of config.json and of the weights file's layout (names, dtypes, shapes, offsets).

    The values are not hashed: model.onnx reads them from the file at load, so retrained weights of the same layout
    run correctly; a changed layout or config (another architecture, a rewritten file) changes the digest.
    """
    model_dir = Path(model_dir)
    digest = hashlib.sha256()
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{model_dir / 'config.json'}: unreadable ({exc})") from exc
    digest.update(json.dumps(config, sort_keys=True).encode("utf-8"))
    digest.update(read_safetensors_header(model_dir / WEIGHTS_FILE).raw)
    return digest.hexdigest()


# Export -------------------------------------------------------------------------------------------------------------

def check_model_dir(model_dir: str | os.PathLike, *, overwrite: bool) -> Path:
    """The model dir's model.onnx-to-be, once the files the graph and the ONNX backend read are there and an existing
    model.onnx may be replaced (an earlier export always may)."""
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise ConfigError(f"{model_dir} is not a model directory (no config.json)")
    if not (model_dir / WEIGHTS_FILE).is_file():
        raise ConfigError(f"{model_dir} has no {WEIGHTS_FILE}: the ONNX graph reads its weights from that file")
    if not (model_dir / "tokenizer.json").is_file():
        raise ConfigError(f"{model_dir} has no tokenizer.json, which the ONNX backend tokenizes with")
    target = model_dir / ONNX_FILE
    if target.exists() and not overwrite and not _written_by_us(target):
        raise ConfigError(f"{target} exists and was not written by export-onnx: pass --overwrite to replace it")
    return target


def export_graph(model_dir: str | os.PathLike, model, output_names: tuple[str, ...], *,
                 overwrite: bool = False, per_token: bool = True) -> Path:
    """Export `model` (the torch model of `model_dir`'s weights, in eval mode) to `model_dir/model.onnx` with the
    given outputs (attributes of its forward's output, shaped batch × sequence × ... when `per_token`, as QA's and
    NER's logits; batch × ... otherwise, as a classifier's), linked to model.safetensors and checked against torch;
    returns its path."""
    import numpy as np

    from ..artifacts.writes import naming_io_errors

    try:
        import onnx
    except ImportError as exc:
        raise ConfigError("export-onnx needs the onnx package: pip install 'arabert-pipeline[export]'") from exc

    model_dir = Path(model_dir)
    target = check_model_dir(model_dir, overwrite=overwrite)
    inputs = [name for name in INPUT_NAMES if name in _forward_parameters(model)]
    with tempfile.TemporaryDirectory(prefix="export-onnx-") as tmp:
        traced = Path(tmp) / ONNX_FILE
        with naming_io_errors(traced):  # the exporter's failed write (a full disk) names no file
            _trace(model, inputs, output_names, traced, per_token)
        graph = onnx.load(str(traced))
    _link_weights(graph, model_dir / WEIGHTS_FILE)
    graph.producer_name = PRODUCER
    onnx.helper.set_model_props(graph, {FINGERPRINT_KEY: weights_fingerprint(model_dir)})
    # Checked where it will live (its external references are relative to the model dir), then moved into place.
    staged = model_dir / f".{ONNX_FILE}.{os.getpid()}.tmp"
    try:
        with naming_io_errors(staged):
            staged.write_bytes(graph.SerializeToString())
        onnx.checker.check_model(str(staged))
        _check_against_torch(staged, model, inputs, output_names, np.random.default_rng(0), per_token)
        os.replace(staged, target)
    finally:
        staged.unlink(missing_ok=True)
    return target


def _written_by_us(path: Path) -> bool:
    import onnx

    try:
        return onnx.load(str(path), load_external_data=False).producer_name == PRODUCER
    except Exception:  # unreadable: certainly not one of ours
        return False


def _forward_parameters(model) -> set[str]:
    import inspect

    return set(inspect.signature(model.forward).parameters)


def _trace(model, inputs: list[str], output_names: tuple[str, ...], path: Path, per_token: bool = True) -> None:
    import torch

    class Outputs(torch.nn.Module):
        """The model's forward with positional inputs and the named outputs as a tuple."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *tensors):
            out = self.model(**dict(zip(inputs, tensors, strict=True)))
            return tuple(getattr(out, name) for name in output_names)

    # A padded second row, so that the attention mask's computation is part of the trace.
    ids = torch.randint(5, model.config.vocab_size, (2, 16))
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0
    example = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    axes = {name: {0: "batch", 1: "sequence"} for name in inputs}
    axes.update({name: {0: "batch", 1: "sequence"} if per_token else {0: "batch"} for name in output_names})
    with warnings.catch_warnings():
        # Expected from the TorchScript exporter on this model (its deprecation, shape-dependent branches in
        # transformers' mask code, index lowering); _check_against_torch is what decides whether the graph is right.
        warnings.simplefilter("ignore")
        with torch.no_grad():
            # eval() on the wrapper: the exporter restores the wrapper's mode afterwards, recursively, and a new
            # module's mode is training (dropout on in the model checked next).
            torch.onnx.export(Outputs().eval(), tuple(example[name] for name in inputs), str(path), dynamo=False,
                              opset_version=OPSET, input_names=inputs, output_names=list(output_names),
                              dynamic_axes=axes, do_constant_folding=True)


def _stored_tensors(weights: Path) -> dict:
    """{name: (values as float32, ONNX type name, absolute offset, length in bytes)} of a safetensors file."""
    import numpy as np

    from ..weights.rows import EXACT_SUFFIX, INDEX_SUFFIX, SCALE_SUFFIX, check_int8_table, dequantize_table

    read = read_safetensors_header(weights)
    header, data_start = read.tensors, read.data_start
    data = weights.read_bytes()
    compact = read.metadata.get(STORAGE_KEY) is not None

    def part(entry: dict | None, dtype: str):
        """(values, (shape, absolute offset, length)) of a stored tensor, or None."""
        if entry is None:
            return None
        begin, end = entry["data_offsets"]
        values = np.frombuffer(data[data_start + begin : data_start + end], dtype=dtype).reshape(entry["shape"])
        return values, (entry["shape"], data_start + begin, end - begin)

    stored: dict[str, tuple[np.ndarray, str, int, int, Int8Parts | None]] = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        raw = data[data_start + begin : data_start + end]
        scale = part(header.get(name + SCALE_SUFFIX), "<f4") if compact else None
        if entry["dtype"] == "I8" and scale is not None:  # int8 rows: matched by their fp32 values
            exact_entry, index = header.get(name + EXACT_SUFFIX), part(header.get(name + INDEX_SUFFIX), "<i4")
            exact_type = exact_entry and {"F16": "FLOAT16", "F32": "FLOAT"}.get(exact_entry.get("dtype"))
            if (exact_entry is None) != (index is None) or (exact_entry is not None and exact_type is None):
                raise ConfigError(f"{weights}: {name}'s exact rows must be float16 or float32, with a row index")
            exact = part(exact_entry, "<f2" if exact_type == "FLOAT16" else "<f4") if exact_type else None
            quantized = np.frombuffer(raw, dtype=np.int8).reshape(entry["shape"])
            exact_rows, row_index = (exact[0] if exact else None), (index[0] if index else None)
            check_int8_table(weights, name, quantized, scale[0], exact_rows, row_index)
            values = dequantize_table(quantized, scale[0], exact_rows, row_index)
            parts = Int8Parts(entry["shape"], scale[1], (exact_type, *exact[1]) if exact else None,
                              index[1] if index else None)
            stored[name] = (values, "INT8", data_start + begin, end - begin, parts)
            continue
        if entry["dtype"] not in _SAFETENSORS_TYPES or (compact and name.endswith((SCALE_SUFFIX, EXACT_SUFFIX))):
            continue
        onnx_type, numpy_type = _SAFETENSORS_TYPES[entry["dtype"]]
        if numpy_type is None:  # bfloat16: the upper half of a float32
            values = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            values = np.frombuffer(raw, dtype=np.dtype(numpy_type).newbyteorder("<")).astype(np.float32)
        stored[name] = (values.reshape(entry["shape"]), onnx_type, data_start + begin, end - begin, None)
    return stored


class Int8Parts(NamedTuple):
    """Where a table stored as int8 rows lies in the weights file: its int8 rows' shape, and (shape, offset, length)
    of their scales, of its exact rows (with their ONNX type name first; None when it keeps none) and of its row
    index (None likewise)."""
    shape: list
    scale: tuple
    exact: tuple | None
    row_index: tuple | None  # not `index`, which would hide tuple.index


def _external(name: str, data_type: int, dims, offset: int, length: int):
    """A tensor read from WEIGHTS_FILE at (offset, length)."""
    from onnx import TensorProto

    tensor = TensorProto(name=name, data_type=data_type, dims=dims)
    tensor.data_location = TensorProto.EXTERNAL
    for field, value in (("location", WEIGHTS_FILE), ("offset", offset), ("length", length)):
        tensor.external_data.add(key=field, value=str(value))
    return tensor


def _link_weights(graph, weights: Path) -> None:
    """Replace every traced weight by a reference into the safetensors file, through Cast / Transpose nodes.

    A traced initializer is matched to the stored tensor with the same values (the exporter renames and transposes
    weights), preferring the one whose name it carries; values are compared after the stored dtype's conversion to
    fp32, which is exactly what the torch path computes with.
    """
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    stored = _stored_tensors(weights)

    def find(name: str, array: np.ndarray) -> tuple[str, bool] | None:
        by_name = [key for key in stored if name == key or name.endswith("." + key)]
        for key in by_name + [k for k in stored if k not in by_name]:
            values = stored[key][0]
            if values.shape == array.shape and np.array_equal(values, array):
                return key, False
            if values.ndim == 2 and values.T.shape == array.shape and np.array_equal(values.T, array):
                return key, True
        return None

    # Traced weights that only Gather nodes read along their rows (word embeddings): stored as int8 rows, such a table
    # is looked up before it is widened (_gathered_rows).
    readers: dict[str, list] = {}
    for node in graph.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)

    def only_gathered(name: str) -> bool:
        found = readers.get(name, [])
        return bool(found) and all(node.op_type == "Gather" and node.input[0] == name and name not in node.input[1:]
                                   and all(a.name != "axis" or a.i == 0 for a in node.attribute) for node in found)

    kept, linked, as_float, nodes, gathered = [], {}, {}, [], {}
    for initializer in graph.graph.initializer:
        array = numpy_helper.to_array(initializer) if initializer.data_type == TensorProto.FLOAT else None
        match = find(initializer.name, array) if array is not None and array.size >= MIN_LINKED_ELEMENTS else None
        if match is None:
            kept.append(initializer)
            continue
        key, transposed = match
        values, onnx_type, offset, length, parts = stored[key]
        if key not in linked:
            tensor = _external(f"weights/{key}", getattr(TensorProto, onnx_type),
                               values.shape if parts is None else parts.shape, offset, length)
            linked[key] = tensor
            as_float[key] = tensor.name
            if parts is not None:
                linked[key + "/scale"] = _external(f"weights/{key}/scale", TensorProto.FLOAT, *parts.scale)
            if parts is not None and parts.exact is not None:
                exact_type, *exact = parts.exact
                linked[key + "/exact"] = _external(f"weights/{key}/exact", getattr(TensorProto, exact_type), *exact)
                linked[key + "/index"] = _external(f"weights/{key}/index", TensorProto.INT32, *parts.row_index)
        if parts is not None and not transposed and only_gathered(initializer.name):
            gathered[initializer.name] = (f"weights/{key}", parts)
            continue
        if parts is not None and as_float[key] == f"weights/{key}":  # int8 rows: widened once, folded at load
            as_float[key] = f"weights/{key}/fp32"
            made, extra = _widen_int8(f"weights/{key}", parts, len(values), as_float[key])
            nodes += _named(made)
            kept += extra
        elif parts is None and onnx_type != "FLOAT" and as_float[key] == f"weights/{key}":
            as_float[key] = f"weights/{key}/fp32"
            nodes.append(helper.make_node("Cast", [f"weights/{key}"], [as_float[key]], to=TensorProto.FLOAT))
        if transposed:
            nodes.append(helper.make_node("Transpose", [as_float[key]], [initializer.name], perm=[1, 0]))
        else:
            nodes.append(helper.make_node("Identity", [as_float[key]], [initializer.name]))
    if not linked:
        raise ConfigError(f"{weights}: none of the exported weights was found in this file")
    traced = []
    for node in graph.graph.node:
        if node.op_type == "Gather" and node.input[0] in gathered:
            made, extra = _gathered_rows(*gathered[node.input[0]], node.input[1], node.output[0])
            traced += _named(made)
            kept += extra
        else:
            traced.append(node)
    del graph.graph.initializer[:]
    graph.graph.initializer.extend([*kept, *linked.values()])
    del graph.graph.node[:]
    graph.graph.node.extend([*nodes, *traced])


def _named(nodes: list) -> list:
    """The nodes, each named after its output: ONNX Runtime's quantizers choose nodes by name (runtime.int8_model
    leaves an int8 table's lookups alone), and unnamed ones all share the name ""."""
    for node in nodes:
        node.name = node.name or node.output[0]
    return nodes


def _widen_int8(table: str, parts: Int8Parts, rows: int, output: str) -> tuple[list, list]:
    """(nodes, shape constants) widening an int8-row tensor to fp32: Cast, times its scales (per row, or per block of a
    row through a reshape to rows × blocks × block and back); a table with exact rows is every row looked up
    (_gathered_rows over 0..rows-1). ONNX Runtime folds them into one fp32 constant."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    if parts.exact is not None:
        ids = f"{table}/row_ids"
        bounds = [numpy_helper.from_array(np.array(value, np.int32), f"{table}/range_{name}")
                  for name, value in (("start", 0), ("limit", rows), ("delta", 1))]
        made, constants = _gathered_rows(table, parts, ids, output)
        return [helper.make_node("Range", [b.name for b in bounds], [ids]), *made], bounds + constants
    rows, columns = parts.shape
    blocks = parts.scale[0][-1]
    scale = f"{table}/scale"
    nodes = [helper.make_node("Cast", [table], [f"{table}/int8_as_fp32"], to=TensorProto.FLOAT)]
    if blocks == 1:
        return nodes + [helper.make_node("Mul", [f"{table}/int8_as_fp32", scale], [output])], []
    constants = [numpy_helper.from_array(np.array([rows, blocks, columns // blocks], np.int64), f"{table}/blocked"),
                 numpy_helper.from_array(np.array([rows, blocks, 1], np.int64), f"{table}/scale_blocked"),
                 numpy_helper.from_array(np.array([rows, columns], np.int64), f"{table}/rows")]
    nodes += [helper.make_node("Reshape", [f"{table}/int8_as_fp32", f"{table}/blocked"], [f"{table}/blocks"]),
              helper.make_node("Reshape", [scale, f"{table}/scale_blocked"], [f"{table}/scales"]),
              helper.make_node("Mul", [f"{table}/blocks", f"{table}/scales"], [f"{table}/scaled"]),
              helper.make_node("Reshape", [f"{table}/scaled", f"{table}/rows"], [output])]
    return nodes, constants


def _gathered_rows(table: str, parts: Int8Parts, ids: str, out: str) -> tuple[list, list]:
    """(nodes, constants) in place of a Gather of rows `ids` from an int8-row table into `out`: the int8 rows and
    their scales gathered, then Cast and Mul — the same products as widening the whole table first, without an fp32
    copy of it in memory or its widening at each session start. With exact rows, the row index says for each id
    whether its row is one of those (widened from their stored dtype) or which int8 row it is (weights/rows.py)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    if parts.exact is None:
        return _int8_rows(table, parts, ids, out)
    zero, minus_one, last = f"{out}/zero", f"{out}/minus_one", f"{out}/last_axis"
    constants = [numpy_helper.from_array(np.array(0, np.int32), zero),
                 numpy_helper.from_array(np.array(-1, np.int32), minus_one),
                 numpy_helper.from_array(np.array([-1], np.int64), last)]
    # Both lookups run for every id (a Gather of a negative id would wrap), Where keeps the right one.
    nodes = [helper.make_node("Gather", [f"{table}/index", ids], [f"{out}/place"], axis=0),
             helper.make_node("Max", [f"{out}/place", zero], [f"{out}/exact_id"]),
             helper.make_node("Sub", [minus_one, f"{out}/place"], [f"{out}/int8_place"]),
             helper.make_node("Max", [f"{out}/int8_place", zero], [f"{out}/int8_id"]),
             helper.make_node("Gather", [f"{table}/exact", f"{out}/exact_id"], [f"{out}/exact_stored"], axis=0),
             helper.make_node("Cast", [f"{out}/exact_stored"], [f"{out}/exact_rows"], to=TensorProto.FLOAT)]
    made, extra = _int8_rows(table, parts, f"{out}/int8_id", f"{out}/int8_rows")
    nodes += made + [
        helper.make_node("GreaterOrEqual", [f"{out}/place", zero], [f"{out}/is_exact"]),
        helper.make_node("Unsqueeze", [f"{out}/is_exact", last], [f"{out}/is_exact_row"]),
        helper.make_node("Where", [f"{out}/is_exact_row", f"{out}/exact_rows", f"{out}/int8_rows"], [out])]
    return nodes, constants + extra


def _int8_rows(table: str, parts: Int8Parts, ids: str, out: str) -> tuple[list, list]:
    """(nodes, constants): rows `ids` of the int8 rows `table` and of their scales, widened to fp32 into `out`."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    columns, blocks = parts.shape[1], parts.scale[0][-1]
    nodes = [helper.make_node("Gather", [table, ids], [f"{out}/int8"], axis=0),
             helper.make_node("Gather", [f"{table}/scale", ids], [f"{out}/scale"], axis=0),
             helper.make_node("Cast", [f"{out}/int8"], [f"{out}/int8_as_fp32"], to=TensorProto.FLOAT)]
    if blocks == 1:
        return nodes + [helper.make_node("Mul", [f"{out}/int8_as_fp32", f"{out}/scale"], [out])], []
    # ids of any rank: the gathered rows split into blocks and joined again (Reshape's 0 keeps a dimension); the
    # shape of the ids is taken at run time
    constants = [numpy_helper.from_array(np.array([blocks, columns // blocks], np.int64), f"{out}/split"),
                 numpy_helper.from_array(np.array([blocks, 1], np.int64), f"{out}/scale_split"),
                 numpy_helper.from_array(np.array([columns], np.int64), f"{out}/joined")]
    nodes += [helper.make_node("Shape", [ids], [f"{out}/ids_shape"]),
              helper.make_node("Concat", [f"{out}/ids_shape", f"{out}/split"], [f"{out}/blocked_shape"], axis=0),
              helper.make_node("Concat", [f"{out}/ids_shape", f"{out}/scale_split"], [f"{out}/scale_shape"], axis=0),
              helper.make_node("Concat", [f"{out}/ids_shape", f"{out}/joined"], [f"{out}/rows_shape"], axis=0),
              helper.make_node("Reshape", [f"{out}/int8_as_fp32", f"{out}/blocked_shape"], [f"{out}/blocks"]),
              helper.make_node("Reshape", [f"{out}/scale", f"{out}/scale_shape"], [f"{out}/scales"]),
              helper.make_node("Mul", [f"{out}/blocks", f"{out}/scales"], [f"{out}/scaled"]),
              helper.make_node("Reshape", [f"{out}/scaled", f"{out}/rows_shape"], [out])]
    return nodes, constants


def _check_against_torch(path: Path, model, inputs: list[str], output_names: tuple[str, ...], rng,
                         per_token: bool = True) -> None:
    """ONNX Runtime on the written file vs the torch model, on inputs of several lengths with and without padding (an
    output's values at padded positions are not compared)."""
    import numpy as np
    import onnxruntime
    import torch

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    try:
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ONNX Runtime raises its own exception types
        raise ConfigError(f"the exported graph does not load in ONNX Runtime ({exc})") from exc
    vocab = model.config.vocab_size
    positions = getattr(model.config, "max_position_embeddings", -1)  # XLNet's -1: relative positions, no limit
    for rows, length in ((1, 7), (3, 40), (2, min(300, positions) if positions > 0 else 300)):
        ids = rng.integers(5, vocab, (rows, length)).astype(np.int64)
        mask = np.ones_like(ids)
        for r in range(1, rows):
            mask[r, length - 3 * r :] = 0
        types = np.zeros_like(ids)
        types[:, length // 3 :] = 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        feeds = {name: feeds[name] for name in inputs}
        got = session.run(list(output_names), feeds)
        with torch.no_grad():
            out = model(**{name: torch.from_numpy(v) for name, v in feeds.items()})
        for name, onnx_values in zip(output_names, got, strict=True):
            gap = np.abs(onnx_values - getattr(out, name).numpy())
            gap = float((gap[mask.astype(bool)] if per_token else gap).max())
            if not gap <= TOLERANCE:
                raise ConfigError(f"the exported graph's {name} differ from torch's by {gap:.2g} on a {rows}×{length}"
                                  " batch: not written")

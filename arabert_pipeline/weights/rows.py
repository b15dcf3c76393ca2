"""Compact weight storage for a shipped model (issue 53): int8 values with one fp32 scale per row in
`model.safetensors`, widened to fp32 when the model is loaded, so a model computes exactly as an fp32 model whose
weights are those dequantized values.

    arabert-pipeline weights MODEL_DIR --int8-rows     # rewrite MODEL_DIR/model.safetensors in int8 rows
    arabert-pipeline weights MODEL_DIR --plain OUT     # a plain fp32 transformers copy of MODEL_DIR

Each 2-D floating tensor of at least `MIN_ELEMENTS` values (embedding tables, linear weights; or the ones chosen) is
stored as int8 under its own name plus `NAME` + `SCALE_SUFFIX` (float32, rows × blocks: one scale per block of
consecutive values of a row, or per row; symmetric: a block's largest |value| maps to 127); every other tensor keeps
its stored dtype. The file's metadata says so (`STORAGE_KEY`), and only files that say so are read as int8 rows.
Storage only: neither backend computes in int8. The torch backend gets the fp32 values through
`dequantized_state_dict` (loading.py, for artifacts.models.load_pretrained_model), the ONNX graph through Cast and Mul
nodes on the stored tensors that ONNX Runtime folds into fp32 constants when the session is created
(finetuning/export.py), so both run the same fp32 weights. Such a file is not a plain transformers checkpoint:
`--plain OUT` writes one (what `AutoModel...from_pretrained(OUT)` loads without this package), and `from_pretrained`
(loading.py) loads either kind (every loader of this package goes through it).

A table may keep some rows exactly as stored (`exact_rows` of `compact`: the QA model keeps its most frequent tokens'
embeddings in fp16, the rare ones in int8): then NAME holds the int8 rows of the others only, NAME + EXACT_SUFFIX the
kept rows in their stored dtype and NAME + INDEX_SUFFIX (int32, one per row of the table) where each row lives: i ≥ 0
is row i of the exact rows, i < 0 row -1 - i of the int8 ones. Such a file records INT8_ROWS_EXACT, which a version
of this package that cannot read it refuses by name.

Whether a model keeps its answers in this form is measured on dev before it ships (scripts/compact_gate.py).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:  # numpy and onnx load when a function needs them: `import arabert_pipeline` stays fast
    import numpy as np
    from numpy.typing import ArrayLike, NDArray
    from onnx import ModelProto

STORAGE_KEY = "arabert_pipeline.storage"
INT8_ROWS = "int8-rows"
INT8_ROWS_EXACT = "int8-rows+exact-rows"
SCALE_SUFFIX = ".int8_scale"
EXACT_SUFFIX = ".exact_rows"
INDEX_SUFFIX = ".row_index"
MIN_ELEMENTS = 1 << 16


def quantize_rows(values: ArrayLike, block: int | None = None,
                  bits: int = 8) -> tuple[NDArray[np.int8], NDArray[np.float32]]:
    """(int8 values, float32 scales rows × blocks) of a 2-D array: symmetric, one scale per `block` consecutive values
    of a row (None: per row, scales rows × 1); values in ±127, or ±7 with `bits` = 4 (pack_int4 stores those)."""
    import numpy as np

    values = np.asarray(values, dtype=np.float32)
    rows, columns = values.shape
    block = block or columns
    if columns % block:
        raise ConfigError(f"a block of {block} does not divide rows of {columns} values")
    grouped = values.reshape(rows, columns // block, block)
    top = 2 ** (bits - 1) - 1
    scale = np.abs(grouped).max(axis=2, keepdims=True) / float(top)
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    quantized = np.clip(np.rint(grouped / scale), -top, top).astype(np.int8)
    return quantized.reshape(rows, columns), scale.reshape(rows, columns // block)


def dequantize_rows(quantized: NDArray[Any], scale: NDArray[Any]) -> NDArray[np.float32]:
    """The fp32 values int8 rows stand for: each value times its block's scale (what the ONNX graph's Cast + Mul
    compute); `scale` is rows × blocks (rows × 1: one per row)."""
    import numpy as np

    rows, columns = quantized.shape
    blocks = scale.shape[-1]
    widened = quantized.astype(np.float32).reshape(rows, blocks, columns // blocks)
    return (widened * scale.astype(np.float32).reshape(rows, blocks, 1)).reshape(rows, columns)


def dequantize_table(quantized: NDArray[Any], scale: NDArray[Any], exact: NDArray[Any] | None = None,
                     index: ArrayLike | None = None) -> NDArray[np.float32]:
    """dequantize_rows, with the rows kept exactly (`exact`, placed by `index` as the module docstring says) put back
    in their places: the fp32 table both backends compute with."""
    import numpy as np

    widened = dequantize_rows(quantized, scale)
    if exact is None:
        return widened
    index = np.asarray(index)
    table = np.empty((len(index), widened.shape[1]), dtype=np.float32)
    kept = index >= 0
    table[kept] = np.asarray(exact, dtype=np.float32)[index[kept]]
    table[~kept] = widened[-1 - index[~kept]]
    return table


def pack_int4(values: ArrayLike) -> NDArray[np.uint8]:
    """Signed 4-bit values (int8 in [-8, 7], rows of an even length) packed two a byte, the first in the low nibble:
    uint8 rows of half the length (ONNX's INT4 layout too)."""
    import numpy as np

    nibbles = (np.asarray(values, dtype=np.int8) & 0x0F).astype(np.uint8)
    return nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)  # type: ignore[return-value]  # uint8, typed signed


def unpack_int4(packed: ArrayLike, dim: int) -> NDArray[np.int8]:
    """pack_int4's inverse: int8 rows of `dim` values."""
    import numpy as np

    packed = np.asarray(packed, dtype=np.uint8)
    out = np.empty((*packed.shape[:-1], dim), dtype=np.int8)
    out[..., 0::2] = (packed & 0x0F).astype(np.int8)
    out[..., 1::2] = (packed >> 4).astype(np.int8)
    return np.where(out > 7, out - 16, out).astype(np.int8)


def check_int8_table(path: object, name: str, quantized: NDArray[Any], scale: NDArray[Any] | None,
                     exact: NDArray[Any] | None = None, index: NDArray[Any] | None = None) -> None:
    """A ConfigError naming PATH unless a stored int8 table is whole: int8 rows with a finite float32 scale per row or
    per block, and any exact rows (float16 or float32, as wide as the int8 rows) placed with the int8 rows by a row
    index that names each exactly once. A damaged file's table would otherwise load scrambled, as its raw int8 values,
    or (a NaN scale) as rows that silently change answers."""
    import numpy as np

    def fits(scale: NDArray[Any]) -> bool:
        if quantized.dtype != np.int8 or quantized.ndim != 2 or scale.dtype != np.float32:
            return False
        if scale.ndim != 2 or scale.shape[0] != quantized.shape[0] or not 0 < scale.shape[1] <= quantized.shape[1] \
                or quantized.shape[1] % scale.shape[1]:
            return False
        if exact is None and index is None:
            return True
        if exact is None or index is None or exact.dtype not in (np.float16, np.float32) or exact.ndim != 2 \
                or exact.shape[1] != quantized.shape[1] or index.ndim != 1 or index.dtype != np.int32:
            return False
        kept, others = index[index >= 0], -1 - index[index < 0]
        return (np.array_equal(np.sort(kept), np.arange(len(exact)))
                and np.array_equal(np.sort(others), np.arange(len(quantized))))

    if scale is None or not fits(scale):
        raise ConfigError(f"{path}: {name} is not a whole int8 table (its int8 rows, row scales, exact rows and row "
                          "index do not fit together): the file is damaged; restore it")
    if not np.isfinite(scale).all():
        raise ConfigError(f"{path}: {name}{SCALE_SUFFIX} holds {int((~np.isfinite(scale)).sum())} scale(s) that are "
                          "NaN or infinite: the file is damaged; restore it")


def compact(source: str | os.PathLike[str], target: str | os.PathLike[str], *, min_elements: int = MIN_ELEMENTS,
            blocks: dict[str, int | None] | None = None, only: tuple[str, ...] | None = None,
            exact_rows: dict[str, object] | None = None) -> dict[str, int]:
    """Write SOURCE (a safetensors file) to TARGET in int8 rows (2-D tensors of ≥ `min_elements` values, or only those
    whose name contains one of `only`); `blocks`: {name part: block size} (the first part found in a tensor's name
    decides; none: one scale per row); `exact_rows`: {name part: row numbers} kept as stored in that tensor (the
    module docstring's layout). Returns {"quantized": n, "kept": m}."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    tensors = load_file(os.fspath(source))
    out, quantized, storage = {}, 0, INT8_ROWS
    for name, values in tensors.items():
        if name.endswith((SCALE_SUFFIX, EXACT_SUFFIX, INDEX_SUFFIX)):
            raise ConfigError(f"{source}: already holds int8 rows ({name})")
        chosen = only is None or any(part in name for part in only)
        if chosen and values.ndim == 2 and values.dtype.kind == "f" and values.size >= min_elements:
            block = next((size for part, size in (blocks or {}).items() if part in name), None)
            keep = next((rows for part, rows in (exact_rows or {}).items() if part in name), None)
            index = None if keep is None else _row_index(len(values), keep, f"{source}: {name}")
            if index is not None and (index >= 0).all():  # every row kept: the table stays as it is
                out[name] = np.ascontiguousarray(values)
                continue
            if index is None or (index < 0).all():
                out[name], out[name + SCALE_SUFFIX] = quantize_rows(values, block)
            else:
                out[name], out[name + SCALE_SUFFIX] = quantize_rows(values[np.flatnonzero(index < 0)], block)
                out[name + EXACT_SUFFIX] = np.ascontiguousarray(values[np.flatnonzero(index >= 0)])
                out[name + INDEX_SUFFIX] = index
                storage = INT8_ROWS_EXACT
            quantized += 1
        else:
            out[name] = np.ascontiguousarray(values)
    save_file(out, os.fspath(target), metadata={"format": "pt", STORAGE_KEY: storage})
    return {"quantized": quantized, "kept": len(tensors) - quantized}


def _row_index(rows: int, keep: object, what: str) -> NDArray[np.int32]:
    """The INDEX_SUFFIX array of a table of `rows` rows keeping the row numbers `keep` exactly: kept rows numbered in
    table order from 0, the others -1, -2, ... in table order."""
    import numpy as np

    keep = np.asarray(keep)
    if keep.size and keep.dtype.kind not in "iu":  # a boolean mask or floats would name other rows than meant
        raise ConfigError(f"{what}: exact rows must be row numbers (integers), not {keep.dtype}")
    keep = np.unique(keep.astype(np.int64))
    if keep.size and (keep[0] < 0 or keep[-1] >= rows):
        raise ConfigError(f"{what}: exact rows must lie in 0..{rows - 1}")
    kept = np.zeros(rows, dtype=bool)
    kept[keep] = True
    index = np.empty(rows, dtype=np.int32)
    index[kept] = np.arange(int(kept.sum()), dtype=np.int32)
    index[~kept] = -1 - np.arange(int((~kept).sum()), dtype=np.int32)
    return index


def compact_graph(graph: ModelProto, min_elements: int = MIN_ELEMENTS) -> int:
    """Store, in place, each fp32 initializer of an ONNX graph with ≥ `min_elements` values and ≥ 2 axes as int8 rows
    (along its last axis) and their float32 scales, a Cast and a Mul in front giving the original name: ONNX Runtime
    folds them into the fp32 constant at session creation. Returns how many initializers were stored so."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    kept, nodes = [], []
    for tensor in graph.graph.initializer:
        if tensor.data_type != TensorProto.FLOAT or len(tensor.dims) < 2 or np.prod(tensor.dims) < min_elements:
            kept.append(tensor)
            continue
        values = numpy_helper.to_array(tensor)
        quantized, scale = quantize_rows(values.reshape(-1, values.shape[-1]))
        name = tensor.name
        kept += [numpy_helper.from_array(quantized.reshape(values.shape), f"{name}/int8"),
                 numpy_helper.from_array(scale.reshape(*values.shape[:-1], 1), f"{name}/scale")]
        nodes += [helper.make_node("Cast", [f"{name}/int8"], [f"{name}/int8_as_fp32"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", [f"{name}/int8_as_fp32", f"{name}/scale"], [name])]
    del graph.graph.initializer[:]
    graph.graph.initializer.extend(kept)
    for node in reversed(nodes):
        graph.graph.node.insert(0, node)
    return len(nodes) // 2

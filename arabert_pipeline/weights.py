"""Compact weight storage for a shipped model (issue 53): int8 values with one fp32 scale per row in
`model.safetensors`, widened to fp32 when the model is loaded, so a model computes exactly as an fp32 model whose
weights are those dequantized values.

    arabert-pipeline weights MODEL_DIR --int8-rows     # rewrite MODEL_DIR/model.safetensors in int8 rows
    arabert-pipeline weights MODEL_DIR --plain OUT     # a plain fp32 transformers copy of MODEL_DIR

Each 2-D floating tensor of at least `MIN_ELEMENTS` values (embedding tables, linear weights; or the ones chosen) is
stored as int8 under its own name plus `NAME` + `SCALE_SUFFIX` (float32, rows × blocks: one scale per block of
consecutive values of a row, or per row; symmetric: a block's largest |value| maps to 127); every other tensor keeps
its stored dtype. The file's metadata says so (`STORAGE_KEY`), and only files that say so are
read as int8 rows. Storage only: neither backend computes in int8. The torch backend gets the fp32 values through
`dequantized_state_dict` (artifacts.load_pretrained_model), the ONNX graph through Cast and Mul nodes on the stored
tensors that ONNX Runtime folds into fp32 constants when the session is created (finetuning/export.py), so both run the
same fp32 weights. Such a file is not a plain transformers checkpoint: `--plain OUT` writes one (what
`AutoModel...from_pretrained(OUT)` loads without this package), and `from_pretrained` below loads either kind (every
loader of this package goes through it).

A table may keep some rows exactly as stored (`exact_rows` of `compact`: the QA model keeps its most frequent tokens'
embeddings in fp16, the rare ones in int8): then NAME holds the int8 rows of the others only, NAME + EXACT_SUFFIX the
kept rows in their stored dtype and NAME + INDEX_SUFFIX (int32, one per row of the table) where each row lives: i ≥ 0
is row i of the exact rows, i < 0 row -1 - i of the int8 ones. Such a file records INT8_ROWS_EXACT, which a version
of this package that cannot read it refuses by name.

Whether a model keeps its answers in this form is measured on dev before it ships (scripts/compact_gate.py).
"""
from __future__ import annotations

import io
import json
import os
import stat
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .errors import ConfigError, InputError

if TYPE_CHECKING:  # numpy, torch and the rest load when a function needs them: `import arabert_pipeline` stays fast
    import numpy as np
    import torch
    from numpy.typing import ArrayLike, NDArray
    from onnx import ModelProto
    from safetensors import safe_open
    from transformers import PretrainedConfig, PreTrainedModel

STORAGE_KEY = "arabert_pipeline.storage"
INT8_ROWS = "int8-rows"
INT8_ROWS_EXACT = "int8-rows+exact-rows"
SCALE_SUFFIX = ".int8_scale"
EXACT_SUFFIX = ".exact_rows"
INDEX_SUFFIX = ".row_index"
MIN_ELEMENTS = 1 << 16


# The most header bytes a safetensors file may claim (the safetensors library's own bound): a larger length, as a
# damaged or hostile file's first 8 bytes may give, is refused before anything is allocated for it.
MAX_HEADER_BYTES = 100_000_000


class SafetensorsHeader(NamedTuple):
    tensors: dict[str, Any]  # name → {"dtype", "shape", "data_offsets"}, __metadata__ left out
    metadata: dict[str, Any]  # __metadata__ ({} when there is none)
    data_start: int  # offset of the data section in the file
    raw: bytes  # the header's bytes as stored (finetuning/export.py fingerprints them)


def read_safetensors_header(path: str | os.PathLike[str]) -> SafetensorsHeader:
    """The header of a safetensors file, read without its tensors; a file that is not one (not a regular file,
    unreadable, truncated, a header length over MAX_HEADER_BYTES, JSON nested past the recursion limit, not a JSON
    object) is a one-line ConfigError naming it."""
    try:
        with open_regular_file(path) as f:
            size = struct.unpack("<Q", f.read(8))[0]
            if size > MAX_HEADER_BYTES:
                raise ValueError(f"its header claims {size:,} bytes, more than the {MAX_HEADER_BYTES:,} allowed")
            raw = f.read(size)
        if len(raw) != size:
            raise ValueError("truncated header")
        header = json.loads(raw)
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
        metadata = header.pop("__metadata__", None) or {}
        if not isinstance(metadata, dict):
            raise ValueError("its __metadata__ is not a JSON object")
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    except RecursionError:
        raise ConfigError(f"{path}: not a readable safetensors file (its header is nested too deeply)") from None
    except (OSError, ValueError, struct.error) as exc:
        message = " ".join(str(exc).split())
        raise ConfigError(f"{path}: not a readable safetensors file ({message})") from exc
    return SafetensorsHeader(header, metadata, 8 + size, raw)


def storage_of(path: str | os.PathLike[str]) -> str | None:
    """The storage a safetensors file's metadata records (INT8_ROWS), or None for a plain checkpoint."""
    storage: str | None = read_safetensors_header(path).metadata.get(STORAGE_KEY)
    return storage


# A reader's word table (qa/transformer/companion.py writes it, ner/bilstm.py reads it too): float16 rows, or int8 rows
# with one float32 scale per row in READER_SCALES, checked against reader.json's scales_sha256. The rows of the rarer
# words (the last reader.json `int4_rows`; words.txt is in frequency order) may be 4-bit instead, two values a byte
# in READER_INT4, checked against `int4_sha256`, their scales in READER_SCALES too.
READER_TABLE, READER_SCALES, READER_INT4 = "vectors.npy", "vector_scales.npy", "vectors_int4.npy"


class Int4TailTable:
    """int8 rows, then 4-bit rows packed two values a byte (low nibble first): indexed as the int8 table of all the
    rows would be (`table[ids]`, int8 values), the 4-bit rows unpacked as they are looked up."""

    def __init__(self, head: NDArray[np.int8], tail: NDArray[np.uint8], dim: int) -> None:
        self.head, self.tail, self.dim = head, tail, dim
        self.shape = (len(head) + len(tail), dim)
        self.dtype = head.dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, ids: ArrayLike) -> NDArray[np.int8]:
        import numpy as np

        ids = np.asarray(ids, dtype=np.intp)
        flat = ids.reshape(-1)
        if flat.size and (flat.min() < -len(self) or flat.max() >= len(self)):
            raise IndexError(f"row ids must be within ±{len(self)}, found {flat.min()}..{flat.max()}")
        flat = np.where(flat < 0, flat + len(self), flat)
        out = np.empty((len(flat), self.dim), dtype=np.int8)
        in_head = flat < len(self.head)
        out[in_head] = self.head[flat[in_head]]
        out[~in_head] = unpack_int4(self.tail[flat[~in_head] - len(self.head)], self.dim)
        return out.reshape(*ids.shape, self.dim)


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


def file_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes, read in blocks (corpus shards and model files are large); artifacts.file_digest."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


# Reading a model dir's files, bounded: here, in the lowest layer, so that the shared tokenizer and the weights are read
# as every other file is (artifacts.py re-exports these to the layers above).

# A metadata, config or tokenizer file of a model is at most a few tens of megabytes; anything far larger (a symlink to
# /dev/zero, a corpus given by mistake) would be read whole into memory before JSON could refuse it.
MAX_JSON_FILE_BYTES = 64 * 2**20


def open_regular_file(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> io.BufferedReader:
    """A binary file object on `path`, a regular file (or a link to one) of at most `max_bytes`; anything else is an
    InputError naming the file and what it is, raised before a byte is read."""
    path = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO for reading would wait for a writer forever, before fstat could refuse it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError as exc:
        raise InputError("not found", path=path) from exc
    except IsADirectoryError as exc:
        raise InputError("is a directory, not a file", path=path) from exc
    except OSError as exc:
        raise InputError(f"unreadable ({exc.strerror or exc})", path=path) from exc
    except ValueError:  # "embedded null byte": no file can have that name
        raise InputError("not a usable file name (it holds a NUL character)", path=repr(str(path))) from None
    f = open(fd, "rb")  # noqa: SIM115  returned open to the caller, closed here only on an error
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"not a regular file (it is {_file_kind(info.st_mode)})", path=path)
        if max_bytes is not None and info.st_size > max_bytes:
            raise InputError(f"{info.st_size:,} bytes, more than the {max_bytes:,} such a file may have", path=path)
    except BaseException:
        f.close()
        raise
    return f


def read_text_file(path: str | os.PathLike[str], *, max_bytes: int = MAX_JSON_FILE_BYTES, bom: bool = False) -> str:
    """A small UTF-8 text file (metadata, configs): only a regular file of at most `max_bytes` is read. `bom`: a
    leading byte-order mark is dropped (SQuAD files saved by Windows tools have one)."""
    path = Path(path)
    with open_regular_file(path, max_bytes=max_bytes) as f:
        try:
            data = f.read(max_bytes + 1)
        except OSError as exc:
            raise InputError(f"unreadable ({exc.strerror or exc})", path=path) from exc
    try:
        return data.decode("utf-8-sig" if bom else "utf-8")
    except UnicodeDecodeError as exc:
        # Where to look, in the editor the user will open: utf-8-sig counts from after the byte-order mark.
        at = exc.start + (3 if bom and data.startswith(b"\xef\xbb\xbf") else 0)
        line = data.count(b"\n", 0, at) + 1
        raise InputError(f"not UTF-8 ({exc.reason} at byte {at + 1:,} of the file)", path=path, line=line) from exc


def _file_kind(mode: int) -> str | None:
    """What a non-regular directory entry is, in words; None for a regular file."""
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def read_table(directory: str | os.PathLike[str], config: dict[str, Any],
               rows: int) -> tuple[NDArray[Any] | Int4TailTable, NDArray[np.float32] | None]:
    """(table, row scales or None) of a reader/ whose reader.json `config` was read and checked (its table_sha256
    against READER_TABLE included): the table memory-mapped, float16 of (rows, config["dim"]), or int8 rows with their
    float32 scales (checked against scales_sha256), the last config["int4_rows"] of them 4-bit in READER_INT4 (checked
    against int4_sha256; an Int4TailTable). Anything else is a ConfigError naming the file."""
    import numpy as np

    directory = Path(directory)
    table = _load_array(directory / READER_TABLE)
    int4_rows = config.get("int4_rows", 0)
    if not isinstance(int4_rows, int) or isinstance(int4_rows, bool) or not 0 <= int4_rows < rows:
        raise ConfigError(f"{directory / 'reader.json'}: int4_rows must be a whole number below {rows}, "
                          f"found {int4_rows!r}")
    if table.dtype not in (np.float16, np.int8) or table.shape != (rows - int4_rows, config["dim"]) or \
            (int4_rows and table.dtype != np.int8):
        expected = f"({rows - int4_rows}, {config['dim']}) int8" if int4_rows else \
            f"({rows}, {config['dim']}) float16 or int8"
        raise ConfigError(f"{directory / READER_TABLE}: expected {expected}, found {table.shape} {table.dtype}")
    if table.dtype == np.float16:
        return table, None
    rows_table: NDArray[Any] | Int4TailTable = table
    if int4_rows:
        packed_path = directory / READER_INT4
        if not packed_path.is_file() or file_digest(packed_path) != config.get("int4_sha256"):
            raise ConfigError(f"{packed_path} is missing or not the file reader.json records: the table's last "
                              f"{int4_rows} rows are in it")
        packed = _load_array(packed_path)
        if packed.dtype != np.uint8 or packed.shape != (int4_rows, -(-config["dim"] // 2)) or config["dim"] % 2:
            raise ConfigError(f"{packed_path}: expected ({int4_rows}, {config['dim'] // 2}) uint8 (an even dim), "
                              f"found {packed.shape} {packed.dtype}")
        rows_table = Int4TailTable(table, packed, config["dim"])
    scales_path = directory / READER_SCALES
    if not scales_path.is_file() or file_digest(scales_path) != config.get("scales_sha256"):
        raise ConfigError(f"{scales_path} is missing or not the file reader.json records: an int8 table needs its "
                          "row scales")
    scales = _load_array(scales_path)
    if scales.dtype != np.float32 or scales.shape != (rows,):
        raise ConfigError(f"{scales_path}: expected ({rows},) float32, found {scales.shape} {scales.dtype}")
    scales = np.array(scales)  # 4 bytes a row: read whole
    if not np.isfinite(scales).all():  # a NaN row would silently change answers, or leave none
        raise ConfigError(f"{scales_path}: {int((~np.isfinite(scales)).sum())} row scale(s) are NaN or infinite: "
                          "the file is damaged; restore it")
    return rows_table, scales


def _load_array(path: Path) -> NDArray[Any]:
    """A reader/ table memory-mapped (a header claiming more than the file holds is refused, not allocated), anything
    but a .npy array that fits its file a ConfigError naming it."""
    import numpy as np

    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ConfigError(f"{path}: not a numeric .npy array ({' '.join(str(exc).split())})") from None
    if not isinstance(array, np.ndarray):  # an .npz archive loads as one
        array.close()
        raise ConfigError(f"{path}: not a numeric .npy array (an .npz archive)")
    return array


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


def table_rows(table: NDArray[Any] | Int4TailTable, scales: NDArray[np.float32] | None,
               ids: NDArray[np.integer[Any]]) -> NDArray[np.float32]:
    """The float32 rows `ids` of a lookup table stored in float16, or in int8 (or Int4TailTable) rows with float32
    `scales` (one per row): the reader's word table (qa/transformer/companion.py, ner/bilstm.py)."""
    import numpy as np

    rows = table[ids].astype(np.float32)
    return rows if scales is None else rows * scales[ids][..., None]


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


def open_safetensors(path: str | os.PathLike[str]) -> safe_open:
    """safetensors' safe_open on PATH (numpy), as a context manager; a header that library refuses (offsets that
    overlap or leave bytes uncovered, an unknown dtype, a shape its bytes do not hold) is a ConfigError naming PATH."""
    from safetensors import SafetensorError, safe_open

    try:
        return safe_open(os.fspath(path), framework="np")
    except (SafetensorError, OSError) as exc:
        message = " ".join((str(exc).strip().splitlines() or [""])[0].split())
        raise ConfigError(f"{path}: not a readable safetensors file ({message})") from None


def check_storage(path: str | os.PathLike[str], header: SafetensorsHeader) -> str | None:
    """The storage PATH's metadata records (None: a plain checkpoint), refused when the tensors say otherwise: int8 rows
    whose metadata was dropped (a tool that rewrote the file), or an int8 tensor in a plain checkpoint; either would
    load as raw int8 values, or be refused later with advice about other things."""
    storage: str | None = header.metadata.get(STORAGE_KEY)
    if storage is not None and storage not in (INT8_ROWS, INT8_ROWS_EXACT):
        raise ConfigError(f"{path}: unknown weight storage {storage!r} (a newer arabert-pipeline wrote it?)")
    if storage is not None:
        return storage
    for name, entry in header.tensors.items():
        if name.endswith((SCALE_SUFFIX, EXACT_SUFFIX, INDEX_SUFFIX)):
            raise ConfigError(f"{path} holds int8 rows ({name}) but its metadata does not say so ({STORAGE_KEY} is "
                              "missing: a tool that rewrote the file dropped it): restore the file as this package "
                              "wrote it")
        if isinstance(entry, dict) and entry.get("dtype") == "I8":
            raise ConfigError(f"{path}: {name} is int8 without row scales in a plain checkpoint: it would load as its "
                              "raw int8 values; the file is damaged or not a model's weights; restore it")
    return None


def dequantized_arrays(path: str | os.PathLike[str]) -> dict[str, NDArray[Any]]:
    """{name: numpy array} of a safetensors file, int8 rows widened to fp32 and their scales dropped."""
    import numpy as np

    storage = check_storage(path, read_safetensors_header(path))
    with open_safetensors(path) as stored:
        tensors = {name: stored.get_tensor(name) for name in stored.keys()}  # noqa: SIM118  safe_open is no dict
    if storage is None:
        return tensors
    out = {}
    for name, values in tensors.items():
        if name.endswith((SCALE_SUFFIX, EXACT_SUFFIX, INDEX_SUFFIX)):
            continue
        scale = tensors.get(name + SCALE_SUFFIX)
        if scale is None and values.dtype != np.int8:  # int8 without scales would load as raw values: refused below
            out[name] = values
            continue
        exact, index = tensors.get(name + EXACT_SUFFIX), tensors.get(name + INDEX_SUFFIX)
        check_int8_table(path, name, values, scale, exact, index)
        assert scale is not None  # check_int8_table refuses a table without its scales
        out[name] = dequantize_table(values, scale, exact, index)
    return out


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


def check_int8_tables(path: str | os.PathLike[str]) -> None:
    """check_int8_table for every int8 table of a weights file, from its header, its row indexes and its row scales
    alone (a few hundred KB, not the tables): the ONNX graph reads the tables as they lie, so a damaged one is refused
    by name before a session runs on it. In any file, a header the safetensors library refuses is refused here too, and
    check_storage's mismatches of metadata and tensors."""
    import numpy as np

    header = read_safetensors_header(path)
    storage = check_storage(path, header)
    types = {"I8": np.int8, "I32": np.int32, "F16": np.float16, "F32": np.float32}

    def shaped(name: str) -> NDArray[Any]:
        """An array of the stored tensor's dtype and shape that holds no values (all strides 0)."""
        entry = header.tensors[name]
        shape = tuple(entry["shape"])
        return np.lib.stride_tricks.as_strided(np.zeros(1, types.get(entry["dtype"], np.uint16)), shape=shape,
                                               strides=(0,) * len(shape))

    with open_safetensors(path) as stored:
        if storage is None:
            return
        for name, entry in header.tensors.items():
            # int8 rows; an int8 tensor without its scales too (it would load as raw values); other integer
            # tensors (a checkpoint's position ids) are not tables
            if name.endswith((SCALE_SUFFIX, EXACT_SUFFIX, INDEX_SUFFIX)) or not (
                    entry["dtype"] == "I8" or name + SCALE_SUFFIX in header.tensors):
                continue
            index = stored.get_tensor(name + INDEX_SUFFIX) if name + INDEX_SUFFIX in header.tensors else None
            scale = stored.get_tensor(name + SCALE_SUFFIX) if name + SCALE_SUFFIX in header.tensors else None
            exact = shaped(name + EXACT_SUFFIX) if name + EXACT_SUFFIX in header.tensors else None
            check_int8_table(path, name, shaped(name), scale, exact, index)


def check_fits_config(model_class: type[PreTrainedModel], config: PretrainedConfig, path: str | os.PathLike[str],
                      header: SafetensorsHeader) -> None:
    """Before the model is built: the sizes in `config` (config.json with the caller's settings) against the shapes in
    the header of the weights file PATH, a ConfigError naming the field that differs. Built first, the model of a
    config.json saying 200 layers (the weights hold 4) took 1.8 GB before the mismatch could be seen, and a
    vocab_size of 10⁹ would take more than any machine has. The layers are counted from the tensor names; every other
    size is compared by building the model on torch's meta device (shapes without memory) and comparing each tensor
    both hold. A file whose tensor names show no encoder layers is left to the checks after loading."""
    import copy
    import re

    import torch

    source = Path(path).parent / "config.json"
    stored: dict[str, tuple[int, ...]] = {}  # name → shape as loaded (int8 rows with exact rows: the whole table's)
    for name, entry in header.tensors.items():
        if not name.endswith((SCALE_SUFFIX, EXACT_SUFFIX, INDEX_SUFFIX)):
            index = header.tensors.get(name + INDEX_SUFFIX)
            dims = list(entry["shape"])
            stored[name] = tuple(index["shape"][:1] + dims[1:] if index is not None else dims)
    # An encoder's layers, as BERT, ELECTRA, DeBERTa (encoder.layer.N.) and XLNet (transformer.layer.N.) name them
    layers = {int(match.group(1)) for name in stored
              if (match := re.search(r"(?:^|\.)(?:encoder|transformer)\.layers?\.(\d+)\.", name))}
    declared = getattr(config, "num_hidden_layers", None)
    if not layers or type(declared) is not int:  # another architecture: building even on meta is not bounded
        return
    if declared != max(layers) + 1:
        raise ConfigError(f"{source}: num_hidden_layers is {declared}, but {path} holds {max(layers) + 1} layers")
    with torch.device("meta"):
        model = model_class(copy.deepcopy(config))
    expected = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    # transformers loads a base model's weights into a task model and back: compare names without the base's prefix
    prefix = f"{getattr(model_class, 'base_model_prefix', '')}."
    stored = {name.removeprefix(prefix): shape for name, shape in stored.items()}
    for name, shape in expected.items():
        found = stored.get(name.removeprefix(prefix))
        if found is None or found == shape:
            continue
        same_rank = len(shape) == len(found)
        differing = [want for want, have in zip(shape, found, strict=True) if want != have] if same_rank else []
        fields = sorted(key for key, value in config.to_dict().items()
                        if type(value) is int and differing and value == differing[0])
        what = " or ".join(f"{field} {differing[0]}" for field in fields) + " does" if fields else "its sizes do"
        raise ConfigError(f"{source}: {what} not fit the weights: {name} is {found} in {path} but {shape} by "
                          "config.json")


def dequantized_state_dict(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """dequantized_arrays as torch tensors: the state dict a transformers model loads."""
    import torch

    return {name: torch.from_numpy(values.copy()) for name, values in dequantized_arrays(path).items()}


def from_pretrained(model_class: Any, directory: str | os.PathLike[str], **kwargs: Any) -> Any:
    """`model_class.from_pretrained(directory, **kwargs)` (an Auto class or a concrete one), a model.safetensors in int8
    rows read widened to fp32: transformers cannot read that file itself (it refuses it, or with an int8 linear weight
    of the right shape would load the int8 values as they are). The file's header is checked first (check_storage,
    check_fits_config): nothing is built for weights that do not fit."""
    path = Path(directory) / "model.safetensors"
    if not path.is_file():  # a hub id, or weights in another form: transformers' own load says what is wrong
        return model_class.from_pretrained(os.fspath(directory), **kwargs)
    from transformers import AutoConfig

    header = read_safetensors_header(path)
    with open_safetensors(path):  # a header the library refuses, refused before anything is built
        pass
    compact = check_storage(path, header) is not None
    # Given a config object, transformers hands every keyword to the model's __init__; given a path, it first lets
    # the config take the ones it knows (a task's num_labels, id2label, label2id). Done here as it does: the config
    # keeps what it has an attribute for, except the loading settings that are config attributes too.
    config = AutoConfig.from_pretrained(os.fspath(directory))
    settings = {k: v for k, v in kwargs.items() if k not in LOADING_KWARGS and hasattr(config, k)}
    for key, value in settings.items():
        setattr(config, key, value)
    # the concrete class: an Auto class will not load from a state dict alone, nor build on the meta device
    try:
        concrete = model_class._model_mapping[type(config)] if hasattr(model_class, "_model_mapping") else model_class
    except KeyError:
        raise ConfigError(f"{Path(directory) / 'config.json'}: model_type {config.model_type!r} has no "
                          f"{model_class.__name__} form") from None
    check_fits_config(concrete, config, path, header)
    if not compact:
        return model_class.from_pretrained(os.fspath(directory), **kwargs)
    kwargs = {k: v for k, v in kwargs.items() if k not in settings}
    return concrete.from_pretrained(None, config=config, state_dict=dequantized_state_dict(path), **kwargs)


# from_pretrained's keywords that say how to load, not what the model is, though a config has an attribute of the name.
LOADING_KWARGS = frozenset({"dtype", "torch_dtype", "attn_implementation", "device_map", "output_loading_info",
                            "ignore_mismatched_sizes", "state_dict", "quantization_config"})


# What a plain transformers checkpoint copy of a model dir takes besides its weights.
PLAIN_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
               "sentencepiece.model")


def write_plain(model_dir: str | os.PathLike[str], output: str | os.PathLike[str]) -> Path:
    """OUTPUT: a plain transformers checkpoint of MODEL_DIR (fp32 model.safetensors, config and tokenizer files), for
    `AutoModel...from_pretrained(OUTPUT)` without this package. OUTPUT must be new or empty (the `weights` verb,
    finetuning/weightscli.py, gives it a directory it renames into place once complete)."""
    import shutil

    import numpy as np
    from safetensors.numpy import save_file

    model_dir, output = Path(model_dir), Path(output)
    if output.is_dir() and any(output.iterdir()):
        raise ConfigError(f"{output} is not empty: a plain copy is written to a new directory")
    output.mkdir(parents=True, exist_ok=True)
    arrays = dequantized_arrays(model_dir / "model.safetensors")
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in arrays.items()},
              os.fspath(output / "model.safetensors"), metadata={"format": "pt"})
    copy_tokenizer_json(model_dir, output)
    for name in PLAIN_FILES:
        if name != "tokenizer.json" and (model_dir / name).is_file():
            shutil.copyfile(model_dir / name, output / name)
    return output


# A shipped task model whose tokenizer is another shipped model's (issue 53: one copy in the package) holds, instead of
# tokenizer.json, this file: {"file": "../OTHER/tokenizer.json", "sha256": its digest}, checked when it is read.
SHARED_TOKENIZER_FILE = "tokenizer.shared.json"


def read_tokenizer_json(directory: str | os.PathLike[str]) -> tuple[str, Path]:
    """(text, path) of a model dir's tokenizer.json, which must be the file any sibling model's tokenizer.shared.json
    records for it; or of the sibling model's that its own tokenizer.shared.json names, found beside DIRECTORY (as
    given) or beside the directory it links to, and which must be the file whose digest the reference records. Each
    file is read as open_regular_file reads one: a FIFO, a device or a file of more than MAX_JSON_FILE_BYTES is a
    ConfigError naming it."""
    import hashlib

    directory = Path(directory)
    path, shared = directory / "tokenizer.json", directory / SHARED_TOKENIZER_FILE
    if os.path.lexists(path) or not os.path.lexists(shared):
        if not os.path.lexists(path):
            raise ConfigError(f"{directory} has no tokenizer.json, which the ONNX backend tokenizes with")
        text = _read_tokenizer_text(path)
        check_shared_copies(directory, hashlib.sha256(text.encode("utf-8")).hexdigest())
        return text, path
    ref = _read_reference(shared)
    sibling, digest = _referenced_sibling(shared, ref.get("file")), ref.get("sha256")
    # Beside the directory as given (a copy of the models folder), else beside the one a link to it leads to.
    places = dict.fromkeys(base.parent / sibling / "tokenizer.json"
                           for base in (Path(os.path.abspath(directory)), directory.resolve()))
    found = next((place for place in places if os.path.lexists(place)), None)
    if found is None:
        raise ConfigError(
            f"{shared} names ../{sibling}/tokenizer.json, which is not beside {directory}: this model dir shares "
            f"{sibling}'s tokenizer and was copied without it. `arabert-pipeline export-onnx MODEL --standalone DIR` "
            "writes a copy that holds its own tokenizer (MODEL: the model dir it was copied from, or a shipped "
            "model's name: arabert-sentiment, arabert-ner)")
    text = _read_tokenizer_text(found, named_by=shared)
    if hashlib.sha256(text.encode("utf-8")).hexdigest() != digest:
        raise ConfigError(f"{found} is not the tokenizer {shared} records (its digest differs)")
    return text, found


def _read_tokenizer_text(path: Path, named_by: Path | None = None) -> str:
    try:
        return read_text_file(path)
    except InputError as exc:
        raise ConfigError(f"{named_by} names {exc}" if named_by else str(exc)) from None


def _referenced_sibling(shared: Path, name: object) -> str:
    """The sibling model's folder name in a tokenizer.shared.json's "file": it must be ../MODEL/tokenizer.json."""
    from pathlib import PurePosixPath

    parts = PurePosixPath(name).parts if isinstance(name, str) else ()
    if len(parts) != 3 or parts[0] != ".." or parts[1] in ("", ".", "..") or parts[2] != "tokenizer.json" \
            or "\0" in parts[1] or "\\" in parts[1]:
        raise ConfigError(f"{shared}: file must be ../MODEL/tokenizer.json (a sibling model's), not {name!r}")
    return parts[1]


def check_shared_copies(directory: str | os.PathLike[str], digest: str) -> None:
    """DIRECTORY's own tokenizer.json (SHA-256 `digest`) against what every sibling model dir's tokenizer.shared.json
    records for it: the siblings read it as theirs, so a changed file (two vocabulary pieces swapped) is refused by
    name instead of silently changing the answers of all of them. A sibling's unreadable reference is its own to
    report, when it is loaded."""
    from pathlib import PurePosixPath

    directory = Path(os.path.abspath(directory))
    for reference in sorted(directory.parent.glob(f"*/{SHARED_TOKENIZER_FILE}")):
        try:
            ref = _read_reference(reference)
        except ConfigError:
            continue
        name = ref.get("file")
        if isinstance(name, str) and PurePosixPath(name).parts == ("..", directory.name, "tokenizer.json") \
                and ref.get("sha256") != digest:
            raise ConfigError(f"{directory / 'tokenizer.json'} is not the tokenizer {reference} records for it (its "
                              "digest differs): the file was changed; restore it")


def share_tokenizer(directory: str | os.PathLike[str], source: str | os.PathLike[str]) -> None:
    """Replace DIRECTORY/tokenizer.json by a tokenizer.shared.json naming SOURCE/tokenizer.json (a sibling model dir
    holding the identical file)."""
    import hashlib

    directory, source = Path(directory), Path(source)
    if directory.resolve().parent != source.resolve().parent:
        raise ConfigError(f"{source} is not a sibling of {directory}")
    ours, theirs = (directory / "tokenizer.json").read_bytes(), (source / "tokenizer.json").read_bytes()
    if ours != theirs:
        raise ConfigError(f"{directory / 'tokenizer.json'} differs from {source / 'tokenizer.json'}: not shared")
    ref = {"file": f"../{source.resolve().name}/tokenizer.json", "sha256": hashlib.sha256(theirs).hexdigest()}
    (directory / SHARED_TOKENIZER_FILE).write_text(json.dumps(ref, indent=2) + "\n", encoding="utf-8")
    (directory / "tokenizer.json").unlink()


def _read_reference(path: Path) -> dict[str, Any]:
    # A few bytes of JSON; artifacts.read_json_file lies a layer above this module.
    try:
        ref = json.loads(read_text_file(path, max_bytes=1 << 16))
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{path}: not a shared-tokenizer reference ({type(exc).__name__})") from None
    if not isinstance(ref, dict):
        raise ConfigError(f"{path}: expected a JSON object with file and sha256")
    return ref


def copy_tokenizer_json(model_dir: str | os.PathLike[str], target: str | os.PathLike[str]) -> bool:
    """Write TARGET/tokenizer.json from MODEL_DIR's own, or from the sibling model's that its tokenizer.shared.json
    names (digest-checked): a copy of a model dir stands alone, where a reference to ../OTHER would name nothing.
    False when MODEL_DIR has neither."""
    model_dir = Path(model_dir)
    if not (model_dir / "tokenizer.json").is_file() and not (model_dir / SHARED_TOKENIZER_FILE).is_file():
        return False
    text, _ = read_tokenizer_json(model_dir)
    (Path(target) / "tokenizer.json").write_text(text, encoding="utf-8")
    return True


if __name__ == "__main__":  # the command of earlier versions: say where it went, rather than end doing nothing
    raise SystemExit("python -m arabert_pipeline.weights is now a verb: arabert-pipeline weights MODEL_DIR --plain OUT "
                     "(or --int8-rows)")

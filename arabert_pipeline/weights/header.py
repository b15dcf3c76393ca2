"""A safetensors file's header, read without its tensors and checked before anything is built from the file: a file
that is not one, a header the safetensors library refuses, storage metadata the tensors contradict (`check_storage`),
int8 tables whose parts do not fit together (`check_int8_tables`)."""
from __future__ import annotations

import json
import os
import struct
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import ConfigError, InputError
from .files import open_regular_file
from .rows import EXACT_SUFFIX, INDEX_SUFFIX, INT8_ROWS, INT8_ROWS_EXACT, SCALE_SUFFIX, STORAGE_KEY, check_int8_table

if TYPE_CHECKING:
    from numpy.typing import NDArray
    from safetensors import safe_open

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

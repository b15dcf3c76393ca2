"""A static reader's word table, as the reader/ of a QA model ships it: `read_table` checks and maps it, `table_rows`
looks its rows up in float32."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .files import file_digest
from .rows import unpack_int4

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

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


def table_rows(table: NDArray[Any] | Int4TailTable, scales: NDArray[np.float32] | None,
               ids: NDArray[np.integer[Any]]) -> NDArray[np.float32]:
    """The float32 rows `ids` of a lookup table stored in float16, or in int8 (or Int4TailTable) rows with float32
    `scales` (one per row): the reader's word table (qa/transformer/companion.py, ner/bilstm.py)."""
    import numpy as np

    rows = table[ids].astype(np.float32)
    return rows if scales is None else rows * scales[ids][..., None]

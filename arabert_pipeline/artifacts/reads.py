"""Input files read bounded and checked, any problem an InputError naming the file: JSON and JSON lines, compressed
corpora, torch checkpoints without unpickling. The bounded reader and the digests are weights/files.py's, a layer
below, so that the shared tokenizer and the weights are read with them too."""
from __future__ import annotations

import gzip
import json
import lzma
import os
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, cast

from ..errors import InputError
from ..weights.files import MAX_JSON_FILE_BYTES, file_kind, read_text_file

# What reading a truncated or corrupt .gz / .xz corpus raises.
CORPUS_READ_ERRORS = (OSError, EOFError, lzma.LZMAError, zlib.error)


def decompressed(path: str | os.PathLike[str], raw: BinaryIO) -> BinaryIO:
    """A binary stream of the corpus file's text over its open `raw` file: .gz and .xz decompressed, else `raw`."""
    name = str(path).lower()
    if name.endswith(".gz"):
        return cast(BinaryIO, gzip.GzipFile(fileobj=raw, mode="rb"))  # one: typeshed does not declare it so
    if name.endswith(".xz"):
        return cast(BinaryIO, lzma.LZMAFile(raw, "rb"))
    return raw


def load_tensor_state(path: str | os.PathLike[str]) -> Any:
    """A training state saved with torch.save, read without unpickling arbitrary objects.

    Checkpoints are user paths: a pickle can run code on load, so only tensors and plain containers are accepted.
    """
    import pickle

    import torch

    path = Path(path)
    if not path.is_file():
        raise InputError("checkpoint state not found", path=path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        # torch explains at length how to load it anyway; the one line that matters names the object refused.
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
        what = f"it would run {found.group(1)} on loading" if found else "it would need to unpickle objects"
        raise InputError(f"not a plain tensor checkpoint, refused ({what})", path=path) from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise InputError(f"unreadable checkpoint state ({type(exc).__name__}: {exc})", path=path) from exc


def parse_json(text: str, *, path: object = None, line: int | None = None) -> Any:
    """json.loads with every way a text can fail to be JSON an InputError naming the file (and line): invalid syntax,
    integers too long for Python's int conversion, nesting deeper than the recursion limit."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})", path=path,
                         line=line) from None
    except ValueError as exc:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise InputError(f"invalid JSON ({(str(exc).splitlines() or [''])[0]})", path=path, line=line) from None
    except RecursionError:
        raise InputError("invalid JSON (nested too deeply)", path=path, line=line) from None


def json_lines(text: str, *, path: object = None) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a JSON lines text, every bad line parse_json's InputError.
    Lines end at "\n" (a "\r" before it is JSON whitespace): str.splitlines() also breaks at U+2028, U+0085 and
    form feeds, which json.dumps(ensure_ascii=False), this package's writers included, leaves raw inside strings."""
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            yield number, parse_json(line, path=path, line=number)


def json_line_id(value: Any, *, path: object = None, line: int | None = None) -> str | int:
    """A JSON line's "id": a string or an integer. A float, a bool, null or an object is refused: str() would make
    another id of it ("nan", "None", "{'a': 1}") that no other file holds."""
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise InputError(f"must be a string or an integer, got {json.dumps(value)[:80]}", path=path, line=line,
                         field="id")
    return value


# A SQuAD file, a predictions file: data read whole, far larger than metadata but still bounded (a symlink to
# /dev/zero must not fill the memory before anything can refuse it).
MAX_DATA_FILE_BYTES = 2**30


def check_input_file(path: str | os.PathLike[str], what: str = "file") -> Path:
    """`path` if it is (or links to) a regular file; else an InputError saying what is there instead: "no such
    file" for a FIFO or /dev/zero would send the user looking for a file that exists, and reading one hangs or never
    ends."""
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"no such {what}", path=path) from None
    except OSError as exc:
        raise InputError(f"unreadable ({exc.strerror or exc})", path=path) from None
    kind = file_kind(info.st_mode)
    if kind is not None:
        raise InputError(f"is {kind}, not a regular file: give the {what} itself", path=path)
    return path


def read_json_file(path: str | os.PathLike[str], *, max_bytes: int = MAX_JSON_FILE_BYTES,
                   bom: bool = False) -> dict[str, Any]:
    """A JSON file that must hold an object; any problem is an InputError naming the file."""
    value = parse_json(read_text_file(path, max_bytes=max_bytes, bom=bom), path=path)
    if not isinstance(value, dict):
        raise InputError(f"expected a JSON object, found {type(value).__name__}", path=path)
    return value

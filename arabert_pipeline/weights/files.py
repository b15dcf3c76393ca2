"""Bounded reads of the files a model dir holds, and their digests: here, in the lowest layer, so that the shared
tokenizer and the weights are read as every other file is (the layers above import them from here; artifacts/reads.py
builds its checked JSON and corpus readers on them)."""
from __future__ import annotations

import io
import os
import stat
from pathlib import Path

from ..errors import InputError

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
            raise InputError(f"not a regular file (it is {file_kind(info.st_mode)})", path=path)
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


def file_kind(mode: int) -> str | None:
    """What a non-regular directory entry is, in words; None for a regular file."""
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def file_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes, read in blocks (corpus shards and model files are large); artifacts.file_digest."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()

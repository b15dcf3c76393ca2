"""Reading corpus files for `preprocess`: plain, gzip or xz, checked before a run starts, hashed while they are read
(the sidecar records each input's SHA-256), invalid UTF-8 stopped at its file and line or replaced and counted, and the
lines of several inputs streamed in order with how far each file has been read (a checkpoint's resume point)."""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ..artifacts.reads import CORPUS_READ_ERRORS, decompressed
from ..errors import ConfigError, InputError


def _compression(path: Path) -> str:
    return {".gz": "gz", ".xz": "xz"}.get(path.suffix, "txt")


@contextlib.contextmanager
def _open_input(path: Path, digest: Any = None) -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """(raw file, binary line stream): the raw file's position is how far the progress bar has got. With `digest`
    (a hashlib object), every byte read from the file on disk also goes into it."""
    with open(path, "rb", buffering=(1 << 20) if digest is None else 0) as file:
        raw = file if digest is None else io.BufferedReader(_HashingReader(file, digest), 1 << 20)
        yield raw, decompressed(path, raw)


class _HashingReader(io.RawIOBase):
    """A file read through this also feeds `digest`: the sidecar records the digest of the very bytes that were
    preprocessed, not of whatever the file holds when a second pass would read it."""

    def __init__(self, raw, digest):
        self.raw, self.digest, self.position = raw, digest, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = self.raw.readinto(buffer)
        if count:
            self.digest.update(memoryview(buffer)[:count])
            self.position += count
        return count

    def tell(self) -> int:
        return self.position

    def fileno(self) -> int:
        return self.raw.fileno()

    def close(self) -> None:
        self.raw.close()
        super().close()


def check_inputs(paths: list[Path]) -> None:
    """Fail before any work on a missing, unreadable, undecompressable or empty input."""
    if not paths:
        raise ConfigError("no input files given")
    for path in paths:
        if not path.exists():
            raise InputError("no such file", path=path)
        if not path.is_file():
            raise InputError("not a regular file", path=path)
        try:
            with _open_input(path) as (_, stream):
                if not any(line.strip() for line in stream):
                    raise InputError("contains no text (the file is empty or has only blank lines)", path=path)
        except CORPUS_READ_ERRORS as exc:
            raise InputError(f"cannot read: {exc}", path=path) from exc


def _decode_replacing(data: bytes) -> tuple[str, int]:
    """`data.decode("utf-8", "replace")` and how many invalid sequences it replaced by U+FFFD."""
    parts, count, start = [], 0, 0
    while True:
        try:
            parts.append(data[start:].decode("utf-8"))
            return "".join(parts), count
        except UnicodeDecodeError as exc:
            parts.append(data[start:start + exc.start].decode("utf-8"))
            parts.append("\ufffd")
            count += 1
            start += exc.end


@dataclasses.dataclass
class _InputFile:
    path: str
    lines: int = 0
    bytes: int = 0  # uncompressed
    replacements: int = 0
    # The file on disk as it was read: how `preprocess --engine ray` tells a finished shard from a stale one.
    size: int = 0
    mtime_ns: int = 0
    sha256: str = ""


def _read_lines(paths: list[Path], errors: str, files: list[_InputFile], disk_done: list[int]
                ) -> Iterator[tuple[str, int]]:
    """Every input line without its line ending, decoded, with its size in bytes (ending included).

    `files` receives per-file counts; `disk_done[0]` the compressed bytes consumed so far, for the progress bar.
    """
    disk_before = 0
    for path in paths:
        record = _InputFile(str(path))
        files.append(record)
        number = 0
        digest = hashlib.sha256()
        with _open_input(path, digest) as (raw, stream):
            status = os.fstat(raw.fileno())
            record.size, record.mtime_ns = status.st_size, status.st_mtime_ns
            try:
                for number, data in enumerate(stream, 1):
                    size = len(data)
                    if data.endswith(b"\n"):
                        data = data[:-2] if data.endswith(b"\r\n") else data[:-1]
                    try:
                        text = data.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        if errors == "strict":
                            raise InputError(
                                f"invalid UTF-8 at byte {exc.start + 1} of the line ({exc.reason}); fix the file, "
                                "or pass --errors replace (with --resume to continue this run)",
                                path=path, line=number,
                            ) from None
                        text, count = _decode_replacing(data)
                        record.replacements += count
                    record.lines += 1
                    record.bytes += size
                    disk_done[0] = disk_before + raw.tell()
                    yield text, size
                while raw.read(1 << 20):  # bytes past the end of the compressed stream are part of the file too
                    pass
            except CORPUS_READ_ERRORS as exc:
                raise InputError(f"cannot read: {exc}", path=path, line=number + 1) from exc
        record.sha256 = digest.hexdigest()
        disk_before += path.stat().st_size

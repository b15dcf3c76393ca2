"""The word segmentation cache shared by `preprocess` workers, resumed runs and later runs (OUT.words.tsv by
default): a header naming the segmenter, then word<TAB>segmentation lines appended by every worker; each worker reads
the lines the others added since it last looked, and a damaged line is an error naming the file and line."""
from __future__ import annotations

import os
from pathlib import Path

from ..artifacts.writes import atomic_write
from ..errors import ConfigError, InputError


class WordCache:
    """A file of `word<TAB>segmentation` lines, appended by the main process and read by every worker.

    Farasa costs about 1 ms per word it has not seen while a corpus repeats its words endlessly, so each distinct
    word should be segmented once. Workers are separate processes with separate caches; the main process appends
    the words each worker segmented to this file, and every worker reads the file's new lines before each chunk, so
    a word segmented by one worker is soon known to all. The file stays beside the output: a resumed run, or a later
    run over overlapping text, preloads it and skips Farasa for every word already in it.

    Runs may share one file (`word_cache=`), even at the same time: entries are appended with one O_APPEND write of
    whole lines each, so lines never interleave, and readers only take lines ending in a newline.
    """

    HEADER = "#arabert_pipeline word cache"

    def __init__(self, path: Path, backend: str, keep_bytes: int | None = None):
        """Open (or create) the cache; `keep_bytes` cuts it back to its size at a resumed run's checkpoint, so that
        the words segmented after that checkpoint count again as this output's new words."""
        self.path = path
        header = cache_header(backend)
        if not path.exists():
            with atomic_write(path, "wb") as f:
                f.write(header)
        with open(path, "r+b") as f:
            if f.readline() != header:
                raise ConfigError(
                    f"{path} is not a word cache of this segmenter ({backend}): its segmentations would be wrong "
                    "here. It is left as it is; choose another --word-cache file."
                )
            if keep_bytes is not None and keep_bytes >= len(header):
                f.truncate(keep_bytes)
            entries, end = read_new_entries(f, len(header))
            f.truncate(end)  # a torn last line from a killed run would otherwise prefix the next entry
        self.words = set(entries)
        self.file = open(path, "ab", buffering=0)  # noqa: SIM115  owned until close(), in the run's finally

    def add(self, entries: dict[str, str]) -> int:
        """Append the entries not yet in the file; returns how many were new. Workers see them at once."""
        new = [(w, s) for w, s in entries.items() if w not in self.words and _storable(w) and _storable(s)]
        if new:
            self.words.update(w for w, _ in new)
            data = "".join(f"{w}\t{s}\n" for w, s in new).encode("utf-8")
            while data:
                data = data[self.file.write(data):]
        return len(new)

    def size(self) -> int:
        return os.fstat(self.file.fileno()).st_size

    def close(self) -> None:
        self.file.close()


def cache_header(backend: str) -> bytes:
    return f"{WordCache.HEADER}\t{backend}\n".encode()


def _storable(text: str) -> bool:
    return bool(text) and "\t" not in text and "\n" not in text


def read_new_entries(file, offset: int) -> tuple[dict[str, str], int]:
    """The complete `word<TAB>segmentation` lines after `offset`, and the offset just past the last of them; a
    damaged line (edited by hand, or not a cache line at all) is an InputError naming the file and the line."""
    file.seek(offset)
    data = file.read()
    end = data.rfind(b"\n") + 1
    try:
        entries = dict(line.split("\t") for line in data[:end].decode("utf-8").split("\n")[:-1])
    except ValueError as exc:  # not UTF-8, or a line without exactly one tab: found again line by line, to name it
        raise _damaged_line_error(file, offset, data[:end], exc) from exc
    return entries, offset + end


def _damaged_line_error(file, offset: int, data: bytes, exc: ValueError) -> InputError:
    hint = ("Delete the file to start a new cache (it only holds segmentations), or choose another --word-cache file")
    for index, line in enumerate(data.split(b"\n")[:-1]):
        try:
            tabs = line.decode("utf-8").count("\t")
            problem = None if tabs == 1 else f"{tabs} tabs instead of one"
        except UnicodeDecodeError as error:
            problem = f"not UTF-8 ({error.reason} at byte {error.start + 1} of the line)"
        if problem is not None:
            file.seek(0)
            before = file.read(offset).count(b"\n")  # counted only here: the cache can be large
            return InputError(f"damaged word cache: {problem}. {hint}", path=file.name, line=before + index + 1)
    return InputError(f"damaged word cache ({exc}). {hint}", path=file.name)

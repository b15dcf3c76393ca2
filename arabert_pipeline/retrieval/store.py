"""The index directory: what `Index.build(..., path=...)` and `arabert-pipeline index` write, and `Index.open` reads.

    arabert_pipeline.json     kind, format, analysis, library and version, BM25 and passage settings, counts, and
                              the size and SHA-256 of every other file
    documents.txt             the documents' texts as given (passage offsets point into them), UTF-8, end to end
    documents.jsonl           a line per document: [id, title]
    documents.offsets.npy     int64 (documents + 1, 2): where each document starts in documents.txt and in
                              documents.jsonl, then the two files' sizes
    passages.npy              int64 (passages, 3): document position, start, end (characters), in document order
    terms.json                the vocabulary: the analysed terms, in id order
    bm25.data.npy, bm25.indices.npy, bm25.indptr.npy
                              bm25s's (term, passage) weight matrix, compressed by term column (scorer.py)

Arrays are plain .npy read with allow_pickle=False (their headers checked against their sizes first), JSON is JSON:
nothing in an index directory is unpickled or executed. `open_index_dir` refuses, in one line naming the file, a
directory that holds no index, a format it does not know, a file that is missing, not a regular file, larger than the
limits, or not the size and checksum the metadata records (truncated, damaged or replaced).

A build is written under `.NAME.partial/` beside the output (the output's temp area), the output directory locked
(`.NAME.lock`): the documents are analysed in chunks, each saved as it is done (`chunks/NNNNNN.npy` with its passages
and `.terms` with their terms), so an interrupted build resumed with the same documents and settings
(`resume=True`, `--resume`) analyses only what is left and writes the same index. The finished files are written into
`.NAME.partial/index/`, which is renamed to the output once complete. An output that exists and is not empty is never
written into: an index is built once, into a new directory.
"""
from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts.metadata import METADATA_FILE, read_metadata
from ..artifacts.reads import MAX_DATA_FILE_BYTES, parse_json, read_json_file
from ..artifacts.writes import atomic_write
from ..errors import ConfigError, InputError
from ..outputs import OutputLock, check_directory_writable
from ..weights.files import file_digest, open_regular_file, read_text_file
from .analysis import get_analysis
from .passages import check_passage_chars
from .scorer import ARRAYS, DTYPES, LIBRARY, METHODS, PARAMS, Scorer, library_version

KIND = "retrieval-index"
FORMAT = 1
TEXTS_FILE, RECORDS_FILE, OFFSETS_FILE = "documents.txt", "documents.jsonl", "documents.offsets.npy"
PASSAGES_FILE, TERMS_FILE = "passages.npy", "terms.json"
SCORER_FILES = {name: f"bm25.{name}.npy" for name in ARRAYS}
FILES = (TEXTS_FILE, RECORDS_FILE, OFFSETS_FILE, PASSAGES_FILE, TERMS_FILE, *SCORER_FILES.values())
# No file of an index this package writes comes near it (the whole shared corpus: documents.txt 0.2 GB); a larger
# one is not ours, and checking its checksum would read it all first.
MAX_INDEX_FILE_BYTES = 2**36
MANIFEST = "build.json"


def partial_dir(path: Path) -> Path:
    return path.with_name(f".{path.name}.partial")


def fingerprint(texts: list[str], ids: list[str] | None, titles: list[str | None] | None, settings: dict) -> str:
    """What an index is built from: the documents (texts, ids, titles, in order) and the settings; a resumed build
    must have the same."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for position, text in enumerate(texts):
        fields = (text, None if ids is None else ids[position], None if titles is None else titles[position])
        digest.update(json.dumps(fields, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        digest.update(b"\n")
    return digest.hexdigest()


def _is_index(path: Path) -> bool:
    try:
        return read_json_file(path / METADATA_FILE).get("kind") == KIND
    except (InputError, OSError):
        return False


class PartialBuild:
    """The temp area of one build of `path`: its manifest, the chunks analysed so far, the finished files."""

    def __init__(self, path: str | os.PathLike, settings: dict, inputs: str, *, resume: bool):
        self.path = Path(path)
        self.partial = partial_dir(self.path)
        self.chunks = self.partial / "chunks"
        self.manifest = {"format": FORMAT, "inputs_sha256": inputs, **settings}
        self.resume = resume
        self.lock = OutputLock(self.path, "index")
        self.complete = False  # the output already holds this very build (resumed after its last step)

    def __enter__(self) -> PartialBuild:
        if self.path.exists() and not self.path.is_dir():
            raise ConfigError(f"{self.path} exists and is not a directory; choose a new directory for the index")
        check_directory_writable(self.path.parent)
        self.lock.acquire()
        try:
            self._claim()
        except BaseException:
            self.lock.release()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.lock.release()

    def _claim(self) -> None:
        if self.path.is_dir() and any(self.path.iterdir()):
            if self.resume and self._built_here():
                shutil.rmtree(self.partial, ignore_errors=True)  # a run killed after the rename left it
                self.complete = True
                return
            what = "holds an index already" if _is_index(self.path) else "is not empty"
            raise ConfigError(f"{self.path} {what}: an index is built into a new (or empty) directory and never "
                              "written over; choose another one")
        if self.partial.exists() and not os.path.lexists(self.partial / MANIFEST) and \
                not any(self.chunks.glob("*.npy")):
            shutil.rmtree(self.partial)  # killed before its manifest was written: nothing of it to keep
        if self.partial.exists():
            if not self.resume:
                raise ConfigError(f"{self.partial} holds an interrupted build of {self.path}: pass --resume "
                                  "(resume=True) to continue it, or delete it to start again")
            try:
                found = read_json_file(self.partial / MANIFEST)
            except InputError:
                found = None
            if found != self.manifest:
                raise ConfigError(f"{self.partial} holds an interrupted build of other documents or settings than "
                                  "these: it is never written over; delete it, or give the same inputs and settings "
                                  "to resume it")
            shutil.rmtree(self.partial / "index", ignore_errors=True)  # an assembly cut short is redone
            return
        self.chunks.mkdir(parents=True)
        with atomic_write(self.partial / MANIFEST) as f:
            json.dump(self.manifest, f, indent=2, sort_keys=True)

    def _built_here(self) -> bool:
        """Whether the output is the finished index of these very documents and settings."""
        try:
            return read_json_file(self.path / METADATA_FILE).get("inputs_sha256") == self.manifest["inputs_sha256"]
        except (InputError, OSError):
            return False

    def _chunk_files(self, number: int) -> tuple[Path, Path]:
        return self.chunks / f"{number:06d}.npy", self.chunks / f"{number:06d}.terms"

    def saved_chunk(self, number: int) -> tuple[np.ndarray, list[list[str]]] | None:
        """Chunk `number` as an earlier run of this build saved it, or None."""
        passages_file, terms_file = self._chunk_files(number)
        if not passages_file.exists():
            return None
        passages = np.load(passages_file, allow_pickle=False)
        lines = terms_file.read_text(encoding="utf-8").split("\n")[:-1]
        if passages.ndim != 2 or passages.shape[1] != 3 or len(lines) != len(passages):
            raise ConfigError(f"{passages_file} is not a chunk of this build: delete {self.partial} to start again")
        return passages, [line.split(" ") if line else [] for line in lines]

    def save_chunk(self, number: int, passages: np.ndarray, rows: list[list[str]]) -> None:
        passages_file, terms_file = self._chunk_files(number)
        with atomic_write(terms_file) as f:
            f.writelines(" ".join(row) + "\n" for row in rows)
        with atomic_write(passages_file, "wb") as f:  # written last: its presence says the chunk is complete
            np.save(f, passages, allow_pickle=False)

    def finish(self, texts: list[str], ids: list[str] | None, titles: list[str | None] | None, passages: np.ndarray,
               scorer: Scorer, settings: dict) -> None:
        """Write the index's files and move them to the output."""
        staging = self.partial / "index"
        staging.mkdir()
        write_index_files(staging, texts, ids, titles, passages, scorer,
                          {**settings, "inputs_sha256": self.manifest["inputs_sha256"]})
        if self.path.is_dir():
            self.path.rmdir()  # empty (checked when claimed): the finished index takes its place
        os.replace(staging, self.path)
        shutil.rmtree(self.partial)


def _save_array(path: Path, array: np.ndarray) -> None:
    with atomic_write(path, "wb") as f:
        np.save(f, array, allow_pickle=False)


def write_index_files(directory: Path, texts: list[str], ids: list[str] | None, titles: list[str | None] | None,
                      passages: np.ndarray, scorer: Scorer, settings: dict) -> None:
    offsets = np.zeros((len(texts) + 1, 2), dtype=np.int64)
    with atomic_write(directory / TEXTS_FILE, "wb") as text_file, \
            atomic_write(directory / RECORDS_FILE, "wb") as record_file:
        for position, text in enumerate(texts):
            data = text.encode("utf-8", "surrogatepass")
            record = json.dumps([str(position) if ids is None else ids[position],
                                 None if titles is None else titles[position]], ensure_ascii=False)
            line = record.encode("utf-8", "surrogatepass") + b"\n"
            text_file.write(data)
            record_file.write(line)
            offsets[position + 1] = offsets[position] + (len(data), len(line))
    _save_array(directory / OFFSETS_FILE, offsets)
    _save_array(directory / PASSAGES_FILE, passages.astype(np.int64, copy=False))
    with atomic_write(directory / TERMS_FILE) as f:
        json.dump(sorted(scorer.vocabulary, key=scorer.vocabulary.__getitem__), f, ensure_ascii=False)
    for name, array in scorer.arrays().items():
        _save_array(directory / SCORER_FILES[name], array)
    files = {name: {"bytes": (directory / name).stat().st_size, "sha256": file_digest(directory / name)}
             for name in FILES}
    metadata = {"kind": KIND, "format": FORMAT, **settings, "library": LIBRARY, "library_version": library_version(),
                "bm25": scorer.params, "documents": len(texts), "passages": len(passages),
                "terms": len(scorer.vocabulary), "files": files}
    with atomic_write(directory / METADATA_FILE) as f:  # last: a directory with it is complete
        json.dump(metadata, f, ensure_ascii=False, indent=2, sort_keys=True)
        f.write("\n")


# ------------------------------------------------------------------------------------------------------- reading

class DiskDocuments:
    """The documents of an index directory, read when a hit needs one: documents.txt and documents.jsonl are
    memory-mapped, so an open index holds only the pages its hits touched."""

    def __init__(self, directory: Path, offsets: np.ndarray):
        self.directory, self.offsets = directory, offsets
        self._texts = self._map(directory / TEXTS_FILE)
        self._records = self._map(directory / RECORDS_FILE)

    @staticmethod
    def _map(path: Path):
        with open_regular_file(path) as f:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(f.fileno()).st_size else b""

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def text(self, position: int) -> str:
        start, end = self.offsets[position, 0], self.offsets[position + 1, 0]
        try:
            return self._texts[start:end].decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{self.directory / TEXTS_FILE}: document {position} is not UTF-8") from None

    def record(self, position: int) -> tuple[str, str | None]:
        line = self._records[self.offsets[position, 1]:self.offsets[position + 1, 1]]
        try:
            record = json.loads(line.decode("utf-8"))
        except ValueError:
            record = None
        if not isinstance(record, list) or len(record) != 2 or not isinstance(record[0], str) or \
                not isinstance(record[1], (str, type(None))):
            raise ConfigError(f"{self.directory / RECORDS_FILE}: line {position + 1} is not an [id, title] record")
        return record[0], record[1]

    def id(self, position: int) -> str:
        return self.record(position)[0]

    def title(self, position: int) -> str | None:
        return self.record(position)[1]


def _field(metadata: dict, name: str, kind: type, path: Path) -> Any:
    value = metadata.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ConfigError(f"{path}: {name} is missing or not a {kind.__name__}")
    return value


def read_index_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The metadata of the index directory `path`, checked: kind, format and the fields opening it needs."""
    path = Path(path)
    if not path.is_dir():
        found = "no such directory" if not path.exists() else "a file"
        raise ConfigError(f"{path} is not an index directory ({found})")
    meta_path = path / METADATA_FILE
    if not os.path.lexists(meta_path):
        raise ConfigError(f"{path} is not an index directory: it has no {METADATA_FILE} (build one with "
                          "`arabert-pipeline index FILES -o DIR`)")
    metadata = read_metadata(path)
    if metadata.get("kind") != KIND:
        raise ConfigError(f"{meta_path}: not an index (its kind is {metadata.get('kind')!r}, not {KIND!r})")
    if metadata.get("format") != FORMAT:
        raise ConfigError(f"{meta_path}: index format {metadata.get('format')!r} is not one this version reads "
                          f"(format {FORMAT}); rebuild the index, or use the arabert-pipeline that built it")
    if metadata.get("library") != LIBRARY:
        raise ConfigError(f"{meta_path}: built for the library {metadata.get('library')!r}, not {LIBRARY!r}")
    try:
        get_analysis(metadata.get("analysis"))
        check_passage_chars(metadata.get("passage_chars"))
    except ConfigError as exc:
        raise ConfigError(f"{meta_path}: {exc}") from None
    for name in ("documents", "passages", "terms"):
        if _field(metadata, name, int, meta_path) < 0:
            raise ConfigError(f"{meta_path}: {name} is negative")
    files = _field(metadata, "files", dict, meta_path)
    for name in FILES:
        entry = files.get(name)
        if not isinstance(entry, dict) or type(entry.get("bytes")) is not int or \
                not isinstance(entry.get("sha256"), str):
            raise ConfigError(f"{meta_path}: files.{name} must record the file's bytes and sha256")
    bm25 = _field(metadata, "bm25", dict, meta_path)
    if set(bm25) != set(PARAMS) or bm25["method"] not in METHODS or \
            not all(isinstance(bm25[k], (int, float)) and not isinstance(bm25[k], bool) for k in ("k1", "b")):
        raise ConfigError(f"{meta_path}: bm25 must hold {', '.join(PARAMS)} (a method of {', '.join(METHODS)})")
    return metadata


def _check_file(directory: Path, name: str, entry: dict, verify: bool) -> Path:
    """`directory/name` if it is a regular file of the recorded size (and checksum, with `verify`)."""
    path = directory / name
    if not os.path.lexists(path):
        raise ConfigError(f"{path} is missing: the index is incomplete")
    try:
        with open_regular_file(path, max_bytes=MAX_INDEX_FILE_BYTES) as f:
            size = os.fstat(f.fileno()).st_size
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    if size != entry["bytes"]:
        raise ConfigError(f"{path}: {size:,} bytes where the index recorded {entry['bytes']:,} (truncated or "
                          "replaced): rebuild the index")
    if verify and file_digest(path) != entry["sha256"]:
        raise ConfigError(f"{path}: its SHA-256 is not the one the index recorded (the file is damaged or was "
                          "changed): rebuild the index")
    return path


def _load_array(path: Path, shape: tuple, dtype: Any) -> np.ndarray:
    from ..embeddings.vectors import npy_header

    found_shape, found_dtype = npy_header(path)
    if found_dtype != np.dtype(dtype) or len(found_shape) != len(shape) or \
            any(want is not None and got != want for got, want in zip(found_shape, shape, strict=True)):
        want = "(" + ", ".join("N" if w is None else str(w) for w in shape) + f") {np.dtype(dtype)}"
        raise ConfigError(f"{path}: expected {want}, found {found_shape} {found_dtype}")
    return np.load(path, mmap_mode="r", allow_pickle=False)


def open_index_dir(path: str | os.PathLike, *, verify: bool = True) -> dict[str, Any]:
    """The parts of the index in `path` (metadata, documents, passages, scorer), every file checked first."""
    path = Path(path)
    metadata = read_index_metadata(path)
    files = {name: _check_file(path, name, metadata["files"][name], verify) for name in FILES}
    documents, passages, terms = metadata["documents"], metadata["passages"], metadata["terms"]
    offsets = np.array(_load_array(files[OFFSETS_FILE], (documents + 1, 2), np.int64))
    ends = [metadata["files"][name]["bytes"] for name in (TEXTS_FILE, RECORDS_FILE)]
    if offsets[0].any() or offsets[-1].tolist() != ends or np.any(np.diff(offsets, axis=0) <= 0):
        raise ConfigError(f"{files[OFFSETS_FILE]}: not the offsets of the documents in {TEXTS_FILE} and "
                          f"{RECORDS_FILE}")
    # In memory (24 bytes a passage): a memory-mapped table costs a Python call per row a search reads.
    table = np.array(_load_array(files[PASSAGES_FILE], (passages, 3), np.int64))
    if passages and (table[:, 0].min() < 0 or table[:, 0].max() >= documents or np.any(table[:, 1] < 0)
                     or np.any(table[:, 2] <= table[:, 1])):
        raise ConfigError(f"{files[PASSAGES_FILE]}: holds passages outside the documents")
    try:
        vocabulary_list = parse_json(read_text_file(files[TERMS_FILE], max_bytes=MAX_DATA_FILE_BYTES),
                                     path=files[TERMS_FILE])
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(vocabulary_list, list) or len(vocabulary_list) != terms or \
            not all(isinstance(term, str) for term in vocabulary_list):
        raise ConfigError(f"{files[TERMS_FILE]}: not a list of {terms:,} terms")
    vocabulary = {term: i for i, term in enumerate(vocabulary_list)}
    if len(vocabulary) != terms:
        raise ConfigError(f"{files[TERMS_FILE]}: holds a term twice")
    arrays = {name: _load_array(files[SCORER_FILES[name]], (None,), DTYPES[name]) for name in ARRAYS}
    pointers = arrays["indptr"]
    if len(pointers) != terms + 1 or pointers[0] != 0 or pointers[-1] != len(arrays["data"]) or \
            len(arrays["indices"]) != len(arrays["data"]) or np.any(np.diff(pointers) < 0) or \
            (len(arrays["indices"]) and (arrays["indices"].min() < 0 or arrays["indices"].max() >= passages)):
        raise ConfigError(f"{path / SCORER_FILES['indptr']}: the BM25 arrays do not fit {terms:,} terms over "
                          f"{passages:,} passages")
    scorer = Scorer.from_arrays(arrays, vocabulary, passages, metadata["bm25"])
    return {"metadata": metadata, "documents": DiskDocuments(path, offsets), "passages": table,
            "scorer": scorer}

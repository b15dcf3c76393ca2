"""Preprocess whole corpus files: streaming, parallel, order-preserving, atomic and resumable.

    preprocess_corpus(["a.txt.xz", "b.txt"], "out.txt", preprocessing="arabertv2", workers=2)

reads UTF-8 text (.txt, .txt.gz, .txt.xz: one paragraph per line, a blank line between documents) and writes exactly
one output line per input line, in input order, so blank lines and document boundaries survive; several inputs are
concatenated in the order given. The output (.txt, .gz or .xz by suffix) is built as OUT.part next to a checkpoint
OUT.part.json and renamed to OUT only when complete; then OUT.arabert_pipeline.json records the preprocessing, which
pretraining checks. `resume=True` continues an interrupted run from its last checkpoint.

An existing OUT is replaced only if it is an earlier output (it has its sidecar) and `overwrite=True`; OUT, its
companions and the word cache may not be inputs; a run holds a lock on OUT (outputs.OutputLock), so a second run
on the same output is refused while the first one writes it.
"""
from __future__ import annotations

import collections
import dataclasses
import gzip
import json
import lzma
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple, cast

from ..artifacts.metadata import SIDECAR_SUFFIX
from ..artifacts.reads import read_json_file
from ..artifacts.writes import atomic_write, check_replaceable, naming_io_errors
from ..errors import ConfigError, InputError
from ..outputs import OutputLock, check_directory_writable, check_not_input
from .inputs import _compression, _InputFile, _read_lines, check_inputs
from .wordcache import WordCache, read_new_entries

PART_SUFFIX = ".part"
CHECKPOINT_SUFFIX = ".part.json"
WORD_CACHE_SUFFIX = ".words.tsv"
ERROR_POLICIES = ("strict", "replace")
CHECKPOINT_VERSION = 1


@dataclasses.dataclass
class CorpusConfig:
    """Options of `preprocess_corpus`; the fields mirror the flags of `arabert-pipeline preprocess`."""

    inputs: list[str]
    output: str
    preprocessing: str = "arabertv2"  # arabertv2, arabertv02, none, or an AraBERT model name
    workers: int = 1
    errors: str = "strict"  # invalid UTF-8: "strict" stops with InputError, "replace" writes U+FFFD and counts it
    resume: bool = False
    overwrite: bool = False  # replace an earlier output at OUT
    word_cache: str | None = None  # word -> segmentation cache file; default OUT.words.tsv
    farasa_jar: str | None = None  # QCRI's Farasa jar instead of the offline port; default $ARABERT_PIPELINE_FARASA_JAR
    chunk_lines: int = 1000  # lines per task sent to a worker
    checkpoint_chunks: int = 20  # chunks between checkpoints
    progress: bool = True


@dataclasses.dataclass
class CorpusReport:
    """What a run did; the counters cover the whole output, including the part written before a resume."""

    output: str
    preprocessing: str
    lines: int = 0
    words: int = 0  # whitespace-separated words read
    input_bytes: int = 0  # uncompressed UTF-8 bytes read
    replacements: int = 0  # invalid UTF-8 sequences replaced by U+FFFD (errors="replace")
    # Non-blank lines that preprocessing left empty (e.g. only tatweel or emoji): they are kept, one output line per
    # input line, but read like document boundaries.
    emptied_lines: int = 0
    segmented_words: int = 0  # distinct words this run sent to the segmenter (new to the word cache)
    cache_lookups: int = 0  # words the segmenter was asked for
    cache_hits: int = 0  # ... of which were answered from a cache
    seconds: float = 0.0
    resumed_at_line: int = 0

    @property
    def cache_hit_rate(self) -> float:
        return self.cache_hits / self.cache_lookups if self.cache_lookups else 0.0

    def summary(self) -> str:
        text = (
            f"{self.output}: {self.lines:,} lines, {self.words:,} words, {self.input_bytes / 1e6:,.1f} MB "
            f"in {self.seconds:,.1f} s ({self.lines / max(self.seconds, 1e-9):,.0f} lines/s, "
            f"{self.input_bytes / 1e6 / max(self.seconds, 1e-9):,.2f} MB/s)"
        )
        if self.cache_lookups:
            text += (
                f"; segmenter: {self.segmented_words:,} new distinct words, "
                f"cache hit rate {100 * self.cache_hit_rate:.2f}% of {self.cache_lookups:,} lookups"
            )
        if self.replacements:
            text += f"; {self.replacements:,} invalid UTF-8 sequences replaced by U+FFFD"
        if self.emptied_lines:
            text += f"; {self.emptied_lines:,} non-blank lines became empty"
        if self.resumed_at_line:
            text += f"; resumed at line {self.resumed_at_line + 1:,}"
        return text


def preprocess_corpus(inputs: Iterable[str | os.PathLike], output: str | os.PathLike, **options) -> CorpusReport:
    """Preprocess `inputs` (concatenated in order) into `output`; `options` are the other `CorpusConfig` fields."""
    return run_corpus(CorpusConfig(inputs=[str(p) for p in inputs], output=str(output), **renamed_options(options)))


def renamed_options(options: dict) -> dict:
    """`config=`, the preprocessing's name before it was called `preprocessing` as everywhere else, still works for
    one release, with a DeprecationWarning."""
    if "config" not in options:
        return options
    import warnings

    warnings.warn("config= is deprecated and will be removed in the next release: use preprocessing=",
                  DeprecationWarning, stacklevel=3)
    if "preprocessing" in options:
        raise ConfigError("give preprocessing= (config= is its old name), not both")
    return {("preprocessing" if key == "config" else key): value for key, value in options.items()}


# ---------------------------------------------------------------------------------------------------------------
# Writing


class _PartWriter:
    """Appends lines to OUT.part and makes them durable at each checkpoint.

    For .gz/.xz outputs every checkpoint closes a compressed member, so that a resumed run can cut the file back to
    the last checkpoint and append a new member: gzip and xz readers decode concatenated members as one stream.
    """

    def __init__(self, path: Path, kind: str, keep_bytes: int):
        self.kind, self.path = kind, path
        self.raw = open(path, "r+b" if keep_bytes else "wb", buffering=1 << 20)  # noqa: SIM115  owned until close()
        self.raw.truncate(keep_bytes)
        self.raw.seek(keep_bytes)
        self.stream: BinaryIO | gzip.GzipFile | lzma.LZMAFile | None = None

    def write(self, lines: list[str]) -> None:
        if self.stream is None:
            if self.kind == "gz":  # no file name or time in the header: reruns give identical bytes
                self.stream = gzip.GzipFile(fileobj=self.raw, mode="wb", filename="", mtime=0)
            elif self.kind == "xz":
                self.stream = lzma.LZMAFile(self.raw, "wb")  # noqa: SIM115  open across writes; commit() closes it
            else:
                self.stream = self.raw
        with naming_io_errors(self.path):
            self.stream.write(("\n".join(lines) + "\n").encode("utf-8"))

    def commit(self) -> int:
        """Flush everything written so far to disk; returns the file size to record in the checkpoint."""
        with naming_io_errors(self.path):
            if self.stream is not None and self.stream is not self.raw:
                self.stream.close()
                self.stream = None
            self.raw.flush()
            os.fsync(self.raw.fileno())
            return self.raw.tell()

    def close(self) -> None:
        with naming_io_errors(self.path):
            self.raw.close()


# ---------------------------------------------------------------------------------------------------------------
# Workers: one Preprocessor per process


class _Worker:
    """The per-process state: a Preprocessor, and how far this process has read the shared word cache."""

    def __init__(self, name: str, farasa_jar: str | None, cache_path: str | None):
        from .preprocessor import Preprocessor

        self.preprocessor = Preprocessor(name, farasa_jar=farasa_jar)
        self.segmenter = self.preprocessor.segmenter
        self.cache_path = cache_path if self.segmenter is not None else None
        self.cache_offset = 0

    def _read_word_cache(self) -> None:
        """Preload the entries appended since the last chunk. If another run sharing the file cut it back (resuming),
        the saved offset may no longer start a line: then read it all again."""
        path, segmenter = self.cache_path, self.segmenter
        if path is None or segmenter is None:  # no shared cache file (kept only with a segmenter)
            return
        with open(path, "rb") as f:
            header = len(f.readline())
            if self.cache_offset > header:
                f.seek(self.cache_offset - 1)
                if f.read(1) != b"\n":
                    self.cache_offset = header
            known, self.cache_offset = read_new_entries(f, max(self.cache_offset, header))
        if known:
            segmenter.preload(known)

    def process(self, lines: list[str]) -> _ChunkResult:
        if self.cache_path is not None:
            self._read_word_cache()
        out = self.preprocessor.preprocess_batch(lines)
        words = sum(len(line.split()) for line in lines)
        emptied = sum(1 for before, after in zip(lines, out, strict=True) if before.strip() and not after)
        segmenter = self.segmenter
        if segmenter is None:
            return _ChunkResult(out, words, emptied, 0, 0, {})
        lookups, hits = segmenter.lookups, segmenter.hits
        segmenter.lookups = segmenter.hits = 0
        return _ChunkResult(out, words, emptied, lookups, hits, segmenter.drain_new())


class _ChunkResult(NamedTuple):
    lines: list[str]
    words: int  # whitespace-separated words read
    emptied: int  # non-blank lines that preprocessing left empty
    lookups: int  # words asked of the segmenter
    hits: int  # ... answered from its cache
    new_words: dict[str, str]  # words the segmenter segmented for this chunk (word -> Farasa output)


_worker: _Worker | BaseException | None = None


def _init_worker(name: str, farasa_jar: str | None, cache_path: str | None) -> None:
    global _worker
    # Ctrl-C reaches the whole process group: let the main process alone handle it and stop the pool.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _worker = _Worker(name, farasa_jar, cache_path)
    except BaseException as exc:  # raised with the first chunk: a Pool would restart a failing initializer forever
        _worker = exc


def _process_chunk(lines: list[str]) -> _ChunkResult:
    if isinstance(_worker, BaseException):
        raise _worker
    return cast(_Worker, _worker).process(lines)  # set by _init_worker, the pool's initializer


def _map_ordered(chunks: Iterator[list[str]], workers: int, initargs: tuple) -> Generator[_ChunkResult, None, None]:
    """`_Worker.process` over `chunks`, results in input order, with at most a few chunks in flight.

    Not `Pool.imap`: its feeder thread drains the whole input iterator into the task queue, which would hold the
    entire corpus in memory, since the workers are always slower than reading.
    """
    if workers == 1:
        worker = _Worker(*initargs)
        for chunk in chunks:
            yield worker.process(chunk)
        return
    # spawn, not fork: workers build their own Preprocessor and must not inherit the progress bar's thread or locks.
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers, _init_worker, initargs) as pool:
        pending: collections.deque = collections.deque()
        for chunk in chunks:
            pending.append(pool.apply_async(_process_chunk, (chunk,)))
            if len(pending) >= 2 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


# ---------------------------------------------------------------------------------------------------------------
# The run


def _fingerprint(cfg: CorpusConfig, paths: list[Path], backend: str | None) -> dict:
    """What must not change between an interrupted run and its resumption."""
    return {
        "version": CHECKPOINT_VERSION,
        "preprocessing": cfg.preprocessing,
        "segmenter": backend,
        "output": Path(cfg.output).name,
        "inputs": [{"path": str(p.resolve()), "size": p.stat().st_size, "mtime_ns": p.stat().st_mtime_ns}
                   for p in paths],
    }


def _validate(cfg: CorpusConfig, paths: list[Path], output: Path) -> str | None:
    """Check the options; returns the segmenter's name (None when the preprocessing does not segment)."""
    from .preprocessor import segmenter_backend

    backend = segmenter_backend(cfg.preprocessing, cfg.farasa_jar)
    if cfg.workers < 1:
        raise ConfigError(f"workers must be at least 1, not {cfg.workers}")
    if cfg.workers > max_workers():
        # Each worker is a Python process with its own Preprocessor (and Farasa): a typo such as 10000 would start
        # thousands of them and take the machine's memory from everything else on it.
        raise ConfigError(f"workers must be at most {max_workers()} (4 per CPU this process may use), not "
                          f"{cfg.workers}")
    if cfg.errors not in ERROR_POLICIES:
        raise ConfigError(f"errors must be one of {', '.join(ERROR_POLICIES)}, not {cfg.errors!r}")
    if cfg.chunk_lines < 1 or cfg.checkpoint_chunks < 1:
        raise ConfigError("chunk_lines and checkpoint_chunks must be at least 1")
    written = [output.with_name(output.name + suffix) for suffix in (PART_SUFFIX, CHECKPOINT_SUFFIX, SIDECAR_SUFFIX)]
    for path in [output, *written]:
        check_not_input(path, paths)
    if output.is_dir() and not output.is_symlink():
        raise ConfigError(f"the output {output} is a directory; give a file name")
    for path in [output, *written]:
        check_replaceable(path, "-o")
    check_directory_writable(output.parent, "-o")
    if output.exists() and not cfg.overwrite:
        raise ConfigError(f"{output} exists: pass --overwrite (overwrite=True) to replace it, or choose another output")
    if output.exists() and not written[2].exists():
        raise ConfigError(f"{output} exists and was not written by `arabert-pipeline preprocess` (it has no "
                          f"{written[2].name}): it is never overwritten; choose another output")
    if backend is not None:
        cache = _word_cache_path(cfg)
        check_not_input(cache, paths, "--word-cache")
        if cache.resolve() in {path.resolve() for path in [output, *written]}:
            raise ConfigError(f"--word-cache {cache} is the output or one of its companion files; choose another file")
        if cache.is_dir() and not cache.is_symlink():
            raise ConfigError(f"--word-cache {cache} is a directory; give a file name")
        check_replaceable(cache, "--word-cache")
        check_directory_writable(cache.parent, "--word-cache")
    return backend


def max_workers() -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return 4 * cpus


def _word_cache_path(cfg: CorpusConfig) -> Path:
    output = Path(cfg.output)
    return Path(cfg.word_cache) if cfg.word_cache else output.with_name(output.name + WORD_CACHE_SUFFIX)


def _start(cfg: CorpusConfig, part: Path, checkpoint: Path, fingerprint: dict, report: CorpusReport) -> dict:
    """The checkpoint to continue from (all zeros for a fresh run); fills `report` with the counters so far."""
    fresh = {"lines": 0, "input_bytes": 0, "part_bytes": 0, "word_cache": None}
    if not part.exists():
        return fresh
    if not cfg.resume:
        raise ConfigError(
            f"{part} exists: an earlier run was interrupted. Pass --resume (resume=True) to continue it, "
            f"or remove {part} to start again."
        )
    if not checkpoint.exists():  # killed before its first checkpoint
        return fresh
    try:
        state = read_json_file(checkpoint)
    except InputError as exc:
        raise ConfigError(f"unreadable checkpoint: {exc}; remove {part} to start again") from None
    if state.get("fingerprint") != fingerprint:
        raise ConfigError(
            f"{part} was written with other inputs or another preprocessing than this run (or an input changed "
            f"since); remove {part} to start again."
        )
    if not _checkpoint_fields_valid(state):
        # The fingerprint matched, so the file is ours: a missing field or one of another type was edited by hand.
        raise ConfigError(f"{checkpoint}: a field is missing or of the wrong type; remove {part} to start again")
    if part.stat().st_size < state["part_bytes"]:
        raise ConfigError(f"{part} is shorter than its checkpoint says; remove it to start again")
    for field in ("lines", "words", "emptied_lines", "input_bytes", "segmented_words", "cache_lookups", "cache_hits",
                  "seconds"):
        setattr(report, field, state["report"][field])
    report.resumed_at_line = state["lines"]
    return state


def _checkpoint_fields_valid(state: dict) -> bool:
    def count(value) -> bool:
        return type(value) is int and value >= 0

    counters, cache = state.get("report"), state.get("word_cache")
    return (all(count(state.get(name)) for name in ("lines", "input_bytes", "part_bytes"))
            and isinstance(counters, dict)
            and all(count(counters.get(name)) for name in ("lines", "words", "emptied_lines", "input_bytes",
                                                           "segmented_words", "cache_lookups", "cache_hits"))
            and type(counters.get("seconds")) in (int, float)
            and (cache is None or (isinstance(cache, list) and len(cache) == 2 and isinstance(cache[0], str)
                                   and count(cache[1]))))


def _save_checkpoint(path: Path, fingerprint: dict, report: CorpusReport, part_bytes: int,
                     cache: WordCache | None) -> None:
    state = {
        "fingerprint": fingerprint,
        "lines": report.lines,
        "input_bytes": report.input_bytes,
        "part_bytes": part_bytes,
        "word_cache": [str(cache.path.resolve()), cache.size()] if cache is not None else None,
        "report": dataclasses.asdict(report),
    }
    with atomic_write(path) as f:
        json.dump(state, f, ensure_ascii=False)


def _chunks(lines: Iterator[tuple[str, int]], size: int, skip: int, skip_bytes: int) -> Iterator[tuple[list[str], int]]:
    """(lines, bytes) chunks after the first `skip` lines, which a resumed run has written already."""
    skipped = skipped_bytes = 0
    chunk: list[str] = []
    chunk_bytes = 0
    for text, nbytes in lines:
        if skipped < skip:
            skipped += 1
            skipped_bytes += nbytes
            if skipped == skip and skipped_bytes != skip_bytes:
                break
            continue
        chunk.append(text)
        chunk_bytes += nbytes
        if len(chunk) == size:
            yield chunk, chunk_bytes
            chunk, chunk_bytes = [], 0
    if skipped < skip or skipped_bytes != skip_bytes:
        raise InputError(f"the inputs no longer match the checkpoint at line {skip:,}; remove the .part file "
                         "and start again")
    if chunk:
        yield chunk, chunk_bytes


def run_corpus(cfg: CorpusConfig) -> CorpusReport:
    """The run behind `preprocess_corpus` and the CLI verb."""
    # The lock file beside the output is the run's first write: an unwritable place must be named before it fails.
    check_directory_writable(Path(cfg.output).parent, "-o")
    with OutputLock(cfg.output, "preprocess"):
        return _run(cfg)


def _run(cfg: CorpusConfig) -> CorpusReport:
    started = time.monotonic()
    paths = [Path(p) for p in cfg.inputs]
    output = Path(cfg.output)
    check_inputs(paths)
    backend = _validate(cfg, paths, output)

    part = output.with_name(output.name + PART_SUFFIX)
    checkpoint = output.with_name(output.name + CHECKPOINT_SUFFIX)
    sidecar = output.with_name(output.name + SIDECAR_SUFFIX)
    fingerprint = _fingerprint(cfg, paths, backend)
    report = CorpusReport(output=str(output), preprocessing=cfg.preprocessing)
    state = _start(cfg, part, checkpoint, fingerprint, report)
    seconds_before = report.seconds

    cache = None
    if backend is not None:
        cache_path = _word_cache_path(cfg)
        checkpointed = state["word_cache"]
        keep = checkpointed[1] if checkpointed and checkpointed[0] == str(cache_path.resolve()) else None
        cache = WordCache(cache_path, backend, keep)

    output.parent.mkdir(parents=True, exist_ok=True)
    writer = _PartWriter(part, _compression(output), state["part_bytes"])
    _save_checkpoint(checkpoint, fingerprint, report, state["part_bytes"], cache)
    files: list[_InputFile] = []
    disk_done = [0]
    lines = _read_lines(paths, cfg.errors, files, disk_done)
    chunks = _chunks(lines, cfg.chunk_lines, state["lines"], state["input_bytes"])
    chunk_bytes: collections.deque[int] = collections.deque()

    def texts() -> Iterator[list[str]]:
        for chunk, nbytes in chunks:
            chunk_bytes.append(nbytes)
            yield chunk

    session_bytes = 0
    bar = _progress_bar(cfg, output, paths)
    results = _map_ordered(texts(), cfg.workers,
                           (cfg.preprocessing, cfg.farasa_jar, str(cache.path) if cache else None))
    try:
        for done, result in enumerate(results, 1):
            writer.write(result.lines)
            nbytes = chunk_bytes.popleft()
            session_bytes += nbytes
            report.lines += len(result.lines)
            report.words += result.words
            report.emptied_lines += result.emptied
            report.input_bytes += nbytes
            report.cache_lookups += result.lookups
            report.cache_hits += result.hits
            if cache is not None:
                report.segmented_words += cache.add(result.new_words)
            report.seconds = seconds_before + time.monotonic() - started
            if done % cfg.checkpoint_chunks == 0:
                _save_checkpoint(checkpoint, fingerprint, report, writer.commit(), cache)
            bar.set_postfix_str(f"{report.lines:,} lines, {session_bytes / 1e6 / (time.monotonic() - started):.2f} "
                                "MB/s", refresh=False)
            bar.update(disk_done[0] - bar.n)
        report.replacements = sum(f.replacements for f in files)  # files were re-read from the start on resume
        _save_checkpoint(checkpoint, fingerprint, report, writer.commit(), cache)
    finally:
        results.close()  # stops the worker pool now, also when a chunk failed
        bar.close()
        writer.close()
        if cache is not None:
            cache.close()

    # The sidecar is what marks the output complete: remove the old one first, so that a crash between the two
    # renames leaves an output without a sidecar (downstream refuses it) rather than one with a stale sidecar.
    sidecar.unlink(missing_ok=True)
    os.replace(part, output)
    _write_sidecar(sidecar, report, files, cfg, backend)
    checkpoint.unlink(missing_ok=True)
    return report


def _write_sidecar(path: Path, report: CorpusReport, files: list[_InputFile], cfg: CorpusConfig,
                   backend: str | None) -> None:
    from ..version import __version__

    fields = {
        "preprocessing": report.preprocessing,
        "lines": report.lines,
        "words": report.words,
        "input_bytes": report.input_bytes,
        "inputs": [dataclasses.asdict(f) for f in files],
        "errors": cfg.errors,
        "replacements": report.replacements,
        "emptied_lines": report.emptied_lines,
        "segmenter": backend,
        "segmented_words": report.segmented_words,
        "cache_lookups": report.cache_lookups,
        "cache_hit_rate": round(report.cache_hit_rate, 6),
        "seconds": round(report.seconds, 3),
        "arabert_pipeline_version": __version__,
    }
    with atomic_write(path) as f:
        json.dump(fields, f, ensure_ascii=False, indent=2)
        f.write("\n")


def _progress_bar(cfg: CorpusConfig, output: Path, paths: list[Path]):
    """Progress over the input files' bytes on disk (known in advance, so it gives an ETA); lines and text MB/s."""
    from tqdm.auto import tqdm

    return tqdm(
        total=sum(p.stat().st_size for p in paths), unit="B", unit_scale=True, desc=output.name,
        bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}{postfix}]",
        disable=not cfg.progress, file=sys.stderr, mininterval=1.0,
    )

"""Preprocessing on other engines: a batch function for `datasets.Dataset.map` and Ray Data, and a Ray shard runner.

    ds = ds.map(PreprocessBatch("arabertv2"), batched=True, num_proc=4)          # Hugging Face datasets
    ds = ds.map_batches(PreprocessBatch, fn_constructor_kwargs={"preprocessing": "arabertv2"},
                        compute=ray.data.ActorPoolStrategy(size=8))                      # Ray Data

    preprocess_shards(["a.txt.xz", "b.txt"], "out/", engine="ray")   # out/a.txt, out/b.txt, each with its sidecar

`PreprocessBatch` runs the local engine's per-chunk worker (`corpus._Worker.process`), so a line comes out as the
local `preprocess` verb writes it. Each shard of `preprocess_shards` is byte-identical to
`arabert-pipeline preprocess INPUT -o SHARD` with the same options.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator
from pathlib import Path

from ..artifacts.metadata import SIDECAR_SUFFIX
from ..artifacts.reads import read_json_file
from ..errors import ConfigError, InputError
from ..outputs import OutputLock, check_directory_writable
from ..weights.files import file_digest
from .corpus import (
    PART_SUFFIX,
    CorpusConfig,
    CorpusReport,
    _PartWriter,
    _validate,
    _Worker,
    _write_sidecar,
    renamed_options,
)
from .inputs import _InputFile, _read_lines, check_inputs

SHARD_COMPRESSIONS = ("none", "gz", "xz")
ENGINES = ("local", "ray")
# A few MB of text per Ray Data execution: small enough for a 200 MiB object store, large enough that starting the
# execution (and each worker's Preprocessor, ~0.5 s) is paid once per many batches.
DEFAULT_WINDOW_LINES = 20_000


class PreprocessBatch:
    """Preprocess the `column` of a batch (a dict of columns: lists from `datasets`, numpy arrays from Ray Data).

    The Preprocessor (with its Farasa segmenter and word cache) is built on the first batch a process sees and kept
    for the next ones: the object itself holds only names, so `datasets` can pickle and hash it for `num_proc`
    workers, and Ray Data can ship it to actors, without carrying a segmenter along.
    """

    def __init__(self, preprocessing: str = "arabertv2", column: str = "text", farasa_jar: str | None = None):
        self.preprocessing, self.column, self.farasa_jar = preprocessing, column, farasa_jar
        self._worker: _Worker | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_worker": None}

    def __call__(self, batch: dict) -> dict:
        if self._worker is None:
            # No shared cache file: every process keeps its own in-memory word cache (the segmenter's).
            self._worker = _Worker(self.preprocessing, self.farasa_jar, None)
        values = batch[self.column]
        lines = self._worker.process([str(text) for text in values]).lines
        if hasattr(values, "dtype"):  # Ray Data's numpy batches: give back the same kind of column
            import numpy as np

            return {**batch, self.column: np.array(lines, dtype=object)}
        return {**batch, self.column: lines}


def shard_name(path: Path, compression: str = "none") -> str:
    """`a.txt.xz` -> `a.txt` (`a.txt.gz` with compression "gz"): the input's name without its compression suffix,
    `.txt` added when the rest does not end so, and the requested compression's suffix."""
    name = path.name
    for suffix in (".gz", ".xz"):
        name = name.removesuffix(suffix)
    if not name.endswith(".txt"):
        name += ".txt"
    return name + ("" if compression == "none" else "." + compression)


@dataclasses.dataclass
class ShardsReport:
    output_dir: str
    shards: list[CorpusReport] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)  # finished earlier from these inputs and options
    replaced: list[str] = dataclasses.field(default_factory=list)  # stale shards redone (overwrite=True)
    seconds: float = 0.0

    def summary(self) -> str:
        lines = sum(r.lines for r in self.shards)
        nbytes = sum(r.input_bytes for r in self.shards)
        stale = f" ({len(self.replaced)} of them replacing stale shards)" if self.replaced else ""
        return (f"{self.output_dir}: {len(self.shards)} shards written{stale}, {len(self.skipped)} already finished "
                f"and skipped; {lines:,} lines, {nbytes / 1e6:,.1f} MB in {self.seconds:,.1f} s "
                f"({nbytes / 1e6 / max(self.seconds, 1e-9):,.2f} MB/s)")


def preprocess_shards(inputs, output_dir, *, engine: str = "ray", address: str | None = None,
                      compression: str = "none", overwrite: bool = False, window_lines: int = DEFAULT_WINDOW_LINES,
                      **options) -> ShardsReport:
    """One shard per input in `output_dir`, each as `preprocess_corpus([input], shard, **options)` writes it.

    A shard whose sidecar says it was written from this input (same SHA-256), with this preprocessing, segmenter
    and package version, is finished and skipped, so a rerun after an interruption does only the rest. Any other
    shard with a sidecar is stale: the run is refused before any work, naming it, unless `overwrite=True`, which
    redoes the stale shards (finished ones are still skipped). A shard is built as SHARD.part and renamed when
    complete, and a leftover SHARD.part from an interrupted run is started afresh. `engine="local"` runs the local
    engine shard by shard.
    """
    if engine not in ENGINES:
        raise ConfigError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if compression not in SHARD_COMPRESSIONS:
        raise ConfigError(f"shard compression must be one of {', '.join(SHARD_COMPRESSIONS)}, not {compression!r}")
    if window_lines < 1:
        raise ConfigError("window_lines must be at least 1")
    if options.get("word_cache") and engine == "ray":
        raise ConfigError("--word-cache is not used with --engine ray: each Ray worker keeps its own word cache")
    options = renamed_options(options)
    options.pop("resume", None)  # shard-granular resumption is always on
    started = time.monotonic()
    paths = [Path(p) for p in inputs]
    out_dir = Path(output_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"-o {out_dir} must be a directory with --engine {engine} (one shard per input)")
    check_inputs(paths)
    check_directory_writable(out_dir, "-o")
    shards = [out_dir / shard_name(p, compression) for p in paths]
    seen: dict[Path, Path] = {}
    for path, shard in zip(paths, shards, strict=True):
        if shard in seen:
            raise ConfigError(f"{seen[shard]} and {path} would both be written to {shard}; rename one of them")
        seen[shard] = path
    todo, stale, report = [], [], ShardsReport(str(out_dir))
    for path, shard in zip(paths, shards, strict=True):
        cfg = CorpusConfig(inputs=[str(path)], output=str(shard), overwrite=overwrite, **options)
        sidecar = shard.with_name(shard.name + SIDECAR_SUFFIX)
        if shard.exists() and sidecar.exists():
            reason = _stale_reason(sidecar, path, cfg)
            if reason is None:
                report.skipped.append(str(shard))
                continue
            stale.append((shard, reason))
            if not overwrite:
                continue
            report.replaced.append(str(shard))
        _validate(cfg, [path], shard)  # the local engine's checks, so both engines refuse the same things
        todo.append(cfg)
    if stale and not overwrite:
        # Refused before any work: skipping a stale shard would leave a directory of mixed preprocessing, and only
        # the user may say that the shard's earlier input is gone for good.
        shard, reason = stale[0]
        others = f" and the {len(stale) - 1} other stale shards" if len(stale) > 1 else ""
        raise ConfigError(f"{shard} is stale: {reason}. Pass --overwrite (overwrite=True) to redo it{others}, or "
                          "choose another -o")
    if engine == "local":
        from .corpus import run_corpus

        for cfg in todo:
            cfg.resume = True  # the local engine continues a shard's own .part from its checkpoint
            report.shards.append(run_corpus(cfg))
    elif todo:
        with _ray_session(address, max(cfg.workers for cfg in todo)) as workers:
            for cfg in todo:
                with OutputLock(cfg.output, "preprocess"):
                    report.shards.append(_ray_shard(cfg, workers, window_lines))
    report.seconds = time.monotonic() - started
    return report


def _stale_reason(sidecar: Path, path: Path, cfg: CorpusConfig) -> str | None:
    """Why the finished shard described by `sidecar` is not what this run would write from `path`; None if it is.

    The input is compared by its SHA-256, computed only when the file's name, size or modification time is not the
    recorded one: a rerun over an unchanged corpus reads nothing, a copied or touched input is recognised by its
    content, and an input of the same name from elsewhere or edited since is told apart by it.
    """
    from ..version import __version__
    from .corpus import ERROR_POLICIES
    from .preprocessor import preprocessing_name, segmenter_backend

    wanted = preprocessing_name(cfg.preprocessing)  # an unknown name is this run's error, not a stale shard
    backend = segmenter_backend(cfg.preprocessing, cfg.farasa_jar)
    try:
        recorded = read_json_file(sidecar)
    except InputError as exc:
        return f"its sidecar cannot be read ({exc})"
    version = recorded.get("arabert_pipeline_version")
    if version != __version__:
        return f"written by arabert-pipeline {version or '(no version recorded)'}, not by this one ({__version__})"
    try:
        same = preprocessing_name(recorded.get("preprocessing")) == wanted
    except ConfigError:
        same = False
    if not same:
        return f"written with --preprocessing {recorded.get('preprocessing')}, not {cfg.preprocessing}"
    if recorded.get("segmenter") != backend:
        return f"segmented by {recorded.get('segmenter')}, not by {backend}"
    errors, replacements = recorded.get("errors"), recorded.get("replacements")
    if errors not in ERROR_POLICIES or type(replacements) is not int:
        return f"its sidecar {sidecar.name} has no valid errors and replacements fields"
    # A shard written with --errors strict read no invalid UTF-8, so --errors replace would write the same bytes.
    if replacements and cfg.errors == "strict":
        return f"{replacements} invalid UTF-8 sequences were replaced (--errors replace), this run is --errors strict"
    inputs = recorded.get("inputs")
    source = inputs[0] if isinstance(inputs, list) and len(inputs) == 1 and isinstance(inputs[0], dict) else {}
    digest, name = source.get("sha256"), source.get("path")
    if not (isinstance(digest, str) and isinstance(name, str)):
        return f"its sidecar {sidecar.name} does not record the digest of one input"
    status = path.stat()
    if (Path(name).name, source.get("size"), source.get("mtime_ns")) == (path.name, status.st_size,
                                                                          status.st_mtime_ns):
        return None
    if source.get("size") != status.st_size or file_digest(path) != digest:
        return f"written from {name} as it was then (SHA-256 {digest[:12]}…), and {path} now differs"
    return None


def _import_ray():
    try:
        import ray
        import ray.data
    except ImportError:
        raise ConfigError('--engine ray needs Ray Data: pip install "arabert-pipeline[ray]" (or "ray[data]")') from None
    return ray


@contextlib.contextmanager
def _ray_session(address: str | None, workers: int) -> Iterator[int]:
    """Ray as the caller left it, or a cluster (`address`) / a small local instance started and stopped here;
    yields how many preprocessing actors to run."""
    ray = _import_ray()
    started = False
    if not ray.is_initialized():
        if address:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        else:
            # Small on purpose: the default object store takes 30% of RAM, which other jobs on the machine need.
            ray.init(num_cpus=workers, object_store_memory=max(200, 100 * workers) * 2**20,
                     include_dashboard=False, log_to_driver=False)
        started = True
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        yield max(1, cpus if address else min(workers, cpus))
    finally:
        if started:
            ray.shutdown()


def _ray_shard(cfg: CorpusConfig, workers: int, window_lines: int) -> CorpusReport:
    """Write one shard: the driver reads the input (so decoding, invalid UTF-8 and line counts are the local
    engine's own) and feeds windows of lines through Ray Data in order; results go through the local engine's
    writer with its chunk and checkpoint boundaries, because .gz/.xz bytes depend on where compressed members end.

    Why not `ray.data.read_text`: its line splitting and decoding are not the local engine's (\\r\\n, invalid
    UTF-8 naming the line), and it needs the files on storage every node sees; here only the driver reads them.
    """
    import ray
    from tqdm.auto import tqdm

    from .inputs import _compression

    started = time.monotonic()
    path, output = Path(cfg.inputs[0]), Path(cfg.output)
    part = output.with_name(output.name + PART_SUFFIX)
    sidecar = output.with_name(output.name + SIDECAR_SUFFIX)
    backend = _validate(cfg, [path], output)
    report = CorpusReport(output=str(output), preprocessing=cfg.preprocessing)
    files: list[_InputFile] = []
    disk_done = [0]
    context = ray.data.DataContext.get_current()
    saved = context.execution_options.preserve_order, context.enable_progress_bars
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    bar = tqdm(total=path.stat().st_size, unit="B", unit_scale=True, desc=output.name, disable=not cfg.progress,
               mininterval=1.0)
    # A leftover SHARD.part is from an interrupted run: the shard is redone from its start, truncating it.
    writer = _PartWriter(part, _compression(output), 0)
    try:
        window: list[str] = []
        pending: list[str] = []  # results not yet written: written in the local engine's chunks
        chunks_done = 0

        def flush(lines: list[str], final: bool) -> None:
            nonlocal chunks_done
            pending.extend(lines)
            while len(pending) >= cfg.chunk_lines or (final and pending):
                writer.write(pending[:cfg.chunk_lines])
                del pending[:cfg.chunk_lines]
                chunks_done += 1
                if chunks_done % cfg.checkpoint_chunks == 0:
                    writer.commit()

        for text, nbytes in _read_lines([path], cfg.errors, files, disk_done):
            window.append(text)
            report.input_bytes += nbytes
            if len(window) == window_lines:
                flush(_run_window(window, cfg, workers, report), False)
                window = []
                bar.update(disk_done[0] - bar.n)
        if window:
            flush(_run_window(window, cfg, workers, report), False)
        flush([], True)
        writer.commit()
        bar.update(disk_done[0] - bar.n)
    except BaseException:
        writer.close()
        part.unlink(missing_ok=True)
        raise
    finally:
        context.execution_options.preserve_order, context.enable_progress_bars = saved
        bar.close()
    writer.close()
    report.replacements = sum(f.replacements for f in files)
    report.seconds = time.monotonic() - started
    sidecar.unlink(missing_ok=True)  # as the local engine: never a stale sidecar beside a new shard
    os.replace(part, output)
    _write_sidecar(sidecar, report, files, cfg, backend)
    return report


def _run_window(window: list[str], cfg: CorpusConfig, workers: int, report: CorpusReport) -> list[str]:
    import ray

    dataset = ray.data.from_items([{"text": line} for line in window], override_num_blocks=workers)
    dataset = dataset.map_batches(
        PreprocessBatch, fn_constructor_kwargs={"preprocessing": cfg.preprocessing, "farasa_jar": cfg.farasa_jar},
        batch_size=cfg.chunk_lines, batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=workers),
        num_cpus=1,
    )
    out = [str(line) for batch in dataset.iter_batches(batch_size=None, batch_format="numpy")
           for line in batch["text"]]
    if len(out) != len(window):  # one output line per input line is what every downstream stage relies on
        raise RuntimeError(f"Ray returned {len(out)} lines for {len(window)}")
    report.lines += len(out)
    report.words += sum(len(line.split()) for line in window)
    report.emptied_lines += sum(1 for before, after in zip(window, out, strict=True) if before.strip() and not after)
    return out

"""Train word2vec (skip-gram / CBOW) or fastText vectors with gensim on preprocessed corpus files.

    train_embeddings(["train.arabertv02.txt.xz"], "runs/ft", model="fasttext", dim=300, epochs=5)

The inputs are corpus files written by `arabert-pipeline preprocess` (.txt, .gz, .xz, one paragraph per line): their
sidecar names the preprocessing, which the output records so that queries are preprocessed the same way. Words are
the whitespace-separated tokens of the preprocessed text (with `arabertv2`, Farasa segments such as `ال+` and `+ها`
are tokens of their own). The corpus is streamed, never held in memory: one pass builds the vocabulary, then one pass
per epoch trains.

The output directory (built under a temporary name, moved into place once complete, locked while written):

    vectors.npy        float32 matrix, one row per word, in the order of words.txt (what `Embeddings.load` reads)
    words.txt          one `word<TAB>count` line per word, most frequent first
    ngrams.npy         fastText only: the character n-gram bucket matrix, for vectors of words never seen
    vectors.txt        word2vec text format (the vocabulary's vectors), which most tools read
    vectors.kv         gensim's native KeyedVectors (gensim.models.KeyedVectors.load); large arrays beside it as
                       vectors.kv.*.npy. It is a pickle: load it only from a directory you trust. This package never
                       loads it.
    arabert_pipeline.json
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

from ..artifacts.metadata import METADATA_FILE, SIDECAR_SUFFIX, sidecar_preprocessing, write_metadata
from ..artifacts.paths import portable_path
from ..artifacts.reads import CORPUS_READ_ERRORS, decompressed
from ..artifacts.writes import atomic_directory, naming_io_errors
from ..errors import ConfigError, InputError
from ..outputs import OutputKind, OutputLock, claim_output_dir, remove_stale_temporaries
from ..version import __version__

log = logging.getLogger(__name__)

MODELS = ("word2vec", "fasttext")
ARCHITECTURES = ("skipgram", "cbow")
TASK = "word-embeddings"
VECTORS_FILE = "vectors.npy"
WORDS_FILE = "words.txt"
NGRAMS_FILE = "ngrams.npy"
TEXT_FILE = "vectors.txt"
KV_FILE = "vectors.kv"
EMBEDDINGS_OUTPUT = OutputKind(
    "train-embeddings",
    names=(VECTORS_FILE, WORDS_FILE, NGRAMS_FILE, TEXT_FILE, KV_FILE, KV_FILE + ".*.npy", METADATA_FILE),
    markers=(VECTORS_FILE,),
)
# gensim cuts a longer sentence at its MAX_WORDS_IN_BATCH without a word; a long paragraph is fed in pieces instead.
MAX_SENTENCE_WORDS = 10_000


@dataclasses.dataclass
class EmbeddingConfig:
    """Options of `train_embeddings`; the fields mirror the flags of `arabert-pipeline train-embeddings`."""

    inputs: list[str]
    output_dir: str
    model: str = "word2vec"  # or "fasttext" (character n-grams: vectors for unseen forms)
    architecture: str = "skipgram"  # or "cbow"
    dim: int = 300
    window: int = 5
    min_count: int = 5
    epochs: int = 5
    workers: int = 0  # 0: all CPU cores; 1 makes a run reproducible
    seed: int = 42
    min_n: int = 3  # fastText: shortest character n-gram
    max_n: int = 6  # fastText: longest character n-gram
    bucket: int = 2_000_000  # fastText: rows of the n-gram hash table (bucket × dim floats on disk and in memory)
    preprocessing: str | None = None  # inputs without a sidecar are already preprocessed with this
    progress: bool = True
    progress_seconds: float = 30.0  # least time between two progress lines within an epoch
    overwrite: bool = False


@dataclasses.dataclass
class EmbeddingReport:
    output_dir: str
    model: str
    architecture: str
    preprocessing: str
    vocabulary: int
    dim: int
    sentences: int
    words: int
    seconds: float

    def summary(self) -> str:
        return (f"{self.output_dir}: {self.model} {self.architecture}, {self.vocabulary:,} words × {self.dim}, "
                f"preprocessing {self.preprocessing}; {self.words:,} corpus words in {self.sentences:,} lines, "
                f"{self.seconds:,.1f} s")


def train_embeddings(inputs: list[str | os.PathLike], output_dir: str | os.PathLike, **options) -> EmbeddingReport:
    """Train vectors on `inputs` into `output_dir`; `options` are the other `EmbeddingConfig` fields."""
    return run_training(EmbeddingConfig(inputs=[str(p) for p in inputs], output_dir=str(output_dir), **options))


def check_config(config: EmbeddingConfig) -> None:
    if config.model not in MODELS:
        raise ConfigError(f"model must be one of {', '.join(MODELS)}, not {config.model!r}")
    if config.architecture not in ARCHITECTURES:
        raise ConfigError(f"architecture must be one of {', '.join(ARCHITECTURES)}, not {config.architecture!r}")
    for name, low in (("dim", 1), ("window", 1), ("min_count", 1), ("epochs", 1), ("workers", 0), ("min_n", 1),
                      ("max_n", 1), ("bucket", 1)):
        value = getattr(config, name)
        if type(value) is not int or value < low:
            raise ConfigError(f"{name} must be an integer ≥ {low}, not {value!r}")
    if config.min_n > config.max_n:
        raise ConfigError(f"min_n ({config.min_n}) must not exceed max_n ({config.max_n})")
    if not config.inputs:
        raise ConfigError("no input files given")


def resolve_preprocessing(config: EmbeddingConfig) -> str:
    """The inputs' one preprocessing: from their sidecars, or `config.preprocessing` for inputs without one."""
    from ..preprocess import PREPROCESSING_NAMES

    recorded = {}
    for name in config.inputs:
        path = Path(name)
        if not path.is_file():
            raise InputError("no such file" if not path.exists() else "not a regular file", path=path)
        recorded[path] = sidecar_preprocessing(path)
    names = {name for name in recorded.values() if name is not None}
    if len(names) > 1:
        raise ConfigError(f"the inputs were preprocessed differently ({', '.join(sorted(names))}); train on inputs "
                          "of one preprocessing")
    wanted = config.preprocessing
    if wanted is not None and wanted not in PREPROCESSING_NAMES:
        raise ConfigError(f"unknown preprocessing {wanted!r}; choose one of {', '.join(PREPROCESSING_NAMES)}")
    if names and wanted is not None and wanted not in names:
        raise ConfigError(f"--preprocessing {wanted} contradicts the inputs' sidecars ({names.pop()})")
    bare = [path for path, name in recorded.items() if name is None]
    if bare and wanted is None:
        raise ConfigError(
            f"{bare[0]} has no {SIDECAR_SUFFIX} sidecar, so how it was preprocessed is unknown: run `arabert-pipeline "
            "preprocess` on it first (vectors are trained on preprocessed text, as queries are preprocessed), or "
            "pass --preprocessing NAME if it already is preprocessed"
        )
    return wanted or names.pop()


class CorpusSentences:
    """The corpus as gensim reads it: a restartable iterable of token lists, one per line (long lines in pieces),
    streamed from the files on every pass.

    gensim iterates training passes in a producer thread of its own: an error raised there would leave its workers
    waiting forever. So a read error ends the pass instead, and is kept in `error` for the caller to raise.
    """

    def __init__(self, paths: list[Path], report=None):
        self.paths = paths
        self.report = report  # called with the count of lines read so far in this pass, after each line
        self.error: Exception | None = None
        self.lines = 0  # non-blank lines of the last complete pass

    def __iter__(self) -> Iterator[list[str]]:
        if self.error is not None:
            return
        lines = 0
        try:
            for path in self.paths:
                for _number, words in _tokenized_lines(path):
                    for start in range(0, len(words), MAX_SENTENCE_WORDS):
                        yield words[start:start + MAX_SENTENCE_WORDS]
                    lines += 1
                    if self.report is not None:
                        self.report(lines)
        except InputError as exc:
            self.error = exc
            return
        self.lines = lines


def _tokenized_lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    try:
        with open(path, "rb") as raw, decompressed(path, raw) as f:
            for number, data in enumerate(f, 1):
                try:
                    words = data.decode("utf-8").split()
                except UnicodeDecodeError as exc:
                    raise InputError(f"invalid UTF-8 at byte {exc.start + 1} of the line ({exc.reason})", path=path,
                                     line=number) from None
                if words:
                    yield number, words
    except CORPUS_READ_ERRORS as exc:
        raise InputError(f"cannot read: {exc}", path=path) from exc


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


class Progress:
    """Progress lines on the package's logger (stderr from the CLI): per epoch through gensim's callbacks, and within
    an epoch at most every `interval` seconds, each with the time left, extrapolated from the lines trained so far."""

    def __init__(self, epochs: int, enabled: bool, interval: float):
        self.epochs, self.enabled, self.interval = epochs, enabled, interval
        self.total_lines = 0  # set once the vocabulary pass has counted them
        self.epoch = 0
        self.start = self.last = time.perf_counter()

    def _log(self, message: str) -> None:
        if self.enabled:
            log.info(message)

    def lines_read(self, lines: int) -> None:
        now = time.perf_counter()
        if now - self.last < self.interval or not self.total_lines or not self.epoch:
            return
        self.last = now
        done = (self.epoch - 1 + min(lines / self.total_lines, 1.0)) / self.epochs
        elapsed = now - self.start
        self._log(f"epoch {self.epoch}/{self.epochs}: {lines / self.total_lines:.0%} of its lines, "
                  f"{_duration(elapsed)} elapsed, about {_duration(elapsed / done - elapsed)} left")

    # gensim.models.callbacks.CallbackAny2Vec's interface: gensim only calls these methods.
    def on_train_begin(self, model) -> None:
        self.start = self.last = time.perf_counter()

    def on_epoch_begin(self, model) -> None:
        self.epoch += 1

    def on_epoch_end(self, model) -> None:
        elapsed = time.perf_counter() - self.start
        left = elapsed / self.epoch * (self.epochs - self.epoch)
        self._log(f"epoch {self.epoch}/{self.epochs} done: {_duration(elapsed)} elapsed"
                  + (f", about {_duration(left)} left" if self.epoch < self.epochs else ""))

    def on_batch_begin(self, model) -> None:
        pass

    def on_batch_end(self, model) -> None:
        pass

    def on_train_end(self, model) -> None:
        pass


def run_training(config: EmbeddingConfig) -> EmbeddingReport:
    check_config(config)
    preprocessing = resolve_preprocessing(config)
    claim_output_dir(config.output_dir, EMBEDDINGS_OUTPUT, inputs=config.inputs, overwrite=config.overwrite)
    import gensim  # a second or two to import: after the checks, so that a wrong flag fails at once
    from gensim.models import FastText, Word2Vec

    output = Path(config.output_dir)
    workers = config.workers or os.cpu_count() or 1
    progress = Progress(config.epochs, config.progress, config.progress_seconds)
    sentences = CorpusSentences([Path(p) for p in config.inputs], progress.lines_read)
    options = dict(vector_size=config.dim, window=config.window, min_count=config.min_count, epochs=config.epochs,
                   sg=int(config.architecture == "skipgram"), workers=workers, seed=config.seed)
    if config.model == "fasttext":
        model = FastText(min_n=config.min_n, max_n=config.max_n, bucket=config.bucket, **options)
    else:
        model = Word2Vec(**options)
    start = time.perf_counter()
    with OutputLock(output, EMBEDDINGS_OUTPUT.verb):
        claim_output_dir(output, EMBEDDINGS_OUTPUT, inputs=config.inputs, overwrite=config.overwrite)
        remove_stale_temporaries(output.parent, f".{output.name}.*.tmp")
        with atomic_directory(output) as tmp:
            progress._log(f"reading the corpus for the vocabulary ({len(config.inputs)} file(s), preprocessing "
                          f"{preprocessing})")
            model.build_vocab(sentences, progress_per=10**12)
            if sentences.error is not None:
                raise sentences.error
            progress.total_lines = sentences.lines
            if not model.wv.index_to_key:
                raise InputError(f"no word occurs min_count={config.min_count} times or more: lower --min-count or "
                                 "train on more text", path=", ".join(config.inputs))
            scanned = time.perf_counter() - start
            progress._log(f"{progress.total_lines:,} lines, {model.corpus_total_words:,} words, "
                          f"{len(model.wv.index_to_key):,} distinct words kept (min_count {config.min_count}) in "
                          f"{_duration(scanned)}; training {config.epochs} epoch(s) of {config.model} "
                          f"{config.architecture}, dim {config.dim}, {workers} worker(s)")
            model.train(sentences, total_examples=model.corpus_count, total_words=model.corpus_total_words,
                        epochs=config.epochs, callbacks=[progress])
            if sentences.error is not None:
                raise sentences.error
            seconds = time.perf_counter() - start
            save_vectors(model.wv, tmp, fasttext=config.model == "fasttext", named=output)
            fields = {key: getattr(config, key) for key in
                      ("model", "architecture", "dim", "window", "min_count", "epochs", "seed")}
            if config.model == "fasttext":
                fields.update(min_n=config.min_n, max_n=config.max_n, bucket=config.bucket)
            write_metadata(
                tmp, task=TASK, preprocessing=preprocessing, **fields, workers=workers,
                corpus=[portable_path(p) for p in config.inputs], corpus_lines=progress.total_lines,
                corpus_words=model.corpus_total_words, vocabulary=len(model.wv.index_to_key),
                train_seconds=round(seconds, 1), gensim=gensim.__version__,
                created_by=f"arabert-pipeline {__version__}",
            )
    return EmbeddingReport(str(output), config.model, config.architecture, preprocessing,
                           len(model.wv.index_to_key), config.dim, progress.total_lines, model.corpus_total_words,
                           seconds)


def save_vectors(wv, directory: Path, *, fasttext: bool, named: Path | None = None) -> None:
    """Write the vectors' files into `directory`; a failed write (a full disk) names the file as it will be called
    in `named`, the output directory `directory` is built for."""
    named = named or directory

    def writing(name: str):
        return naming_io_errors(named / name)

    with writing(VECTORS_FILE):
        save_array(directory / VECTORS_FILE, wv.vectors)
    with writing(WORDS_FILE), open(directory / WORDS_FILE, "w", encoding="utf-8", newline="\n") as f:
        for word in wv.index_to_key:
            f.write(f"{word}\t{wv.get_vecattr(word, 'count')}\n")
    if fasttext:
        with writing(NGRAMS_FILE):
            save_array(directory / NGRAMS_FILE, wv.vectors_ngrams)
    with writing(TEXT_FILE):
        wv.save_word2vec_format(str(directory / TEXT_FILE), binary=False)
    with writing(KV_FILE):  # with its large arrays beside it, saved by np.save (naming_io_errors reads its errors)
        wv.save(str(directory / KV_FILE))


def save_array(path: Path, array) -> None:
    """np.save(path, array as float32) through Python's own writes: numpy writing to a file it holds reports a full
    disk as "N requested and M written", without the errno."""
    import numpy as np

    class Stream:  # not a file object to numpy, so it writes through `write` in blocks
        def __init__(self, f):
            self.write = f.write

    with open(path, "wb") as f:
        np.lib.format.write_array(Stream(f), np.ascontiguousarray(array, dtype=np.float32), allow_pickle=False)

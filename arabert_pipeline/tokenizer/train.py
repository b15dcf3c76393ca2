"""Train a tokenizer on Arabic text: SentencePiece unigram (the AraBERT v0.1/v1 recipe) or WordPiece (v0.2/v2, mBERT).

    train_tokenizer(["corpus.txt.xz"], "runs/tok", model_type="unigram", vocab_size=64000, preprocess="arabertv2")

Inputs are UTF-8 text files (.txt, .txt.gz, .txt.xz), one paragraph per line; blank lines are skipped. An input with
a sidecar `FILE.arabert_pipeline.json` (written by `arabert-pipeline preprocess`) is already preprocessed and is used
as it is, provided its preprocessing is the one asked for; other inputs go through `Preprocessor(preprocess)`.

At most `sample_sentences` lines, drawn uniformly with `seed`, are used: they are chosen before preprocessing (so
Farasa only segments what training reads), written to one temporary file, and the trainer reads that file. The
output directory is built under a temporary name and appears only once complete (see export.py for its contents).
An existing output directory is replaced only if it holds an earlier tokenizer and `overwrite` is set; a run holds
a lock on it (outputs.OutputLock), and the output may not be or contain an input.
"""
from __future__ import annotations

import dataclasses
import os
import random
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from ..artifacts.metadata import SIDECAR_SUFFIX, sidecar_preprocessing
from ..artifacts.reads import CORPUS_READ_ERRORS, decompressed
from ..artifacts.writes import atomic_directory, naming_io_errors
from ..errors import BackendError, ConfigError, InputError
from ..outputs import claim_output_dir
from ..version import __version__
from .export import (
    PLACEHOLDERS,
    SENTENCEPIECE_FILE,
    SPECIAL_TOKENS,
    TOKENIZER_OUTPUT,
    locked_output,
    save_tokenizer,
    segmentation_markers,
)

MODEL_TYPES = ("unigram", "wordpiece")
DEFAULT_PREPROCESSING = "arabertv2"
SCORE_SCALE = 64  # unigram piece scores are rounded to multiples of 1 / SCORE_SCALE (see make_scores_exact)
SP_MIN_SENTENCE_BYTES = 4192  # SentencePiece's default max_sentence_length: raised to the longest line we feed it


@dataclasses.dataclass
class TokenizerConfig:
    """Options of `train_tokenizer`; the fields mirror the flags of `arabert-pipeline train-tokenizer`."""

    inputs: list[str]
    output_dir: str
    model_type: str = "unigram"  # "unigram" (SentencePiece) or "wordpiece" (tokenizers)
    vocab_size: int = 64000
    preprocess: str | None = None  # None: the inputs' sidecars say, else arabertv2
    input_is_preprocessed: bool = False  # inputs without a sidecar are already preprocessed with `preprocess`
    sample_sentences: int = 2_000_000  # lines (paragraphs) drawn from the inputs for training
    threads: int = 0  # 0: all CPU cores
    seed: int = 42
    character_coverage: float = 0.9999  # unigram: rarer characters become [UNK]
    min_frequency: int = 2  # wordpiece: merges seen fewer times are not learned
    progress: bool = True
    overwrite: bool = False  # replace an earlier tokenizer directory at output_dir


@dataclasses.dataclass
class TrainReport:
    output_dir: str
    model_type: str
    preprocessing: str
    vocab_size: int
    lines_available: int
    lines_used: int
    preprocess_seconds: float
    train_seconds: float

    def summary(self) -> str:
        return (
            f"{self.output_dir}: {self.model_type} tokenizer, {self.vocab_size:,} tokens, preprocessing "
            f"{self.preprocessing}; trained on {self.lines_used:,} of {self.lines_available:,} lines "
            f"(sampling/preprocessing {self.preprocess_seconds:,.1f} s, training {self.train_seconds:,.1f} s)"
        )


def train_tokenizer(inputs: list[str | os.PathLike], output_dir: str | os.PathLike, **options) -> TrainReport:
    """Train a tokenizer on `inputs` into `output_dir`; `options` are the other `TokenizerConfig` fields."""
    return run_training(TokenizerConfig(inputs=[str(p) for p in inputs], output_dir=str(output_dir), **options))


def run_training(config: TokenizerConfig) -> TrainReport:
    _check_config(config)
    sources, preprocessing = resolve_inputs(config)
    claim_output_dir(config.output_dir, TOKENIZER_OUTPUT, inputs=config.inputs, overwrite=config.overwrite)
    threads = config.threads or os.cpu_count() or 1
    start = time.perf_counter()
    with locked_output(config.output_dir, config.inputs, config.overwrite), \
            atomic_directory(config.output_dir) as tmp:
        sample = tmp / "training-lines.txt"
        available, used, longest = write_training_sample(sources, preprocessing, sample, config)
        prepared = time.perf_counter()
        if config.model_type == "unigram":
            backend = train_unigram(sample, tmp / SENTENCEPIECE_FILE, config, preprocessing, threads, longest)
        else:
            backend = train_wordpiece(sample, config, preprocessing, threads)
        trained = time.perf_counter()
        sample.unlink()
        vocab_size = backend.get_vocab_size()
        save_tokenizer(
            backend, tmp, preprocessing=preprocessing, model_type=config.model_type, vocab_size=vocab_size,
            inputs=[str(path) for path, _ in sources], lines_available=available, lines_used=used,
            sample_sentences=config.sample_sentences, seed=config.seed,
            **({"character_coverage": config.character_coverage, "sentencepiece_model": SENTENCEPIECE_FILE}
               if config.model_type == "unigram" else {"min_frequency": config.min_frequency}),
            created_by=f"arabert-pipeline {__version__}",
        )
    return TrainReport(config.output_dir, config.model_type, preprocessing, vocab_size, available, used,
                       prepared - start, trained - prepared)


MAX_VOCAB_SIZE = 2**31 - 1  # token ids are int32 in SentencePiece and in the models' embeddings
MAX_THREADS = 1024


def _check_config(config: TokenizerConfig) -> None:
    if config.model_type not in MODEL_TYPES:
        raise ConfigError(f"model_type must be one of {', '.join(MODEL_TYPES)}, not {config.model_type!r}")
    reserved = len(SPECIAL_TOKENS) + len(PLACEHOLDERS)
    if config.vocab_size <= reserved:
        raise ConfigError(f"vocab_size {config.vocab_size} leaves no room beside the {reserved} special tokens")
    # The trainers' own limits, refused here before the sample is prepared rather than by a library traceback after.
    if config.vocab_size > MAX_VOCAB_SIZE:
        raise ConfigError(f"vocab_size {config.vocab_size:,} is more than the {MAX_VOCAB_SIZE:,} a tokenizer may have")
    if not 0 <= config.seed < 2**32:
        raise ConfigError(f"seed must be between 0 and {2**32 - 1}, not {config.seed}")
    if config.min_frequency < 1:  # the trainer takes 0 or -1 without a word, as if it were 1
        raise ConfigError(f"min_frequency must be at least 1, not {config.min_frequency}")
    if config.threads > MAX_THREADS:
        raise ConfigError(f"threads must be at most {MAX_THREADS} (SentencePiece's limit), not {config.threads}")
    if config.sample_sentences < 1:
        raise ConfigError(f"sample_sentences must be positive, not {config.sample_sentences}")
    if config.threads < 0:
        raise ConfigError(f"threads must be 0 (all cores) or positive, not {config.threads}")
    if not 0.9 <= config.character_coverage <= 1.0:
        raise ConfigError(f"character_coverage must be in [0.9, 1], not {config.character_coverage}")
    if not config.inputs:
        raise ConfigError("no input files given")


def read_recipe(path: str | os.PathLike) -> dict:
    """A tokenizer recipe (TOML): `TokenizerConfig` fields plus an optional `description`.

    Relative `inputs` are glob patterns under the data root (`$ARABERT_PIPELINE_DATA`, e.g. `corpus/*.txt.xz`),
    so one recipe serves every machine; a relative `output_dir` is relative to the working directory.
    """
    import glob

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # tomllib is tomli, taken into the standard library in 3.11
        import tomli as tomllib

    from ..artifacts.paths import data_root

    path = Path(path)
    try:
        recipe = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read the recipe: {exc}", path=path) from exc
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"invalid TOML ({exc})", path=path) from None
    recipe.pop("description", None)
    known = {f.name for f in dataclasses.fields(TokenizerConfig)}
    for key in recipe:
        if key not in known:
            raise InputError(f"unknown key; expected one of description, {', '.join(sorted(known))}", path=path,
                             field=key)
    patterns = recipe.get("inputs", [])
    if not isinstance(patterns, list):
        raise InputError("must be a list of file patterns", path=path, field="inputs")
    inputs = []
    for pattern in patterns:
        full = pattern if os.path.isabs(pattern) else str(data_root() / pattern)
        matches = sorted(glob.glob(full))
        if not matches:
            raise InputError(f"no file matches {full}", path=path, field="inputs")
        inputs += matches
    if patterns:
        recipe["inputs"] = inputs
    return recipe


# ---------------------------------------------------------------------------------------------------------------
# Inputs


def resolve_inputs(config: TokenizerConfig) -> tuple[list[tuple[Path, bool]], str]:
    """([(path, already preprocessed)], preprocessing name), refusing inputs preprocessed some other way."""
    paths = [Path(p) for p in config.inputs]
    for path in paths:
        if not path.is_file():
            raise InputError("no such file" if not path.exists() else "not a regular file", path=path)
    recorded = {path: sidecar_preprocessing(path) for path in paths}
    names = {name for name in recorded.values() if name is not None}
    preprocessing = config.preprocess
    if preprocessing is None:
        if len(names) > 1:
            raise ConfigError(f"the inputs were preprocessed differently ({', '.join(sorted(names))}); "
                              "train on inputs of one preprocessing")
        if config.input_is_preprocessed and not names:
            raise ConfigError("input_is_preprocessed needs the preprocessing name (--preprocessing), since the inputs "
                              f"have no {SIDECAR_SUFFIX} sidecar to say it")
        preprocessing = names.pop() if names else DEFAULT_PREPROCESSING
    from ..preprocess import PREPROCESSING_NAMES

    if preprocessing not in PREPROCESSING_NAMES:
        raise ConfigError(f"unknown preprocessing {preprocessing!r}; choose one of {', '.join(PREPROCESSING_NAMES)}")
    for path, name in recorded.items():
        if name is not None and name != preprocessing:
            raise ConfigError(f"{path} was preprocessed with {name!r} (per its sidecar), but this tokenizer is for "
                              f"{preprocessing!r}; preprocess the raw text with {preprocessing!r} or train for "
                              f"{name!r}")
    sources = [(path, recorded[path] is not None or config.input_is_preprocessed) for path in paths]
    return sources, preprocessing


def _nonblank_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, line without its ending) for each non-blank line; unreadable files raise InputError."""
    try:
        with open(path, "rb") as raw, decompressed(path, raw) as f:
            for number, data in enumerate(f, 1):
                data = data.rstrip(b"\r\n")
                if data.strip():
                    yield number, data
    except CORPUS_READ_ERRORS as exc:
        raise InputError(f"cannot read: {exc}", path=path) from exc


def write_training_sample(sources: list[tuple[Path, bool]], preprocessing: str, out: Path,
                          config: TokenizerConfig) -> tuple[int, int, int]:
    """Write the (preprocessed) training lines to `out`: (lines available, lines written, longest line in bytes)."""
    counts = [sum(1 for _ in _nonblank_lines(path)) for path, _ in sources]
    available = sum(counts)
    if available == 0:
        names = ", ".join(str(path) for path, _ in sources)
        raise InputError(f"no text to train on: {names} contain(s) only blank lines")
    take = min(available, config.sample_sentences)
    # A bitmap over line indices keeps the draw uniform and the memory at one byte per line, whatever the corpus.
    chosen = bytearray(available) if take < available else bytearray(b"\x01") * available
    if take < available:
        for index in random.Random(config.seed).sample(range(available), take):
            chosen[index] = 1

    preprocessor = None
    if any(not done for _, done in sources):
        from ..preprocess import Preprocessor

        preprocessor = Preprocessor(preprocessing)
    bar = _progress(take, config.progress, f"preparing lines ({preprocessing})")
    written, longest, index = 0, 0, 0
    with naming_io_errors(out), open(out, "w", encoding="utf-8") as f:
        for path, done in sources:
            batch: list[str] = []
            for number, data in _nonblank_lines(path):
                index += 1
                if not chosen[index - 1]:
                    continue
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InputError(f"invalid UTF-8 at byte {exc.start + 1} of the line ({exc.reason})",
                                     path=path, line=number) from None
                batch.append(text)
                if len(batch) == 1000:
                    w, n = _write_batch(f, batch, None if done else preprocessor)
                    written, longest = written + w, max(longest, n)
                    bar.update(len(batch))
                    batch = []
            w, n = _write_batch(f, batch, None if done else preprocessor)
            written, longest = written + w, max(longest, n)
            bar.update(len(batch))
    bar.close()
    if written == 0:
        raise InputError(f"no text left after preprocessing with {preprocessing!r}",
                         path=", ".join(str(path) for path, _ in sources))
    return available, written, longest


def _write_batch(f, lines: list[str], preprocessor) -> tuple[int, int]:
    if preprocessor is not None:
        lines = preprocessor.preprocess_batch(lines)
    written, longest = 0, 0
    for line in lines:
        line = " ".join(line.split())  # a line must stay one line; SentencePiece sees single spaces only
        if line:
            f.write(line + "\n")
            written += 1
            longest = max(longest, len(line.encode("utf-8")))
    return written, longest


def _progress(total: int, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, desc=desc, unit=" lines", file=sys.stderr)


# ---------------------------------------------------------------------------------------------------------------
# Trainers


def _markers(preprocessing: str) -> list[str]:
    """The segmentation markers text of this preprocessing contains (none unless it segments)."""
    from ..preprocess.preprocessor import SEGMENTED_NAMES

    return segmentation_markers() if preprocessing in SEGMENTED_NAMES else []


def train_unigram(sample: Path, model_file: Path, config: TokenizerConfig, preprocessing: str, threads: int,
                  longest: int):
    """SentencePiece unigram on the sample; returns the equivalent `tokenizers.Tokenizer` (model kept in model_file)."""
    import sentencepiece as spm

    from .export import unigram_backend

    # Left to itself, unigram learns `▁ال` and `+` rather than `▁ال+` (`+` is so frequent that splitting it off is
    # cheap), which is arabert issue #151 all over again. As user-defined pieces the markers are always whole, and
    # training treats them as boundaries.
    user_symbols = PLACEHOLDERS + ["▁" + marker for marker in _markers(preprocessing)]
    spm.set_random_generator_seed(config.seed)
    stem = model_file.with_suffix("")
    try:
        spm.SentencePieceTrainer.train(
            input=str(sample), model_prefix=str(stem), model_type="unigram", vocab_size=config.vocab_size,
            character_coverage=config.character_coverage, num_threads=threads,
            input_sentence_size=0,  # the sample is already drawn (seeded, before preprocessing)
            max_sentence_length=max(SP_MIN_SENTENCE_BYTES, longest + 1),
            pad_id=0, pad_piece="[PAD]", unk_id=1, unk_piece="[UNK]", bos_id=-1, eos_id=-1,
            control_symbols=SPECIAL_TOKENS[2:], user_defined_symbols=user_symbols,
            normalization_rule_name="identity",  # the Preprocessor normalizes; the tokenizer must not alter text
            minloglevel=0 if config.progress else 2,
        )
    except RuntimeError as exc:
        raise _explain_sentencepiece_error(exc, config) from None
    finally:
        Path(str(stem) + ".vocab").unlink(missing_ok=True)
    os.replace(str(stem) + ".model", model_file)
    make_scores_exact(model_file)
    return unigram_backend(model_file)


def make_scores_exact(model_file: Path) -> None:
    """Round the model's piece scores to multiples of 1/64 and turn user-defined pieces into normal ones scoring 0.

    SentencePiece's Viterbi adds float32 scores, tokenizers' adds float64 ones, so on a near tie they can take
    different paths (about one line in 2,000 at 60k pieces). Multiples of 1/64 add exactly in both (for path
    scores above -2**18, i.e. lines of tens of thousands of pieces), so both take the same path, ties included.
    SentencePiece scores user-defined pieces -0.1 at encoding time, which is not exact; as normal pieces scoring 0
    they still always win, since every other piece scores below 0.
    """
    from sentencepiece import sentencepiece_model_pb2 as model_pb2  # needs protobuf

    proto = model_pb2.ModelProto()  # type: ignore[attr-defined]  # a generated module: classes made at import
    proto.ParseFromString(model_file.read_bytes())
    for piece in proto.pieces:
        if piece.type == piece.USER_DEFINED:
            piece.type, piece.score = piece.NORMAL, 0.0
        elif piece.type == piece.NORMAL:
            piece.score = round(piece.score * SCORE_SCALE) / SCORE_SCALE
    model_file.write_bytes(proto.SerializeToString())


def _explain_sentencepiece_error(exc: RuntimeError, config: TokenizerConfig) -> Exception:
    message = str(exc)
    match = re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", message)
    if match:
        return ConfigError(
            f"vocab_size {config.vocab_size:,} is more than this corpus supports: SentencePiece finds at most "
            f"{int(match.group(2)):,} distinct pieces in the training lines. Lower --vocab-size or train on more text."
        )
    match = re.search(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)", message)
    if match:
        return ConfigError(
            f"vocab_size {config.vocab_size:,} cannot even hold the {int(match.group(2)):,} distinct characters (and "
            "special tokens) of the corpus; raise --vocab-size or lower --character-coverage"
        )
    return BackendError(f"SentencePiece training failed: {message}")


def train_wordpiece(sample: Path, config: TokenizerConfig, preprocessing: str, threads: int):
    """WordPiece on the sample with `tokenizers`, pre-tokenized as the exported tokenizer will be."""
    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))  # read when the pool starts: first use in the process
    from tokenizers import trainers

    from .export import wordpiece_backend

    # Train with the exact normalizer and pre-tokenizer of the exported tokenizer, so words match at use time.
    backend = wordpiece_backend(SPECIAL_TOKENS, preprocessing)
    # Rare markers (`+كن`) would otherwise become `+` `##كن` in a small vocabulary: reserved up front, as in the
    # AraBERTv2 vocabulary, which starts with them.
    trainer = trainers.WordPieceTrainer(
        vocab_size=config.vocab_size, min_frequency=config.min_frequency, show_progress=config.progress,
        special_tokens=SPECIAL_TOKENS + PLACEHOLDERS + _markers(preprocessing), limit_alphabet=1000,
        continuing_subword_prefix="##",
    )
    backend.train([str(sample)], trainer)
    vocab = [token for token, _ in sorted(backend.get_vocab(with_added_tokens=True).items(), key=lambda x: x[1])]
    if len(vocab) < config.vocab_size:
        raise ConfigError(
            f"vocab_size {config.vocab_size:,} is more than this corpus supports: WordPiece learned only "
            f"{len(vocab):,} tokens (with min_frequency {config.min_frequency}). Lower --vocab-size or train on more "
            "text."
        )
    # Rebuilt from the vocabulary so that placeholders and markers end up as ordinary (non-special) tokens.
    return wordpiece_backend(vocab, preprocessing)

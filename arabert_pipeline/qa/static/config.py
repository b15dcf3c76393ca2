"""What `arabert-pipeline train-reader` is told (`ReaderConfig`, a field per flag, its default the flag's) and the
files it writes. Imports nothing heavy: the CLI reads its defaults from here."""
from __future__ import annotations

import dataclasses

from ...errors import ConfigError

TASK = "static-reader"
WEIGHTS_FILE, CONFIG_FILE = "reader.safetensors", "reader_config.json"
# The largest sizes train-reader writes and a load accepts: DrQA's reader is 3 layers of 128 reading spans of 15 words;
# past these a number is a damaged file or a typo (10^6 layers would fill the memory before anything could refuse it).
SIZE_LIMITS = {"hidden": 4096, "layers": 32, "max_span_words": 1000}


@dataclasses.dataclass
class ReaderConfig:
    """Options of `train_reader`; the fields mirror the flags of `arabert-pipeline train-reader`."""

    embeddings: str  # a train-embeddings output directory: the vectors, and the preprocessing of their corpus
    train: list[str]  # SQuAD files or registry names
    dev: list[str]  # scored after every epoch; the epoch kept is the best on them (qa/metrics.py DEV_METRIC)
    output_dir: str
    # Sets the reader is later scored on: never read here except to drop the training questions that leak into them
    # (finetune --drop-leaking-train's guard, always on for these and for the dev sets: a row must not see its test).
    hold_out: list[str] = dataclasses.field(default_factory=list)
    hidden: int = 128  # LSTM size per direction
    layers: int = 3  # stacked BiLSTM layers (their outputs concatenated, as DrQA's)
    dropout: float = 0.3
    epochs: int = 20
    batch_size: int = 32
    lr: float = 2e-3  # Adamax, DrQA's optimiser and rate, constant
    tune_top_k: int = 1000  # the vectors of the K most frequent training-question words fine-tuned; 0: all frozen
    max_span_words: int = 15  # the longest answer, in words
    seed: int = 42
    # A train-reader output over the same vectors whose weights (and fine-tuned question words) this one starts from:
    # a reader first trained on make-synthetic-qa's questions, then on the real sets (Dhingra et al. 2018's recipe).
    init_from: str | None = None
    overwrite: bool = False
    progress: bool = True


def check_config(config: ReaderConfig) -> None:
    for name, high in SIZE_LIMITS.items():
        value = getattr(config, name)
        if type(value) is not int or not 1 <= value <= high:
            raise ConfigError(f"{name} must be an integer between 1 and {high:,}, not {value!r}")
    for name in ("epochs", "batch_size"):
        value = getattr(config, name)
        if type(value) is not int or value < 1:
            raise ConfigError(f"{name} must be a positive integer, not {value!r}")
    if type(config.tune_top_k) is not int or config.tune_top_k < 0:
        raise ConfigError(f"tune_top_k must be a non-negative integer, not {config.tune_top_k!r}")
    if not 0 <= config.dropout < 1:
        raise ConfigError(f"dropout must be in [0, 1), not {config.dropout!r}")
    if not config.lr > 0:
        raise ConfigError(f"lr must be positive, not {config.lr!r}")
    if not config.train:
        raise ConfigError("no training set: give --train")
    if not config.dev:
        raise ConfigError("no dev set: the epoch kept is the one with the best dev score; give --dev")

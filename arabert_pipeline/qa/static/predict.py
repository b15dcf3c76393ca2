"""A trained static reader answering questions (DrQA's `model.py` and `predictor.py`):

    StaticReader.load("runs/rd").predict(examples)   # {id: {"text", "start"}}: what `evaluate --predictions` reads

A predicted word span goes back to an exact span of the original context through QAPreprocessing's offset map. The
output directory of train-reader (train.py) that `load` reads and checks:

    reader.safetensors     the weights, without the frozen vectors (read again from the embeddings directory, whose
                           words.txt and vectors checksums are recorded as they were read at the start of training,
                           so a changed directory is refused rather than misread)
    reader_config.json     the architecture, the vocabulary source and the fine-tuned words (checked field by field
                           at load: read_reader_config)
    arabert_pipeline.json  task "static-reader", preprocessing, per-epoch dev scores and the epoch kept
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ...artifacts.metadata import read_metadata
from ...artifacts.reads import read_json_file
from ...artifacts.writes import atomic_write
from ...errors import ConfigError
from ..align import QAPreprocessing
from .config import CONFIG_FILE, SIZE_LIMITS, TASK, WEIGHTS_FILE
from .features import Encoded, Vocabulary, batch, encode_examples

log = logging.getLogger(__name__)
_SHA256 = re.compile(r"[0-9a-f]{64}")


def answer(model, encoded: list[Encoded], max_span_words: int, batch_size: int = 64) -> dict[str, dict]:
    """{id: {"text", "start"}} of the encoded questions: the best span of each, in the original context."""
    import torch

    from .model import best_spans

    model.eval()
    answers = {}
    with torch.no_grad():
        for first in range(0, len(encoded), batch_size):
            items = encoded[first: first + batch_size]
            start, end = model(*batch(items))
            spans = best_spans(start, end, max_span_words)
            for e, (a, b) in zip(items, spans, strict=True):
                lo, hi = e.aligned.to_original_many(e.word_spans[[a], 0], e.word_spans[[b], 1])
                lo, hi = int(lo[0]), int(hi[0])
                answers[e.id] = {"text": e.context[lo:hi], "start": lo}
    return answers


def read_reader_config(path: Path) -> dict[str, Any]:
    """reader_config.json, checked field by field (each wrong field a one-line error naming the file and field); the
    fields that need the embeddings (dim, tuned_words, the checksums' match) are checked by StaticReader.load."""
    config = read_json_file(path)

    def field(name: str) -> Any:
        if name not in config:
            raise ConfigError(f"{path}: {name} is missing")
        return config[name]

    for name, high in (*SIZE_LIMITS.items(), ("dim", 2**31), ("embeddings_words", 2**31)):
        value = field(name)
        if type(value) is not int or not 1 <= value <= high:
            raise ConfigError(f"{path}: {name} must be an integer between 1 and {high:,}, not {value!r}")
    dropout = field("dropout")
    if type(dropout) not in (int, float) or not (math.isfinite(dropout) and 0 <= dropout < 1):
        raise ConfigError(f"{path}: dropout must be a number in [0, 1), not {dropout!r}")
    if not isinstance(field("embeddings"), str) or not config["embeddings"]:
        raise ConfigError(f"{path}: embeddings must be a path, not {config['embeddings']!r}")
    # embeddings_vectors_sha256 is absent from readers written before it was recorded: their vectors go unchecked.
    for name in ("embeddings_words_sha256", "embeddings_vectors_sha256"):
        value = field(name) if name == "embeddings_words_sha256" else config.get(name)
        if value is not None and (not isinstance(value, str) or not _SHA256.fullmatch(value)):
            raise ConfigError(f"{path}: {name} must be a SHA-256 hex digest, not {value!r}")
    tuned = field("tuned_words")
    if not isinstance(tuned, list) or not all(isinstance(w, str) for w in tuned):
        raise ConfigError(f"{path}: tuned_words must be a list of words, not {tuned!r}"[:300])
    if len(set(tuned)) != len(tuned):
        raise ConfigError(f"{path}: tuned_words lists a word twice")
    return config


class StaticReader:
    """A trained reader with its embeddings and preprocessing."""

    def __init__(self, model, preprocessing: str, vocabulary: Vocabulary, max_span_words: int, *,
                 embeddings: Path | None = None, embeddings_words_sha256: str | None = None):
        self.model, self.vocabulary = model, vocabulary
        self.preprocessing = preprocessing  # its name: the embeddings' corpus was preprocessed with it
        self.preprocessor = QAPreprocessing(preprocessing)
        self.max_span_words = max_span_words
        # The embeddings directory read and the checksum of its words.txt, which the reader was trained on.
        self.embeddings, self.embeddings_words_sha256 = embeddings, embeddings_words_sha256

    @classmethod
    def load(cls, directory: str | os.PathLike, embeddings: str | os.PathLike | None = None) -> StaticReader:
        """`embeddings`: the vectors' directory when it moved since training (its words.txt must be the same)."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        from ...embeddings import Embeddings
        from .model import Reader

        directory = Path(directory)
        metadata = read_metadata(directory)
        if metadata.get("task") != TASK:
            raise ConfigError(f"{directory}: not written by `arabert-pipeline train-reader` (task is "
                              f"{metadata.get('task')!r})")
        config = read_reader_config(directory / CONFIG_FILE)
        source = Path(embeddings if embeddings is not None else config["embeddings"])
        vectors = Embeddings.load(source)
        recorded_vectors = config.get("embeddings_vectors_sha256")
        if vectors.words_sha256 != config["embeddings_words_sha256"] or (
                recorded_vectors is not None and vectors.vectors_sha256() != recorded_vectors):
            raise ConfigError(f"{source} is not the embeddings directory {directory} was trained on (its words.txt "
                              "or vectors differ); pass the one it was trained on")
        if vectors.dim != config["dim"]:
            raise ConfigError(f"{directory / CONFIG_FILE}: dim is {config['dim']} but {source} has {vectors.dim}-"
                              "dimensional vectors")
        missing = next((w for w in config["tuned_words"] if w not in vectors.index), None)
        if missing is not None:
            raise ConfigError(f"{directory / CONFIG_FILE}: tuned_words: {missing!r} is not a word of {source}")
        tuned_rows = np.asarray([vectors.index[w] + 2 for w in config["tuned_words"]], dtype=np.int64)
        model = Reader(vectors.vectors, tuned_rows, config["hidden"], config["layers"], config["dropout"])
        try:
            state = load_file(str(directory / WEIGHTS_FILE))
        except (SafetensorError, OSError) as exc:
            raise ConfigError(f"{directory / WEIGHTS_FILE}: unreadable weights ({exc})") from None
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:
            raise ConfigError(f"{directory / WEIGHTS_FILE} does not fit {CONFIG_FILE} ({exc})") from None
        return cls(model, vectors.preprocessing, Vocabulary(vectors.words), config["max_span_words"],
                   embeddings=source, embeddings_words_sha256=vectors.words_sha256)

    def predict(self, examples: list[dict]) -> dict[str, dict]:
        """{id: {"text", "start"}}: `text` is exactly `context[start:start + len(text)]`."""
        encoded, _ = encode_examples(examples, self.preprocessor, self.vocabulary)
        return answer(self.model, encoded, self.max_span_words)


def predict_file(directory: str, data: list[str], output: str, *, embeddings: str | None = None,
                 overwrite: bool = False) -> int:
    from ...outputs import claim_output_file
    from ..data import read_squad, resolve

    # Names resolved too: `--data xquad-ar -o $DATA/qa/xquad.ar.json --overwrite` must not replace the data it reads.
    claim_output_file(output, verb="reader-predict", inputs=[directory, *[resolve(d) for d in data]],
                      overwrite=overwrite)
    reader = StaticReader.load(directory, embeddings)
    answers = {}
    for source in data:
        squad = read_squad(source, misaligned="keep")
        if squad.misaligned:
            log.warning(squad.describe_misaligned())
        examples = squad.examples
        answers.update(reader.predict(examples))
        log.info("%s: %d questions answered", source, len(examples))
    with atomic_write(output) as f:
        json.dump(answers, f, ensure_ascii=False, indent=1)
        f.write("\n")
    return len(answers)

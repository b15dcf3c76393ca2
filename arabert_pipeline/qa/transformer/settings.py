"""The settings contract of a transformer QA model: how windows are built and spans decoded (`QASettings`), stored in
its arabert_pipeline.json, each setting checked against one range wherever it comes from (a model dir, a flag of
`finetune` or `tune-decoding`, a `Pipeline` argument).

Imports nothing heavy: the CLIs read their defaults from these dataclasses.
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from ...artifacts.metadata import METADATA_FILE
from ...errors import ConfigError

if TYPE_CHECKING:
    from .calibration import Calibration

DECODINGS = ("max-score", "expected-f1")
# Bounds of the stored settings: larger values are damaged files, not choices.
MAX_WINDOW_TOKENS = 8192
MAX_N_BEST = 1000
MAX_PASSAGES_READ = 100
# Logit-scale numbers: a QA model's logits are tens at most, so anything past this bound is a damaged file (an
# infinite or huge prior turns scores into NaN; a NaN threshold never abstains).
MAX_LOGIT_SETTING = 1000.0
MAX_LEADING_WORDS = 100
# The range of each numeric decoding setting (closed, finite).
DECODING_RANGES = {
    "sentence_prior": (0.0, MAX_LOGIT_SETTING),
    "reader_weight": (0.0, MAX_LOGIT_SETTING),
    "null_score_diff_threshold": (-MAX_LOGIT_SETTING, MAX_LOGIT_SETTING),
    "expected_f1_temperature": (0.01, 100.0),
    "passage_null_weight": (0.0, 100.0),
    "index_null_threshold": (-MAX_LOGIT_SETTING, MAX_LOGIT_SETTING),
}
# The settings tune-decoding and finetune choose on dev, and the plain decoder's values of them (Hugging Face's).
DECODING_FIELDS = ("sentence_prior", "within_sentence", "decoding", "expected_f1_temperature", "reader_weight")
PLAIN_DECODING: dict[str, Any] = {"sentence_prior": 0.0, "within_sentence": False, "decoding": "max-score",
                  "expected_f1_temperature": 1.0, "reader_weight": 0.0}


def check_decoding_setting(name: str, value: Any, source: object = None) -> None:
    """One decoding setting in its range (DECODING_RANGES), or `decoding` one of DECODINGS; the error names `source`
    (a file, or None for an argument) and the setting."""
    where = f"{source}: " if source is not None else ""
    if name == "decoding":
        if value not in DECODINGS:
            raise ConfigError(f"{where}decoding must be one of {', '.join(DECODINGS)}, got {value!r}")
        return
    if name == "leading_words":
        from ..overlap import normalize_word

        if not (isinstance(value, (tuple, list)) and len(value) <= MAX_LEADING_WORDS
                and all(isinstance(word, str) and word and word == normalize_word(word) and " " not in word
                        for word in value)):
            raise ConfigError(f"{where}leading_words must be a list of at most {MAX_LEADING_WORDS} single words, "
                              f"each normalized (diacritics removed, alef forms as ا, ى as ي, ة as ه), got {value!r}")
        return
    low, high = DECODING_RANGES[name]
    if not (isinstance(value, (int, float)) and math.isfinite(value) and low <= value <= high):
        raise ConfigError(f"{where}{name} must be a finite number between {low:g} and {high:g}, got {value}")


@dataclasses.dataclass(frozen=True)
class QASettings:
    """How windows are built and spans decoded; stored in a QA model's arabert_pipeline.json."""

    max_seq_length: int = 384  # tokens per window, question and special tokens included
    doc_stride: int = 128  # tokens shared by consecutive windows of one context
    max_question_tokens: int = 64  # a longer question is cut (so that every window keeps room for context)
    max_answer_tokens: int = 30  # the longest span decoded
    n_best: int = 20  # start and end tokens weighed per window
    question_overlap: bool = False  # context words shared with the question get token type 2 (features.py)
    sentence_prior: float = 0.0  # weight of the prior on the sentence sharing the question's words (bonuses.py)
    within_sentence: bool = False  # answers never cross a sentence boundary
    decoding: str = "max-score"  # or "expected-f1": the candidate of highest expected F1 (decode.py)
    # expected-f1: the candidates' distribution is softmax(score / temperature); below 1, shorter, surer answers.
    expected_f1_temperature: float = 1.0
    null_score_diff_threshold: float = 0.0  # predict(allow_no_answer=True) abstains above it (chosen on dev)
    # The weight of the model's DrQA reader (companion.py, in MODEL_DIR/reader/) in span scores: a span scores its
    # start + end logit + reader_weight × (log p_reader(start word) + log p_reader(end word)). 0: no reader.
    reader_weight: float = 0.0
    # Words an answer never starts with (normalized as overlap.normalize_word does): a first word among them is
    # dropped when another follows ("عام 1889" → "1889"; decode.drop_leading_word). Chosen on dev (tune.py).
    leading_words: tuple[str, ...] = ()
    # Maps the decoder's probability or expected F1 to the dev rate of right answers (calibration.py); None: the
    # softmax as it is.
    calibration: Calibration | None = None
    # Long contexts (passages.py): a context of more windows than this is not read whole but split into passages of
    # at most passage_chars characters, ranked by BM25, and its best passages_read passages read; one answer chosen by
    # z(BM25) + passage_null_weight × z(-null margin) over them. Chosen on dev with the shipped model
    # (docs/experiments/documents.md); 2 keeps the answers of one- and two-window contexts as they were.
    long_context_windows: int = 2
    passage_chars: int = 600
    passages_read: int = 3
    passage_null_weight: float = 1.5
    # Pipeline.answer(question, index=..., allow_no_answer=True) answers nothing where the chosen passage's null margin
    # is above this (chosen on dev: questions asked of a collection without their article, passages.py).
    index_null_threshold: float = 0.0

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any], source: object = METADATA_FILE,
                      max_positions: int | None = None) -> QASettings:
        """The stored settings, each checked: a wrong type or a value that cannot work names the field."""
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            if field.name not in metadata or field.name == "calibration":
                continue
            value, kind = metadata[field.name], type(field.default)
            if kind is tuple and isinstance(value, list):  # JSON has no tuples
                value = tuple(value)
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value) if abs(value) < 2**63 else math.inf
            if type(value) is not kind:
                raise ConfigError(f"{source}: {field.name} must be a {kind.__name__}, not {value!r}")
            values[field.name] = value
        if "max_seq_length" not in values and max_positions is not None:  # a model without our settings
            values["max_seq_length"] = min(cls.max_seq_length, max_positions)
        if metadata.get("calibration") is not None:
            from .calibration import Calibration

            values["calibration"] = Calibration.from_json(metadata["calibration"], source)
        settings = cls(**values)
        settings.check(source, max_positions)
        return settings

    def check(self, source: object = "settings", max_positions: int | None = None) -> None:
        """Every field in a range that works; `max_positions` (the model's position embeddings) bounds the window."""
        for name, high in (("max_seq_length", MAX_WINDOW_TOKENS), ("doc_stride", MAX_WINDOW_TOKENS),
                           ("max_question_tokens", MAX_WINDOW_TOKENS), ("max_answer_tokens", MAX_WINDOW_TOKENS),
                           ("n_best", MAX_N_BEST), ("long_context_windows", MAX_WINDOW_TOKENS),
                           ("passages_read", MAX_PASSAGES_READ)):
            value = getattr(self, name)
            if not 1 <= value <= high:
                raise ConfigError(f"{source}: {name} must be between 1 and {high:,}, got {value}")
        if max_positions is not None and self.max_seq_length > max_positions:
            raise ConfigError(f"{source}: max_seq_length {self.max_seq_length} exceeds the model's "
                              f"{max_positions} positions (max_position_embeddings in config.json)")
        if self.doc_stride >= self.max_seq_length:
            raise ConfigError(f"{source}: doc_stride ({self.doc_stride}) must be below max_seq_length "
                              f"({self.max_seq_length})")
        for name in ("sentence_prior", "reader_weight", "null_score_diff_threshold", "decoding",
                     "expected_f1_temperature", "passage_null_weight", "index_null_threshold"):
            check_decoding_setting(name, getattr(self, name), source)
        from ...retrieval.passages import MAX_PASSAGE_CHARS, MIN_PASSAGE_CHARS

        if not MIN_PASSAGE_CHARS <= self.passage_chars <= MAX_PASSAGE_CHARS:
            raise ConfigError(f"{source}: passage_chars must be between {MIN_PASSAGE_CHARS} and "
                              f"{MAX_PASSAGE_CHARS:,}, got {self.passage_chars}")
        check_decoding_setting("leading_words", self.leading_words, source)

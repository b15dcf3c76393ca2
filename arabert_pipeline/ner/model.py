"""A fine-tuned tagger with its preprocessing, and its two backends.

    tagger = TokenTagger.load("runs/ner")            # torch + transformers
    tagger = OnnxTokenTagger.load("runs/ner")        # ONNX Runtime + tokenizers, no torch (model.onnx)
    tagger.tag_words([["زار", "ماكرون", "بيروت"]])   # [(["O", "B-PERS", "B-LOC"], [0.99, 0.97, 0.98])]
    tagger.entities("زار ماكرون بيروت.")              # [Entity("PERS", 4, 10, 0.97, "ماكرون"), Entity("LOC", ...)]

Words are mapped to tokens through the preprocessing's offsets (align.py): a word's tag is the argmax of its first
token's logits and its score that tag's probability. Entities are read from the word tags as seqeval reads them
(metrics.entities) and returned as character spans of the original text: `text[start:end]` runs from the entity's
first word to its last, whatever the preprocessing changed in between (diacritics, tatweel, Farasa's segments).
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..artifacts.models import model_config
from ..errors import ConfigError
from ..finetuning.batches import pad, prediction_batches
from ..finetuning.modeldir import (
    check_head_size,
    head_labels,
    model_metadata,
    recorded_preprocessing,
    task_max_seq_length,
)
from ..finetuning.runtime import head_outputs, open_task_model, run_task_session
from ..finetuning.taskexport import OUTPUT_NAMES, TOKEN_CLASSIFICATION
from .align import EncodedSentence, WordEncoder, joined, word_spans
from .data import split_tag
from .metrics import entities as tag_entities

TASK = TOKEN_CLASSIFICATION
TOKENS_PER_RUN = 4096


@dataclasses.dataclass
class Entity:
    type: str
    start: int  # in the original text
    end: int
    score: float  # the mean of its words' tag probabilities
    text: str


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def read_tags(metadata: dict, config: dict, source: object) -> list[str]:
    """The tag names in the head's order (finetuning/modeldir.py's head_labels), O among them."""
    labels = head_labels(metadata, config, source, "tag")
    field = "arabert_pipeline.json 'labels'" if metadata.get("labels") is not None else "config.json id2label"
    if "O" not in labels:
        raise ConfigError(f"{source}: no tag names with O among them ({field})")
    for label in labels:
        try:
            split_tag(label)
        except ValueError:  # an entity tagged with it would be read as no entity at all (metrics.entities)
            raise ConfigError(f"{source}: {field} holds the tag {label!r}: tags are O, B-TYPE or I-TYPE") from None
    return labels


class TokenTagger:
    backend = "torch"
    rows_per_run: int | None = None

    def __init__(self, model, tokenizer, preprocessing: str, labels: Sequence[str], max_seq_length: int = 384):
        from ..preprocess import Preprocessor

        self.model, self.tokenizer, self.preprocessing = model, tokenizer, preprocessing
        self.labels = list(labels)
        self.max_seq_length = max_seq_length
        preprocessor = None if preprocessing == "none" else Preprocessor(preprocessing)
        self.encoder = WordEncoder(tokenizer, preprocessor, max_seq_length, preprocessing)

    @classmethod
    def load(cls, directory: str | os.PathLike, *, preprocessing: str | None = None,
             device: str = "cpu") -> TokenTagger:
        from transformers import AutoModelForTokenClassification

        from ..artifacts.models import check_vocabulary_size, load_pretrained_model, torch_device
        from ..tokenizer.load import load_pretrained_tokenizer

        target = torch_device(device)
        metadata, config = _read(directory)
        preprocessing = recorded_preprocessing(directory, metadata, preprocessing)
        labels = read_tags(metadata, config, directory)
        max_seq_length = task_max_seq_length(metadata, config, directory, 384)
        model, _ = load_pretrained_model(AutoModelForTokenClassification, directory)
        check_head_size(labels, model.config.num_labels, config, directory, "tag")
        tokenizer = load_pretrained_tokenizer(directory)
        check_vocabulary_size(model, tokenizer, directory)
        model.to(target).float().eval()
        return cls(model, tokenizer, preprocessing, labels, max_seq_length)

    def preprocess(self, texts: Sequence[str]) -> list[str]:
        preprocessor = self.encoder.preprocessor
        return list(texts) if preprocessor is None else preprocessor.preprocess_batch(list(texts))

    # -------------------------------------------------------------------------------------------------- forward

    def forward(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        import torch

        device = next(self.model.parameters()).device
        with torch.inference_mode():
            result = self.model(**{k: torch.from_numpy(v).to(device) for k, v in batch.items()})
        return result.logits.float().cpu().numpy()

    def piece_logits(self, rows: Sequence[Sequence[int]], batch_size: int = 32) -> list[np.ndarray]:
        found: dict[int, np.ndarray] = {}
        for indices in prediction_batches([len(r) for r in rows], self.rows_per_run or batch_size, TOKENS_PER_RUN):
            logits = self.forward(pad(rows, indices, self.tokenizer.pad_token_id or 0))
            for j, i in enumerate(indices):
                found[i] = logits[j, : len(rows[i])]
        return [found[i] for i in range(len(rows))]

    # -------------------------------------------------------------------------------------------------- tagging

    def tag_encoded(self, encoded: Sequence[EncodedSentence], batch_size: int = 32
                    ) -> list[tuple[list[str], list[float]]]:
        rows = [piece.ids for sentence in encoded for piece in sentence.pieces]
        logits = iter(self.piece_logits(rows, batch_size))
        results = []
        for sentence in encoded:
            tags, scores = ["O"] * sentence.word_count, [1.0] * sentence.word_count
            for piece in sentence.pieces:
                probabilities = _softmax(next(logits)[piece.positions]) if piece.positions else np.zeros((0, 1))
                for word, row in zip(piece.words, probabilities, strict=True):
                    best = int(row.argmax())
                    tags[word], scores[word] = self.labels[best], float(row[best])
            results.append((tags, scores))
        return results

    def tag_words(self, sentences: Sequence[Sequence[str]], batch_size: int = 32
                  ) -> list[tuple[list[str], list[float]]]:
        """Tags and their probabilities for sentences given as words."""
        texts, spans = zip(*(joined(words) for words in sentences), strict=True) if sentences else ((), ())
        return self.tag_encoded(self.encoder.encode(texts, spans), batch_size)

    def entities(self, texts: str | Sequence[str], batch_size: int = 32) -> list[list[Entity]]:
        """The entities of each raw text, as character spans of it."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        spans = [word_spans(t) for t in texts]
        found = []
        tagged = self.tag_encoded(self.encoder.encode(texts, spans), batch_size)
        for text, word_spans_, (tags, scores) in zip(texts, spans, tagged, strict=True):
            items = []
            for kind, first, last in sorted(tag_entities(tags), key=lambda e: e[1]):
                start, end = word_spans_[first][0], word_spans_[last - 1][1]
                items.append(Entity(kind, start, end, float(np.mean(scores[first:last])), text[start:end]))
            found.append(items)
        return found


class OnnxTokenTagger(TokenTagger):
    backend = "onnx"

    @classmethod
    def load(cls, directory: str | os.PathLike, *, preprocessing: str | None = None,  # type: ignore[override]  # own options
             quantize: bool = False) -> OnnxTokenTagger:
        directory = Path(directory)
        metadata, config = _read(directory)
        preprocessing = recorded_preprocessing(directory, metadata, preprocessing)
        labels = read_tags(metadata, config, directory)
        max_seq_length = task_max_seq_length(metadata, config, directory, 384)
        session, tokenizer, rows_per_run = open_task_model(directory, config.get("vocab_size"), quantize=quantize)
        check_head_size(labels, head_outputs(session, OUTPUT_NAMES[0]), config, directory, "tag")
        tagger = cls(session, tokenizer, preprocessing, labels, max_seq_length)
        tagger.rows_per_run = rows_per_run
        return tagger

    def forward(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return run_task_session(self.model, batch, OUTPUT_NAMES)


def _read(directory) -> tuple[dict, dict]:
    metadata = model_metadata(directory)
    if metadata.get("task") not in (None, TASK):
        raise ConfigError(f"{directory} is a {metadata['task']} model, not a tagger")
    config = model_config(directory) if Path(str(directory)).is_dir() else {}
    return metadata, config

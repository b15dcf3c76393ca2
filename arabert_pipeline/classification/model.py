"""A fine-tuned sequence classifier with its preprocessing, and its two backends.

    model = TextClassifier.load("runs/sentiment")          # torch + transformers
    model = OnnxTextClassifier.load("runs/sentiment")      # ONNX Runtime + tokenizers, no torch (model.onnx)
    model.predict_proba(["الخدمة ممتازة", "..."])           # (n, labels) probabilities, labels in model.labels

A text goes through the model's preprocessing (read from its arabert_pipeline.json), is tokenized and truncated to the
model's max_seq_length tokens, and the head's logits on [CLS] are turned into probabilities by a softmax (averaged
with a lexical companion's when the model dir has one, lexical.py). The two
backends differ only in the tokenizer object and the forward; batching and padding are finetuning/batches.py's, so a
text's scores do not depend on the texts batched with it (rows are masked; an int8 graph runs one row at a time).
"""
from __future__ import annotations

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
from ..finetuning.taskexport import OUTPUT_NAMES, TEXT_CLASSIFICATION, check_lexical_companion
from .lexical import LEXICAL_DIR, LexicalCompanion, mix

TASK = TEXT_CLASSIFICATION
TOKENS_PER_RUN = 4096  # padded tokens per forward: large enough for batch 32 of tweets, small enough for caches


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)


def read_labels(metadata: dict, config: dict, source: object) -> list[str]:
    """The class names in the head's order (finetuning/modeldir.py's head_labels)."""
    return head_labels(metadata, config, source, "class")


class TextClassifier:
    """A classification model, its tokenizer, preprocessing and labels; this class runs it on torch."""

    backend = "torch"
    rows_per_run: int | None = None  # None: up to batch_size rows and TOKENS_PER_RUN tokens

    def __init__(self, model, tokenizer, preprocessing: str, labels: Sequence[str], max_seq_length: int = 128):
        from ..preprocess import Preprocessor

        self.model = model
        self.tokenizer = tokenizer
        self.preprocessing = preprocessing
        self.preprocessor = None if preprocessing == "none" else Preprocessor(preprocessing)
        self.labels = list(labels)
        self.max_seq_length = max_seq_length
        self.lexical: LexicalCompanion | None = None
        self.lexical_weight = 0.0

    @classmethod
    def load(cls, directory: str | os.PathLike, *, preprocessing: str | None = None,
             device: str = "cpu") -> TextClassifier:
        from transformers import AutoModelForSequenceClassification

        from ..artifacts.models import check_vocabulary_size, load_pretrained_model, torch_device
        from ..tokenizer.load import load_pretrained_tokenizer

        target = torch_device(device)
        metadata, config = _read(directory)
        preprocessing = recorded_preprocessing(directory, metadata, preprocessing)
        labels = read_labels(metadata, config, directory)
        max_seq_length = task_max_seq_length(metadata, config, directory, 128)
        model, _ = load_pretrained_model(AutoModelForSequenceClassification, directory)
        check_head_size(labels, model.config.num_labels, config, directory)
        tokenizer = load_pretrained_tokenizer(directory)
        check_vocabulary_size(model, tokenizer, directory)
        model.to(target).float().eval()
        classifier = cls(model, tokenizer, preprocessing, labels, max_seq_length)
        classifier.attach_lexical(Path(directory), metadata)
        return classifier

    def preprocess(self, texts: Sequence[str]) -> list[str]:
        return list(texts) if self.preprocessor is None else self.preprocessor.preprocess_batch(list(texts))

    def encode(self, texts: Sequence[str], *, preprocessed: bool = False) -> list[list[int]]:
        """Token ids of the texts after preprocessing (`preprocessed`: they already are), [CLS] … [SEP], truncated
        to max_seq_length."""
        if not texts:
            return []
        encoded = self.tokenizer(list(texts) if preprocessed else self.preprocess(texts), truncation=True,
                                 max_length=self.max_seq_length)
        return [list(ids) for ids in encoded["input_ids"]]

    def logits(self, rows: Sequence[Sequence[int]], batch_size: int = 32) -> np.ndarray:
        out = np.zeros((len(rows), len(self.labels)), dtype=np.float32)
        for indices in prediction_batches([len(r) for r in rows], self.rows_per_run or batch_size, TOKENS_PER_RUN):
            batch = pad(rows, indices, self.tokenizer.pad_token_id or 0)
            out[indices] = self.forward(batch)
        return out

    def forward(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        import torch

        device = next(self.model.parameters()).device
        with torch.inference_mode():
            result = self.model(**{k: torch.from_numpy(v).to(device) for k, v in batch.items()})
        return result.logits.float().cpu().numpy()

    def predict_proba(self, texts: Sequence[str], batch_size: int = 32, *, preprocessed: bool = False) -> np.ndarray:
        """The model's probabilities, averaged with its lexical companion's at the dev-chosen weight when it has one
        (lexical.py)."""
        prepared = list(texts) if preprocessed else self.preprocess(texts)
        probabilities = softmax(self.logits(self.encode(prepared, preprocessed=True), batch_size))
        if self.lexical is not None and self.lexical_weight > 0 and prepared:
            probabilities = mix(probabilities, self.lexical.predict_proba(prepared, self.labels), self.lexical_weight)
        return probabilities

    def attach_lexical(self, directory: Path, metadata: dict) -> None:
        """The lexical companion in directory/lexical/, at the weight the metadata records (add-lexical)."""
        if not check_lexical_companion(directory, metadata):
            return
        weight = metadata.get("lexical_weight")
        if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not 0 <= weight <= 1:
            raise ConfigError(f"{directory}: arabert_pipeline.json lexical_weight must be a number in [0, 1] beside "
                              f"{LEXICAL_DIR}/, not {weight!r}")
        self.lexical = LexicalCompanion.load(directory / LEXICAL_DIR, self.labels, self.preprocessing)
        self.lexical_weight = float(weight)

    def predict(self, texts: Sequence[str], batch_size: int = 32) -> list[str]:
        return [self.labels[i] for i in self.predict_proba(texts, batch_size).argmax(axis=1)]


class OnnxTextClassifier(TextClassifier):
    """TextClassifier on ONNX Runtime (model.onnx) with `tokenizers`: neither torch nor transformers is imported."""

    backend = "onnx"

    @classmethod
    def load(cls, directory: str | os.PathLike, *, preprocessing: str | None = None,  # type: ignore[override]  # own options
             quantize: bool = False) -> OnnxTextClassifier:
        directory = Path(directory)
        metadata, config = _read(directory)
        preprocessing = recorded_preprocessing(directory, metadata, preprocessing)
        labels = read_labels(metadata, config, directory)
        max_seq_length = task_max_seq_length(metadata, config, directory, 128)
        session, tokenizer, rows_per_run = open_task_model(directory, config.get("vocab_size"), quantize=quantize)
        check_head_size(labels, head_outputs(session, OUTPUT_NAMES[0]), config, directory)
        model = cls(session, tokenizer, preprocessing, labels, max_seq_length)
        model.rows_per_run = rows_per_run
        model.attach_lexical(directory, metadata)
        return model

    def forward(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        return run_task_session(self.model, batch, OUTPUT_NAMES)


def _read(directory) -> tuple[dict, dict]:
    metadata = model_metadata(directory)
    if metadata.get("task") not in (None, TASK):
        raise ConfigError(f"{directory} is a {metadata['task']} model, not a text classifier")
    config = model_config(directory) if Path(str(directory)).is_dir() else {}
    return metadata, config

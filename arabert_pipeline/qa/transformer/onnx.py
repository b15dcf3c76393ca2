"""The ONNX Runtime backend of a QA model: a model dir with `model.onnx` (export.py), run without torch or
transformers (`Pipeline`'s default where the model dir has one).

Only two steps differ from the torch backend (model.py QAModel), and both are swapped here:
- tokenization: `tokenizers` reads the model's tokenizer.json directly, called through finetuning/tokenizer_adapter.py
  as features.py calls a transformers fast tokenizer, so `build_windows` runs unchanged and the windows, ids, token
  types and offsets are the same;
- the forward (`window_logits`): an ONNX Runtime session on model.onnx (finetuning/runtime.py), batched and padded as
  the torch backend batches windows.
Preprocessing, question-overlap token types, the bonuses and the decoding are QAModel's own code.

`quantize=True` runs an int8 copy of the graph (and of the reader's graph, when the model weighs one): see
finetuning/runtime.py for what that costs.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ...artifacts.metadata import METADATA_FILE
from ...artifacts.models import model_config
from ...errors import ConfigError
from ...finetuning.export import ONNX_FILE
from ...finetuning.modeldir import model_metadata, recorded_preprocessing
from ...finetuning.runtime import create_session, int8_session
from ...finetuning.tokenizer_adapter import TokenizerAdapter
from .bonuses import read_sentence_idf
from .companion import load_companion
from .export import OUTPUT_NAMES
from .features import Windows
from .model import QAModel
from .settings import QASettings

# Tokens (windows × padded length) per ONNX Runtime run. On CPU, batches beyond a few windows buy nothing (a window is
# already hundreds of rows for every matrix product) and cost cache: measured on the shipped model (one thread),
# 4 × 256 tokens ran at 13k tokens/s, 32 × 256 at 9k.
TOKENS_PER_RUN = 1024


class OnnxQAModel(QAModel):
    """QAModel whose windows come from `tokenizers` and whose forward runs on ONNX Runtime."""

    backend = "onnx"

    @classmethod
    def load(cls, directory: str | os.PathLike, *, preprocessing: str | None = None,  # type: ignore[override]  # own options
             whole_words: bool = True, quantize: bool = False) -> OnnxQAModel:
        """A QA model dir with model.onnx; the same checks as QAModel.load, without importing torch."""
        directory = Path(directory)
        if not (directory / ONNX_FILE).is_file():
            raise ConfigError(f"{directory} has no {ONNX_FILE}: export it with `arabert-pipeline export-onnx "
                              f"{directory}`, or use the torch backend")
        metadata = model_metadata(directory)
        preprocessing = recorded_preprocessing(directory, metadata, preprocessing)
        config = model_config(directory)
        settings = QASettings.from_metadata(metadata, directory / METADATA_FILE, config.get("max_position_embeddings"))
        tokenizer = TokenizerAdapter.from_directory(directory)
        rows = config.get("vocab_size")
        if rows != len(tokenizer):
            raise ConfigError(f"{directory}: the tokenizer has {len(tokenizer)} tokens but the model has {rows} token "
                              "embeddings; the tokenizer files do not belong to this model")
        idf = read_sentence_idf(directory, required=settings.sentence_prior > 0)
        session = create_session(directory, quantize=quantize)  # first: it refuses a stale model.onnx
        # The reader's LSTMs ran 5.1 ms a question in fp32 and 3.3 in int8 (one thread, an ARCD-sized context): at
        # batch 1 a third of the answer's time. The int8 decision on dev measures both graphs together.
        reader = load_companion(directory, preprocessing, required=settings.reader_weight > 0,
                                session=int8_session if quantize else None)
        model = cls(session, tokenizer, preprocessing, settings, whole_words, idf, reader)
        # int8: dynamic quantization scales each activation tensor by its own range, and windows run together share
        # one tensor, so a window's logits would depend on the windows batched with it (and on their padding). One
        # window per run keeps every answer the one the question gets alone (serve's dynamic batching, answer lists).
        model.windows_per_run = 1 if quantize else None
        return model

    windows_per_run: int | None = None  # None: up to batch_size windows and TOKENS_PER_RUN tokens

    def __init__(self, session, tokenizer, preprocessing: str, settings: QASettings = QASettings(),
                 whole_words: bool = True, sentence_idf=None, reader=None):
        super().__init__(None, tokenizer, preprocessing, settings, whole_words, sentence_idf, reader)
        self.session = session  # an onnxruntime.InferenceSession on model.onnx (or its int8 copy)

    def window_logits(self, windows: Windows, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """As QAModel.window_logits: windows sorted by length, batches right-padded to their longest window; a batch
        holds at most `batch_size` windows and `TOKENS_PER_RUN` tokens (always one window at least)."""
        n, width = len(windows), windows.offsets.shape[1]
        start_logits = np.zeros((n, width), dtype=np.float32)
        end_logits = np.zeros((n, width), dtype=np.float32)
        lengths = np.asarray([len(ids) for ids in windows.input_ids])
        order = np.argsort(lengths, kind="stable")
        inputs = {i.name for i in self.session.get_inputs()}
        pad = self.tokenizer.pad_token_id or 0
        most = self.windows_per_run or batch_size
        i = 0
        while i < n:
            # Sorted ascending: the batch's last window is its longest.
            size = 1
            while (size < most and i + size < n
                   and (size + 1) * lengths[order[i + size]] <= TOKENS_PER_RUN):
                size += 1
            rows = order[i : i + size]
            i += size
            length = int(lengths[rows[-1]])
            feeds = {"input_ids": np.full((len(rows), length), pad, dtype=np.int64),
                     "attention_mask": np.zeros((len(rows), length), dtype=np.int64),
                     "token_type_ids": np.zeros((len(rows), length), dtype=np.int64)}
            for j, r in enumerate(rows):
                ids = windows.input_ids[r]
                feeds["input_ids"][j, : len(ids)] = ids
                feeds["attention_mask"][j, : len(ids)] = 1
                if windows.token_type_ids is not None:
                    feeds["token_type_ids"][j, : len(ids)] = windows.token_type_ids[r]
            start, end = self.session.run(list(OUTPUT_NAMES), {k: v for k, v in feeds.items() if k in inputs})
            start_logits[rows, :length] = start
            end_logits[rows, :length] = end
        return start_logits, end_logits

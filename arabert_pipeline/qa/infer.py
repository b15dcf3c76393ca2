"""Extractive QA inference: questions + contexts → answers as spans of the ORIGINAL context.

    model = QAModel.load("runs/qa-small")               # preprocessing + QA settings from arabert_pipeline.json
    model = QAModel.load("some/hub-model", preprocessing="arabertv02")   # a checkpoint without our metadata
    model.predict([{"question": "...", "context": "..."}], top_k=3)     # -> [[Answer(text, start, end, score), ...]]

Contexts and questions go through the model's preprocessing; contexts keep an offset map, so every answer is sliced
from the original context: `answer.text == context[answer.start:answer.end]`. Windows of all examples are batched
together (sorted by length to limit padding) and run under torch.inference_mode. `score` is the start + end logit of
the span, comparable between the answers of one example.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ..artifacts import METADATA_FILE, read_metadata
from ..errors import ConfigError, InputError
from .align import QAPreprocessing
from .features import Windows, build_windows
from .postprocess import decode_spans, snap_to_words


@dataclasses.dataclass(frozen=True)
class QASettings:
    """How windows are built and spans decoded; stored in a QA model's arabert_pipeline.json."""

    max_seq_length: int = 384
    doc_stride: int = 128
    max_question_tokens: int = 64
    max_answer_tokens: int = 30
    n_best: int = 20

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any]) -> "QASettings":
        return cls(**{f.name: int(metadata[f.name]) for f in dataclasses.fields(cls) if f.name in metadata})


@dataclasses.dataclass(frozen=True)
class Answer:
    text: str  # == context[start:end] of the original context
    start: int
    end: int
    score: float


class QAModel:
    """A question-answering model with its tokenizer, preprocessing and window settings."""

    def __init__(self, model, tokenizer, preprocessing: str, settings: QASettings = QASettings(),
                 whole_words: bool = True):
        self.model = model
        self.tokenizer = tokenizer
        self.preprocessing = QAPreprocessing(preprocessing)
        self.settings = settings
        self.whole_words = whole_words  # widen answers to whole words of the original context (snap_to_words)

    @classmethod
    def load(cls, path_or_hub_id: str | Path, *, preprocessing: str | None = None, device: str = "cpu",
             whole_words: bool = True) -> "QAModel":
        """A local QA model dir or a hub id; `preprocessing` is required when the model has no metadata."""
        from transformers import AutoModelForQuestionAnswering, AutoTokenizer

        metadata = _read_metadata(path_or_hub_id)
        stored = metadata.get("preprocessing")
        if stored and preprocessing and stored != preprocessing:
            raise ConfigError(
                f"{path_or_hub_id} was trained with preprocessing {stored!r}, not {preprocessing!r}"
            )
        preprocessing = preprocessing or stored
        if not preprocessing:
            raise ConfigError(
                f"{path_or_hub_id} has no {METADATA_FILE} recording its preprocessing: pass it explicitly "
                "(e.g. preprocessing='arabertv02', or 'none' for models trained on raw text)"
            )
        import torch

        # On CPU, fp16-stored weights (a shipped model) compute in fp32: CPU fp16 matmuls are slow or missing.
        dtype = torch.float32 if torch.device(device).type == "cpu" else "auto"
        model, info = AutoModelForQuestionAnswering.from_pretrained(
            str(path_or_hub_id), output_loading_info=True, dtype=dtype
        )
        if any("qa_outputs" in key for key in info.get("missing_keys", ())):
            raise ConfigError(
                f"{path_or_hub_id} has no trained question-answering head (it looks like a pretrained checkpoint): "
                "fine-tune it first with `arabert-pipeline finetune`"
            )
        tokenizer = AutoTokenizer.from_pretrained(str(path_or_hub_id))
        return cls(model.to(device).eval(), tokenizer, preprocessing, QASettings.from_metadata(metadata), whole_words)

    def predict(self, examples: Iterable[dict[str, Any]], batch_size: int = 32, top_k: int = 1) -> list[list[Answer]]:
        """Answers for each example ({"question", "context"}, other keys ignored), best first, at most top_k."""
        if top_k < 1:
            raise ConfigError(f"top_k must be ≥ 1, got {top_k}")
        examples = list(examples)
        if not examples:
            return []
        prepared = [self._prepare(i, example) for i, example in enumerate(examples)]
        windows = build_windows(
            self.tokenizer,
            [question for question, _ in prepared],
            [aligned.text for _, aligned in prepared],
            max_seq_length=self.settings.max_seq_length,
            doc_stride=self.settings.doc_stride,
            max_question_tokens=self.settings.max_question_tokens,
        )
        has_context = np.zeros(len(examples), dtype=bool)
        has_context[windows.example_index[(windows.offsets[:, :, 0] >= 0).any(axis=1)]] = True
        if not has_context.all():
            index = int(np.flatnonzero(~has_context)[0])
            raise InputError(
                f"the context yields no tokens after {self.preprocessing.name!r} preprocessing and tokenization",
                field=f"example {examples[index].get('id', index)}",
            )
        start_logits, end_logits = self.window_logits(windows, batch_size)
        spans = decode_spans(
            start_logits,
            end_logits,
            windows.offsets,
            windows.example_index,
            n_examples=len(examples),
            n_best=self.settings.n_best,
            max_answer_tokens=self.settings.max_answer_tokens,
            # Distinct preprocessed spans can map back to one original span (a `+` marker token, a placeholder):
            # decode a few more than needed so that top_k distinct original spans remain.
            limit=4 * max(top_k, self.settings.n_best),
        )
        answers = []
        for (_, aligned), candidates in zip(prepared, spans):
            found: dict[tuple[int, int], Answer] = {}
            for start, end, score in candidates:
                span = aligned.to_original(start, end)
                if self.whole_words:
                    span = snap_to_words(aligned.original, *span)
                if span[1] > span[0] and span not in found:
                    found[span] = Answer(aligned.original[span[0] : span[1]], span[0], span[1], score)
                    if len(found) == top_k:
                        break
            answers.append(list(found.values()))
        return answers

    def _prepare(self, index: int, example: dict[str, Any]):
        qid = example.get("id", index)
        question, context = example.get("question"), example.get("context")
        for name, value in (("question", question), ("context", context)):
            if not isinstance(value, str) or not value.strip():
                raise InputError(f"empty or missing {name}", field=f"example {qid}")
        aligned = self.preprocessing.context(context)
        question = self.preprocessing.question(question)
        if not aligned.text.strip() or not question.strip():
            raise InputError(
                f"nothing left after {self.preprocessing.name!r} preprocessing (no Arabic or Latin text?)",
                field=f"example {qid}",
            )
        return question, aligned

    def window_logits(self, windows: Windows, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """Start/end logits (windows × max_seq_length, 0 past each window's end), shortest windows batched together."""
        import torch

        n, width = len(windows), windows.offsets.shape[1]
        start_logits = np.zeros((n, width), dtype=np.float32)
        end_logits = np.zeros((n, width), dtype=np.float32)
        order = np.argsort([len(ids) for ids in windows.input_ids], kind="stable")
        device = next(self.model.parameters()).device
        with torch.inference_mode():
            for i in range(0, n, batch_size):
                batch = order[i : i + batch_size]
                inputs = collate(windows, batch, self.tokenizer.pad_token_id or 0)
                outputs = self.model(**{k: v.to(device) for k, v in inputs.items()})
                length = inputs["input_ids"].shape[1]
                start_logits[batch, :length] = outputs.start_logits.float().cpu().numpy()
                end_logits[batch, :length] = outputs.end_logits.float().cpu().numpy()
        return start_logits, end_logits


def collate(windows: Windows, rows, pad_id: int, labels: bool = False) -> dict:
    """Right-padded tensors for the given window rows."""
    import torch

    length = max(len(windows.input_ids[r]) for r in rows)
    input_ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), length), dtype=torch.long)
    token_type_ids = torch.zeros((len(rows), length), dtype=torch.long)
    for i, r in enumerate(rows):
        ids = windows.input_ids[r]
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention_mask[i, : len(ids)] = 1
        if windows.token_type_ids is not None:
            token_type_ids[i, : len(ids)] = torch.tensor(windows.token_type_ids[r])
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    if windows.token_type_ids is not None:
        batch["token_type_ids"] = token_type_ids
    if labels:
        batch["start_positions"] = torch.as_tensor(windows.start_positions[rows])
        batch["end_positions"] = torch.as_tensor(windows.end_positions[rows])
    return batch


def predict_dataset(model_dir: str | Path, examples: Iterable[dict[str, Any]], batch_size: int = 32) -> dict[str, str]:
    """{question id: best answer text} for a dataset or list of examples (each with an "id")."""
    examples = list(examples)
    model = QAModel.load(model_dir)
    return predictions_by_id(examples, model.predict(examples, batch_size=batch_size))


def predictions_by_id(examples: list[dict[str, Any]], answers: list[list[Answer]]) -> dict[str, str]:
    return {str(example["id"]): (found[0].text if found else "") for example, found in zip(examples, answers)}


def _read_metadata(path_or_hub_id: str | Path) -> dict[str, Any]:
    if Path(path_or_hub_id).is_dir():
        return read_metadata(path_or_hub_id, missing_ok=True)
    try:
        from huggingface_hub import hf_hub_download

        downloaded = Path(hf_hub_download(str(path_or_hub_id), METADATA_FILE))
    except Exception:  # offline, no such repo, or a hub model without our metadata: the caller must say
        return {}
    return read_metadata(downloaded.parent)

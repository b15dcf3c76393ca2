"""A transformer QA model answering questions with spans of the ORIGINAL context, and its torch backend.

    model = QAModel.load("runs/qa-small")               # preprocessing + QA settings from arabert_pipeline.json
    model = QAModel.load("some/hub-model", preprocessing="arabertv02")   # a checkpoint without our metadata
    model.predict([{"question": "...", "context": "..."}], top_k=3)     # -> [[Answer(text, start, end, score), ...]]

`predict` is four public steps, which tuning (tune.py) and the scripts call one by one to decode the same logits
many ways: `prepare` (questions and contexts through the model's preprocessing; contexts keep an offset map, so every
answer is sliced from the original context: `answer.text == context[answer.start:answer.end]`) → `windows`
(features.py) → `window_logits` (this backend: windows of all examples batched together, sorted by length to limit
padding, under torch.inference_mode; onnx.py's backend swaps this step and the tokenizer) → `decode` (decode.py:
n-best spans, the bonuses of bonuses.py, expected-F1 ranking, probabilities). `logits` runs the first three at once.

What a plain Hugging Face QA pipeline does not compute is recorded in the model's settings (settings.py): the
question-overlap token type (features.py), the sentence prior and the reader's weight (bonuses.py), answers within one
sentence and expected-F1 decoding (decode.py). Answers are whole words of the original context without sentence
punctuation at their ends. `predict(..., allow_no_answer=True)` answers nothing (an empty list) where the no-answer
score beats the best span by more than `null_score_diff_threshold` (SQuAD 2.0's rule and Hugging Face's name; chosen
on dev).
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ...artifacts.metadata import METADATA_FILE
from ...artifacts.models import check_vocabulary_size, load_pretrained_model, model_config, torch_device
from ...errors import ConfigError, InputError
from ...finetuning.modeldir import model_metadata, recorded_preprocessing
from ...tokenizer.load import load_pretrained_tokenizer
from ...tokenizer.markers import check_preprocessing_fits
from ..align import QAPreprocessing
from ..overlap import KeyIDF
from .architectures import prepare_qa_model
from .bonuses import SENTENCE_IDF_FILE, read_sentence_idf
from .bonuses import reader_scores as reader_log_probs
from .companion import COMPANION_DIR, Companion, load_companion
from .decode import Answer, Logits, candidates, decode, null_margins
from .features import Windows, build_windows, collate
from .passages import answer_long_contexts
from .settings import QASettings


class QAModel:
    """A question-answering model with its tokenizer, preprocessing and settings; this class runs it on torch."""

    backend = "torch"

    def __init__(self, model, tokenizer, preprocessing: str, settings: QASettings = QASettings(),
                 whole_words: bool = True, sentence_idf: KeyIDF | None = None, reader: Companion | None = None):
        self.model = model  # the torch module (None on the ONNX backend, which runs a session instead)
        self.tokenizer = tokenizer
        self.preprocessing = preprocessing  # its name, as arabert_pipeline.json records it
        self.preprocessor = QAPreprocessing(preprocessing)
        self.settings = settings
        self.whole_words = whole_words  # widen answers to whole words of the original context
        if settings.sentence_prior > 0 and sentence_idf is None:
            raise ConfigError(f"sentence_prior {settings.sentence_prior} needs the IDF table ({SENTENCE_IDF_FILE})")
        self.sentence_idf = sentence_idf
        if settings.reader_weight > 0 and reader is None:
            raise ConfigError(f"reader_weight {settings.reader_weight} needs the model's reader ({COMPANION_DIR}/)")
        self.reader = reader

    @classmethod
    def load(cls, path_or_hub_id: str | Path, *, preprocessing: str | None = None, device: str = "cpu",
             whole_words: bool = True) -> QAModel:
        """A local QA model dir or a hub id; `preprocessing` is required when the model has no metadata.

        Everything that can be checked without the weights (device, stored settings) is checked before they load;
        then the weights must fit their config and the tokenizer files must be there, with one token per embedding.
        """
        from transformers import AutoModelForQuestionAnswering

        target_device = torch_device(device)
        metadata = model_metadata(path_or_hub_id)
        preprocessing = recorded_preprocessing(path_or_hub_id, metadata, preprocessing)
        config = model_config(path_or_hub_id) if Path(path_or_hub_id).is_dir() else {}
        settings = QASettings.from_metadata(metadata, Path(str(path_or_hub_id)) / METADATA_FILE,
                                            config.get("max_position_embeddings"))
        import torch

        # On CPU, fp16-stored weights (a shipped model) compute in fp32: CPU fp16 matmuls are slow or missing.
        dtype = torch.float32 if target_device.type == "cpu" else "auto"
        model, info = load_pretrained_model(AutoModelForQuestionAnswering, path_or_hub_id, dtype=dtype)
        if any("qa_outputs" in key for key in info.get("missing_keys", ())):
            raise ConfigError(
                f"{path_or_hub_id} has no trained question-answering head (it looks like a pretrained checkpoint): "
                "fine-tune it first with `arabert-pipeline finetune`"
            )
        tokenizer = load_pretrained_tokenizer(path_or_hub_id)
        check_vocabulary_size(model, tokenizer, path_or_hub_id)
        warning = check_preprocessing_fits(tokenizer, preprocessing, path_or_hub_id)
        if warning:
            logging.getLogger(__name__).warning(warning)
        prepare_qa_model(model, question_overlap=settings.question_overlap, source=path_or_hub_id)
        idf = read_sentence_idf(path_or_hub_id, required=settings.sentence_prior > 0)
        reader = load_companion(path_or_hub_id, preprocessing, required=settings.reader_weight > 0)
        return cls(model.to(target_device).eval(), tokenizer, preprocessing, settings, whole_words, idf, reader)

    def predict(self, examples: Iterable[dict[str, Any]], batch_size: int = 32, top_k: int = 1,
                allow_no_answer: bool = False) -> list[list[Answer]]:
        """Answers for each example ({"question", "context"}, other keys ignored), best first, at most top_k; with
        `allow_no_answer`, none for the examples the model judges unanswerable (null margin above
        `null_score_diff_threshold`)."""
        answers, margins = self.predict_with_margins(examples, batch_size, top_k)
        if allow_no_answer:
            threshold = self.settings.null_score_diff_threshold
            answers = [[] if margin > threshold else found for found, margin in zip(answers, margins, strict=True)]
        return answers

    def predict_with_margins(self, examples: Iterable[dict[str, Any]], batch_size: int = 32, top_k: int = 1
                             ) -> tuple[list[list[Answer]], np.ndarray]:
        """`predict`'s answers without abstaining, and per example the null margin the no-answer decision compares
        with the threshold (no-answer score − best span's; of the chosen passage for a context read by passages):
        what a threshold is chosen or measured on."""
        if top_k < 1:
            raise ConfigError(f"top_k must be ≥ 1, got {top_k}")
        examples = list(examples)
        if not examples:
            return [], np.zeros(0)
        return answer_long_contexts(self, examples, batch_size, top_k)

    def predict_prepared(self, examples: list[dict[str, Any]], prepared, windows: Windows, batch_size: int,
                         top_k: int) -> tuple[list[list[Answer]], np.ndarray]:
        """`predict_with_margins` for examples already through `prepare` and `windows`, each read whole."""
        logits = self.logits_of(examples, prepared, windows, batch_size)
        return self.decode(logits, top_k), self.null_margins(logits)

    # ------------------------------------------------------------------------------------------- the four steps

    def prepare(self, examples: Iterable[dict[str, Any]]) -> list[tuple[str, Any]]:
        """(preprocessed question, align.AlignedText of the context) per example; an example without a question or
        context, or with nothing left of either after preprocessing, is an InputError naming it."""
        prepared = []
        for index, example in enumerate(examples):
            qid = example.get("id", index)
            for name in ("question", "context"):
                value = example.get(name)
                if not isinstance(value, str) or not value.strip():
                    raise InputError(f"empty or missing {name}", field=f"example {qid}")
            aligned = self.preprocessor.context(example["context"])
            question = self.preprocessor.question(example["question"])
            if not aligned.text.strip() or not question.strip():
                raise InputError(
                    f"nothing left after {self.preprocessing!r} preprocessing (no Arabic or Latin text?)",
                    field=f"example {qid}",
                )
            prepared.append((question, aligned))
        return prepared

    def windows(self, prepared) -> Windows:
        return build_windows(
            self.tokenizer,
            [question for question, _ in prepared],
            [aligned.text for _, aligned in prepared],
            max_seq_length=self.settings.max_seq_length,
            doc_stride=self.settings.doc_stride,
            max_question_tokens=self.settings.max_question_tokens,
            question_overlap=self.settings.question_overlap,
        )

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

    def logits(self, examples: Iterable[dict[str, Any]], batch_size: int = 32) -> Logits:
        """prepare → windows → window_logits for a list of examples (a context with no token left is an
        InputError)."""
        examples = list(examples)
        prepared = self.prepare(examples)
        return self.logits_of(examples, prepared, self.windows(prepared), batch_size)

    def logits_of(self, examples: list[dict[str, Any]], prepared, windows: Windows, batch_size: int) -> Logits:
        """`logits` for examples already through `prepare` and `windows`."""
        has_context = np.zeros(len(examples), dtype=bool)
        has_context[windows.example_index[(windows.offsets[:, :, 0] >= 0).any(axis=1)]] = True
        if not has_context.all():
            index = int(np.flatnonzero(~has_context)[0])
            raise InputError(
                f"the context yields no tokens after {self.preprocessing!r} preprocessing and tokenization",
                field=f"example {examples[index].get('id', index)}",
            )
        return Logits(prepared, windows, *self.window_logits(windows, batch_size))

    def decode(self, logits: Logits, top_k: int = 1, settings: QASettings | None = None,
               reader_scores=None, features: list | None = None) -> list[list[Answer]]:
        """Window logits → answers in original-context coordinates (decode.decode); `settings` overrides the model's
        decoding settings, `reader_scores` (`self.reader_scores(logits.prepared)`) saves the reader's run when the
        caller decodes the same examples many times; `features` receives each example's calibration features."""
        return decode(logits, settings or self.settings, top_k=top_k, whole_words=self.whole_words,
                      features=features, **self._bonuses(reader_scores))

    def candidates(self, logits: Logits, top_k: int = 1, settings: QASettings | None = None, reader_scores=None,
                   every_candidate: bool = False) -> list[list[Answer]]:
        """Each example's candidate spans before the expected-F1 order (decode.candidates)."""
        return candidates(logits, settings or self.settings, top_k=top_k, whole_words=self.whole_words,
                          every_candidate=every_candidate, **self._bonuses(reader_scores))

    def null_margins(self, logits: Logits) -> np.ndarray:
        """Per example: no-answer score − best span score (decode.null_margins)."""
        return null_margins(logits.start, logits.end, logits.windows.offsets, logits.windows.example_index,
                            n_examples=len(logits.prepared), max_answer_tokens=self.settings.max_answer_tokens)

    def reader_scores(self, prepared) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per example, the reader's log p(start), log p(end) per preprocessed-context character."""
        return reader_log_probs(prepared, self.reader)

    def _bonuses(self, reader_scores) -> dict[str, Any]:
        return {"sentence_idf": self.sentence_idf, "reader": self.reader, "reader_scores": reader_scores}

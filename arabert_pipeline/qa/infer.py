"""Extractive QA inference: questions + contexts → answers as spans of the ORIGINAL context.

    model = QAModel.load("runs/qa-small")               # preprocessing + QA settings from arabert_pipeline.json
    model = QAModel.load("some/hub-model", preprocessing="arabertv02")   # a checkpoint without our metadata
    model.predict([{"question": "...", "context": "..."}], top_k=3)     # -> [[Answer(text, start, end, score), ...]]

Contexts and questions go through the model's preprocessing; contexts keep an offset map, so every answer is sliced
from the original context: `answer.text == context[answer.start:answer.end]`. Windows of all examples are batched
together (sorted by length to limit padding) and run under torch.inference_mode. `score` is the start + end logit of
the span (plus the sentence prior below), comparable between the answers of one example; answers come best score
first, or with expected-F1 decoding (below) highest expected F1 first.

Three inputs that a plain Hugging Face QA pipeline does not compute, each recorded in the model's settings:
- `question_overlap`: context tokens of words the question shares get token type 2 (features.py, overlap.py); a model
  fine-tuned with it expects them.
- `sentence_prior` λ > 0: each candidate span gains λ × (the IDF-weighted question overlap of its sentence / the best
  sentence's), a lexical prior on which sentence holds the answer. The IDF is counted on the fine-tuning contexts and
  stored beside the model (`SENTENCE_IDF_FILE`).
- `reader_weight` w > 0: each candidate span gains w × (log p(start word) + log p(end word)) under the DrQA reader
  stored beside the model (`reader/`, reader_companion.py).
And two decoding choices (postprocess.py): `within_sentence` keeps only spans inside one sentence, and `decoding`
"expected-f1" answers with the candidate of highest expected F1 instead of the highest score ("max-score").
Answers are whole words of the original context without sentence punctuation at their ends (`trimmed`).
`predict(..., allow_no_answer=True)` answers nothing (an empty list) where the no-answer score beats the best span
by more than `null_score_diff_threshold` (SQuAD 2.0's rule and Hugging Face's name; chosen on dev).
"""
from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ..artifacts import (
    METADATA_FILE, check_vocabulary_size, load_pretrained_model, model_config, read_json_file, read_metadata,
    torch_device,
)
from ..errors import ConfigError, InputError
from ..tokenizer.load import load_pretrained_tokenizer
from ..tokenizer.markers import check_preprocessing_fits
from .align import QAPreprocessing
from .calibration import Calibration
from .architectures import prepare_qa_model
from .features import Windows, build_windows
from .overlap import KeyIDF, sentence_overlap_scores, sentence_spans
from .postprocess import (decode_spans, is_word_character, null_margins, rank_by_expected_f1, sentence_numbers,
                          snap_spans_to_words, trim_spans)
from .reader_companion import COMPANION_DIR, CompanionReader, load_companion

SENTENCE_IDF_FILE = "sentence_idf.json"
DECODINGS = ("max-score", "expected-f1")
# Distinct spans per example that expected-F1 decoding weighs: the mass of a small model's distribution is spread
# over many overlapping spans, and the top 20 of Hugging Face's n-best hold too little of it.
EXPECTED_F1_CANDIDATES = 200
# Bounds of the stored settings (QASettings.check): larger values are damaged files, not choices.
MAX_WINDOW_TOKENS = 8192
MAX_N_BEST = 1000
MAX_LOGIT_SETTING = 1000.0


@dataclasses.dataclass(frozen=True)
class QASettings:
    """How windows are built and spans decoded; stored in a QA model's arabert_pipeline.json."""

    max_seq_length: int = 384
    doc_stride: int = 128
    max_question_tokens: int = 64
    max_answer_tokens: int = 30
    n_best: int = 20
    question_overlap: bool = False
    sentence_prior: float = 0.0
    within_sentence: bool = False
    decoding: str = "max-score"
    # expected-f1: the candidates' distribution is softmax(score / temperature); below 1, shorter, surer answers.
    expected_f1_temperature: float = 1.0
    null_score_diff_threshold: float = 0.0
    # The weight of the model's DrQA reader (reader_companion.py, in MODEL_DIR/reader/) in span scores: a span scores
    # its start + end logit + reader_weight × (log p_reader(start word) + log p_reader(end word)). 0: no reader.
    reader_weight: float = 0.0
    # Maps the decoder's probability to the dev rate of right answers (calibration.py); None: the softmax as it is.
    calibration: Calibration | None = None

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any], source: object = METADATA_FILE,
                      max_positions: int | None = None) -> "QASettings":
        """The stored settings, each checked: a wrong type or a value that cannot work names the field."""
        values = {}
        for field in dataclasses.fields(cls):
            if field.name not in metadata or field.name == "calibration":
                continue
            value, kind = metadata[field.name], type(field.default)
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value) if abs(value) < 2**63 else math.inf
            if type(value) is not kind:
                raise ConfigError(f"{source}: {field.name} must be a {kind.__name__}, not {value!r}")
            values[field.name] = value
        if "max_seq_length" not in values and max_positions is not None:  # a model without our settings
            values["max_seq_length"] = min(cls.max_seq_length, max_positions)
        if metadata.get("calibration") is not None:
            values["calibration"] = Calibration.from_json(metadata["calibration"], source)
        settings = cls(**values)
        settings.check(source, max_positions)
        return settings

    def check(self, source: object = "settings", max_positions: int | None = None) -> None:
        """Every field in a range that works; `max_positions` (the model's position embeddings) bounds the window."""
        for name, high in (("max_seq_length", MAX_WINDOW_TOKENS), ("doc_stride", MAX_WINDOW_TOKENS),
                           ("max_question_tokens", MAX_WINDOW_TOKENS), ("max_answer_tokens", MAX_WINDOW_TOKENS),
                           ("n_best", MAX_N_BEST)):
            value = getattr(self, name)
            if not 1 <= value <= high:
                raise ConfigError(f"{source}: {name} must be between 1 and {high:,}, got {value}")
        if max_positions is not None and self.max_seq_length > max_positions:
            raise ConfigError(f"{source}: max_seq_length {self.max_seq_length} exceeds the model's "
                              f"{max_positions} positions (max_position_embeddings in config.json)")
        if self.doc_stride >= self.max_seq_length:
            raise ConfigError(f"{source}: doc_stride ({self.doc_stride}) must be below max_seq_length "
                              f"({self.max_seq_length})")
        # Logit-scale numbers: a QA model's logits are tens at most, so anything past these bounds is a damaged file
        # (an infinite or huge prior turns scores into NaN; a NaN threshold never abstains).
        if not (math.isfinite(self.sentence_prior) and 0 <= self.sentence_prior <= MAX_LOGIT_SETTING):
            raise ConfigError(f"{source}: sentence_prior must be a finite number between 0 and "
                              f"{MAX_LOGIT_SETTING:g}, got {self.sentence_prior}")
        if not (math.isfinite(self.reader_weight) and 0 <= self.reader_weight <= MAX_LOGIT_SETTING):
            raise ConfigError(f"{source}: reader_weight must be a finite number between 0 and "
                              f"{MAX_LOGIT_SETTING:g}, got {self.reader_weight}")
        if not (math.isfinite(self.null_score_diff_threshold)
                and abs(self.null_score_diff_threshold) <= MAX_LOGIT_SETTING):
            raise ConfigError(f"{source}: null_score_diff_threshold must be a finite number between "
                              f"{-MAX_LOGIT_SETTING:g} and {MAX_LOGIT_SETTING:g}, got {self.null_score_diff_threshold}")
        if self.decoding not in DECODINGS:
            raise ConfigError(f"{source}: decoding must be one of {', '.join(DECODINGS)}, got {self.decoding!r}")
        if not (math.isfinite(self.expected_f1_temperature) and 0.01 <= self.expected_f1_temperature <= 100):
            raise ConfigError(f"{source}: expected_f1_temperature must be between 0.01 and 100, got "
                              f"{self.expected_f1_temperature}")


@dataclasses.dataclass(frozen=True)
class Answer:
    text: str  # == context[start:end] of the original context
    start: int
    end: int
    # A probability: the softmax of the start + end logits (+ the sentence prior's and the reader's bonuses) over the
    # question's candidate spans, its max(n_best, top_k) best distinct ones over all of its windows. In (0, 1]; the
    # top-k of one question sum to at most 1; comparable across questions (Hugging Face's p_start · p_end within one
    # window is not comparable across the windows of a long context). A model with a `calibration` maps it to the
    # dev rate of right answers at that probability (calibration.py).
    score: float


def with_probabilities(answers: list[Answer]) -> list[Answer]:
    """The same answers with `score` = softmax of their logit scores (max-shifted, so no overflow)."""
    if not answers:
        return []
    logits = np.asarray([a.score for a in answers], dtype=np.float64)
    weights = np.exp(logits - logits.max())
    weights /= weights.sum()
    return [dataclasses.replace(a, score=float(w)) for a, w in zip(answers, weights)]


def trimmed(context: str, answers: list[Answer], by_score: bool) -> list[Answer]:
    """The ranked answers without sentence punctuation at their ends ("جنوب الأردن،" → "جنوب الأردن", postprocess's
    TRIMMED_PUNCTUATION); those that become one answer are merged (their probabilities summed), a span of punctuation
    alone is dropped. `by_score`: ranked by probability again (max-score decoding); else each keeps the first place of
    its parts (expected-F1's order).

    After decoding, not before it: the candidates' distribution, and so the decoder the dev sets chose, stay as they
    were (trimming the candidates first merged them and cost the previous default 1.2 dev F1)."""
    bounds = np.asarray([(a.start, a.end) for a in answers], dtype=np.int64).reshape(-1, 2)
    starts, ends = trim_spans(context, bounds[:, 0], bounds[:, 1])
    merged: dict[tuple[int, int], Answer] = {}
    for answer, start, end in zip(answers, starts.tolist(), ends.tolist()):
        if not any(map(is_word_character, context[start:end])):
            continue
        if (start, end) in merged:
            kept = merged[start, end]
            merged[start, end] = dataclasses.replace(kept, score=kept.score + answer.score)
        else:
            merged[start, end] = Answer(context[start:end], start, end, answer.score)
    found = list(merged.values())
    return sorted(found, key=lambda a: -a.score) if by_score else found


class QAModel:
    """A question-answering model with its tokenizer, preprocessing and window settings."""

    def __init__(self, model, tokenizer, preprocessing: str, settings: QASettings = QASettings(),
                 whole_words: bool = True, sentence_idf: KeyIDF | None = None, reader: CompanionReader | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.preprocessing = QAPreprocessing(preprocessing)
        self.settings = settings
        self.whole_words = whole_words  # widen answers to whole words of the original context (snap_to_words)
        if settings.sentence_prior > 0 and sentence_idf is None:
            raise ConfigError(f"sentence_prior {settings.sentence_prior} needs the IDF table ({SENTENCE_IDF_FILE})")
        self.sentence_idf = sentence_idf
        if settings.reader_weight > 0 and reader is None:
            raise ConfigError(f"reader_weight {settings.reader_weight} needs the model's reader ({COMPANION_DIR}/)")
        self.reader = reader

    @classmethod
    def load(cls, path_or_hub_id: str | Path, *, preprocessing: str | None = None, device: str = "cpu",
             whole_words: bool = True) -> "QAModel":
        """A local QA model dir or a hub id; `preprocessing` is required when the model has no metadata.

        Everything that can be checked without the weights (device, stored settings) is checked before they load;
        then the weights must fit their config and the tokenizer files must be there, with one token per embedding.
        """
        from transformers import AutoModelForQuestionAnswering

        device = torch_device(device)
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
        config = model_config(path_or_hub_id) if Path(path_or_hub_id).is_dir() else {}
        settings = QASettings.from_metadata(metadata, Path(str(path_or_hub_id)) / METADATA_FILE,
                                            config.get("max_position_embeddings"))
        import torch

        # On CPU, fp16-stored weights (a shipped model) compute in fp32: CPU fp16 matmuls are slow or missing.
        dtype = torch.float32 if device.type == "cpu" else "auto"
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
            import logging

            logging.getLogger(__name__).warning(warning)
        prepare_qa_model(model, question_overlap=settings.question_overlap, source=path_or_hub_id)
        idf = _read_sentence_idf(path_or_hub_id, required=settings.sentence_prior > 0)
        reader = load_companion(path_or_hub_id, preprocessing, required=settings.reader_weight > 0)
        return cls(model.to(device).eval(), tokenizer, preprocessing, settings, whole_words, idf, reader)

    def predict(self, examples: Iterable[dict[str, Any]], batch_size: int = 32, top_k: int = 1,
                allow_no_answer: bool = False) -> list[list[Answer]]:
        """Answers for each example ({"question", "context"}, other keys ignored), best first, at most top_k; with
        `allow_no_answer`, none for the examples the model judges unanswerable."""
        if top_k < 1:
            raise ConfigError(f"top_k must be ≥ 1, got {top_k}")
        examples = list(examples)
        if not examples:
            return []
        prepared = [self._prepare(i, example) for i, example in enumerate(examples)]
        windows = self.windows(prepared)
        has_context = np.zeros(len(examples), dtype=bool)
        has_context[windows.example_index[(windows.offsets[:, :, 0] >= 0).any(axis=1)]] = True
        if not has_context.all():
            index = int(np.flatnonzero(~has_context)[0])
            raise InputError(
                f"the context yields no tokens after {self.preprocessing.name!r} preprocessing and tokenization",
                field=f"example {examples[index].get('id', index)}",
            )
        start_logits, end_logits = self.window_logits(windows, batch_size)
        answers = self.decode(prepared, windows, start_logits, end_logits, top_k)
        if allow_no_answer:
            margins = self.null_margins(prepared, windows, start_logits, end_logits)
            answers = [[] if margin > self.settings.null_score_diff_threshold else found
                       for found, margin in zip(answers, margins)]
        return answers

    def null_margins(self, prepared, windows: Windows, start_logits: np.ndarray, end_logits: np.ndarray) -> np.ndarray:
        """Per example: no-answer score − best span score (postprocess.null_margins)."""
        return null_margins(start_logits, end_logits, windows.offsets, windows.example_index,
                            n_examples=len(prepared), max_answer_tokens=self.settings.max_answer_tokens)

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

    def decode(self, prepared, windows: Windows, start_logits: np.ndarray, end_logits: np.ndarray, top_k: int = 1,
               settings: QASettings | None = None, reader_scores=None) -> list[list[Answer]]:
        """Window logits → answers in original-context coordinates (`settings` overrides the decoding settings;
        `reader_scores`: `self.reader_scores(prepared)` when the caller decodes the same examples many times)."""
        settings = settings or self.settings
        pool = max(top_k, settings.n_best)
        answers = []
        for (_, aligned), ranked in zip(prepared, self.candidates(prepared, windows, start_logits, end_logits, top_k,
                                                                  settings, reader_scores)):
            if settings.decoding == "expected-f1" and ranked:
                order, _ = rank_by_expected_f1(aligned.original, [(a.start, a.end) for a in ranked],
                                               [a.score for a in ranked], settings.expected_f1_temperature)
                ranked = [ranked[i] for i in order]
            ranked = with_probabilities(ranked[:pool])
            if self.whole_words:
                ranked = trimmed(aligned.original, ranked, by_score=settings.decoding == "max-score")
            if settings.calibration is not None:
                ranked = [dataclasses.replace(a, score=settings.calibration(a.score)) for a in ranked]
            answers.append(ranked[:top_k])
        return answers

    def candidates(self, prepared, windows: Windows, start_logits: np.ndarray, end_logits: np.ndarray,
                   top_k: int = 1, settings: QASettings | None = None, reader_scores=None,
                   every_candidate: bool = False) -> list[list[Answer]]:
        """Per example, its distinct candidate spans of the original context, best score first, with the score the
        settings give them (start + end logit, sentence prior, reader), before the expected-F1 order: what `decode`
        chooses from. Max-score decoding keeps only the best few, unless `every_candidate` (as expected-F1 weighs
        them: up to EXPECTED_F1_CANDIDATES)."""
        settings = settings or self.settings
        sentences = [sentence_spans(aligned.text) for _, aligned in prepared] \
            if settings.sentence_prior > 0 or settings.within_sentence else None
        start_bonus = self.sentence_bonus(prepared, settings.sentence_prior, sentences) \
            if settings.sentence_prior > 0 else None
        end_bonus = None
        if settings.reader_weight > 0:
            if self.reader is None:
                raise ConfigError(f"reader_weight {settings.reader_weight} needs the model's reader ({COMPANION_DIR}/)")
            reader_scores = reader_scores if reader_scores is not None else self.reader_scores(prepared)
            weight = np.float32(settings.reader_weight)
            starts = [weight * s for s, _ in reader_scores]
            start_bonus = starts if start_bonus is None else [a + b for a, b in zip(start_bonus, starts)]
            end_bonus = [weight * e for _, e in reader_scores]
        # The probabilities are a softmax over `pool` distinct spans, whatever top_k is. Distinct preprocessed spans
        # can map back to one original span (a `+` marker token, a placeholder): decode a few more than needed.
        pool = max(top_k, settings.n_best)
        limit = 4 * pool
        if settings.decoding == "expected-f1" or every_candidate:
            limit = max(limit, EXPECTED_F1_CANDIDATES)
        spans = decode_spans(
            start_logits,
            end_logits,
            windows.offsets,
            windows.example_index,
            n_examples=len(prepared),
            n_best=settings.n_best,
            max_answer_tokens=settings.max_answer_tokens,
            limit=limit,
            start_bonus=start_bonus,
            end_bonus=end_bonus,
            sentence_index=[sentence_numbers(aligned.text, found) for (_, aligned), found in zip(prepared, sentences)]
            if settings.within_sentence else None,
        )
        candidates = []
        for (_, aligned), found_spans in zip(prepared, spans):
            found_spans = [c for c in found_spans if c[1] > c[0]]  # an empty span maps to nothing
            bounds = np.asarray([c[:2] for c in found_spans], dtype=np.int64).reshape(-1, 2)
            first, last = aligned.to_original_many(bounds[:, 0], bounds[:, 1])
            if self.whole_words:
                first, last = snap_spans_to_words(aligned.original, first, last)
            found: dict[tuple[int, int], Answer] = {}
            for start, end, (_, _, score) in zip(first.tolist(), last.tolist(), found_spans):
                if end > start and (start, end) not in found:
                    found[start, end] = Answer(aligned.original[start:end], start, end, score)
                    if len(found) == pool and settings.decoding == "max-score" and not every_candidate:
                        break
            candidates.append(list(found.values()))
        return candidates

    def reader_scores(self, prepared) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per example, the reader's log p(start), log p(end) per preprocessed-context character."""
        return [self.reader.char_log_probs(question, aligned.text) for question, aligned in prepared]

    def sentence_bonus(self, prepared, weight: float, sentences=None) -> list[np.ndarray]:
        """Per example, per preprocessed-context character: `weight` × its sentence's share of the best overlap."""
        if self.sentence_idf is None:
            raise ConfigError(f"a sentence prior needs the IDF table ({SENTENCE_IDF_FILE}) of the model")
        bonus = []
        for i, (question, aligned) in enumerate(prepared):
            spans = sentences[i] if sentences is not None else sentence_spans(aligned.text)
            scores = np.asarray(sentence_overlap_scores(question, aligned.text, self.sentence_idf, spans))
            per_char = np.zeros(len(aligned.text) + 1, dtype=np.float32)
            if scores.size and scores.max() > 0:
                for (start, end), score in zip(spans, scores / scores.max()):
                    per_char[start:end] = weight * score
            bonus.append(per_char)
        return bonus

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


def collate(windows: Windows, rows, pad_id: int, labels: bool = False, multiple: int = 1) -> dict:
    """Right-padded tensors for the given window rows, their width rounded up to a `multiple`.

    Training pads to multiples of 32 so that a run sees a handful of batch shapes: the CPU kernels keep memory for
    every new shape (pretraining's batches are shaped the same way, for the same reason).
    """
    import torch

    length = max(len(windows.input_ids[r]) for r in rows)
    length = -(-length // multiple) * multiple
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


def _read_sentence_idf(path_or_hub_id: str | Path, required: bool) -> KeyIDF | None:
    """The model's IDF table; None when it has none and its settings do not need one."""
    if Path(path_or_hub_id).is_dir():
        path = Path(path_or_hub_id) / SENTENCE_IDF_FILE
        if not os.path.lexists(path) and not required:
            return None
    else:
        from huggingface_hub import hf_hub_download

        try:
            path = Path(hf_hub_download(str(path_or_hub_id), SENTENCE_IDF_FILE))
        except Exception as exc:  # offline or absent: only an error when the settings need the table
            if required:
                raise ConfigError(f"{path_or_hub_id}: cannot fetch {SENTENCE_IDF_FILE}, which its settings need "
                                  f"(sentence_prior > 0): {exc}") from exc
            return None
    try:
        # read_json_file: only a bounded regular file (a FIFO or /dev/zero in its place must not hang or fill memory)
        return KeyIDF.from_json(read_json_file(path))
    except InputError as exc:
        raise ConfigError(f"cannot read the sentence-prior IDF table: {exc}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{path}: cannot read the sentence-prior IDF table ({exc})") from exc


def _read_metadata(path_or_hub_id: str | Path) -> dict[str, Any]:
    if Path(path_or_hub_id).is_dir():
        return read_metadata(path_or_hub_id, missing_ok=True)
    try:
        from huggingface_hub import hf_hub_download

        downloaded = Path(hf_hub_download(str(path_or_hub_id), METADATA_FILE))
    except Exception:  # offline, no such repo, or a hub model without our metadata: the caller must say
        return {}
    return read_metadata(downloaded.parent)

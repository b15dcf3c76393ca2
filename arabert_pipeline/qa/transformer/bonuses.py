"""What a span's score may add to its start + end logits besides the model, each weighted by a setting chosen on
dev (settings.py) and computed per character of the preprocessed context, so that decode.py adds it to any span:

- the sentence prior (`sentence_prior` λ > 0): λ × the IDF-weighted question overlap of the span's sentence / the best
  sentence's (overlap.py), a lexical prior on which sentence holds the answer. The IDF is counted on the fine-tuning
  contexts and stored beside the model (`SENTENCE_IDF_FILE`);
- the reader (`reader_weight` w > 0): w × (log p(start word) + log p(end word)) under the DrQA reader stored beside
  the model (`reader/`, companion.py).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ...artifacts.reads import read_json_file
from ...errors import ConfigError, InputError
from ..overlap import KeyIDF, sentence_overlap_scores, sentence_spans

SENTENCE_IDF_FILE = "sentence_idf.json"


def read_sentence_idf(path_or_hub_id: str | os.PathLike, required: bool) -> KeyIDF | None:
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


def sentence_bonus(prepared, idf: KeyIDF | None, weight: float, sentences=None) -> list[np.ndarray]:
    """Per example, per preprocessed-context character: `weight` × its sentence's share of the best overlap."""
    if idf is None:
        raise ConfigError(f"a sentence prior needs the IDF table ({SENTENCE_IDF_FILE}) of the model")
    bonus = []
    for i, (question, aligned) in enumerate(prepared):
        spans = sentences[i] if sentences is not None else sentence_spans(aligned.text)
        scores = np.asarray(sentence_overlap_scores(question, aligned.text, idf, spans))
        per_char = np.zeros(len(aligned.text) + 1, dtype=np.float32)
        if scores.size and scores.max() > 0:
            for (start, end), score in zip(spans, scores / scores.max(), strict=True):
                per_char[start:end] = weight * score
        bonus.append(per_char)
    return bonus


def reader_scores(prepared, reader) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per example, the reader's log p(start), log p(end) per preprocessed-context character (unweighted)."""
    return [reader.char_log_probs(question, aligned.text) for question, aligned in prepared]

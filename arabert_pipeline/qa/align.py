"""Exact alignment between original QA text and the model's preprocessed text, through offset maps.

The model sees preprocessed text (normalized, maybe Farasa-segmented); gold answers and predictions live in the
original context. `Preprocessor.preprocess_with_offsets` gives, for every output character, the half-open span of the
original text it comes from, so a gold span [a, b) maps to the output characters whose source overlaps it, and a
predicted output span maps back to the union of its characters' sources. No fuzzy search: an answer either maps
through the offsets or is reported as unaligned. AlignedText, the offset map itself, is every task's
(finetuning/offsets.py).
"""
from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from ..errors import InputError
from ..finetuning.offsets import AlignedText, preprocess_aligned

# The contexts' characters the cache keeps, the least recently asked dropped first: a SQuAD file lists a context's
# questions together, so a cache this size hits as often as an unbounded one did, whose memory grew with every new
# context a server was sent (each kept with its offsets and tables: up to ~55 bytes a character, ~11 MB in all).
CONTEXT_CACHE_CHARS = 200_000


class QAPreprocessing:
    """The model's preprocessing applied to contexts (with offsets, cached: contexts repeat across questions)."""

    def __init__(self, name: str, preprocessor=None):
        """`preprocessor`: an object with preprocess / preprocess_with_offsets; default `Preprocessor(name)`."""
        self.name = name
        # "none" is the identity: its offsets are built as arrays directly instead of a per-character list.
        if preprocessor is None and name != "none":
            preprocessor = _load_preprocessor(name)
        self._preprocessor = preprocessor
        self._contexts: OrderedDict[str, AlignedText] = OrderedDict()
        self.cached_chars = 0

    def question(self, text: str) -> str:
        return text if self._preprocessor is None else self._preprocessor.preprocess(text)

    def context(self, text: str) -> AlignedText:
        aligned = self._contexts.get(text)
        if aligned is not None:
            self._contexts.move_to_end(text)
            return aligned
        aligned = self._contexts[text] = self._align(text)
        self.cached_chars += len(text)
        while self.cached_chars > CONTEXT_CACHE_CHARS and len(self._contexts) > 1:
            dropped, _ = self._contexts.popitem(last=False)
            self.cached_chars -= len(dropped)
        return aligned

    def _align(self, text: str) -> AlignedText:
        return preprocess_aligned(text, self._preprocessor, self.name)


def _load_preprocessor(name: str):
    from ..preprocess import Preprocessor

    return Preprocessor(name)


@dataclasses.dataclass
class AlignmentReport:
    """How many gold answers map through the preprocessing, and which do not."""

    preprocessing: str
    answers: int = 0  # answers whose text is at answer_start in the original context
    aligned: int = 0  # ... that map to a preprocessed span keeping at least half of the answer
    exact: int = 0  # ... whose preprocessed span maps back to exactly the original span
    not_in_context: int = 0  # answers whose text is not at answer_start (kept by the data policy): not alignable
    unaligned_ids: list[str] = dataclasses.field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.aligned / self.answers if self.answers else 1.0

    def summary(self) -> str:
        text = (
            f"alignment through {self.preprocessing!r}: {self.aligned}/{self.answers} answers "
            f"({100 * self.rate:.2f}%), "
            f"{self.exact} map back to exactly the original span"
        )
        if self.not_in_context:
            text += f"; {self.not_in_context} gold answer(s) are not in their context and cannot be aligned"
        if self.unaligned_ids:
            text += f"; unaligned question ids: {', '.join(self.unaligned_ids[:20])}"
        return text


def align_examples(
    examples: Iterable[dict[str, Any]], preprocessing: QAPreprocessing
) -> tuple[list[dict[str, Any]], AlignmentReport]:
    """Preprocess each example and map its gold answers into the preprocessed context.

    Returns dicts {id, question, aligned: AlignedText, spans: [(start, end) in aligned.text per aligned answer]}
    and the report. Examples keep their place even when no answer aligns (spans == []).
    """
    report = AlignmentReport(preprocessing.name)
    out: list[dict[str, Any]] = []
    for example in examples:
        qid = str(example.get("id", len(out)))
        context, question = example.get("context"), example.get("question")
        if not isinstance(context, str) or not context.strip():
            raise InputError("empty or missing context", field=f"question {qid}")
        if not isinstance(question, str) or not question.strip():
            raise InputError("empty or missing question", field=f"question {qid}")
        aligned = preprocessing.context(context)
        spans = []
        answers = example.get("answers") or {"text": [], "answer_start": []}
        for text, start in zip(answers["text"], answers["answer_start"], strict=True):
            end = start + len(text)
            if context[start:end] != text:
                report.not_in_context += 1
                continue
            report.answers += 1
            span = aligned.to_preprocessed(start, end)
            wanted = _trim(context, start, end)
            covered = aligned.to_original(*span) if span else (0, 0)
            # AraBERT preprocessing deletes characters outside its whitelist (Chinese, Greek, Hebrew...): an answer
            # that keeps less than half of itself (e.g. "Ἀλέξανδρος ὁ Μέγας؛" → "؛") would be a wrong label.
            if span is None or 2 * (covered[1] - covered[0]) < wanted[1] - wanted[0]:
                if qid not in report.unaligned_ids:
                    report.unaligned_ids.append(qid)
                continue
            report.aligned += 1
            report.exact += covered == wanted
            spans.append(span)
        out.append({"id": qid, "question": preprocessing.question(question), "aligned": aligned, "spans": spans})
    return out, report


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end

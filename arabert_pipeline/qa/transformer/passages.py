"""Answers from passages: a long context, or the hits of an index, read a few passages at a time.

A QA model reads a context window by window, so its time grows with the context, and the score that picks one answer
across windows was never trained to tell a paragraph about the question from one about something else: a document of
11,000 characters cost 42 times a paragraph's time and a fifth of its F1 (issue 59). So, as DrQA and every open-domain
reader since, retrieval comes first:

- a context of at most `long_context_windows` windows is read whole, as it always was;
- a longer one is split into passages (retrieval/passages.py), the passages ranked against the question by BM25
  (retrieval/index.py `rank_passages`), and only the best `passages_read` of them are read, each as a context of its
  own;
- an index's hits (`Index.search`) are read the same way (`answer_from_index`).

One answer is then chosen across the passages read: the passage of highest `z(BM25) + passage_null_weight ×
z(−null margin)`, the two z-scored over the passages read (the null margin is the model's no-answer score minus its best
span's, which fine-tuning taught on windows without the answer), and the answers of that passage first. Chosen on dev
(docs/experiments/documents.md: arcd-dev and MLQA-ar dev, each question's article among five others): the null margin
adds 2.1 F1 [+0.5, +3.7] over BM25's first passage alone, and five passages read are level with three for half as
much time again.

An answer keeps the score its passage gave it (the probability that it is right, for a calibrated model); its offsets
are into the context (or the hit's document) as given.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .decode import Answer

if TYPE_CHECKING:
    from ...retrieval.index import Hit, Index
    from .decode import Logits
    from .features import Windows
    from .settings import QASettings


class PassageReader(Protocol):
    """What reading by passages asks of a QA model (model.QAModel, which calls into this module, has it all): the
    model is named by its interface so that this module does not import the one that imports it."""

    settings: QASettings

    def prepare(self, examples: list[dict[str, Any]]) -> list[tuple[str, Any]]: ...

    def windows(self, prepared: Any) -> Windows: ...

    def logits(self, examples: list[dict[str, Any]], batch_size: int = 32) -> Logits: ...

    def decode(self, logits: Logits, top_k: int = 1) -> list[list[Answer]]: ...

    def null_margins(self, logits: Logits) -> np.ndarray: ...

    def predict_prepared(self, examples: list[dict[str, Any]], prepared: Any, windows: Windows, batch_size: int,
                         top_k: int) -> tuple[list[list[Answer]], np.ndarray]: ...


@dataclasses.dataclass(frozen=True)
class PassageRead:
    """What reading one passage gave: its answers (offsets into the passage's document), the model's null margin on
    it, and the hit it came from."""

    hit: Hit
    answers: list[Answer]
    null_margin: float


def read_hits(model: PassageReader, questions: Sequence[str], hits: Sequence[Sequence[Hit]], batch_size: int,
              top_k: int) -> list[list[PassageRead]]:
    """Each question's hits read by `model`, all passages batched together: per question, per hit, its answers (at
    most top_k, offsets moved into the hit's document) and null margin."""
    examples = [{"id": f"{q}:{h}", "question": question, "context": hit.text}
                for q, (question, found) in enumerate(zip(questions, hits, strict=True))
                for h, hit in enumerate(found)]
    if not examples:
        return [[] for _ in questions]
    logits = model.logits(examples, batch_size)
    answers = model.decode(logits, top_k)
    margins = model.null_margins(logits)
    reads: list[list[PassageRead]] = []
    row = 0
    for found in hits:
        per_question = []
        for hit in found:
            shift = hit.passage.start
            moved = [dataclasses.replace(a, start=a.start + shift, end=a.end + shift) for a in answers[row]]
            per_question.append(PassageRead(hit, moved, float(margins[row])))
            row += 1
        reads.append(per_question)
    return reads


def passage_order(reads: Sequence[PassageRead], null_weight: float) -> list[int]:
    """The passages read for one question, best first: by z(BM25) + null_weight × z(−null margin) over them (module
    docstring); ties by retrieval rank."""
    if len(reads) < 2:
        return list(range(len(reads)))
    bm25 = np.asarray([r.hit.score for r in reads], dtype=np.float64)
    margin = -np.asarray([r.null_margin for r in reads], dtype=np.float64)
    combined = _z(bm25) + null_weight * _z(margin)
    return [int(i) for i in np.lexsort((np.arange(len(reads)), -combined))]


def _z(values: np.ndarray) -> np.ndarray:
    spread = values.std()
    return (values - values.mean()) / spread if spread > 0 else np.zeros_like(values)


def chosen_answers(reads: Sequence[PassageRead], null_weight: float, top_k: int
                   ) -> tuple[list[tuple[Answer, PassageRead]], PassageRead | None]:
    """Up to top_k (answer, its passage) pairs, the best passage's answers first, then the next passage's; and the best
    passage (None when nothing was read). A span found in two overlapping passages counts once."""
    order = passage_order(reads, null_weight)
    found: list[tuple[Answer, PassageRead]] = []
    seen: set[tuple[int, int, int]] = set()
    for index in order:
        read = reads[index]
        for answer in read.answers:
            key = (read.hit.passage.document, answer.start, answer.end)
            if key not in seen:
                seen.add(key)
                found.append((answer, read))
        if len(found) >= top_k:
            break
    return found[:top_k], (reads[order[0]] if order else None)


def answer_long_contexts(model: PassageReader, examples: list[dict[str, Any]], batch_size: int, top_k: int
                         ) -> tuple[list[list[Answer]], np.ndarray]:
    """`QAModel.predict_with_margins` for a list of examples: those whose context spans at most
    `long_context_windows` windows read whole, the others by their best passages (module docstring), whose chosen
    passage gives the null margin (infinite where nothing was read)."""
    from ...retrieval.index import rank_passages

    settings = model.settings
    prepared = model.prepare(examples)
    windows = model.windows(prepared)
    long_mask = read_by_passages(model, prepared, windows)
    whole = np.flatnonzero(~long_mask)
    if len(whole) == len(examples):
        return model.predict_prepared(examples, prepared, windows, batch_size, top_k)
    results: list[list[Answer]] = [[] for _ in examples]
    margins = np.full(len(examples), np.inf)
    if len(whole):
        keep = np.flatnonzero(np.isin(windows.example_index, whole))
        part = windows.select(keep)
        part.example_index = np.searchsorted(whole, part.example_index)
        found, margins[whole] = model.predict_prepared([examples[i] for i in whole], [prepared[i] for i in whole],
                                                       part, batch_size, top_k)
        for i, answers in zip(whole.tolist(), found, strict=True):
            results[i] = answers
    long = np.flatnonzero(long_mask).tolist()
    hits = [rank_passages(examples[i]["question"], examples[i]["context"], passage_chars=settings.passage_chars,
                          k=settings.passages_read) for i in long]
    # A question that shares no term with any passage still gets the reader's answer: its first passages are read.
    hits = [found or leading_passages(examples[i]["context"], settings.passage_chars, settings.passages_read)
            for i, found in zip(long, hits, strict=True)]
    reads = read_hits(model, [examples[i]["question"] for i in long], hits, batch_size, top_k)
    for i, per_question in zip(long, reads, strict=True):
        context = examples[i]["context"]
        chosen, best = chosen_answers(per_question, settings.passage_null_weight, top_k)
        if best is not None:
            margins[i] = best.null_margin
        results[i] = [dataclasses.replace(answer, text=context[answer.start:answer.end]) for answer, _ in chosen]
    return results, margins


def read_by_passages(model: PassageReader, prepared: Sequence[tuple[str, Any]], windows: Windows) -> np.ndarray:
    """Per example (through `model.prepare` and `model.windows`): whether its context is long enough to be read by
    passages (more than `long_context_windows` windows) rather than whole."""
    counts = np.bincount(windows.example_index, minlength=len(prepared))
    return counts > model.settings.long_context_windows


def leading_passages(text: str, passage_chars: int, k: int) -> list[Hit]:
    """The first `k` passages of `text` that hold a letter or digit, as hits of score 0 (document "0"): what is read
    of a long context when no passage shares a term with the question."""
    from ...retrieval.index import Hit
    from ...retrieval.passages import split_passages

    passages = [p for p in split_passages(text, passage_chars) if any(map(str.isalnum, text[p.start:p.end]))]
    return [Hit(p, 0.0, "0", None, text[p.start:p.end]) for p in passages[:k]]


def answer_from_index(model: PassageReader, index: Index, questions: Sequence[str], batch_size: int, top_k: int,
                      allow_no_answer: bool) -> list[list[Answer]]:
    """Each question asked of `index` (retrieval/index.py): its best `passages_read` hits read and one answer chosen
    as for a long context; the answers name their document (`document`, `title`) and their offsets are into that
    document's text. With `allow_no_answer`, none when the chosen passage's null margin is above the model's
    `index_null_threshold` (chosen on dev with questions whose article is not in the collection)."""
    settings = model.settings
    hits = index.search_many(list(questions), k=settings.passages_read)
    reads = read_hits(model, questions, hits, batch_size, top_k)
    threshold = settings.index_null_threshold
    results: list[list[Answer]] = []
    for per_question in reads:
        chosen, best = chosen_answers(per_question, settings.passage_null_weight, top_k)
        if allow_no_answer and best is not None and best.null_margin > threshold:
            results.append([])
            continue
        answers = []
        for answer, read in chosen:
            text = index.document_text(read.hit.passage.document)
            answers.append(dataclasses.replace(answer, text=text[answer.start:answer.end], document=read.hit.document,
                                               title=read.hit.title, passage=read.hit.passage))
        results.append(answers)
    return results

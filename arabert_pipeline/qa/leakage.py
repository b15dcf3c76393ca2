"""Train/evaluation leakage: contexts or question-answer pairs of an evaluation set that also occur in training.

A published AraBERT recipe once trained on ARCD-test; this check refuses such runs before any training happens.
Texts are compared after a light normalization (diacritics, tatweel, punctuation, alef/yeh/teh-marbuta variants:
finetuning/leakage.py normalize, which the text tasks compare with too).
- Context leak: an evaluation context whose word 5-grams are at least half contained in a training context (or the
  other way round): an identical paragraph, or one that is an excerpt or an extension of the other.
- Question leak: a near-identical question (exact after normalization, or 80% of its word 3-grams shared) whose gold
  answers overlap (one contains the other). A generic question ("ما هو السرطان؟") asked of different paragraphs with
  different answers teaches nothing about the test answer, so it is not counted.
Note: the official ARCD split itself shares 14 paragraphs between arcd-train and arcd-test (5 identical, 9 excerpts:
the same Wikipedia articles were annotated twice), so the ARCD protocols need --drop-leaking-train or --allow-leakage.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any

from ..finetuning.leakage import normalize

CONTEXT_NGRAM, CONTEXT_THRESHOLD = 5, 0.5
QUESTION_NGRAM, QUESTION_THRESHOLD = 3, 0.8

def shingles(normalized: str, n: int) -> frozenset:
    words = normalized.split()
    if len(words) <= n:
        return frozenset([tuple(words)])
    return frozenset(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


@dataclasses.dataclass
class Leak:
    kind: str  # "context" or "question"
    eval_set: str
    eval_ids: list[str]  # evaluation questions concerned
    train_set: str
    train_ids: list[str]  # training questions concerned
    similarity: float
    text: str  # the evaluation context or question, for the report


@dataclasses.dataclass
class LeakageReport:
    leaks: list[Leak]

    @property
    def clean(self) -> bool:
        return not self.leaks

    def train_ids(self) -> set[tuple[str, str]]:
        """(training set, question id) of every training question involved in a leak."""
        return {(leak.train_set, qid) for leak in self.leaks for qid in leak.train_ids}

    def counts(self) -> dict[str, dict[str, int]]:
        """Per "train -> eval" pair: distinct evaluation contexts and questions leaked, evaluation questions hit."""
        groups: dict[str, list[Leak]] = collections.defaultdict(list)
        for leak in self.leaks:
            groups[f"{leak.train_set} -> {leak.eval_set}"].append(leak)
        return {
            key: {
                "contexts": len({leak.text for leak in leaks if leak.kind == "context"}),
                "questions": len({leak.eval_ids[0] for leak in leaks if leak.kind == "question"}),
                "eval_questions_affected": len({qid for leak in leaks for qid in leak.eval_ids}),
            }
            for key, leaks in groups.items()
        }

    def summary(self, examples: int = 3) -> str:
        if self.clean:
            return "no leakage between training and evaluation data"
        lines = []
        for key, entry in self.counts().items():
            lines.append(
                f"{key}: {entry['contexts']} shared context(s), {entry['questions']} shared question(s), "
                f"{entry['eval_questions_affected']} evaluation question(s) affected"
            )
            shown = [leak for leak in self.leaks if f"{leak.train_set} -> {leak.eval_set}" == key]
            for leak in shown[:examples]:
                snippet = leak.text if len(leak.text) <= 80 else leak.text[:77] + "..."
                lines.append(
                    f"  {leak.kind} (similarity {leak.similarity:.2f}), eval ids {', '.join(leak.eval_ids[:3])} / "
                    f"train ids {', '.join(leak.train_ids[:3])}: {snippet}"
                )
        return "\n".join(lines)


def find_leakage(
    train_sets: list[tuple[str, list[dict[str, Any]]]], eval_sets: list[tuple[str, list[dict[str, Any]]]]
) -> LeakageReport:
    """Compare every (name, examples) training set with every evaluation set."""
    leaks: list[Leak] = []
    for train_name, train in train_sets:
        contexts = _ShingleIndex(CONTEXT_NGRAM)
        questions = _ShingleIndex(QUESTION_NGRAM)
        for example in train:
            contexts.add(normalize(example["context"]), example)
            questions.add(normalize(example["question"]), example)
        for eval_name, evaluation in eval_sets:
            leaks += _context_leaks(contexts, train_name, eval_name, evaluation)
            leaks += _question_leaks(questions, train_name, eval_name, evaluation)
    return LeakageReport(leaks)


def _context_leaks(index: _ShingleIndex, train_name: str, eval_name: str, evaluation: list) -> list[Leak]:
    by_context: dict[str, list] = collections.defaultdict(list)
    for example in evaluation:
        by_context[example["context"]].append(example)
    leaks = []
    for context, examples in by_context.items():
        for train_examples, similarity in index.matches(normalize(context), CONTEXT_THRESHOLD):
            leaks.append(
                Leak("context", eval_name, [e["id"] for e in examples], train_name,
                     [e["id"] for e in train_examples], similarity, context)
            )
    return leaks


def _question_leaks(index: _ShingleIndex, train_name: str, eval_name: str, evaluation: list) -> list[Leak]:
    leaks = []
    for example in evaluation:
        answers = {normalize(t) for t in example["answers"]["text"]}
        for train_examples, similarity in index.matches(normalize(example["question"]), QUESTION_THRESHOLD):
            same_answer = [
                e for e in train_examples
                if any(_overlap(a, normalize(t)) for a in answers for t in e["answers"]["text"])
            ]
            if same_answer:
                leaks.append(
                    Leak("question", eval_name, [example["id"]], train_name,
                         [e["id"] for e in same_answer], similarity, example["question"])
                )
    return leaks


def _overlap(a: str, b: str) -> bool:
    return bool(a) and bool(b) and (a in b or b in a)


class _ShingleIndex:
    """Distinct normalized texts, their n-gram sets and an inverted index n-gram → texts."""

    def __init__(self, n: int):
        self.n = n
        self.texts: dict[str, int] = {}
        self.shingles: list[frozenset] = []
        self.examples: list[list[dict]] = []
        self.postings: dict[tuple, list[int]] = collections.defaultdict(list)

    def add(self, normalized: str, example: dict) -> None:
        if not normalized:
            return
        i = self.texts.get(normalized)
        if i is None:
            i = self.texts[normalized] = len(self.shingles)
            grams = shingles(normalized, self.n)
            self.shingles.append(grams)
            self.examples.append([])
            for gram in grams:
                self.postings[gram].append(i)
        self.examples[i].append(example)

    def matches(self, normalized: str, threshold: float) -> list[tuple[list[dict], float]]:
        """Indexed texts sharing at least `threshold` of the smaller n-gram set with `normalized` (an identical text
        shares all of them; an exact match does not end the search, since an extension of the text may be indexed
        too)."""
        if not normalized:
            return []
        grams = shingles(normalized, self.n)
        shared = collections.Counter(i for gram in grams for i in self.postings.get(gram, ()))
        found = []
        for i, count in shared.items():
            similarity = count / min(len(grams), len(self.shingles[i]))
            if similarity >= threshold:
                found.append((self.examples[i], similarity))
        return found

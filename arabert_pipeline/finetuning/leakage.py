"""Leakage between a run's training sets and the sets it is judged on, for tasks whose examples are texts
(classification: a tweet; NER: a sentence's words): an example of a guarded set (dev, evaluation, held-out) whose text
also occurs in training. Texts are compared after `normalize`, which QA's leakage finder (qa/leakage.py) compares
contexts and questions with too: diacritics, tatweel, punctuation and alef/yeh/teh-marbuta variants do not make a
tweet new. The report has the interface finetuning/sets.py applies the leakage policy through (`clean`, `summary`,
`train_ids`, `counts`).
"""
from __future__ import annotations

import collections
import dataclasses
import re
import unicodedata
from collections.abc import Callable
from typing import Any

from ..preprocess.normalize import LETTER_VARIANTS

_MARKS = re.compile("[\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed\u0640]")  # diacritics, Quranic marks, tatweel
_NON_WORD = re.compile(r"[\W_]+")


def normalize(text: str) -> str:
    text = _MARKS.sub("", unicodedata.normalize("NFKC", text)).translate(LETTER_VARIANTS).lower()
    return " ".join(_NON_WORD.sub(" ", text).split())


@dataclasses.dataclass
class TextLeak:
    eval_set: str
    eval_ids: list[str]
    train_set: str
    train_ids: list[str]
    text: str  # the guarded example's text, for the report


@dataclasses.dataclass
class TextLeakageReport:
    leaks: list[TextLeak]

    @property
    def clean(self) -> bool:
        return not self.leaks

    def train_ids(self) -> set[tuple[str, str]]:
        return {(leak.train_set, tid) for leak in self.leaks for tid in leak.train_ids}

    def counts(self) -> dict[str, dict[str, int]]:
        """Per "train -> guarded set": distinct texts shared, guarded examples hit, training examples involved."""
        groups: dict[str, list[TextLeak]] = collections.defaultdict(list)
        for leak in self.leaks:
            groups[f"{leak.train_set} -> {leak.eval_set}"].append(leak)
        return {key: {"texts": len(leaks), "eval_examples_affected": sum(len(x.eval_ids) for x in leaks),
                      "train_examples": sum(len(x.train_ids) for x in leaks)}
                for key, leaks in groups.items()}

    def summary(self, examples: int = 3) -> str:
        if self.clean:
            return "no leakage between training and evaluation data"
        lines = []
        for key, entry in self.counts().items():
            lines.append(f"{key}: {entry['texts']} shared text(s), {entry['eval_examples_affected']} evaluation "
                         f"example(s) affected, {entry['train_examples']} training example(s) involved")
            shown = [leak for leak in self.leaks if f"{leak.train_set} -> {leak.eval_set}" == key]
            for leak in shown[:examples]:
                snippet = leak.text if len(leak.text) <= 80 else leak.text[:77] + "..."
                lines.append(f"  eval ids {', '.join(leak.eval_ids[:3])} / train ids "
                             f"{', '.join(leak.train_ids[:3])}: {snippet}")
        return "\n".join(lines)


def text_leakage_finder(text_of: Callable[[dict[str, Any]], str]):
    """A leakage finder for finetuning.sets.read_labelled_sets: examples are compared on normalize(text_of(example));
    a text that normalizes to nothing (only punctuation or emoji) is never a leak."""

    def find(train_sets: list[tuple[str, list[dict]]], guarded: list[tuple[str, list[dict]]]) -> TextLeakageReport:
        leaks = []
        for train_name, train in train_sets:
            index: dict[str, list[str]] = collections.defaultdict(list)
            for example in train:
                key = normalize(text_of(example))
                if key:
                    index[key].append(str(example["id"]))
            for eval_name, evaluation in guarded:
                hits: dict[str, list[str]] = collections.defaultdict(list)
                texts: dict[str, str] = {}
                for example in evaluation:
                    key = normalize(text_of(example))
                    if key in index:
                        hits[key].append(str(example["id"]))
                        texts.setdefault(key, text_of(example))
                leaks += [TextLeak(eval_name, ids, train_name, index[key], texts[key]) for key, ids in hits.items()]
        return TextLeakageReport(leaks)

    return find

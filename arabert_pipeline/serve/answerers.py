"""What the batcher's thread calls (batcher.py): the QA model, one variant per `decoding` (Answerer), and the text
tasks' models (TaskAnswerer); a pair the model cannot read fails alone, as a PairError. And their answers as JSON."""
from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..qa.transformer.settings import DECODINGS
from .admission import TokenCounter
from .batcher import Options, PairError

if TYPE_CHECKING:
    from ..pipeline.core import Pipeline


class Answerer:
    """The loaded Pipeline, one variant per `decoding`, called by the batcher's thread."""

    def __init__(self, pipeline: Pipeline):
        self.pipeline = pipeline
        self.count = TokenCounter(pipeline.preprocessing, pipeline.qa.tokenizer)
        own = pipeline.qa.settings.decoding
        self.variants: dict[str | None, Pipeline] = {None: pipeline}
        for name in DECODINGS:
            # As Pipeline(decoding=...) makes it, without a second model load: the model is shared.
            variant = pipeline
            if name != own:
                variant = copy.copy(pipeline)
                variant.qa = copy.copy(pipeline.qa)
                variant.qa.settings = dataclasses.replace(pipeline.qa.settings, decoding=name)
            self.variants[name] = variant

    def tokens(self, pairs: list[tuple[str, str]]) -> list[int]:
        """The tokens the model reads each pair as: its question's and context's, [CLS] and two [SEP]."""
        counts = self.count([text for pair in pairs for text in pair])
        return [counts[2 * i] + counts[2 * i + 1] + 3 for i in range(len(pairs))]

    def key(self, options: Options) -> Options:
        """Options that answer alike compare equal: decoding=None is the model's own decoder."""
        if options.decoding is None:
            return dataclasses.replace(options, decoding=self.pipeline.qa.settings.decoding)
        return options

    def __call__(self, options: Options, pairs: list[tuple[str, str]]) -> list:
        pipeline = self.variants[options.decoding]
        try:
            found = pipeline.answer([q for q, _ in pairs], [c for _, c in pairs], top_k=options.top_k,
                                    allow_no_answer=options.allow_no_answer)
        except InputError as exc:
            if len(pairs) == 1:  # Pipeline.answer names the argument it cannot read: question[0] or context[0]
                field = (exc.field or "context").split("[")[0]
                return [PairError(field, str(exc).removeprefix(f"{exc.field}: "))]
            # One pair the model cannot read (e.g. nothing left after preprocessing) fails alone.
            return [self(options, [pair])[0] for pair in pairs]
        if options.top_k == 1:
            return [[] if answer is None else [answer] for answer in found]
        return [list(answers) for answers in found]


def answer_json(answers) -> dict[str, Any]:
    return {"answers": [{"text": a.text, "start": a.start, "end": a.end, "score": a.score} for a in answers]}

class TaskAnswerer:
    """A text task's pipeline (pipeline/tasks.py) called by the batcher's thread, as Answerer is: its pairs are
    ("", text), its options' task "classify" or "tag"."""

    def __init__(self, name: str, pipeline):
        self.name, self.pipeline = name, pipeline
        self.count = TokenCounter(pipeline.preprocessing, pipeline.model.tokenizer)

    def tokens(self, pairs: list[tuple[str, str]]) -> list[int]:
        """The tokens the model reads each text as, with [CLS] and [SEP]."""
        return [n + 2 for n in self.count([text for _, text in pairs])]

    def __call__(self, options: Options, pairs: list[tuple[str, str]]) -> list:
        texts = [text for _, text in pairs]
        try:
            if self.name == "classify":
                # A list at every top_k: the labels of each text, best first.
                return [ranked[:options.top_k] for ranked in self.pipeline(texts, top_k=None)]
            return self.pipeline(texts)
        except InputError as exc:
            if len(pairs) == 1:  # the route names the field; the pipeline's name ("inputs[0]") is not the client's
                message = str(exc)
                return [PairError("", message[len(exc.field) + 2:] if exc.field and message.startswith(
                    f"{exc.field}: ") else message)]
            return [self(options, [pair])[0] for pair in pairs]


def task_json(name: str, found) -> dict[str, Any]:
    return {"labels": found} if name == "classify" else {"entities": found}

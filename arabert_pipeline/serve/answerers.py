"""What the batcher's thread calls (batcher.py): the QA model, one variant per `decoding`, answering pairs or asking
the collection (Answerer), and the text tasks' models (TaskAnswerer); a pair the model cannot read fails alone, as a
PairError. And their answers as JSON."""
from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..pipeline.core import answers_of
from ..qa.transformer.settings import DECODINGS
from .admission import TokenCounter
from .batcher import Options, PairError

if TYPE_CHECKING:
    from ..pipeline.core import Pipeline
    from ..qa.transformer.decode import Answer
    from ..retrieval.index import Index

# Options.task of a question asked of the collection (app.py's /v1/ask): its pair is (question, "").
ASK = "ask"


class Answerer:
    """The loaded Pipeline, one variant per `decoding`, called by the batcher's thread; with `index`, it also asks
    that collection (Options.task ASK)."""

    def __init__(self, pipeline: Pipeline, index: Index | None = None):
        self.pipeline, self.index = pipeline, index
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

    def passage_tokens(self, pairs: list[tuple[str, str]]) -> list[int]:
        """The tokens of each passage pair a collection question, pairs[0] = (question, ""), is read as: its passages
        found as Pipeline.answer(question, index=...) will find them (the same search of the same index), each counted
        as a (question, passage) pair. Runs in the counting thread (admission.py), beside the model's."""
        assert self.index is not None and len(pairs) == 1, "one collection question at a time"
        question = pairs[0][0]
        hits, = self.index.search_many([question], k=self.pipeline.qa.settings.passages_read)
        return self.tokens([(question, hit.text) for hit in hits])

    def key(self, options: Options) -> Options:
        """Options that answer alike compare equal: decoding=None is the model's own decoder."""
        if options.decoding is None:
            return dataclasses.replace(options, decoding=self.pipeline.qa.settings.decoding)
        return options

    def __call__(self, options: Options, pairs: list[tuple[str, str]]) -> list:
        """Per pair, its answers (a list of Answers; for a collection question, their JSON with the passage each was
        read from) or the PairError it alone raises."""
        pipeline = self.variants[options.decoding]
        asking = options.task == ASK
        try:
            if asking:
                found = pipeline.answer([q for q, _ in pairs], index=self.index, top_k=options.top_k,
                                        allow_no_answer=options.allow_no_answer)
            else:
                found = pipeline.answer([q for q, _ in pairs], [c for _, c in pairs], top_k=options.top_k,
                                        allow_no_answer=options.allow_no_answer)
        except InputError as exc:
            if len(pairs) == 1:  # Pipeline.answer names the argument it cannot read: question[0] or context[0]
                field = (exc.field or "context").split("[")[0]
                return [PairError(field, str(exc).removeprefix(f"{exc.field}: "))]
            # One pair the model cannot read (e.g. nothing left after preprocessing) fails alone.
            return [self(options, [pair])[0] for pair in pairs]
        lists = [answers_of(result) for result in found]
        if asking:  # here, not on the event loop: a passage's text is read from its document, of any length
            return [[self.collection_answer(answer) for answer in answers] for answers in lists]
        return lists

    def collection_answer(self, answer: Answer) -> dict[str, Any]:
        """An answer from the collection as /v1/ask sends it: its document's id and title, its offsets into that
        document's text, and the passage it was read from (offsets into the same text), for showing it in place."""
        assert self.index is not None and answer.passage is not None
        passage = answer.passage
        text = self.index.document_text(passage.document)[passage.start:passage.end]
        return {**_answer_fields(answer), "document": answer.document, "title": answer.title,
                "passage": {"text": text, "start": passage.start, "end": passage.end}}


def _answer_fields(answer: Answer) -> dict[str, Any]:
    return {"text": answer.text, "start": answer.start, "end": answer.end, "score": answer.score}


def answer_json(answers) -> dict[str, Any]:
    return {"answers": [_answer_fields(a) for a in answers]}

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

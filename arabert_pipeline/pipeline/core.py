"""`Pipeline`: answer Arabic questions from a context with a QA model, in three lines.

    from arabert_pipeline import Pipeline
    qa = Pipeline("arabert")                      # the default model shipped in arabert_pipeline/models/
    qa.answer("أين تقع البتراء؟", "تقع مدينة البتراء في جنوب الأردن.")   # Answer(text='جنوب الأردن', start=..., ...)

Windowing, preprocessing, span decoding and scores are QAModel's (qa/transformer/); this layer resolves the model name
(resolve.py), checks the user's input before it reaches the model (inputs.py), and chunks large batches.

Two backends run the model. A model dir holding `model.onnx` (written by `arabert-pipeline export-onnx`; the shipped
model has one) runs on ONNX Runtime + `tokenizers` (qa/transformer/onnx.py): neither torch nor transformers is imported,
and windows, decoding and answers are the torch path's. Anything else, a device other than the CPU, or
`backend="torch"` runs on torch + transformers (QAModel), which also trains.

The score of an answer is the same in `Pipeline` and `QAModel.predict`. With a model that carries a `calibration` (the
shipped one does) it is the probability that the answer is right (SOQAL F1 >= 0.5), as fitted on dev
(qa/transformer/calibration.py, docs/answering.md), and never higher than the score of the answer above it. Without
one it is the softmax of the start + end logits over the model's candidate spans for that question (its
max(n_best, top_k) best distinct spans over all of its windows; n_best = 20 by default): in (0, 1], the top-k answers
of one question sum to at most 1. Either is comparable across questions, unlike Hugging Face's pipeline score
(p_start · p_end within one window), which is not comparable across the windows of a long context.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import re
import warnings
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, overload

from ..artifacts.metadata import METADATA_FILE
from ..artifacts.models import torch_device
from ..errors import ConfigError, InputError
from .inputs import (  # noqa: F401 (re-exported: serve and the CLIs import them from here)
    BACKENDS,
    BUNDLED_MODELS,
    DEFAULT_MODEL,
    MAX_CONTEXT_CHARS,
    MAX_QUESTION_CHARS,
    Texts,
    check_inputs,
    check_positive,
    check_text,
    check_top_k,
    has_arabic_letter,
    surrogate_problem,
    text_problem,
    warn_non_arabic,
)
from .resolve import choose_backend, load_qa_model, model_prefers_int8, quantize_dynamic, resolve_model

if TYPE_CHECKING:
    from ..qa.transformer.decode import Answer
    from ..qa.transformer.model import QAModel
    from ..retrieval.index import Index

    # One question's result: its Answer (None if it has none) at top_k=1, else a list of up to top_k Answers.
    Result: TypeAlias = Answer | list[Answer] | None
    # One question's result as Hugging Face's pipeline writes it (`Pipeline.__call__`).
    Dicts: TypeAlias = dict[str, Any] | list[dict[str, Any]]

# Examples handed to QAModel.predict at once: large enough for length-sorted batches of windows to pad little,
# small enough that the per-window logits and offsets of a huge input list never sit in memory together.
EXAMPLES_PER_CHUNK = 512


class Pipeline:
    """A QA model with its preprocessing, answering (question, context) pairs; with `task="sentiment"` / `"ner"` (or a
    task model's name or dir), the task's pipeline instead (pipeline/tasks.py)."""

    # Any: with a task (or a task model), a task pipeline instead, which is no Pipeline. A type checker types the call
    # `Pipeline(...)` by __init__ anyway: as a Pipeline.
    def __new__(cls, model: str | os.PathLike[str] | QAModel = DEFAULT_MODEL, *args: Any, task: str | None = None,
                **options: Any) -> Any:
        from .tasks import is_task_request, task_pipeline

        if is_task_request(model, task):
            if args:
                raise ConfigError("pass a task pipeline's options as keywords")
            return task_pipeline(model, task, **options)
        return super().__new__(cls)

    def __init__(
        self,
        model: str | os.PathLike[str] | QAModel = DEFAULT_MODEL,
        *,
        task: str | None = None,
        preprocessing: str | None = None,
        device: str = "cpu",
        batch_size: int = 32,
        quantize: bool | None = None,
        whole_words: bool = True,
        backend: str = "auto",
        decoding: str | None = None,
        max_context_chars: int = MAX_CONTEXT_CHARS,
        max_question_chars: int = MAX_QUESTION_CHARS,
    ) -> None:
        """`model`: a bundled name ("arabert"), a QA model dir made by this project, a hub id (with `preprocessing`
        unless the hub repo has an arabert_pipeline.json), or a loaded QAModel. `task`: None or "question-answering"
        here; "sentiment", "ner" and the other task names make `Pipeline(...)` return that task's pipeline.

        `backend`: "auto" runs ONNX Runtime when the model dir has a model.onnx and the device is the CPU, else torch;
        "onnx" or "torch" insist on one.
        `quantize=None` (the default) follows the model: int8 on the ONNX backend where its arabert_pipeline.json says
        `quantize_by_default` (decided on dev by scripts/int8_decision.py), else fp32.
        `quantize=True` runs int8 weights (dynamic quantization, CPU only: ONNX Runtime's on the ONNX backend, torch's
        on torch): faster, less exact; benchmarks/bench_pipeline.py measures its F1 cost.
        `whole_words=False` returns the model's span as decoded, even when it cuts a word of the context (by default
        answers are widened to whole words, as Hugging Face's `align_to_words`).
        `decoding` overrides the model's dev-chosen decoder: "max-score" answers with the single most likely span
        (short answers; Hugging Face's choice), "expected-f1" with the span of highest expected F1 (the shipped
        model's choice: more F1 on average, longer answers that hedge between candidates).
        `max_context_chars`: longer contexts are refused with an InputError (memory grows with the context).
        `max_question_chars`: longer questions are refused with an InputError (the reader reads all of a question).
        """
        from ..qa.transformer.model import QAModel
        from ..qa.transformer.settings import check_decoding_setting

        if decoding is not None:
            check_decoding_setting("decoding", decoding)
        check_positive("batch_size", batch_size)
        self.backend = choose_backend(model, device, backend)
        if quantize is None:
            quantize = model_prefers_int8(model, self.backend)
        if quantize and device != "cpu":
            raise ConfigError("quantize=True needs device='cpu' (int8 dynamic quantization runs on CPU), "
                              f"got {device!r}")
        check_positive("max_context_chars", max_context_chars)
        check_positive("max_question_chars", max_question_chars)
        self.batch_size = batch_size
        self.quantized = quantize
        self.max_context_chars = max_context_chars
        self.max_question_chars = max_question_chars
        if self.backend == "torch":
            torch_device(device)  # a device this machine lacks fails here, not after a model load
        if isinstance(model, QAModel):
            self.source = "QAModel"
            self.qa = copy.copy(model)  # whole_words is set below: leave the caller's object as it was
            if quantize and self.backend == "onnx":
                raise ConfigError("quantize=True with a loaded ONNX model: load it with OnnxQAModel.load(..., "
                                  "quantize=True), or pass the model dir")
        elif self.backend == "onnx":
            from ..qa.transformer.onnx import OnnxQAModel

            self.source = str(model)
            self.qa = OnnxQAModel.load(resolve_model(model), preprocessing=preprocessing, quantize=quantize)
        else:
            self.source = str(model)
            self.qa = load_qa_model(model, preprocessing=preprocessing, device=device)
            if device == "cpu":
                # transformers 5 loads weights in their stored dtype; a model shipped in fp16 to halve its size
                # would run fp16 matmuls, which CPUs emulate slowly (and int8 quantization needs fp32 layers).
                self.qa.model.float()
        if quantize and self.backend == "torch":
            self.qa = QAModel(quantize_dynamic(self.qa.model), self.qa.tokenizer, self.qa.preprocessing,
                              self.qa.settings, sentence_idf=self.qa.sentence_idf, reader=self.qa.reader)
        self.qa.whole_words = whole_words
        if decoding is not None:
            if self.qa is model:
                self.qa = copy.copy(model)
            self.qa.settings = dataclasses.replace(self.qa.settings, decoding=decoding)

    @property
    def preprocessing(self) -> str:
        return self.qa.preprocessing

    def __repr__(self) -> str:
        int8 = ", quantize=True" if self.quantized else ""
        return f"Pipeline({self.source!r}, preprocessing={self.preprocessing!r}, backend={self.backend!r}{int8})"

    # Typed by the arguments' shapes: one question or a list, top_k 1 (the default) or any.
    @overload
    def answer(self, question: str, context: str | None = None, top_k: Literal[1] = 1, allow_no_answer: bool = False,
               *, index: Index | None = None) -> Answer | None: ...
    @overload
    def answer(self, question: str, context: str | None = None, top_k: int = 1, allow_no_answer: bool = False,
               *, index: Index | None = None) -> Result: ...
    @overload
    def answer(self, question: Texts, context: Texts | None = None, top_k: Literal[1] = 1,
               allow_no_answer: bool = False, *, index: Index | None = None) -> list[Answer | None]: ...
    @overload
    def answer(self, question: Texts, context: Texts | None = None, top_k: int = 1, allow_no_answer: bool = False,
               *, index: Index | None = None) -> list[Result]: ...
    def answer(self, question: str | Texts, context: str | Texts | None = None, top_k: int = 1,
               allow_no_answer: bool = False, *, index: Index | None = None
               ) -> Result | list[Result] | list[Answer | None]:
        """Answer one question (str, str) or many (two lists of the same length); or, with `index=` instead of a
        context, ask a collection (`Index.build` / `Index.open`): see `answer_index`.

        A context of any length is answered: one of more than the model's `long_context_windows` windows (two for
        the shipped model, about 1,500 characters) is split into passages, which are ranked by BM25 against the
        question, and only the best few are read (qa/transformer/passages.py; docs/answering.md).

        Returns an Answer (text == context[start:end] of the given context; score: the probability that it is right
        for a calibrated model, else its softmax probability), or with top_k > 1
        a list of up to top_k Answers, best first; for list input, a list with one such result per question.
        A result is None (or an empty list) if the model proposes no non-empty span at all, or, with
        `allow_no_answer` (Hugging Face: handle_impossible_answer), if it judges that the context does not hold the
        answer: its no-answer score beats the best span's by more than the model's `null_score_diff_threshold`.
        Raises InputError (a ValueError) naming the argument and index for empty or whitespace-only text, text
        without a letter or digit, a context longer than `max_context_chars` or a question longer than
        `max_question_chars`, lists of different lengths and wrong types. Text without an Arabic letter (a
        bibliography line, a name in Latin script) is answered, with a warning: the model reads Arabic, and names and
        numbers are still extractable.
        """
        top_k = check_top_k(top_k)
        if index is not None:
            if context is not None:
                raise InputError("give a context or an index to ask, not both", field="context")
            return self.answer_index(question, index, top_k=top_k, allow_no_answer=allow_no_answer)
        results, single = self._results(question, context, top_k, allow_no_answer)
        return results[0] if single else results

    def _results(self, question: object, context: object, top_k: int,
                 allow_no_answer: bool) -> tuple[list[Result], bool]:
        """`answer`'s results from the contexts given, one per question, and whether one question (a str, not a list)
        was asked."""
        if context is None:
            raise InputError("a context is needed (or index= to ask a collection)", field="context")
        single = isinstance(question, str) and isinstance(context, str)
        questions, contexts = check_inputs(question, context, self.max_context_chars, self.max_question_chars)
        warn_non_arabic(questions, contexts, stacklevel=4)  # the caller of answer() or __call__, not this line
        results: list[list[Answer]] = []
        for i in range(0, len(questions), EXAMPLES_PER_CHUNK):
            examples = [{"id": j, "question": q, "context": c}
                        for j, (q, c) in enumerate(zip(questions[i : i + EXAMPLES_PER_CHUNK],
                                                       contexts[i : i + EXAMPLES_PER_CHUNK], strict=True), start=i)]
            try:
                results.extend(self._answer_examples(examples, top_k, allow_no_answer))
            except InputError as exc:
                raise self._named(exc, questions, single) from None
        return _shaped(results, top_k), single

    @overload
    def answer_index(self, question: str, index: Index, top_k: Literal[1] = 1,
                     allow_no_answer: bool = False) -> Answer | None: ...
    @overload
    def answer_index(self, question: str, index: Index, top_k: int = 1, allow_no_answer: bool = False) -> Result: ...
    @overload
    def answer_index(self, question: Texts, index: Index, top_k: Literal[1] = 1,
                     allow_no_answer: bool = False) -> list[Answer | None]: ...
    @overload
    def answer_index(self, question: Texts, index: Index, top_k: int = 1,
                     allow_no_answer: bool = False) -> list[Result]: ...
    def answer_index(self, question: str | Texts, index: Index, top_k: int = 1,
                     allow_no_answer: bool = False) -> Result | list[Result] | list[Answer | None]:
        """Answer one question (str) or many (a list) from the collection `index`: its best passages for each question
        are retrieved, read, and one answer chosen across them (qa/transformer/passages.py).

        Returns an Answer as `answer` does, which also names its document: `.document` (the id given at build, by
        default the document's position as a string) and `.title`, with `.start` / `.end` offsets into that
        document's text (`index.document_text(...)[start:end] == text`); with top_k > 1 a list, best first; for a list
        of questions one such result per question. With `allow_no_answer`, None (or an empty list) where the chosen
        passage's no-answer score says the collection does not hold the answer (the model's `index_null_threshold`,
        chosen on dev)."""
        from ..retrieval.index import Index

        top_k = check_top_k(top_k)
        if not isinstance(index, Index):
            raise InputError(f"must be an Index (Index.build or Index.open), got {type(index).__name__}",
                             field="index")
        single = isinstance(question, str)
        if not single and not isinstance(question, (list, tuple)):
            raise InputError(f"must be a str or a list of str, got {type(question).__name__}", field="question")
        questions = [check_text(question, "question", self.max_question_chars, "question")] if single else \
            [check_text(q, f"question[{i}]", self.max_question_chars, "question") for i, q in enumerate(question)]
        if not questions:
            raise InputError("empty list: nothing to answer", field="question")
        warn_analysis_mismatch(index.analysis, self.preprocessing)
        from ..qa.transformer.passages import answer_from_index

        results: list[list[Answer]] = []
        for i in range(0, len(questions), EXAMPLES_PER_CHUNK):
            results.extend(answer_from_index(self.qa, index, questions[i : i + EXAMPLES_PER_CHUNK], self.batch_size,
                                             top_k, allow_no_answer))
        shaped = _shaped(results, top_k)
        return shaped[0] if single else shaped

    def __call__(self, *args: Any, question: str | Texts | None = None, context: str | Texts | None = None,
                 top_k: int = 1, handle_impossible_answer: bool = False) -> Dicts | list[Dicts]:
        """Hugging Face's QA pipeline call: `qa(question=..., context=...)`, `qa(question, context)`, or
        `qa({"question": ..., "context": ...})` / a list of such dicts.

        Returns {"score", "start", "end", "answer"} (score: the probability of `answer()`), a list of up to top_k of
        them when top_k > 1, and for list input one such result per question. With `handle_impossible_answer`, a
        question the model judges unanswerable gets {"score": 0.0, "start": 0, "end": 0, "answer": ""}, as Hugging
        Face writes it (its score is the empty answer's probability, which this decoder does not compute).
        """
        if args:
            if question is not None or context is not None:
                raise InputError("give the question and context either as arguments or as keywords, not both",
                                 field="question")
            if len(args) == 2:
                question, context = args
            elif len(args) == 1 and isinstance(args[0], dict):
                question, context = _from_dict(args[0], 0)
            elif len(args) == 1 and isinstance(args[0], list) and all(isinstance(x, dict) for x in args[0]):
                pairs = [_from_dict(x, i) for i, x in enumerate(args[0])]
                question, context = [q for q, _ in pairs], [c for _, c in pairs]
            else:
                raise InputError("expected (question, context), a {'question', 'context'} dict or a list of them",
                                 field="arguments")
        if question is None or context is None:
            raise InputError("both question and context are needed",
                             field="question" if question is None else "context")
        results, single = self._results(question, context, check_top_k(top_k), handle_impossible_answer)
        empty = {"score": 0.0, "start": 0, "end": 0, "answer": ""}

        def as_dicts(result: Result) -> Dicts:
            if isinstance(result, list):  # top_k > 1
                return [_as_dict(a) for a in result] or ([empty] if handle_impossible_answer else [])
            return empty if result is None else _as_dict(result)

        found = [as_dicts(result) for result in results]
        return found[0] if single else found

    def _named(self, exc: InputError, questions: list[str], single: bool) -> InputError:
        """The model names an example ("example 3"); the caller passed arguments: name the one it cannot read."""
        found = re.fullmatch(r"example (\d+)", exc.field or "")
        if found is None:
            return exc
        index = int(found.group(1))
        name = "question" if not self.qa.preprocessor.question(questions[index]).strip() else "context"
        message = str(exc).removeprefix(f"{exc.field}: ")
        return InputError(message, field=name if single else f"{name}[{index}]")

    def _answer_examples(self, examples: list[dict[str, Any]], top_k: int,
                         allow_no_answer: bool = False) -> list[list[Answer]]:
        return self.qa.predict(examples, batch_size=self.batch_size, top_k=top_k, allow_no_answer=allow_no_answer)


def answers_of(result: Result) -> list[Answer]:
    """One question's result (`answer`'s, at any top_k) as the list of its answers, best first."""
    return list(result) if isinstance(result, list) else [] if result is None else [result]


def _shaped(results: list[list[Answer]], top_k: int) -> list[Result]:
    """Each question's result from its ranked answers: the best alone (or None) at top_k=1, else all of them."""
    return [found[0] if found else None for found in results] if top_k == 1 else [*results]


def warn_analysis_mismatch(analysis: str, preprocessing: str) -> None:
    """An index whose analysis starts from another preprocessing than the model's (arabertv2's Farasa segments for an
    arabertv02 model, say) still retrieves, and the reader reads the passages with its own preprocessing; but the two
    disagree on what a word is, which the user should know."""
    base = analysis.split("+")[0].split("-")[0]
    if preprocessing in ("arabertv02", "arabertv2") and base != preprocessing:
        warnings.warn(f"the index was built with the {analysis!r} analysis ({base} text) and this model reads "
                      f"{preprocessing} text: passages are retrieved by {base} terms and read as {preprocessing}; "
                      f"build the index with --analysis {preprocessing}-... to match", stacklevel=3)


def _as_dict(answer: Answer) -> dict[str, Any]:
    return {"score": answer.score, "start": answer.start, "end": answer.end, "answer": answer.text}


def _from_dict(item: dict[str, Any], index: int) -> tuple[Any, Any]:
    missing = [key for key in ("question", "context") if key not in item]
    if missing:
        raise InputError(f"missing key {missing[0]!r}", field=f"input {index}")
    return item["question"], item["context"]


__all__ = ["Pipeline", "BUNDLED_MODELS", "DEFAULT_MODEL", "METADATA_FILE"]

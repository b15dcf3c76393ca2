"""`Pipeline` for AraBERT's other tasks, with Hugging Face's pipeline output shapes.

    from arabert_pipeline import Pipeline
    sentiment = Pipeline("arabert", task="sentiment")      # or Pipeline("arabert-sentiment"), or a model dir
    sentiment("الخدمة ممتازة")                               # [{"label": "POS", "score": 0.52}]
    sentiment(["...", "..."])                               # [{"label", "score"}, {"label", "score"}]
    ner = Pipeline("arabert", task="ner")                   # or Pipeline("arabert-ner")
    ner("زار ماكرون بيروت.")   # [{"entity_group": "PERS", "score": 0.97, "word": "ماكرون", "start": 4, "end": 10}, ...]

As text-classification's pipeline: one text gives a list with its top label (top_k=1) or its top_k labels; a list of
texts gives one such result per text (a dict at top_k=1, as Hugging Face returns). As token-classification's with
aggregation_strategy="simple": one dict per entity, its `word` the original text's characters text[start:end] (not
the preprocessed or tokenized form), its score the mean probability of its words' tags.

A model dir with a model.onnx (the shipped task models hold an int8 one) runs on ONNX Runtime + tokenizers without
importing torch; any other dir, or backend="torch", runs on torch + transformers. Texts are checked as QA contexts are
(pipeline/core.py: a str, not blank, a letter or digit, at most `max_chars` characters, something left after the
model's preprocessing), with InputErrors naming the argument and index.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..artifacts.metadata import read_metadata
from ..errors import ConfigError, InputError
from ..finetuning.taskexport import TEXT_CLASSIFICATION, TOKEN_CLASSIFICATION
from .inputs import check_positive

if TYPE_CHECKING:
    from ..classification.model import TextClassifier
    from ..ner.model import TokenTagger

# Pipeline(task=...) names → the metadata task they need, and the shipped model that answers them by default.
TASK_NAMES = {"sentiment": (TEXT_CLASSIFICATION, "arabert-sentiment"),
              TEXT_CLASSIFICATION: (TEXT_CLASSIFICATION, "arabert-sentiment"),
              "ner": (TOKEN_CLASSIFICATION, "arabert-ner"), TOKEN_CLASSIFICATION: (TOKEN_CLASSIFICATION, "arabert-ner")}
QA_TASKS = ("question-answering", "qa")
# Names of the task models shipped in the package (directories under arabert_pipeline/models/, each made by
# `export-onnx --standalone`: docs/tasks.md) → their task.
BUNDLED_TASK_MODELS = {"arabert-sentiment": TEXT_CLASSIFICATION, "arabert-ner": TOKEN_CLASSIFICATION}
# How a missing shipped model is made, by task (the error says it): the fine-tuning, into runs/NAME, then the export
# (the NER model's encoder is the larger one, shipped with 4-bit weights to stay under 20 MB).
_BUILD = {TEXT_CLASSIFICATION: ("--task classification --train arsarcasm-v2-train-rest --dev arsarcasm-v2-dev "
                                "--label-column sentiment --dev-metric f1_pn", ""),
          TOKEN_CLASSIFICATION: ("--task ner --train anercorp-train --dev anercorp-dev", " --weight-bits 4")}
MAX_TEXT_CHARS = 20_000  # a tweet is 280; a text past this is a document to split, and its memory grows with it


def is_task_request(model: object, task: str | None) -> bool:
    """Whether `Pipeline(model, task=task)` asks for a text task's pipeline rather than QA's."""
    if task is not None:
        return task not in QA_TASKS
    if isinstance(model, str) and model in BUNDLED_TASK_MODELS:
        return True
    if isinstance(model, (str, os.PathLike)) and Path(model).is_dir():
        return read_metadata(model, missing_ok=True).get("task") in (TEXT_CLASSIFICATION, TOKEN_CLASSIFICATION)
    return False


def task_pipeline(model: object, task: str | None,
                  **options: Any) -> TextClassificationPipeline | TokenClassificationPipeline:
    """The task pipeline `Pipeline(model, task=task, **options)` stands for."""
    directory, kind = resolve_task_model(model, task)
    known = {"preprocessing", "device", "batch_size", "backend", "max_chars", "quantize"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(f"{', '.join(unknown)}: not an option of the {kind} pipeline "
                          f"({', '.join(sorted(known))})")
    pipeline = (TextClassificationPipeline if kind == TEXT_CLASSIFICATION else TokenClassificationPipeline)(
        directory, **options)
    # Named as given, as serve's /health names the QA model: a shipped model's name, not where the package is installed.
    pipeline.source = str(model)
    return pipeline


def resolve_task_model(model: object, task: str | None) -> tuple[Path, str]:
    """(model dir, its task) of a shipped task model's name or a task model dir, checked against `task`."""
    from .inputs import MODELS_DIR  # read at call time: tests point it elsewhere

    if task is not None and task not in TASK_NAMES:
        raise ConfigError(f"task {task!r}: use one of {', '.join([*QA_TASKS, *TASK_NAMES])}")
    wanted, default_model = TASK_NAMES[task] if task else (None, None)
    if model == "arabert" and default_model:
        model = default_model
    if isinstance(model, str) and model in BUNDLED_TASK_MODELS:
        kind = BUNDLED_TASK_MODELS[model]
        directory = MODELS_DIR / model
        if not (directory / "config.json").is_file():
            run = f"runs/{model.removeprefix('arabert-')}"
            raise ConfigError(
                f"the task model {model!r} is not shipped in this checkout (no model at {directory}). Build it "
                f"(docs/tasks.md): `arabert-pipeline finetune {_BUILD[kind][0]} --model "
                f"arabert_pipeline/models/arabert-mini -o {run}`, then `arabert-pipeline export-onnx {run} "
                f"--standalone arabert_pipeline/models/{model}{_BUILD[kind][1]}`; or pass any model dir made by "
                "`finetune --task`")
    elif isinstance(model, (str, os.PathLike)) and Path(model).is_dir():
        directory = Path(model)
        recorded = read_metadata(directory, missing_ok=True).get("task")
        if recorded not in (TEXT_CLASSIFICATION, TOKEN_CLASSIFICATION):
            raise ConfigError(f"{directory} is not a classification or NER model dir (its arabert_pipeline.json task "
                              f"is {recorded!r})")
        kind = recorded
    else:
        raise ConfigError(f"model {model!r}: for task {task!r}, name a shipped task model "
                          f"({', '.join(BUNDLED_TASK_MODELS)}) or a model dir made by `finetune --task`")
    if wanted is not None and kind != wanted:
        raise ConfigError(f"{directory} is a {kind} model, not one for task {task!r}")
    return directory, kind


def check_texts(texts: object, max_chars: int) -> tuple[list[str], bool]:
    from .inputs import text_problem

    if isinstance(texts, str):
        items, single = [texts], True
    elif isinstance(texts, (list, tuple)):
        items, single = list(texts), False
    else:
        raise InputError(f"must be a str or a list of str, got {type(texts).__name__}", field="inputs")
    if not items:
        raise InputError("empty list: nothing to do", field="inputs")
    for i, text in enumerate(items):
        problem = text_problem(text, max_chars, "text")
        if problem is not None:
            raise InputError(problem, field="inputs" if single else f"inputs[{i}]")
    return items, single


def refuse_empty(preprocessed: Sequence[str], preprocessing: str, single: bool) -> None:
    """A text with nothing left after preprocessing (only tatweel, symbols, letters of other scripts) would get the
    model's answer to an empty input, a label or entities that no word supports: refused, as a QA context is."""
    for i, text in enumerate(preprocessed):
        if not text.strip():
            raise InputError(f"nothing left after {preprocessing!r} preprocessing (no Arabic or Latin text?)",
                             field="inputs" if single else f"inputs[{i}]")


def task_backend(directory: Path, device: str = "cpu", backend: str = "auto") -> str:
    """"onnx" or "torch": what a task pipeline on `directory` runs, as QA's choose_backend decides (auto: ONNX Runtime
    when the dir has a model.onnx and the device is the CPU)."""
    from importlib.util import find_spec

    from .inputs import BACKENDS

    if backend not in BACKENDS:
        raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    from ..finetuning.runtime import has_onnx_graph

    has_onnx = has_onnx_graph(directory)
    if backend == "onnx" and not has_onnx:
        raise ConfigError(f"backend='onnx': {directory} has no model.onnx (`arabert-pipeline export-onnx` writes one)")
    use_onnx = backend == "onnx" or (backend == "auto" and has_onnx and device == "cpu"
                                     and find_spec("onnxruntime") is not None)
    if use_onnx and device != "cpu":
        raise ConfigError(f"the ONNX backend runs on the CPU, not on device {device!r}")
    if not use_onnx and not (directory / "model.safetensors").is_file():
        raise ConfigError(f"{directory} holds no torch weights (a shipped model, its weights int8 or 4-bit inside "
                          "model.onnx, runs on ONNX Runtime only): "
                          "use backend='onnx' on the CPU")
    return "onnx" if use_onnx else "torch"


Model = TypeVar("Model", "TextClassifier", "TokenTagger")


class _TaskPipeline(ABC, Generic[Model]):
    def __init__(self, model: str | os.PathLike[str], *, preprocessing: str | None = None, device: str = "cpu",
                 batch_size: int = 32, backend: str = "auto", max_chars: int = MAX_TEXT_CHARS,
                 quantize: bool = False) -> None:
        check_positive("batch_size", batch_size)
        check_positive("max_chars", max_chars)
        directory = Path(model)
        use_onnx = task_backend(directory, device, backend) == "onnx"
        self.source, self.batch_size, self.max_chars = str(model), batch_size, max_chars
        self.model: Model = self._load(directory, use_onnx, preprocessing=preprocessing, device=device,
                                       quantize=quantize)
        self.backend: str = self.model.backend

    @property
    def preprocessing(self) -> str:
        return self.model.preprocessing

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.source!r}, preprocessing={self.preprocessing!r}, backend={self.backend!r})"

    @abstractmethod
    def _load(self, directory: Path, use_onnx: bool, *, preprocessing: str | None, device: str,
              quantize: bool) -> Model:
        """The task's model from `directory`, on ONNX Runtime (`use_onnx`) or torch."""


class TextClassificationPipeline(_TaskPipeline["TextClassifier"]):
    task = TEXT_CLASSIFICATION

    def _load(self, directory: Path, use_onnx: bool, *, preprocessing: str | None, device: str,
              quantize: bool) -> TextClassifier:
        from ..classification.model import OnnxTextClassifier, TextClassifier

        if use_onnx:
            return OnnxTextClassifier.load(directory, preprocessing=preprocessing, quantize=quantize)
        return TextClassifier.load(directory, preprocessing=preprocessing, device=device)

    @property
    def labels(self) -> list[str]:
        return list(self.model.labels)

    def __call__(self, inputs: str | Sequence[str], top_k: int | None = 1) -> list[Any]:
        """`top_k=None`: every label, best first."""
        from .inputs import check_top_k

        texts, single = check_texts(inputs, self.max_chars)
        k = len(self.model.labels) if top_k is None else min(check_top_k(top_k), len(self.model.labels))
        preprocessed = self.model.preprocess(texts)
        refuse_empty(preprocessed, self.preprocessing, single)
        probabilities = self.model.predict_proba(preprocessed, self.batch_size, preprocessed=True)
        results = []
        for row in probabilities:
            order = row.argsort()[::-1][:k]
            ranked = [{"label": self.model.labels[i], "score": float(row[i])} for i in order]
            results.append(ranked)
        if single:
            return results[0]
        return [r[0] for r in results] if top_k == 1 else results

    classify = __call__


class TokenClassificationPipeline(_TaskPipeline["TokenTagger"]):
    task = TOKEN_CLASSIFICATION

    def _load(self, directory: Path, use_onnx: bool, *, preprocessing: str | None, device: str,
              quantize: bool) -> TokenTagger:
        from ..ner.model import OnnxTokenTagger, TokenTagger

        if use_onnx:
            return OnnxTokenTagger.load(directory, preprocessing=preprocessing, quantize=quantize)
        return TokenTagger.load(directory, preprocessing=preprocessing, device=device)

    def __call__(self, inputs: str | Sequence[str]) -> list[Any]:
        texts, single = check_texts(inputs, self.max_chars)
        refuse_empty(self.model.preprocess(texts), self.preprocessing, single)
        found = self.model.entities(texts, self.batch_size)
        results = [[{"entity_group": e.type, "score": e.score, "word": e.text, "start": e.start, "end": e.end}
                    for e in entities] for entities in found]
        return results[0] if single else results

    tag = __call__

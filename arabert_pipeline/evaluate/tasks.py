"""`evaluate --task classification|ner`: systems side by side on labelled sets, with the baselines beside them.

    arabert-pipeline evaluate --task classification --label-column sentiment --model runs/sentiment \\
        --data arsarcasm-v2-test --train arsarcasm-v2-train-rest --dev arsarcasm-v2-dev -o reports/sentiment

Systems: task model dirs (--model: run on ONNX Runtime when the dir has a model.onnx, else torch), prediction files
(--predictions: JSON lines {"id", "label"} or {"id", "tags"}, as finetune writes them under OUT/eval/), and the
baselines (classification/baselines.py, ner/baselines.py), fitted on --train with their settings chosen on --dev.
Scores: classification accuracy, macro-F1, F1-PN (when the labels have POS and NEG) and per-class F1; NER entity
micro- and macro-F1 and per-type F1 (seqeval's definitions). Each main score has a 95% bootstrap CI over the set's
texts or sentences, and every system is compared with the first by a paired bootstrap of the difference (CI and
p-value), the same resamples for every system. Writes OUT/results.json, table.md and predictions/LABEL.jsonl (with
several --data sets, predictions/SET/LABEL.jsonl: each file is one set's, readable back with --predictions).
"""
from __future__ import annotations

import abc
import dataclasses
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts.paths import portable_path
from ..artifacts.reads import check_input_file, json_lines
from ..artifacts.writes import atomic_directory
from ..errors import ConfigError, InputError
from ..weights.files import read_text_file
from . import metrics as stats
from .load import check_file_names, safe_name

CLASSIFICATION_BASELINES = ("tfidf-lr", "majority")
NER_BASELINES = ("crf", "bilstm", "most-frequent-tag")
TASK_OUTPUT_NAMES = ("results.json", "table.md", "predictions")


@dataclasses.dataclass
class TaskEvaluateConfig:
    task: str  # "classification" or "ner"
    data: list[str]
    out: Path
    systems: list[tuple[str, str]]  # ("model" | "predictions", path)
    labels: list[str] = dataclasses.field(default_factory=list)  # names of the systems in the report
    train: list[str] = dataclasses.field(default_factory=list)  # what the baselines are fitted on
    dev: list[str] = dataclasses.field(default_factory=list)  # what their settings are chosen on
    baselines: tuple[str, ...] = ()
    text_column: str | None = None
    label_column: str = "label"
    format: str | None = None  # classification: the files' format (default: from each file's name)
    metric: str | None = None  # the score paired differences are reported for first (default: the task's)
    resamples: int = 10_000
    seed: int = 0
    batch_size: int = 32
    device: str = "cpu"
    preprocessing: str | None = None
    vectors: str | None = None  # ner: the bilstm baseline's word vectors (default: the shipped model's reader table)


class Task(abc.ABC):
    """What differs between the two tasks: reading sets, predicting, scoring and the bootstrap's statistics."""

    name: str
    main_metrics: tuple[str, ...]

    def __init__(self, config: TaskEvaluateConfig):
        self.config = config

    @abc.abstractmethod
    def read(self, source: str) -> Any: ...  # a labelled set: its `examples` and `name`

    @abc.abstractmethod
    def setup(self, train, dev, data) -> None: ...  # the labels / entity types, from every set read

    @abc.abstractmethod
    def fit_baseline(self, name: str, train: list[dict], dev: list[dict]) -> Any: ...

    @abc.abstractmethod
    def baseline_predict(self, baseline, examples) -> list: ...

    @abc.abstractmethod
    def load_model(self, path: str) -> Any: ...  # a backend with `backend`, read by model_predict

    @abc.abstractmethod
    def model_predict(self, model, examples) -> list: ...

    @abc.abstractmethod
    def record(self, example, prediction) -> dict: ...  # a line of the predictions file

    @abc.abstractmethod
    def from_record(self, record: dict, path: Path, line: int) -> Any: ...  # ... read back

    @abc.abstractmethod
    def prediction_problem(self, example: dict, prediction) -> str | None: ...

    @abc.abstractmethod
    def statistics(self, examples, predictions) -> np.ndarray: ...  # per example, what the bootstrap resamples

    @abc.abstractmethod
    def score(self, summed: np.ndarray) -> np.ndarray: ...  # main_metrics of summed statistics

    @abc.abstractmethod
    def report(self, examples, predictions) -> dict: ...


class ClassificationTask(Task):
    name = "classification"

    def read(self, source: str):
        from ..classification.data import read_texts

        return read_texts(source, text_column=self.config.text_column, label_column=self.config.label_column,
                          format=self.config.format)

    def setup(self, train, dev, data) -> None:
        seen = sorted({e["label"] for s in train + data for e in s.examples})
        self.class_names = seen
        for labelled in dev:  # the baselines score dev over these classes: another label has no row to count in
            for example in labelled.examples:
                if example["label"] not in seen:
                    raise InputError(f"label {example['label']!r} (id {example['id']}) is not a class of the "
                                     f"training or evaluated data ({', '.join(seen)})", path=labelled.path,
                                     field=labelled.label_column)
        from ..classification.metrics import pn_labels

        try:
            pn_labels(seen)
            self.main_metrics = ("f1_pn", "macro_f1", "accuracy")
        except ConfigError:
            self.main_metrics = ("macro_f1", "accuracy")
        if self.config.metric:  # e.g. f1:TRUE, the sarcasm task's official F1 of the sarcastic class
            from ..classification.metrics import metric_classes

            metric_classes(self.config.metric, seen)
            self.main_metrics = (self.config.metric, *[m for m in self.main_metrics if m != self.config.metric])

    def fit_baseline(self, name: str, train: list[dict], dev: list[dict]):
        from ..classification.baselines import fit_baseline

        return fit_baseline(name, train, dev, self.class_names, metric=self.main_metrics[0], seed=self.config.seed)

    def baseline_predict(self, baseline, examples):
        return baseline.predict([e["text"] for e in examples])

    def load_model(self, path: str):
        from ..classification.model import OnnxTextClassifier, TextClassifier

        if (Path(path) / "model.onnx").is_file() and self.config.device == "cpu":
            return OnnxTextClassifier.load(path, preprocessing=self.config.preprocessing)
        return TextClassifier.load(path, preprocessing=self.config.preprocessing, device=self.config.device)

    def model_predict(self, model, examples):
        for example in examples:
            if example["label"] not in model.labels:
                raise InputError(f"label {example['label']!r} is not one of the model's classes "
                                 f"({', '.join(model.labels)})", field=f"id {example['id']}")
        return model.predict([e["text"] for e in examples], self.config.batch_size)

    def record(self, example, prediction) -> dict:
        return {"id": example["id"], "label": prediction}

    def from_record(self, record: dict, path: Path, line: int):
        label = record.get("label")
        if not isinstance(label, str):
            raise InputError("expected a string 'label'", path=path, line=line, field="label")
        if label not in self.class_names:
            raise InputError(f"label {label!r} is not a class of the data ({', '.join(self.class_names)})",
                             path=path, line=line, field="label")
        return label

    def prediction_problem(self, example: dict, prediction) -> str | None:
        return None

    def statistics(self, examples, predictions) -> np.ndarray:
        from ..classification.metrics import pair_codes

        unknown = sorted(set(predictions) - set(self.class_names))
        if unknown:
            raise ConfigError(f"predicted labels {', '.join(unknown)} are not classes of the data")
        return pair_codes([e["label"] for e in examples], predictions, self.class_names)

    def score(self, summed: np.ndarray) -> np.ndarray:
        from ..classification.metrics import scores_from_codes

        return scores_from_codes(summed, self.class_names, self.main_metrics)

    def report(self, examples, predictions) -> dict:
        from ..classification.metrics import classification_report, score_confusion

        report = classification_report([e["label"] for e in examples], predictions, self.class_names)
        for metric in self.main_metrics:
            if metric not in report:
                report[metric] = float(score_confusion(np.asarray(report["confusion"]), self.class_names, metric))
        return report


class NERTask(Task):
    name = "ner"
    main_metrics = ("micro_f1", "macro_f1")

    def read(self, source: str):
        from ..ner.data import read_conll

        return read_conll(source, "keep")

    def setup(self, train, dev, data) -> None:
        self.types = sorted({t for s in train + data for t in s.types})

    def fit_baseline(self, name: str, train, dev):
        from ..ner.baselines import fit_baseline

        return fit_baseline(name, train, dev, seed=self.config.seed, vectors=self.config.vectors)

    def baseline_predict(self, baseline, examples):
        return baseline.predict([e["words"] for e in examples])

    def load_model(self, path: str):
        from ..ner.model import OnnxTokenTagger, TokenTagger

        if (Path(path) / "model.onnx").is_file() and self.config.device == "cpu":
            return OnnxTokenTagger.load(path, preprocessing=self.config.preprocessing)
        return TokenTagger.load(path, preprocessing=self.config.preprocessing, device=self.config.device)

    def model_predict(self, model, examples):
        return [tags for tags, _ in model.tag_words([e["words"] for e in examples], self.config.batch_size)]

    def record(self, example, prediction) -> dict:
        return {"id": example["id"], "tags": prediction}

    def from_record(self, record: dict, path: Path, line: int):
        from ..ner.data import split_tag

        tags = record.get("tags")
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise InputError("expected a list of tags 'tags'", path=path, line=line, field="tags")
        for i, tag in enumerate(tags):
            try:
                _, kind = split_tag(tag)
            except ValueError:
                raise InputError(f"tag {tag!r}: expected O, B-TYPE or I-TYPE", path=path, line=line,
                                 field=f"tags[{i}]") from None
            if kind and kind not in self.types:  # its entities would be left out of the counts, not scored as wrong
                raise InputError(f"tag {tag!r}: {kind} is not an entity type of the data ({', '.join(self.types)})",
                                 path=path, line=line, field=f"tags[{i}]")
        return tags

    def prediction_problem(self, example: dict, prediction) -> str | None:
        if len(prediction) != len(example["words"]):
            return f"{len(prediction)} tags for a sentence of {len(example['words'])} words"
        return None

    def statistics(self, examples, predictions) -> np.ndarray:
        from ..ner.metrics import sentence_counts

        for e, p in zip(examples, predictions, strict=True):
            problem = self.prediction_problem(e, p)
            if problem is not None:
                raise InputError(problem, field=f"id {e['id']}")
        counts = sentence_counts([e["tags"] for e in examples], predictions, self.types)
        return counts.reshape(len(examples), -1)

    def score(self, summed: np.ndarray) -> np.ndarray:
        from ..ner.metrics import scores_from_counts

        return scores_from_counts(summed.reshape(len(summed), len(self.types), 3), self.main_metrics)

    def report(self, examples, predictions) -> dict:
        from ..ner.metrics import ner_report

        return ner_report([e["tags"] for e in examples], predictions, self.types)


TASKS = {"classification": ClassificationTask, "ner": NERTask}


def read_predictions(task: Task, source: str, examples: list[dict]) -> list:
    """A predictions file's answer for every example of a set, by id (a missing id is an error naming it)."""
    path = check_input_file(Path(source), "predictions file")
    found: dict[str, tuple[Any, int]] = {}
    for number, record in json_lines(read_text_file(path, max_bytes=2**30, bom=True), path=path):
        if not isinstance(record, dict) or "id" not in record:
            raise InputError('expected an object with an "id"', path=path, line=number)
        example_id = str(record["id"])
        if example_id in found:
            raise InputError(f"a second prediction for id {example_id} (the first is on line {found[example_id][1]})",
                             path=path, line=number, field="id")
        found[example_id] = (task.from_record(record, path, number), number)
    missing = [e["id"] for e in examples if e["id"] not in found]
    if missing:
        raise InputError(f"no prediction for {len(missing)} example(s) (first: id {missing[0]})", path=path)
    for example in examples:
        prediction, number = found[example["id"]]
        problem = task.prediction_problem(example, prediction)
        if problem is not None:
            raise InputError(problem, path=path, line=number, field=f"id {example['id']}")
    return [found[e["id"]][0] for e in examples]


def run_task_evaluation(config: TaskEvaluateConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    if config.task not in TASKS:
        raise ConfigError(f"task {config.task!r}: use one of {', '.join(TASKS)}")
    from .report import check_run_settings

    check_run_settings(config)
    task = TASKS[config.task](config)
    if config.baselines and not config.train:
        raise ConfigError("the baselines are trained: pass --train (and --dev to choose their settings), or "
                          "--baselines none")
    names = _system_names(config)
    check_file_names([*names, *config.baselines], "systems", "rename one with --label")
    check_file_names(config.data, "data sets", "give one of them another file name")
    train = [task.read(s) for s in config.train]
    dev = [task.read(s) for s in config.dev]
    data = [task.read(s) for s in config.data]
    task.setup(train, dev, data)
    systems: list[tuple[str, Callable[[list[dict]], list], dict]] = []
    for (kind, path), name in zip(config.systems, names, strict=True):
        if kind == "model":
            started = time.perf_counter()
            model = task.load_model(path)
            log(f"{name}: loaded {path} ({model.backend}) in {time.perf_counter() - started:.1f} s")
            systems.append((name, functools.partial(task.model_predict, model),
                            {"kind": "model", "path": portable_path(path), "backend": model.backend}))
        else:
            systems.append((name, functools.partial(read_predictions, task, path),
                            {"kind": "predictions", "path": portable_path(path)}))
    train_examples = [e for s in train for e in s.examples]
    dev_examples = [e for s in dev for e in s.examples]
    for name in config.baselines:
        started = time.perf_counter()
        baseline = task.fit_baseline(name, train_examples, dev_examples)
        log(f"baseline {name}: fitted on {len(train_examples)} examples in {time.perf_counter() - started:.0f} s "
            f"{baseline.chosen or ''}")
        systems.append((name, functools.partial(task.baseline_predict, baseline),
                        {"kind": "baseline", "chosen_on_dev": baseline.chosen}))
    if not systems:
        raise ConfigError("nothing to evaluate: pass --model, --predictions or baselines")
    results: dict[str, Any] = {"task": config.task, "metrics": list(task.main_metrics), "resamples": config.resamples,
                               "seed": config.seed, "train": config.train, "dev": config.dev, "datasets": {},
                               "systems": {name: info for name, _, info in systems}}
    predictions: dict[tuple[str, str], list[dict]] = {}  # (data set, system) → its records
    for labelled in data:
        examples = labelled.examples
        rows: dict[str, dict[str, Any]] = {}
        samples = []
        for name, predict, _ in systems:
            started = time.perf_counter()
            try:
                predicted = predict(examples)
            except InputError as exc:  # an example of the data set is named: name its file too
                if exc.path is None:
                    raise InputError(str(exc), path=labelled.path) from None
                raise
            seconds = time.perf_counter() - started
            predictions[labelled.name, name] = [task.record(e, p) for e, p in zip(examples, predicted, strict=True)]
            statistics = task.statistics(examples, predicted)
            samples.append(statistics)
            report = task.report(examples, predicted)
            rows[name] = {"scores": report, "seconds": round(seconds, 2)}
        resampled = stats.bootstrap_statistics(samples, task.score, resamples=config.resamples, seed=config.seed)
        observed = [task.score(s.sum(axis=0, keepdims=True))[0] for s in samples]
        reference = systems[0][0]
        for (name, _, _), sampled, point in zip(systems, resampled, observed, strict=True):
            low, high = stats.interval(sampled)
            rows[name]["ci"] = {m: [float(low[k]), float(high[k])] for k, m in enumerate(task.main_metrics)}
            if name != reference:
                paired = stats.paired_difference(resampled[0], sampled, observed[0], point)
                rows[name]["vs_reference"] = {m: {"diff": float(paired["diff"][k]), "low": float(paired["low"][k]),
                                                  "high": float(paired["high"][k]),
                                                  "p_value": float(paired["p_value"][k])}
                                              for k, m in enumerate(task.main_metrics)}
        results["datasets"][labelled.name] = {"examples": len(examples), "reference": reference, "systems": rows}
        log(f"{labelled.name}: " + "; ".join(
            f"{name} {rows[name]['scores'][task.main_metrics[0]]:.2f}" for name, _, _ in systems))
    with atomic_directory(config.out) as tmp:
        (tmp / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")
        (tmp / "table.md").write_text(markdown(results, task), encoding="utf-8")
        (tmp / "predictions").mkdir()
        for (dataset, name), records in predictions.items():
            # Several sets: a folder each, since ids repeat across sets and a file is read back (--predictions)
            # against one set.
            folder = tmp / "predictions" / safe_name(dataset) if len(data) > 1 else tmp / "predictions"
            folder.mkdir(exist_ok=True)
            (folder / f"{safe_name(name)}.jsonl").write_text(
                "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return results


def _system_names(config: TaskEvaluateConfig) -> list[str]:
    names = []
    for i, (_kind, path) in enumerate(config.systems):
        name = config.labels[i] if i < len(config.labels) else Path(path).name or path
        while name in names or name in config.baselines:
            name += "'"
        names.append(name)
    return names


def markdown(results: dict, task: Task) -> str:
    metrics = task.main_metrics
    lines = []
    for dataset, entry in results["datasets"].items():
        reference = entry["reference"]
        lines += [f"## {dataset} ({entry['examples']} {'texts' if task.name == 'classification' else 'sentences'})",
                  "", "95% bootstrap CIs over the set's examples; Δ: `{reference}` minus the system, paired "
                  f"bootstrap (CI, p-value), {results['resamples']:,} resamples.".replace("{reference}", reference), "",
                  "| system | " + " | ".join(metrics) + " | " + " | ".join(f"Δ {m}" for m in metrics[:1])
                  + " |", "|---" * (len(metrics) + 2) + "|"]
        for name, row in entry["systems"].items():
            cells = [f"{row['scores'][m]:.2f} [{row['ci'][m][0]:.1f}, {row['ci'][m][1]:.1f}]" for m in metrics]
            delta = "—"
            if "vs_reference" in row:
                d = row["vs_reference"][metrics[0]]
                delta = f"{d['diff']:+.2f} [{d['low']:+.1f}, {d['high']:+.1f}] p={d['p_value']:.3f}"
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {delta} |")
        first = next(iter(entry["systems"].values()))["scores"]
        per = "per_class" if "per_class" in first else "per_type"
        classes = list(first[per])
        lines += ["", f"{'Per-class' if per == 'per_class' else 'Per-type'} F1:", "",
                  "| system | " + " | ".join(classes) + " |", "|---" * (len(classes) + 1) + "|"]
        for name, row in entry["systems"].items():
            lines.append(f"| {name} | " + " | ".join(f"{row['scores'][per][c]['f1']:.2f}" for c in classes) + " |")
        lines.append("")
    return "\n".join(lines)

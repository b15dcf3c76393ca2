"""`finetune --task classification`: a pretrained encoder fine-tuned for single-label, multi-class text
classification (AutoModelForSequenceClassification: a fresh head on the [CLS] token) on the package's one engine
(finetuning/tasktrainer.py).

    run_classification(ClassificationConfig(model="arabert_pipeline/models/arabert-mini", output="runs/sentiment",
                       train=["arsarcasm-v2-train-rest"], dev=["arsarcasm-v2-dev"], hold_out=["arsarcasm-v2-test"],
                       label_column="sentiment", dev_metric="f1_pn", drop_leaking_train=True))

The texts go through the model's recorded preprocessing and are truncated to max_seq_length tokens. With
`class_weights`, the loss weighs each class by n / (classes × its count) in the training data (scikit-learn's
"balanced"), so a rare class (POS: 17% of ArSarcasm-v2) counts as much as a frequent one. The epoch kept is the one
with the best `dev_metric` (classification/metrics.py: macro_f1, accuracy, f1_pn, f1:LABEL). Evaluation sets are
predicted at the end into OUT/eval/NAME.predictions.jsonl ({"id", "label", "gold", "scores"}) and scored.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..finetuning.config import TaskConfig
from ..finetuning.leakage import text_leakage_finder
from ..finetuning.sets import read_labelled_sets
from ..finetuning.tasktrainer import TaskTrainer, run_task
from .data import dataset_license, read_texts
from .metrics import classification_report, metric_classes
from .model import TASK, TextClassifier, softmax


@dataclasses.dataclass
class ClassificationConfig(TaskConfig):
    text_column: str | None = None  # default "text", or the registered set's
    label_column: str = "label"
    labels: list[str] | None = None  # the classes, in the head's order (default: the training labels, sorted)
    format: str | None = None  # csv, tsv, jsonl (default: from the file name)
    class_weights: bool = False
    dev_metric: str = "macro_f1"


class ClassificationTrainer(TaskTrainer):
    task = TASK
    config: ClassificationConfig

    @property
    def dev_metric(self) -> str:
        return self.config.dev_metric

    def auto_class(self):
        from transformers import AutoModelForSequenceClassification

        return AutoModelForSequenceClassification

    def read(self, source: str, policy: str):
        config = self.config
        return read_texts(source, text_column=config.text_column, label_column=config.label_column,
                          labels=config.labels, format=config.format)

    def read_sets(self):
        config = self.config
        named = config.labels or []
        repeated = sorted({label for label in named if named.count(label) > 1})
        if repeated:  # two heads for one class: one of them would never be trained
            raise ConfigError(f"--labels names {', '.join(repeated)} more than once")
        return read_labelled_sets(self.read, text_leakage_finder(lambda e: e["text"]), train=config.train,
                                  dev=config.dev, eval=config.eval, hold_out=config.hold_out,
                                  policy=config.leakage_policy(), say=self.say, unit="examples")

    def choose_labels(self, sets) -> list[str]:
        seen = sorted({e["label"] for f in sets.train for e in f.examples})
        labels = list(self.config.labels) if self.config.labels else seen
        if len(labels) < 2:
            raise ConfigError(f"one class only ({', '.join(labels)}) in the training data: nothing to classify")
        for f in sets.dev + sets.eval:
            extra = sorted({e["label"] for e in f.examples} - set(labels))
            if extra:
                raise ConfigError(f"{f.name}: labels {', '.join(extra)} are not among the training labels "
                                  f"({', '.join(labels)}); pass --labels to name every class")
        metric_classes(self.config.dev_metric, labels)
        counts = Counter(e["label"] for e in sets.examples)
        self.say("classes: " + ", ".join(f"{label} {counts.get(label, 0)}" for label in labels))
        return labels

    def training_rows(self, examples):
        predictor = TextClassifier(None, self.tokenizer, self.preprocessing, self.labels, self.config.max_seq_length)
        index = {label: i for i, label in enumerate(self.labels)}
        return predictor.encode([e["text"] for e in examples]), [index[e["label"]] for e in examples]

    def class_weight_vector(self) -> np.ndarray:
        counts = np.bincount(np.asarray(self.row_labels), minlength=len(self.labels)).astype(np.float64)
        return np.where(counts > 0, counts.sum() / (len(self.labels) * np.maximum(counts, 1)), 0.0)

    def loss(self, outputs, batch):
        if not self.config.class_weights:
            return outputs.loss
        import torch

        weights = torch.as_tensor(self.class_weight_vector(), dtype=torch.float32, device=outputs.logits.device)
        return torch.nn.functional.cross_entropy(outputs.logits.float(), batch["labels"], weight=weights)

    def predictor(self) -> TextClassifier:
        return TextClassifier(self.unwrapped(), self.tokenizer, self.preprocessing, self.labels,
                              self.config.max_seq_length)

    def score(self, predictor, labelled) -> tuple[dict[str, Any], list[dict]]:
        probabilities = softmax(predictor.logits(predictor.encode([e["text"] for e in labelled.examples]),
                                                 self.config.batch_size))
        predicted = [self.labels[i] for i in probabilities.argmax(axis=1)]
        gold = [e["label"] for e in labelled.examples]
        report = classification_report(gold, predicted, self.labels)
        from .metrics import score_confusion

        report[self.dev_metric] = float(score_confusion(np.asarray(report["confusion"]), self.labels,
                                                        self.dev_metric))
        records = [{"id": e["id"], "label": p, "gold": g,
                    "scores": {label: round(float(v), 6) for label, v in zip(self.labels, row, strict=True)}}
                   for e, p, g, row in zip(labelled.examples, predicted, gold, probabilities, strict=True)]
        return report, records

    def task_metadata(self) -> dict[str, Any]:
        config = self.config
        return {"text_column": config.text_column, "label_column": config.label_column,
                "class_weights": self.class_weight_vector().round(4).tolist() if config.class_weights else None}

    def describe_set(self, labelled) -> dict[str, Any]:
        entry = super().describe_set(labelled)
        entry["label_column"] = labelled.label_column
        entry["classes"] = dict(sorted(Counter(e["label"] for e in labelled.examples).items()))
        if dataset_license(labelled.name):
            entry["license"] = dataset_license(labelled.name)
        return entry


def run_classification(config: ClassificationConfig, log=None):
    return run_task(ClassificationTrainer, config, log)

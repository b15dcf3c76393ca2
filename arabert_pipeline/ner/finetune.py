"""`finetune --task ner`: a pretrained encoder fine-tuned for BIO tagging (AutoModelForTokenClassification) on the
package's one engine (finetuning/tasktrainer.py).

    run_ner(NERConfig(model="arabert_pipeline/models/arabert-mini", output="runs/ner", train=["anercorp-train"],
                      dev=["anercorp-dev"], hold_out=["anercorp-test"]))

Sentences are mapped to tokens through the model's preprocessing (align.py: the label on each word's first sub-token,
a Farasa-segmented word labelled on its first segment's first token, long sentences cut into pieces at word
boundaries). The tags are O then B-/I- of every entity type of the training data, sorted. The epoch kept is the one
with the best entity-level dev F1 (micro by default, as seqeval and conlleval compute it). Evaluation sets are tagged
at the end into OUT/eval/NAME.predictions.jsonl ({"id", "tags", "gold"}) and scored.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import ConfigError
from ..finetuning.config import TaskConfig
from ..finetuning.leakage import text_leakage_finder
from ..finetuning.sets import read_labelled_sets
from ..finetuning.tasktrainer import TaskTrainer, run_task
from .align import IGNORE, WordEncoder, joined
from .data import dataset_license, read_conll
from .metrics import DEV_METRICS, ner_report
from .model import TASK, TokenTagger


@dataclasses.dataclass
class NERConfig(TaskConfig):
    repair_bio: bool = False  # read a user's training file's non-BIO tags as seqeval does, instead of refusing it
    dev_metric: str = "micro_f1"


class NERTrainer(TaskTrainer):
    task = TASK
    config: NERConfig

    @property
    def dev_metric(self) -> str:
        return self.config.dev_metric

    def auto_class(self):
        from transformers import AutoModelForTokenClassification

        return AutoModelForTokenClassification

    def read_sets(self):
        config = self.config
        if config.dev_metric not in DEV_METRICS:
            raise ConfigError(f"--dev-metric {config.dev_metric}: use one of {', '.join(DEV_METRICS)}")
        return read_labelled_sets(read_conll, text_leakage_finder(lambda e: " ".join(e["words"])),
                                  train=config.train, dev=config.dev, eval=config.eval, hold_out=config.hold_out,
                                  train_policy="repair" if config.repair_bio else "error",
                                  policy=config.leakage_policy(), say=self.say, unit="sentences")

    def choose_labels(self, sets) -> list[str]:
        types = sorted({t[2:] for e in sets.examples for t in e["tags"] if t != "O"})
        if not types:
            raise ConfigError("no entity in the training data: nothing to tag")
        for f in sets.dev + sets.eval:
            extra = sorted(set(f.types) - set(types))
            if extra:
                self.say(f"{f.name}: entity types {', '.join(extra)} never occur in training (they count as missed)")
        self.types = types
        return ["O", *(f"{p}-{t}" for t in types for p in "BI")]

    def encoder(self) -> WordEncoder:
        from ..preprocess import Preprocessor

        preprocessor = None if self.preprocessing == "none" else Preprocessor(self.preprocessing)
        return WordEncoder(self.tokenizer, preprocessor, self.config.max_seq_length, self.preprocessing)

    def training_rows(self, examples):
        index = {label: i for i, label in enumerate(self.labels)}
        texts, spans = zip(*(joined(e["words"]) for e in examples), strict=True)
        rows, labels, lost = [], [], 0
        for example, sentence in zip(examples, self.encoder().encode(texts, spans), strict=True):
            lost += sentence.untokenized
            for piece in sentence.pieces:
                row = [IGNORE] * len(piece.ids)
                for position, word in zip(piece.positions, piece.words, strict=True):
                    row[position] = index[example["tags"][word]]
                rows.append(piece.ids)
                labels.append(row)
        if lost:
            self.say(f"{lost} training word(s) left no token after preprocessing: not trained on")
        return rows, labels

    def predictor(self) -> TokenTagger:
        return TokenTagger(self.unwrapped(), self.tokenizer, self.preprocessing, self.labels,
                           self.config.max_seq_length)

    def score(self, predictor, labelled) -> tuple[dict[str, Any], list[dict]]:
        tagged = predictor.tag_words([e["words"] for e in labelled.examples], self.config.batch_size)
        predicted = [tags for tags, _ in tagged]
        gold = [e["tags"] for e in labelled.examples]
        # A type the set has and training had not is scored too: every entity of it counts as missed.
        report = ner_report(gold, predicted, sorted(set(self.types) | set(labelled.types)))
        records = [{"id": e["id"], "tags": p, "gold": g}
                   for e, p, g in zip(labelled.examples, predicted, gold, strict=True)]
        return report, records

    def task_metadata(self) -> dict[str, Any]:
        return {"entity_types": self.types, "labelled_token": "first sub-token of each word"}

    def describe_set(self, labelled) -> dict[str, Any]:
        entry = super().describe_set(labelled)
        entry["sentences"] = entry.pop("examples")
        entry["bio_repairs"] = len(labelled.misaligned)
        if dataset_license(labelled.name):
            entry["license"] = dataset_license(labelled.name)
        return entry


def run_ner(config: NERConfig, log=None):
    return run_task(NERTrainer, config, log)

"""`arabert-pipeline add-lexical`: fit a text classifier's lexical companion (lexical.py) on its training set, weigh it
against the model on dev, and write the model dir with it. Apart from lexical.py because it runs the model
(model.py), which reads the companion when it answers.

    add_lexical("runs/sentiment", ["arsarcasm-v2-train-rest"], ["arsarcasm-v2-dev"], "runs/sentiment-lexical",
                label_column="sentiment")
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..cliargs import check_seed
from ..errors import ConfigError
from ..outputs import MODEL_DIR_FILES, OutputKind
from .lexical import LEXICAL_DIR, MAX_CHAR_FEATURES, MAX_WORD_FEATURES, LexicalCompanion, choose_weight

LEXICAL_OUTPUT = OutputKind("add-lexical", names=(*MODEL_DIR_FILES, "README.md", LEXICAL_DIR), markers=(LEXICAL_DIR,))


def add_lexical(model_dir: str | Path, train: list[str], dev: list[str], output: str | Path, *,
                hold_out: Sequence[str] = (), text_column: str | None = None, label_column: str = "label",
                format: str | None = None, weight: float | None = None, seed: int = 0,
                max_word_features: int = MAX_WORD_FEATURES, max_char_features: int = MAX_CHAR_FEATURES,
                overwrite: bool = False, say=print) -> dict[str, Any]:
    """Fit the companion on `train` (its C chosen on `dev`, the training texts that leak into dev or `hold_out`
    dropped), weigh it against the classifier in `model_dir` on `dev` (unless `weight` is given), and write the model
    with it to `output`. Returns what arabert_pipeline.json records under "lexical"."""
    import shutil

    from ..artifacts.metadata import write_metadata
    from ..artifacts.models import check_local_source, model_config
    from ..artifacts.paths import portable_path
    from ..artifacts.writes import atomic_directory
    from ..finetuning.leakage import text_leakage_finder
    from ..finetuning.modeldir import model_metadata
    from ..finetuning.sets import read_labelled_sets
    from ..outputs import OutputLock, check_not_input, claim_output_dir
    from .baselines import fit_baseline
    from .data import read_texts
    from .metrics import confusion, score_confusion
    from .model import TASK, OnnxTextClassifier, TextClassifier, read_labels

    model_dir, output = Path(model_dir), Path(output)
    check_local_source(model_dir)
    check_seed(seed)
    if weight is not None and not (type(weight) in (int, float) and 0 <= weight <= 1):
        raise ConfigError(f"--weight must be a number in [0, 1], not {weight!r}")
    for name, value in (("max_word_features", max_word_features), ("max_char_features", max_char_features)):
        if type(value) is not int or value < 1:
            raise ConfigError(f"{name} must be a positive integer, not {value!r}")
    metadata = model_metadata(model_dir)
    if metadata.get("task") != TASK:
        raise ConfigError(f"{model_dir} is not a text classifier (its arabert_pipeline.json task is "
                          f"{metadata.get('task')!r}): fine-tune one with `finetune --task classification`")

    # Every set read against the model's classes: a dev label the head lacks would be found only after the model
    # loaded, as a KeyError in the scoring.
    classes = read_labels(metadata, model_config(model_dir), model_dir)

    def read(source: str, _policy: str):
        return read_texts(source, text_column=text_column, label_column=label_column, format=format, labels=classes)

    check_not_input(output, [model_dir], within=True)
    with OutputLock(output, "add-lexical"):
        sets = read_labelled_sets(read, text_leakage_finder(lambda e: e["text"]), train=train, dev=dev,
                                  hold_out=hold_out, policy="drop", say=say, unit="examples")
        claim_output_dir(output, LEXICAL_OUTPUT, inputs=[model_dir, *[s for s in train + dev if Path(s).exists()]],
                         overwrite=overwrite)
        onnx = (model_dir / "model.onnx").is_file()
        classifier = (OnnxTextClassifier if onnx else TextClassifier).load(model_dir)
        classifier.lexical = None  # weighed anew, alone against the model
        labels = classifier.labels
        metric = metadata.get("dev_metric", "macro_f1")
        dev_examples = [e for f in sets.dev for e in f.examples]
        baseline = fit_baseline("tfidf-lr", sets.examples, dev_examples, labels, metric=metric, seed=seed,
                                preprocessing=classifier.preprocessing, max_word_features=max_word_features,
                                max_char_features=max_char_features)
        companion = LexicalCompanion.from_pipeline(baseline.model, classifier.preprocessing)
        prepared = classifier.preprocess([e["text"] for e in dev_examples])
        p_model = classifier.predict_proba(prepared, preprocessed=True)
        p_lexical = companion.predict_proba(prepared, labels)
        gold = [e["label"] for e in dev_examples]

        def score(probabilities: np.ndarray) -> float:
            predicted = [labels[i] for i in probabilities.argmax(axis=1)]
            return float(score_confusion(confusion(gold, predicted, labels), labels, metric))  # ×100 already

        chosen, rows = choose_weight(p_model, p_lexical, score)
        if weight is not None:
            chosen = float(weight)
        record = {"added_by": "add-lexical", "model": portable_path(model_dir),
                  "train": [{"name": f.name, "examples": len(f.examples)} for f in sets.train],
                  "dropped_for_leakage": sum(sets.dropped.values()),
                  "dev": [{"name": f.name, "examples": len(f.examples)} for f in sets.dev],
                  "dev_metric": metric, "C": baseline.chosen["C"], "C_dev_scores": baseline.chosen["dev_scores"],
                  "features": {"word": len(companion.word.terms), "char": len(companion.char.terms)},
                  "max_features": {"word": max_word_features, "char": max_char_features}, "seed": seed,
                  "weight": chosen, "weight_given": weight is not None, "dev_scores": rows}
        companion.record = record
        with atomic_directory(output) as staging:
            for path in sorted(model_dir.iterdir()):
                if path.is_file() and path.name != "arabert_pipeline.json" and LEXICAL_OUTPUT.owns(path.name):
                    shutil.copy2(path, staging / path.name)
            companion.save(staging / LEXICAL_DIR)
            write_metadata(staging, **{**metadata, "lexical_weight": chosen, "lexical": record})
    return record


def describe(record: dict[str, Any]) -> str:
    by_weight = {row["weight"]: row["score"] for row in record["dev_scores"]}
    chosen = by_weight.get(record["weight"], float("nan"))
    return (f"lexical companion: {record['features']['word']:,} word + {record['features']['char']:,} character "
            f"n-grams, C {record['C']:g}; dev {record['dev_metric']}: model alone {by_weight[0.0]:.1f}, companion "
            f"alone {by_weight[1.0]:.1f}, weight {record['weight']:g} → {chosen:.1f}")

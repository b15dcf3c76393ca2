"""The reference rows every classification table carries: models that need no pretrained encoder.

- `tfidf-lr`: TF-IDF of word uni- and bigrams and of character 2–5-grams within word boundaries, concatenated, into a
  logistic regression (scikit-learn, lbfgs, class_weight="balanced"); its C is chosen on the dev sets by the dev metric
  among C_GRID. The texts are AraBERT-normalized first (preprocessing arabertv02), the input the models read.
- `majority`: the most frequent training class for every text.

    baseline = fit_baseline("tfidf-lr", train_examples, dev_examples, labels, metric="f1_pn")
    baseline.predict(["نص"])  ->  ["NEG"]
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError
from .metrics import confusion, score_confusion

BASELINES = ("tfidf-lr", "majority")
C_GRID = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
PREPROCESSING = "arabertv02"


@dataclasses.dataclass
class Baseline:
    name: str
    labels: list[str]
    model: Any = None  # the fitted sklearn pipeline (tfidf-lr)
    majority: str | None = None
    chosen: dict[str, Any] = dataclasses.field(default_factory=dict)  # settings chosen on dev, and the dev scores
    preprocessing: str = PREPROCESSING  # what the texts go through before the features

    def predict(self, texts: Sequence[str]) -> list[str]:
        if self.majority is not None:
            return [self.majority] * len(texts)
        return list(self.model.predict(_normalized(texts, self.preprocessing)))


def _normalized(texts: Sequence[str], preprocessing: str = PREPROCESSING) -> list[str]:
    from ..preprocess import Preprocessor

    return list(texts) if preprocessing == "none" else Preprocessor(preprocessing).preprocess_batch(list(texts))


def _tfidf_lr(c: float, seed: int, max_word_features: int | None = None, max_char_features: int = 200_000):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline, make_union

    features = make_union(
        TfidfVectorizer(analyzer="word", ngram_range=(1, 2), min_df=2, sublinear_tf=True, token_pattern=r"\S+",
                        max_features=max_word_features),
        TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), min_df=2, sublinear_tf=True,
                        max_features=max_char_features),
    )
    return make_pipeline(features, LogisticRegression(C=c, max_iter=2000, class_weight="balanced",
                                                      random_state=seed))


def fit_baseline(name: str, train: Sequence[dict], dev: Sequence[dict], labels: Sequence[str], *,
                 metric: str = "macro_f1", seed: int = 0, preprocessing: str = PREPROCESSING, **sizes) -> Baseline:
    """Fit baseline `name` on train examples {"text", "label"}; choose its setting on dev (when given) by `metric`.
    `preprocessing`: of the texts before the features (a lexical companion reads its model's); `sizes`: tfidf-lr's
    max_word_features / max_char_features (lexical.py bounds them)."""
    labels = list(labels)
    if name == "majority":
        counts = Counter(e["label"] for e in train)
        return Baseline(name, labels, majority=max(labels, key=lambda label: (counts[label], label)))
    if name != "tfidf-lr":
        raise ConfigError(f"unknown classification baseline {name!r}: use one of {', '.join(BASELINES)}")
    texts, gold = _normalized([e["text"] for e in train], preprocessing), [e["label"] for e in train]
    grid = C_GRID if dev else (1.0,)
    dev_texts = _normalized([e["text"] for e in dev], preprocessing) if dev else []
    scores: dict[float, float] = {}
    best_c, best_model = grid[0], None
    for c in grid:
        model = _tfidf_lr(c, seed, **sizes).fit(texts, gold)
        if dev:
            predicted = model.predict(dev_texts)
            scores[c] = float(score_confusion(confusion([e["label"] for e in dev], predicted, labels), labels, metric))
        if best_model is None or (dev and scores[c] > scores[best_c]):
            best_c, best_model = c, model
    return Baseline(name, labels, model=best_model, chosen={"C": best_c, "dev_metric": metric,
                                                         "dev_scores": {str(c): s for c, s in scores.items()}},
                    preprocessing=preprocessing)


"""A text classifier's lexical companion: baselines.py's TF-IDF + logistic regression, fitted on the classifier's
training set and averaged with it, p = (1 − w) · p_model + w · p_lexical, the weight w chosen on dev
(`arabert-pipeline add-lexical`, addlexical.py; TextClassifier applies it when the model dir has one).

Why: a small encoder and TF-IDF err differently. On ArSarcasm-v2 dev the shipped mini encoder and TF-IDF are level
(F1-PN 62.4 and 62.0) and their average is 3.5 points above either; the QA model's DrQA reader plays the same part
for spans (qa/transformer/companion.py).

Stored as arrays, never a pickle (nothing is unpickled from a model dir), in MODEL/lexical/:
    lexical.json   the labels in the regression's order, the preprocessing, the vectorizers' settings, the
                   vocabularies (terms in column order), how it was fitted and chosen
    weights.npz    word_idf, char_idf, coef (labels × features), intercept (read with allow_pickle=False)
scikit-learn fits it (add-lexical); answering computes its features with TfidfFeatures, as scikit-learn's
TfidfVectorizer computes them, and the regression as a matrix product and a softmax, as LogisticRegression's
predict_proba does, without importing scikit-learn.
"""
from __future__ import annotations

import json
import re
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts.models import describe_exception
from ..artifacts.reads import MAX_DATA_FILE_BYTES, read_json_file
from ..artifacts.writes import atomic_write
from ..errors import ConfigError, InputError
from ..finetuning.taskexport import LEXICAL_DIR  # noqa: F401 (named once: the shipped form carries the companion)
from ..weights.files import open_regular_file

SETTINGS_FILE, WEIGHTS_FILE = "lexical.json", "weights.npz"
FORMAT = 1
# Weights of the companion tried on dev (0: the model alone, 1: the companion alone).
WEIGHT_GRID = tuple(round(0.1 * i, 1) for i in range(11))
# Vocabulary sizes of the shipped companion: a shipped task model stays ≤ 20 MB in the repository; on ArSarcasm-v2 dev
# these (40k features, 0.9 MB) averaged with the encoder scored as the unbounded 125k (F1-PN 65.5 both).
MAX_WORD_FEATURES, MAX_CHAR_FEATURES = 10_000, 30_000


class TfidfFeatures:
    """One fitted TfidfVectorizer's transform of new texts, written out: its analyzer ("word": `token_pattern` tokens
    and their n-grams; "char_wb": character n-grams inside each space-padded word), raw counts of the vocabulary's
    terms, 1 + log(count) when sublinear, × idf, then the row's norm. scikit-learn computes the same (the tests compare
    the two); it is not used here because importing it costs about 1.2 s of a task model's 1.5 s cold-start budget."""

    def __init__(self, params: dict[str, Any], terms: Sequence[str], idf: np.ndarray):
        self.params = params
        self.analyzer, (self.low, self.high) = params["analyzer"], params["ngram_range"]
        self.pattern = re.compile(params["token_pattern"]) if self.analyzer == "word" else None
        self.index = {term: column for column, term in enumerate(terms)}
        self.terms, self.idf = list(terms), np.asarray(idf, dtype=np.float64)

    @classmethod
    def from_vectorizer(cls, vectorizer) -> TfidfFeatures:
        params = vectorizer.get_params()
        vocabulary = vectorizer.vocabulary_
        return cls({name: tuple(params[name]) if name == "ngram_range" else params[name] for name in _PARAMS},
                   sorted(vocabulary, key=vocabulary.__getitem__), vectorizer.idf_)

    def ngrams(self, text: str) -> list[str]:
        if self.params["lowercase"]:
            text = text.lower()
        grams = []
        if self.pattern is not None:  # the word analyzer
            tokens = self.pattern.findall(text)
            for n in range(self.low, self.high + 1):
                grams += [" ".join(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
            return grams
        for word in text.split():
            padded = f" {word} "
            for n in range(self.low, self.high + 1):
                if len(padded) <= n:  # scikit-learn's char_wb: a padded word no longer than n counts once, whole
                    grams.append(padded)
                    break
                grams += [padded[i:i + n] for i in range(len(padded) - n + 1)]
        return grams

    def row(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """The text's non-zero columns and their values."""
        counts: dict[int, int] = {}
        for gram in self.ngrams(text):
            column = self.index.get(gram)
            if column is not None:
                counts[column] = counts.get(column, 0) + 1
        columns = np.fromiter(counts, dtype=np.int64, count=len(counts))
        values = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
        if self.params["sublinear_tf"]:
            values = 1.0 + np.log(values)
        if self.params["use_idf"]:
            values *= self.idf[columns]
        norm = self.params["norm"]
        if norm is not None and len(values):
            total = np.sqrt((values ** 2).sum()) if norm == "l2" else np.abs(values).sum()
            values /= total if total > 0 else 1.0
        return columns, values


class LexicalCompanion:
    """The fitted TF-IDF features and regression; `predict_proba(texts)` over texts already preprocessed as
    `preprocessing` names (the classifier's own preprocessing)."""

    def __init__(self, word: TfidfFeatures, char: TfidfFeatures, coef: np.ndarray, intercept: np.ndarray,
                 labels: Sequence[str], preprocessing: str, record: dict[str, Any] | None = None):
        self.word, self.char = word, char
        self.coef, self.intercept = coef, intercept
        self.labels = list(labels)
        self.preprocessing = preprocessing
        self.record = record or {}  # how it was fitted and weighed, kept in lexical.json

    @classmethod
    def from_pipeline(cls, pipeline, preprocessing: str, record: dict[str, Any] | None = None) -> LexicalCompanion:
        """From a fitted baselines.tfidf_lr pipeline (a FeatureUnion of the word and char vectorizers, then the
        regression)."""
        union, regression = pipeline.steps[0][1], pipeline.steps[-1][1]
        (_, word), (_, char) = union.transformer_list
        coef, intercept = regression.coef_, regression.intercept_
        if coef.shape[0] == 1:  # two classes: sklearn keeps one row, p(second) = sigmoid(z) = softmax([0, z])[1]
            coef, intercept = np.vstack([np.zeros_like(coef), coef]), np.concatenate([[0.0], intercept])
        return cls(TfidfFeatures.from_vectorizer(word), TfidfFeatures.from_vectorizer(char),
                   coef.astype(np.float32), intercept.astype(np.float32), [str(c) for c in regression.classes_],
                   preprocessing, record)

    def predict_proba(self, texts: Sequence[str], labels: Sequence[str] | None = None) -> np.ndarray:
        """(n, labels) probabilities; `labels`: the columns' order (default: the companion's own)."""
        logits = np.tile(self.intercept.astype(np.float64), (len(texts), 1))
        offset = len(self.word.terms)
        for i, text in enumerate(texts):
            for features, shift in ((self.word, 0), (self.char, offset)):
                columns, values = features.row(text)
                logits[i] += self.coef[:, columns + shift] @ values
        logits -= logits.max(axis=1, keepdims=True)
        probabilities = np.exp(logits)
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        if labels is not None:
            probabilities = probabilities[:, [self.labels.index(label) for label in labels]]
        return probabilities

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        settings = {"format": FORMAT, "labels": self.labels, "preprocessing": self.preprocessing,
                    **{name: {"params": {**features.params, "ngram_range": list(features.params["ngram_range"])},
                              "vocabulary": features.terms}
                       for name, features in (("word", self.word), ("char", self.char))},
                    **self.record}
        with atomic_write(directory / SETTINGS_FILE) as f:
            json.dump(settings, f, ensure_ascii=False, separators=(",", ":"))
        with atomic_write(directory / WEIGHTS_FILE, "wb") as f:
            np.savez_compressed(f, word_idf=self.word.idf.astype(np.float32), char_idf=self.char.idf.astype(np.float32),
                                coef=self.coef, intercept=self.intercept)

    @classmethod
    def load(cls, directory: Path, labels: Sequence[str], preprocessing: str) -> LexicalCompanion:
        """The companion in `directory`, checked against the classifier it sits beside (its labels, its
        preprocessing) and field by field: a damaged file is named, never half-read."""
        settings_path, weights_path = directory / SETTINGS_FILE, directory / WEIGHTS_FILE
        try:  # a regular file, bounded, parsed with every JSON failure named: a FIFO would hang every answer
            settings = read_json_file(settings_path, max_bytes=MAX_DATA_FILE_BYTES)  # its vocabulary may be large
        except InputError as exc:
            raise ConfigError(str(exc)) from None
        if settings.get("format") != FORMAT:
            raise ConfigError(f"{settings_path}: not a lexical companion of format {FORMAT}")
        if settings.get("preprocessing") != preprocessing:
            raise ConfigError(f"{settings_path}: fitted on {settings.get('preprocessing')!r} text, but the model "
                              f"reads {preprocessing!r} text")
        own = settings.get("labels")
        if not isinstance(own, list) or sorted(map(str, own)) != sorted(labels) or len(own) != len(labels):
            raise ConfigError(f"{settings_path}: labels {own!r} are not the model's {list(labels)}")
        weights = _read_weights(weights_path)
        features = []
        for name in ("word", "char"):
            entry = settings.get(name)
            if not isinstance(entry, dict) or not isinstance(entry.get("vocabulary"), list) \
                    or not isinstance(entry.get("params"), dict):
                raise ConfigError(f"{settings_path}: {name} must hold params and a vocabulary")
            terms, idf = entry["vocabulary"], weights[f"{name}_idf"]
            if len(set(terms)) != len(terms) or not all(isinstance(t, str) for t in terms):
                raise ConfigError(f"{settings_path}: the {name} vocabulary must list distinct terms")
            if idf.shape != (len(terms),) or not np.all(np.isfinite(idf)):
                raise ConfigError(f"{weights_path}: {name}_idf must hold {len(terms)} finite numbers")
            features.append(TfidfFeatures(_checked_params(entry["params"], f"{settings_path}: {name}"), terms, idf))
        width = sum(len(f.terms) for f in features)
        coef, intercept = weights["coef"], weights["intercept"]
        if coef.shape != (len(own), width) or intercept.shape != (len(own),) \
                or not (np.all(np.isfinite(coef)) and np.all(np.isfinite(intercept))):
            raise ConfigError(f"{weights_path}: coef must be {len(own)} × {width} and intercept {len(own)} finite "
                              f"numbers, not {coef.shape} and {intercept.shape}")
        record = {k: v for k, v in settings.items() if k not in ("format", "labels", "preprocessing", "word", "char")}
        word, char = features
        return cls(word, char, coef.astype(np.float32), intercept.astype(np.float32), own, preprocessing, record)


def _read_weights(path: Path) -> dict[str, np.ndarray]:
    """The arrays of weights.npz, read without pickle from a regular file; a truncated or foreign file (a zip cut
    short, an .npy, a member that does not inflate) is a ConfigError naming it."""
    names = ("word_idf", "char_idf", "coef", "intercept")
    try:
        with open_regular_file(path, max_bytes=MAX_DATA_FILE_BYTES) as f:
            arrays = np.load(f, allow_pickle=False)
            if not isinstance(arrays, np.lib.npyio.NpzFile):
                raise ValueError(f"not an .npz archive of {', '.join(names)}")
            with arrays:
                return {name: arrays[name] for name in names}
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise ConfigError(f"{path}: unreadable ({describe_exception(exc)})") from None


# The vectorizer settings the transform reads (smooth_idf only shaped the idf when it was fitted).
_PARAMS = ("analyzer", "ngram_range", "lowercase", "sublinear_tf", "token_pattern", "norm", "use_idf", "smooth_idf")


def _checked_params(params: dict[str, Any], where: str) -> dict[str, Any]:
    """The stored vectorizer settings, each checked."""
    if set(params) != set(_PARAMS):
        raise ConfigError(f"{where}: params must be exactly {', '.join(_PARAMS)}")
    low, high = params["ngram_range"] if isinstance(params["ngram_range"], list) and len(params["ngram_range"]) == 2 \
        else (None, None)
    checks = {"analyzer": params["analyzer"] in ("word", "char_wb"),
              "ngram_range": type(low) is int and type(high) is int and 1 <= low <= high <= 20,
              "token_pattern": params["analyzer"] != "word" or _compiles(params["token_pattern"]),
              "norm": params["norm"] in ("l1", "l2", None)}
    checks.update({name: type(params[name]) is bool for name in ("lowercase", "sublinear_tf", "use_idf", "smooth_idf")})
    bad = next((name for name, ok in checks.items() if not ok), None)
    if bad is not None:
        raise ConfigError(f"{where}: params: {bad} {params[bad]!r} is not a setting of this TF-IDF transform")
    return {**params, "ngram_range": (low, high)}


def _compiles(pattern: Any) -> bool:
    try:
        return isinstance(pattern, str) and re.compile(pattern) is not None
    except re.error:
        return False


def mix(p_model: np.ndarray, p_lexical: np.ndarray, weight: float) -> np.ndarray:
    return (1.0 - weight) * p_model + weight * p_lexical


def choose_weight(p_model: np.ndarray, p_lexical: np.ndarray, score) -> tuple[float, list[dict[str, float]]]:
    """The weight of WEIGHT_GRID with the best dev `score(probabilities)`; on a tie the smaller (the plainer model)."""
    rows = [{"weight": w, "score": float(score(mix(p_model, p_lexical, w)))} for w in WEIGHT_GRID]
    best = max(rows, key=lambda row: (row["score"], -row["weight"]))
    return best["weight"], rows

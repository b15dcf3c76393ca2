"""The reference rows every NER table carries: taggers that need no pretrained encoder.

- `most-frequent-tag`: each word form's most frequent training tag (O for a form never seen), then read as BIO by
  the scorer: the classic NER baseline of CoNLL's shared tasks.
- `crf`: a linear-chain CRF (sklearn-crfsuite, L-BFGS) over word-shape and affix features of the word and its
  neighbours (±2): the form, its prefixes and suffixes of 1–3 letters, its shape (Arabic / Latin / digit / punctuation
  runs), length, the Arabic article, and the forms and suffixes of the neighbours; its L1 / L2 weights are chosen on
  the dev sets by entity micro-F1 among C_GRID.

    tagger = fit_baseline("crf", train_sentences, dev_sentences)
    tagger.predict([["زار", "ماكرون", "بيروت"]])   # [["O", "B-PERS", "B-LOC"]]

- `bilstm`: two stacked BiLSTMs over static word vectors and a character CNN (`ner/bilstm.py`), its epoch chosen on
  the dev sets; `vectors` names the word vectors (default: the shipped arabert-mini's reader table).
"""
from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import regex

from ..errors import ConfigError
from .metrics import ner_report

BASELINES = ("most-frequent-tag", "crf", "bilstm")
C_GRID = ((0.05, 0.01), (0.1, 0.05), (0.25, 0.05), (0.05, 0.1))  # (c1, c2)
CRF_ITERATIONS = 150

_SHAPES = (("A", regex.compile(r"\p{Arabic}")), ("L", regex.compile(r"[A-Za-z]")), ("d", regex.compile(r"\d")))


def shape(word: str) -> str:
    """Runs of Arabic letters (A), Latin letters (L), digits (d) and anything else (p), each run written once."""
    out: list[str] = []
    for ch in word:
        kind = next((k for k, pattern in _SHAPES if pattern.match(ch)), "p")
        if not out or out[-1] != kind:
            out.append(kind)
    return "".join(out)


def word_features(words: Sequence[str], i: int) -> dict[str, Any]:
    w = words[i]
    f: dict[str, Any] = {"bias": 1.0, "w": w, "shape": shape(w), "len": min(len(w), 10), "al": w.startswith("ال"),
                         "digit": w.isdigit()}
    for k in (1, 2, 3):
        f[f"p{k}"], f[f"s{k}"] = w[:k], w[-k:]
    for offset in (-2, -1, 1, 2):
        j = i + offset
        if 0 <= j < len(words):
            f[f"{offset}:w"] = words[j]
            f[f"{offset}:s2"] = words[j][-2:]
            f[f"{offset}:shape"] = shape(words[j])
        else:
            f[f"{offset}:edge"] = True
    return f


def sentence_features(words: Sequence[str]) -> list[dict[str, Any]]:
    return [word_features(words, i) for i in range(len(words))]


@dataclasses.dataclass
class Tagger:
    name: str
    model: Any = None
    table: dict[str, str] | None = None
    chosen: dict[str, Any] = dataclasses.field(default_factory=dict)

    def predict(self, sentences: Sequence[Sequence[str]]) -> list[list[str]]:
        if self.table is not None:
            return [[self.table.get(w, "O") for w in words] for words in sentences]
        return [list(tags) for tags in self.model.predict([sentence_features(words) for words in sentences])]


def fit_baseline(name: str, train: Sequence[dict], dev: Sequence[dict] = (), *, seed: int = 0, vectors=None):
    """Fit baseline `name` on sentences {"words", "tags"}; the CRF's setting and the BiLSTM's epoch chosen on `dev`
    when given."""
    if name == "most-frequent-tag":
        counts: dict[str, Counter] = defaultdict(Counter)
        for e in train:
            for w, t in zip(e["words"], e["tags"], strict=True):
                counts[w][t] += 1
        return Tagger(name, table={w: max(c, key=lambda t: (c[t], t == "O", t)) for w, c in counts.items()})
    if name == "bilstm":
        from .bilstm import fit_bilstm

        return fit_bilstm(train, dev, vectors, seed=seed)
    if name != "crf":
        raise ConfigError(f"unknown NER baseline {name!r}: use one of {', '.join(BASELINES)}")
    try:
        import sklearn_crfsuite
    except ImportError as exc:
        raise ConfigError("the CRF baseline needs sklearn-crfsuite: pip install sklearn-crfsuite") from exc
    x = [sentence_features(e["words"]) for e in train]
    y = [list(e["tags"]) for e in train]
    grid = C_GRID if dev else C_GRID[:1]
    best, scores = None, {}
    for c1, c2 in grid:
        crf = sklearn_crfsuite.CRF(algorithm="lbfgs", c1=c1, c2=c2, max_iterations=CRF_ITERATIONS,
                                   all_possible_transitions=True)
        crf.fit(x, y)
        tagger = Tagger(name, model=crf)
        if dev:
            scores[(c1, c2)] = ner_report([e["tags"] for e in dev],
                                          tagger.predict([e["words"] for e in dev]))["micro_f1"]
        if best is None or (dev and scores[(c1, c2)] > scores[best[0]]):
            best = ((c1, c2), tagger)
    assert best is not None  # C_GRID is never empty
    best[1].chosen = {"c1": best[0][0], "c2": best[0][1], "dev_metric": "micro_f1",
                      "dev_scores": {f"{a},{b}": s for (a, b), s in scores.items()}}
    return best[1]

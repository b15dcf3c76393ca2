"""BM25 over the passages' terms, by the `bm25s` library: the index's scoring, whatever built or stored it.

bm25s (Lù 2024) computes every (term, passage) BM25 weight once, at build, into a sparse matrix (CSC: `data`,
`indices`, `indptr`); a query's scores are the sums of its terms' columns. Lucene's BM25 variant (the idf of Lucene and
Pyserini, k1 = 1.5, b = 0.75, bm25s's defaults). The matrix and the vocabulary are what an index dir stores
(index.py), as plain .npy arrays and JSON read with np.load(allow_pickle=False): bm25s's own `BM25.load` would also
read its parameters from the directory into the constructor, so the index dir keeps them in its metadata instead.

Ties are broken by passage position, so that the same index and question always give the same hits in the same order.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError

LIBRARY = "bm25s"
PARAMS = {"method": "lucene", "k1": 1.5, "b": 0.75}
# bm25s's term-frequency variants that need no more than the weight matrix (BM25L and BM25+ also need an array of
# non-occurrence scores).
METHODS = ("lucene", "robertson", "atire")
ARRAYS = ("data", "indices", "indptr")
# The dtypes bm25s builds and scores with: float32 weights, int32 passage rows, int64 column pointers.
DTYPES = {"data": np.float32, "indices": np.int32, "indptr": np.int64}


def library_version() -> str:
    from bm25s.version import __version__

    return __version__


class Scorer:
    """BM25 scores of `passages` rows for a query's terms."""

    def __init__(self, model: Any, vocabulary: dict[str, int], passages: int, params: dict):
        self.model, self.vocabulary, self.passages, self.params = model, vocabulary, passages, params

    @classmethod
    def build(cls, rows: Sequence[Sequence[int]], vocabulary: dict[str, int], params: dict | None = None) -> Scorer:
        """Index `rows` (each passage's terms as vocabulary ids)."""
        import bm25s

        params = dict(params or PARAMS)
        model = bm25s.BM25(**params)
        if vocabulary:
            model.index((rows, vocabulary), create_empty_token=False, show_progress=False)
        else:  # no passage has a term (only punctuation): nothing can match
            model.scores = {"data": np.zeros(0, np.float32), "indices": np.zeros(0, np.int32),
                            "indptr": np.zeros(1, np.int64), "num_docs": len(rows)}
            model.vocab_dict = {}
        return cls(model, vocabulary, len(rows), params)

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], vocabulary: dict[str, int], passages: int,
                    params: dict) -> Scorer:
        import bm25s

        if params.get("method") not in METHODS:
            raise ConfigError(f"BM25 method {params.get('method')!r}: an index stores one of {', '.join(METHODS)}")
        model = bm25s.BM25(**params)
        model.scores = {**arrays, "num_docs": passages}
        model.vocab_dict = vocabulary
        model.nonoccurrence_array = None  # what bm25s's own load sets for these methods
        return cls(model, vocabulary, passages, params)

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: np.asarray(self.model.scores[name], dtype=DTYPES[name]) for name in ARRAYS}

    def top(self, terms: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """(passage rows, scores) of the best `k` passages that share a term with the query, best first."""
        ids = [self.vocabulary[term] for term in terms if term in self.vocabulary]
        if not ids:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        scores = self.model.get_scores_from_ids(ids)
        rows = np.flatnonzero(scores > 0)
        if len(rows) > k:
            found = scores[rows]
            rows = rows[found >= np.partition(found, len(found) - k)[len(found) - k]]
        order = np.lexsort((rows, -scores[rows]))[:k]
        return rows[order], scores[rows[order]]

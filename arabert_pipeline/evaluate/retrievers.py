"""The retrievers an open evaluation puts side by side (evaluate/open_domain.py), each giving `retrieval.index.Hit`
lists so that one reading path (qa/transformer/passages.py `read_hits`, `chosen_answers`) reads them all:

- `bm25`: the package's `Index` (bm25s over its default Arabic analysis), the retriever that `Pipeline.answer(q,
  index=...)` and long contexts use;
- `tfidf`: TF-IDF as SOQAL's retriever computes it (Mozannar et al. 2019, the ARCD paper; its
  `retriever/TfidfRetriever.py`): scikit-learn's `TfidfVectorizer` over the raw text, word unigrams and bigrams, its
  default tokens (two or more word characters, lower-cased), smoothed idf, no normalization of the vectors
  (`norm=None`), a passage scored by the dot product of its vector with the question's. Two differences, both
  stated in docs/evaluation.md: SOQAL drops NLTK's Arabic stop words, a data download that no package here ships
  (their idf is low, so they weigh little); and SOQAL ranks Wikipedia articles first and their paragraphs second
  (its hierarchical retriever), where here, as for BM25, the passages of every document are ranked at once.

Both split documents into the same passages (retrieval/passages.py), so a passage's rank means the same under both.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ..errors import ConfigError
from ..retrieval.index import Hit, Index, check_documents
from ..retrieval.passages import DEFAULT_PASSAGE_CHARS, Passage, split_passages

RETRIEVERS = ("bm25", "tfidf")
RETRIEVER_NAMES = {"bm25": "BM25 (bm25s, the package's Index)", "tfidf": "TF-IDF (SOQAL's: scikit-learn, uni+bigrams)"}


class Retriever(Protocol):
    """What the open evaluation asks of a retriever: hits for questions, and a document's text by position."""

    def __len__(self) -> int: ...  # passages

    def search(self, query: str, k: int = 10) -> list[Hit]: ...

    def document_text(self, position: int) -> str: ...


class TfidfRetriever:
    """SOQAL's TF-IDF ranking over passages (the module docstring); built in memory, searched like an `Index`."""

    def __init__(self, texts: list[str], ids: list[str] | None, titles: list[str | None] | None,
                 passages: list[Passage], vectorizer, matrix):
        self._texts, self._ids, self._titles = texts, ids, titles
        self._passages, self._vectorizer, self._matrix = passages, vectorizer, matrix

    @classmethod
    def build(cls, texts: Sequence[str], ids: Sequence[str | int] | None = None,
              titles: Sequence[str | None] | None = None, *,
              passage_chars: int = DEFAULT_PASSAGE_CHARS) -> TfidfRetriever:
        """The passages of `texts` (checked as `Index.build` checks them), vectorized."""
        from sklearn.feature_extraction.text import TfidfVectorizer

        texts, ids, titles = check_documents(texts, ids, titles)
        passages = [p for d, text in enumerate(texts) for p in split_passages(text, passage_chars, document=d)]
        vectorizer = TfidfVectorizer(ngram_range=(1, 2), norm=None, dtype=np.float32)
        try:
            matrix = vectorizer.fit_transform([texts[p.document][p.start:p.end] for p in passages])
        except ValueError:  # not one word of two characters in any passage: nothing can match
            vectorizer, matrix = None, None
        return cls(texts, ids, titles, passages, vectorizer, matrix)

    def __len__(self) -> int:
        """The number of passages."""
        return len(self._passages)

    def document_text(self, position: int) -> str:
        return self._texts[position]

    def search(self, query: str, k: int = 10) -> list[Hit]:
        """The `k` passages of highest TF-IDF dot product with `query`, best first; only passages sharing a term with
        it, ties by passage position (as `Index.search`)."""
        if type(k) is not int or k < 1:
            raise ConfigError(f"k {k!r}: the number of hits is a whole number ≥ 1")
        if self._vectorizer is None:
            return []
        column = (self._matrix @ self._vectorizer.transform([query]).T).tocsc()
        rows, scores = column.indices, column.data
        keep = scores > 0
        rows, scores = rows[keep], scores[keep]
        order = np.lexsort((rows, -scores))[:k]
        return [self._hit(int(rows[i]), float(scores[i])) for i in order]

    def _hit(self, row: int, score: float) -> Hit:
        passage = self._passages[row]
        document = passage.document
        return Hit(passage, score, str(document) if self._ids is None else self._ids[document],
                   None if self._titles is None else self._titles[document],
                   self._texts[document][passage.start:passage.end])


def build_retriever(name: str, texts: Sequence[str], ids: Sequence[str] | None = None,
                    titles: Sequence[str | None] | None = None, *,
                    passage_chars: int = DEFAULT_PASSAGE_CHARS) -> Retriever:
    """The retriever `name` (RETRIEVERS) over `texts`, in memory."""
    if name == "bm25":
        return Index.build(texts, ids, titles, passage_chars=passage_chars)
    if name == "tfidf":
        return TfidfRetriever.build(texts, ids, titles, passage_chars=passage_chars)
    raise ConfigError(f"unknown retriever {name!r}: use {', '.join(RETRIEVERS)}")

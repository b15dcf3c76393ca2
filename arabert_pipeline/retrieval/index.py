"""`Index`: documents split into passages, analysed and scored by BM25, in memory or in an index directory.

    from arabert_pipeline import Index
    index = Index.build(["...", "..."], ids=["a", "b"], titles=["A", None])          # in memory
    index = Index.build(texts, path="runs/news-index", progress=True)                   # written, then opened
    index = Index.open("runs/news-index")
    for hit in index.search("متى تأسست جامعة القاهرة؟", k=5):
        hit.document, hit.title, hit.passage.start, hit.passage.end, hit.score, hit.text

    rank_passages(question, context, k=3)   # the passages of one long context, best first (a throwaway index)

A hit names its document by the id given at build (by default the document's position, as a string) and its passage
by character offsets into that document's text: `index.document_text(hit.passage.document)[hit.passage.start:
hit.passage.end] == hit.text`. Only passages that share a term with the question are hits, so a search may return
fewer than `k`.
"""
from __future__ import annotations

import array
import contextlib
import dataclasses
import functools
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np

from ..errors import ConfigError, InputError
from .analysis import DEFAULT_ANALYSIS, Analysis, get_analysis
from .passages import DEFAULT_PASSAGE_CHARS, Passage, check_passage_chars, split_passages
from .scorer import Scorer
from .store import PartialBuild, fingerprint, open_index_dir

log = logging.getLogger(__name__)

# Documents analysed together: the unit of a resumable build's progress, and of Farasa's batching.
CHUNK_DOCUMENTS = 2000


@dataclasses.dataclass(frozen=True)
class Hit:
    """One retrieved passage: its offsets, BM25 score, document id and title, and text."""

    passage: Passage
    score: float
    document: str
    title: str | None
    text: str


class Documents(Protocol):
    """The indexed documents, by position: what a hit reads its id, title and text from."""

    def __len__(self) -> int: ...

    def text(self, position: int) -> str: ...

    def id(self, position: int) -> str: ...

    def title(self, position: int) -> str | None: ...

    def record(self, position: int) -> tuple[str, str | None]:
        """(id, title)."""
        ...


@dataclasses.dataclass
class MemoryDocuments:
    texts: list[str]
    ids: list[str] | None  # None: the positions
    titles: list[str | None] | None

    def __len__(self) -> int:
        return len(self.texts)

    def text(self, position: int) -> str:
        return self.texts[position]

    def id(self, position: int) -> str:
        return str(position) if self.ids is None else self.ids[position]

    def title(self, position: int) -> str | None:
        return None if self.titles is None else self.titles[position]

    def record(self, position: int) -> tuple[str, str | None]:
        return self.id(position), self.title(position)


def check_documents(texts: object, ids: object = None, titles: object = None
                    ) -> tuple[list[str], list[str] | None, list[str | None] | None]:
    """(texts, ids as strings, titles) after checking them; an InputError names the first bad one by position (and
    id): a non-string or empty document, an id that is not a string or an integer, a duplicate id, a title that is not
    a string, ids or titles of another length than the texts."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
        raise InputError(f"must be a list of documents (strings), not a {type(texts).__name__}", field="texts")
    texts = list(texts)
    if not texts:
        raise InputError("no documents to index", field="texts")
    if ids is not None:
        ids = _check_list(ids, "ids", len(texts))
        seen: dict[str, int] = {}
        for position, value in enumerate(ids):
            if not isinstance(value, (str, int)) or isinstance(value, bool) or value == "":
                raise InputError(f"an id is a non-empty string or an integer, not {value!r:.80}",
                                 field=f"ids[{position}]")
            value = ids[position] = str(value)
            if value in seen:
                raise InputError(f"duplicate id {value!r:.80} (also ids[{seen[value]}])", field=f"ids[{position}]")
            seen[value] = position
    if titles is not None:
        titles = _check_list(titles, "titles", len(texts))
        for position, value in enumerate(titles):
            if value is not None and not isinstance(value, str):
                raise InputError(f"a title is a string or None, not {type(value).__name__}",
                                 field=f"titles[{position}]")
    for position, text in enumerate(texts):
        named = f" (id {ids[position]!r:.80})" if ids is not None else ""
        if not isinstance(text, str):
            raise InputError(f"a document is a string, not {type(text).__name__}{named}", field=f"texts[{position}]")
        if not text.strip():
            raise InputError(f"empty document{named}", field=f"texts[{position}]")
    return texts, ids, titles


def _check_list(values: object, name: str, length: int) -> list[Any]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InputError(f"must be a list, one per document, not a {type(values).__name__}", field=name)
    values = list(values)
    if len(values) != length:
        raise InputError(f"{len(values):,} given for {length:,} documents", field=name)
    return values


def analyse_chunk(texts: Sequence[str], first: int, analysis: Analysis, passage_chars: int
                  ) -> tuple[np.ndarray, list[list[str]]]:
    """The passages of documents `first`, `first + 1`, ... as an (n, 3) int64 array of (document, start, end), and
    each passage's terms."""
    spans = [(first + i, p.start, p.end) for i, text in enumerate(texts)
             for p in split_passages(text, passage_chars)]
    passages = np.array(spans, dtype=np.int64).reshape(-1, 3)
    rows = analysis.terms_batch(texts[d - first][s:e] for d, s, e in spans)
    return passages, rows


def term_ids(rows: Iterable[list[str]], vocabulary: dict[str, int]) -> list[array.array[int]]:
    """Each passage's terms as ids of `vocabulary`, which gains the new terms, numbered in order of first appearance
    (int32 arrays: four bytes a term where a list of ints takes 36, at half a million passages the difference between
    0.1 and 0.6 GB)."""
    return [array.array("i", [vocabulary.setdefault(term, len(vocabulary)) for term in row]) for row in rows]


def _progress_bar(total: int, progress: bool) -> contextlib.AbstractContextManager[Any]:
    if not progress:  # tqdm costs a millisecond even disabled: a tenth of ranking one context's passages
        return contextlib.nullcontext(_NoBar())
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="doc", desc="index")


class _NoBar:
    def update(self, n: int) -> None:
        pass


def _analyse(texts: list[str], analysis: Analysis, passage_chars: int, progress: bool,
             build: PartialBuild | None = None) -> tuple[np.ndarray, Scorer]:
    """All passages and their BM25 scorer, chunk by chunk; with `build`, each chunk is saved once analysed and a
    chunk an interrupted run saved is read back instead."""
    vocabulary: dict[str, int] = {}
    rows: list[array.array[int]] = []
    chunks = []
    with _progress_bar(len(texts), progress) as bar:
        for number, first in enumerate(range(0, len(texts), CHUNK_DOCUMENTS)):
            part = texts[first:first + CHUNK_DOCUMENTS]
            saved = build.saved_chunk(number) if build is not None else None
            if saved is None:
                saved = analyse_chunk(part, first, analysis, passage_chars)
                if build is not None:
                    build.save_chunk(number, *saved)
            chunks.append(saved[0])
            rows.extend(term_ids(saved[1], vocabulary))
            bar.update(len(part))
    passages = np.concatenate(chunks)
    if progress:
        log.info(f"scoring {len(passages):,} passages of {len(texts):,} documents ({len(vocabulary):,} terms)")
    return passages, Scorer.build(rows, vocabulary)


class Index:
    """Passages of documents, searchable by BM25 over an Arabic analysis (`Index.build`, `Index.open`)."""

    def __init__(self, documents: Documents, passages: np.ndarray, analysis: Analysis, passage_chars: int,
                 scorer: Scorer, path: str | os.PathLike[str] | None = None):
        self._documents, self._passages, self._analysis = documents, passages, analysis
        self.passage_chars, self._scorer = passage_chars, scorer
        self.path = path

    # ---------------------------------------------------------------------------------------------- building

    @classmethod
    def build(cls, texts: Iterable[str], ids: Iterable[str | int] | None = None,
              titles: Iterable[str | None] | None = None, path: str | os.PathLike[str] | None = None, *,
              analysis: str = DEFAULT_ANALYSIS, passage_chars: int = DEFAULT_PASSAGE_CHARS, progress: bool = False,
              resume: bool = False) -> Index:
        """Index `texts` (strings; `ids` and `titles` one per text when given): in memory when `path` is None, else
        written to the directory `path` (which must not exist or be empty) and opened from there. `resume`: continue
        a build of the same documents and settings into `path` that was interrupted."""
        texts, ids, titles = check_documents(texts, ids, titles)
        analyser = get_analysis(analysis)
        check_passage_chars(passage_chars)
        if path is None:
            if resume:
                raise ConfigError("resume=True continues a build written to a path: give path=")
            passages, scorer = _analyse(texts, analyser, passage_chars, progress)
            return cls(MemoryDocuments(texts, ids, titles), passages, analyser, passage_chars, scorer)
        settings = {"analysis": analyser.name, "passage_chars": passage_chars}
        build_settings = {**settings, "chunk_documents": CHUNK_DOCUMENTS}
        with PartialBuild(path, build_settings, fingerprint(texts, ids, titles, build_settings),
                          resume=resume) as build:
            if not build.complete:
                passages, scorer = _analyse(texts, analyser, passage_chars, progress, build)
                build.finish(texts, ids, titles, passages, scorer, settings)
        return cls.open(path)

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, verify: bool = True) -> Index:
        """The index written to the directory `path` by `Index.build(..., path=...)` or `arabert-pipeline index`; a
        directory that is not one, or a damaged one, is a ConfigError naming the file. `verify`: every file's SHA-256
        is checked against the one recorded (False: only their sizes, for a faster start)."""
        parts = open_index_dir(path, verify=verify)
        metadata = parts["metadata"]
        return cls(parts["documents"], parts["passages"], get_analysis(metadata["analysis"]),
                   metadata["passage_chars"], parts["scorer"], path)

    # ---------------------------------------------------------------------------------------------- reading

    def __len__(self) -> int:
        """The number of passages."""
        return len(self._passages)

    def __repr__(self) -> str:
        where = f", path={os.fspath(self.path)!r}" if self.path is not None else ""
        return (f"Index({self.documents:,} documents, {len(self):,} passages, analysis={self.analysis!r}, "
                f"passage_chars={self.passage_chars}{where})")

    @property
    def analysis(self) -> str:
        """The name of the analysis the index was built with (analysis.py)."""
        return self._analysis.name

    @property
    def documents(self) -> int:
        """The number of documents."""
        return len(self._documents)

    def document_text(self, position: int) -> str:
        """The text of the document at `position` (a hit's `passage.document`), as given at build."""
        return self._documents.text(self._position(position))

    def document_id(self, position: int) -> str:
        return self._documents.id(self._position(position))

    def document_title(self, position: int) -> str | None:
        return self._documents.title(self._position(position))

    def passage(self, row: int) -> Passage:
        """The passage at `row` (0 ≤ row < len(index)), in document order."""
        if type(row) is not int or not 0 <= row < len(self):
            raise IndexError(f"passage {row!r} of {len(self):,}")
        document, start, end = (int(v) for v in self._passages[row])
        return Passage(document, start, end)

    def _position(self, position: object) -> int:
        if isinstance(position, bool) or not isinstance(position, (int, np.integer)) or \
                not 0 <= position < self.documents:
            raise IndexError(f"document {position!r} of {self.documents:,}")
        return int(position)

    # ---------------------------------------------------------------------------------------------- searching

    def search(self, query: str, k: int = 10) -> list[Hit]:
        """The `k` passages that best match `query`, best first (only passages sharing a term with it)."""
        return self._hits(*self._scorer.top(self._analysis.terms(_check_query(query)), _check_k(k)))

    def search_many(self, queries: Iterable[str], k: int = 10) -> list[list[Hit]]:
        """`search` for each query, in order (the queries analysed together)."""
        if isinstance(queries, (str, bytes)) or not isinstance(queries, Iterable):
            raise InputError(f"must be a list of queries (strings), not a {type(queries).__name__}", field="queries")
        queries = list(queries)
        for position, query in enumerate(queries):
            _check_query(query, f"queries[{position}]")
        k = _check_k(k)
        return [self._hits(*self._scorer.top(terms, k)) for terms in self._analysis.terms_batch(queries)]

    def _hits(self, rows: np.ndarray, scores: np.ndarray) -> list[Hit]:
        hits, seen = [], {}
        for (document, start, end), score in zip(self._passages[rows].tolist(), scores.tolist(), strict=True):
            if document not in seen:
                seen[document] = (self._documents.text(document), *self._documents.record(document))
            text, id_, title = seen[document]
            hits.append(Hit(Passage(document, start, end), score, id_, title, text[start:end]))
        return hits


def _check_query(query: object, field: str = "query") -> str:
    if not isinstance(query, str):
        raise InputError(f"a query is a string, not {type(query).__name__}", field=field)
    return query


def _check_k(k: object) -> int:
    if type(k) is not int or k < 1:
        raise ConfigError(f"k {k!r}: the number of hits is a whole number ≥ 1")
    return k


def rank_passages(question: str, text: str, *, analysis: str = DEFAULT_ANALYSIS,
                  passage_chars: int = DEFAULT_PASSAGE_CHARS, k: int = 10) -> list[Hit]:
    """The passages of one document `text` that best match `question`, best first: `Index.build([text])` searched,
    in memory (a few milliseconds for a 20,000-character text; the last few texts' indexes are kept, so the next
    question about the same text costs a search alone). Hits name the document "0"; their offsets are into `text`."""
    if not isinstance(text, str):
        raise InputError(f"a context is a string, not {type(text).__name__}", field="text")
    # The cached index is found by equality (600.0 == 600) and by hash (a list cannot be one): both settings are
    # checked before the cache is asked, or a cached build would answer for a bad one, or hashing would raise first.
    if type(analysis) is not str:
        get_analysis(analysis)
    if type(passage_chars) is not int:
        check_passage_chars(passage_chars)
    return _context_index(text, analysis, passage_chars).search(question, k)


@functools.lru_cache(maxsize=8)
def _context_index(text: str, analysis: str, passage_chars: int) -> Index:
    return Index.build([text], analysis=analysis, passage_chars=passage_chars)

"""Retrieval: the passages of documents ranked against a question before a reader reads them (DrQA's retriever,
beside its reader), in data-flow order:

    passages.py   documents split into passages with exact character offsets (`split_passages`, `Passage`)
    analysis.py   text → index terms on the preprocessing stage (arabertv02 normalization, a light stemmer, Farasa)
    scorer.py     BM25 over the terms, by the bm25s library
    index.py      `Index` (build, open, search) and `rank_passages` for one long context
    store.py      the index directory: written atomically and resumably, opened with every file checked
    inputs.py     documents from corpus files, SQuAD JSON and JSON lines (`arabert-pipeline index`)
    cli.py        the `index` verb

`from arabert_pipeline import Index` (or `from arabert_pipeline.retrieval import Index, rank_passages`).
"""
from __future__ import annotations

from .analysis import DEFAULT_ANALYSIS, analysis_names
from .index import Hit, Index, rank_passages
from .passages import DEFAULT_PASSAGE_CHARS, Passage, split_passages

__all__ = ["Index", "Hit", "Passage", "rank_passages", "split_passages", "analysis_names", "DEFAULT_ANALYSIS",
           "DEFAULT_PASSAGE_CHARS"]

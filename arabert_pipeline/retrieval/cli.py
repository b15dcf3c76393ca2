"""`arabert-pipeline index FILES... -o DIR`: index documents for retrieval (retrieval/index.py, store.py)."""
from __future__ import annotations

import argparse

from .analysis import DEFAULT_ANALYSIS, analysis_names
from .passages import DEFAULT_PASSAGE_CHARS


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "index",
        help="index documents for retrieval: passages with their offsets, BM25 over an Arabic analysis",
        description="Split documents into passages, analyse them and write a BM25 index directory that "
                    "`Index.open(DIR)` (and answer/serve --index) read. Inputs by their ending: .txt/.txt.gz/.txt.xz "
                    "the corpus format (a paragraph a line, a blank line between documents; id FILE:LINE), .json "
                    "SQuAD (each paragraph's context a document, its article's title; id FILE:TITLE#N), .jsonl "
                    "JSON lines of {\"id\", \"title\", \"text\"}. DIR must be new or empty: an index is never written "
                    "over.",
    )
    parser.add_argument("inputs", nargs="+", metavar="FILE", help="corpus (.txt, .gz, .xz), SQuAD (.json) or JSON "
                        "lines (.jsonl) files, indexed in the order given")
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="the index directory to write")
    parser.add_argument("--analysis", default=DEFAULT_ANALYSIS, choices=analysis_names(), metavar="NAME",
                        help=f"how text becomes terms (docs/answering.md): {', '.join(analysis_names())}; "
                             "default: %(default)s")
    parser.add_argument("--passage-chars", type=int, default=DEFAULT_PASSAGE_CHARS, metavar="N",
                        help="the most characters a passage holds (paragraphs packed whole up to it; longer ones "
                             "split at sentence ends); default: %(default)s")
    parser.add_argument("--resume", action="store_true",
                        help="continue an interrupted build of the same inputs and settings into DIR")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="hide the progress bar")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from ..outputs import check_not_input
    from .index import Index
    from .inputs import read_documents
    from .passages import check_passage_chars

    check_passage_chars(args.passage_chars, "--passage-chars")
    check_not_input(args.output, args.inputs)
    started = time.perf_counter()
    documents = read_documents(args.inputs)
    index = Index.build(documents.texts, documents.ids, documents.titles, args.output, analysis=args.analysis,
                        passage_chars=args.passage_chars, progress=args.progress, resume=args.resume)
    size = sum(f.stat().st_size for f in Path(args.output).iterdir())
    print(f"indexed {index.documents:,} documents as {len(index):,} passages ({index.analysis}, "
          f"≤ {index.passage_chars} characters) in {time.perf_counter() - started:.1f} s: {args.output} "
          f"({size / 1e6:,.1f} MB)")
    return 0

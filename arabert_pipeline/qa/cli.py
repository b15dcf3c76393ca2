"""The QA stage's verbs, registered here in the order of its data flow: the data makers (`export-contexts`,
`make-synthetic-qa`), the static reader (`train-reader`, `reader-predict`: static/cli.py), the transformer reader
(`finetune`, `tune-decoding`, `export-onnx`: transformer/cli.py). Torch & co. are imported only when a verb runs."""
from __future__ import annotations

import argparse
from typing import Any

from .static import cli as static_cli
from .transformer import cli as transformer_cli


def register(subparsers) -> None:
    register_export_contexts(subparsers)
    register_synthetic(subparsers)
    static_cli.register(subparsers)
    transformer_cli.register(subparsers)


def register_export_contexts(subparsers) -> None:
    p = subparsers.add_parser(
        "export-contexts",
        help="write the paragraphs of QA training sets as a pretraining corpus (task-adaptive pretraining)",
        description="Write the contexts of the --train sets, each once, one paragraph per line and a blank line "
        "between articles (the corpus format preprocess and pretrain read), for MLM on the task's own text before "
        "fine-tuning. Questions and answers are not written; a paragraph the leakage guard finds in a --hold-out set "
        "is left out.",
    )
    p.add_argument("--train", nargs="+", action="extend", required=True, metavar="FILE_OR_NAME",
                   help="training sets (files or names)")
    p.add_argument("--hold-out", nargs="+", action="extend", default=[], metavar="FILE_OR_NAME",
                   help="sets whose paragraphs must not be written (dev and test sets)")
    p.add_argument("-o", "--output", required=True, metavar="FILE.txt", help="the corpus file to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing file")
    p.set_defaults(run=run_export_contexts)


def register_synthetic(subparsers) -> None:
    from .synthetic import ANSWER_TYPES, SyntheticConfig

    p = subparsers.add_parser(
        "make-synthetic-qa",
        help="typed synthetic QA from an unlabelled corpus (متى / كم / من / أين / أي questions answered in another "
        "paragraph of the same document)",
        description="Write SQuAD JSON of cloze questions made from one paragraph of each corpus document and answered "
        "in another paragraph of it; answers are typed (dates, numbers with units, people, places, organisations, "
        "from gazetteers read off the corpus), the blank replaced by the question word of its type. Documents the "
        "leakage guard finds in a --hold-out set give no question. See qa/synthetic.py.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    defaults = SyntheticConfig(corpus=[], output="", hold_out=[])
    p.add_argument("corpus", nargs="+", metavar="CORPUS",
                   help="corpus files (.txt/.gz/.xz, a paragraph a line, a blank line between documents), raw text")
    p.add_argument("-o", "--output", required=True, metavar="FILE.json", help="the SQuAD JSON to write")
    p.add_argument("--hold-out", nargs="+", action="extend", required=True, metavar="FILE_OR_NAME",
                   help="QA sets whose documents must not be used (the dev and test sets)")
    p.add_argument("--types", nargs="+", action="extend", choices=ANSWER_TYPES,
                   help=f"answer types (default: all, {' '.join(ANSWER_TYPES)})")
    p.add_argument("--max-per-document", type=int, default=defaults.max_per_document)
    p.add_argument("--min-count", type=int, default=defaults.min_count,
                   help="occurrences after a title / place noun / organisation noun that enter a gazetteer")
    p.add_argument("--clause-words", type=int, default=defaults.clause_words,
                   help="words kept on each side of the answer in a question")
    p.add_argument("--min-context-words", type=int, default=defaults.min_context_words)
    p.add_argument("--max-context-words", type=int, default=defaults.max_context_words)
    p.add_argument("--limit", type=int, help="at most this many questions (a seeded sample of whole documents)")
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--overwrite", action="store_true", help="replace an existing output (or unfinished run)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run (finished inputs are kept)")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.set_defaults(run=run_synthetic)


def run_synthetic(args: argparse.Namespace) -> int:
    import dataclasses

    from .synthetic import ANSWER_TYPES, SyntheticConfig, make_synthetic_qa

    fields = {f.name for f in dataclasses.fields(SyntheticConfig)}
    args.types = args.types or list(ANSWER_TYPES)  # a default list would be extended by the flag, not replaced
    options: dict[str, Any] = {k: (tuple(v) if k == "types" else v) for k, v in vars(args).items() if k in fields}
    config = SyntheticConfig(**options)
    report = make_synthetic_qa(config)
    types = ", ".join(f"{t} {n}" for t, n in report.per_type.items())
    print(f"{args.output}: {report.questions} questions from {report.documents} documents ({types}); "
          f"{report.held_out_documents} documents left out by the leakage guard; gazetteers: "
          + ", ".join(f"{k} {v}" for k, v in report.gazetteer.items()))
    return 0


def run_export_contexts(args: argparse.Namespace) -> int:
    from .contexts import export_contexts

    report = export_contexts(args.train, args.hold_out, args.output, overwrite=args.overwrite)
    print(f"{args.output}: {report.paragraphs} paragraphs of {report.articles} articles, {report.words} words; "
          f"{report.held_out} paragraphs left out (in a --hold-out set)")
    return 0

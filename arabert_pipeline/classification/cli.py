"""`finetune --task classification` (its flags: finetuning/taskargs.py) and `classify`'s reading of a file."""
from __future__ import annotations

import argparse


def run_finetune(args: argparse.Namespace) -> int:
    from ..finetuning.taskargs import task_config
    from .finetune import ClassificationConfig, run_classification

    config = task_config(ClassificationConfig, args, text_column=args.text_column,
                         label_column=args.label_column or "label", labels=args.labels, format=args.format,
                         class_weights=args.class_weights, dev_metric=args.dev_metric or "macro_f1")
    # task_config returns an instance of the class it is given, typed as the base class (issue 61's phase 2).
    result = run_classification(config)
    return 0 if result.completed else 130


def register(subparsers) -> None:
    from .lexical import MAX_CHAR_FEATURES, MAX_WORD_FEATURES

    parser = subparsers.add_parser(
        "add-lexical",
        help="give a text classifier a TF-IDF companion weighed on dev (its probabilities averaged with the model's)",
        description="Fit TF-IDF (word 1-2-grams, character 2-5-grams) + logistic regression on --train (C chosen on "
                    "--dev; training texts that leak into --dev or --hold-out dropped), choose on --dev the weight w "
                    "of p = (1 - w) p_model + w p_lexical by the model's dev metric, and write a copy of the model dir "
                    "with lexical/ (arrays and JSON, no pickle) and the weight in its arabert_pipeline.json. The "
                    "model then answers with both, in Python, in `classify`, `serve` and `evaluate`.")
    parser.add_argument("model", help="a text-classification model dir (finetune --task classification)")
    parser.add_argument("--train", nargs="+", action="extend", required=True, metavar="FILE_OR_NAME",
                        help="training sets")
    parser.add_argument("--dev", nargs="+", action="extend", required=True, metavar="FILE_OR_NAME",
                        help="dev sets: the companion's C and its weight are chosen on them")
    parser.add_argument("--hold-out", nargs="+", action="extend", default=[], metavar="FILE_OR_NAME",
                        help="sets it will be scored on: training texts that leak into them are dropped")
    parser.add_argument("-o", "--output", required=True, help="directory to create")
    parser.add_argument("--text-column", help="the text column of CSV / TSV / JSON lines files")
    parser.add_argument("--label-column", default="label", help="the label column (default %(default)s)")
    parser.add_argument("--format", choices=("csv", "tsv", "jsonl"), help="default: from the file name")
    parser.add_argument("--weight", type=float, help="use this weight in [0, 1] instead of the dev choice")
    parser.add_argument("--max-word-features", type=int, default=MAX_WORD_FEATURES,
                        help="word n-grams kept, most frequent first (default %(default)s)")
    parser.add_argument("--max-char-features", type=int, default=MAX_CHAR_FEATURES,
                        help="character n-grams kept (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier add-lexical output at -o (anything else is never replaced)")
    parser.set_defaults(run=run_add_lexical)


def run_add_lexical(args: argparse.Namespace) -> int:
    from .addlexical import add_lexical, describe

    record = add_lexical(args.model, args.train, args.dev, args.output, hold_out=args.hold_out,
                         text_column=args.text_column, label_column=args.label_column, format=args.format,
                         weight=args.weight, seed=args.seed, max_word_features=args.max_word_features,
                         max_char_features=args.max_char_features, overwrite=args.overwrite)
    print(describe(record))
    print(f"wrote {args.output}")
    return 0

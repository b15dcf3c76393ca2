"""`finetune --task classification|ner`: the flags the text tasks add to QA's `finetune` parser, and how a parsed
command becomes a task's config. The loop, data and output flags are QA's own (one flag, one meaning, one default in
every task); a flag only QA reads (--protocol, --doc-stride, --negatives, the decoding settings, ...) given with
another task is refused by name rather than ignored."""
from __future__ import annotations

import argparse
import dataclasses
from typing import TypeVar

from ..errors import ConfigError
from .config import TaskConfig

Config = TypeVar("Config", bound=TaskConfig)

TASKS = ("qa", "classification", "ner")
# Dests of QA's finetune parser that a text task has no use for.
QA_ONLY = ("protocol", "question_overlap", "negatives", "sentence_prior", "within_sentence", "decoding", "doc_stride",
           "max_question_tokens", "max_answer_tokens", "skip_misaligned", "download")
TEXT_TASK_ONLY = ("text_column", "label_column", "labels", "format", "class_weights", "dev_metric", "repair_bio")


def add_task_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("text tasks (--task classification / ner)")
    group.add_argument("--task", choices=TASKS, default="qa",
                       help="qa: extractive QA (SQuAD JSON); classification: one label per text (CSV / TSV / JSON "
                            "lines, or arsarcasm-v2-*); ner: BIO tags per word (CoNLL token<TAB>tag, or anercorp-*)")
    group.add_argument("--text-column", help="classification: the text column (default: text, or the registered "
                                             "set's: tweet for arsarcasm-v2)")
    group.add_argument("--label-column", default=None,
                       help="classification: the label column (default: label; arsarcasm-v2: sentiment, sarcasm or "
                            "dialect)")
    group.add_argument("--labels", nargs="+", action="extend", metavar="LABEL",
                       help="classification: the classes in the head's order; a row with another label is an error "
                            "(default: the training labels, sorted)")
    group.add_argument("--format", choices=("csv", "tsv", "jsonl"), help="classification: the files' format "
                                                                         "(default: from the file name)")
    group.add_argument("--class-weights", action="store_true",
                       help="classification: weigh the loss by inverse class frequency (scikit-learn's balanced)")
    group.add_argument("--dev-metric",
                       help="what the epoch is chosen by: classification macro_f1 (default), accuracy, f1_pn (mean F1 "
                            "of POS and NEG), f1:LABEL[,LABEL]; ner micro_f1 (default) or macro_f1")
    group.add_argument("--repair-bio", action="store_true",
                       help="ner: read an I-X that does not continue an X entity as B-X (as seqeval reads it), "
                            "counted and reported, instead of refusing the file")


def check_task_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse the flags of the other tasks, naming them."""
    def given(dest: str) -> bool:
        return getattr(args, dest, None) != parser.get_default(dest)

    foreign = QA_ONLY if args.task != "qa" else TEXT_TASK_ONLY
    named = [f"--{d.replace('_', '-')}" for d in foreign if given(d)]
    if args.task == "classification" and given("repair_bio"):
        named.append("--repair-bio")
    if args.task == "ner":
        named += [f"--{d.replace('_', '-')}" for d in TEXT_TASK_ONLY[:5] if given(d)]
    if named:
        raise ConfigError(f"{', '.join(named)}: not a flag of --task {args.task}")


def task_config(config_class: type[Config], args: argparse.Namespace, **task_fields) -> Config:
    """The config of `config_class` from a parsed finetune command: the shared fields read from `args`."""
    shared = {f.name for f in dataclasses.fields(TaskConfig)}
    values = {name: getattr(args, name) for name in shared if hasattr(args, name)}
    return config_class(**values, **task_fields)

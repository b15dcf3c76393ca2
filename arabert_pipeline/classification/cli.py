"""`finetune --task classification` (its flags: finetuning/taskargs.py) and `classify`'s reading of a file."""
from __future__ import annotations

import argparse


def run_finetune(args: argparse.Namespace) -> int:
    from ..finetuning.taskargs import task_config
    from .finetune import ClassificationConfig, run_classification

    config = task_config(ClassificationConfig, args, text_column=args.text_column,
                         label_column=args.label_column or "label", labels=args.labels, format=args.format,
                         class_weights=args.class_weights, dev_metric=args.dev_metric or "macro_f1")
    return 0 if run_classification(config).completed else 130

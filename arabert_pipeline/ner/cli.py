"""`finetune --task ner` (its flags: finetuning/taskargs.py)."""
from __future__ import annotations

import argparse


def run_finetune(args: argparse.Namespace) -> int:
    from ..finetuning.taskargs import task_config
    from .finetune import NERConfig, run_ner

    config = task_config(NERConfig, args, repair_bio=args.repair_bio, dev_metric=args.dev_metric or "micro_f1")
    return 0 if run_ner(config).completed else 130

"""`arabert-pipeline VERB ...`: one verb per stage, in data-flow order."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys
import warnings

from .errors import ArabertPipelineError, ConfigError

# Stage CLI modules in data-flow order. Each exposes `register(subparsers)`, which adds its verb(s) and sets
# `run(args) -> int | None` as the parser default. They import torch & co. inside `run`, so `--help` stays instant.
STAGE_CLIS = [
    "arabert_pipeline.preprocess.cli",
    "arabert_pipeline.tokenizer.cli",
    "arabert_pipeline.embeddings.cli",
    "arabert_pipeline.pretrain.cli",
    "arabert_pipeline.finetuning.weightscli",
    "arabert_pipeline.retrieval.cli",
    "arabert_pipeline.qa.cli",
    "arabert_pipeline.classification.cli",
    "arabert_pipeline.evaluate.cli",
    "arabert_pipeline.pipeline.cli",
    "arabert_pipeline.pipeline.taskcli",
    "arabert_pipeline.serve.cli",
]


def build_parser() -> argparse.ArgumentParser:
    from .version import __version__

    parser = argparse.ArgumentParser(prog="arabert-pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="on an error, show the traceback instead of the one-line message")
    subparsers = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for name in STAGE_CLIS:
        importlib.import_module(name).register(subparsers)
    add_finetune_tasks(subparsers.choices["finetune"])
    add_export_tasks(subparsers.choices["export-onnx"])
    return parser


def add_export_tasks(export: argparse.ArgumentParser) -> None:
    """`export-onnx` of a classification or NER model dir too (its arabert_pipeline.json says which task), with
    --standalone, the form task models are shipped in (finetuning/taskexport.py). Here, above every task's layer,
    as `finetune --task` is."""
    export.description = (export.description or "") + (
        " A classification or NER model dir (made by `finetune --task classification|ner`) is exported the same way, "
        "its logits out; with --standalone DIR, DIR also receives the shippable copy: config, tokenizer, "
        "metadata and a model.onnx holding quantized weights, no model.safetensors (ONNX Runtime only).")
    export.add_argument("--standalone", metavar="DIR",
                        help="classification / NER: also write DIR, the model with quantized weights inside its "
                             "model.onnx and no model.safetensors (how the package's task models are shipped); with "
                             "--overwrite, an earlier such DIR is replaced (its README.md kept)")
    export.add_argument("--weight-bits", type=int, choices=(8, 4), default=None,
                        help="--standalone's weights: 8 (int8, dynamic quantization; default) or 4 (weight-only in "
                             "blocks of 64: half the size, for a larger encoder)")
    run_qa = export.get_default("run")

    def run(args: argparse.Namespace) -> int | None:
        from .artifacts.models import shipped_model_dir
        from .finetuning.taskexport import (
            TASK_HEADS,
            claim_standalone,
            export_task_onnx,
            standalone,
            standalone_bits,
            task_of,
        )

        if args.standalone:
            # a shipped task model by its name: the copy of it that stands alone (its tokenizer is a sibling's)
            args.model_dir = shipped_model_dir(args.model_dir) or args.model_dir
            claim_standalone(args.model_dir, args.standalone, overwrite=args.overwrite)
        elif args.weight_bits is not None:
            raise ConfigError("--weight-bits applies to --standalone DIR: name the directory to write")
        elif task_of(args.model_dir) not in TASK_HEADS:
            return run_qa(args)
        if standalone_bits(args.model_dir) is None:
            path = export_task_onnx(args.model_dir, overwrite=args.overwrite)
            print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB, reading its weights from model.safetensors), "
                  "logits checked against torch")
        elif not args.standalone:
            raise ConfigError(f"{args.model_dir} is in the shipped form already (its weights are inside its "
                              f"model.onnx): nothing to export; --standalone DIR copies it")
        if args.standalone:
            shipped = standalone(args.model_dir, args.standalone, weight_bits=args.weight_bits,
                                 overwrite=args.overwrite)
            print(f"wrote {shipped.parent} (model.onnx {shipped.stat().st_size / 1e6:.2f} MB, "
                  f"{standalone_bits(shipped.parent)}-bit weights inside)")
        return 0

    export.set_defaults(run=run)


def add_finetune_tasks(finetune: argparse.ArgumentParser) -> None:
    """`finetune --task qa|classification|ner`: QA's parser (qa/transformer/cli.py) gains the text tasks' flags, and
    the command goes to the task named. Here, above every task's layer: no task imports another."""
    from .finetuning.taskargs import add_task_arguments, check_task_flags

    add_task_arguments(finetune)
    run_qa = finetune.get_default("run")

    def run(args: argparse.Namespace) -> int | None:
        check_task_flags(finetune, args)
        if args.task == "classification":
            from .classification.cli import run_finetune
        elif args.task == "ner":
            from .ner.cli import run_finetune
        else:
            run_finetune = run_qa
        return run_finetune(args)

    finetune.set_defaults(run=run)


class _StderrHandler(logging.StreamHandler):
    """Writes to the sys.stderr of the moment (a test harness or a caller may replace it after setup)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def setup_logging() -> None:
    """The package's progress messages (logged at INFO by library code) go to stderr as plain lines. Only the
    package's own logger is set up, so that other libraries' INFO chatter stays silent."""
    logger = logging.getLogger("arabert_pipeline")
    if not logger.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(logging.INFO)


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    # A command-line user needs the warning, not the library line that raised it.
    return f"arabert-pipeline: warning: {message}\n"


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    warnings.formatwarning = _one_line_warning
    parser = build_parser()
    args = parser.parse_args(argv)
    refuse_non_finite(parser, args)
    try:
        code = args.run(args)
    except ArabertPipelineError as exc:
        if args.debug:
            raise
        print(f"arabert-pipeline {args.verb}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        # A full disk, a permission the process lacks, a file that vanished: the system's own words and the file
        # they concern are the whole story; a traceback would only hide them.
        if args.debug:
            raise
        print(f"arabert-pipeline {args.verb}: error: {describe_os_error(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"arabert-pipeline {args.verb}: interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


def refuse_non_finite(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """argparse's float() takes "nan" and "inf"; no number option of any verb means either (a NaN learning rate
    trains a model of NaNs without a word), so they are refused here for every verb at once, naming the option."""
    import math

    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    verb = verbs[args.verb]
    for action in verb._actions:
        value = getattr(args, action.dest, None)
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, float) and not math.isfinite(item):
                name = action.option_strings[-1] if action.option_strings else action.dest
                verb.error(f"{name} {item}: must be a finite number")


def describe_os_error(exc: OSError) -> str:
    """`FILE: reason` for an OSError, e.g. "runs/out.jsonl: No space left on device"."""
    reason = exc.strerror or (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    files = [str(name) for name in (exc.filename, exc.filename2) if name is not None]
    return f"{' -> '.join(files)}: {reason}" if files else reason


if __name__ == "__main__":
    sys.exit(main())

"""`arabert-pipeline VERB ...`: one verb per stage, in data-flow order."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from .errors import ArabertPipelineError

# Stage CLI modules in data-flow order. Each exposes `register(subparsers)`, which adds its verb(s) and sets
# `run(args) -> int | None` as the parser default. They import torch & co. inside `run`, so `--help` stays instant.
STAGE_CLIS = [
    "arabert_pipeline.preprocess.cli",
    "arabert_pipeline.tokenizer.cli",
    "arabert_pipeline.pretrain.cli",
    "arabert_pipeline.qa.cli",
    "arabert_pipeline.qa.export",
    "arabert_pipeline.evaluate.cli",
    "arabert_pipeline.pipeline.cli",
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
    return parser


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


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    args = build_parser().parse_args(argv)
    try:
        code = args.run(args)
    except ArabertPipelineError as exc:
        if args.debug:
            raise
        print(f"arabert-pipeline {args.verb}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"arabert-pipeline {args.verb}: interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())

"""`arabert-pipeline preprocess INPUT... -o OUTPUT`: AraBERT-preprocess corpus files for tokenizer training and
pretraining (streaming, parallel, resumable; see corpus.py)."""
from __future__ import annotations

import argparse

from ..cliargs import add_deprecated_alias
from .corpus import ERROR_POLICIES, CorpusConfig

_DEFAULTS = CorpusConfig(inputs=[], output="")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "preprocess",
        help="normalize (and Farasa-segment) corpus files, one output line per input line",
        description=__doc__.replace("\n", " "),
    )
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help=".txt, .txt.gz or .txt.xz: one paragraph per line, a blank line between documents; "
                             "several inputs are concatenated in the order given")
    parser.add_argument("-o", "--output", required=True,
                        help="output .txt, .gz or .xz; built as OUTPUT.part, renamed when complete, and described "
                             "by OUTPUT.arabert_pipeline.json")
    parser.add_argument("--preprocessing", default=_DEFAULTS.preprocessing,
                        help="arabertv2 (normalize + Farasa segmentation), arabertv02 (normalize only), none "
                             "(unchanged text), or an AraBERT model name; default: %(default)s")
    add_deprecated_alias(parser, "--config", "--preprocessing", dest="preprocessing")
    parser.add_argument("--workers", type=int, default=_DEFAULTS.workers,
                        help="worker processes (default: %(default)s)")
    parser.add_argument("--errors", choices=ERROR_POLICIES, default=_DEFAULTS.errors,
                        help="invalid UTF-8: strict stops naming the file and line; replace writes U+FFFD and "
                             "counts the replacements (default: %(default)s)")
    parser.add_argument("--resume", action="store_true",
                        help="continue an interrupted run from OUTPUT.part and its checkpoint")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace OUTPUT if an earlier preprocess run wrote it (any other file is never replaced); "
                             "with --engine ray, redo the stale shards")
    parser.add_argument("--word-cache", default=_DEFAULTS.word_cache, metavar="FILE",
                        help="word segmentation cache, reused by resumed and later runs (default: "
                             "OUTPUT.words.tsv)")
    parser.add_argument("--farasa-jar", default=_DEFAULTS.farasa_jar, metavar="JAR",
                        help="segment with QCRI's FarasaSegmenterJar (needs Java) instead of the offline Farasa port; "
                             "default: $ARABERT_PIPELINE_FARASA_JAR if set")
    parser.add_argument("--chunk-lines", type=int, default=_DEFAULTS.chunk_lines,
                        help="lines per task sent to a worker (default: %(default)s)")
    parser.add_argument("--checkpoint-chunks", type=int, default=_DEFAULTS.checkpoint_chunks,
                        help="chunks between checkpoints (default: %(default)s)")
    parser.add_argument("--engine", choices=("local", "ray"), default="local",
                        help="local: this machine's processes, all inputs concatenated into OUTPUT; ray: Ray Data, "
                             "OUTPUT a directory with one shard per input (INPUT's name without .gz/.xz, .txt "
                             "added if missing), each as `preprocess INPUT -o SHARD` writes it; a rerun skips the "
                             "shards written from the same input and options and refuses stale ones unless "
                             "--overwrite (needs the ray extra: pip install \"arabert-pipeline[ray]\")")
    parser.add_argument("--address", default=None,
                        help="with --engine ray: an existing Ray cluster (e.g. auto, or ray://HOST:10001); default: a "
                             "small local Ray instance with --workers CPUs")
    parser.add_argument("--shard-compression", choices=("none", "gz", "xz"), default="none",
                        help="with --engine ray: compress each shard (SHARD.gz / SHARD.xz) (default: %(default)s)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="hide the progress bar")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from .corpus import preprocess_corpus

    if args.engine == "local" and (args.address or args.shard_compression != "none"):
        from ..errors import ConfigError

        raise ConfigError("--address and --shard-compression go with --engine ray")
    if args.engine == "ray":
        from .distributed import preprocess_shards

        shards = preprocess_shards(
            args.inputs, args.output, engine=args.engine, address=args.address, compression=args.shard_compression,
            preprocessing=args.preprocessing, workers=args.workers, errors=args.errors, overwrite=args.overwrite,
            word_cache=args.word_cache, farasa_jar=args.farasa_jar, chunk_lines=args.chunk_lines,
            checkpoint_chunks=args.checkpoint_chunks, progress=args.progress,
        )
        print(shards.summary())
        return 0
    report = preprocess_corpus(
        args.inputs, args.output, preprocessing=args.preprocessing, workers=args.workers, errors=args.errors,
        resume=args.resume, overwrite=args.overwrite, word_cache=args.word_cache, farasa_jar=args.farasa_jar,
        chunk_lines=args.chunk_lines,
        checkpoint_chunks=args.checkpoint_chunks, progress=args.progress,
    )
    print(report.summary())
    return 0

"""`arabert-pipeline train-tokenizer` and `arabert-pipeline tokenizer-report`."""
from __future__ import annotations

import argparse
from typing import Any

from ..cliargs import add_deprecated_alias
from ..errors import ConfigError
from .train import TokenizerConfig  # stdlib only at import: sentencepiece & co. load inside the functions

_DEFAULTS = TokenizerConfig(inputs=[], output_dir="")
# Flags default to None so that a recipe value is only overridden by a flag actually given; the real defaults are
# TokenizerConfig's.
_FLAGS: list[tuple[str, dict[str, Any]]] = [
    ("--model-type", dict(choices=["unigram", "wordpiece"], help="unigram: SentencePiece (AraBERT v0.1/v1); "
                                                               "wordpiece: tokenizers (AraBERT v0.2/v2, mBERT)")),
    ("--vocab-size", dict(type=int, help="tokens in the vocabulary, special tokens included "
                                         f"(default {_DEFAULTS.vocab_size})")),
    ("--preprocessing", dict(dest="preprocess", metavar="NAME",
                             help="arabertv2 (normalize + Farasa segmentation), arabertv02 (normalize), none; default: "
                                  "what the inputs' sidecars say, else arabertv2")),
    ("--sample-sentences", dict(type=int, metavar="N", help="lines drawn (uniformly, seeded) from the inputs for "
                                                            "training, before preprocessing "
                                                            f"(default {_DEFAULTS.sample_sentences})")),
    ("--threads", dict(type=int, help=f"trainer threads; 0 = all cores (default {_DEFAULTS.threads})")),
    ("--seed", dict(type=int, help=f"seed of the line sample and of SentencePiece (default {_DEFAULTS.seed})")),
    ("--character-coverage", dict(type=float, help="unigram: share of characters kept; rarer ones become [UNK] "
                                                   f"(default {_DEFAULTS.character_coverage:g})")),
    ("--min-frequency", dict(type=int, help="wordpiece: minimum count of a merge "
                                            f"(default {_DEFAULTS.min_frequency})")),
]


def register(subparsers) -> None:
    train = subparsers.add_parser(
        "train-tokenizer",
        help="train a SentencePiece unigram or WordPiece tokenizer into a Hugging Face tokenizer directory",
        description="Train a tokenizer on corpus files (.txt/.gz/.xz, one paragraph per line) and save it as a "
                    "Hugging Face fast tokenizer directory with arabert_pipeline.json. Raw inputs are preprocessed "
                    "first; inputs written by `arabert-pipeline preprocess` (with a sidecar) are used as they are. "
                    "With --from-vocab, build the directory from an existing vocab.txt instead of training.",
    )
    train.add_argument("inputs", nargs="*", metavar="INPUT", help="corpus files (override the recipe's inputs)")
    train.add_argument("-o", "--output", dest="output_dir",
                       help="tokenizer directory to create (overrides the recipe's)")
    add_deprecated_alias(train, "--output-dir", "--output", dest="output_dir")
    train.add_argument("--recipe", metavar="FILE", help="TOML recipe (see tokenizer_training/); flags override it")
    for flag, options in _FLAGS:
        train.add_argument(flag, default=None, **options)
    add_deprecated_alias(train, "--preprocess", "--preprocessing", dest="preprocess", metavar="NAME")
    train.add_argument("--input-is-preprocessed", action="store_true", default=None,
                       help="inputs without a sidecar are already preprocessed with --preprocessing")
    train.add_argument("--from-vocab", metavar="VOCAB", help="a vocab.txt (LF or CRLF) or, online, a hub model id: "
                                                            "save it as a WordPiece tokenizer directory; needs "
                                                            "--preprocessing (none for mBERT)")
    train.add_argument("--no-progress", dest="progress", action="store_false", default=None,
                       help="no progress bars or trainer logs")
    train.add_argument("--overwrite", action="store_true", default=None,
                       help="replace the tokenizer directory of an earlier run at -o (a directory holding anything "
                            "else is never replaced)")
    train.set_defaults(run=run_train)

    report = subparsers.add_parser(
        "tokenizer-report",
        help="compare tokenizers on held-out text: tokens per word, words split, [UNK] rate, vocabulary use",
        description="Measure tokenizers on the same held-out text. Words are counted on the original text, so "
                    "tokenizers with different preprocessing are comparable.",
    )
    report.add_argument("--tokenizer", action="append", required=True, metavar="SPEC",
                        help="PATH[,preprocessing=NAME][,name=LABEL]: a tokenizer directory of ours, or a vocab.txt "
                             "/ foreign directory / hub id with its preprocessing (e.g. "
                             "mbert-cased-vocab.txt,preprocessing=none,name=mBERT); repeat for each tokenizer")
    report.add_argument("--text", metavar="FILE",
                        help="held-out text (default: corpus/ant-multisource-006.txt.xz under the data root, the "
                             "shard no recipe trains on)")
    report.add_argument("--max-lines", type=int, default=1000, help="non-blank lines of --text to use")
    report.add_argument("-o", "--output", metavar="PREFIX", help="also write PREFIX.md and PREFIX.json")
    report.add_argument("--overwrite", action="store_true", help="replace an existing PREFIX.md / PREFIX.json")
    report.add_argument("--no-progress", dest="progress", action="store_false")
    report.set_defaults(run=run_report)


def run_train(args: argparse.Namespace) -> int:
    from .train import read_recipe, run_training

    options = read_recipe(args.recipe) if args.recipe else {}
    if args.inputs:
        options["inputs"] = args.inputs
    if args.output_dir:
        options["output_dir"] = args.output_dir
    for flag, flag_options in _FLAGS + [("--input-is-preprocessed", {}), ("--progress", {}), ("--overwrite", {})]:
        key = flag_options.get("dest", flag[2:].replace("-", "_"))
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    if "output_dir" not in options:
        raise ConfigError("no output directory: pass -o DIR (or a recipe with output_dir)")
    if args.from_vocab:
        from .export import import_vocab

        if "preprocess" not in options:
            raise ConfigError("--from-vocab needs --preprocessing: a vocab.txt does not say which preprocessing it "
                              "expects (none for mBERT, arabertv2 for AraBERTv2)")
        import_vocab(args.from_vocab, options["output_dir"], preprocessing=options["preprocess"],
                     overwrite=options.get("overwrite", False))
        print(f"{options['output_dir']}: WordPiece tokenizer from {args.from_vocab}, preprocessing "
              f"{options['preprocess']}")
        return 0
    if not options.get("inputs"):
        raise ConfigError("no input files: pass INPUT... (or a recipe with inputs)")
    report = run_training(TokenizerConfig(**options))
    print(report.summary())
    return 0


def parse_spec(spec: str) -> tuple[str, str, str | None]:
    """`PATH[,preprocessing=NAME][,name=LABEL]` → (label, path, preprocessing or None)."""
    from pathlib import Path

    path, *pairs = spec.split(",")
    fields = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in ("preprocessing", "name"):
            raise ConfigError(f"--tokenizer {spec!r}: expected PATH[,preprocessing=NAME][,name=LABEL], got {pair!r}")
        fields[key] = value
    default_name = Path(path).stem if Path(path).is_file() else Path(path).name or path
    return fields.get("name", default_name), path, fields.get("preprocessing")


def run_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..artifacts.paths import data_file
    from ..outputs import claim_output_file
    from .report import format_markdown, tokenizer_report, write_report

    text = args.text or data_file("corpus/ant-multisource-006.txt.xz")
    specs = [parse_spec(s) for s in args.tokenizer]
    if args.output:
        for suffix in (".md", ".json"):
            claim_output_file(f"{args.output}{suffix}", verb="tokenizer-report", overwrite=args.overwrite,
                              inputs=[text, *(path for _, path, _ in specs if Path(path).exists())])
    stats, described = tokenizer_report(specs, text, max_lines=args.max_lines, progress=args.progress)
    print(format_markdown(stats, described))
    if args.output:
        for path in write_report(stats, described, args.output):
            print(f"wrote {path}")
    return 0

"""`arabert-pipeline train-embeddings` and `arabert-pipeline neighbours`."""
from __future__ import annotations

import argparse

from .train import ARCHITECTURES, MODELS, EmbeddingConfig  # stdlib only at import: gensim loads inside run

_DEFAULTS = EmbeddingConfig(inputs=[], output_dir="")


def register(subparsers) -> None:
    train = subparsers.add_parser(
        "train-embeddings",
        help="train word2vec (skip-gram / CBOW) or fastText vectors on a preprocessed corpus",
        description="Train static word vectors with gensim on corpus files written by `arabert-pipeline preprocess` "
                    "(.txt/.gz/.xz, streamed), recording their preprocessing so that queries are preprocessed the "
                    "same way. Writes vectors.npy + words.txt (what `neighbours` reads), ngrams.npy (fastText), "
                    "vectors.txt (word2vec text format), vectors.kv (gensim's native, a pickle) and "
                    "arabert_pipeline.json.",
    )
    train.add_argument("inputs", nargs="+", metavar="CORPUS", help="preprocessed corpus files")
    train.add_argument("-o", "--output", dest="output_dir", required=True, help="directory to create")
    train.add_argument("--model", choices=MODELS, default=_DEFAULTS.model,
                       help="word2vec, or fasttext (character n-grams give vectors to unseen forms); default "
                            "%(default)s")
    arch = train.add_mutually_exclusive_group()
    arch.add_argument("--architecture", choices=ARCHITECTURES, default=_DEFAULTS.architecture,
                      help="skipgram (predict the context from the word) or cbow (the word from its context); "
                           "default %(default)s")
    arch.add_argument("--sg", dest="architecture", action="store_const", const="skipgram",
                      help="--architecture skipgram")
    arch.add_argument("--cbow", dest="architecture", action="store_const", const="cbow", help="--architecture cbow")
    train.add_argument("--dim", type=int, default=_DEFAULTS.dim, help="vector size (default %(default)s)")
    train.add_argument("--window", type=int, default=_DEFAULTS.window,
                       help="context words on each side (default %(default)s)")
    train.add_argument("--min-count", type=int, default=_DEFAULTS.min_count,
                       help="words seen fewer times get no vector of their own (default %(default)s)")
    train.add_argument("--epochs", type=int, default=_DEFAULTS.epochs, help="passes over the corpus "
                                                                            "(default %(default)s)")
    train.add_argument("--workers", type=int, default=_DEFAULTS.workers,
                       help="training threads; 0 = all cores (default); 1 makes a run reproducible")
    train.add_argument("--seed", type=int, default=_DEFAULTS.seed, help="default %(default)s")
    train.add_argument("--min-n", type=int, default=_DEFAULTS.min_n,
                       help="fasttext: shortest character n-gram (default %(default)s)")
    train.add_argument("--max-n", type=int, default=_DEFAULTS.max_n,
                       help="fasttext: longest character n-gram (default %(default)s)")
    train.add_argument("--bucket", type=int, default=_DEFAULTS.bucket,
                       help="fasttext: n-gram hash buckets; the table is bucket × dim floats (default %(default)s)")
    train.add_argument("--preprocessing", metavar="NAME",
                       help="for inputs without a sidecar: they are already preprocessed with NAME")
    train.add_argument("--no-progress", dest="progress", action="store_false", help="no progress lines")
    train.add_argument("--overwrite", action="store_true",
                       help="replace the output of an earlier train-embeddings run at -o (a directory holding "
                            "anything else is never replaced)")
    train.set_defaults(run=run_train)

    near = subparsers.add_parser(
        "neighbours",
        help="the nearest words to a word in a train-embeddings directory",
        description="Print the K words nearest (cosine) to WORD, which is preprocessed the way the vectors' corpus "
                    "was. fastText vectors answer for words never seen in training.",
    )
    near.add_argument("directory", metavar="DIR", help="a train-embeddings output directory")
    near.add_argument("word", metavar="WORD")
    near.add_argument("-k", type=int, default=10, help="how many neighbours (default %(default)s)")
    near.set_defaults(run=run_neighbours)


def run_train(args: argparse.Namespace) -> int:
    from .train import run_training

    fields = ("output_dir", "model", "architecture", "dim", "window", "min_count", "epochs", "workers", "seed",
              "min_n", "max_n", "bucket", "preprocessing", "progress", "overwrite")
    report = run_training(EmbeddingConfig(inputs=args.inputs, **{name: getattr(args, name) for name in fields}))
    print(report.summary())
    return 0


def run_neighbours(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from .vectors import Embeddings

    embeddings = Embeddings.load(args.directory)
    found = embeddings.neighbours(args.word, args.k)
    if not found:  # printing nothing would read as "the command did nothing"
        raise ConfigError(f"{args.directory}: no neighbours for {args.word!r}: the vocabulary holds no other word "
                          f"({len(embeddings):,} word{'s' if len(embeddings) != 1 else ''} in all)")
    for word, score in found:
        print(f"{score:.4f}\t{word}")
    return 0

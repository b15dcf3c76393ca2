"""`arabert-pipeline train-reader` (a flag per ReaderConfig field, its default the field's) and `reader-predict`:
the DrQA-style reader over static word vectors; torch is imported only when a verb runs."""
from __future__ import annotations

import argparse

from .config import ReaderConfig

_DEFAULTS = ReaderConfig(embeddings="", train=[], dev=[], output_dir="")


def register(subparsers) -> None:
    train = subparsers.add_parser(
        "train-reader",
        help="train a DrQA-style reader (BiLSTMs over static word vectors) for extractive QA",
        description="Train a reader without a pretrained transformer (DrQA, Chen et al. 2017) over the vectors of a "
                    "`train-embeddings` directory, on SQuAD v1.1 files. Words are the whitespace tokens of the text "
                    "preprocessed as the vectors' corpus was; answers are mapped to words through the offset map "
                    "(those that do not map are skipped and counted); the training questions that leak into a dev or "
                    "held-out set are dropped. The epoch with the best dev SOQAL F1 (as finetune chooses) is kept. "
                    "Writes reader.safetensors, reader_config.json, arabert_pipeline.json and log.jsonl.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    train.add_argument("--embeddings", required=True, metavar="DIR", help="a train-embeddings output directory")
    train.add_argument("--train", nargs="+", action="extend", required=True, metavar="FILE_OR_NAME",
                       help="training sets")
    train.add_argument("--dev", nargs="+", action="extend", required=True, metavar="FILE_OR_NAME",
                       help="dev sets, scored after every epoch")
    train.add_argument("--hold-out", nargs="+", action="extend", default=[], metavar="FILE_OR_NAME",
                       help="sets it will be scored on: the training questions that leak into them are dropped")
    train.add_argument("-o", "--output", dest="output_dir", required=True, help="directory to create")
    train.add_argument("--hidden", type=int, default=_DEFAULTS.hidden, help="LSTM size per direction")
    train.add_argument("--layers", type=int, default=_DEFAULTS.layers, help="stacked BiLSTM layers")
    train.add_argument("--dropout", type=float, default=_DEFAULTS.dropout)
    train.add_argument("--epochs", type=int, default=_DEFAULTS.epochs)
    train.add_argument("--batch-size", type=int, default=_DEFAULTS.batch_size)
    train.add_argument("--lr", type=float, default=_DEFAULTS.lr, help="Adamax learning rate")
    train.add_argument("--tune-top-k", type=int, default=_DEFAULTS.tune_top_k,
                       help="fine-tune the vectors of the K most frequent training-question words (0: all frozen)")
    train.add_argument("--max-span-words", type=int, default=_DEFAULTS.max_span_words,
                       help="longest answer, in words")
    train.add_argument("--seed", type=int, default=_DEFAULTS.seed)
    train.add_argument("--init-from", metavar="READER_DIR",
                       help="start from a train-reader output over the same vectors (e.g. one trained on "
                            "make-synthetic-qa questions), keeping its fine-tuned question words; --tune-top-k is then "
                            "not used")
    train.add_argument("--overwrite", action="store_true",
                       help="replace an earlier train-reader output at -o (anything else is never replaced)")
    train.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    train.set_defaults(run=run_train)

    predict = subparsers.add_parser(
        "reader-predict",
        help="answer a SQuAD file's questions with a train-reader output (a file `evaluate --predictions` reads)",
        description="Answer every question of the data sets with a trained reader and write "
                    '{"id": {"text", "start"}}, spans of the original contexts: `evaluate --predictions FILE`.',
    )
    predict.add_argument("reader", metavar="READER_DIR", help="a train-reader output directory")
    predict.add_argument("--data", nargs="+", action="extend", required=True, metavar="FILE_OR_NAME",
                         help="SQuAD v1.1 sets")
    predict.add_argument("-o", "--output", required=True, metavar="FILE.json", help="predictions file to write")
    predict.add_argument("--embeddings", metavar="DIR",
                         help="the vectors' directory, when it moved since training (default: the one recorded)")
    predict.add_argument("--overwrite", action="store_true", help="replace an existing predictions file")
    predict.set_defaults(run=run_predict)


def run_train(args: argparse.Namespace) -> int:
    import dataclasses

    from .train import train_reader

    metadata = train_reader(ReaderConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ReaderConfig)}))
    metric = metadata["dev_metric"]
    print(f"{args.output_dir}: best epoch {metadata['best_epoch']}, dev {metric} {metadata[f'best_dev_{metric}']:.1f} "
          f"(Arabic-normalized EM {metadata['best_dev_em']:.1f} F1 {metadata['best_dev_f1']:.1f}; "
          f"{metadata['train_questions']} training questions, {metadata['skipped_unaligned']} skipped: answer not "
          "aligned)")
    return 0


def run_predict(args: argparse.Namespace) -> int:
    from .predict import predict_file

    count = predict_file(args.reader, args.data, args.output, embeddings=args.embeddings, overwrite=args.overwrite)
    print(f"{args.output}: {count} answers")
    return 0

"""`arabert-pipeline evaluate`: several QA systems side by side on one or more datasets."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..cliargs import add_deprecated_alias

DESCRIPTION = """\
Score QA models and/or prediction files side by side: EM, F1 and Sentence-Match in two variants (SOQAL-compatible, as in
the AraBERT paper's table, and Arabic-correct), with 95% bootstrap CIs and paired comparisons against the first system,
next to lexical reference baselines (first, random and TF-IDF sentence, sliding window, word-overlap span). Writes
OUT/table.md, table.csv, results.json, per-question JSONL, reusable predictions and plots. The report's notes say what
was run: which checkpoint each model was fine-tuned from and on what, whether an "mBERT" row is
bert-base-multilingual-cased or a model trained here with its vocabulary, and how the rows relate to the AraBERT paper's
Table 6.
"""


# evaluate/baselines.py's BASELINES and evaluate/retrievers.py's RETRIEVERS, repeated so that `--help` needs no numpy
# import (a test keeps them equal).
BASELINE_NAMES = ("first-sentence", "random-sentence", "tfidf-sentence", "sliding-window", "overlap-span")
RETRIEVER_NAMES = ("bm25", "tfidf")


class _AppendSystem(argparse.Action):
    """--model and --predictions share one ordered list, so --label and the reference system follow the command line."""

    def __call__(self, parser, namespace, value, option_string=None):
        kind = "model" if option_string == "--model" else "predictions"
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or []), (kind, value)])


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "evaluate", help="side-by-side EM/F1/SM evaluation with CIs, tables and plots",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", dest="systems", action=_AppendSystem, metavar="DIR_OR_HUB_ID",
                        help="model to run (repeatable): a model dir, a shipped model's name (arabert, "
                             "arabert-sentiment, arabert-ner) or a hub id; the first system is the reference for "
                             "paired differences")
    parser.add_argument("--predictions", dest="systems", action=_AppendSystem, metavar="FILE.json",
                        help='answers {"id": "text"} or {"id": {"text", "start"}} (repeatable)')
    parser.add_argument("--label", action="append", default=[], metavar="NAME",
                        help="name of the n-th --model/--predictions in the report (default: dir or file name)")
    parser.add_argument("--data", action="append", required=True, metavar="NAME_OR_FILE",
                        help="dataset: arcd-test, tydiqa-goldp-ar-dev, ... or a SQuAD v1.1 JSON file (repeatable)")
    parser.add_argument("-o", "--output", dest="out", required=True, type=Path, metavar="OUTDIR",
                        help="report directory, written when the run completes; an earlier report there is replaced "
                             "only with --overwrite, a directory holding anything else or an input never")
    add_deprecated_alias(parser, "--out", "--output", dest="out", type=Path)
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier report in OUTDIR")
    parser.add_argument("--baselines", default=",".join(BASELINE_NAMES), metavar="LIST",
                        help="comma-separated reference baselines, or 'none' (default: %(default)s)")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap and random-baseline seed (default: 0)")
    parser.add_argument("--batch-size", type=int, default=32, help="inference batch size (default: %(default)s)")
    parser.add_argument("--device", default="cpu",
                        help="where --model systems predict: cpu, cuda, cuda:1, mps (default: %(default)s)")
    parser.add_argument("--preprocessing", choices=("arabertv02", "arabertv2", "none"),
                        help="for --model checkpoints that do not record theirs (a QA checkpoint from the hub: "
                        "arabertv2 for AraBERTv2, arabertv02 for v0.2, none for mBERT); models that record one use it")
    parser.add_argument("--limit", type=int, metavar="N", help="only the first N questions of each dataset")
    parser.add_argument("--pretraining-log", action="append", default=[], metavar="LABEL=LOG.jsonl",
                        help="add a pretraining run's log.jsonl: loss curves and held-out metrics (repeatable)")
    parser.add_argument("--no-answer", action="store_true",
                        help="also score models SQuAD 2.0-style: each question once more with another paragraph of its "
                        "article that lacks the answer, answered with allow_no_answer (HasAns F1, NoAns accuracy, "
                        "overall F1)")
    parser.add_argument("--no-answer-data", nargs="+", action="extend", default=[], metavar="NAME_OR_FILE",
                        help="with --no-answer: SQuAD 2.0 sets whose unanswerable questions (is_impossible) are asked "
                        "of their paragraph too, e.g. aqad-unanswerable: NoAns accuracy at the model's threshold and "
                        "at the thresholds keeping 95..70%% of the --data questions answered")
    parser.add_argument("--no-answer-limit", type=int, metavar="N",
                        help="at most N questions of each --no-answer-data set, drawn with --seed")
    parser.add_argument("--spans-as-decoded", dest="whole_words", action="store_false",
                        help="score models' spans as decoded, without widening them to whole words")
    parser.add_argument("--backend", choices=("torch", "onnx"), default="torch",
                        help="run --model systems on torch (default; the committed reports were made with it) or on "
                             "ONNX Runtime (a model dir with model.onnx, as `answer` runs it; CPU only)")
    documents = parser.add_argument_group(
        "documents and collections (QA --model systems)",
        "Each model is also asked its questions without their paragraph: of a document, of a collection, or both; "
        "each question is asked of its paragraph too, one at a time and timed (the oracle row). Rows per retriever; "
        "recall of the gold paragraph (collection) or of the passage holding the answer (document), ms a question, "
        "the grid of passages read × null weight, and no-answer scores (docs/evaluation.md).")
    documents.add_argument("--documents", type=int, metavar="K",
                           help="ask each question of its article joined with K other articles of its set (seeded), "
                                "read as `answer` reads a long context: its best passages")
    documents.add_argument("--collection", action="store_true",
                           help="ask each question of one collection of every --data set's paragraphs (plus "
                                "--distractors), as `answer --index` does; the questions of a --withhold share of the "
                                "articles are also asked of the collection without them, with allow_no_answer")
    documents.add_argument("--distractors", nargs="+", action="extend", default=[], metavar="FILE_OR_INDEX_DIR",
                           help="documents added to the collection: corpus files, SQuAD JSON, JSON lines (as `index` "
                                "reads them) or an index directory (its documents)")
    documents.add_argument("--distractor-paragraphs", type=int, metavar="N",
                           help="at most N paragraph lines of --distractors, whole documents, in the order given")
    documents.add_argument("--retrievers", default=",".join(RETRIEVER_NAMES), metavar="LIST",
                           help="comma-separated: bm25 (the package's Index), tfidf (SOQAL's TF-IDF) "
                                "(default: %(default)s)")
    documents.add_argument("--withhold", type=float, default=0.5, metavar="SHARE",
                           help="share of the articles left out of the no-answer collection, 0 for none "
                                "(default: %(default)s)")
    tasks = parser.add_argument_group("classification and NER (--task)")
    tasks.add_argument("--task", choices=("qa", "classification", "ner"), default="qa",
                       help="qa (default): EM/F1/SM on SQuAD sets; classification: accuracy, macro-F1, F1-PN, "
                            "per-class F1 on labelled texts; ner: entity micro / macro / per-type F1 on CoNLL sets")
    tasks.add_argument("--train", nargs="+", action="extend", default=[], metavar="NAME_OR_FILE",
                       help="classification / ner: the sets the baselines are fitted on")
    tasks.add_argument("--dev", nargs="+", action="extend", default=[], metavar="NAME_OR_FILE",
                       help="classification / ner: the sets the baselines' settings are chosen on")
    tasks.add_argument("--text-column", help="classification: the text column (default: text, or the registered set's)")
    tasks.add_argument("--label-column", default="label", help="classification: the label column (default: label)")
    tasks.add_argument("--format", choices=("csv", "tsv", "jsonl"),
                       help="classification: the files' format (default: from the file name)")
    tasks.add_argument("--metric", metavar="METRIC",
                       help="classification: the score listed first, which chooses the baselines' settings and is "
                            "compared pairwise: macro_f1, accuracy, f1_pn, f1:LABEL[,LABEL] (default: f1_pn when the "
                            "labels have POS and NEG, else macro_f1)")
    tasks.add_argument("--vectors", metavar="DIR",
                       help="ner: the static word vectors of the bilstm baseline, a train-embeddings directory or a "
                            "model dir with a reader/ (default: the shipped arabert-mini's word2vec table)")
    parser.set_defaults(run=run, systems=[])


# What `evaluate` writes into OUTDIR (evaluate/report.py's write_report).
# pooled.md, seeds.md, tokenization.md, bench*.json: the summaries scripts/pooled_table.py, seed_spread.py and
# tokenization_profile.py print and benchmarks/bench_documents.py's results (a dev collection, the whole corpus),
# which the experiments write into the report they summarise (a re-run with --overwrite replaces them with the report,
# instead of refusing the directory as someone else's).
REPORT_OUTPUT_NAMES = ("results.json", "table.md", "table.csv", "per_question", "predictions", "plots", "pretraining",
                       "no_answer", "pooled.md", "seeds.md", "tokenization.md", "bench.json",
                       "bench-whole-corpus.json")


# "arabert" names the shipped model of each task, as Pipeline("arabert", task=...) reads it.
_DEFAULT_OF_TASK = {"qa": "arabert-mini", "classification": "arabert-sentiment", "ner": "arabert-ner"}


def shipped_or_given(kind: str, source: str, task: str = "qa") -> tuple[str, str]:
    """A --model naming a model shipped in the package (arabert, arabert-sentiment, ...) → its directory there, as
    Pipeline resolves it; a path that exists, a --predictions file or a hub id as given."""
    from ..artifacts.models import shipped_model_dir

    found = shipped_model_dir(source) if kind == "model" else None
    if found is not None:
        return kind, str(found.with_name(_DEFAULT_OF_TASK[task]) if source == "arabert" else found)
    return kind, source


def run(args: argparse.Namespace) -> int:
    args.systems = [shipped_or_given(kind, source, args.task) for kind, source in args.systems]
    if args.task != "qa":
        return run_task(args)
    from ..errors import ConfigError
    from ..outputs import OutputKind, claim_output_dir
    from .open_domain import OpenOptions
    from .report import EvaluateConfig, run_evaluation
    from .tables import print_summary

    if args.resamples < 100:
        raise ConfigError(f"--resamples {args.resamples}: use at least 100")
    task_flags = [flag for flag, value in (("--format", args.format), ("--metric", args.metric),
                                           ("--vectors", args.vectors)) if value]
    if task_flags:
        raise ConfigError(f"{', '.join(task_flags)}: flags of --task classification / ner, not of QA")
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit {args.limit}: use a positive number of questions")
    if (args.no_answer_data or args.no_answer_limit is not None) and not args.no_answer:
        raise ConfigError("--no-answer-data and --no-answer-limit measure the no-answer threshold: add --no-answer")
    if args.no_answer_limit is not None and args.no_answer_limit < 1:
        raise ConfigError(f"--no-answer-limit {args.no_answer_limit}: use a positive number of questions")
    logs = []
    for item in args.pretraining_log:
        label, sep, path = item.partition("=")
        if not sep or not label.strip() or not path.strip():
            raise ConfigError(f"--pretraining-log {item!r}: write LABEL=PATH/log.jsonl")
        logs.append((label.strip(), path.strip()))
    inputs = [source for _, source in args.systems] + list(args.data) + [path for _, path in logs] + \
        list(args.distractors) + list(args.no_answer_data)
    claim_output_dir(args.out, OutputKind("evaluate", REPORT_OUTPUT_NAMES, markers=("results.json",)),
                     inputs=[path for path in inputs if Path(path).exists()], overwrite=args.overwrite)
    baselines = () if args.baselines.strip().lower() in ("", "none") else tuple(
        name.strip() for name in args.baselines.split(",") if name.strip())
    config = EvaluateConfig(
        data=args.data, out=args.out, systems=list(args.systems), labels=args.label, baselines=baselines,
        resamples=args.resamples, seed=args.seed, batch_size=args.batch_size, limit=args.limit,
        pretraining_logs=logs, whole_words=args.whole_words, no_answer=args.no_answer,
        no_answer_data=list(args.no_answer_data), no_answer_limit=args.no_answer_limit, device=args.device,
        preprocessing=args.preprocessing, backend=args.backend,
        open=OpenOptions(documents=args.documents, collection=args.collection, distractors=tuple(args.distractors),
                         distractor_paragraphs=args.distractor_paragraphs,
                         retrievers=tuple(name.strip() for name in args.retrievers.split(",") if name.strip()),
                         withhold=args.withhold),
    )
    results = run_evaluation(config, log=lambda message: print(message, file=sys.stderr))
    print_summary(results)
    print(f"report: {args.out / 'table.md'}")
    return 0


def run_task(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from ..outputs import OutputKind, claim_output_dir
    from .tasks import (
        CLASSIFICATION_BASELINES,
        NER_BASELINES,
        TASK_OUTPUT_NAMES,
        TaskEvaluateConfig,
        run_task_evaluation,
    )

    if args.resamples < 100:
        raise ConfigError(f"--resamples {args.resamples}: use at least 100")
    if args.no_answer or args.no_answer_data or args.pretraining_log or args.limit is not None \
            or args.documents is not None or args.collection or args.distractors or args.backend != "torch":
        raise ConfigError("--no-answer, --no-answer-data, --pretraining-log, --limit, --documents, --collection, "
                          f"--distractors and --backend are QA's, not flags of --task {args.task}")
    if args.metric and args.task != "classification":
        raise ConfigError(f"--metric chooses among classification scores; --task {args.task} reports its own")
    if args.format and args.task != "classification":
        raise ConfigError(f"--format names the format of classification files; --task {args.task} reads CoNLL")
    defaults = CLASSIFICATION_BASELINES if args.task == "classification" else NER_BASELINES
    baselines = defaults if args.baselines == ",".join(BASELINE_NAMES) else () if args.baselines.strip().lower() in (
        "", "none") else tuple(name.strip() for name in args.baselines.split(",") if name.strip())
    inputs = [source for _, source in args.systems] + list(args.data) + list(args.train) + list(args.dev)
    claim_output_dir(args.out, OutputKind("evaluate", TASK_OUTPUT_NAMES, markers=("results.json",)),
                     inputs=[path for path in inputs if Path(path).exists()], overwrite=args.overwrite)
    config = TaskEvaluateConfig(task=args.task, data=args.data, out=args.out, systems=list(args.systems),
                                labels=args.label, train=args.train, dev=args.dev, baselines=baselines,
                                text_column=args.text_column, label_column=args.label_column, format=args.format,
                                resamples=args.resamples, seed=args.seed, batch_size=args.batch_size,
                                device=args.device, preprocessing=args.preprocessing, vectors=args.vectors,
                                metric=args.metric)
    run_task_evaluation(config, log=lambda message: print(message, file=sys.stderr))
    print((args.out / "table.md").read_text(encoding="utf-8"))
    return 0

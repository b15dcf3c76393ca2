"""The transformer reader's verbs: `finetune` (a flag per FinetuneConfig field, its default the field's),
`tune-decoding` (tune.py) and `export-onnx` (export.py); torch & co. are imported only when a verb runs."""
from __future__ import annotations

import argparse

from ...cliargs import BF16_CHOICES, bf16_choice
from .config import PROTOCOLS, FinetuneConfig
from .settings import DECODINGS

_DEFAULTS = FinetuneConfig(model="", output="")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "finetune",
        help="fine-tune a checkpoint for extractive QA (SQuAD v1.1 data)",
        description="Fine-tune any Hugging Face encoder checkpoint for extractive question answering. Defaults are "
        "the AraBERT paper's for base-size models. Protocols: 'paper' = train Arabic-SQuAD + arcd-train, evaluate "
        "arcd-test; 'offline' = train arcd-train + xquad-ar + mlqa-ar-dev, evaluate arcd-test + "
        "tydiqa-goldp-ar-dev; 'offline-dev' = train arcd-train-rest + xquad-ar, choose the epoch and the decoding "
        "settings on arcd-dev + mlqa-ar-dev, evaluate arcd-test + tydiqa-goldp-ar-dev. Datasets are files or registry "
        "names resolved under $ARABERT_PIPELINE_DATA (aqad: opt-in, noisy, no licence stated).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model", required=True, help="checkpoint dir (MLM or QA) or hub id")
    p.add_argument("-o", "--output", required=True, help="output model dir (checkpoints go in OUTPUT/checkpoints)")
    p.add_argument("--train", nargs="+", action="extend", default=[], metavar="FILE_OR_NAME", help="training sets")
    p.add_argument("--dev", nargs="+", action="extend", default=[], metavar="FILE_OR_NAME",
                   help="dev sets, scored after every epoch: the best epoch is kept and the sentence prior chosen")
    p.add_argument("--eval", nargs="+", action="extend", default=[], metavar="FILE_OR_NAME",
                   help="evaluation sets (predicted and scored at the end)")
    p.add_argument("--hold-out", nargs="+", action="extend", default=[], metavar="FILE_OR_NAME",
                   help="sets kept out of training by the leakage guard but never scored (the test sets while "
                   "choosing on --dev)")
    p.add_argument("--protocol", choices=list(PROTOCOLS),
                   help="preset training + dev + evaluation sets")
    p.add_argument("--preprocessing",
                   help="needed for checkpoints without arabert_pipeline.json (arabertv2, arabertv02, none)")
    p.add_argument("--epochs", type=int, default=_DEFAULTS.epochs)
    p.add_argument("--lr", type=float, default=_DEFAULTS.lr)
    p.add_argument("--batch-size", type=int, default=_DEFAULTS.batch_size,
                   help="windows per micro-batch per process (memory: docs/finetuning.md)")
    p.add_argument("--grad-accum", type=int, default=_DEFAULTS.grad_accum,
                   help="micro-batches per optimizer step: a step reads batch-size × grad-accum × processes windows "
                   "(the paper's 32 as --batch-size 8 --grad-accum 4 where 32 do not fit)")
    p.add_argument("--max-steps", type=int, metavar="N",
                   help="end the schedule (warm-up and decay fitted to it) after N optimizer steps: a smoke run")
    p.add_argument("--time-budget", type=float, metavar="MIN",
                   help="fit the schedule to MIN minutes of wall-clock time from the measured speed, never beyond "
                   "--epochs / --max-steps; the model is evaluated and saved as after a full run")
    p.add_argument("--weight-decay", type=float, default=_DEFAULTS.weight_decay)
    p.add_argument("--warmup-ratio", type=float, default=_DEFAULTS.warmup_ratio)
    p.add_argument("--layer-lr-decay", type=float, default=_DEFAULTS.layer_lr_decay,
                   help="learning rate × this per layer below the top (ELECTRA: 0.8; 1 = off)")
    p.add_argument("--patience", type=int, default=_DEFAULTS.patience,
                   help="with --dev: stop after this many epochs without a better dev F1 (0 = run every epoch)")
    p.add_argument("--question-overlap", action="store_true",
                   help="mark context words shared with the question (token type 2); answering computes it too")
    p.add_argument("--negatives", action="store_true",
                   help="SQuAD 2.0-style: also train each question with another paragraph of its article that lacks "
                   "the answer, labelled no-answer (for answering with allow_no_answer)")
    add_decoding_flags(p, without_dev=True)
    p.add_argument("--max-seq-length", type=int, default=_DEFAULTS.max_seq_length)
    p.add_argument("--doc-stride", type=int, default=_DEFAULTS.doc_stride,
                   help="tokens shared by consecutive windows")
    p.add_argument("--max-question-tokens", type=int, default=_DEFAULTS.max_question_tokens)
    p.add_argument("--max-answer-tokens", type=int, default=_DEFAULTS.max_answer_tokens)
    p.add_argument("--seed", type=int, default=_DEFAULTS.seed)
    p.add_argument("--bf16", type=bf16_choice, choices=BF16_CHOICES, default=_DEFAULTS.bf16,
                   help="bf16 autocast; auto = on a GPU that supports it, or a CPU where a bf16 matmul measures "
                   "faster than fp32")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the training steps, any task (GPU speed, not yet measured on one; the first "
                   "steps compile, and a --time-budget plan first counts that as step time). Checkpoints, dev "
                   "scores, predictions and the saved model are the plain model's")
    p.add_argument("--save-steps", type=int, default=_DEFAULTS.save_steps,
                   help="extra checkpoint every N steps (one is always written per epoch)")
    p.add_argument("--resume", nargs="?", const="latest", metavar="CKPT",
                   help="continue from the last checkpoint in OUTPUT (or from CKPT)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier finetune output in OUTPUT (a directory holding anything else is never "
                   "replaced)")
    p.add_argument("--skip-misaligned", action="store_true",
                   help="drop training answers whose answer_start does not match their text (counted, reported)")
    p.add_argument("--allow-leakage", action="store_true", help="train even if evaluation data occurs in training")
    p.add_argument("--drop-leaking-train", action="store_true",
                   help="remove the training questions whose context/question leaks into evaluation, then train")
    p.add_argument("--download", action="store_true", help="download missing registered datasets")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.set_defaults(run=run)
    register_tune_decoding(subparsers)
    register_soup(subparsers)
    register_export_onnx(subparsers)


def add_decoding_flags(p: argparse.ArgumentParser, *, without_dev: bool) -> None:
    """The decoding settings both verbs take: one given is kept, one not given is chosen on --dev (`without_dev`:
    the verb runs without dev sets too, and then takes the plain decoder's value)."""

    def default(plain: str) -> str:
        return f"(default: chosen on --dev{', else ' + plain if without_dev else ''})"

    p.add_argument("--sentence-prior", type=float, metavar="WEIGHT",
                   help="weight of the decoding prior on the sentence sharing the question's words " + default("0"))
    p.add_argument("--within-sentence", choices=["on", "off"],
                   help="answers never cross a sentence boundary " + default("off"))
    p.add_argument("--decoding", choices=list(DECODINGS),
                   help="the answer: the best-scoring span, or the candidate of highest expected F1 under the model's "
                   "span distribution " + default("max-score"))


def on_off(value: str | None) -> bool | None:
    return None if value is None else value == "on"


def register_tune_decoding(subparsers) -> None:
    p = subparsers.add_parser(
        "tune-decoding",
        help="choose a QA model's decoding settings on dev sets (a copy of the model dir with them)",
        description="Score every decoding setting (sentence-prior weight, answers within one sentence or not, "
        "max-score or expected-F1 decoding) on the dev sets, pooled, choose the no-answer threshold on them and "
        "their SQuAD 2.0-style negatives and the map from answer scores to the rate of right answers, and write "
        "a copy of MODEL_DIR whose arabert_pipeline.json holds them and "
        "every score tried. The weights are not changed. A setting "
        "given as a flag is kept as given. The dev sets must not be the model's training data, nor the sets you "
        "will report on.",
    )
    p.add_argument("model_dir", metavar="MODEL_DIR", help="a QA model dir (finetune's output)")
    p.add_argument("--dev", nargs="+", action="extend", required=True, metavar="FILE_OR_NAME",
                   help="dev sets (files or names)")
    p.add_argument("-o", "--output", required=True, help="the tuned copy of MODEL_DIR (a new directory)")
    add_decoding_flags(p, without_dev=False)
    p.add_argument("--expected-f1-temperature", type=float, metavar="T",
                   help="keep this temperature of expected-F1 decoding (default: chosen on --dev from 0.5, 1, 2)")
    p.add_argument("--reader", metavar="READER_DIR",
                   help="a train-reader output to attach: its word probabilities join the span scores, at a weight "
                        "chosen on --dev (written into OUTPUT as reader/, run by ONNX Runtime)")
    p.add_argument("--reader-weight", type=float, metavar="WEIGHT",
                   help="keep this reader weight (default: chosen on --dev from 0, 2, 4, 8, 16 when there is a "
                        "reader)")
    p.add_argument("--leading-words", nargs="+", action="extend", metavar="WORD",
                   help="keep these words (normalized: no diacritics, alef forms as ا, ى as ي, ة as ه) as the first "
                        "words dropped from answers, or 'none' to drop none (default: chosen on --dev among "
                        "prepositions, حوالي/نحو, عام/سنة and هو/هي)")
    p.add_argument("--calibration", default="auto", choices=["auto", "isotonic", "platt", "logistic", "none"],
                   help="map answer scores to the probability that the answer is right (SOQAL F1 >= 0.5): auto "
                        "chooses the map with the lowest held-out Brier score on --dev, leaving one dev set out when "
                        "there are two or more; logistic reads several features of the answer and its question "
                        "(default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default="cpu", help="where the model predicts: cpu, cuda, cuda:1, mps")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier tune-decoding output in OUTPUT")
    p.set_defaults(run=run_tune_decoding)


def run_tune_decoding(args: argparse.Namespace) -> int:
    from ...artifacts.metadata import read_metadata
    from ..metrics import DEV_METRIC
    from .calibration import describe as describe_calibration
    from .tune import describe_decoding, describe_leading_words, describe_no_answer, tune_model_decoding

    fixed = {"sentence_prior": args.sentence_prior, "within_sentence": on_off(args.within_sentence),
             "decoding": args.decoding,
             "expected_f1_temperature": args.expected_f1_temperature, "reader_weight": args.reader_weight}
    chosen, rows, no_answer = tune_model_decoding(args.model_dir, args.dev, args.output, fixed=fixed,
                                                  batch_size=args.batch_size, reader=args.reader,
                                                  calibration_method=args.calibration,
                                                  leading_words=leading_words_arg(args.leading_words),
                                                  overwrite=args.overwrite, device=args.device)
    for row in rows:
        print(f"{describe_decoding(row)}: dev {DEV_METRIC} {row['score']:.2f}")
    tuning = read_metadata(args.output)["decoding_tuning"]
    if tuning["leading_words"] is not None:
        print(describe_leading_words(tuning["leading_words"]))
    print(describe_no_answer(no_answer))
    print(describe_calibration(tuning["calibration"]))
    print(f"chose {describe_decoding(chosen)}; wrote {args.output}")
    return 0


def register_soup(subparsers) -> None:
    p = subparsers.add_parser(
        "soup",
        help="average QA models fine-tuned from one start into one (a greedy model soup, chosen on dev)",
        description="Score each MODEL_DIR on the dev sets (plain decoding), then, best first, average each one's "
        "weights into the soup if that does not lower the soup's dev score (Wortsman et al. 2022, greedy soup). "
        "Writes OUTPUT: one QA model (the best ingredient's tokenizer, the averaged weights, the plain decoding it "
        "was scored with) with the report in soup.json and arabert_pipeline.json. The models must be runs of one "
        "recipe from one start (checked) and not trained on the dev sets; run tune-decoding on the soup afterwards.",
    )
    p.add_argument("models", nargs="+", metavar="MODEL_DIR", help="QA model dirs (finetune outputs), at least two")
    p.add_argument("--dev", nargs="+", action="extend", required=True, metavar="FILE_OR_NAME",
                   help="dev sets (files or names)")
    p.add_argument("-o", "--output", required=True, help="the soup's model dir (a new directory)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--device", default="cpu", help="where the models predict: cpu, cuda, cuda:1, mps")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier soup output in OUTPUT")
    p.set_defaults(run=run_soup)


def run_soup(args: argparse.Namespace) -> int:
    from .soup import describe, make_soup

    report = make_soup(args.models, args.dev, args.output, device=args.device, batch_size=args.batch_size,
                       overwrite=args.overwrite)
    print(describe(report))
    print(f"wrote {args.output}")
    return 0


def leading_words_arg(words: list[str] | None) -> tuple[str, ...] | None:
    """--leading-words: None (choose on dev), () for 'none', else the words."""
    if words is None:
        return None
    return () if words == ["none"] else tuple(words)


def config_from_args(args: argparse.Namespace) -> FinetuneConfig:
    import dataclasses

    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(FinetuneConfig)}
    return FinetuneConfig(**{**values, "within_sentence": on_off(values["within_sentence"])})


def run(args: argparse.Namespace) -> int:
    from .finetune import run_finetune

    return 0 if run_finetune(config_from_args(args)).completed else 130


def register_export_onnx(subparsers) -> None:
    p = subparsers.add_parser(
        "export-onnx",
        help="export a QA model dir to ONNX (model.onnx beside its weights) for inference without torch",
        description="Write MODEL_DIR/model.onnx: the QA model's forward as an ONNX graph that reads its weights from "
        "MODEL_DIR/model.safetensors, checked against torch before it is written. `Pipeline` and "
        "`arabert-pipeline answer` then run the model with ONNX Runtime, without importing torch. Re-run it "
        "whenever the weights or config.json change (a stale model.onnx is refused at load). Needs the `onnx` "
        "package (pip install 'arabert-pipeline[export]').",
    )
    p.add_argument("model_dir", metavar="MODEL_DIR", help="a QA model dir with config.json and model.safetensors")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a model.onnx that was not written by export-onnx (an earlier export is always "
                   "replaced)")
    p.set_defaults(run=run_export)


def run_export(args: argparse.Namespace) -> int:
    from transformers.utils import logging as hf_logging

    from ...finetuning.export import WEIGHTS_FILE
    from .export import export_onnx

    hf_logging.disable_progress_bar()
    path = export_onnx(args.model_dir, overwrite=args.overwrite)
    size = path.stat().st_size / 1e6
    print(f"wrote {path} ({size:.2f} MB; weights read from {path.parent / WEIGHTS_FILE}), logits checked against torch")
    return 0

"""`arabert-pipeline pretrain`: BERT or DeBERTa pretraining (MLM, ELECTRA/DeBERTaV3 replaced-token detection, span
selection), or XLNet's permutation language modelling, on a preprocessed corpus.

Multi-GPU / multi-node: `accelerate launch ... -m arabert_pipeline.cli pretrain ...` or
`torchrun ... -m arabert_pipeline.cli pretrain ...` (exact commands in pretrain/trainer.py).
"""
from __future__ import annotations

import argparse
import dataclasses

from ..cliargs import BF16_CHOICES, bf16_choice
from .config import ARCHITECTURES, DEBERTA_ATTENTIONS, MASKING, MODEL_SIZES, OBJECTIVES, PretrainConfig


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "pretrain",
        help="pretrain a BERT, DeBERTa or XLNet on a preprocessed corpus",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--tokenizer", required=True, metavar="DIR",
                   help="tokenizer directory (arabert-pipeline train-tokenizer)")
    p.add_argument("--corpus", required=True, nargs="+", action="extend", metavar="FILE",
                   help="preprocessed corpus files (.txt/.txt.gz/.txt.xz, blank line between documents)")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="run directory: log.jsonl, checkpoints/, and at the end the Hugging Face model")
    p.add_argument("--model-size", metavar="SIZE",
                   help="architecture preset ("
                   + ", ".join(f"{name} L{layers}/H{hidden}/A{heads}"
                               for name, (layers, hidden, heads) in MODEL_SIZES.items())
                   + ") or L<layers>-H<hidden>, e.g. L6-H384 (heads of 64, feed-forward 4 × hidden)")
    p.add_argument("--objective", default="mlm", choices=list(OBJECTIVES),
                   help="mlm (BERT), electra (replaced-token detection), span-selection, or plm (XLNet's permutation "
                   "language modelling, with --architecture xlnet; default %(default)s)")
    p.add_argument("--architecture", default=PretrainConfig.architecture, choices=list(ARCHITECTURES),
                   help="encoder: bert (absolute positions) or deberta-v2 (DeBERTa-v2/v3 disentangled attention over "
                   "relative positions); with --objective electra, deberta-v2 is DeBERTaV3; xlnet (relative "
                   "positions, two-stream attention) trains with --objective plm only (default %(default)s)")
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--mlm-probability", type=float, default=0.15)
    p.add_argument("--whole-word-masking", action="store_true",
                   help="mask whole space-delimited words (a Farasa segment such as ال+ is one word)")
    p.add_argument("--masking", choices=list(MASKING), default=PretrainConfig.masking,
                   help="dynamic: new masks at every read (RoBERTa); static: 10 fixed masks per sequence (RoBERTa's "
                   "duplicated-static baseline); span: SpanBERT's spans of whole words, lengths geometric (p 0.2, at "
                   "most 10 words), 80/10/10 per span (default %(default)s)")
    p.add_argument("--span-boundary-objective", action="store_true",
                   help="with --masking span: SpanBERT's SBO, each masked token also predicted from the tokens just "
                   "outside its span and its position in it (a pretraining-only head; the export is a plain model)")
    p.add_argument("--enhanced-mask-decoder", action="store_true",
                   help="deberta-v2: DeBERTa's enhanced mask decoder in the MLM head (the electra generator's too): "
                   "absolute positions added before the softmax; pretraining only, the export is a plain DeBERTa")
    p.add_argument("--nsp", action="store_true", help="add next-sentence prediction (AraBERT v1)")
    p.add_argument("--electra-generator-size", type=float, default=PretrainConfig.electra_generator_size,
                   help="electra: generator width as a fraction of the discriminator's (default %(default)s)")
    p.add_argument("--electra-generator-layers", type=float, default=PretrainConfig.electra_generator_layers,
                   help="electra: generator depth as a fraction of the discriminator's (default %(default)s)")
    p.add_argument("--electra-rtd-weight", type=float, default=PretrainConfig.electra_rtd_weight,
                   help="electra: λ in generator loss + λ · replaced-token-detection loss (default %(default)s)")
    p.add_argument("--electra-embedding-sharing", choices=["none", "full", "gdes"],
                   default=PretrainConfig.electra_embedding_sharing,
                   help="electra: none, full (ELECTRA) or gdes (DeBERTaV3 gradient-disentangled; default %(default)s)")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--steps", type=int, help="optimizer steps")
    length.add_argument("--tokens", type=lambda text: int(float(text)),
                        help="tokens to read, special tokens included (e.g. 2e7)")
    length.add_argument("--time-budget", type=float, metavar="MIN", help="minutes of wall-clock time")
    p.add_argument("--batch-size", type=int, default=32, help="sequences per micro-batch per process")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--lr", type=float, default=5e-4, help="peak learning rate")
    p.add_argument("--warmup", type=float, default=0.06, help="warm-up: a fraction of the steps (<1) or steps (>=1)")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient clipping (0 = off)")
    p.add_argument("--dropout", type=float, metavar="P",
                   help="dropout while pretraining (default: the architecture's 0.1; the exported model keeps 0.1)")
    p.add_argument("--bf16", type=bf16_choice, choices=BF16_CHOICES, default="auto",
                   help="bf16 autocast; auto = on a GPU that supports it, or a CPU where a bf16 matmul measures "
                   "faster than fp32")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--eval-sequences", type=int, default=256, help="held-out sequences for eval loss/accuracy")
    p.add_argument("--eval-every", type=int, default=500, metavar="STEPS")
    p.add_argument("--log-every", type=int, default=10, metavar="STEPS")
    p.add_argument("--save-every", type=int, default=1000, metavar="STEPS")
    p.add_argument("--keep-checkpoints", type=int, default=2, metavar="K")
    p.add_argument("--resume", nargs="?", const="latest", metavar="CKPT",
                   help="continue from the last checkpoint in OUT (or from CKPT)")
    p.add_argument("--overwrite", action="store_true",
                   help="start again in an OUT that holds an earlier run (its files are deleted; a directory holding "
                   "anything else is never touched)")
    p.add_argument("--init-from", metavar="CKPT", help="start from these weights (a model dir or a checkpoint dir)")
    p.add_argument("--init-embeddings", metavar="DIR",
                   help="start the token embeddings from the static vectors of a train-embeddings directory (same "
                        "preprocessing as the tokenizer; projected to the hidden size and rescaled to the init scale)")
    p.add_argument("--cache-dir", metavar="DIR", help="token cache (default ~/.cache/arabert_pipeline/pretrain-tokens)")
    p.add_argument("--loader-workers", type=int, metavar="N",
                   help="processes that build batches ahead of the steps (default: 4 on a GPU, 0 on a CPU); the "
                   "batches are the same either way")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the model for the training steps (default: on a GPU, where it measured 1.68× "
                   "eager for DeBERTa-v2 base, not on a CPU; --no-compile for eager steps). The first steps compile, "
                   "and a --time-budget plan first counts that as step time")
    p.add_argument("--deberta-attention", choices=list(DEBERTA_ATTENTIONS), default=PretrainConfig.deberta_attention,
                   help="deberta-v2: eager (transformers' disentangled attention) or sdpa (its relative terms as the "
                   "bias of one scaled_dot_product_attention call, meant to save a GPU memory and time; not yet "
                   "measured on one). On a GPU it runs without --compile (torch.compile's backward pass failed with "
                   "it). Same weights, the export unchanged (default %(default)s)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from .trainer import pretrain

    fields = {f.name for f in dataclasses.fields(PretrainConfig)}
    config = PretrainConfig(**{k: v for k, v in vars(args).items() if k in fields})
    return 0 if pretrain(config) else 130

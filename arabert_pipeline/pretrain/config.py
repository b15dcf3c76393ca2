"""`PretrainConfig`: every option of `arabert-pipeline pretrain`, one field per flag, plus the model-size presets."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, TypedDict

from ..errors import ConfigError

# Objective name → module defining `build(config, tokenizer)` (pretrain/objectives.py says what it returns); the
# module is imported only when chosen, so the CLI stays fast.
OBJECTIVES: dict[str, str] = {
    "mlm": "arabert_pipeline.pretrain.mlm",
    "electra": "arabert_pipeline.pretrain.electra",
    "span-selection": "arabert_pipeline.pretrain.span_selection",
    "plm": "arabert_pipeline.pretrain.xlnet",
}

# (layers, hidden, heads); the feed-forward width is always 4 × hidden, as in BERT. tiny/mini/small/medium are the
# compact BERTs of Turc et al. 2019 ("Well-Read Students Learn Better"), base/large are BERT's own.
MODEL_SIZES: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 64, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}

# Any other depth and width as "L<layers>-H<hidden>" (e.g. L6-H384), with heads of 64 dimensions as in BERT: the
# sizes between the presets that a short GPU run or a QA model's CPU budget call for.
CUSTOM_SIZE = re.compile(r"L(\d+)-H(\d+)")


def model_dims(model_size: str) -> tuple[int, int, int]:
    """(layers, hidden, heads) of a preset name or an "L<layers>-H<hidden>" size."""
    if model_size in MODEL_SIZES:
        return MODEL_SIZES[model_size]
    match = CUSTOM_SIZE.fullmatch(model_size)
    if match is None:
        raise ConfigError(f"--model-size {model_size!r}: choose one of {', '.join(MODEL_SIZES)} or give "
                          "L<layers>-H<hidden> (e.g. L6-H384)")
    layers, hidden = int(match[1]), int(match[2])
    if not (1 <= layers <= 48 and 64 <= hidden <= 4096 and hidden % 64 == 0):
        raise ConfigError(f"--model-size {model_size}: layers must be 1-48 and the hidden size a multiple of 64 "
                          "(heads of 64) between 64 and 4096")
    return layers, hidden, hidden // 64


# BERT's position table is 512 long whatever the pretraining length, so QA can fine-tune at 384 later.
MAX_POSITIONS = 512

# Encoders an objective can train (deberta.py describes DeBERTa's, xlnet.py XLNet's), and the Hugging Face model
# types each one continues with --init-from: an ELECTRA discriminator is a BERT encoder under another name.
ARCHITECTURES: dict[str, tuple[str, ...]] = {"bert": ("bert", "electra"), "deberta-v2": ("deberta-v2",),
                                             "xlnet": ("xlnet",)}
MASKING = ("dynamic", "static", "span")
# How a DeBERTa computes its disentangled attention: transformers' own, or deberta_attention.py's through SDPA.
DEBERTA_ATTENTIONS = ("eager", "sdpa")

# Fields that do not change the training trajectory: a run may be resumed with different values for them.
RESUMABLE_CHANGES = frozenset(
    # corpus and tokenizer are paths: their content is compared instead (the token cache key).
    {"resume", "overwrite", "save_every", "keep_checkpoints", "log_every", "eval_every", "cache_dir", "progress",
     "output", "corpus", "tokenizer", "loader_workers", "compile", "deberta_attention"}
)


@dataclass
class PretrainConfig:
    tokenizer: str
    corpus: list[str]
    output: str
    model_size: str | None = None
    objective: str = "mlm"
    architecture: str = "bert"
    max_seq_length: int = 128
    # Objective "mlm".
    mlm_probability: float = 0.15
    whole_word_masking: bool = False
    # dynamic: new masks every time a sequence is read (RoBERTa); static: each sequence has STATIC_MASKS fixed masks
    # (RoBERTa's duplicated-static data), one of which is drawn each time it is read; span: SpanBERT's spans of whole
    # words (geometric lengths), drawn anew at every read.
    masking: str = "dynamic"
    # SpanBERT's span boundary objective (with masking "span"): each masked token is also predicted from the two
    # tokens around its span and its position in it.
    span_boundary_objective: bool = False
    # DeBERTa's enhanced mask decoder in the MLM head (deberta.py); the electra generator's head too.
    enhanced_mask_decoder: bool = False
    nsp: bool = False
    # Objective "electra" (electra.py); it also uses mlm_probability and whole_word_masking for the generator.
    electra_generator_size: float = 0.25  # generator width, a fraction of the discriminator's
    electra_generator_layers: float = 1.0  # generator depth, a fraction of the discriminator's
    electra_rtd_weight: float = 50.0  # λ in loss = generator MLM loss + λ · replaced-token-detection loss
    electra_embedding_sharing: str = "gdes"  # none | full (ELECTRA) | gdes (DeBERTaV3's gradient-disentangled)
    # Length of the run: at most one of these; none = one pass over the training tokens.
    steps: int | None = None
    tokens: int | None = None
    time_budget: float | None = None  # minutes of wall-clock time, evaluation and checkpoints included
    # Optimisation. batch_size is sequences per micro-batch per process (a token budget of
    # batch_size × max_seq_length, so batches of short document tails hold more rows).
    batch_size: int = 32
    grad_accum: int = 1
    lr: float = 5e-4
    warmup: float = 0.06  # < 1: fraction of the total steps; >= 1: a number of steps
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    # Dropout while pretraining (every dropout layer, attention included); None keeps the architecture's 0.1. The
    # exported config keeps 0.1 for fine-tuning. 0 suits short budgets: nothing overfits one pass, and on CPU the
    # dropout masks cost as much as a fifth of a mini model's step.
    dropout: float | None = None
    bf16: str = "auto"  # auto | on | off
    seed: int = 42
    # Evaluation, logging, checkpoints.
    eval_sequences: int = 256
    eval_every: int = 500
    log_every: int = 10
    save_every: int = 1000
    keep_checkpoints: int = 2
    resume: str | None = None  # "latest" or a checkpoint directory
    overwrite: bool = False  # replace an earlier run's output directory
    init_from: str | None = None
    # A train-embeddings directory whose static vectors start the token embeddings (objectives.init_token_embeddings).
    init_embeddings: str | None = None
    cache_dir: str | None = None
    progress: bool = True
    # Speed only (the batches and the loss are the same either way): processes building batches ahead of the steps
    # (None: 4 on a GPU, 0 on a CPU), and torch.compile of the model's training steps (None: on a GPU, not on a CPU).
    # Compiled by default on a GPU because one H200 (2026-11-28, torch 2.11, 32,768 tokens a step, bf16) read
    # DeBERTa-v2 base at 128 at 307,922 tokens/s compiled against 183,224 eager (1.68×, 32.9 against 43.4 GiB), and
    # BERT-base compiled at 481,781 (2026-11-27) against 210,000 eager (2026-11-28, another run). Not on a CPU: the
    # tests and the CPU runs would pay inductor's C++ compilation (12 steps of a tiny DeBERTa on this 2-core machine:
    # 2.5 s eager, 114 s compiled with a cold cache).
    # With --deberta-attention sdpa a GPU runs eager (pretrain/trainer.py: its compiled backward fails there).
    loader_workers: int | None = None
    compile: bool | None = None
    # DeBERTa's disentangled attention: "eager" (transformers') or "sdpa" (deberta_attention.py: the relative terms as
    # the bias of one scaled_dot_product_attention call, for GPU speed and memory). The same weights and, to float
    # rounding, the same outputs; only the dropout masks are drawn another way, so a run may resume with the other.
    deberta_attention: str = "eager"

    def validate(self) -> None:
        """Reject option combinations that cannot work, before anything is loaded."""
        if self.model_size is None and self.init_from is None:
            raise ConfigError("--model-size is required unless --init-from gives the architecture")
        if self.init_embeddings is not None and self.init_from is not None:
            raise ConfigError("--init-embeddings starts new token embeddings from static vectors; --init-from "
                              "continues trained ones: give one of them")
        if self.model_size is not None:
            model_dims(self.model_size)
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"--objective {self.objective!r}: choose one of {', '.join(OBJECTIVES)}")
        if self.architecture not in ARCHITECTURES:
            raise ConfigError(f"--architecture {self.architecture!r}: choose one of {', '.join(ARCHITECTURES)}")
        # XLNet's permutation LM is its own pretraining (two-stream attention exists for it) and PLM needs XLNet's
        # two streams, so neither pairs with anything else.
        if (self.objective == "plm") != (self.architecture == "xlnet"):
            raise ConfigError(f"--objective {self.objective} with --architecture {self.architecture}: permutation "
                              "language modelling is XLNet's objective, so --objective plm needs --architecture xlnet "
                              "and --architecture xlnet trains only with --objective plm")
        if self.objective == "plm" and (self.whole_word_masking or self.mlm_probability != type(self).mlm_probability):
            raise ConfigError("--whole-word-masking and --mlm-probability are MLM options: --objective plm always "
                              "predicts spans of whole words, 1/6 of the tokens (XLNet's K = 6)")
        if self.enhanced_mask_decoder and self.architecture != "deberta-v2":
            raise ConfigError("--enhanced-mask-decoder is DeBERTa's: it needs --architecture deberta-v2")
        if self.enhanced_mask_decoder and self.objective not in ("mlm", "electra"):
            raise ConfigError(f"--enhanced-mask-decoder is an MLM head option; --objective {self.objective} has none")
        if self.deberta_attention not in DEBERTA_ATTENTIONS:
            raise ConfigError(f"--deberta-attention {self.deberta_attention!r}: choose one of "
                              f"{', '.join(DEBERTA_ATTENTIONS)}")
        if self.deberta_attention != "eager" and self.architecture != "deberta-v2":
            raise ConfigError(f"--deberta-attention {self.deberta_attention} is DeBERTa's: it needs --architecture "
                              "deberta-v2")
        if self.nsp and self.architecture != "bert":
            raise ConfigError("--nsp needs --architecture bert (DeBERTa has no next-sentence head)")
        if self.masking not in MASKING:
            raise ConfigError(f"--masking {self.masking!r}: choose one of {', '.join(MASKING)}")
        if self.masking != "dynamic" and self.objective not in ("mlm", "electra"):
            raise ConfigError(f"--masking {self.masking} applies to the mlm and electra objectives, not "
                              f"{self.objective}")
        if self.span_boundary_objective and (self.masking != "span" or self.objective != "mlm"):
            raise ConfigError("--span-boundary-objective predicts masked spans from their boundaries: it needs "
                              "--objective mlm --masking span")
        if not 8 <= self.max_seq_length <= MAX_POSITIONS:
            raise ConfigError(f"--max-seq-length {self.max_seq_length}: must be between 8 and {MAX_POSITIONS}")
        if not 0 < self.mlm_probability < 1:
            raise ConfigError(f"--mlm-probability {self.mlm_probability}: must be between 0 and 1")
        lengths = [name for name in ("steps", "tokens", "time_budget") if getattr(self, name) is not None]
        if len(lengths) > 1:
            raise ConfigError(f"give at most one of --steps, --tokens, --time-budget (got {', '.join(lengths)})")
        for name in ("steps", "tokens", "time_budget", "batch_size", "grad_accum", "lr", "eval_sequences",
                     "eval_every", "log_every", "save_every", "keep_checkpoints"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"--{name.replace('_', '-')} {value}: must be positive")
        if self.dropout is not None and not 0 <= self.dropout < 1:
            raise ConfigError(f"--dropout {self.dropout}: must be in [0, 1)")
        if self.warmup < 0 or self.weight_decay < 0 or self.max_grad_norm < 0:
            raise ConfigError("--warmup, --weight-decay and --max-grad-norm must not be negative")
        if self.bf16 not in ("auto", "on", "off"):
            raise ConfigError(f"--bf16 {self.bf16!r}: choose auto, on or off")
        if not self.corpus:
            raise ConfigError("give at least one --corpus file")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def differences(self, stored: dict[str, Any]) -> list[str]:
        """Fields that differ from a stored config and would change the training trajectory. A field the stored
        config lacks was added since that run was written, which trained as its default does."""
        current = self.to_dict()
        defaults = {f.name: f.default for f in dataclasses.fields(self) if f.default is not dataclasses.MISSING}
        # A budgeted run may be resumed with another budget (the engine re-plans its end), not turned into another
        # kind of run.
        budgets = current.get("time_budget") is not None and stored.get("time_budget") is not None
        return sorted(
            name for name in current.keys() | stored.keys()
            if name not in RESUMABLE_CHANGES and not (budgets and name == "time_budget")
            and current.get(name) != stored.get(name, defaults.get(name))
        )


class BertSizes(TypedDict):
    """A preset's sizes under the names of BertConfig (and of DeBERTa-v2's and ELECTRA's configs)."""
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int


class XLNetSizes(TypedDict):
    """A preset's sizes under XLNetConfig's names."""
    n_layer: int
    d_model: int
    n_head: int
    d_inner: int


def bert_config_kwargs(model_size: str) -> BertSizes:
    layers, hidden, heads = model_dims(model_size)
    return {
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "intermediate_size": 4 * hidden,
        "max_position_embeddings": MAX_POSITIONS,
        "type_vocab_size": 2,
    }


def xlnet_config_kwargs(model_size: str) -> XLNetSizes:
    """The BERT preset's sizes under XLNet's names: no position or token-type table (positions are relative,
    segments compared), so nothing else is sized."""
    layers, hidden, heads = model_dims(model_size)
    return {"n_layer": layers, "d_model": hidden, "n_head": heads, "d_inner": 4 * hidden}


def size_kwargs(architecture: str, model_size: str) -> BertSizes | XLNetSizes:
    """The preset's sizes as the architecture's config names them (what --init-from is compared with)."""
    return xlnet_config_kwargs(model_size) if architecture == "xlnet" else bert_config_kwargs(model_size)

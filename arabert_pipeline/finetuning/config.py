"""What `finetune --task classification|ner` is told beyond the task's own fields: `TaskConfig`, the loop, data and
output settings both text tasks share (a field per flag; QA's FinetuneConfig predates it and keeps its own), checked
once in `check`, fingerprinted for --resume and turned into the engine's LoopSettings."""
from __future__ import annotations

import dataclasses
from typing import Any

from ..cliargs import BF16_CHOICES
from ..errors import ConfigError

MAX_GRAD_NORM = 1.0  # BERT's fine-tuning recipe clips gradients at norm 1
LOG_EVERY = 20  # optimizer steps per log.jsonl row
# What a resumed run may change without changing its trajectory.
NOT_FINGERPRINTED = {"output", "resume", "overwrite", "progress", "save_steps", "compile"}


@dataclasses.dataclass
class TaskConfig:
    model: str  # an encoder checkpoint dir (MLM, QA or a task model) or hub id
    output: str
    train: list[str] = dataclasses.field(default_factory=list)
    dev: list[str] = dataclasses.field(default_factory=list)  # scored after every epoch: the best epoch is kept
    eval: list[str] = dataclasses.field(default_factory=list)  # scored once, at the end
    hold_out: list[str] = dataclasses.field(default_factory=list)  # guarded against leakage, never scored
    preprocessing: str | None = None  # required for checkpoints without arabert_pipeline.json
    epochs: int = 4
    lr: float = 3e-5
    batch_size: int = 32
    grad_accum: int = 1
    max_steps: int | None = None
    time_budget: float | None = None  # minutes
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    layer_lr_decay: float = 1.0
    patience: int = 0
    max_seq_length: int = 384  # tokens per example (NER: per piece of a longer sentence); QA's default too
    seed: int = 42
    bf16: str = "auto"
    compile: bool = False  # torch.compile the training steps (a GPU's choice; the weights saved are the plain model's)
    save_steps: int = 0
    resume: str | None = None
    overwrite: bool = False
    allow_leakage: bool = False
    drop_leaking_train: bool = False
    progress: bool = True

    def check(self) -> None:
        if not self.train:
            raise ConfigError("no training data: pass --train FILE_OR_NAME...")
        check_training_settings(self)
        if self.max_seq_length < 8:
            raise ConfigError(f"max_seq_length must be ≥ 8, got {self.max_seq_length}")

    def leakage_policy(self) -> str:
        from .sets import leakage_policy

        return leakage_policy(allow_leakage=self.allow_leakage, drop_leaking_train=self.drop_leaking_train)

    def fingerprint(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in NOT_FINGERPRINTED}

    def config_differences(self, stored: dict[str, Any]) -> list[str]:
        current = self.fingerprint()
        budgets = current.get("time_budget") is not None and stored.get("time_budget") is not None
        return sorted(k for k in current.keys() | stored.keys() if stored.get(k) != current.get(k)
                      and not (budgets and k == "time_budget"))

    def loop_settings(self):
        from ..training.state import LoopSettings

        return LoopSettings(
            output=self.output, lr=self.lr, warmup=self.warmup_ratio, seed=self.seed, weight_decay=self.weight_decay,
            layer_lr_decay=self.layer_lr_decay, bf16=self.bf16, grad_accum=self.grad_accum,
            max_grad_norm=MAX_GRAD_NORM, time_budget=self.time_budget, log_every=LOG_EVERY,
            save_every=self.save_steps, keep_checkpoints=1, resume=self.resume, overwrite=self.overwrite,
            progress=self.progress, compile=self.compile,
        )


def check_training_settings(config: Any, positive: tuple[str, ...] = ()) -> None:
    """The checks every fine-tuning task's config shares (QA's and the text tasks'): bf16, the leakage policy, the
    run length, warm-up, layer decay and patience; `positive`: the task's own fields that must be ≥ 1 too."""
    if config.bf16 not in BF16_CHOICES:
        raise ConfigError(f"bf16={config.bf16!r}: use one of {', '.join(BF16_CHOICES)}")
    config.leakage_policy()
    for name in ("epochs", "batch_size", "grad_accum", *positive):
        if getattr(config, name) < 1:
            raise ConfigError(f"{name} must be ≥ 1, got {getattr(config, name)}")
    if config.max_steps is not None and config.max_steps < 1:
        raise ConfigError(f"max_steps must be ≥ 1, got {config.max_steps}")
    if not 0 <= config.warmup_ratio < 1:
        raise ConfigError(f"warmup_ratio must be in [0, 1), got {config.warmup_ratio}")
    if not 0 < config.layer_lr_decay <= 1:
        raise ConfigError(f"layer_lr_decay must be in (0, 1], got {config.layer_lr_decay}")
    if config.patience < 0:
        raise ConfigError(f"patience must be ≥ 0, got {config.patience}")
    if config.patience and not config.dev:
        raise ConfigError("patience needs dev sets to watch (--dev)")
    # Checked before training: at the end, the second set's predictions and scores would replace the first's.
    named: dict[str, str] = {}
    for name in config.eval:
        stem = eval_file_stem(name)
        if stem in named:
            raise ConfigError(f"--eval {name} given twice" if named[stem] == name else
                              f"--eval {named[stem]} and {name} would both be written as eval/{stem}.*: give one of "
                              "them under another file name")
        named[stem] = name


def eval_file_stem(name: str) -> str:
    """The name an --eval set's predictions and scores are written under in OUT/eval/: a registered set's name, else
    the file's stem, with what a file name should not hold replaced."""
    from pathlib import Path

    stem = Path(name).stem if ("/" in name or "." in name) else name
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in stem) or "set"


def local_inputs(config: Any) -> list[str]:
    """The paths a fine-tuning run reads (its model and data sets that are files here, not hub ids or registry
    names): its output may not be, nor contain, any of them."""
    from pathlib import Path

    return [source for source in [config.model, *config.train, *config.dev, *config.eval, *config.hold_out]
            if Path(source).exists()]

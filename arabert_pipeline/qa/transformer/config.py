"""What `arabert-pipeline finetune` is told: `FinetuneConfig` (a field per flag, its default the flag's) and the named
protocols. Imports nothing heavy: the CLI reads its defaults from here."""
from __future__ import annotations

import dataclasses
from typing import Any

from ...errors import ConfigError
from ...finetuning.config import check_training_settings
from .settings import QASettings, check_decoding_setting

# Named train/evaluation presets. "paper" is the AraBERT paper's ARCD protocol; "offline" is what runs without
# Arabic-SQuAD (it is not distributed with the shared data).
# "offline-dev" keeps a dev split out of training (ARCD-train's arcd-dev articles and MLQA-ar dev) to choose on.
PROTOCOLS = {
    "paper": {"train": ["arabic-squad", "arcd-train"], "eval": ["arcd-test"]},
    "offline": {"train": ["arcd-train", "xquad-ar", "mlqa-ar-dev"], "eval": ["arcd-test", "tydiqa-goldp-ar-dev"]},
    "offline-dev": {"train": ["arcd-train-rest", "xquad-ar"], "dev": ["arcd-dev", "mlqa-ar-dev"],
                    "eval": ["arcd-test", "tydiqa-goldp-ar-dev"]},
}
# Settings added after checkpoints were first written (issue 41): an older checkpoint lacks them.
ADDED_SETTINGS = ("grad_accum", "max_steps", "time_budget")
MAX_GRAD_NORM = 1.0  # BERT's fine-tuning recipe clips gradients at norm 1
LOG_EVERY = 20  # optimizer steps per log.jsonl row


@dataclasses.dataclass
class FinetuneConfig:
    """Fields mirror `arabert-pipeline finetune` flags; defaults are the AraBERT paper's for base-size models."""

    model: str  # MLM or QA checkpoint dir, or hub id
    output: str
    train: list[str] = dataclasses.field(default_factory=list)  # SQuAD files or registry names
    dev: list[str] = dataclasses.field(default_factory=list)  # scored after every epoch; the best epoch is kept
    eval: list[str] = dataclasses.field(default_factory=list)  # scored once, at the end
    # Kept out of training by the leakage guard but never predicted or scored: the test sets while choosing on dev,
    # so that the model chosen there is already the one to report on test.
    hold_out: list[str] = dataclasses.field(default_factory=list)
    protocol: str | None = None  # a PROTOCOLS name: fills train, dev and eval
    preprocessing: str | None = None  # required for checkpoints without arabert_pipeline.json
    epochs: int = 4
    lr: float = 3e-5
    batch_size: int = 32  # windows per micro-batch per process; a step reads batch_size × grad_accum × processes
    grad_accum: int = 1  # micro-batches per optimizer step: the paper's 32 as 8 × 4 where 32 windows do not fit
    max_steps: int | None = None  # stop the schedule (warm-up and decay included) after this many optimizer steps
    time_budget: float | None = None  # minutes: the schedule is fitted to them from the measured speed (engine)
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    layer_lr_decay: float = 1.0  # lr × decay^(layers above): ELECTRA's 0.8 keeps lower layers closer to pretraining
    patience: int = 0  # with dev sets: stop after this many epochs without a better dev F1 (0: run every epoch)
    question_overlap: bool = False  # mark context words shared with the question (token type 2; overlap.py)
    negatives: bool = False  # + each question with a paragraph of its article lacking the answer, labelled [CLS]
    # Decoding settings (QASettings); None: chosen on the dev sets, else the plain decoder's (0, False, "max-score").
    sentence_prior: float | None = None  # weight of the prior on the sentence sharing the question's words
    within_sentence: bool | None = None  # answers never cross a sentence boundary
    decoding: str | None = None  # "max-score" or "expected-f1"
    # Windows (QASettings' fields, and its defaults).
    max_seq_length: int = QASettings.max_seq_length
    doc_stride: int = QASettings.doc_stride
    max_question_tokens: int = QASettings.max_question_tokens
    max_answer_tokens: int = QASettings.max_answer_tokens
    seed: int = 42
    bf16: str = "auto"  # auto: on a bf16 GPU, or a CPU where bf16 measures faster (training.optim.use_bf16)
    compile: bool = False  # torch.compile the training steps (a GPU's choice; the weights saved are the plain model's)
    save_steps: int = 0  # extra checkpoints every N optimizer steps (one is always written per epoch)
    resume: str | None = None  # "latest" (what --resume alone means) or a checkpoint directory
    overwrite: bool = False  # replace an earlier finetune output at `output`
    skip_misaligned: bool = False  # drop (counted, reported) training answers whose answer_start is wrong
    allow_leakage: bool = False  # train even if evaluation contexts/questions occur in training
    drop_leaking_train: bool = False  # remove the training questions involved in a leak, then train
    download: bool = False  # fetch missing registered datasets from their upstream URL
    progress: bool = True

    def resolved(self) -> FinetuneConfig:
        """Protocol expanded into train/eval, options validated."""
        config = dataclasses.replace(self)
        if isinstance(config.resume, bool):  # resume=True from Python callers of earlier versions
            config.resume = "latest" if config.resume else None
        if config.protocol is not None:
            if config.protocol not in PROTOCOLS:
                raise ConfigError(f"unknown protocol {config.protocol!r}: use one of {', '.join(PROTOCOLS)}")
            if config.train or config.eval or config.dev:
                raise ConfigError("--protocol sets the training, dev and evaluation data: drop --train/--dev/--eval "
                                  "or --protocol")
            config.train = list(PROTOCOLS[config.protocol]["train"])
            config.dev = list(PROTOCOLS[config.protocol].get("dev", []))
            config.eval = list(PROTOCOLS[config.protocol]["eval"])
        if not config.train:
            raise ConfigError("no training data: pass --train FILE_OR_NAME... or --protocol paper|offline")
        check_training_settings(config, ("max_seq_length", "doc_stride", "max_question_tokens", "max_answer_tokens"))
        for name in ("sentence_prior", "decoding"):
            if getattr(config, name) is not None:
                check_decoding_setting(name, getattr(config, name))
        return config

    def leakage_policy(self) -> str:
        from ...finetuning.sets import leakage_policy

        return leakage_policy(allow_leakage=self.allow_leakage, drop_leaking_train=self.drop_leaking_train)

    def fingerprint(self) -> dict[str, Any]:
        """What a resumed run must share with the interrupted one (a time budget may change: the engine refits the
        schedule to the new one)."""
        skip = {"output", "resume", "overwrite", "progress", "download", "save_steps", "compile"}
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in skip}

    def loop_settings(self):
        from ...training.state import LoopSettings

        return LoopSettings(
            output=self.output, lr=self.lr, warmup=self.warmup_ratio, seed=self.seed, weight_decay=self.weight_decay,
            layer_lr_decay=self.layer_lr_decay, bf16=self.bf16, grad_accum=self.grad_accum,
            max_grad_norm=MAX_GRAD_NORM, time_budget=self.time_budget, log_every=LOG_EVERY,
            save_every=self.save_steps, keep_checkpoints=1, resume=self.resume, overwrite=self.overwrite,
            progress=self.progress, compile=self.compile,
        )

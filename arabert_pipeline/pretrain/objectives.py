"""Pretraining objectives: a registry of names → builders. The trainer knows nothing about any particular objective.

An objective is a `torch.nn.Module` built by `build(config: PretrainConfig, tokenizer) -> module`; it holds every
trainable parameter of the objective (e.g. a generator and a discriminator) and provides:

- `collator(examples: list[data.Example], rng: numpy.random.Generator) -> dict[str, torch.Tensor]`: packed
  sequences (`[CLS] ... [SEP]`, with word starts, special-token positions, NSP segments when asked) → one batch of
  CPU tensors. All randomness (masking, sampling) comes from `rng`, which the trainer seeds from
  (seed, epoch, batch index): masks are new every epoch and identical after a resume.
- `forward(batch) -> dict[str, torch.Tensor]`: "loss" (differentiable, a mean over the micro-batch) plus any scalar
  metrics, detached (e.g. "mlm_loss", "mlm_accuracy"). An optional "weight" entry (e.g. the number of masked
  tokens) weights the micro-batch when held-out metrics are averaged.
- `export(directory)`: `save_pretrained` the Hugging Face model users get (e.g. a `BertForMaskedLM`, or an
  ELECTRA discriminator with shared embeddings folded in). The trainer adds the tokenizer files and
  `arabert_pipeline.json`; checkpoints for `--resume` store `state_dict()` of the whole module instead.

The trainer gives it the optimizer (AdamW over all parameters, no weight decay on biases and normalisation weights,
i.e. parameters with fewer than 2 dimensions), gradient accumulation, clipping, mixed precision, DDP, checkpoints
and logging.

To add an objective, e.g. ELECTRA:
1. write `pretrain/electra.py` with `build(config, tokenizer)` returning such a module;
2. add `"electra": "arabert_pipeline.pretrain.electra"` to `OBJECTIVES` in config.py;
3. add its options as fields of `PretrainConfig` (config.py, named after the objective, e.g. `electra_*`) and as
   flags in cli.py; fields that change training are then checked automatically when a run is resumed.
`--init-from` directories are checked with `init_model_dir()` / `check_init_from()` here. The encoder an objective
builds is `config.architecture`'s (BERT, or DeBERTa: deberta.py; XLNet only with its own objective, "plm":
xlnet.py).
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .config import OBJECTIVES, PretrainConfig

if TYPE_CHECKING:
    import torch


def build_objective(config: "PretrainConfig", tokenizer) -> "torch.nn.Module":
    module = importlib.import_module(OBJECTIVES[config.objective])
    objective = module.build(config, tokenizer)
    for name in ("collator", "export"):
        if not hasattr(objective, name):
            raise TypeError(f"objective {config.objective!r} has no {name!r}")
    return objective


def init_model_dir(path: str) -> Path:
    """The Hugging Face model directory behind `--init-from`: a model dir, or a checkpoint dir (its `model/`)."""
    directory = Path(path)
    for candidate in (directory, directory / "model"):
        if (candidate / "config.json").is_file():
            return candidate
    raise ConfigError(f"--init-from {path}: neither it nor {directory / 'model'} holds a config.json")


def check_vocabulary(model_dir: Path, model_vocab_size: int, tokenizer) -> None:
    """Refuse to continue training a model with a tokenizer that does not produce its token ids."""
    if model_vocab_size != len(tokenizer):
        raise ConfigError(
            f"vocabulary mismatch: the model in {model_dir} has {model_vocab_size} token embeddings but the "
            f"tokenizer has {len(tokenizer)} tokens; pretrain with the tokenizer the model was trained with"
        )
    if any((model_dir / name).is_file() for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json")):
        from transformers import AutoTokenizer

        theirs = AutoTokenizer.from_pretrained(model_dir).get_vocab()
        ours = tokenizer.get_vocab()
        if theirs != ours:
            differing = sorted(set(theirs.items()) ^ set(ours.items()), key=lambda item: item[1])[:3]
            raise ConfigError(
                f"vocabulary mismatch: the tokenizer saved with {model_dir} maps tokens to other ids than the "
                f"given tokenizer (e.g. {differing}); pretrain with the tokenizer the model was trained with"
            )


def check_init_from(config: "PretrainConfig", stored, directory: Path, tokenizer) -> None:
    """The `--init-from` model (its config `stored`) fits this run: the --architecture, the vocabulary, enough
    positions, and the --model-size if one is given."""
    from .config import ARCHITECTURES, size_kwargs

    if stored.model_type not in ARCHITECTURES[config.architecture]:
        hint = next((f"; add --architecture {name}" for name, types in ARCHITECTURES.items()
                     if stored.model_type in types), "")
        raise ConfigError(f"--init-from {directory}: a {stored.model_type!r} model, not a --architecture "
                          f"{config.architecture} encoder{hint}")
    check_vocabulary(directory, stored.vocab_size, tokenizer)
    # XLNet has no position table (relative positions only): its config reports -1, no limit.
    positions = getattr(stored, "max_position_embeddings", None)
    if positions is not None and 0 < positions < config.max_seq_length:
        raise ConfigError(f"--max-seq-length {config.max_seq_length} exceeds the {positions} "
                          f"positions of --init-from {directory}")
    if config.model_size is not None:
        expected = size_kwargs(config.architecture, config.model_size)
        found = {key: getattr(stored, key) for key in expected}
        if found != expected:
            raise ConfigError(f"--init-from {directory} is {found}, not the --model-size {config.model_size} "
                              f"architecture {expected}; leave out --model-size to keep the checkpoint's")

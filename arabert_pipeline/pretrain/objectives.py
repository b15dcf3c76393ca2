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
import logging
from pathlib import Path
from typing import TYPE_CHECKING, cast

from ..errors import ConfigError
from .config import OBJECTIVES, PretrainConfig

if TYPE_CHECKING:
    import numpy as np
    import torch

log = logging.getLogger(__name__)


def build_objective(config: PretrainConfig, tokenizer, preprocessing: str | None = None) -> torch.nn.Module:
    module = importlib.import_module(OBJECTIVES[config.objective])
    objective = module.build(config, tokenizer)
    if config.deberta_attention == "sdpa":  # for every objective's DeBERTa(s), --init-from's included
        from .deberta_attention import use_sdpa_attention

        use_sdpa_attention(objective)
    for name in ("collator", "export"):
        if not hasattr(objective, name):
            raise TypeError(f"objective {config.objective!r} has no {name!r}")
    if config.init_embeddings is not None:
        coverage = init_token_embeddings(objective, tokenizer, config.init_embeddings, preprocessing, config.seed)
        log.info("--init-embeddings: %d of %d tokens (%.1f%%) start from a static vector", coverage["tokens"],
                 coverage["vocabulary"], 100 * coverage["share"])
    return objective


def static_vector_rows(tokenizer, embeddings) -> dict[int, np.ndarray]:
    """Token id → the static vector of the word it is: whole-word tokens ("▁word" in SentencePiece, "word" but not
    "##piece" in WordPiece) found among the vectors' words; with fastText, every token's text gets a vector from its
    character n-grams (pieces inside words included, as fastText embeds any string). Special tokens get none."""
    special = set(tokenizer.all_special_ids)
    vocabulary = tokenizer.get_vocab()
    # SentencePiece marks the pieces that start a word ("▁"), WordPiece those that continue one ("##").
    sentencepiece = any(token.startswith("▁") for token in vocabulary)
    rows = {}
    for token, index in vocabulary.items():
        if index in special:
            continue
        word_start = token.startswith("▁") if sentencepiece else not token.startswith("##")
        text = token.lstrip("▁") if sentencepiece else token.removeprefix("##")
        if not text:
            continue
        if text in embeddings:
            if word_start or embeddings.ngrams is not None:
                rows[index] = embeddings.vectors[embeddings.index[text]]
        elif embeddings.ngrams is not None:
            rows[index] = embeddings.vector(text)
    return rows


def init_token_embeddings(objective, tokenizer, directory: str, preprocessing: str | None, seed: int) -> dict:
    """Start every input embedding table of the objective's models from the static vectors of `directory`.

    The vectors (d dimensions) go to the hidden size H through a fixed random matrix with orthonormal columns (inner
    products and norms kept: a word's neighbours stay its neighbours), centred and scaled so that their entries have
    the model's initialisation standard deviation (`initializer_range`, 0.02 for BERT and DeBERTa), the scale the rest
    of the network starts from. Tokens without a vector keep their random start. Returns the coverage."""
    import numpy as np
    import torch
    from transformers import PreTrainedModel

    from ..embeddings import Embeddings

    embeddings = Embeddings.load(directory)
    if preprocessing is not None and embeddings.preprocessing != preprocessing:
        raise ConfigError(f"--init-embeddings {directory}: its vectors were trained on {embeddings.preprocessing!r} "
                          f"text, the corpus and tokenizer are {preprocessing!r}: their words would not match")
    rows = static_vector_rows(tokenizer, embeddings)
    if not rows:
        raise ConfigError(f"--init-embeddings {directory}: none of the tokenizer's tokens is a word of these vectors")
    models = [m for m in objective.modules() if isinstance(m, PreTrainedModel)]
    tables = {id(m.get_input_embeddings()): (m.get_input_embeddings(), m.config) for m in models
              if m.get_input_embeddings() is not None}
    ids = np.fromiter(rows, dtype=np.int64)
    static = np.stack([rows[i] for i in ids]).astype(np.float64)
    for table, model_config in tables.values():
        weight = cast(torch.Tensor, table.weight)  # an nn.Embedding's; get_input_embeddings() is typed Module
        hidden = weight.shape[1]
        rng = np.random.default_rng(seed)
        if static.shape[1] <= hidden:
            projection, _ = np.linalg.qr(rng.standard_normal((hidden, static.shape[1])))  # orthonormal columns
        else:  # more dimensions than the model: keep the H directions of largest variance
            centred = static - static.mean(0)
            projection = np.linalg.svd(centred, full_matrices=False)[2][:hidden].T
        projected = (static - static.mean(0)) @ projection.T
        std = float(getattr(model_config, "initializer_range", 0.02))
        projected *= std / max(float(projected.std()), 1e-12)
        with torch.no_grad():
            weight[torch.from_numpy(ids)] = torch.from_numpy(projected).to(weight.dtype)
    vocabulary = len(tokenizer.get_vocab())
    return {"tokens": len(rows), "vocabulary": vocabulary, "share": len(rows) / vocabulary}


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


def check_init_from(config: PretrainConfig, stored, directory: Path, tokenizer) -> None:
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

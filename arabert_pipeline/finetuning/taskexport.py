"""`export-onnx` for the text tasks' model dirs, and the form their models are shipped in.

    arabert-pipeline export-onnx runs/sentiment                                   # runs/sentiment/model.onnx
    arabert-pipeline export-onnx runs/sentiment --standalone shipped/sentiment   # + the shippable copy (int8)
    arabert-pipeline export-onnx runs/ner --standalone shipped/ner --weight-bits 4  # 4-bit weights

`export_task_onnx(MODEL_DIR)` writes MODEL_DIR/model.onnx as QA's export does (export.py: the graph reads the weights
of model.safetensors, checked against torch): the logits of a classifier (batch × classes) or of a tagger (batch ×
tokens × tags). Before it, the tokenizer.json the ONNX backend reads with `tokenizers` alone must give transformers'
token ids and offsets on the same texts, since the two backends tokenize with those two libraries.

`standalone(MODEL_DIR, TARGET)` makes the shipped form: TARGET holds config.json, the tokenizer files,
arabert_pipeline.json and a model.onnx with quantized weights inside it, and no model.safetensors: one copy of the
weights. int8 (ONNX Runtime's dynamic quantization, the one `quantize=True` runs): a mini-encoder task model ~12 MB
instead of 23 MB of fp16 weights plus the graph; 4-bit (`weight_bits=4`, runtime.int4_model): an L6/H384-encoder task
model 15 MB instead of 33 MB in int8. It runs on ONNX Runtime only. A README.md (the model card) already in TARGET is
kept when TARGET is rebuilt with `overwrite`; anything else there that the export did not write is refused.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..artifacts.metadata import METADATA_FILE, read_metadata, write_metadata
from ..errors import ConfigError
from ..outputs import OutputKind, claim_output_dir
from .export import ONNX_FILE
from .runtime import STANDALONE_WEIGHTS

# The metadata "task" of each text task's model dir (classification/, ner/ and pipeline/ read these names).
TEXT_CLASSIFICATION, TOKEN_CLASSIFICATION = "text-classification", "token-classification"
# task → (transformers auto class, whether the logits are per token)
TASK_HEADS = {TEXT_CLASSIFICATION: ("AutoModelForSequenceClassification", False),
              TOKEN_CLASSIFICATION: ("AutoModelForTokenClassification", True)}
OUTPUT_NAMES = ("logits",)
SHIPPED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
CARD = "README.md"
# A classifier's lexical companion (classification/lexical.py), which its metadata records with "lexical" and
# "lexical_weight" (add-lexical): part of the model, so the shipped form carries it.
LEXICAL_DIR = "lexical"
LEXICAL_FIELDS = ("lexical", "lexical_weight")
# arabert_pipeline.json "weights" of a standalone dir (one of STANDALONE_WEIGHTS' values) is what marks TARGET as this
# export's, so that --overwrite never replaces a directory someone else wrote.
STANDALONE = OutputKind("export-onnx --standalone",
                        names=(*SHIPPED_FILES, ONNX_FILE, METADATA_FILE, CARD, LEXICAL_DIR),
                        markers=(), metadata_marker=("weights", tuple(STANDALONE_WEIGHTS.values())))
# Texts the two tokenizers must agree on: diacritics, tatweel, digits, Latin, punctuation and a Farasa-segmented form.
_PROBES = ("زار الرئيسُ مدينةَ بيروتَ يوم 12 مارس 2019 .", "الخدمــة ممتازة جدا!! 👍 Great service",
           "و+ س+ يكتب +ون +ها في ال+ مدرسة", "")


def task_of(model_dir: str | os.PathLike) -> str | None:
    if not Path(model_dir).is_dir():
        return None
    return read_metadata(model_dir, missing_ok=True).get("task")


def check_lexical_companion(directory: Path, metadata: dict) -> bool:
    """Whether `directory` holds a lexical companion; one its metadata records but that is missing (a copy of the
    dir's files only) is refused: the model would answer with the encoder alone, silently not as it was chosen."""
    if (directory / LEXICAL_DIR).is_dir():
        return True
    recorded = [name for name in LEXICAL_FIELDS if name in metadata]
    if recorded:
        raise ConfigError(f"{directory}: arabert_pipeline.json records a lexical companion ({', '.join(recorded)}) "
                          f"but there is no {LEXICAL_DIR}/ folder: copy it from the model dir add-lexical wrote")
    return False


def export_task_onnx(model_dir: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """MODEL_DIR/model.onnx of a classification or NER model dir; returns its path."""
    import torch
    import transformers

    from ..artifacts.models import load_pretrained_model
    from ..training.checkpoints import quiet_transformers
    from .export import check_model_dir, export_graph

    model_dir = Path(model_dir)
    task = task_of(model_dir)
    if task not in TASK_HEADS:
        raise ConfigError(f"{model_dir}: not a classification or NER model dir (its arabert_pipeline.json task is "
                          f"{task!r})")
    check_model_dir(model_dir, overwrite=overwrite)
    check_tokenizer(model_dir)
    auto, per_token = TASK_HEADS[task]
    with quiet_transformers():
        # Eager attention traces to plain MatMul / Softmax, which ONNX Runtime fuses; fp32, as the torch path runs.
        model, info = load_pretrained_model(getattr(transformers, auto), model_dir, dtype=torch.float32,
                                            attn_implementation="eager")
    if info.get("missing_keys") and any(not k.startswith(f"{model.base_model_prefix}.") for k in info["missing_keys"]):
        raise ConfigError(f"{model_dir} has no trained {task} head: fine-tune it before exporting")
    return export_graph(model_dir, model.eval(), OUTPUT_NAMES, overwrite=overwrite, per_token=per_token)


def check_tokenizer(model_dir: Path) -> None:
    """The ONNX backend tokenizes with `tokenizers` alone (TokenizerAdapter): its ids and offsets must be the ones the
    torch backend's transformers tokenizer gives."""
    from ..tokenizer.load import load_pretrained_tokenizer
    from .tokenizer_adapter import TokenizerAdapter

    texts = list(_PROBES)
    ours = TokenizerAdapter.from_directory(model_dir)(texts, truncation=True, max_length=64,
                                                      return_offsets_mapping=True)
    theirs = load_pretrained_tokenizer(model_dir)(texts, truncation=True, max_length=64, return_offsets_mapping=True)
    same_offsets = [list(map(tuple, o)) for o in ours["offset_mapping"]] == \
        [list(map(tuple, o)) for o in theirs["offset_mapping"]]
    if [list(i) for i in ours["input_ids"]] != [list(i) for i in theirs["input_ids"]] or not same_offsets:
        raise ConfigError(f"{model_dir}: tokenizer.json read by `tokenizers` alone does not tokenize as transformers "
                          "does here: save the tokenizer with "
                          "arabert_pipeline.tokenizer.export.save_pretrained_tokenizer, then export again")


def claim_standalone(model_dir: str | os.PathLike, target: str | os.PathLike, *, overwrite: bool = False) -> None:
    """Refuse, before any work, a TARGET that `standalone` may not write."""
    model_dir, target = Path(model_dir), Path(target)
    if not model_dir.is_dir():
        raise ConfigError(f"{model_dir}: no such model directory")
    if task_of(model_dir) not in TASK_HEADS:
        raise ConfigError(f"--standalone: {model_dir} is not a classification or NER model dir")
    if target.resolve() == model_dir.resolve() or model_dir.resolve() in target.resolve().parents \
            or target.resolve() in model_dir.resolve().parents:
        raise ConfigError(f"--standalone {target} is, holds or lies inside the model dir {model_dir}: choose a "
                          "directory outside it")
    claim_output_dir(target, STANDALONE, inputs=[model_dir], overwrite=overwrite)


def standalone_bits(model_dir: str | os.PathLike) -> int | None:
    """The weight bits of MODEL_DIR when it is itself in the shipped form (its metadata's "weights" says so), else
    None."""
    weights = read_metadata(model_dir, missing_ok=True).get("weights")
    return next((bits for bits, text in STANDALONE_WEIGHTS.items() if text == weights), None)


def standalone(model_dir: str | os.PathLike, target: str | os.PathLike, *, weight_bits: int | None = None,
               overwrite: bool = False) -> Path:
    """TARGET as described in the module docstring, from MODEL_DIR with a current model.onnx (export it first), with
    int8 (`weight_bits` 8, the default) or 4-bit (4) weights; returns TARGET/model.onnx. A MODEL_DIR in the shipped
    form already (a shipped task model, whose tokenizer is a sibling's) is copied as it is, its tokenizer written out
    and its model card with it: the one way to a copy that stands alone."""
    from ..artifacts.writes import atomic_directory
    from ..weights.shared_tokenizer import copy_tokenizer_json
    from .runtime import create_session, write_standalone

    model_dir, target = Path(model_dir), Path(target)
    claim_standalone(model_dir, target, overwrite=overwrite)
    metadata = read_metadata(model_dir)
    lexical = check_lexical_companion(model_dir, metadata)
    shipped_bits = standalone_bits(model_dir)
    if shipped_bits is not None and weight_bits not in (None, shipped_bits):
        raise ConfigError(f"{model_dir} is already in the shipped form, {shipped_bits}-bit weights inside its "
                          f"{ONNX_FILE}, which is copied as it is: leave out --weight-bits")
    create_session(model_dir)  # refuses a missing or stale model.onnx
    card = (target / CARD).read_bytes() if (target / CARD).is_file() else None
    if card is None and shipped_bits is not None and (model_dir / CARD).is_file():
        card = (model_dir / CARD).read_bytes()
    with atomic_directory(target) as staged:
        copy_tokenizer_json(model_dir, staged)  # a shared tokenizer is written out: the copy stands alone
        for name in SHIPPED_FILES:
            if name != "tokenizer.json" and (model_dir / name).is_file():
                shutil.copyfile(model_dir / name, staged / name)
        if card is not None:
            (staged / CARD).write_bytes(card)
        if lexical:
            shutil.copytree(model_dir / LEXICAL_DIR, staged / LEXICAL_DIR)
        if shipped_bits is None:
            write_standalone(model_dir, staged, weight_bits or 8)
            metadata["weights"] = STANDALONE_WEIGHTS[weight_bits or 8]
        else:
            shutil.copyfile(model_dir / ONNX_FILE, staged / ONNX_FILE)
        write_metadata(staged, **metadata)
    return target / ONNX_FILE

"""`arabert-pipeline export-onnx MODEL_DIR`: a QA model as `MODEL_DIR/model.onnx`, for answering without torch.

    arabert-pipeline export-onnx runs/qa/mini           # writes runs/qa/mini/model.onnx, checked against torch
    export_onnx("runs/qa/mini")                         # the same from Python

The graph is `AutoModelForQuestionAnswering`'s forward, `start_logits` and `end_logits` out, exported the way every
task's model is (finetuning/export.py: no second copy of the weights, a fingerprint of the files it reads, checked
against torch); windows, preprocessing and span decoding stay the package's (onnx.py runs them around the graph).
Before exporting, the tokenizer.json the ONNX backend reads with `tokenizers` alone must give transformers' windows.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...errors import ConfigError
from ...finetuning.export import check_model_dir, export_graph

OUTPUT_NAMES = ("start_logits", "end_logits")


def export_onnx(model_dir: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Export the QA model in `model_dir` to `model_dir/model.onnx`; returns its path."""
    check_model_dir(model_dir, overwrite=overwrite)
    _check_tokenizer(Path(model_dir))
    return export_graph(model_dir, _load_torch_model(Path(model_dir)), OUTPUT_NAMES, overwrite=overwrite)


def _check_tokenizer(model_dir: Path) -> None:
    """The ONNX backend tokenizes with `tokenizers` alone: its windows must be the ones transformers gives here."""
    import numpy as np

    from ...finetuning.tokenizer_adapter import TokenizerAdapter
    from ...tokenizer.load import load_pretrained_tokenizer
    from .features import build_windows

    questions = ["ما هي عاصمة الأردن ؟", "متى تأسست الرياض ؟"]
    contexts = ["عمان هي عاصمة المملكة الأردنية الهاشمية وأكبر مدنها . " * 20, "تأسست الرياض عام 1746 ."]
    settings: dict[str, Any] = dict(max_seq_length=64, doc_stride=16, max_question_tokens=16)
    ours = build_windows(TokenizerAdapter.from_directory(model_dir), questions, contexts, **settings)
    theirs = build_windows(load_pretrained_tokenizer(model_dir), questions, contexts, **settings)
    if (ours.input_ids != theirs.input_ids or ours.token_type_ids != theirs.token_type_ids
            or not np.array_equal(ours.offsets, theirs.offsets)):
        raise ConfigError(f"{model_dir}: tokenizer.json read by `tokenizers` alone does not give transformers' windows "
                          "(does tokenizer_config.json list the model_input_names?): save the tokenizer with "
                          "arabert_pipeline.tokenizer.export.save_pretrained_tokenizer, then export again")


def _load_torch_model(model_dir: Path):
    import torch
    from transformers import AutoModelForQuestionAnswering

    from ...artifacts.models import load_pretrained_model

    # Eager attention traces to plain MatMul/Softmax, which ONNX Runtime fuses; fp32, as the torch path computes.
    model, info = load_pretrained_model(AutoModelForQuestionAnswering, model_dir, dtype=torch.float32,
                                        attn_implementation="eager")
    if any("qa_outputs" in key for key in info.get("missing_keys", ())):
        raise ConfigError(f"{model_dir} has no trained question-answering head: fine-tune it before exporting")
    return model.eval()

"""Tokenizer stage: train SentencePiece unigram / WordPiece tokenizers, export them as Hugging Face fast tokenizers,
load them with the preprocessing they expect, and compare tokenizers (`report.py`).

Imports are lazy so that `arabert-pipeline --help` does not load sentencepiece, tokenizers or transformers.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["TokenizerConfig", "train_tokenizer", "load_tokenizer", "import_vocab", "tokenizer_report"]

if TYPE_CHECKING:
    from .export import import_vocab
    from .load import load_tokenizer
    from .report import tokenizer_report
    from .train import TokenizerConfig, train_tokenizer

_HOMES = {"TokenizerConfig": "train", "train_tokenizer": "train", "load_tokenizer": "load",
          "import_vocab": "export", "tokenizer_report": "report"}


def __getattr__(name: str):
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

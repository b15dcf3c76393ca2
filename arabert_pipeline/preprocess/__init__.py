"""Preprocessing stage: AraBERT normalization, Farasa segmentation, corpus files.

`Preprocessor(name)` is the entry point; `normalize.py` holds the v0.2 rules, `segment.py` the segmenter backends and
the `+` marking, `corpus.py` the streaming corpus runner behind `arabert-pipeline preprocess`.
"""
from __future__ import annotations

from .normalize import normalize
from .preprocessor import PREPROCESSING_NAMES, Preprocessor, segmenter_backend
from .segment import FarasaJarSegmenter, FarasaPySegmenter, Segmenter, desegment

__all__ = ["Preprocessor", "PREPROCESSING_NAMES", "segmenter_backend", "normalize", "desegment", "Segmenter",
           "FarasaPySegmenter", "FarasaJarSegmenter"]

"""arabert-pipeline: the AraBERT recipe end to end.

`import arabert_pipeline` stays fast: torch and Farasa load only when a stage needs them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["Preprocessor", "Pipeline", "Index", "ArabertPipelineError", "__version__"]

from .errors import ArabertPipelineError
from .version import __version__

if TYPE_CHECKING:
    from .pipeline import Pipeline
    from .preprocess import Preprocessor
    from .retrieval import Index


def __getattr__(name: str) -> type[Preprocessor] | type[Pipeline] | type[Index]:
    if name == "Preprocessor":
        from .preprocess import Preprocessor

        return Preprocessor
    if name == "Pipeline":
        from .pipeline import Pipeline

        return Pipeline
    if name == "Index":
        from .retrieval import Index

        return Index
    raise AttributeError(f"module 'arabert_pipeline' has no attribute {name!r}")

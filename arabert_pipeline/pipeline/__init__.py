"""The user-facing QA API: `Pipeline(model).answer(question, context)` (core.py) and `arabert-pipeline answer`
(cli.py)."""
from .core import BUNDLED_MODELS, DEFAULT_MODEL, Pipeline

__all__ = ["Pipeline", "BUNDLED_MODELS", "DEFAULT_MODEL"]

"""What one request may ask of the service and how its queue behaves; no heavy import, so that `arabert-pipeline
--help` can show the defaults without loading the service."""
from __future__ import annotations

import dataclasses
import math

from ..errors import ConfigError
from ..pipeline.core import MAX_CONTEXT_CHARS


@dataclasses.dataclass(frozen=True)
class ServeLimits:
    """What one request may ask and how the queue behaves (`arabert-pipeline serve --help` says each)."""

    max_batch_tokens: int = 4096
    # On a CPU a pair costs about the same alone or in a batch (the shipped model's ONNX Runtime time for 96 ARCD
    # questions: 0.55 s one by one, 0.51 s as one batch), so by default a batch takes only what queued while the
    # previous one ran: waiting for more would add latency and save next to nothing.
    max_wait_ms: float = 0.0
    max_queue: int = 256
    max_body_bytes: int | None = None  # None: room for a context of max_context_chars sent as \\uXXXX escapes
    max_context_chars: int = MAX_CONTEXT_CHARS
    max_top_k: int = 20
    max_pairs: int = 64

    def __post_init__(self):
        if self.max_body_bytes is None:
            object.__setattr__(self, "max_body_bytes", max(1 << 20, 6 * self.max_context_chars + (64 << 10)))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            flag = "--" + field.name.replace("_", "-")
            if field.name == "max_wait_ms":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                    raise ConfigError(f"{field.name} ({flag}) must be a finite number ≥ 0, got {value!r}")
            elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{field.name} ({flag}) must be a positive integer, got {value!r}")

"""What one request may ask of the service, how its queue behaves and how long a connection may take; no heavy import,
so that `arabert-pipeline --help` can show the defaults without loading the service."""
from __future__ import annotations

import dataclasses
import math

from ..errors import ConfigError
from ..pipeline.core import MAX_CONTEXT_CHARS, MAX_QUESTION_CHARS

# Characters per model token, measured with the shipped model on ARCD-test (question + context over all of its
# windows): median 3.9, 5th percentile 2.8. Dividing by 3 overestimates most pairs, so a batch stays within its bound.
CHARS_PER_TOKEN = 3
# What a pair costs beyond its tokens (preprocessing, decoding, Python per example), in tokens' worth of time: with the
# shipped model a 41-character pair took 6.4 ms and an ARCD pair (553 characters) 43 ms, ~16 tokens' worth apart from
# their lengths. It keeps a queue of a thousand tiny pairs from counting as almost free.
PAIR_OVERHEAD_TOKENS = 16


def estimate_tokens(question_chars: int, context_chars: int) -> int:
    """Model tokens of a pair, from its length: what a model batch is bounded by."""
    return (question_chars + context_chars) // CHARS_PER_TOKEN + 3  # [CLS] and two [SEP]


def pair_cost(question_chars: int, context_chars: int) -> int:
    """The work of answering a pair, in tokens: what the queue is bounded by and Retry-After is estimated from."""
    return estimate_tokens(question_chars, context_chars) + PAIR_OVERHEAD_TOKENS


_SECONDS = ("timeout_headers", "timeout_body", "timeout_keep_alive", "shutdown_timeout")


@dataclasses.dataclass(frozen=True)
class ServeLimits:
    """What one request may ask, how the queue behaves and how long a connection may take (`arabert-pipeline serve
    --help` says each)."""

    max_batch_tokens: int = 4096
    # On a CPU a pair costs about the same alone or in a batch (the shipped model's ONNX Runtime time for 96 ARCD
    # questions: 0.55 s one by one, 0.51 s as one batch), so by default a batch takes only what queued while the
    # previous one ran: waiting for more would add latency and save next to nothing.
    max_wait_ms: float = 0.0
    # The queue holds work, not pairs: 256 queued pairs of 100k-character contexts were hours of work. 100,000 tokens
    # are ~290 ARCD pairs or three of the longest contexts: seconds of work for the shipped model.
    max_queue_tokens: int = 100_000
    max_body_bytes: int | None = None  # None: room for a context of max_context_chars sent as \\uXXXX escapes
    max_context_chars: int = MAX_CONTEXT_CHARS
    max_question_chars: int = MAX_QUESTION_CHARS
    max_top_k: int = 20
    max_pairs: int = 64
    # Connections open at once (beyond: 503 and closed at once). Each is a file descriptor; `serve` raises the
    # open-files limit to fit them, or lowers this to fit the limit.
    max_connections: int = 512
    # Seconds a client has to send a request's head (from the connection, or from its first byte after a response),
    # its body (from the end of the head), and to start its next request on a kept-alive connection.
    timeout_headers: float = 10.0
    timeout_body: float = 30.0
    timeout_keep_alive: float = 5.0
    # After SIGTERM, queued requests are answered for this long; those still queued then get 503 + Retry-After.
    shutdown_timeout: float = 20.0

    def __post_init__(self):
        if self.max_body_bytes is None:
            object.__setattr__(self, "max_body_bytes", max(1 << 20, 6 * self.max_context_chars + (64 << 10)))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            flag = "--" + field.name.replace("_", "-")
            number = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
            if field.name == "max_wait_ms" or field.name == "shutdown_timeout":
                if not number or value < 0:
                    raise ConfigError(f"{field.name} ({flag}) must be a finite number ≥ 0, got {value!r}")
            elif field.name in _SECONDS:
                if not number or value <= 0:
                    raise ConfigError(f"{field.name} ({flag}) must be a finite number > 0, got {value!r}")
            elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{field.name} ({flag}) must be a positive integer, got {value!r}")
        largest = pair_cost(self.max_question_chars, self.max_context_chars)
        if self.max_queue_tokens < largest:
            raise ConfigError(f"max_queue_tokens (--max-queue-tokens) must be at least {largest:,}, the cost of one "
                              f"pair of the longest question and context allowed (--max-question-chars "
                              f"{self.max_question_chars:,}, --max-context-chars {self.max_context_chars:,}), "
                              f"got {self.max_queue_tokens:,}")

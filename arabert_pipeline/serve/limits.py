"""What one request may ask of the service, how its queue behaves and how long a connection may take; no heavy import,
so that `arabert-pipeline --help` can show the defaults without loading the service."""
from __future__ import annotations

import dataclasses
import math

from ..errors import ConfigError
from ..pipeline.core import MAX_CONTEXT_CHARS, MAX_QUESTION_CHARS

# What a pair costs beyond its tokens (preprocessing, decoding, Python per example), in tokens' worth of time: with the
# shipped model a 41-character pair took 6.4 ms and an ARCD pair (553 characters) 43 ms, ~16 tokens' worth apart from
# their lengths. It keeps a queue of a thousand tiny pairs from counting as almost free.
PAIR_OVERHEAD_TOKENS = 16


def pair_cost(tokens: int) -> int:
    """The work of answering a pair (or a task's text) the model reads as `tokens` tokens, counted with its own
    preprocessing and tokenizer (admission.py): what the queue is bounded by and Retry-After is estimated from. Counted,
    not estimated from characters: a text where every character is a token ("ب." repeated) cost 3-4.5x a
    characters / 3 estimate, so a queue bounded by the estimate held several times the work it promised."""
    return tokens + PAIR_OVERHEAD_TOKENS


# The most tokens one character of a request becomes, measured with the shipped preprocessing (arabertv02) and
# tokenizer (arabert-mini's Unigram, 2026-11-27): 2, the highest over every code point alone and every pair of the
# densest ones ("…" then "’", "—" or a Quranic mark, repeated: the preprocessing spaces each off, and each is "▁" and
# itself); "ب." and "a.b." make 1 and 1.5. A measure, not a proof: only the counting stage's budget rests on it, and
# admission itself is by the counted tokens. There is no fewest to refuse a length by before counting: spaces,
# diacritics, tatweel, HTML tags and "ﷺ" become no token and arabertv02 cuts a run of one letter to two ("ب" * 1,000
# is one token), so a text of any length may be a few tokens.
MAX_TOKENS_PER_CHAR = 2


def counting_budget(max_queue_tokens: int) -> int:
    """The characters that may wait to have their tokens counted (admission.py's CountingStage): as many as make a whole
    queue of work at the worst MAX_TOKENS_PER_CHAR, so that requests waiting for their count never hold more than the
    queue itself bounds, nor wait longer than counting that much takes. Past it a request is answered 503 at once; a
    request alone is counted whatever its length (the body and context limits bound it)."""
    return max(1, max_queue_tokens // MAX_TOKENS_PER_CHAR)


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
    # are ~290 ARCD pairs or five of the longest contexts of Arabic prose (~20,000 tokens each): seconds of work for
    # the shipped model. A pair that alone costs more is refused (413): a context of 100,000 characters that are
    # each a token is one.
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

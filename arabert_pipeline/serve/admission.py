"""The token-counting stage before admission (app.py's module docstring tells the whole service): a request's pairs are
counted with the served model's own preprocessing and tokenizer, in a thread of their own, and the characters waiting
to be counted are bounded (limits.counting_budget): past it, 503 + Retry-After at once. The queue then admits the
pairs by those tokens (limits.pair_cost)."""
from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor


class TokenCounter:
    """The tokens a model reads texts as (its preprocessing, then its tokenizer; no special tokens), with copies of
    its own: a fast tokenizer's truncation is state that each call sets, so a count sharing the model's tokenizer
    undid the truncation of windows being built in the model's thread (a 101-token window of a 96-token model)."""

    def __init__(self, preprocessing: str, tokenizer):
        from tokenizers import Tokenizer

        from ..preprocess import Preprocessor

        self.preprocessor = None if preprocessing == "none" else Preprocessor(preprocessing)
        backend = getattr(tokenizer, "backend_tokenizer", None) or tokenizer.backend  # transformers' or ours
        self.tokenizer = Tokenizer.from_str(backend.to_str())
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()

    def __call__(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        if self.preprocessor is not None:
            texts = self.preprocessor.preprocess_batch(texts)
        return [len(encoding.ids) for encoding in self.tokenizer.encode_batch(texts, add_special_tokens=False)]


class CountingFull(Exception):
    """A request's `chars` would pass the counting stage's budget; retry after `retry_after` seconds."""

    def __init__(self, chars: int, retry_after: int):
        super().__init__(chars, retry_after)
        self.chars, self.retry_after = chars, retry_after


# Characters counted per second before any count is timed: 100,000 characters that are each a token took ~1 s.
COUNT_PACE_CHARS_PER_S = 100_000


class CountingStage:
    """Where requests wait to have their tokens counted, bounded by characters (limits.counting_budget): counting runs
    before admission, so an unbounded wait here let large requests pile up unrefused, their bodies in memory, with the
    requests behind them waiting instead of getting 503. Counts run one at a time in a thread of their own: off the
    event loop (~1 s for 100,000 characters that are each a token), and off the model's thread so that counting never
    waits for a batch."""

    def __init__(self, max_chars: int):
        self.max_chars = max_chars
        self.pending = 0  # characters submitted and not yet counted (or dropped), the one being counted included
        self.pace = float(COUNT_PACE_CHARS_PER_S)
        self._lock = threading.Lock()  # pending is released from the executor's thread
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="arabert-serve-count")

    async def tokens(self, count: Callable[[list[tuple[str, str]]], list[int]], pairs: list[tuple[str, str]],
                     chars: int | None = None) -> list[int]:
        """count(pairs) (an Answerer's `tokens`, say) in the counting thread; CountingFull (Retry-After: the time the
        characters already waiting take to count at the recent pace) if they would pass the budget. A request finding
        none waiting is always taken, or one longer than the budget could never be counted. `chars`: the characters
        counted, when they are not the pairs' own (a collection question's passages, found in this thread: a bound on
        them, which does not time the pace)."""
        timed = chars is None
        if chars is None:
            chars = sum(len(question) + len(text) for question, text in pairs)
        with self._lock:
            if self.pending and self.pending + chars > self.max_chars:
                raise CountingFull(chars, max(1, math.ceil(self.pending / self.pace)))
            self.pending += chars

        def run():
            started = time.perf_counter()
            found = count(pairs)
            elapsed = time.perf_counter() - started
            if timed and chars >= 1000 and elapsed > 0:  # short counts time mostly overhead
                self.pace = chars / elapsed
            return found

        def release(_):
            with self._lock:
                self.pending -= chars

        # Released when the count ends or is cancelled before it starts, never when only its waiter goes (a client
        # that hangs up leaves the count running): pending is the counting thread's real backlog.
        future = self._executor.submit(run)
        future.add_done_callback(release)
        return await asyncio.wrap_future(future)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

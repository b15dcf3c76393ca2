"""The answer service's dynamic batcher: one queue of pairs bounded by their cost in tokens (limits.pair_cost), full
at `max_queue_tokens` (a 503 + Retry-After at the recent pace), and one worker that takes what has arrived, up to
`max_batch_tokens`, waiting at most `max_wait_ms` after the oldest pair, and answers each group of pairs with equal
`Options` in one call in a thread of its own (app.py's module docstring tells the whole service)."""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from .limits import ServeLimits, pair_cost
from .metrics import Metrics

log = logging.getLogger(__name__)

@dataclasses.dataclass(frozen=True)
class Options:
    top_k: int = 1
    allow_no_answer: bool = False
    decoding: str | None = None
    # None: a QA pair; "classify" / "tag": a text task's text (app.py's task routes); "ask": a question asked of the
    # collection (/v1/ask), its pair (question, "")
    task: str | None = None


class PairError(Exception):
    """Why the model could not answer one pair that passed the checks (e.g. nothing left after preprocessing)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


class ServiceStopped(Exception):
    """A pair still queued when the server stopped: its shutdown_timeout ran out before the worker reached it."""


class QueueFull(Exception):
    def __init__(self, retry_after: int):
        super().__init__(f"the queue is full; retry in {retry_after} s")
        self.retry_after = retry_after


class QueueClosed(Exception):
    """The server is stopping: it takes no more pairs."""


@dataclasses.dataclass(eq=False)
class _Job:
    question: str
    context: str
    options: Options
    tokens: int  # model tokens, counted (admission.py): what a batch is bounded by
    cost: int  # work, in tokens: what the queue is bounded by
    future: asyncio.Future
    queued: float


class Batcher:
    """One queue of pairs, bounded by their cost (limits.pair_cost), and one worker that answers them in batches (see
    the module docstring).

    `answer(options, pairs)` runs in the worker's thread and returns, per pair, a list of Answers or the PairError
    that pair alone raises.
    """

    def __init__(self, answer: Callable[[Options, list[tuple[str, str]]], list], limits: ServeLimits,
                 metrics: Metrics):
        self._answer = answer
        self.limits = limits
        self.metrics = metrics
        self._waiting: deque[_Job] = deque()
        self._batch: list[_Job] = []  # taken from the queue by the worker: being collected or answered
        self._running: tuple[_Job, ...] = ()  # in the model call under way
        self._arrived = asyncio.Event()
        # One thread: batches run one after the other, so the model is never called from two threads at once.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="arabert-serve-model")
        self._task: asyncio.Task | None = None
        self._closing: asyncio.TimerHandle | None = None
        self.queued_cost = 0  # of the pairs accepted and not answered (nor dropped) yet: what the bound counts
        # Seconds of model time per token of cost, a running estimate for Retry-After (10,000 tokens/s to start: the
        # shipped model's pace on one core).
        self._seconds_per_token = 1e-4

    @property
    def outstanding(self) -> int:
        """Pairs accepted and not answered yet."""
        return sum(not job.future.done() for job in self._waiting) + sum(not job.future.done() for job in self._batch)

    @property
    def running(self) -> int:
        return sum(not job.future.done() for job in self._running)

    @property
    def waiting(self) -> int:
        return self.outstanding - self.running

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._work(), name="arabert-serve-batcher")

    def close(self, seconds: float) -> None:
        """Shutdown has begun: take no more pairs, answer the queue for `seconds`, then fail what is still waiting
        (ServiceStopped: 503) so that every request is answered before the server's own deadline."""
        if self._closing is None:
            self._closing = asyncio.get_running_loop().call_later(seconds, self._fail_waiting)

    def _fail_waiting(self) -> None:
        running = set(map(id, self._running))
        for job in [*self._waiting, *self._batch]:
            if id(job) not in running and not job.future.done():
                job.future.set_exception(ServiceStopped())

    async def stop(self) -> None:
        """Cancel the worker; pairs still queued (only when the server stops without draining) fail."""
        if self._closing is not None:
            self._closing.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for job in [*self._waiting, *self._batch]:
            if not job.future.done():
                job.future.set_exception(ServiceStopped())
        self._waiting.clear()
        self._batch = []
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown)

    def submit(self, pairs: list[tuple[str, str]], options: Options, tokens: list[int],
               costs: list[int] | None = None) -> list[asyncio.Future]:
        """Queue the pairs (all or none), which the model reads as `tokens` tokens each, and return their futures;
        QueueFull when their cost does not fit, QueueClosed once shutdown has begun. `costs`: their work, when it is
        not pair_cost(tokens) (a collection question reads several passages: the cost of each)."""
        if self._closing is not None:
            raise QueueClosed()
        costs = [pair_cost(n) for n in tokens] if costs is None else costs
        if self.queued_cost + sum(costs) > self.limits.max_queue_tokens:
            self.metrics.rejected_full += len(pairs)
            raise QueueFull(self.retry_after(sum(costs)))
        loop = asyncio.get_running_loop()
        now = time.perf_counter()
        jobs = [_Job(q, c, options, n, cost, loop.create_future(), now)
                for (q, c), n, cost in zip(pairs, tokens, costs, strict=True)]
        for job in jobs:
            # Answered, failed or abandoned alike, a pair leaves the bound's count as soon as its future is done.
            job.future.add_done_callback(functools.partial(self._release, job.cost))
        self.queued_cost += sum(costs)
        self._waiting.extend(jobs)
        self._arrived.set()
        return [job.future for job in jobs]

    def _release(self, cost: int, future: asyncio.Future) -> None:
        self.queued_cost -= cost

    def abandon(self, futures: list[asyncio.Future]) -> None:
        """The client of these pairs hung up: those not yet in a model call are dropped before they are computed."""
        running = {id(job.future) for job in self._running}
        for future in futures:
            if not future.done():
                if id(future) not in running:
                    self.metrics.abandoned_pairs += 1
                future.cancel()

    def retry_after(self, cost: int) -> int:
        """Seconds until `cost` more tokens of work fit, at the recent pace: the excess over the bound must be
        answered first. At least 1."""
        excess = self.queued_cost + cost - self.limits.max_queue_tokens
        return max(1, math.ceil(excess * self._seconds_per_token))

    async def _collect(self) -> list[_Job]:
        """The next batch: FIFO, at least one pair, at most max_batch_tokens, complete once that bound is reached or
        max_wait_ms after its oldest pair arrived."""
        batch, tokens = self._batch, 0
        max_wait = self.limits.max_wait_ms / 1000
        while True:
            while self._waiting:
                job = self._waiting[0]
                if job.future.done():  # its client hung up, or the server is stopping
                    self._waiting.popleft()
                    continue
                if batch and tokens + job.tokens > self.limits.max_batch_tokens:
                    return batch
                batch.append(self._waiting.popleft())
                tokens += job.tokens
            timeout = None
            if batch:
                timeout = batch[0].queued + max_wait - time.perf_counter()
                if timeout <= 0:
                    return batch
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout)
            except asyncio.TimeoutError:
                return batch

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._batch = []
            batch = await self._collect()
            groups: dict[Options, list[_Job]] = {}
            for job in batch:
                if not job.future.done():
                    groups.setdefault(job.options, []).append(job)
            for options, jobs in groups.items():
                jobs = [job for job in jobs if not job.future.done()]  # hung up while the group before ran
                if not jobs:
                    continue
                self._running = tuple(jobs)
                started = time.perf_counter()
                try:
                    results = await loop.run_in_executor(self._executor, self._answer, options,
                                                         [(job.question, job.context) for job in jobs])
                except Exception as exc:  # a fault of the service, not of the input: these requests get a 500
                    log.exception("answering a batch of %d pairs failed", len(jobs))
                    results = [exc] * len(jobs)
                finally:
                    self._running = ()
                seconds = time.perf_counter() - started
                self.metrics.observe_batch(len(jobs), seconds)
                per_token = seconds / sum(job.cost for job in jobs)
                self._seconds_per_token = 0.8 * self._seconds_per_token + 0.2 * per_token
                for job, result in zip(jobs, results, strict=True):
                    if job.future.done():
                        continue
                    if isinstance(result, BaseException):
                        job.future.set_exception(result)
                    else:
                        job.future.set_result(result)

"""The HTTP answer service: `Pipeline.answer` behind Starlette, with dynamic batching.

    POST /v1/answer         {"question", "context", "top_k"?, "allow_no_answer"?, "decoding"?} → {"answers": [...]}
    POST /v1/answer/batch   {"pairs": [{"question", "context"}, ...], "top_k"?, ...} → {"results": [{"answers"}, ...]}
    GET  /health            200 once the model is loaded, 503 before (or if it failed to load)
    GET  /metrics           Prometheus text format
    GET  /openapi.json      the OpenAPI description
    GET  /                  a small Arabic page: paste a context, ask, see the answer highlighted

Every answer is a list of up to top_k {"text", "start", "end", "score"}, best first: `Pipeline.answer`'s Answers for
the same inputs ([] where it returns None or []), start/end in code points of the context as sent.

Requests are checked here, before they queue, with pipeline.core's rules (text_problem, check_top_k, the context
limit), so the service refuses what `Pipeline.answer` and `arabert-pipeline answer` refuse, with a 4xx JSON error
naming the field. Their pairs wait in one bounded queue (full: 503 + Retry-After). One worker drains it: it takes the
pairs that have arrived, up to `max_batch_tokens` (estimated from characters), waiting at most `max_wait_ms` after the
oldest one, and answers each group of pairs with equal options with one `Pipeline.answer` call in a thread of its own,
so that the event loop keeps reading requests while the model runs. A pair's answer does not depend on the pairs it is
batched with: windows are padded per run and masked (tested; on the ONNX backend the answers are bitwise those of a
lone call, on torch the spans are, and scores agree to float rounding).
"""
from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
import logging
import math
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..errors import InputError
from ..pipeline.core import check_top_k, text_problem
from ..qa.infer import DECODINGS
from .limits import ServeLimits
from .metrics import CONTENT_TYPE, Metrics

if TYPE_CHECKING:
    from ..pipeline.core import Pipeline

log = logging.getLogger(__name__)

PAGE_FILE = Path(__file__).with_name("page.html")
OPTION_FIELDS = ("top_k", "allow_no_answer", "decoding")
PAIR_FIELDS = ("question", "context")
ANSWER_FIELDS = (*PAIR_FIELDS, *OPTION_FIELDS)
BATCH_FIELDS = ("pairs", *OPTION_FIELDS)
ANSWER_PATH, BATCH_PATH = "/v1/answer", "/v1/answer/batch"
PATHS = (ANSWER_PATH, BATCH_PATH, "/health", "/metrics", "/openapi.json", "/")
# Characters per model token, measured with the shipped model on ARCD-test (question + context over all of its
# windows): median 3.9, 5th percentile 2.8. Dividing by 3 overestimates most pairs, so a batch stays within its bound.
CHARS_PER_TOKEN = 3


@dataclasses.dataclass(frozen=True)
class Options:
    top_k: int = 1
    allow_no_answer: bool = False
    decoding: str | None = None


class PairError(Exception):
    """Why the model could not answer one pair that passed the checks (e.g. nothing left after preprocessing)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


class RequestError(Exception):
    """A request the service refuses: the status, the field at fault and why, sent as JSON."""

    def __init__(self, status: int, field: str | None, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.field, self.message, self.headers = status, field, message, headers or {}


# Reading requests ----------------------------------------------------------------------------------------------------

async def read_json_object(request, max_bytes: int) -> dict[str, Any]:
    """The body as a JSON object; 413 past `max_bytes` (read no further than that), 400 for bytes that are not UTF-8
    JSON, 422 for JSON that is not an object."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise RequestError(413, "body", f"{int(declared):,} bytes, more than the {max_bytes:,} allowed")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise RequestError(413, "body", f"more than the {max_bytes:,} bytes allowed")
        chunks.append(chunk)
    data = b"".join(chunks)
    if not data.strip():
        raise RequestError(400, "body", "empty: expected a JSON object")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(400, "body", f"invalid UTF-8 at byte {exc.start + 1} ({exc.reason})") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(400, "body", f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:  # an integer of 5,000 digits; arrays nested 100,000 deep
        raise RequestError(400, "body", f"invalid JSON: {type(exc).__name__}: "
                                        f"{(str(exc).splitlines() or [''])[0][:200]}") from None
    if not isinstance(value, dict):
        raise RequestError(422, "body", f"expected a JSON object, got {_json_type(value)}")
    return value


def check_fields(record: dict, allowed: tuple[str, ...], prefix: str = "") -> None:
    for key in record:
        if key not in allowed:
            raise RequestError(422, f"{prefix}{key}", f"unknown field (expected {', '.join(allowed)})")


def parse_options(body: dict, limits: ServeLimits) -> Options:
    top_k = body.get("top_k", 1)
    try:
        check_top_k(top_k)
    except InputError:
        raise RequestError(422, "top_k", f"must be an integer from 1 to {limits.max_top_k}, got "
                                         f"{_json_preview(top_k)}") from None
    if top_k > limits.max_top_k:
        raise RequestError(422, "top_k", f"must be an integer from 1 to {limits.max_top_k}, got "
                                         f"{_json_preview(top_k)}")
    allow_no_answer = body.get("allow_no_answer", False)
    if not isinstance(allow_no_answer, bool):
        raise RequestError(422, "allow_no_answer", f"must be true or false, got {_json_preview(allow_no_answer)}")
    decoding = body.get("decoding")
    if decoding is not None and decoding not in DECODINGS:
        raise RequestError(422, "decoding", f"must be null or one of {', '.join(DECODINGS)}, got "
                                            f"{_json_preview(decoding)}")
    return Options(top_k, allow_no_answer, decoding)


def parse_pair(record: dict, limits: ServeLimits, prefix: str = "") -> tuple[str, str]:
    for field in PAIR_FIELDS:
        if field not in record:
            raise RequestError(422, f"{prefix}{field}", "missing")
        value = record[field]
        limit = limits.max_context_chars if field == "context" else None
        if limit is not None and isinstance(value, str) and len(value) > limit:
            raise RequestError(413, f"{prefix}{field}", f"is {len(value):,} characters long, more than the "
                                                        f"{limit:,} allowed (split the text)")
        problem = text_problem(value, limit)
        if problem is not None:
            if not isinstance(value, str):
                problem = f"must be a string, got {_json_type(value)}"
            raise RequestError(422, f"{prefix}{field}", problem)
    return record["question"], record["context"]


def _json_type(value: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _json_preview(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:40] + "…"


def estimate_tokens(question: str, context: str) -> int:
    return (len(question) + len(context)) // CHARS_PER_TOKEN + 3  # [CLS] and two [SEP]


# The batcher ---------------------------------------------------------------------------------------------------------

class ServiceStopped(Exception):
    """A pair still queued when the server stopped without draining (its graceful-shutdown time ran out)."""


class QueueFull(Exception):
    def __init__(self, retry_after: int):
        super().__init__(f"the queue is full; retry in {retry_after} s")
        self.retry_after = retry_after


@dataclasses.dataclass(eq=False)
class _Job:
    question: str
    context: str
    options: Options
    tokens: int
    future: asyncio.Future
    queued: float


class Batcher:
    """One bounded queue of pairs and one worker that answers them in batches (see the module docstring).

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
        self._seconds_per_pair = 0.01  # running estimate, for Retry-After

    @property
    def outstanding(self) -> int:
        """Pairs accepted and not answered yet: what the queue bound counts."""
        return len(self._waiting) + sum(not job.future.done() for job in self._batch)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return self.outstanding - self.running

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._work(), name="arabert-serve-batcher")

    async def stop(self) -> None:
        """Cancel the worker; pairs still queued (only when the server stops without draining) fail."""
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

    def submit(self, pairs: list[tuple[str, str]], options: Options) -> list[asyncio.Future]:
        """Queue the pairs (all or none) and return their futures; QueueFull when they do not fit."""
        if self.outstanding + len(pairs) > self.limits.max_queue:
            self.metrics.rejected_full += len(pairs)
            raise QueueFull(self.retry_after())
        loop = asyncio.get_running_loop()
        now = time.perf_counter()
        jobs = [_Job(q, c, options, estimate_tokens(q, c), loop.create_future(), now) for q, c in pairs]
        self._waiting.extend(jobs)
        self._arrived.set()
        return [job.future for job in jobs]

    def retry_after(self) -> int:
        """Seconds until the queue has drained, by the recent time per pair; 1 to 60."""
        return min(60, max(1, math.ceil(self.outstanding * self._seconds_per_pair)))

    async def _collect(self) -> list[_Job]:
        """The next batch: FIFO, at least one pair, at most max_batch_tokens, complete once that bound is reached or
        max_wait_ms after its oldest pair arrived."""
        batch, tokens = self._batch, 0
        max_wait = self.limits.max_wait_ms / 1000
        while True:
            while self._waiting:
                job = self._waiting[0]
                if job.future.done():  # its request was cancelled
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
                self._seconds_per_pair = 0.8 * self._seconds_per_pair + 0.2 * seconds / len(jobs)
                for job, result in zip(jobs, results):
                    if job.future.done():
                        continue
                    if isinstance(result, BaseException):
                        job.future.set_exception(result)
                    else:
                        job.future.set_result(result)


# Answering -----------------------------------------------------------------------------------------------------------

class Answerer:
    """The loaded Pipeline, one variant per `decoding`, called by the batcher's thread."""

    def __init__(self, pipeline: "Pipeline"):
        self.pipeline = pipeline
        own = pipeline.qa.settings.decoding
        self.variants = {None: pipeline}
        for name in DECODINGS:
            # As Pipeline(decoding=...) makes it, without a second model load: the model is shared.
            variant = pipeline
            if name != own:
                variant = copy.copy(pipeline)
                variant.qa = copy.copy(pipeline.qa)
                variant.qa.settings = dataclasses.replace(pipeline.qa.settings, decoding=name)
            self.variants[name] = variant

    def key(self, options: Options) -> Options:
        """Options that answer alike compare equal: decoding=None is the model's own decoder."""
        if options.decoding is None:
            return dataclasses.replace(options, decoding=self.pipeline.qa.settings.decoding)
        return options

    def __call__(self, options: Options, pairs: list[tuple[str, str]]) -> list:
        pipeline = self.variants[options.decoding]
        try:
            found = pipeline.answer([q for q, _ in pairs], [c for _, c in pairs], top_k=options.top_k,
                                    allow_no_answer=options.allow_no_answer)
        except InputError as exc:
            if len(pairs) == 1:
                return [self._named(exc, *pairs[0])]
            # One pair the model cannot read (e.g. nothing left after preprocessing) fails alone.
            return [self(options, [pair])[0] for pair in pairs]
        if options.top_k == 1:
            return [[] if answer is None else [answer] for answer in found]
        return [list(answers) for answers in found]

    def _named(self, exc: InputError, question: str, context: str) -> PairError:
        """The model's InputError names an example index; the client needs the field."""
        message = str(exc)
        if exc.field and message.startswith(f"{exc.field}: "):
            message = message[len(exc.field) + 2:]
        blank_question = not self.pipeline.qa.preprocessing.question(question).strip()
        return PairError("question" if blank_question else "context", message)


def answer_json(answers) -> dict[str, Any]:
    return {"answers": [{"text": a.text, "start": a.start, "end": a.end, "score": a.score} for a in answers]}


# The app -------------------------------------------------------------------------------------------------------------

class State:
    def __init__(self):
        self.answerer: Answerer | None = None
        self.load_error: BaseException | None = None
        self.load_seconds: float | None = None


def create_app(load: Callable[[], "Pipeline"], limits: ServeLimits = ServeLimits(), *,
               on_load_failure: Callable[[BaseException], None] | None = None, model_name: str = ""):
    """The Starlette app. `load()` builds the Pipeline; it runs in a thread once the server has started, so that
    /health answers (503) while the model loads. `on_load_failure(exc)` is called if it raises."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    from .openapi import openapi

    metrics = Metrics(PATHS, timed_paths=(ANSWER_PATH, BATCH_PATH))
    state = State()
    batcher: Batcher | None = None
    page = PAGE_FILE.read_text(encoding="utf-8")
    description = openapi(limits, DECODINGS)

    def not_ready() -> RequestError:
        if state.load_error is not None:
            return RequestError(503, None, "the model failed to load; see the server's log")
        return RequestError(503, None, "the model is loading", {"Retry-After": "1"})

    def error_response(status: int, field: str | None, message: str, headers=None) -> JSONResponse:
        return JSONResponse({"error": {"status": status, "field": field, "message": message}}, status, headers)

    async def wait_answers(futures: list[asyncio.Future], fields: list[str]) -> list:
        results = await asyncio.gather(*futures, return_exceptions=True)
        for result, prefix in zip(results, fields):
            if isinstance(result, PairError):
                raise RequestError(422, f"{prefix}{result.field}", result.message)
            if isinstance(result, ServiceStopped):
                raise RequestError(503, None, "the service stopped before answering")
            if isinstance(result, BaseException):
                raise result
        return results

    def enqueue(pairs: list[tuple[str, str]], options: Options) -> list[asyncio.Future]:
        try:
            return batcher.submit(pairs, state.answerer.key(options))
        except QueueFull as full:
            raise RequestError(503, None, f"busy: {len(pairs)} more pair(s) would overflow the queue of "
                                          f"{limits.max_queue}", {"Retry-After": str(full.retry_after)}) from None

    async def read_request(request: Request, fields) -> tuple[dict, Options]:
        """The checked JSON body of an answer request and its options (503 until the model is loaded)."""
        if state.answerer is None:
            raise not_ready()
        body = await read_json_object(request, limits.max_body_bytes)
        check_fields(body, fields)
        return body, parse_options(body, limits)

    async def answer(request: Request):
        body, options = await read_request(request, ANSWER_FIELDS)
        pair = parse_pair(body, limits)
        found, = await wait_answers(enqueue([pair], options), [""])
        return JSONResponse(answer_json(found))

    async def answer_batch(request: Request):
        body, options = await read_request(request, BATCH_FIELDS)
        if "pairs" not in body:
            raise RequestError(422, "pairs", "missing")
        items = body["pairs"]
        if not isinstance(items, list):
            raise RequestError(422, "pairs", f"must be an array of {{question, context}} objects, got "
                                             f"{_json_type(items)}")
        if not items:
            raise RequestError(422, "pairs", "empty: nothing to answer")
        most = min(limits.max_pairs, limits.max_queue)
        if len(items) > most:
            raise RequestError(413, "pairs", f"{len(items):,} pairs, more than the {most} allowed in one request")
        pairs = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise RequestError(422, f"pairs[{i}]", f"must be an object, got {_json_type(item)}")
            check_fields(item, PAIR_FIELDS, f"pairs[{i}].")
            pairs.append(parse_pair(item, limits, f"pairs[{i}]."))
        found = await wait_answers(enqueue(pairs, options), [f"pairs[{i}]." for i in range(len(pairs))])
        return JSONResponse({"results": [answer_json(answers) for answers in found]})

    async def health(request: Request):
        if state.answerer is not None:
            return JSONResponse({"status": "ready", "model": model_name, "backend": state.answerer.pipeline.backend,
                                 "load_seconds": state.load_seconds})
        status = "failed" if state.load_error is not None else "loading"
        headers = {"Retry-After": "1"} if status == "loading" else None
        return JSONResponse({"status": status, "model": model_name}, 503, headers)

    async def metrics_route(request: Request):
        text = metrics.render(waiting=batcher.waiting if batcher else 0, running=batcher.running if batcher else 0,
                              ready=state.answerer is not None)
        return Response(text, media_type=CONTENT_TYPE)

    async def openapi_route(request: Request):
        return JSONResponse(description)

    async def page_route(request: Request):
        return HTMLResponse(page)

    async def request_error(request: Request, exc: RequestError):
        return error_response(exc.status, exc.field, exc.message, exc.headers)

    async def http_error(request: Request, exc: HTTPException):
        return error_response(exc.status_code, None, exc.detail, exc.headers)

    async def internal_error(request: Request, exc: Exception):
        # Starlette logs the traceback after this response is sent; the client gets no part of it.
        return error_response(500, None, "internal error; see the server's log")

    async def load_model() -> None:
        nonlocal batcher
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        try:
            pipeline = await loop.run_in_executor(None, load)
            answerer = Answerer(pipeline)
        except Exception as exc:
            state.load_error = exc
            if on_load_failure is not None:
                on_load_failure(exc)
            else:
                log.error("the model failed to load: %s", exc)
            return
        batcher = Batcher(answerer, limits, metrics)
        batcher.start()
        state.load_seconds = round(time.perf_counter() - started, 3)
        state.answerer = answerer
        log.info("arabert-pipeline serve: %s loaded in %.1f s (%s backend); answering",
                 f"model {model_name}" if model_name else "the model", state.load_seconds, pipeline.backend)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        loading = asyncio.get_running_loop().create_task(load_model())
        try:
            yield
        finally:
            if not loading.done():
                loading.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await loading
            if batcher is not None:
                await batcher.stop()

    routes = [
        Route(ANSWER_PATH, answer, methods=["POST"]),
        Route(BATCH_PATH, answer_batch, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics_route, methods=["GET"]),
        Route("/openapi.json", openapi_route, methods=["GET"]),
        Route("/", page_route, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(MetricsMiddleware, metrics=metrics)],
                    exception_handlers={RequestError: request_error, HTTPException: http_error,
                                        Exception: internal_error})
    return app


class MetricsMiddleware:
    """Counts every HTTP response by route and status, and times it (pure ASGI: no per-request task or copy)."""

    def __init__(self, app, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = 500

        async def send_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self.metrics.observe_request(scope["path"], status, time.perf_counter() - started)

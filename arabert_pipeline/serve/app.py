"""The HTTP answer service: `Pipeline.answer` behind Starlette, with dynamic batching.

    POST /v1/answer         {"question", "context", "top_k"?, "allow_no_answer"?, "decoding"?} → {"answers": [...]}
    POST /v1/answer/batch   {"pairs": [{"question", "context"}, ...], "top_k"?, ...} → {"results": [{"answers"}, ...]}
    POST /v1/classify       {"text"} or {"texts": [...]}, "top_k"? → {"labels": [{"label", "score"}]} or
                            {"results": [{"labels"}, ...]}
    POST /v1/tag            {"text"} or {"texts": [...]} → {"entities": [{"entity_group", "score", "word", "start",
                            "end"}]} or {"results": [{"entities"}, ...]}
    POST /v1/ask            {"question", "top_k"?, "allow_no_answer"?, "decoding"?} → {"answers": [{"text", "start",
                            "end", "score", "document", "title", "passage": {"text", "start", "end"}}]}: the collection
                            (serve --index) asked
    GET  /health            200 once the model (and the index) is loaded, 503 before (or if it failed to load)
    GET  /metrics           Prometheus text format
    GET  /openapi.json      the OpenAPI description
    GET  /                  a small Arabic page: paste a context (or ask the collection), see the answer highlighted

Every answer is a list of up to top_k {"text", "start", "end", "score"}, best first: `Pipeline.answer`'s Answers for
the same inputs ([] where it returns None or []), start/end in code points of the context as sent; with the shipped
model, score is the probability that the answer is right (docs/answering.md), never higher down the list.
/v1/classify and /v1/tag answer with the text tasks' pipelines (pipeline/tasks.py: Hugging Face's text- and
token-classification shapes, start/end in code points of the text as sent), when serve was given their models.
/v1/ask answers as `Pipeline.answer(question, index=...)` does, each answer naming its document (id, title) with offsets
into that document's text and the passage it was read from, when serve was given an index (else 404).

Requests are checked before they queue (requests.py), with pipeline.core's rules (text_problem, check_top_k, the
question and context limits), so the service refuses what `Pipeline.answer` and `arabert-pipeline answer` refuse, with a
4xx JSON error naming the field. A request from another web page, or naming another Host, is refused first (policy.py,
middleware.py). Their pairs wait in one queue bounded by work (tokens, limits.pair_cost), not by pairs: full, it answers
503 + Retry-After (the time the excess takes at the recent pace). A pair's tokens are counted, before it queues, with
the served model's own preprocessing and tokenizer, in a thread of their own (admission.py), where the characters
waiting to be counted are bounded too (limits.counting_budget; past it, 503 + Retry-After at once). One worker drains
the queue (batcher.py; what it calls: answerers.py): it takes the pairs that have arrived, up to `max_batch_tokens`,
waiting at most `max_wait_ms` after the oldest one, and answers each group of pairs with equal options with one
`Pipeline.answer` call in a thread of its own, so that the event loop keeps reading requests while the model runs. A
pair's answer does not depend on the pairs it is batched with: windows are padded per run and masked (tested; on the
ONNX backend the answers are bitwise those of a lone call, on torch the spans are, and scores agree to float rounding).
A client that hangs up while its pairs wait takes them out of the queue; at shutdown, what is still queued after
`shutdown_timeout` is answered 503.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import logging
import re
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..qa.transformer.settings import DECODINGS
from .admission import CountingFull, CountingStage
from .answerers import ASK, Answerer, TaskAnswerer, answer_json, task_json
from .batcher import Batcher, Options, PairError, QueueClosed, QueueFull, ServiceStopped
from .limits import ServeLimits, counting_budget, pair_cost
from .metrics import CONTENT_TYPE, Metrics
from .middleware import AccessMiddleware, MetricsMiddleware
from .policy import AccessPolicy
from .requests import (
    ANSWER_FIELDS,
    ASK_FIELDS,
    BATCH_FIELDS,
    PAIR_FIELDS,
    TASK_FIELDS,
    ClientGone,
    RequestError,
    check_content_type,
    check_fields,
    error_body,
    json_type,
    parse_options,
    parse_pair,
    parse_question,
    parse_texts,
    read_json_object,
)

if TYPE_CHECKING:
    from ..pipeline.core import Pipeline
    from ..retrieval.index import Index

log = logging.getLogger(__name__)

PAGE_FILE = Path(__file__).with_name("page.html")
PAGE_COLLECTION_OFF, PAGE_COLLECTION_ON = '<body data-collection="off">', '<body data-collection="on">'
ANSWER_PATH, BATCH_PATH = "/v1/answer", "/v1/answer/batch"
# The text tasks' routes (issue 40): served when their model is loaded (create_app's `tasks`), else 404.
CLASSIFY_PATH, TAG_PATH = "/v1/classify", "/v1/tag"
TASK_PATHS = {"classify": CLASSIFY_PATH, "tag": TAG_PATH}
# The collection's route (issue 59): served when an index is loaded (create_app's `index`), else 404.
ASK_PATH = "/v1/ask"
PATHS = (ANSWER_PATH, BATCH_PATH, CLASSIFY_PATH, TAG_PATH, ASK_PATH, "/health", "/metrics", "/openapi.json", "/")
# Retry-After of the requests answered 503 because the server is stopping: a restarted server loads the shipped model
# in well under this.
STOPPING_RETRY_AFTER_S = 5


class State:
    def __init__(self):
        self.answerer: Answerer | None = None
        self.tasks: dict[str, TaskAnswerer] = {}
        self.load_error: BaseException | None = None
        self.load_seconds: float | None = None


def page_headers(page: str) -> dict[str, str]:
    """The page's Content-Security-Policy: its own inline script and style (by hash) and requests to its own origin,
    nothing else; never inside a frame (a page that frames it could make the user click)."""

    def hashes(tag: str) -> str:
        blocks = re.findall(rf"<{tag}\b[^>]*>(.*?)</{tag}>", page, flags=re.S)
        return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'" for b in blocks)

    policy = ["default-src 'none'", f"script-src {hashes('script')}", f"style-src {hashes('style')}",
              "connect-src 'self'", "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'"]
    return {"Content-Security-Policy": "; ".join(policy), "X-Frame-Options": "DENY"}


async def _hung_up(receive) -> None:
    """Returns when the client hangs up: once the body is read, the server's next message is http.disconnect."""
    while (await receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.05)  # another server might repeat empty body messages: never spin on them


def _in_daemon_thread(loop: asyncio.AbstractEventLoop, load: Callable[[], Any]) -> asyncio.Future:
    """load() in a daemon thread of its own, as a future of the loop. Not the loop's executor: its threads are joined
    when the process exits, so a SIGTERM during a load (a model, or an index whose every file Index.open checksums)
    stopped the server only once the load was done; a daemon thread ends with the process."""
    future = loop.create_future()

    def settle(outcome: Callable[[Any], None], value: Any) -> None:
        def apply() -> None:
            if not future.done():  # cancelled: the server stopped while loading
                outcome(value)

        with contextlib.suppress(RuntimeError):  # the loop closed while loading: nobody waits for it any more
            loop.call_soon_threadsafe(apply)

    def run() -> None:
        try:
            result = load()
        except Exception as exc:
            settle(future.set_exception, exc)
        else:
            settle(future.set_result, result)

    threading.Thread(target=run, name="arabert-serve-load", daemon=True).start()
    return future


def _log_analysis_mismatch(index: Index, pipeline: Pipeline) -> None:
    """Pipeline.answer warns on every question asked of an index built with another preprocessing than the model's
    (serve's command filters that warning out): said once, in the log, at startup instead."""
    from ..pipeline.core import warn_analysis_mismatch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_analysis_mismatch(index.analysis, pipeline.preprocessing)
    for warning in caught:
        log.warning("arabert-pipeline serve: %s", warning.message)


def create_app(load: Callable[[], Pipeline], limits: ServeLimits = ServeLimits(), *,
               policy: AccessPolicy | None = None, on_load_failure: Callable[[BaseException], None] | None = None,
               model_name: str = "", tasks: dict[str, Callable[[], Any]] | None = None,
               index: Callable[[], Index] | None = None):
    """The Starlette app. `load()` builds the Pipeline; it runs in a thread once the server has started, so that
    /health answers (503) while the model loads. `on_load_failure(exc)` is called if it raises. `policy`: the hosts
    and origins answered (default: loopback names and addresses, no other origin). `tasks`: "classify" and / or
    "tag" → a loader of that task's pipeline (loaded with the QA model), served at /v1/classify and /v1/tag with the
    QA routes' checks and limits; their texts wait in the same queue, bounded by the same tokens of work, and run on
    the same worker, so that one model runs at a time whatever the route. A task not given answers 404. `index`: a
    loader of the collection that /v1/ask asks (Index.open; loaded with the model, its failure the model's); without
    one, /v1/ask answers 404."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    from .openapi import openapi

    policy = policy if policy is not None else AccessPolicy.for_address()
    metrics = Metrics(PATHS, timed_paths=(ANSWER_PATH, BATCH_PATH, CLASSIFY_PATH, TAG_PATH, ASK_PATH))
    state = State()
    batcher: Batcher | None = None
    tasks = dict(tasks or {})
    unknown = sorted(set(tasks) - set(TASK_PATHS))
    if unknown:
        raise ValueError(f"unknown serve task(s) {', '.join(unknown)}: use {', '.join(TASK_PATHS)}")
    page = PAGE_FILE.read_text(encoding="utf-8")
    if index is not None:  # the page offers to ask the collection (its script reads the attribute)
        page = page.replace(PAGE_COLLECTION_OFF, PAGE_COLLECTION_ON, 1)
    page_security = page_headers(page)
    description = openapi(limits, DECODINGS, tuple(tasks), collection=index is not None)
    stopping = {"Retry-After": str(STOPPING_RETRY_AFTER_S)}
    counting = CountingStage(counting_budget(limits.max_queue_tokens))
    max_body_bytes = cast(int, limits.max_body_bytes)  # None only as ServeLimits' argument: __post_init__ fills it in

    def not_ready() -> RequestError:
        if state.load_error is not None:
            return RequestError(503, None, "the model failed to load; see the server's log")
        return RequestError(503, None, "the model is loading", {"Retry-After": "1"})

    def loaded() -> tuple[Answerer, Batcher]:
        """The model and its queue: both exist before anything queues (read_request answers 503 until then)."""
        if state.answerer is None or batcher is None:
            raise not_ready()
        return state.answerer, batcher

    def error_response(status: int, field: str | None, message: str, headers=None) -> JSONResponse:
        return JSONResponse(error_body(status, field, message), status, headers)

    async def wait_answers(request: Request, futures: list[asyncio.Future], fields: list[str]) -> list:
        """The answers of the pairs queued for this request; if its client hangs up first, its pairs are dropped."""
        _, queue = loaded()
        gathered = asyncio.gather(*futures, return_exceptions=True)
        hangup = asyncio.ensure_future(_hung_up(request.receive))
        racing: set[asyncio.Future[Any]] = {gathered, hangup}
        try:
            await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # cancelled: nobody will read these answers either
            queue.abandon(futures)
            raise
        finally:
            hangup.cancel()
        if not gathered.done():
            queue.abandon(futures)
            raise ClientGone()
        results = gathered.result()
        for result, prefix in zip(results, fields, strict=True):
            if isinstance(result, PairError):
                raise RequestError(422, f"{prefix}{result.field}", result.message)
            if isinstance(result, ServiceStopped):
                raise RequestError(503, None, "the server is stopping and could not answer in time; retry",
                                   stopping)
            if isinstance(result, BaseException):
                raise result
        return results

    async def count(count_tokens: Callable[[list[tuple[str, str]]], list[int]], pairs: list[tuple[str, str]],
                    chars: int | None = None) -> list[int]:
        """count_tokens(pairs) in the counting stage; 503 + Retry-After when it has no room for them now."""
        try:
            return await counting.tokens(count_tokens, pairs, chars)
        except CountingFull as full:
            raise RequestError(503, None, f"busy: {full.chars:,} more characters would overflow the "
                                          f"{counting.max_chars:,} waiting to have their tokens counted",
                               {"Retry-After": str(full.retry_after)}) from None

    async def enqueue(pairs: list[tuple[str, str]], options: Options, field: str) -> list[asyncio.Future]:
        """Queue the pairs once their tokens are counted (see admit)."""
        answerer, _ = loaded()
        counter = answerer if options.task is None else state.tasks[options.task]
        tokens = await count(counter.tokens, pairs)
        noun = "pairs" if options.task is None else "texts"
        return admit(pairs, options, field, tokens, [pair_cost(n) for n in tokens],
                     f"send fewer or shorter {noun} at a time")

    def admit(pairs: list[tuple[str, str]], options: Options, field: str, tokens: list[int], costs: list[int],
              advice: str) -> list[asyncio.Future]:
        """Queue the pairs, counted as `tokens` and costing `costs`: 413 (naming `field`, with `advice`) for more work
        than the whole queue holds, 503 + Retry-After for more than it has room for now."""
        answerer, queue = loaded()
        cost = sum(costs)
        if cost > limits.max_queue_tokens:
            raise RequestError(413, field, f"{cost:,} tokens of work, more than the queue's "
                                           f"{limits.max_queue_tokens:,}: {advice}")
        try:
            return queue.submit(pairs, answerer.key(options) if options.task in (None, ASK) else options, tokens,
                                costs)
        except QueueFull as full:
            raise RequestError(503, None, f"busy: {len(pairs)} more pair(s) would overflow the queue's "
                                          f"{limits.max_queue_tokens:,} tokens of work",
                               {"Retry-After": str(full.retry_after)}) from None
        except QueueClosed:
            raise RequestError(503, None, "the server is stopping; retry", stopping) from None

    async def read_request(request: Request, fields) -> tuple[dict, Options]:
        """The checked JSON body of an answer request and its options (503 until the model is loaded)."""
        check_content_type(request.headers)
        if state.answerer is None:
            raise not_ready()
        body = await read_json_object(request, max_body_bytes, limits.timeout_body)
        check_fields(body, fields)
        return body, parse_options(body, limits)

    async def answer(request: Request):
        body, options = await read_request(request, ANSWER_FIELDS)
        pair = parse_pair(body, limits)
        found, = await wait_answers(request, await enqueue([pair], options, "context"), [""])
        return JSONResponse(answer_json(found))

    async def answer_batch(request: Request):
        body, options = await read_request(request, BATCH_FIELDS)
        if "pairs" not in body:
            raise RequestError(422, "pairs", "missing")
        items = body["pairs"]
        if not isinstance(items, list):
            raise RequestError(422, "pairs", f"must be an array of {{question, context}} objects, got "
                                             f"{json_type(items)}")
        if not items:
            raise RequestError(422, "pairs", "empty: nothing to answer")
        if len(items) > limits.max_pairs:
            raise RequestError(413, "pairs", f"{len(items):,} pairs, more than the {limits.max_pairs} allowed in one "
                                             "request")
        pairs = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise RequestError(422, f"pairs[{i}]", f"must be an object, got {json_type(item)}")
            check_fields(item, PAIR_FIELDS, f"pairs[{i}].")
            pairs.append(parse_pair(item, limits, f"pairs[{i}]."))
        found = await wait_answers(request, await enqueue(pairs, options, "pairs"),
                                   [f"pairs[{i}]." for i in range(len(pairs))])
        return JSONResponse({"results": [answer_json(answers) for answers in found]})

    async def ask(request: Request):
        """The collection asked: the question's passages found and counted in the counting stage, then the question
        queued as one job costing its passages' pairs (what /v1/answer would charge for them), and answered in the
        batcher's worker by Pipeline.answer(questions, index=...) with the other questions of equal options.

        Through the same queue and worker as the pairs of /v1/answer, not an executor of its own: one model call runs
        at a time whatever the route, and the queue bounds every route's work in the same tokens. The question stays
        one job rather than one per passage, so that its answer is Pipeline's by construction (one choice across its
        passages, qa/transformer/passages.py); its passages are searched twice, to count them here and to read them
        in the worker, a search being milliseconds (docs/answering.md) against the reading of its passages."""
        if index is None:
            raise RequestError(404, None, "no collection is served: start serve with --index DIR (an index made by "
                                          "`arabert-pipeline index FILES -o DIR`)")
        body, options = await read_request(request, ASK_FIELDS)
        question = parse_question(body, limits)
        answerer, _ = loaded()
        assert answerer.index is not None
        pair = (question, "")
        # What the counting thread reads: the question once per passage and the passages, at most passage_chars each
        # (a bound, not a measure: the passages are found there).
        read = answerer.pipeline.qa.settings.passages_read
        tokens = await count(answerer.passage_tokens, [pair], read * (len(question) + answerer.index.passage_chars))
        cost = sum(pair_cost(n) for n in tokens) or pair_cost(0)  # no passage shares a term: still a job, answered []
        queued = admit([pair], dataclasses.replace(options, task=ASK), "question", [sum(tokens)], [cost],
                       f"the question is read with its {len(tokens)} best passages; shorten it, or ask the server's "
                       "operator to raise --max-queue-tokens")
        found, = await wait_answers(request, queued, [""])
        return JSONResponse({"answers": found})

    def task_route(name: str):
        async def route(request: Request):
            if name not in tasks:
                raise RequestError(404, None, f"no {name} model is served: start serve with one (serve --help: "
                                              f"--{name}-model)")
            body, options = await read_request(request, TASK_FIELDS[name])
            texts, fields = parse_texts(body, limits)
            options = dataclasses.replace(options, task=name)
            queued = await enqueue([("", text) for text in texts], options, "text" if "text" in body else "texts")
            found = await wait_answers(request, queued, fields)
            if "text" in body:
                return JSONResponse(task_json(name, found[0]))
            return JSONResponse({"results": [task_json(name, f) for f in found]})

        return route

    async def health(request: Request):
        if state.answerer is not None:
            collection = state.answerer.index
            return JSONResponse({"status": "ready", "model": model_name, "backend": state.answerer.pipeline.backend,
                                 "load_seconds": state.load_seconds,
                                 "tasks": {name: task.pipeline.source for name, task in state.tasks.items()},
                                 "index": None if collection is None else {
                                     "path": None if collection.path is None else str(collection.path),
                                     "documents": collection.documents, "passages": len(collection),
                                     "analysis": collection.analysis}})
        status = "failed" if state.load_error is not None else "loading"
        headers = {"Retry-After": "1"} if status == "loading" else None
        return JSONResponse({"status": status, "model": model_name}, 503, headers)

    async def metrics_route(request: Request):
        text = metrics.render(waiting=batcher.waiting if batcher else 0, running=batcher.running if batcher else 0,
                              queued_tokens=batcher.queued_cost if batcher else 0, ready=state.answerer is not None)
        return Response(text, media_type=CONTENT_TYPE)

    async def openapi_route(request: Request):
        return JSONResponse(description)

    async def page_route(request: Request):
        return HTMLResponse(page, headers=page_security)

    async def request_error(request: Request, exc: RequestError):
        return error_response(exc.status, exc.field, exc.message, exc.headers)

    async def http_error(request: Request, exc: HTTPException):
        return error_response(exc.status_code, None, exc.detail, exc.headers)

    async def client_gone(request: Request, exc: Exception):
        # Never sent (the connection is gone); MetricsMiddleware counts the request as a hang-up, not a status.
        return Response(status_code=499)

    async def internal_error(request: Request, exc: Exception):
        # Starlette logs the traceback after this response is sent; the client gets no part of it.
        return error_response(500, None, "internal error; see the server's log")

    async def load_model() -> None:
        nonlocal batcher
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        try:
            # The index first: it fails faster than a model loads (a directory that is not an index, a damaged file).
            collection = await _in_daemon_thread(loop, index) if index is not None else None
            pipeline = await _in_daemon_thread(loop, load)
            if collection is not None:
                _log_analysis_mismatch(collection, pipeline)
            answerer = Answerer(pipeline, collection)
            loaded = {name: TaskAnswerer(name, await _in_daemon_thread(loop, loader))
                      for name, loader in tasks.items()}
        except Exception as exc:
            state.load_error = exc
            if on_load_failure is not None:
                on_load_failure(exc)
            else:
                log.error("the model (or index) failed to load: %s", exc)
            return
        # One queue and one worker for every route: QA pairs, collection questions and task texts are bounded by the
        # same tokens of work.
        batcher = Batcher(lambda options, pairs: (answerer if options.task in (None, ASK) else loaded[options.task])(
            options, pairs), limits, metrics)
        batcher.start()
        state.tasks = loaded
        state.load_seconds = round(time.perf_counter() - started, 3)
        state.answerer = answerer
        log.info("arabert-pipeline serve: %s loaded in %.1f s (%s backend)%s%s; answering",
                 f"model {model_name}" if model_name else "the model", state.load_seconds, pipeline.backend,
                 "".join(f", {TASK_PATHS[name]} with {task.pipeline.source}" for name, task in loaded.items()),
                 "" if collection is None else f", {ASK_PATH} with {collection!r}")

    def begin_shutdown() -> None:
        """Called by the server (server.py) when shutdown begins, before it waits for the requests in flight."""
        if batcher is not None:
            batcher.close(limits.shutdown_timeout)

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
            counting.shutdown()

    routes = [
        Route(ANSWER_PATH, answer, methods=["POST"]),
        Route(BATCH_PATH, answer_batch, methods=["POST"]),
        Route(CLASSIFY_PATH, task_route("classify"), methods=["POST"]),
        Route(TAG_PATH, task_route("tag"), methods=["POST"]),
        Route(ASK_PATH, ask, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics_route, methods=["GET"]),
        Route("/openapi.json", openapi_route, methods=["GET"]),
        Route("/", page_route, methods=["GET"]),
    ]
    middleware = [Middleware(MetricsMiddleware, metrics=metrics), Middleware(AccessMiddleware, policy=policy)]
    if policy.origins:  # the allowed pages' preflights, and the headers that let them read the answers
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(policy.origins),
                                     allow_methods=["GET", "POST"], allow_headers=["Content-Type"]))
    # Typed loosely: Starlette's handler type takes any Exception, each of these the one it is registered for.
    handlers: dict[Any, Callable[..., Any]] = {RequestError: request_error, HTTPException: http_error,
                                               ClientGone: client_gone, ClientDisconnect: client_gone,
                                               Exception: internal_error}
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware, exception_handlers=handlers)
    app.state.begin_shutdown = begin_shutdown
    app.state.serve_limits = limits  # for build_server: the connections' limits and timeouts
    app.state.counting = counting  # for the tests: the characters waiting to be counted
    return app

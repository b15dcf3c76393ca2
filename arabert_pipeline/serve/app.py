"""The HTTP answer service: `Pipeline.answer` behind Starlette, with dynamic batching.

    POST /v1/answer         {"question", "context", "top_k"?, "allow_no_answer"?, "decoding"?} → {"answers": [...]}
    POST /v1/answer/batch   {"pairs": [{"question", "context"}, ...], "top_k"?, ...} → {"results": [{"answers"}, ...]}
    POST /v1/classify       {"text"} or {"texts": [...]}, "top_k"? → {"labels": [{"label", "score"}]} or
                            {"results": [{"labels"}, ...]}
    POST /v1/tag            {"text"} or {"texts": [...]} → {"entities": [{"entity_group", "score", "word", "start",
                            "end"}]} or {"results": [{"entities"}, ...]}
    GET  /health            200 once the model is loaded, 503 before (or if it failed to load)
    GET  /metrics           Prometheus text format
    GET  /openapi.json      the OpenAPI description
    GET  /                  a small Arabic page: paste a context, ask, see the answer highlighted

Every answer is a list of up to top_k {"text", "start", "end", "score"}, best first: `Pipeline.answer`'s Answers for
the same inputs ([] where it returns None or []), start/end in code points of the context as sent; with the shipped
model, score is the probability that the answer is right (docs/answering.md), never higher down the list.
/v1/classify and /v1/tag answer with the text tasks' pipelines (pipeline/tasks.py: Hugging Face's text- and
token-classification shapes, start/end in code points of the text as sent), when serve was given their models.

Requests are checked here, before they queue, with pipeline.core's rules (text_problem, check_top_k, the question and
context limits), so the service refuses what `Pipeline.answer` and `arabert-pipeline answer` refuse, with a 4xx JSON
error naming the field. A request from another web page, or naming another Host, is refused first (policy.py). Their
pairs wait in one queue bounded by work (tokens, limits.pair_cost), not by pairs: full, it answers 503 + Retry-After
(the time the excess takes at the recent pace). A pair's tokens are counted, before it queues, with the served model's
own preprocessing and tokenizer, in a thread of their own (`CountingStage`), where the characters waiting to be counted
are bounded too (limits.counting_budget; past it, 503 + Retry-After at once). One worker drains the queue (batcher.py):
it takes the pairs that have arrived, up to `max_batch_tokens`, waiting at most `max_wait_ms` after the oldest one, and
answers each group of pairs with equal options with one `Pipeline.answer` call in a thread of its own, so that the event
loop keeps reading requests while the model runs. A pair's answer does not depend on the pairs it is batched with:
windows are padded per run and masked (tested; on the ONNX backend the answers are bitwise those of a lone call, on
torch the spans are, and scores agree to float rounding). A client that hangs up while its pairs wait takes them out of
the queue; at shutdown, what is still queued after `shutdown_timeout` is answered 503.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import dataclasses
import hashlib
import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..errors import InputError
from ..pipeline.core import check_top_k, text_problem
from ..qa.transformer.settings import DECODINGS
from .batcher import Batcher, Options, PairError, QueueClosed, QueueFull, ServiceStopped
from .limits import ServeLimits, counting_budget, pair_cost
from .metrics import CONTENT_TYPE, Metrics
from .policy import AccessPolicy

if TYPE_CHECKING:
    from ..pipeline.core import Pipeline

log = logging.getLogger(__name__)

PAGE_FILE = Path(__file__).with_name("page.html")
OPTION_FIELDS = ("top_k", "allow_no_answer", "decoding")
PAIR_FIELDS = ("question", "context")
ANSWER_FIELDS = (*PAIR_FIELDS, *OPTION_FIELDS)
BATCH_FIELDS = ("pairs", *OPTION_FIELDS)
ANSWER_PATH, BATCH_PATH = "/v1/answer", "/v1/answer/batch"
# The text tasks' routes (issue 40): served when their model is loaded (create_app's `tasks`), else 404.
CLASSIFY_PATH, TAG_PATH = "/v1/classify", "/v1/tag"
TASK_PATHS = {"classify": CLASSIFY_PATH, "tag": TAG_PATH}
TASK_FIELDS = {"classify": ("text", "texts", "top_k"), "tag": ("text", "texts")}
PATHS = (ANSWER_PATH, BATCH_PATH, CLASSIFY_PATH, TAG_PATH, "/health", "/metrics", "/openapi.json", "/")
# Retry-After of the requests answered 503 because the server is stopping: a restarted server loads the shipped model
# in well under this.
STOPPING_RETRY_AFTER_S = 5


class RequestError(Exception):
    """A request the service refuses: the status, the field at fault and why, sent as JSON."""

    def __init__(self, status: int, field: str | None, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.field, self.message, self.headers = status, field, message, headers or {}


class ClientGone(Exception):
    """The client hung up before its answer was sent: nothing to answer, and no fault of the service."""


# A refusal sent before the body is read: the client may still be sending it, and reading it only to throw it away
# would hold the connection (and let a slow client hold it at will).
CLOSE = {"Connection": "close"}


# Reading requests ----------------------------------------------------------------------------------------------------

def check_content_type(headers) -> None:
    """415 unless the body is declared JSON: a web page can send text/plain or a form to another origin without a CORS
    preflight, but not application/json."""
    value = headers.get("content-type")
    media, _, parameters = (value or "").partition(";")
    charset = next((v.strip().strip('"').lower() for k, _, v in (p.partition("=") for p in parameters.split(";"))
                    if k.strip().lower() == "charset"), "utf-8")
    if media.strip().lower() != "application/json" or charset not in ("utf-8", "utf8"):
        got = "none" if value is None else repr(value[:100])
        raise RequestError(415, "Content-Type", f"must be application/json (UTF-8), got {got}", CLOSE)


async def read_json_object(request, max_bytes: int, timeout: float) -> dict[str, Any]:
    """The body as a JSON object; 413 past `max_bytes` (read no further than that), 408 if it has not all arrived
    `timeout` seconds after its reading began, 400 for bytes that are not UTF-8 JSON, 422 for JSON that is not an
    object; ClientGone if the client hangs up."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise RequestError(413, "body", f"{int(declared):,} bytes, more than the {max_bytes:,} allowed", CLOSE)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    chunks, size, more = [], 0, True
    while more:
        try:
            message = await asyncio.wait_for(request.receive(), max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            raise RequestError(408, "body", f"not received within {timeout:g} s ({size:,} bytes arrived)",
                               CLOSE) from None
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            raise RequestError(413, "body", f"more than the {max_bytes:,} bytes allowed", CLOSE)
        chunks.append(chunk)
        more = message.get("more_body", False)
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
        limit = limits.max_context_chars if field == "context" else limits.max_question_chars
        parse_text(record[field], limit, f"{prefix}{field}", field)
    return record["question"], record["context"]


def parse_text(value: object, limit: int, name: str, kind: str) -> str:
    """A question, a context or a task's text (`kind`) as pipeline.core's text_problem accepts it: 413 past `limit`
    characters, 422 for anything else it refuses, naming the field `name`."""
    if isinstance(value, str) and len(value) > limit:
        advice = "shorten it" if kind == "question" else "split the text"
        raise RequestError(413, name, f"is {len(value):,} characters long, more than the {limit:,} allowed ({advice})")
    if not isinstance(value, str):
        raise RequestError(422, name, f"must be a string, got {_json_type(value)}")
    problem = text_problem(value, limit, kind)
    if problem is not None:
        raise RequestError(422, name, problem)
    return value


def parse_texts(body: dict, limits: ServeLimits) -> tuple[list[str], list[str]]:
    """(texts, their field names) of a task request: {"text": str} or {"texts": [str, ...]}, the latter bounded as a
    batch's pairs are."""
    if ("text" in body) == ("texts" in body):
        raise RequestError(422, "texts" if "text" in body else "text",
                           "give text (a string) or texts (an array of strings), not both" if "text" in body else
                           "missing: give text (a string) or texts (an array of strings)")
    if "text" in body:
        return [parse_text(body["text"], limits.max_context_chars, "text", "text")], ["text"]
    items = body["texts"]
    if not isinstance(items, list):
        raise RequestError(422, "texts", f"must be an array of strings, got {_json_type(items)}")
    if not items:
        raise RequestError(422, "texts", "empty: nothing to answer")
    if len(items) > limits.max_pairs:
        raise RequestError(413, "texts", f"{len(items):,} texts, more than the {limits.max_pairs} allowed in one "
                                         "request")
    names = [f"texts[{i}]" for i in range(len(items))]
    return [parse_text(value, limits.max_context_chars, name, "text")
            for value, name in zip(items, names, strict=True)], names


def _json_type(value: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _json_preview(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:40] + "…"


# Answering -----------------------------------------------------------------------------------------------------------

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

    async def tokens(self, counter, pairs: list[tuple[str, str]]) -> list[int]:
        """counter.tokens(pairs) in the counting thread; CountingFull (Retry-After: the time the characters already
        waiting take to count at the recent pace) if they would pass the budget. A request finding none waiting is
        always taken, or one longer than the budget could never be counted."""
        chars = sum(len(question) + len(text) for question, text in pairs)
        with self._lock:
            if self.pending and self.pending + chars > self.max_chars:
                raise CountingFull(chars, max(1, math.ceil(self.pending / self.pace)))
            self.pending += chars

        def count():
            started = time.perf_counter()
            found = counter.tokens(pairs)
            elapsed = time.perf_counter() - started
            if chars >= 1000 and elapsed > 0:  # short counts time mostly overhead
                self.pace = chars / elapsed
            return found

        def release(_):
            with self._lock:
                self.pending -= chars

        # Released when the count ends or is cancelled before it starts, never when only its waiter goes (a client
        # that hangs up leaves the count running): pending is the counting thread's real backlog.
        future = self._executor.submit(count)
        future.add_done_callback(release)
        return await asyncio.wrap_future(future)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class Answerer:
    """The loaded Pipeline, one variant per `decoding`, called by the batcher's thread."""

    def __init__(self, pipeline: Pipeline):
        self.pipeline = pipeline
        self.count = TokenCounter(pipeline.preprocessing, pipeline.qa.tokenizer)
        own = pipeline.qa.settings.decoding
        self.variants: dict[str | None, Pipeline] = {None: pipeline}
        for name in DECODINGS:
            # As Pipeline(decoding=...) makes it, without a second model load: the model is shared.
            variant = pipeline
            if name != own:
                variant = copy.copy(pipeline)
                variant.qa = copy.copy(pipeline.qa)
                variant.qa.settings = dataclasses.replace(pipeline.qa.settings, decoding=name)
            self.variants[name] = variant

    def tokens(self, pairs: list[tuple[str, str]]) -> list[int]:
        """The tokens the model reads each pair as: its question's and context's, [CLS] and two [SEP]."""
        counts = self.count([text for pair in pairs for text in pair])
        return [counts[2 * i] + counts[2 * i + 1] + 3 for i in range(len(pairs))]

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
            if len(pairs) == 1:  # Pipeline.answer names the argument it cannot read: question[0] or context[0]
                field = (exc.field or "context").split("[")[0]
                return [PairError(field, str(exc).removeprefix(f"{exc.field}: "))]
            # One pair the model cannot read (e.g. nothing left after preprocessing) fails alone.
            return [self(options, [pair])[0] for pair in pairs]
        if options.top_k == 1:
            return [[] if answer is None else [answer] for answer in found]
        return [list(answers) for answers in found]


def answer_json(answers) -> dict[str, Any]:
    return {"answers": [{"text": a.text, "start": a.start, "end": a.end, "score": a.score} for a in answers]}


# The app -------------------------------------------------------------------------------------------------------------

class TaskAnswerer:
    """A text task's pipeline (pipeline/tasks.py) called by the batcher's thread, as Answerer is: its pairs are
    ("", text), its options' task "classify" or "tag"."""

    def __init__(self, name: str, pipeline):
        self.name, self.pipeline = name, pipeline
        self.count = TokenCounter(pipeline.preprocessing, pipeline.model.tokenizer)

    def tokens(self, pairs: list[tuple[str, str]]) -> list[int]:
        """The tokens the model reads each text as, with [CLS] and [SEP]."""
        return [n + 2 for n in self.count([text for _, text in pairs])]

    def __call__(self, options: Options, pairs: list[tuple[str, str]]) -> list:
        texts = [text for _, text in pairs]
        try:
            if self.name == "classify":
                # A list at every top_k: the labels of each text, best first.
                return [ranked[:options.top_k] for ranked in self.pipeline(texts, top_k=None)]
            return self.pipeline(texts)
        except InputError as exc:
            if len(pairs) == 1:  # the route names the field; the pipeline's name ("inputs[0]") is not the client's
                message = str(exc)
                return [PairError("", message[len(exc.field) + 2:] if exc.field and message.startswith(
                    f"{exc.field}: ") else message)]
            return [self(options, [pair])[0] for pair in pairs]


def task_json(name: str, found) -> dict[str, Any]:
    return {"labels": found} if name == "classify" else {"entities": found}


class State:
    def __init__(self):
        self.answerer: Answerer | None = None
        self.tasks: dict[str, TaskAnswerer] = {}
        self.load_error: BaseException | None = None
        self.load_seconds: float | None = None


def error_body(status: int, field: str | None, message: str) -> dict[str, Any]:
    return {"error": {"status": status, "field": field, "message": message}}


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


def create_app(load: Callable[[], Pipeline], limits: ServeLimits = ServeLimits(), *,
               policy: AccessPolicy | None = None, on_load_failure: Callable[[BaseException], None] | None = None,
               model_name: str = "", tasks: dict[str, Callable[[], Any]] | None = None):
    """The Starlette app. `load()` builds the Pipeline; it runs in a thread once the server has started, so that
    /health answers (503) while the model loads. `on_load_failure(exc)` is called if it raises. `policy`: the hosts
    and origins answered (default: loopback names and addresses, no other origin). `tasks`: "classify" and / or
    "tag" → a loader of that task's pipeline (loaded with the QA model), served at /v1/classify and /v1/tag with the
    QA routes' checks and limits; their texts wait in the same queue, bounded by the same tokens of work, and run on
    the same worker, so that one model runs at a time whatever the route. A task not given answers 404."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    from .openapi import openapi

    policy = policy if policy is not None else AccessPolicy.for_address()
    metrics = Metrics(PATHS, timed_paths=(ANSWER_PATH, BATCH_PATH, CLASSIFY_PATH, TAG_PATH))
    state = State()
    batcher: Batcher | None = None
    tasks = dict(tasks or {})
    unknown = sorted(set(tasks) - set(TASK_PATHS))
    if unknown:
        raise ValueError(f"unknown serve task(s) {', '.join(unknown)}: use {', '.join(TASK_PATHS)}")
    page = PAGE_FILE.read_text(encoding="utf-8")
    page_security = page_headers(page)
    description = openapi(limits, DECODINGS, tuple(tasks))
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

    async def enqueue(pairs: list[tuple[str, str]], options: Options, field: str) -> list[asyncio.Future]:
        """Queue the pairs once their tokens are counted: 413 (naming `field`) for more work than the whole queue
        holds, 503 + Retry-After for more than it, or the counting stage before it, has room for now."""
        answerer, queue = loaded()
        counter = answerer if options.task is None else state.tasks[options.task]
        try:
            tokens = await counting.tokens(counter, pairs)
        except CountingFull as full:
            raise RequestError(503, None, f"busy: {full.chars:,} more characters would overflow the "
                                          f"{counting.max_chars:,} waiting to have their tokens counted",
                               {"Retry-After": str(full.retry_after)}) from None
        cost = sum(pair_cost(n) for n in tokens)
        if cost > limits.max_queue_tokens:
            noun = "pairs" if options.task is None else "texts"
            raise RequestError(413, field, f"{cost:,} tokens of work, more than the queue's "
                                           f"{limits.max_queue_tokens:,}: send fewer or shorter {noun} at a time")
        try:
            return queue.submit(pairs, answerer.key(options) if options.task is None else options, tokens)
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
                                             f"{_json_type(items)}")
        if not items:
            raise RequestError(422, "pairs", "empty: nothing to answer")
        if len(items) > limits.max_pairs:
            raise RequestError(413, "pairs", f"{len(items):,} pairs, more than the {limits.max_pairs} allowed in one "
                                             "request")
        pairs = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise RequestError(422, f"pairs[{i}]", f"must be an object, got {_json_type(item)}")
            check_fields(item, PAIR_FIELDS, f"pairs[{i}].")
            pairs.append(parse_pair(item, limits, f"pairs[{i}]."))
        found = await wait_answers(request, await enqueue(pairs, options, "pairs"),
                                   [f"pairs[{i}]." for i in range(len(pairs))])
        return JSONResponse({"results": [answer_json(answers) for answers in found]})

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
            return JSONResponse({"status": "ready", "model": model_name, "backend": state.answerer.pipeline.backend,
                                 "load_seconds": state.load_seconds,
                                 "tasks": {name: task.pipeline.source for name, task in state.tasks.items()}})
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
            pipeline = await loop.run_in_executor(None, load)
            answerer = Answerer(pipeline)
            loaded = {name: TaskAnswerer(name, await loop.run_in_executor(None, loader))
                      for name, loader in tasks.items()}
        except Exception as exc:
            state.load_error = exc
            if on_load_failure is not None:
                on_load_failure(exc)
            else:
                log.error("the model failed to load: %s", exc)
            return
        # One queue and one worker for every route: QA pairs and task texts are bounded by the same tokens of work.
        batcher = Batcher(lambda options, pairs: (answerer if options.task is None else loaded[options.task])(
            options, pairs), limits, metrics)
        batcher.start()
        state.tasks = loaded
        state.load_seconds = round(time.perf_counter() - started, 3)
        state.answerer = answerer
        log.info("arabert-pipeline serve: %s loaded in %.1f s (%s backend)%s; answering",
                 f"model {model_name}" if model_name else "the model", state.load_seconds, pipeline.backend,
                 "".join(f", {TASK_PATHS[name]} with {task.pipeline.source}" for name, task in loaded.items()))

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


class MetricsMiddleware:
    """Counts every HTTP response by route and status, and times it (pure ASGI: no per-request task or copy). A
    request whose client hung up before its response began is counted as that, not by the status nobody received."""

    def __init__(self, app, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status, responded, hung_up = 500, False, False

        async def watch_receive():
            nonlocal hung_up
            message = await receive()
            if message["type"] == "http.disconnect" and not responded:
                hung_up = True
            return message

        async def send_status(message):
            nonlocal status, responded
            if message["type"] == "http.response.start":
                status, responded = message["status"], True
            await send(message)

        try:
            await self.app(scope, watch_receive, send_status)
        finally:
            if hung_up:
                self.metrics.observe_hangup(scope["path"])
            else:
                self.metrics.observe_request(scope["path"], status, time.perf_counter() - started)


class AccessMiddleware:
    """Refuses requests for another Host (400) or from another web page (403), as policy.py says, with the service's
    JSON errors; before anything reads the body."""

    def __init__(self, app, policy: AccessPolicy):
        from starlette.datastructures import Headers
        from starlette.responses import JSONResponse

        self.app, self.policy = app, policy
        self._headers, self._json = Headers, JSONResponse

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = self._headers(scope=scope)
        host = headers.get("host")
        problem = self.policy.host_problem(host)
        if problem is not None:
            status, field = 400, "Host"
        else:
            refusal = self.policy.cross_origin_problem(scope["method"], scope.get("scheme", "http"), host, headers)
            if refusal is None:
                return await self.app(scope, receive, send)
            status, (field, problem) = 403, refusal
        await self._json(error_body(status, field, problem), status, CLOSE)(scope, receive, send)

"""Reading the service's requests (app.py's routes): the JSON body, its fields and their checks, with pipeline.core's
rules, so that the service refuses what `Pipeline.answer` refuses; and the JSON error every refusal is sent as."""
from __future__ import annotations

import asyncio
import json
from typing import Any

from ..errors import InputError
from ..pipeline.core import check_top_k, text_problem
from ..qa.transformer.settings import DECODINGS
from .batcher import Options
from .limits import ServeLimits

OPTION_FIELDS = ("top_k", "allow_no_answer", "decoding")
PAIR_FIELDS = ("question", "context")
ANSWER_FIELDS = (*PAIR_FIELDS, *OPTION_FIELDS)
BATCH_FIELDS = ("pairs", *OPTION_FIELDS)
ASK_FIELDS = ("question", *OPTION_FIELDS)
TASK_FIELDS = {"classify": ("text", "texts", "top_k"), "tag": ("text", "texts")}


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


def error_body(status: int, field: str | None, message: str) -> dict[str, Any]:
    return {"error": {"status": status, "field": field, "message": message}}


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
        raise RequestError(422, "body", f"expected a JSON object, got {json_type(value)}")
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


def parse_question(body: dict, limits: ServeLimits) -> str:
    """The question of a request that asks the collection (/v1/ask)."""
    if "question" not in body:
        raise RequestError(422, "question", "missing")
    return parse_text(body["question"], limits.max_question_chars, "question", "question")


def parse_text(value: object, limit: int, name: str, kind: str) -> str:
    """A question, a context or a task's text (`kind`) as pipeline.core's text_problem accepts it: 413 past `limit`
    characters, 422 for anything else it refuses, naming the field `name`."""
    if isinstance(value, str) and len(value) > limit:
        advice = "shorten it" if kind == "question" else "split the text"
        raise RequestError(413, name, f"is {len(value):,} characters long, more than the {limit:,} allowed ({advice})")
    if not isinstance(value, str):
        raise RequestError(422, name, f"must be a string, got {json_type(value)}")
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
        raise RequestError(422, "texts", f"must be an array of strings, got {json_type(items)}")
    if not items:
        raise RequestError(422, "texts", "empty: nothing to answer")
    if len(items) > limits.max_pairs:
        raise RequestError(413, "texts", f"{len(items):,} texts, more than the {limits.max_pairs} allowed in one "
                                         "request")
    names = [f"texts[{i}]" for i in range(len(items))]
    return [parse_text(value, limits.max_context_chars, name, "text")
            for value, name in zip(items, names, strict=True)], names


def json_type(value: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _json_preview(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:40] + "…"

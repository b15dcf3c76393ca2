"""Helpers for the tests of `arabert-pipeline serve`: a loopback server in a thread of the test process, and a plain
HTTP/1.1 client (the standard library's), so that what is tested is the bytes on the wire."""
from __future__ import annotations

import http.client
import json
import re
import threading
import time
from urllib.parse import urlsplit

from arabert_pipeline.serve.app import create_app
from arabert_pipeline.serve.cli import bind, build_server
from arabert_pipeline.serve.limits import ServeLimits


class LoopbackServer:
    """create_app(load, limits) on uvicorn on 127.0.0.1 (a free port), in a daemon thread; a context manager."""

    def __init__(self, load, limits: ServeLimits = ServeLimits(), **app_options):
        self.app = create_app(load, limits, **app_options)
        self.server = build_server(self.app, log_config=None)
        self.sock = bind("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> LoopbackServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while request(self.url, "GET", "/health")[0] != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("the test server's model did not load")
            time.sleep(0.02)

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def request(url: str, method: str, path: str, body: bytes | dict | list | None = None,
            headers: dict[str, str] | None = None, timeout: float = 60):
    """(status, headers, body): the body parsed as JSON when the response says it is JSON, else as text."""
    if isinstance(body, (dict, list)):
        body = json.dumps(body, ensure_ascii=False).encode("utf-8")
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        response = connection.getresponse()
        data = response.read()
        response_headers = {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()
    if response_headers.get("content-type", "").startswith("application/json"):
        return response.status, response_headers, json.loads(data)
    return response.status, response_headers, data.decode("utf-8")


def concurrently(url: str, jobs: list[tuple[str, str, dict]]) -> list:
    """request(url, method, path, body) for each (method, path, body) of `jobs`, from a thread each, released together
    by a barrier (so that the server sees them at once): their responses, in order."""
    results: list = [None] * len(jobs)
    start = threading.Barrier(len(jobs))

    def client(i: int) -> None:
        start.wait()
        results[i] = request(url, *jobs[i])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results


# What the service adds to a text's tokens, as docs/answering.md states it: 16 of work a pair, and the special tokens
# around a QA pair ([CLS] question [SEP] context [SEP]) or a task's text ([CLS] text [SEP]).
PAIR_OVERHEAD, QA_SPECIALS, TASK_SPECIALS = 16, 3, 2
# The characters that may wait to be counted, as docs/answering.md states it: the queue's tokens over 2, the most tokens
# a character makes.
MAX_TOKENS_PER_CHAR = 2


def model_tokens(directory, text: str, preprocessing: str = "arabertv02") -> int:
    """The tokens a model dir's tokenizer makes of `text` after its preprocessing, counted with the tokenizers library
    itself rather than the service's code: the tests' expected costs."""
    from pathlib import Path

    from tokenizers import Tokenizer

    from arabert_pipeline.preprocess import Preprocessor

    tokenizer = Tokenizer.from_file(str(Path(directory) / "tokenizer.json"))
    return len(tokenizer.encode(Preprocessor(preprocessing).preprocess(text), add_special_tokens=False).ids)


def qa_cost(directory, question: str, context: str) -> int:
    """The queue's cost of a QA pair, from model_tokens and the documented constants."""
    return model_tokens(directory, question) + model_tokens(directory, context) + QA_SPECIALS + PAIR_OVERHEAD


def answers_json(found, top_k: int = 1) -> list[dict]:
    """Pipeline.answer's result as the service writes it."""
    answers = ([] if found is None else [found]) if top_k == 1 else found
    return [{"text": a.text, "start": a.start, "end": a.end, "score": a.score} for a in answers]


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def read_metrics(url: str) -> dict[str, float]:
    """{'name{labels}': value} of every sample on /metrics (the Prometheus text format: comments and samples only)."""
    status, headers, text = request(url, "GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a Prometheus sample line: {line!r}"
        samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return samples

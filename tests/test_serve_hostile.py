"""`arabert-pipeline serve` against hostile clients and web pages (issue 37, items 1-5): questions and queued work
bounded, Host and origin checked, JSON required, the page framed by nobody; every phase of a connection under a
deadline, connections counted, no log flood; hang-ups neither errors nor work; a stop that answers its queue with 503.
Servers listen on the loopback interface, with the tiny random model of test_pipeline.py; raw sockets send the bytes a
hostile client would."""
from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import os
import re
import select
import socket
import subprocess
import sys
import threading
import time
import types
from html.parser import HTMLParser
from pathlib import Path

import pytest

from serving import PAIR_OVERHEAD, LoopbackServer, answers_json, qa_cost, read_metrics, request
from test_pipeline import DEMO, model_dir  # noqa: F401 (fixture)

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
torch = pytest.importorskip("torch")

from arabert_pipeline.cli import main  # noqa: E402  after the importorskip above
from arabert_pipeline.errors import ConfigError, InputError  # noqa: E402  after the importorskip above
from arabert_pipeline.pipeline.core import MAX_QUESTION_CHARS  # noqa: E402  after the importorskip above
from arabert_pipeline.serve.limits import ServeLimits  # noqa: E402  after the importorskip above
from arabert_pipeline.serve.policy import AccessPolicy, is_loopback  # noqa: E402  after the importorskip above

pytestmark = pytest.mark.filterwarnings("ignore:.*no Arabic letter:UserWarning")
TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
Q, C = DEMO[0]["question"], DEMO[0]["context"]
BODY = json.dumps({"question": Q, "context": C}, ensure_ascii=False).encode()
# Short deadlines, so that a test of them takes a second.
QUICK = ServeLimits(max_context_chars=3000, max_question_chars=200, timeout_headers=0.5, timeout_body=0.5,
                    timeout_keep_alive=0.5, max_connections=12)


@pytest.fixture(scope="module")
def quick(model_dir):  # noqa: F811  an imported fixture
    from arabert_pipeline import Pipeline

    with LoopbackServer(lambda: Pipeline(model_dir(), max_context_chars=3000, max_question_chars=200), QUICK) as s:
        s.wait_ready()
        yield s


# Raw HTTP ----------------------------------------------------------------------------------------------------------

def connect(server, timeout: float = 10) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=timeout)


def head(server, path: str = "/v1/answer", length: int | None = None, content_type: str = "application/json",
         extra: str = "") -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{server.port}", f"Content-Type: {content_type}"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


def read_all(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection (a timeout fails the test: it was left open)."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def read_response(sock: socket.socket) -> bytes:
    """One response (its head and Content-Length bytes of body), leaving the connection open."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed after {data!r}"
        data += chunk
    length = int(re.search(rb"(?im)^content-length: *(\d+)", data).group(1))
    while len(data.partition(b"\r\n\r\n")[2]) < length:
        data += sock.recv(65536)
    return data


def parse(data: bytes) -> tuple[int, dict[str, str], object]:
    head_bytes, _, body = data.partition(b"\r\n\r\n")
    lines = head_bytes.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if headers.get("content-type", "").startswith("application/json"):
        body = json.loads(body)
    return int(lines[0].split()[1]), headers, body


def wait_for(condition, timeout: float = 20, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class Gate:
    """Holds the model's calls until opened, and records the questions of each call."""

    def __init__(self, model: Path, **options):
        self.model, self.options = model, options
        self.opened = threading.Event()
        self.calls: list[list[str]] = []

    def load(self):
        from arabert_pipeline import Pipeline

        pipeline = Pipeline(self.model, **self.options)
        answer = pipeline.answer

        def gated(questions, contexts, **kwargs):
            self.calls.append(list(questions))
            assert self.opened.wait(60)
            return answer(questions, contexts, **kwargs)

        pipeline.answer = gated
        return pipeline


def _error(status, headers, body, expected_status, field):
    assert status == expected_status, body
    assert headers["content-type"] == "application/json" and headers["x-content-type-options"] == "nosniff"
    assert body["error"]["status"] == status and body["error"]["field"] == field and body["error"]["message"], body


# 1. Questions and queued work --------------------------------------------------------------------------------------

def test_pipeline_refuses_a_question_over_its_limit(model_dir):  # noqa: F811  an imported fixture
    from arabert_pipeline import Pipeline

    default = Pipeline(model_dir())
    default.answer("س" * (MAX_QUESTION_CHARS - 1) + "؟", C)  # at the limit: answered
    with pytest.raises(InputError, match=r"question: is 1,002 characters long, more than the 1,000 allowed "
                                         r"\(raise the limit with max_question_chars="):
        default.answer("س" * (MAX_QUESTION_CHARS + 2), C)
    short = Pipeline(model_dir(), max_question_chars=20)
    with pytest.raises(InputError, match=r"question\[1\]: is 21 characters"):
        short.answer([Q[:20], "س" * 21], [C, C])
    assert short.answer(Q[:20], C) is not None
    with pytest.raises(ConfigError, match="max_question_chars must be a positive integer"):
        Pipeline(model_dir(), max_question_chars=0)


def test_answer_refuses_a_long_question_before_the_model_loads(tmp_path, capsys):
    lines = tmp_path / "q.jsonl"
    lines.write_text(json.dumps({"question": "س" * 31, "context": C}, ensure_ascii=False) + "\n", encoding="utf-8")
    # No model at that path: the question is refused before any model is looked for.
    for argv in (["--question", "س" * 1001, "--context", C], ["--input", str(lines), "--max-question-chars", "30"]):
        assert main(["answer", "--model", str(tmp_path / "none"), *argv]) == 2
        err = capsys.readouterr().err
        assert "question" in err and "characters long, more than the" in err and "Traceback" not in err


def test_the_server_refuses_a_long_question_with_413(quick):
    too_long = "س" * (QUICK.max_question_chars + 1)
    _error(*request(quick.url, "POST", "/v1/answer", {"question": too_long, "context": C}), 413, "question")
    _error(*request(quick.url, "POST", "/v1/answer/batch", {"pairs": [{"question": Q, "context": C},
                                                                       {"question": too_long, "context": C}]}),
           413, "pairs[1].question")
    spec = request(quick.url, "GET", "/openapi.json")[2]
    assert spec["components"]["schemas"]["Pair"]["properties"]["question"]["maxLength"] == QUICK.max_question_chars


def test_the_queue_is_bounded_by_work_not_by_pairs(model_dir):  # noqa: F811  an imported fixture
    long_context = (C + " ") * (3000 // (len(C) + 1))
    cost, short = qa_cost(model_dir(), Q, long_context), qa_cost(model_dir(), Q, Q)
    limits = ServeLimits(max_context_chars=3000, max_question_chars=200, max_queue_tokens=2 * cost + short)
    gate = Gate(model_dir(), max_context_chars=3000)
    with LoopbackServer(gate.load, limits) as s:
        s.wait_ready()
        responses = {}

        def ask(name, context):
            responses[name] = request(s.url, "POST", "/v1/answer", {"question": Q, "context": context})

        threads = [threading.Thread(target=ask, args=("running", long_context))]
        threads[0].start()
        wait_for(lambda: gate.calls, what="the first pair to reach the model")
        threads.append(threading.Thread(target=ask, args=("queued", long_context)))
        threads[1].start()
        wait_for(lambda: read_metrics(s.url)["arabert_serve_queue_tokens"] == 2 * cost, what="the second pair")
        # Two pairs hold the queue: a third long one does not fit, a short one still does.
        status, headers, body = request(s.url, "POST", "/v1/answer", {"question": Q, "context": long_context})
        assert status == 503 and "tokens of work" in body["error"]["message"] and int(headers["retry-after"]) >= 1
        threads.append(threading.Thread(target=ask, args=("short", Q)))
        threads[2].start()
        wait_for(lambda: read_metrics(s.url)["arabert_serve_queue_depth"] == 2, what="the short pair")
        gate.opened.set()
        for thread in threads:
            thread.join(60)
        assert {name: response[0] for name, response in responses.items()} == {"running": 200, "queued": 200,
                                                                              "short": 200}
        assert read_metrics(s.url)["arabert_serve_queue_tokens"] == 0


def test_retry_after_is_the_time_the_excess_work_takes(model_dir):  # noqa: F811  an imported fixture
    """Retry-After follows the work queued at the recent pace, with no cap: the old 60 s cap told clients to come
    back long before hours of queued work were done."""
    import asyncio

    from arabert_pipeline.serve.batcher import Batcher, Options, QueueFull
    from arabert_pipeline.serve.metrics import Metrics

    pair, tokens = ("س" * 10, "ب" * 990), 1000
    cost = tokens + PAIR_OVERHEAD
    limits = ServeLimits(max_context_chars=1000, max_question_chars=100, max_queue_tokens=3 * cost)
    release = threading.Event()

    def answer(options, pairs):
        release.wait(10)
        return [[] for _ in pairs]

    async def scenario():
        batcher = Batcher(answer, limits, Metrics(("/",), ()))
        batcher.start()
        try:
            first = batcher.submit([pair], Options(), [tokens])
            await asyncio.sleep(0.05)  # in the model call
            batcher._seconds_per_token = 0.5  # a slow model: half a second per token of work
            queued = batcher.submit([pair, pair], Options(), [tokens, tokens])
            with pytest.raises(QueueFull) as full:
                batcher.submit([pair], Options(), [tokens])
            assert full.value.retry_after == math.ceil(cost * 0.5) > 60  # the excess: one pair's work
            release.set()
            await asyncio.gather(*first, *queued)
            assert batcher.queued_cost == 0
        finally:
            release.set()
            await batcher.stop()

    asyncio.run(scenario())


# 2. Hosts, origins, media types, the page's headers ----------------------------------------------------------------

def test_a_request_naming_another_host_is_refused(quick):
    port = quick.port
    for host in (f"attacker.example:{port}", "attacker.example", f"10.1.2.3:{port}", "a b", ""):
        _error(*request(quick.url, "POST", "/v1/answer", BODY, headers={"Host": host}), 400, "Host")
        _error(*request(quick.url, "GET", "/", headers={"Host": host}), 400, "Host")
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"127.1:{port}", f"LOCALHOST.:{port}", f"[::1]:{port}"):
        assert request(quick.url, "POST", "/v1/answer", BODY, headers={"Host": host})[0] == 200, host


def test_a_request_from_another_web_page_is_refused(quick):
    before = read_metrics(quick.url)["arabert_serve_batch_pairs_sum"]
    own = f"http://127.0.0.1:{quick.port}"
    refused = [
        ({"Origin": "http://attacker.example", "Content-Type": "text/plain"}, "Origin"),  # the probe's request
        ({"Origin": "http://attacker.example"}, "Origin"),
        ({"Origin": "null"}, "Origin"),
        ({"Origin": f"http://localhost:{quick.port + 1}", "Sec-Fetch-Site": "same-site"}, "Origin"),
        ({"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, "Sec-Fetch-Site"),
        ({"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors"}, "Sec-Fetch-Site"),
    ]
    for headers, field in refused:
        _error(*request(quick.url, "POST", "/v1/answer", BODY, headers=headers), 403, field)
    _error(*request(quick.url, "GET", "/metrics", headers={"Sec-Fetch-Site": "cross-site"}), 403, "Sec-Fetch-Site")
    assert read_metrics(quick.url)["arabert_serve_batch_pairs_sum"] == before  # nothing refused reached the model
    # The page's own requests, a user typing the address, a link followed to the page, a client that is no browser.
    for headers in ({"Origin": own, "Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"}, {}):
        assert request(quick.url, "POST", "/v1/answer", BODY, headers=headers)[0] == 200, headers
    navigation = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
    assert request(quick.url, "GET", "/", headers=navigation)[0] == 200


def test_allowed_origins_get_cors_and_others_do_not(model_dir):  # noqa: F811  an imported fixture
    from arabert_pipeline import Pipeline

    allowed = "http://localhost:3000"
    policy = AccessPolicy.for_address("127.0.0.1", "127.0.0.1", (), [allowed])
    with LoopbackServer(lambda: Pipeline(model_dir()), policy=policy) as s:
        s.wait_ready()
        status, headers, _ = request(s.url, "OPTIONS", "/v1/answer", headers={
            "Origin": allowed, "Access-Control-Request-Method": "POST", "Sec-Fetch-Site": "same-site",
            "Access-Control-Request-Headers": "content-type"})
        assert status == 200 and headers["access-control-allow-origin"] == allowed
        status, headers, body = request(s.url, "POST", "/v1/answer", BODY,
                                        headers={"Origin": allowed, "Sec-Fetch-Site": "same-site"})
        assert status == 200 and headers["access-control-allow-origin"] == allowed and body["answers"]
        _error(*request(s.url, "OPTIONS", "/v1/answer", headers={
            "Origin": "http://localhost:3001", "Access-Control-Request-Method": "POST"}), 403, "Origin")


def test_the_api_requires_json(quick):
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                         "application/json; charset=latin-1", "application/jsonx"):
        for path in ("/v1/answer", "/v1/answer/batch"):
            _error(*request(quick.url, "POST", path, BODY, headers={"Content-Type": content_type}), 415,
                   "Content-Type")
    sock = connect(quick)  # no Content-Type at all
    sock.sendall(f"POST /v1/answer HTTP/1.1\r\nHost: 127.0.0.1:{quick.port}\r\nContent-Length: {len(BODY)}\r\n\r\n"
                 .encode() + BODY)
    _error(*parse(read_all(sock)), 415, "Content-Type")
    for content_type in ("application/json; charset=utf-8", "Application/JSON", 'application/json;charset="UTF-8"'):
        assert request(quick.url, "POST", "/v1/answer", BODY, headers={"Content-Type": content_type})[0] == 200


class _Inline(HTMLParser):
    """The text of each inline <script> and <style>, as a browser hashes it for a CSP."""

    def __init__(self):
        super().__init__()
        self.blocks: dict[str, list[str]] = {"script": [], "style": []}
        self._open: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag in self.blocks:
            self._open = tag
            self.blocks[tag].append("")

    def handle_endtag(self, tag):
        self._open = None

    def handle_data(self, data):
        if self._open:
            self.blocks[self._open][-1] += data


def test_the_page_is_sent_with_a_content_security_policy_and_never_framed(quick):
    status, headers, page = request(quick.url, "GET", "/")
    assert status == 200 and headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff"
    policy = dict(part.strip().split(" ", 1) for part in headers["content-security-policy"].split(";"))
    assert policy["frame-ancestors"] == "'none'" and policy["default-src"] == "'none'"
    assert policy["connect-src"] == "'self'"
    parser = _Inline()
    parser.feed(page)
    for tag in ("script", "style"):
        expected = {f"'sha256-{base64.b64encode(hashlib.sha256(block.encode()).digest()).decode()}'"
                    for block in parser.blocks[tag]}
        assert expected and set(policy[f"{tag}-src"].split()) == expected  # the page's own code runs, nothing else


def test_every_response_says_nosniff(quick):
    responses = [request(quick.url, method, path) for method, path in
                 [("GET", "/health"), ("GET", "/metrics"), ("GET", "/openapi.json"), ("GET", "/nowhere"),
                  ("GET", "/v1/answer")]]
    responses.append(request(quick.url, "POST", "/v1/answer", b"{"))
    sock = connect(quick)
    sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")  # refused by the HTTP parser, before the app
    responses.append(parse(read_all(sock)))
    assert responses[-1][0] == 400 and responses[-1][2]["error"]["status"] == 400
    for status, headers, _ in responses:
        assert headers["x-content-type-options"] == "nosniff", (status, headers)


# 3. Deadlines, the connection limit, the log -----------------------------------------------------------------------

def _closed_within(sock: socket.socket, seconds: float) -> tuple[bytes, float]:
    started = time.monotonic()
    data = read_all(sock)
    elapsed = time.monotonic() - started
    assert elapsed < seconds, f"left open {elapsed:.1f} s"
    return data, elapsed


@pytest.mark.slow  # about half a CPU second: the quick loop keeps this file's cheaper tests
def test_a_connection_that_sends_nothing_is_closed(quick):
    sock = connect(quick)
    data, elapsed = _closed_within(sock, QUICK.timeout_headers + 2)
    assert data == b"" and elapsed >= QUICK.timeout_headers - 0.1


@pytest.mark.slow
def test_half_a_head_gets_408_even_sent_a_byte_at_a_time(quick):
    sock = connect(quick)
    sock.sendall(b"POST /v1/answer HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    data, _ = _closed_within(sock, QUICK.timeout_headers + 2)
    _error(*parse(data), 408, None)
    # A byte every 0.1 s never completes the head, and does not move its deadline.
    elapsed = drip(connect(quick), b"POST /v1/answer HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200, 0.1)
    assert elapsed < QUICK.timeout_headers + 1.5, f"a dripping head kept the connection open {elapsed:.1f} s"


def drip(sock: socket.socket, data: bytes, interval: float) -> float:
    """Sends `data` a byte every `interval` seconds until the server answers or closes; the seconds that took."""
    started = time.monotonic()
    for byte in data:
        if select.select([sock], [], [], interval)[0]:
            return time.monotonic() - started
        try:
            sock.send(bytes([byte]))
        except OSError:
            return time.monotonic() - started
    pytest.fail(f"{len(data)} bytes sent over {time.monotonic() - started:.1f} s, and the connection is still open")


@pytest.mark.parametrize("sent", [
    "part of a body",
    "an unterminated chunked body",
])
@pytest.mark.slow
def test_a_body_that_does_not_arrive_gets_408(quick, sent):
    sock = connect(quick)
    if sent == "part of a body":
        sock.sendall(head(quick, length=len(BODY)) + BODY[:10])
    else:
        sock.sendall(head(quick, extra="Transfer-Encoding: chunked\r\n") + b"a\r\n" + BODY[:10] + b"\r\n")
    data, _ = _closed_within(sock, QUICK.timeout_body + 3)
    _error(*parse(data), 408, "body")


@pytest.mark.slow
def test_an_idle_kept_alive_connection_is_closed_even_after_a_byte_of_the_next_request(quick):
    for after in (b"", b"P"):
        sock = connect(quick)
        sock.sendall(head(quick, length=len(BODY)) + BODY)
        assert parse(read_response(sock))[0] == 200
        if after:
            sock.sendall(after)  # uvicorn forgot its keep-alive timer at the first byte, and never set another
        data, _ = _closed_within(sock, QUICK.timeout_headers + QUICK.timeout_keep_alive + 2)
        assert data == b"" or parse(data)[0] == 408


def test_connections_beyond_the_limit_are_refused_and_logged_once(quick, caplog):
    caplog.set_level(logging.INFO)
    held = [connect(quick) for _ in range(QUICK.max_connections)]
    time.sleep(0.1)
    extra = [connect(quick) for _ in range(20)]
    for sock in extra:
        _error(*parse(read_all(sock)), 503, None)
    refusals = [r for r in caplog.records if "refused a connection" in r.getMessage()]
    assert len(refusals) == 1, [r.getMessage() for r in refusals]
    for sock in held:
        sock.close()
    wait_for(lambda: request(quick.url, "POST", "/v1/answer", BODY)[0] == 200, what="a free connection")


def test_serve_fits_its_connections_to_the_open_files_limit(monkeypatch, caplog):
    import resource

    from arabert_pipeline.serve.cli import FD_RESERVE, fit_open_files

    limits = ServeLimits(max_connections=500)
    calls = []
    monkeypatch.setattr(resource, "setrlimit", lambda kind, value: calls.append(value))
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (256, 4096))
    assert fit_open_files(limits) == limits and calls == [(500 + FD_RESERVE, 4096)]  # raised to fit

    def refuse(kind, value):
        raise ValueError("not allowed")

    monkeypatch.setattr(resource, "setrlimit", refuse)
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (256, 256))
    caplog.set_level(logging.WARNING)
    assert fit_open_files(limits).max_connections == 256 - FD_RESERVE  # lowered to fit, and said
    assert "--max-connections 500 lowered to 192: the open-files limit is 256" in caplog.text


ACCEPT_FLOOD = """
import logging, resource, sys, time
sys.path.insert(0, sys.argv[1])
from serving import LoopbackServer
from arabert_pipeline.serve.limits import ServeLimits

logging.basicConfig(level=logging.INFO)

def load():
    raise RuntimeError("no model: this server only accepts connections")

# More connections allowed than file descriptors: only the open-files limit stops the accepts.
with LoopbackServer(load, ServeLimits(max_connections=5000)) as s:
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    print(s.port, flush=True)
    time.sleep(float(sys.argv[2]))
"""


@pytest.mark.slow
def test_the_open_files_limit_does_not_flood_the_log(tmp_path):
    """At the open-files limit asyncio retries the accept once per connection in the backlog, logging a traceback
    each time: megabytes of log a second. The server logs one line per interval."""
    log_file = tmp_path / "stderr.txt"
    with log_file.open("wb") as stderr:
        child = subprocess.Popen([sys.executable, "-c", ACCEPT_FLOOD, str(TESTS), "4"], stdout=subprocess.PIPE,
                                 stderr=stderr, env={**os.environ, "PYTHONPATH": str(REPO)})
        try:
            port = int(child.stdout.readline())
            sockets = []
            for _ in range(150):
                try:
                    sockets.append(socket.create_connection(("127.0.0.1", port), timeout=5))
                except OSError:
                    break
            time.sleep(2)
            cpu = _cpu_seconds(child.pid)
            time.sleep(1)
            cpu = _cpu_seconds(child.pid) - cpu
            for sock in sockets:
                sock.close()
        finally:
            child.wait(30)
    text = log_file.read_text(errors="replace")
    assert "cannot accept connections" in text and "Too many open files" in text
    assert len(text) < 20_000 and "Traceback" not in text, text[-3000:]
    assert cpu < 0.5, f"{cpu:.2f} s of CPU in 1 s at the open-files limit"


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# 4. Hang-ups --------------------------------------------------------------------------------------------------------

def test_a_client_that_hangs_up_mid_body_is_no_server_error(quick, caplog):
    caplog.set_level(logging.INFO)
    before = read_metrics(quick.url)
    for path in ("/v1/answer", "/v1/answer/batch"):
        sock = connect(quick)
        sock.sendall(head(quick, path, length=1000) + b'{"question": "')
        time.sleep(0.1)
        sock.close()
    wait_for(lambda: read_metrics(quick.url).get('arabert_serve_client_hangups_total{path="/v1/answer/batch"}', 0)
             == before.get('arabert_serve_client_hangups_total{path="/v1/answer/batch"}', 0) + 1, what="hang-ups")
    after = read_metrics(quick.url)
    assert after['arabert_serve_client_hangups_total{path="/v1/answer"}'] == \
        before.get('arabert_serve_client_hangups_total{path="/v1/answer"}', 0) + 1
    assert not [k for k in after if k.startswith("arabert_serve_errors_total") and "/v1/" in k and 'status="5' in k]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], \
        [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_the_pairs_of_a_client_that_hung_up_are_never_computed(model_dir):  # noqa: F811  an imported fixture
    gate = Gate(model_dir())
    with LoopbackServer(gate.load) as s:
        s.wait_ready()
        first = {}
        thread = threading.Thread(target=lambda: first.update(response=request(
            s.url, "POST", "/v1/answer", {"question": Q, "context": C})))
        thread.start()
        wait_for(lambda: gate.calls, what="the first pair to reach the model")
        hung_up = []
        for i in range(5):
            body = json.dumps({"question": f"{Q} {i}", "context": C}, ensure_ascii=False).encode()
            sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            sock.sendall(head(s, length=len(body)) + body)
            hung_up.append(sock)
            wait_for(lambda i=i: read_metrics(s.url)["arabert_serve_queue_depth"] == i + 1, what="a queued pair")
        for sock in hung_up:
            sock.close()
        wait_for(lambda: read_metrics(s.url)["arabert_serve_abandoned_pairs_total"] == 5, what="the hang-ups")
        assert read_metrics(s.url)["arabert_serve_queue_depth"] == 0
        assert read_metrics(s.url)["arabert_serve_queue_tokens"] == qa_cost(model_dir(), Q, C)  # the running pair
        gate.opened.set()
        thread.join(60)
        assert first["response"][0] == 200
        assert request(s.url, "POST", "/v1/answer", {"question": Q, "context": C})[0] == 200
        samples = read_metrics(s.url)
    assert gate.calls == [[Q], [Q]]  # none of the 5 abandoned questions reached the model
    assert samples["arabert_serve_batch_pairs_sum"] == 2
    assert samples['arabert_serve_client_hangups_total{path="/v1/answer"}'] == 5
    assert not [k for k in samples if k.startswith("arabert_serve_errors_total") and "/v1/" in k]


# 5. Shutdown, and the loopback warning -----------------------------------------------------------------------------

@pytest.mark.slow
def test_a_stop_answers_the_queue_with_json_503_and_retry_after(model_dir, caplog):  # noqa: F811  an imported fixture
    caplog.set_level(logging.INFO)
    gate = Gate(model_dir())
    with LoopbackServer(gate.load, ServeLimits(shutdown_timeout=0.5)) as s:
        s.wait_ready()
        responses: dict[int, tuple] = {}

        def ask(i: int) -> None:
            responses[i] = request(s.url, "POST", "/v1/answer", {"question": f"{Q} {i}", "context": C})

        threads = [threading.Thread(target=ask, args=(0,))]
        threads[0].start()
        wait_for(lambda: gate.calls, what="the first pair to reach the model")
        for i in range(1, 4):
            threads.append(threading.Thread(target=ask, args=(i,)))
            threads[-1].start()
        wait_for(lambda: read_metrics(s.url)["arabert_serve_queue_depth"] == 3, what="a queue")
        s.server.should_exit = True  # what SIGTERM does
        for thread in threads[1:]:
            thread.join(10)  # the model is still held: only the app's own 503 can have answered them
        assert sorted(responses) == [1, 2, 3]
        for i in (1, 2, 3):
            status, headers, body = responses[i]
            _error(status, headers, body, 503, None)
            assert "stopping" in body["error"]["message"] and int(headers["retry-after"]) >= 1
        gate.opened.set()
        threads[0].join(30)
    assert responses[0][0] == 200  # the pair in the model call when the deadline came is answered
    assert gate.calls == [[f"{Q} 0"]]
    assert not [r for r in caplog.records if r.exc_info or "Exception in ASGI" in r.getMessage()]


@pytest.mark.parametrize("host, loopback", [
    ("127.1", True), ("127.0.0.2", True), ("localhost", True), ("::1", True), ("0x7f.1", True),
    ("0.0.0.0", False), ("10.0.0.1", False), ("example.com", False),
])
def test_loopback_forms_are_loopback(host, loopback):
    assert is_loopback(host) is loopback


@pytest.mark.parametrize("host", ["127.1", "127.0.0.2", "localhost", "::1", "0.0.0.0"])
def test_serve_warns_of_other_machines_only_off_loopback(host, model_dir, monkeypatch, caplog):  # noqa: F811  an imported fixture
    import arabert_pipeline.serve.cli as serve_cli

    if host == "::1":
        try:
            socket.socket(socket.AF_INET6).bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback here")
    servers = []

    def build_server(app, **kwargs):
        servers.append(types.SimpleNamespace(run=lambda sockets: sockets[0].close(), should_exit=False))
        return servers[-1]

    monkeypatch.setattr(serve_cli, "build_server", build_server)
    caplog.set_level(logging.INFO)
    assert main(["serve", "--model", str(model_dir()), "--port", "0", "--host", host]) == 0
    warned = [r for r in caplog.records if "reachable from other machines" in r.getMessage()]
    assert servers and bool(warned) is (host == "0.0.0.0"), [r.getMessage() for r in warned]


# A bounded soak -----------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_hostile_and_slow_clients_do_not_change_normal_answers(model_dir, caplog):  # noqa: F811  an imported fixture
    """Normal clients alongside idle, dripping, half-sending, hanging-up, cross-origin and garbage-sending ones, for a
    few seconds: every normal answer is the one Pipeline.answer gives alone, and the log stays a few lines.
    benchmarks/soak_serve.py runs the same mix longer, against the real command, and watches its memory."""
    from arabert_pipeline import Pipeline

    caplog.set_level(logging.INFO)
    pairs = [(e["question"], e["context"]) for e in DEMO]
    reference = Pipeline(model_dir())
    expected = [answers_json(reference.answer(q, c)) for q, c in pairs]
    limits = ServeLimits(timeout_headers=0.3, timeout_body=0.3, timeout_keep_alive=0.3, max_connections=48)
    stop = threading.Event()
    failures: list[str] = []
    normal: list[tuple[int, int, object]] = []
    retried: list[object] = []

    with LoopbackServer(lambda: Pipeline(model_dir()), limits) as s:
        s.wait_ready()

        def hostile(kind: str) -> None:
            long_body = json.dumps({"question": Q, "context": (C + " ") * 15}, ensure_ascii=False).encode()
            while not stop.wait(0.05):  # many hostile clients, not a flood of connections: no server outlasts that
                try:
                    sock = socket.create_connection(("127.0.0.1", s.port), timeout=5)
                    if kind == "idle":
                        read_all(sock)
                    elif kind == "drip":
                        for byte in b"POST /v1/answer HTTP/1.1\r\n":
                            sock.send(bytes([byte]))
                            time.sleep(0.05)
                    elif kind == "half body":
                        sock.sendall(head(s, length=len(BODY)) + BODY[:5])
                        read_all(sock)
                    elif kind == "hang up":
                        sock.sendall(head(s, length=len(long_body)) + long_body)
                    elif kind == "cross-origin":
                        sock.sendall(head(s, length=len(BODY), content_type="text/plain",
                                          extra="Origin: http://attacker.example\r\n") + BODY)
                        assert parse(read_all(sock))[0] in (403, 503)
                    elif kind == "garbage":
                        sock.sendall(os.urandom(300))
                        read_all(sock)
                    sock.close()
                except OSError:
                    pass
                except AssertionError as exc:
                    failures.append(f"{kind}: {exc}")

        def client(k: int) -> None:
            for i in range(12):
                question, context = pairs[(k + i) % len(pairs)]
                for _ in range(10):  # as a client should: a 503 is retried after its Retry-After
                    status, headers, body = request(s.url, "POST", "/v1/answer",
                                                    {"question": question, "context": context})
                    if status != 503:
                        break
                    retried.append(body)
                    time.sleep(min(float(headers["retry-after"]), 1.0))
                normal.append(((k + i) % len(pairs), status, body))

        kinds = ["idle", "idle", "drip", "drip", "half body", "hang up", "hang up", "cross-origin", "garbage"]
        attackers = [threading.Thread(target=hostile, args=(kind,), daemon=True) for kind in kinds]
        clients = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for thread in attackers + clients:
            thread.start()
        for thread in clients:
            thread.join(120)
        stop.set()
        for thread in attackers:
            thread.join(10)
        samples = read_metrics(s.url)

    assert not failures, failures[:5]
    assert len(normal) == 48 and len(retried) < 12, retried[:3]
    for index, status, body in normal:
        assert status == 200, body
        found = body["answers"]
        assert [{k: a[k] for k in ("text", "start", "end")} for a in found] == \
            [{k: a[k] for k in ("text", "start", "end")} for a in expected[index]]
        assert all(a["score"] == pytest.approx(b["score"], rel=1e-5)
                   for a, b in zip(found, expected[index], strict=True))
    assert not [k for k in samples if k.startswith("arabert_serve_errors_total") and 'status="5' in k
                and "/health" not in k]
    records = [r for r in caplog.records if r.name.startswith(("uvicorn", "arabert_pipeline", "asyncio"))]
    assert len(records) < 60 and not [r for r in records if r.exc_info], [r.getMessage() for r in records][-20:]

"""`arabert-pipeline serve` (issue 26): answers identical to Pipeline.answer, alone and coalesced with concurrent
requests into one model batch; every bad request a 4xx JSON error naming the field; a full queue 503 + Retry-After;
/health, /metrics, /openapi.json; the CLI on SIGTERM. Servers listen on the loopback interface, with the tiny random
model of test_pipeline.py."""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from serving import LoopbackServer, answers_json, concurrently, qa_cost, read_metrics, request
from test_pipeline import DEMO, NOISY_CONTEXT, _long_context, model_dir  # noqa: F401 (fixture)

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
torch = pytest.importorskip("torch")

from arabert_pipeline.cli import main  # noqa: E402  after the importorskip above
from arabert_pipeline.serve.limits import ServeLimits  # noqa: E402  after the importorskip above
from arabert_pipeline.serve.requests import ANSWER_FIELDS, BATCH_FIELDS, PAIR_FIELDS  # noqa: E402  after the importorskip above

# Pairs the model cannot read are Latin-only: Pipeline.answer warns about them before refusing them.
pytestmark = pytest.mark.filterwarnings("ignore:.*no Arabic letter:UserWarning")
REPO = Path(__file__).resolve().parents[1]
PAIRS = [(e["question"], e["context"]) for e in DEMO] + [(DEMO[0]["question"], NOISY_CONTEXT),
                                                          (DEMO[1]["question"], _long_context(2))]
LIMITS = ServeLimits(max_context_chars=3000, max_body_bytes=64 * 1024, max_top_k=5, max_pairs=8)
# Nothing is left of this context after arabertv02 preprocessing: the model, not the request checks, refuses it.
UNREADABLE = "ª"


@pytest.fixture(scope="module")
def pipelines(model_dir):  # noqa: F811  an imported fixture
    """Pipeline(model, decoding=d) for each decoding (None: the model's own): the reference for every answer."""
    from arabert_pipeline import Pipeline

    return {d: Pipeline(model_dir(), decoding=d) for d in (None, "max-score", "expected-f1")}


@pytest.fixture(scope="module")
def server(model_dir):  # noqa: F811  an imported fixture
    from arabert_pipeline import Pipeline

    with LoopbackServer(lambda: Pipeline(model_dir(), max_context_chars=LIMITS.max_context_chars), LIMITS) as s:
        s.wait_ready()
        yield s


def post(server, path, body, **kwargs):
    return request(server.url, "POST", path, body, **kwargs)


# Answers ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("options", [{}, {"top_k": 3}, {"allow_no_answer": True}, {"decoding": "max-score"},
                                     {"decoding": "expected-f1", "top_k": 2}, {"decoding": None}])
def test_answers_are_those_of_pipeline_answer(server, pipelines, options):
    top_k = options.get("top_k", 1)
    pipeline = pipelines[options.get("decoding")]
    for question, context in PAIRS:
        status, _, body = post(server, "/v1/answer", {"question": question, "context": context, **options})
        assert status == 200, body
        expected = pipeline.answer(question, context, top_k=top_k,
                                   allow_no_answer=options.get("allow_no_answer", False))
        # Bitwise: a lone request is a batch of one, the very call Pipeline.answer makes.
        assert body == {"answers": answers_json(expected, top_k)}
        for answer in body["answers"]:
            assert context[answer["start"] : answer["end"]] == answer["text"]


def test_allow_no_answer_answers_nothing_where_the_model_says_so(model_dir, tmp_path):  # noqa: F811  an imported fixture
    from arabert_pipeline import Pipeline
    from arabert_pipeline.artifacts.metadata import write_metadata

    never = Path(shutil.copytree(model_dir(), tmp_path / "never"))
    write_metadata(never, null_score_diff_threshold=-1000.0)  # no-answer wins whenever it is allowed
    reference = Pipeline(never)
    question, context = PAIRS[0]
    with LoopbackServer(lambda: Pipeline(never)) as s:
        s.wait_ready()
        assert reference.answer(question, context, allow_no_answer=True) is None
        assert request(s.url, "POST", "/v1/answer", {"question": question, "context": context,
                                                     "allow_no_answer": True})[2] == {"answers": []}
        status, _, body = request(s.url, "POST", "/v1/answer", {"question": question, "context": context})
        assert status == 200 and body == {"answers": answers_json(reference.answer(question, context))}


def _same(found: list[dict], expected: list[dict]) -> bool:
    """Equal spans, and scores equal to float rounding: the torch backend pads a batch's windows to its longest,
    which moves logits by ~1e-8 (the ONNX backend's are bitwise equal; benchmarks/bench_serve.py checks)."""
    return (len(found) == len(expected)
            and all({k: a[k] for k in ("text", "start", "end")} == {k: b[k] for k in ("text", "start", "end")}
                    and a["score"] == pytest.approx(b["score"], rel=1e-5)
                    for a, b in zip(found, expected, strict=True)))


@pytest.mark.slow
def test_concurrent_requests_are_coalesced_into_batches_and_answered_as_alone(model_dir, pipelines):  # noqa: F811  an imported fixture
    from arabert_pipeline import Pipeline

    pipeline = pipelines[None]
    # Two option groups, interleaved: each must be answered with its own options.
    jobs = [(q, c, 1 + i % 2) for i, (q, c) in enumerate(PAIRS * 3)]
    expected = [answers_json(pipeline.answer(q, c, top_k=k), k) for q, c, k in jobs]
    # A wait long enough for every client of the barrier to be queued before the first batch runs.
    with LoopbackServer(lambda: Pipeline(model_dir()), ServeLimits(max_wait_ms=300)) as s:
        s.wait_ready()
        results = concurrently(s.url, [("POST", "/v1/answer", {"question": q, "context": c, "top_k": k})
                                       for q, c, k in jobs])
        samples = read_metrics(s.url)
    assert [status for status, _, _ in results] == [200] * len(jobs)
    assert all(_same(body["answers"], want) for (_, _, body), want in zip(results, expected, strict=True))
    batches, pairs = samples["arabert_serve_batch_pairs_count"], samples["arabert_serve_batch_pairs_sum"]
    assert pairs == len(jobs) and batches < len(jobs) / 2, (batches, pairs)
    assert samples['arabert_serve_batch_pairs_bucket{le="1.0"}'] < batches  # some batch held several pairs


def test_the_batch_form_answers_each_pair_as_alone(server, pipelines):
    status, _, body = post(server, "/v1/answer/batch", {"pairs": [{"question": q, "context": c} for q, c in PAIRS],
                                                        "top_k": 2, "decoding": "max-score"})
    assert status == 200
    expected = [answers_json(pipelines["max-score"].answer(q, c, top_k=2), 2) for q, c in PAIRS]
    assert len(body["results"]) == len(PAIRS)
    assert all(_same(result["answers"], want) for result, want in zip(body["results"], expected, strict=True))


# Bad requests -------------------------------------------------------------------------------------------------------

Q, C = PAIRS[0]


def _body(**fields) -> bytes:
    record = {"question": Q, "context": C}
    record.update(fields)
    return json.dumps({k: v for k, v in record.items() if v is not _DROP}, ensure_ascii=False).encode()


_DROP = object()
BAD_ANSWER_REQUESTS = {
    "invalid JSON": (b'{"question": "\xd9\x85\xd9\x86", ', 400, "body"),
    "invalid UTF-8": (b'{"question": "\xff\xfe", "context": "x"}', 400, "body"),
    "empty body": (b"", 400, "body"),
    "a JSON array": (b"[1, 2]", 422, "body"),
    "a JSON string": (b'"question"', 422, "body"),
    "nested 30,000 deep": (b'{"question": ' + b"[" * 30_000 + b"]" * 30_000 + b"}", 400, "body"),
    # Python ≥ 3.11 refuses to parse it (400); 3.10 parses it, and top_k is out of range (422).
    "a 5,000-digit top_k": (_body(top_k=0).replace(b'"top_k": 0', b'"top_k": ' + b"9" * 5000), (400, 422),
                            ("body", "top_k")),
    "question missing": (_body(question=_DROP), 422, "question"),
    "context missing": (_body(context=_DROP), 422, "context"),
    "question a number": (_body(question=5), 422, "question"),
    "context null": (_body(context=None), 422, "context"),
    "question blank": (_body(question="  \n"), 422, "question"),
    "question without a letter": (_body(question="؟؟ !"), 422, "question"),
    "a lone surrogate": (json.dumps({"question": Q, "context": C + "\ud800"}).encode(), 422, "context"),
    "context over the limit": (_body(context="ب" * 3001), 413, "context"),
    "body over the limit": (_body(question="ب" * 70_000), 413, "body"),
    "top_k 0": (_body(top_k=0), 422, "top_k"),
    "top_k over the maximum": (_body(top_k=6), 422, "top_k"),
    "top_k true": (_body(top_k=True), 422, "top_k"),
    "top_k a string": (_body(top_k="2"), 422, "top_k"),
    "top_k 1.5": (_body(top_k=1.5), 422, "top_k"),
    "top_k infinite": (_body(top_k=0).replace(b'"top_k": 0', b'"top_k": 1e999'), 422, "top_k"),
    "allow_no_answer a string": (_body(allow_no_answer="yes"), 422, "allow_no_answer"),
    "decoding unknown": (_body(decoding="best"), 422, "decoding"),
    "an unknown field": (_body(contxt="x"), 422, "contxt"),
    "a context the model cannot read": (_body(context=UNREADABLE), 422, "context"),
}
BAD_BATCH_REQUESTS = {
    "pairs missing": ({}, 422, "pairs"),
    "pairs an object": ({"pairs": {"question": Q, "context": C}}, 422, "pairs"),
    "pairs empty": ({"pairs": []}, 422, "pairs"),
    "too many pairs": ({"pairs": [{"question": Q, "context": C}] * 9}, 413, "pairs"),
    "a pair not an object": ({"pairs": [{"question": Q, "context": C}, "x"]}, 422, "pairs[1]"),
    "a pair's context missing": ({"pairs": [{"question": Q, "context": C}, {"question": Q}]}, 422, "pairs[1].context"),
    "a pair's unknown field": ({"pairs": [{"question": Q, "context": C, "id": 1}]}, 422, "pairs[0].id"),
    "a pair's context over the limit": ({"pairs": [{"question": Q, "context": "ب" * 3001}]}, 413, "pairs[0].context"),
    "a pair the model cannot read": ({"pairs": [{"question": Q, "context": C}, {"question": Q, "context": UNREADABLE}]},
                                     422, "pairs[1].context"),
    "top_k over the maximum": ({"pairs": [{"question": Q, "context": C}], "top_k": 9}, 422, "top_k"),
}


def _assert_client_error(status, headers, body, expected_status, expected_field) -> None:
    statuses = expected_status if isinstance(expected_status, tuple) else (expected_status,)
    fields = expected_field if isinstance(expected_field, tuple) else (expected_field,)
    assert status in statuses, body
    assert headers["content-type"] == "application/json"
    assert body["error"]["status"] == status and body["error"]["field"] in fields, body
    assert body["error"]["message"] and "Traceback" not in json.dumps(body)


@pytest.mark.parametrize("name", BAD_ANSWER_REQUESTS)
def test_a_bad_answer_request_gets_a_4xx_naming_the_field(server, name):
    raw, expected_status, expected_field = BAD_ANSWER_REQUESTS[name]
    _assert_client_error(*post(server, "/v1/answer", raw), expected_status, expected_field)


@pytest.mark.parametrize("name", BAD_BATCH_REQUESTS)
def test_a_bad_batch_request_gets_a_4xx_naming_the_field(server, name):
    body, expected_status, expected_field = BAD_BATCH_REQUESTS[name]
    _assert_client_error(*post(server, "/v1/answer/batch", body), expected_status, expected_field)


def test_wrong_routes_and_methods_get_json_errors(server):
    status, headers, body = request(server.url, "GET", "/v1/answer")
    assert status == 405 and body["error"]["status"] == 405 and "POST" in headers["allow"]
    status, _, body = request(server.url, "GET", "/no/such/page")
    assert status == 404 and body["error"]["status"] == 404


def test_random_bytes_never_get_a_server_error(server):
    rng = random.Random(26)
    valid = _body()
    for i in range(60):
        if i % 3 == 0:  # noise
            raw = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
        elif i % 3 == 1:  # a valid body, cut short
            raw = valid[: rng.randrange(len(valid))]
        else:  # a valid body with a few bytes changed
            raw = bytearray(valid)
            for _ in range(rng.randrange(1, 4)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            raw = bytes(raw)
        status, _, body = post(server, "/v1/answer", raw)
        assert status < 500, (raw, body)
        assert status == 200 or ("error" in body and "Traceback" not in json.dumps(body)), (raw, body)


# Queue, health, metrics, description --------------------------------------------------------------------------------

def _outstanding(url: str) -> float:
    samples = read_metrics(url)
    return samples["arabert_serve_queue_depth"] + samples["arabert_serve_running_pairs"]


@pytest.mark.slow
def test_a_full_queue_answers_503_with_retry_after(model_dir):  # noqa: F811  an imported fixture
    from arabert_pipeline import Pipeline

    filling = PAIRS[:3]
    Q_C = filling[0]
    held = sum(qa_cost(model_dir(), q, c) for q, c in filling)
    # The queue holds the work of the first 3 pairs, which the first batch holds for 3 s.
    limits = ServeLimits(max_queue_tokens=held, max_wait_ms=3000, max_question_chars=100,
                         max_context_chars=max(len(c) for _, c in filling))
    with LoopbackServer(lambda: Pipeline(model_dir()), limits) as s:
        s.wait_ready()
        first = {}
        filler = threading.Thread(target=lambda: first.update(response=request(
            s.url, "POST", "/v1/answer/batch", {"pairs": [{"question": q, "context": c} for q, c in filling]})))
        filler.start()
        deadline = time.monotonic() + 30
        while _outstanding(s.url) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert read_metrics(s.url)["arabert_serve_queue_tokens"] == held
        status, headers, body = request(s.url, "POST", "/v1/answer", {"question": Q, "context": C})
        assert status == 503 and int(headers["retry-after"]) >= 1, body
        assert body["error"]["status"] == 503 and "queue" in body["error"]["message"]
        filler.join(60)
        assert first["response"][0] == 200 and len(first["response"][2]["results"]) == 3
        assert request(s.url, "POST", "/v1/answer", {"question": Q, "context": C})[0] == 200  # drained: accepted
        status, _, body = request(s.url, "POST", "/v1/answer/batch", {"pairs": [{"question": q, "context": c}
                                                                                for q, c in [*filling, Q_C]]})
        assert status == 413 and body["error"]["field"] == "pairs"  # more work than the queue could ever hold
        assert "tokens of work" in body["error"]["message"]
        assert read_metrics(s.url)["arabert_serve_rejected_full_total"] == 1


def test_health_is_ready_only_once_the_model_is_loaded(model_dir):  # noqa: F811  an imported fixture
    from arabert_pipeline import Pipeline

    loaded = threading.Event()

    def slow_load():
        assert loaded.wait(60)
        return Pipeline(model_dir())

    with LoopbackServer(slow_load) as s:
        status, headers, body = request(s.url, "GET", "/health")
        assert (status, body["status"], headers["retry-after"]) == (503, "loading", "1")
        status, headers, body = request(s.url, "POST", "/v1/answer", {"question": Q, "context": C})
        assert status == 503 and headers["retry-after"] == "1" and "loading" in body["error"]["message"]
        assert read_metrics(s.url)["arabert_serve_ready"] == 0
        loaded.set()
        s.wait_ready()
        status, _, body = request(s.url, "GET", "/health")
        assert body["status"] == "ready" and body["backend"] == "torch" and body["index"] is None  # no --index
        assert request(s.url, "POST", "/v1/answer", {"question": Q, "context": C})[0] == 200
        assert read_metrics(s.url)["arabert_serve_ready"] == 1


def test_a_model_that_fails_to_load_is_reported(tmp_path):
    from arabert_pipeline import Pipeline

    failures = []
    with LoopbackServer(lambda: Pipeline(tmp_path / "missing"), on_load_failure=failures.append) as s:
        deadline = time.monotonic() + 30
        while not failures:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        status, _, body = request(s.url, "GET", "/health")
        assert (status, body["status"]) == (503, "failed")
        assert "does not exist" in str(failures[0])


def test_metrics_count_requests_errors_latency_and_batches(model_dir):  # noqa: F811  an imported fixture
    from arabert_pipeline import Pipeline

    with LoopbackServer(lambda: Pipeline(model_dir())) as s:
        s.wait_ready()
        for question, context in PAIRS[:3]:
            assert request(s.url, "POST", "/v1/answer", {"question": question, "context": context})[0] == 200
        assert request(s.url, "POST", "/v1/answer", {"question": Q})[0] == 422
        assert request(s.url, "POST", "/v1/answer", b"{")[0] == 400
        assert request(s.url, "POST", "/v1/answer/batch", {"pairs": [{"question": Q, "context": C}] * 2})[0] == 200
        samples = read_metrics(s.url)
    assert samples['arabert_serve_requests_total{path="/v1/answer",status="200"}'] == 3
    assert samples['arabert_serve_errors_total{path="/v1/answer",status="422"}'] == 1
    assert samples['arabert_serve_errors_total{path="/v1/answer",status="400"}'] == 1
    assert not any(key.startswith("arabert_serve_errors_total") and 'status="200"' in key for key in samples)
    assert samples['arabert_serve_request_duration_seconds_count{path="/v1/answer"}'] == 5
    assert samples['arabert_serve_request_duration_seconds_bucket{path="/v1/answer",le="+Inf"}'] == 5
    assert samples['arabert_serve_request_duration_seconds_sum{path="/v1/answer"}'] > 0
    assert samples["arabert_serve_batch_pairs_sum"] == 5  # 3 alone + the batch request's 2
    assert samples["arabert_serve_queue_depth"] == 0 and samples["arabert_serve_running_pairs"] == 0
    assert samples['arabert_serve_requests_total{path="/health",status="200"}'] >= 1


def test_openapi_describes_the_fields_and_limits_the_server_applies(server):
    status, _, spec = request(server.url, "GET", "/openapi.json")
    assert status == 200 and spec["openapi"].startswith("3.")
    schemas = spec["components"]["schemas"]
    assert set(schemas["AnswerRequest"]["properties"]) == set(ANSWER_FIELDS)
    assert set(schemas["BatchRequest"]["properties"]) == set(BATCH_FIELDS)
    assert set(schemas["Pair"]["properties"]) == set(PAIR_FIELDS)
    assert schemas["AnswerRequest"]["properties"]["top_k"]["maximum"] == LIMITS.max_top_k
    assert schemas["AnswerRequest"]["properties"]["context"]["maxLength"] == LIMITS.max_context_chars
    assert schemas["BatchRequest"]["properties"]["pairs"]["maxItems"] == LIMITS.max_pairs
    assert {"/v1/answer", "/v1/answer/batch", "/health", "/metrics", "/"} <= set(spec["paths"])


def test_the_page_is_arabic_and_right_to_left(server):
    status, headers, page = request(server.url, "GET", "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert '<html lang="ar" dir="rtl">' in page and 'id="question"' in page and '"v1/answer"' in page
    assert '<body data-collection="off">' in page  # no index served: the page asks a pasted text only


# The command -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["--max-queue-tokens", "0"], "max_queue_tokens (--max-queue-tokens) must be a positive integer, got 0"),
    (["--max-question-chars", "0"], "max_question_chars (--max-question-chars) must be a positive integer, got 0"),
    (["--timeout-body", "0"], "timeout_body (--timeout-body) must be a finite number > 0, got 0.0"),
    (["--timeout-keep-alive", "-1"], "timeout_keep_alive (--timeout-keep-alive) must be a finite number > 0, got -1.0"),
    (["--allowed-origins", "localhost:3000"], "--allowed-origins: 'localhost:3000' is not an origin"),
    (["--allowed-hosts", "a b"], "--allowed-hosts: 'a b' is not a host name or address"),
    (["--max-wait-ms", "-1"], "max_wait_ms (--max-wait-ms) must be a finite number ≥ 0, got -1.0"),
    (["--port", "70000"], "--port: must be from 0 to 65535"),
    (["--model", "runs/no/such/model"], "model directory runs/no/such/model does not exist"),
])
def test_serve_refuses_bad_flags_before_listening(argv, message, capsys):
    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.slow  # a server process of its own, which imports torch for the tiny model
def test_sigterm_stops_accepting_answers_the_request_in_flight_and_exits_0(model_dir, pipelines):  # noqa: F811  an imported fixture
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    # The request in flight waits 3 s in its batch: the signal arrives while it waits.
    process = subprocess.Popen([sys.executable, "-m", "arabert_pipeline.cli", "serve", "--model", str(model_dir()),
                                "--port", "0", "--max-wait-ms", "3000"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stderr.readline()
        match = re.search(r"serving on (http://127\.0\.0\.1:(\d+))/", line)
        assert match, line
        url, port = match.group(1), int(match.group(2))
        deadline = time.monotonic() + 120
        while request(url, "GET", "/health")[0] != 200:
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        found = {}
        client = threading.Thread(target=lambda: found.update(response=request(
            url, "POST", "/v1/answer", {"question": Q, "context": C})))
        client.start()
        while _outstanding(url) < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        with pytest.raises(ConnectionRefusedError):  # no longer accepting, while the request is still in flight
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        assert client.is_alive()
        client.join(60)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(60)
    status, _, body = found["response"]
    assert status == 200 and body == {"answers": answers_json(pipelines[None].answer(Q, C))}
    assert "Traceback" not in process.stderr.read()

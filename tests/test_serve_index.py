"""`arabert-pipeline serve --index DIR` (issue 59): POST /v1/ask answers as `Pipeline.answer(question, index=...)`
does, each answer naming its document with the passage it was read from; its requests checked and refused as
/v1/answer's are, its work counted as the passages it reads; 404 saying how to enable it without an index; /health,
/metrics, /openapi.json and the page know of it; a damaged index stops the server with its one-line error, and a
SIGTERM while the index loads stops it at once. The shipped model, on an index of a few documents."""
from __future__ import annotations

import functools
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from serving import PAIR_OVERHEAD, QA_SPECIALS, LoopbackServer, concurrently, model_tokens, read_metrics, request
from test_answer_index import (  # noqa: F401 (fixtures)
    BOOK_FAIR_Q,
    IDS,
    NILE_Q,
    PETRA_Q,
    TEXTS,
    TITLES,
    UNRETRIEVED,
    damaged_copy,
    index_dir,
    reference,
)
from test_passages import NILE, PETRA
from test_serve import _assert_client_error

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from arabert_pipeline import Index, Pipeline
from arabert_pipeline.cli import main
from arabert_pipeline.errors import ConfigError
from arabert_pipeline.pipeline.resolve import bundled_model_dir
from arabert_pipeline.serve.limits import ServeLimits
from arabert_pipeline.serve.requests import ASK_FIELDS

REPO = Path(__file__).resolve().parents[1]
LIMITS = ServeLimits(max_question_chars=200, max_context_chars=3000, max_body_bytes=64 * 1024, max_top_k=5)
QUESTIONS = [NILE_Q, PETRA_Q, BOOK_FAIR_Q, UNRETRIEVED]


@pytest.fixture(scope="module")
def server(index_dir):  # noqa: F811  an imported fixture
    with LoopbackServer(lambda: Pipeline("arabert", max_context_chars=LIMITS.max_context_chars,
                                         max_question_chars=LIMITS.max_question_chars), LIMITS,
                        index=functools.partial(Index.open, index_dir)) as s:
        s.wait_ready()
        yield s


def ask(server, body, **kwargs):
    return request(server.url, "POST", "/v1/ask", body, **kwargs)


def ask_json(found, index: Index, top_k: int = 1) -> list[dict]:
    """Pipeline.answer(question, index=...)'s result as /v1/ask writes it."""
    answers = ([] if found is None else [found]) if top_k == 1 else found
    return [{"text": a.text, "start": a.start, "end": a.end, "score": a.score, "document": a.document,
             "title": a.title, "passage": {"text": index.document_text(a.passage.document)[a.passage.start:
                                                                                         a.passage.end],
                                           "start": a.passage.start, "end": a.passage.end}} for a in answers]


# Answers ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("options", [{}, *(pytest.param(o, marks=pytest.mark.slow) for o in (
    {"top_k": 3}, {"allow_no_answer": True}, {"decoding": "max-score"}))])
def test_ask_answers_as_pipeline_answer_with_the_index(server, reference, options):  # noqa: F811  an imported fixture
    qa, index = reference
    top_k = options.get("top_k", 1)
    pipeline = Pipeline("arabert", decoding=options["decoding"]) if "decoding" in options else qa
    for question in QUESTIONS:
        status, _, body = ask(server, {"question": question, **options})
        assert status == 200, body
        expected = pipeline.answer(question, index=index, top_k=top_k,
                                   allow_no_answer=options.get("allow_no_answer", False))
        assert body == {"answers": ask_json(expected, index, top_k)}  # bitwise: a lone request, the same call
        for answer in body["answers"]:
            text = TEXTS[IDS.index(answer["document"])]
            passage = answer["passage"]
            assert text[answer["start"]:answer["end"]] == answer["text"]
            assert text[passage["start"]:passage["end"]] == passage["text"]
            assert passage["start"] <= answer["start"] < answer["end"] <= passage["end"]
    status, _, body = ask(server, {"question": NILE_Q})
    nile = body["answers"][0]
    assert (nile["document"], nile["title"]) == ("nile-article", "نهر النيل") and "6650" in nile["text"]
    assert len(nile["passage"]["text"]) < len(TEXTS[1])  # the passage read, not the whole article
    assert ask(server, {"question": UNRETRIEVED})[2] == {"answers": []}


@pytest.mark.slow
def test_concurrent_questions_and_pairs_are_batched_and_answered_as_alone(index_dir, reference):  # noqa: F811  an imported fixture
    qa, index = reference
    # Two option groups of questions, and pairs of /v1/answer, interleaved: each answered with its own options.
    jobs = [("POST", "/v1/ask", {"question": q, "top_k": 1 + i % 2}) for i, q in enumerate(QUESTIONS * 3)]
    jobs += [("POST", "/v1/answer", {"question": q, "context": c}) for q, c in ((PETRA_Q, PETRA), (NILE_Q, NILE))]
    # A wait long enough for every client of the barrier to be queued before the first batch runs.
    with LoopbackServer(lambda: Pipeline("arabert"), ServeLimits(max_wait_ms=300),
                        index=functools.partial(Index.open, index_dir)) as s:
        s.wait_ready()
        results = concurrently(s.url, jobs)
        samples = read_metrics(s.url)
    for (_, path, body), (status, _, got) in zip(jobs, results, strict=True):
        assert status == 200, got
        if path == "/v1/ask":  # bitwise, as alone: the ONNX backend's answers do not depend on their batch
            expected = qa.answer(body["question"], index=index, top_k=body["top_k"])
            assert got == {"answers": ask_json(expected, index, body["top_k"])}
        else:
            found = qa.answer(body["question"], body["context"])
            assert got["answers"] == [{"text": found.text, "start": found.start, "end": found.end,
                                       "score": found.score}]
    calls, jobs_answered = samples["arabert_serve_batch_pairs_count"], samples["arabert_serve_batch_pairs_sum"]
    assert jobs_answered == len(jobs) and calls < len(jobs) / 2, (calls, jobs_answered)
    assert samples['arabert_serve_batch_pairs_bucket{le="1.0"}'] < calls  # some call answered several questions


# Bad requests -------------------------------------------------------------------------------------------------------

BAD_ASK_REQUESTS = {
    "invalid JSON": (b'{"question": ', 400, "body"),
    "a JSON array": (b"[]", 422, "body"),
    "question missing": ({"top_k": 2}, 422, "question"),
    "question a number": ({"question": 3}, 422, "question"),
    "question blank": ({"question": " \n"}, 422, "question"),
    "question without a letter": ({"question": "؟!"}, 422, "question"),
    "question over the limit": ({"question": "ب" * 201}, 413, "question"),
    "body over the limit": ({"question": NILE_Q, "top_k": 1, "x": "ب" * 70_000}, 413, "body"),
    "a context": ({"question": NILE_Q, "context": NILE}, 422, "context"),
    "top_k 0": ({"question": NILE_Q, "top_k": 0}, 422, "top_k"),
    "top_k over the maximum": ({"question": NILE_Q, "top_k": 6}, 422, "top_k"),
    "allow_no_answer a string": ({"question": NILE_Q, "allow_no_answer": "yes"}, 422, "allow_no_answer"),
    "decoding unknown": ({"question": NILE_Q, "decoding": "best"}, 422, "decoding"),
}


@pytest.mark.parametrize("name", BAD_ASK_REQUESTS)
def test_a_bad_ask_request_gets_a_4xx_naming_the_field(server, name):
    body, expected_status, expected_field = BAD_ASK_REQUESTS[name]
    _assert_client_error(*ask(server, body), expected_status, expected_field)


def test_ask_wants_json_and_post(server):
    status, _, body = ask(server, json.dumps({"question": NILE_Q}).encode(), headers={"Content-Type": "text/plain"})
    assert status == 415 and body["error"]["field"] == "Content-Type"
    status, headers, body = request(server.url, "GET", "/v1/ask")
    assert status == 405 and "POST" in headers["allow"] and body["error"]["status"] == 405


@pytest.mark.slow  # a server of its own
def test_a_collection_question_costs_its_passages_up_to_exactly_the_queue(index_dir, reference):  # noqa: F811  an imported fixture
    """Admitted by the tokens of the passages it reads, each counted as /v1/answer counts a pair: at exactly the queue's
    bound it is answered; one that reads more is refused with 413 naming its cost."""
    qa, index = reference
    model = bundled_model_dir("arabert")

    def cost(question: str, passages: int) -> int:
        hits, = index.search_many([question], k=qa.qa.settings.passages_read)
        assert len(hits) == passages
        return sum(model_tokens(model, question) + model_tokens(model, hit.text) + QA_SPECIALS + PAIR_OVERHEAD
                   for hit in hits)

    small, large = (PETRA_Q, cost(PETRA_Q, 1)), (BOOK_FAIR_Q, cost(BOOK_FAIR_Q, 3))
    assert small[1] < large[1]
    limits = ServeLimits(max_queue_tokens=small[1], max_question_chars=200)
    with LoopbackServer(lambda: Pipeline("arabert"), limits, index=functools.partial(Index.open, index_dir)) as s:
        s.wait_ready()
        status, _, body = ask(s, {"question": small[0]})
        assert status == 200 and body["answers"], body
        error = ask(s, {"question": large[0]})[2]["error"]
        assert error["status"] == 413 and error["field"] == "question"
        assert f"{large[1]:,} tokens of work, more than the queue's {small[1]:,}" in error["message"]
        assert ask(s, {"question": UNRETRIEVED})[0] == 200  # reads nothing: costs what a pair costs besides its tokens


# Without an index; health, metrics, description, page -------------------------------------------------------------

def test_without_an_index_ask_is_404_saying_how_to_enable_it():
    """Before the model is even loaded (it never is here): the route is absent, not waiting for a model."""
    never = threading.Event()
    with LoopbackServer(lambda: never.wait(60), LIMITS) as s:
        try:
            status, headers, body = ask(s, {"question": NILE_Q})
            assert status == 404 and headers["content-type"] == "application/json"
            assert "--index DIR" in body["error"]["message"] and "arabert-pipeline index" in body["error"]["message"]
            assert "/v1/ask" not in request(s.url, "GET", "/openapi.json")[2]["paths"]
            assert '<body data-collection="off">' in request(s.url, "GET", "/")[2]
        finally:
            never.set()


def test_health_reports_the_index_and_metrics_count_the_route(server, index_dir):  # noqa: F811  an imported fixture
    status, _, body = request(server.url, "GET", "/health")
    assert status == 200 and body["index"] == {"path": str(index_dir), "documents": len(TEXTS),
                                               "passages": len(Index.open(index_dir)),
                                               "analysis": "arabertv02-light10+qwords"}
    before = read_metrics(server.url)
    assert ask(server, {"question": PETRA_Q})[0] == 200
    assert ask(server, {"question": PETRA_Q, "top_k": 0})[0] == 422
    after = read_metrics(server.url)

    def grew(key: str) -> float:
        return after.get(key, 0) - before.get(key, 0)

    assert grew('arabert_serve_requests_total{path="/v1/ask",status="200"}') == 1
    assert grew('arabert_serve_errors_total{path="/v1/ask",status="422"}') == 1
    assert grew('arabert_serve_request_duration_seconds_count{path="/v1/ask"}') == 2


def test_openapi_describes_the_ask_route_as_it_checks(server):
    spec = request(server.url, "GET", "/openapi.json")[2]
    schemas = spec["components"]["schemas"]
    assert set(schemas["AskRequest"]["properties"]) == set(ASK_FIELDS)
    assert schemas["AskRequest"]["properties"]["question"]["maxLength"] == LIMITS.max_question_chars
    assert schemas["AskRequest"]["properties"]["top_k"]["maximum"] == LIMITS.max_top_k
    assert spec["paths"]["/v1/ask"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"] == \
        "#/components/schemas/AskRequest"
    answer = ask(server, {"question": PETRA_Q})[2]["answers"][0]
    assert set(schemas["CollectionAnswer"]["required"]) == set(answer)
    assert set(schemas["CollectionAnswer"]["properties"]["passage"]["required"]) == set(answer["passage"])


def test_the_page_offers_the_collection_under_its_content_security_policy(server):
    from arabert_pipeline.serve.app import page_headers

    status, headers, page = request(server.url, "GET", "/")
    assert status == 200 and '<body data-collection="on">' in page and '"v1/ask"' in page
    assert headers["content-security-policy"] == page_headers(page)["Content-Security-Policy"]


# Loading --------------------------------------------------------------------------------------------------------------

def test_a_damaged_index_fails_the_load_with_its_one_line_error(index_dir, tmp_path):  # noqa: F811  an imported fixture
    damaged = damaged_copy(index_dir, tmp_path / "damaged")
    failures: list = []
    with LoopbackServer(lambda: Pipeline("arabert"), LIMITS, on_load_failure=failures.append,
                        index=functools.partial(Index.open, damaged)) as s:
        deadline = time.monotonic() + 30
        while not failures:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert request(s.url, "GET", "/health")[2]["status"] == "failed"
        assert request(s.url, "POST", "/v1/ask", {"question": NILE_Q})[0] == 503
    assert isinstance(failures[0], ConfigError) and "SHA-256 is not the one the index recorded" in str(failures[0])


@pytest.mark.parametrize("name, message", [("empty", "is not an index directory: it has no arabert_pipeline.json"),
                                           ("missing", "is not an index directory (no such directory)")])
def test_serve_refuses_a_directory_that_is_not_an_index_before_listening(tmp_path, capsys, name, message):
    directory = tmp_path / name
    if name == "empty":
        directory.mkdir()
    assert main(["serve", "--index", str(directory), "--port", "0"]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "serving on" not in captured.err and "Traceback" not in captured.err


# Opens the index slowly (the checksums of a large one), then serves: the command as it runs, with a load to interrupt.
_SLOW_OPEN = """
import sys, time
from arabert_pipeline.retrieval import index
opened = index.Index.open.__func__
index.Index.open = classmethod(lambda cls, *a, **k: (time.sleep(float(sys.argv[1])), opened(cls, *a, **k))[1])
from arabert_pipeline.cli import main
raise SystemExit(main(sys.argv[2:]))
"""


def _serve(index: Path, open_seconds: float = 0.0) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-c", _SLOW_OPEN, str(open_seconds), "serve", "--index", str(index),
                                "--port", "0"], env=env, stderr=subprocess.PIPE, text=True)
    line = process.stderr.readline()
    match = re.search(r"serving on (http://127\.0\.0\.1:\d+)/", line)
    assert match, line
    return process, match.group(1)


@pytest.mark.slow  # a server process of its own
def test_the_command_stops_with_the_one_line_error_of_a_damaged_index(index_dir, tmp_path):  # noqa: F811  an imported fixture
    process, _ = _serve(damaged_copy(index_dir, tmp_path / "damaged"))
    try:
        assert process.wait(60) == 2
    finally:
        if process.poll() is None:
            process.kill()
    err = process.stderr.read()
    assert "arabert-pipeline serve: error: " in err and "SHA-256 is not the one the index recorded" in err
    assert "Traceback" not in err


@pytest.mark.slow  # a server process of its own
def test_sigterm_while_the_index_loads_stops_the_server_at_once(index_dir):  # noqa: F811  an imported fixture
    """The load runs beside the event loop; were it in the loop's executor, whose threads are joined at exit, the
    process would wait for the whole load (here 120 s) after the signal."""
    process, url = _serve(index_dir, open_seconds=120)
    try:
        deadline = time.monotonic() + 60
        while request(url, "GET", "/health")[2]["status"] != "loading":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        assert time.monotonic() - signalled < 30
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(60)
    assert "Traceback" not in process.stderr.read()


@pytest.mark.slow  # Farasa, for the other analysis
@pytest.mark.filterwarnings("ignore:the index was built with:UserWarning")  # Pipeline's own, on every question
def test_an_index_of_another_preprocessing_is_named_once_in_the_log(caplog):
    index = Index.build(TEXTS, IDS, TITLES, analysis="arabertv2-light")
    with caplog.at_level(logging.WARNING, logger="arabert_pipeline.serve.app"), \
            LoopbackServer(lambda: Pipeline("arabert"), LIMITS, index=lambda: index) as s:
        s.wait_ready()
        assert ask(s, {"question": PETRA_Q})[0] == 200
    named = [r.getMessage() for r in caplog.records if "the index was built with the 'arabertv2-light'" in
             r.getMessage()]
    assert len(named) == 1 and "this model reads arabertv02 text" in named[0]

"""`serve`'s text-task routes (issue 40): /v1/classify and /v1/tag answer as the task pipelines do, refuse bad requests
with the QA routes' 4xx JSON errors (content type, body, schema, sizes, work in tokens), answer 404 when no such model
is served, and are described in /openapi.json. The toy task models of test_tasks.py beside the tiny QA model of
test_pipeline.py."""
from __future__ import annotations

import argparse
import json

import pytest

from serving import LoopbackServer, request
from test_pipeline import model_dir  # noqa: F401 (fixture)
from test_serve import _assert_client_error
from test_tasks import task_models  # noqa: F401 (fixture)

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("torch")

from arabert_pipeline.errors import ConfigError
from arabert_pipeline.serve.limits import ServeLimits
from arabert_pipeline.serve.requests import TASK_FIELDS

# Room for one 3,000-character text of work, not for a batch of eight of them.
LIMITS = ServeLimits(max_context_chars=3000, max_body_bytes=64 * 1024, max_top_k=5, max_pairs=8,
                     max_queue_tokens=4000)
TEXTS = ["الفيلم جميل جدا", "الخدمة سيء اليوم", "السيد حمدان بن سلمان زار مدينة نجران أمس"]


@pytest.fixture(scope="module")
def pipelines(task_models):  # noqa: F811  an imported fixture
    from arabert_pipeline import Pipeline

    return {"classify": Pipeline(task_models.cls_int8), "tag": Pipeline(task_models.ner_int8)}


@pytest.fixture(scope="module")
def server(model_dir, task_models):  # noqa: F811  an imported fixture
    from arabert_pipeline import Pipeline

    tasks = {"classify": lambda: Pipeline(task_models.cls_int8, max_chars=LIMITS.max_context_chars),
             "tag": lambda: Pipeline(task_models.ner_int8, max_chars=LIMITS.max_context_chars)}
    with LoopbackServer(lambda: Pipeline(model_dir(), max_context_chars=LIMITS.max_context_chars), LIMITS,
                        tasks=tasks) as s:
        s.wait_ready()
        yield s


def post(server, path, body, **kwargs):
    return request(server.url, "POST", path, body, **kwargs)


def test_classify_answers_as_the_pipeline(server, pipelines):
    classify = pipelines["classify"]
    status, _, body = post(server, "/v1/classify", {"text": TEXTS[0]})
    assert status == 200 and body == {"labels": classify(TEXTS[0])}
    status, _, body = post(server, "/v1/classify", {"texts": TEXTS, "top_k": 2})
    assert status == 200 and body == {"results": [{"labels": classify(t, top_k=2)} for t in TEXTS]}
    # top_k past the model's classes: every class, as the pipeline answers.
    assert post(server, "/v1/classify", {"text": TEXTS[1], "top_k": 5})[2] == {"labels": classify(TEXTS[1], top_k=5)}


def test_tag_answers_as_the_pipeline_with_offsets_into_the_text_sent(server, pipelines):
    status, _, body = post(server, "/v1/tag", {"text": TEXTS[2]})
    assert status == 200 and body == {"entities": pipelines["tag"](TEXTS[2])}
    assert [e["word"] for e in body["entities"]] == [TEXTS[2][e["start"]:e["end"]] for e in body["entities"]]
    assert [e["entity_group"] for e in body["entities"]] == ["PERS", "LOC"]
    status, _, body = post(server, "/v1/tag", {"texts": TEXTS})
    assert status == 200 and body == {"results": [{"entities": found} for found in pipelines["tag"](TEXTS)]}


def test_concurrent_requests_of_every_route_get_their_own_answers(server, pipelines, model_dir):  # noqa: F811  an imported fixture
    """One worker answers QA pairs and task texts; a batch mixing them answers each with its own model."""
    import threading

    from arabert_pipeline import Pipeline

    qa = Pipeline(model_dir())
    question, context = "أين تقع البتراء؟", "تقع مدينة البتراء في جنوب الأردن."
    jobs = [("/v1/classify", {"text": TEXTS[i % 2]}, {"labels": pipelines["classify"](TEXTS[i % 2])}) for i in range(4)]
    jobs += [("/v1/tag", {"texts": TEXTS}, {"results": [{"entities": e} for e in pipelines["tag"](TEXTS)]})] * 4
    expected_answer = qa.answer(question, context)
    jobs += [("/v1/answer", {"question": question, "context": context}, None)] * 4
    results: list = [None] * len(jobs)
    start = threading.Barrier(len(jobs))

    def client(i: int) -> None:
        start.wait()
        results[i] = post(server, jobs[i][0], jobs[i][1])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for (path, _, expected), (status, _, body) in zip(jobs, results, strict=True):
        assert status == 200, body
        if path == "/v1/answer":
            assert [(a["text"], a["start"]) for a in body["answers"]] == [(expected_answer.text, expected_answer.start)]
        else:
            assert body == expected


BAD_TASK_REQUESTS = {
    "invalid JSON": (b'{"text": "\xd9\x85\xd9\x86", ', 400, "body"),
    "invalid UTF-8": (b'{"text": "\xff\xfe"}', 400, "body"),
    "empty body": (b"", 400, "body"),
    "a JSON array": (b'["text"]', 422, "body"),
    "neither text nor texts": ({}, 422, "text"),
    "text and texts": ({"text": TEXTS[0], "texts": TEXTS}, 422, "texts"),
    "an unknown field": ({"text": TEXTS[0], "lang": "ar"}, 422, "lang"),
    "text a number": ({"text": 5}, 422, "text"),
    "text blank": ({"text": " \n"}, 422, "text"),
    "text without a letter": ({"text": "؟؟ !"}, 422, "text"),
    "a lone surrogate": (json.dumps({"text": TEXTS[0] + "\ud800"}).encode(), 422, "text"),
    "text over the limit": ({"text": "ب" * 3001}, 413, "text"),
    "body over the limit": ({"text": "ب" * 70_000}, 413, "body"),
    "texts a string": ({"texts": TEXTS[0]}, 422, "texts"),
    "texts empty": ({"texts": []}, 422, "texts"),
    "too many texts": ({"texts": TEXTS * 3}, 413, "texts"),
    "a text null": ({"texts": [TEXTS[0], None]}, 422, "texts[1]"),
    "a text over the limit": ({"texts": [TEXTS[0], "ب" * 3001]}, 413, "texts[1]"),
    "more work than the queue holds": ({"texts": ["بيت " * 700] * 8}, 413, "texts"),
}
BAD_CLASSIFY_OPTIONS = {
    "top_k 0": ({"text": TEXTS[0], "top_k": 0}, 422, "top_k"),
    "top_k over the maximum": ({"text": TEXTS[0], "top_k": 6}, 422, "top_k"),
    "top_k true": ({"text": TEXTS[0], "top_k": True}, 422, "top_k"),
    "top_k a string": ({"text": TEXTS[0], "top_k": "2"}, 422, "top_k"),
}


@pytest.mark.parametrize("path", ["/v1/classify", "/v1/tag"])
@pytest.mark.parametrize("name", BAD_TASK_REQUESTS)
def test_a_bad_task_request_gets_a_4xx_naming_the_field(server, path, name):
    raw, expected_status, expected_field = BAD_TASK_REQUESTS[name]
    _assert_client_error(*post(server, path, raw), expected_status, expected_field)


@pytest.mark.parametrize("name", BAD_CLASSIFY_OPTIONS)
def test_a_bad_classify_option_gets_a_422(server, name):
    raw, expected_status, expected_field = BAD_CLASSIFY_OPTIONS[name]
    _assert_client_error(*post(server, "/v1/classify", raw), expected_status, expected_field)


def test_tag_takes_no_top_k_and_both_routes_want_json(server):
    _assert_client_error(*post(server, "/v1/tag", {"text": TEXTS[2], "top_k": 2}), 422, "top_k")
    for path in ("/v1/classify", "/v1/tag"):
        _assert_client_error(*post(server, path, {"text": TEXTS[0]}, headers={"Content-Type": "text/plain"}), 415,
                             "Content-Type")
        assert request(server.url, "GET", path)[0] == 405


def test_a_text_with_nothing_left_after_preprocessing_is_a_422(model_dir, task_models):  # noqa: F811  an imported fixture
    from arabert_pipeline import Pipeline

    with LoopbackServer(lambda: Pipeline(model_dir()), tasks={"tag": lambda: Pipeline(task_models.ner_v2_int8)}) as s:
        s.wait_ready()  # the toy tagger that normalizes (and segments) its text
        _assert_client_error(*request(s.url, "POST", "/v1/tag", {"text": "ـــــ"}), 422, "text")
        status, _, body = request(s.url, "POST", "/v1/tag", {"texts": [TEXTS[2], "ـــ"]})
        assert status == 422 and "nothing left after 'arabertv2' preprocessing" in body["error"]["message"], body


def test_a_task_not_served_answers_404_and_health_lists_those_served(model_dir, task_models):  # noqa: F811  an imported fixture
    from arabert_pipeline import Pipeline

    with LoopbackServer(lambda: Pipeline(model_dir()), tasks={"tag": lambda: Pipeline(task_models.ner_int8)}) as s:
        s.wait_ready()
        _assert_client_error(*request(s.url, "POST", "/v1/classify", {"text": TEXTS[0]}), 404, None)
        assert "--classify-model" in request(s.url, "POST", "/v1/classify", {"text": TEXTS[0]})[2]["error"]["message"]
        status, _, health = request(s.url, "GET", "/health")
        assert status == 200 and health["tasks"] == {"tag": str(task_models.ner_int8)}
        paths = request(s.url, "GET", "/openapi.json")[2]["paths"]
        assert "/v1/tag" in paths and "/v1/classify" not in paths  # described only where served


def test_openapi_describes_the_task_routes_as_they_check(server):
    spec = request(server.url, "GET", "/openapi.json")[2]
    schemas = spec["components"]["schemas"]
    assert set(schemas["ClassifyRequest"]["properties"]) == set(TASK_FIELDS["classify"])
    assert set(schemas["TagRequest"]["properties"]) == set(TASK_FIELDS["tag"])
    assert schemas["ClassifyRequest"]["properties"]["top_k"]["maximum"] == LIMITS.max_top_k
    assert schemas["TagRequest"]["properties"]["texts"]["maxItems"] == LIMITS.max_pairs
    assert schemas["TagRequest"]["properties"]["text"]["maxLength"] == LIMITS.max_context_chars
    assert set(schemas["Entity"]["required"]) == {"entity_group", "score", "word", "start", "end"}
    for path in ("/v1/classify", "/v1/tag"):
        assert {"413", "415", "422"} <= set(spec["paths"][path]["post"]["responses"])


def test_serve_resolves_the_task_models_before_taking_the_port(task_models, tmp_path, monkeypatch):  # noqa: F811  an imported fixture
    from arabert_pipeline.serve.cli import task_loaders

    def args(classify: str, tag: str) -> argparse.Namespace:
        return argparse.Namespace(classify_model=classify, tag_model=tag, backend="auto")

    # No shipped task model: auto serves none, names fail.
    monkeypatch.setattr("arabert_pipeline.pipeline.inputs.MODELS_DIR", tmp_path)
    assert task_loaders(args("auto", "auto"), LIMITS) == {}
    with pytest.raises(ConfigError, match="'arabert-ner' is not shipped"):
        task_loaders(args("none", "arabert-ner"), LIMITS)
    with pytest.raises(ConfigError, match="is a text-classification model, not one for task 'token-classification'"):
        task_loaders(args("none", str(task_models.cls)), LIMITS)
    loaders = task_loaders(args(str(task_models.cls_int8), "none"), LIMITS)
    assert list(loaders) == ["classify"] and loaders["classify"]().max_chars == LIMITS.max_context_chars

"""`serve`'s limits at exactly their values and one past them (issue 52, class 13 and its test gaps): work counted in
the served model's tokens on every route, so that text where every character is a token costs what the model reads
(a characters / 3 estimate let such text hold the worker several times longer than the queue promised); the queue
and a model batch full at exactly their bounds; the request sizes. Expected costs are built into the texts: "ب", "."
and "س" are each one token of the tiny models' vocabularies (checked), so "ب." repeated n times is 2n tokens, and the
service adds what docs/answering.md states (serving.PAIR_OVERHEAD and the special tokens)."""
from __future__ import annotations

import asyncio
import json
import threading
import time
import types

import pytest

from serving import MAX_TOKENS_PER_CHAR, PAIR_OVERHEAD, QA_SPECIALS, TASK_SPECIALS, LoopbackServer, request
from test_pipeline import model_dir  # noqa: F401 (fixture)

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("torch")

from arabert_pipeline.serve.limits import ServeLimits

pytestmark = pytest.mark.filterwarnings("ignore:.*no Arabic letter:UserWarning")
DENSE = "ب."  # two tokens, with no space between: every character a token
QUESTION = "س"  # one token


@pytest.fixture(scope="module")
def qa_dir(model_dir):  # noqa: F811  an imported fixture
    directory = model_dir()
    vocab = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    assert {"ب", ".", "س"} <= set(vocab), "the texts below are built on these being single tokens"
    return directory


def _error(response, status, field):
    code, _, body = response
    assert code == status and body["error"]["field"] == field, body
    return body["error"]["message"]


def test_a_token_dense_context_costs_its_tokens_up_to_exactly_the_queue(qa_dir):
    from arabert_pipeline import Pipeline

    n = 300
    cost = 1 + 2 * n + QA_SPECIALS + PAIR_OVERHEAD  # 620; 219 by characters / 3
    limits = ServeLimits(max_queue_tokens=cost, max_context_chars=3000, max_question_chars=200)
    with LoopbackServer(lambda: Pipeline(qa_dir, max_context_chars=3000, max_question_chars=200), limits) as s:
        s.wait_ready()
        exact = {"question": QUESTION, "context": DENSE * n}
        over = {"question": QUESTION, "context": DENSE * n + "ب"}
        assert request(s.url, "POST", "/v1/answer", exact)[0] == 200
        message = _error(request(s.url, "POST", "/v1/answer", over), 413, "context")
        assert f"{cost + 1:,} tokens of work" in message and f"queue's {cost:,}" in message
        assert request(s.url, "POST", "/v1/answer/batch", {"pairs": [exact]})[0] == 200
        _error(request(s.url, "POST", "/v1/answer/batch", {"pairs": [exact, {"question": QUESTION, "context": "ب"}]}),
               413, "pairs")


def test_requests_waiting_to_be_counted_are_bounded_by_characters(qa_dir, monkeypatch):
    """Counting comes before admission: with its wait unbounded, large requests piled up there unrefused, bodies in
    memory, and the requests behind them waited with no 503. The characters waiting may make one queue of work at the
    most tokens a character makes; exactly that many wait, one more is answered 503 + Retry-After at once (while the
    count ahead of it is held), and a request finding none waiting is counted whatever its length."""
    from arabert_pipeline import Pipeline
    from arabert_pipeline.serve import admission

    budget = 1000
    limits = ServeLimits(max_queue_tokens=budget * MAX_TOKENS_PER_CHAR, max_context_chars=3000, max_question_chars=200)
    counting, release = threading.Event(), threading.Event()
    count = admission.TokenCounter.__call__

    def held_count(self, texts):
        if any(text.startswith("held") for text in texts):
            counting.set()
            release.wait(30)
        return count(self, texts)

    monkeypatch.setattr(admission.TokenCounter, "__call__", held_count)

    def pair(chars: int) -> dict:  # `chars` characters in all, 2 tokens each past the question
        return {"question": QUESTION, "context": (DENSE * chars)[:chars - 1]}

    with LoopbackServer(lambda: Pipeline(qa_dir, max_context_chars=3000, max_question_chars=200), limits) as s:
        s.wait_ready()
        stage = s.app.state.counting
        assert stage.max_chars == budget
        # alone, a request longer than the budget is counted (then admitted by its tokens: spaces make none)
        assert request(s.url, "POST", "/v1/answer", {"question": QUESTION, "context": "ب " * budget})[0] == 200
        answers = {}

        def ask(name, body):
            answers[name] = request(s.url, "POST", "/v1/answer", body, timeout=30)

        held = {"question": QUESTION, "context": "held" + "ب" * 95}  # 100 characters, counted once released
        threads = [threading.Thread(target=ask, args=("held", held))]
        threads[0].start()
        assert counting.wait(30)
        try:
            # one past the budget: refused at once, while the count ahead of it is still held
            status, headers, _ = request(s.url, "POST", "/v1/answer", pair(budget - 100 + 1), timeout=10)
            assert status == 503 and int(headers["retry-after"]) >= 1
            # exactly the budget: waits to be counted
            threads.append(threading.Thread(target=ask, args=("exact", pair(budget - 100))))
            threads[-1].start()
            deadline = time.monotonic() + 30
            while stage.pending != budget:
                assert time.monotonic() < deadline and "exact" not in answers, answers.get("exact")
                time.sleep(0.01)
            status, headers, body = request(s.url, "POST", "/v1/answer", pair(2), timeout=10)
            assert status == 503 and int(headers["retry-after"]) >= 1
            assert "waiting to have their tokens counted" in body["error"]["message"]
        finally:
            release.set()
            for thread in threads:
                thread.join(30)
        assert answers["held"][0] == 200 and answers["exact"][0] == 200
        assert stage.pending == 0


class TaskStub:
    """A task pipeline reading texts as the tiny QA model's tokenizer after arabertv02 does, answering nothing: the
    routes' counting and admission, without fine-tuning a model."""

    preprocessing = "arabertv02"

    def __init__(self, directory):
        from arabert_pipeline.tokenizer.load import load_pretrained_tokenizer

        self.source = str(directory)
        self.model = types.SimpleNamespace(tokenizer=load_pretrained_tokenizer(directory))
        self.texts: list[str] = []

    def __call__(self, texts, top_k=None):
        self.texts.extend(texts)
        return [[] for _ in texts]


def test_tag_and_classify_texts_cost_their_tokens_up_to_exactly_the_queue(qa_dir):
    from arabert_pipeline import Pipeline

    n = 400
    cost = 2 * n + TASK_SPECIALS + PAIR_OVERHEAD
    limits = ServeLimits(max_queue_tokens=cost, max_context_chars=3000, max_question_chars=200)
    stubs = {"tag": TaskStub(qa_dir), "classify": TaskStub(qa_dir)}
    tasks = {name: (lambda stub=stub: stub) for name, stub in stubs.items()}
    with LoopbackServer(lambda: Pipeline(qa_dir, max_context_chars=3000), limits, tasks=tasks) as s:
        s.wait_ready()
        for path, name in (("/v1/tag", "tag"), ("/v1/classify", "classify")):
            assert request(s.url, "POST", path, {"text": DENSE * n})[0] == 200
            message = _error(request(s.url, "POST", path, {"text": DENSE * n + "."}), 413, "text")
            assert f"{cost + 1:,} tokens of work" in message
            assert request(s.url, "POST", path, {"texts": [DENSE * n]})[0] == 200
            _error(request(s.url, "POST", path, {"texts": [DENSE * n, "ب"]}), 413, "texts")
            assert stubs[name].texts == [DENSE * n] * 2  # the refused texts never reached the model


def test_the_queue_and_a_batch_hold_exactly_their_bounds():
    """The queue takes work up to exactly max_queue_tokens and a batch pairs up to exactly max_batch_tokens; one token
    more is refused, or waits for the next batch."""
    from arabert_pipeline.serve.batcher import Batcher, Options, QueueFull
    from arabert_pipeline.serve.metrics import Metrics

    limits = ServeLimits(max_queue_tokens=3 * (100 + PAIR_OVERHEAD), max_batch_tokens=200)
    release = threading.Event()
    calls: list[list[str]] = []

    def answer(options, pairs):
        calls.append([question for question, _ in pairs])
        release.wait(10)
        return [[] for _ in pairs]

    async def scenario():
        batcher = Batcher(answer, limits, Metrics(("/",), ()))
        batcher.start()
        try:
            running = batcher.submit([("a", "")], Options(), [100])
            while not calls:
                await asyncio.sleep(0.01)
            queued = batcher.submit([("b", ""), ("c", "")], Options(), [100, 100])  # the queue exactly full
            assert batcher.queued_cost == limits.max_queue_tokens
            with pytest.raises(QueueFull):
                batcher.submit([("d", "")], Options(), [0])  # a pair's overhead alone is one pair too many
            release.set()
            await asyncio.gather(*running, *queued)
            release.clear()
            held = batcher.submit([("e", "")], Options(), [1])
            while len(calls) < 3:
                await asyncio.sleep(0.01)
            more = batcher.submit([("f", ""), ("g", "")], Options(), [100, 101])  # one token past a batch
            release.set()
            await asyncio.gather(*held, *more)
            assert batcher.queued_cost == 0
        finally:
            release.set()
            await batcher.stop()

    asyncio.run(scenario())
    assert calls == [["a"], ["b", "c"], ["e"], ["f"], ["g"]]


def test_request_sizes_are_accepted_at_exactly_their_limits(qa_dir):
    from arabert_pipeline import Pipeline

    limits = ServeLimits(max_context_chars=300, max_question_chars=40, max_pairs=3, max_top_k=3, max_body_bytes=4000)
    context = ("كتب الطالب درسه " * 30)[:300]
    question = ("ماذا كتب الطالب " * 5)[:40]
    with LoopbackServer(lambda: Pipeline(qa_dir, max_context_chars=300, max_question_chars=40), limits) as s:
        s.wait_ready()

        def ask(**fields):
            return request(s.url, "POST", "/v1/answer", {"question": question, "context": context, **fields})

        assert ask()[0] == 200  # both texts at their limits
        _error(ask(context=context + "ب"), 413, "context")
        _error(ask(question=question + "ب"), 413, "question")
        assert ask(top_k=3)[0] == 200
        _error(ask(top_k=4), 422, "top_k")
        pair = {"question": "س", "context": "ب ت"}
        assert request(s.url, "POST", "/v1/answer/batch", {"pairs": [pair] * 3})[0] == 200
        _error(request(s.url, "POST", "/v1/answer/batch", {"pairs": [pair] * 4}), 413, "pairs")
        body = json.dumps(pair, ensure_ascii=False).encode()
        padded = body + b" " * (limits.max_body_bytes - len(body))  # JSON allows trailing whitespace
        assert len(padded) == 4000 and request(s.url, "POST", "/v1/answer", padded)[0] == 200
        _error(request(s.url, "POST", "/v1/answer", padded + b" "), 413, "body")


def test_counting_leaves_the_models_tokenizer_as_the_model_set_it(qa_dir):
    """Counts run beside the model's thread: a count through the model's own tokenizer reset the truncation of the
    windows being built there (a window longer than the model reads)."""
    from arabert_pipeline import Pipeline
    from arabert_pipeline.serve.answerers import Answerer

    pipeline = Pipeline(qa_dir)
    backend = pipeline.qa.tokenizer.backend_tokenizer
    backend.enable_truncation(96, stride=32)
    before = backend.truncation
    assert Answerer(pipeline).tokens([(QUESTION, DENSE * 200)]) == [1 + 400 + QA_SPECIALS]
    assert backend.truncation == before

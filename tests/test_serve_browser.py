"""The web page of `arabert-pipeline serve`, in a real browser: headless Chromium (Debian's `chromium` package; .ci/run
installs it) driven over the Chrome DevTools Protocol. The tests type a context (or, with serve --index, nothing but
a question) and a question, click the button, and read back the answer that the page's script highlighted in the
context (or in the passage of the collection it was read from). Skips where there is no Chromium."""
from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from serving import LoopbackServer
from test_passages import FILLER, NILE, PETRA
from test_pipeline import DEMO, model_dir  # noqa: F401 (fixture)

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
torch = pytest.importorskip("torch")

BROWSER = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(name)), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="needs headless Chromium (apt-get install chromium), "
                                                        "which .ci/run installs")


class Browser:
    """Headless Chromium speaking CDP over --remote-debugging-pipe: JSON messages ending in NUL, written to its
    fd 3 and read from its fd 4 (no WebSocket client needed)."""

    def __init__(self, profile: Path):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # Above 10 and closed on exec, so that placing them at 3 and 4 cannot overwrite one with the other.
        read_end = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD_CLOEXEC, 10)
        write_end = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD_CLOEXEC, 10)
        for fd in (to_browser_r, from_browser_w):
            os.close(fd)
        # posix_spawn, not Popen(preexec_fn=...): no Python code runs in the child of this multi-threaded process
        # (the test server's thread is running).
        self.pid = os.posix_spawn(BROWSER, [
            BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
            "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank",
        ], os.environ, file_actions=[
            (os.POSIX_SPAWN_DUP2, read_end, 3), (os.POSIX_SPAWN_DUP2, write_end, 4),
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
        ])
        os.close(read_end)
        os.close(write_end)
        self._buffer = b""
        self._next_id = 0
        self.session = None

    def call(self, method: str, params: dict | None = None, timeout: float = 30) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if self.session is not None and not method.startswith("Target."):
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._next_id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply["result"]
            if time.monotonic() > deadline:
                raise TimeoutError(method)
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise EOFError("the browser closed the DevTools pipe")
            self._buffer += chunk

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", {"url": url})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.wait_for("document.readyState === 'complete' && !!document.getElementById('ask')")

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while not (value := self.evaluate(expression)):
            if time.monotonic() > deadline:
                raise TimeoutError(expression)
            time.sleep(0.05)
        return value

    def type_into(self, element_id: str, text: str) -> None:
        self.click(element_id)
        self.evaluate(f"document.getElementById({json.dumps(element_id)}).select()")  # replace what is there
        self.call("Input.insertText", {"text": text})

    def click(self, element_id: str) -> None:
        box = self.evaluate(f"(() => {{ const e = document.getElementById({json.dumps(element_id)}); "
                            "e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect(); "
                            "return [r.left + r.width / 2, r.top + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1], "button": "left",
                                                   "clickCount": 1})

    def close(self) -> None:
        os.close(self._to_browser)  # Chromium exits when its DevTools pipe closes
        deadline = time.monotonic() + 10
        while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                break
            time.sleep(0.05)
        os.close(self._from_browser)


SHOWN = "(() => { const a = document.getElementById('answer'); return !a.hidden && a.dataset.state; })()"


def test_the_page_highlights_the_answer_and_says_when_there_is_none(model_dir, tmp_path):  # noqa: F811  an imported fixture
    from arabert_pipeline import Pipeline
    from arabert_pipeline.artifacts.metadata import write_metadata

    never = Path(shutil.copytree(model_dir(), tmp_path / "never"))
    write_metadata(never, null_score_diff_threshold=-1000.0)  # no-answer wins whenever it is allowed
    # An emoji first: the page must count offsets in code points, as the service does, not in UTF-16 units.
    context, question = "😀 " + DEMO[0]["context"], DEMO[0]["question"]
    expected = Pipeline(never).answer(question, context)
    assert expected is not None and expected.start > 0
    with LoopbackServer(lambda: Pipeline(never)) as server:
        server.wait_ready()
        browser = Browser(tmp_path / "profile")
        try:
            browser.open(server.url + "/")
            assert browser.evaluate("document.documentElement.dir") == "rtl"
            browser.type_into("context", context)
            browser.type_into("question", question)
            browser.click("submit")
            assert browser.wait_for(SHOWN) == "answered"
            marks = browser.evaluate("[...document.querySelectorAll('#result mark')].map(m => m.textContent)")
            assert marks == [expected.text]
            before = browser.evaluate("document.querySelector('#result mark').previousSibling.textContent")
            assert before == context[: expected.start]
            assert browser.evaluate("document.getElementById('result').textContent") == context
            assert float(browser.evaluate("document.getElementById('score').dataset.score")) == expected.score
            assert browser.evaluate("document.getElementById('answer-text').textContent") == expected.text

            browser.click("allow-no-answer")
            browser.click("submit")
            assert browser.wait_for(SHOWN) == "no-answer"
            assert browser.evaluate("document.querySelectorAll('#result mark').length") == 0
            assert "لا توجد إجابة" in browser.evaluate("document.getElementById('status').textContent")
        finally:
            browser.close()


@pytest.mark.slow  # over a CPU second: the quick loop keeps this file's cheaper tests
def test_the_page_asks_the_collection_and_highlights_the_answer_in_its_passage(tmp_path):
    from arabert_pipeline import Index, Pipeline

    # The answer's passage is not at the start of its document and holds an emoji before the answer: the page must
    # place the answer by code points, relative to the passage.
    document = FILLER[0] + "\n" + "😀 " + PETRA
    path = tmp_path / "index"
    Index.build([document, NILE], ids=["petra-doc", "nile"], titles=["البتراء", None], path=path, passage_chars=150)
    question = "أين تقع البتراء؟"
    expected = Pipeline("arabert").answer(question, index=Index.open(path))
    passage = expected.passage
    shown = document[passage.start:passage.end]
    assert expected.document == "petra-doc" and passage.start > 0 and shown.startswith("😀")
    with LoopbackServer(lambda: Pipeline("arabert"), index=functools.partial(Index.open, path)) as server:
        server.wait_ready()
        browser = Browser(tmp_path / "profile")
        try:
            browser.open(server.url + "/")
            assert browser.evaluate("document.getElementById('mode-collection').checked") is True  # by default
            assert browser.evaluate("document.getElementById('context-field').hidden") is True
            browser.type_into("question", question)
            browser.click("submit")
            assert browser.wait_for(SHOWN) == "answered"
            assert browser.evaluate("[...document.querySelectorAll('#result mark')].map(m => m.textContent)") == \
                [expected.text]
            before = browser.evaluate("document.querySelector('#result mark').previousSibling.textContent")
            assert before == shown[: expected.start - passage.start]
            assert browser.evaluate("document.getElementById('result').textContent") == shown
            assert browser.evaluate("document.getElementById('source-title').textContent") == "البتراء"
            assert browser.evaluate("document.getElementById('source-id').textContent") == "(petra-doc)"
            assert float(browser.evaluate("document.getElementById('score').dataset.score")) == expected.score

            browser.type_into("question", "ما لون السماء؟")  # no term of it in the collection: no answer
            browser.click("submit")
            assert browser.wait_for(SHOWN) == "no-answer"
            assert "لا توجد إجابة في الوثائق" in browser.evaluate("document.getElementById('status').textContent")
            assert browser.evaluate("document.getElementById('result').hidden") is True

            browser.click("mode-text")  # a pasted text is still asked, as without an index
            assert browser.evaluate("document.getElementById('context-field').hidden") is False
            browser.type_into("context", NILE)
            browser.type_into("question", "كم يبلغ طول نهر النيل؟")
            browser.click("submit")
            assert browser.wait_for(SHOWN) == "answered"
            assert browser.evaluate("document.getElementById('result').textContent") == NILE
            assert browser.evaluate("document.getElementById('source').hidden") is True
        finally:
            browser.close()

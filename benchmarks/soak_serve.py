"""A bounded soak of `arabert-pipeline serve`: hostile and slow clients beside normal ones (issue 37), on the QA and the
text tasks' routes, with token-dense texts among the normal ones (issue 52).

    python benchmarks/soak_serve.py                                  # the shipped models, 120 s, ARCD-test questions
    python benchmarks/soak_serve.py --seconds 600 --json soak.json

The server is the real command (`arabert-pipeline serve --port 0`) on the loopback interface, in its own process,
with 1-second deadlines, a limit of 64 connections and a queue of --max-queue-tokens (20,000: minutes of work, not the
default's hours on a busy 2-core machine), so that the hostile clients meet every limit many times. --normal clients
take turns on /v1/answer (ARCD-test questions), /v1/tag and /v1/classify (ARCD-test contexts' first 400 characters),
one request after the other (a 503 is retried after its Retry-After, as a client should). --dense clients send text
where every character is a token ("ب.", "a.b.", "و+", "1." repeated) to the three routes: short texts whose answers are
checked, texts of ~6,000 tokens that hold the worker (each a new text, so that nothing is answered from a cache), and
texts of --max-context-chars, more tokens than the whole queue, which must be refused with 413. A --distinct client
sends contexts of ~95,000 characters that cost a few tokens (emoji around a sentence), each one new: what the server
keeps of each context would show in its memory. One thread of each hostile kind runs in a loop:

    idle            connects and sends nothing
    drip            sends a request's head a byte every 0.2 s
    half body       sends the head and 10 bytes of the body
    chunked         an unterminated chunked body
    hang up         sends a request with a 20,000-character context and closes at once
    hang up queued  sends one, waits until it is queued, then closes
    cross-origin    a text/plain POST from http://attacker.example, as a web page would send it
    wrong host      a request for Host: attacker.example (DNS rebinding)
    long question   a 100,000-character question
    garbage         random bytes
    burst           every 5 s, 80 connections at once (past the limit), held 2 s

Checked (exit status 1 when one fails): every normal and short dense answer equals the pipeline's for the same input,
computed in this process beforehand (text, offsets and score: bitwise on the ONNX backend); every request of
--max-context-chars of dense text gets 413; the answered requests in flight at any time hold at most
--max-queue-tokens tokens of work and half as much again (counted here with the models' tokenizers, +16 a text;
requests being read, counted or written are in flight but not queued), and one request more; no answered request took
longer than the limits promise: the queue holds at most --max-queue-tokens tokens of work, ahead of a request and its
own included, so it is answered within that work at the slowest pace (seconds per token, its tokens counted here with
the model's tokenizer, +16 a text) measured beforehand on this run's texts, times --slack; the server's resident
memory (VmRSS, sampled every second) grows by at most --max-growth-mb from the second fifth of the run to the last
(the median of each fifth's samples: a long or dense request's working memory comes and goes within seconds, freed,
and is no growth); its log stays under --max-log-lines; no 5xx other than 503 reaches a normal or dense client.
Reported: the requests of each kind and their statuses, the slowest answer of each kind against the bound, the memory
samples, the log's size. Run by hand, not in CI (the suite's tests/test_serve_hostile.py runs the same mix for a few
seconds against an in-process server, and tests/test_serve_limits.py the limits at their values).
"""
from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HOSTILE = ("idle", "drip", "half body", "chunked", "hang up", "hang up queued", "cross-origin", "wrong host",
           "long question", "garbage", "burst")
ROUTES = {"answer": "/v1/answer", "tag": "/v1/tag", "classify": "/v1/classify"}
# Every character a token (after arabertv02's spacing of punctuation): the texts a characters / 3 estimate of work
# under-counted 3-4.5 times.
DENSE_UNITS = ("ب.", "a.b.", "و+", "1.")
DENSE_QUESTION = "ما هذا؟"
PAIR_OVERHEAD = 16  # docs/answering.md: the work of a text besides its tokens


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/PID/status")


def post(port: int, body: bytes, headers: dict[str, str] | None = None, timeout: float = 600,
         path: str = "/v1/answer"):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", path, body=body,
                           headers={"Content-Type": "application/json", **(headers or {})})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def metrics(port: int) -> dict[str, float]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\S+) (\S+)$", text, re.MULTILINE)
            if not m.group(1).startswith("#")}


def token_counter(tokenizer, preprocessing: str):
    """The tokens a loaded model's tokenizer makes of a text after its preprocessing, counted here with the tokenizers
    library on a copy (not with the server's code): the work the pace and the bound are measured in."""
    from tokenizers import Tokenizer

    from arabert_pipeline.preprocess import Preprocessor

    backend = getattr(tokenizer, "backend_tokenizer", None) or tokenizer.backend  # transformers' or the package's
    tokenizer = Tokenizer.from_str(backend.to_str())
    tokenizer.no_truncation()
    preprocess = (lambda text: text) if preprocessing == "none" else Preprocessor(preprocessing).preprocess
    return lambda text: len(tokenizer.encode(preprocess(text), add_special_tokens=False).ids) if text else 0


def dumps(value) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def response_json(route: str, found) -> dict:
    """What the route answers for one input, from the pipeline's own result."""
    if route == "answer":
        return {"answers": [] if found is None else [{"text": found.text, "start": found.start, "end": found.end,
                                                      "score": found.score}]}
    return {"entities": found} if route == "tag" else {"labels": found}


class Soak:
    def __init__(self, port: int, cases: list[tuple[str, bytes, dict, int]], dense: list[tuple[str, bytes, dict, int]],
                 stop: threading.Event, max_context_chars: int, cost_of):
        self.port, self.cases, self.dense_cases, self.stop = port, cases, dense, stop
        self.max_context_chars, self.cost_of = max_context_chars, cost_of
        self.answered: list[tuple[float, float, int]] = []  # (sent, answered, tokens of work) of each 200
        self.statuses: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.mismatches: list[str] = []
        self.normal_answers = 0
        self.dense_answers = 0
        self.latencies: dict[str, list[float]] = collections.defaultdict(list)  # kind → seconds of each 200
        self.lock = threading.Lock()

    def ask(self, kind: str, route: str, body: bytes, cost: int) -> tuple[int | str, bytes]:
        """The request until it is not 503 (after Retry-After), at most 30 tries; each 200's time and work (`cost`,
        counted here) are recorded."""
        status, data = None, b""
        for _ in range(30):
            started = time.monotonic()
            try:
                status, headers, data = post(self.port, body, path=ROUTES[route])
            except OSError as exc:  # refused at the connection limit before the request was read
                self.statuses[kind][type(exc).__name__] += 1
                time.sleep(0.5)
                continue
            self.statuses[kind][status] += 1
            if status == 200:
                with self.lock:
                    self.latencies[kind].append(time.monotonic() - started)
                    self.answered.append((started, time.monotonic(), cost))
            if status != 503 or self.stop.is_set():
                break
            time.sleep(float(headers.get("Retry-After", 1)))
        return status, data

    def check(self, name: str, status, data: bytes, expected: dict) -> bool:
        if status == 503:  # still busy after its retries, or the soak stopping: no answer, and none wrong
            return False
        if status != 200:
            self.mismatches.append(f"{name}: status {status}: {data[:200]!r}")
        elif json.loads(data) != expected:
            self.mismatches.append(f"{name}: {json.loads(data)} != {expected}")
        else:
            return True
        return False

    def head(self, length: int | None = None, content_type: str = "application/json", extra: str = "") -> bytes:
        lines = ["POST /v1/answer HTTP/1.1", f"Host: 127.0.0.1:{self.port}", f"Content-Type: {content_type}"]
        if length is not None:
            lines.append(f"Content-Length: {length}")
        return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()

    def normal(self, k: int) -> None:
        i = k
        while not self.stop.is_set():
            index = i % len(self.cases)
            i += 7
            route, body, expected, cost = self.cases[index]
            status, data = self.ask("normal", route, body, cost)
            self.normal_answers += self.check(f"{route} {index}", status, data, expected)

    def dense(self, k: int) -> None:
        """Short dense texts (answers checked), ~6,000-token ones (each new), and ones of max_context_chars (413)."""
        i = k
        while not self.stop.is_set():
            unit = DENSE_UNITS[i % len(DENSE_UNITS)]
            route = list(ROUTES)[(i // len(DENSE_UNITS)) % len(ROUTES)]
            step = i % 4
            i += 1
            if step == 0:
                route, body, expected, cost = self.dense_cases[i % len(self.dense_cases)]
                status, data = self.ask("dense short", route, body, cost)
                self.dense_answers += self.check(f"dense {route} {body[:40]!r}", status, data, expected)
                continue
            if step in (1, 2):
                text = unit * (6000 // len(unit)) + f" {i}"
                kind = "dense long"
            else:
                text = (unit * self.max_context_chars)[: self.max_context_chars]
                kind = "dense over the queue"
            body = dumps({"question": DENSE_QUESTION, "context": text} if route == "answer" else {"text": text})
            status, data = self.ask(kind, route, body, self.cost_of(route, text, DENSE_QUESTION))
            if kind == "dense over the queue" and status != 413:
                self.mismatches.append(f"{route}: {len(text):,} characters of {unit!r}: status {status}, not 413")

    def distinct(self) -> None:
        """New contexts of ~95,000 characters that cost a few tokens: what the server keeps of each would grow."""
        i = 0
        while not self.stop.is_set():
            i += 1
            context = "😀" * 95_000 + f" في هذا النص كلمة رقم {i} فقط."
            self.ask("distinct", "answer", dumps({"question": DENSE_QUESTION, "context": context}),
                     self.cost_of("answer", context, DENSE_QUESTION))

    def most_work_in_flight(self) -> int:
        """The most tokens of work of answered requests sent and not yet answered at one time: what the queue held,
        give or take the requests being read or written."""
        events = sorted([(sent, cost) for sent, _, cost in self.answered] +
                        [(answered, -cost) for _, answered, cost in self.answered])
        most = held = 0
        for _, change in events:
            held += change
            most = max(most, held)
        return most

    def hostile(self, kind: str) -> None:
        long_context = json.dumps({"question": "ما هذا؟", "context": "نص طويل جدا. " * 1540},
                                  ensure_ascii=False).encode()
        body = self.cases[0][1]  # a question of ARCD-test
        while not self.stop.wait(0.1):
            try:
                if kind == "burst":
                    sockets = []
                    for _ in range(80):
                        sockets.append(socket.create_connection(("127.0.0.1", self.port), timeout=10))
                    time.sleep(2)
                    for sock in sockets:
                        sock.close()
                    self.statuses[kind]["bursts"] += 1
                    self.stop.wait(3)
                    continue
                if kind == "long question":
                    status, _, _ = post(self.port, json.dumps({"question": "س" * 100_000, "context": "نص"}).encode())
                    self.statuses[kind][status] += 1
                    continue
                if kind == "wrong host":
                    self.statuses[kind][post(self.port, body, {"Host": f"attacker.example:{self.port}"})[0]] += 1
                    continue
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
                if kind == "idle":
                    pass
                elif kind == "drip":
                    for byte in self.head(len(body)):
                        sock.send(bytes([byte]))
                        if self.stop.wait(0.2):
                            break
                elif kind == "half body":
                    sock.sendall(self.head(len(body)) + body[:10])
                elif kind == "chunked":
                    sock.sendall(self.head(extra="Transfer-Encoding: chunked\r\n") + b"10\r\n" + body[:16] + b"\r\n")
                elif kind == "hang up":
                    sock.sendall(self.head(len(long_context)) + long_context)
                    sock.close()
                    self.statuses[kind]["sent"] += 1
                    continue
                elif kind == "hang up queued":
                    sock.sendall(self.head(len(long_context)) + long_context)
                    time.sleep(0.3)
                    sock.close()
                    self.statuses[kind]["sent"] += 1
                    continue
                elif kind == "cross-origin":
                    sock.sendall(self.head(len(body), "text/plain", "Origin: http://attacker.example\r\n") + body)
                elif kind == "garbage":
                    sock.sendall(os.urandom(500))
                data = b""
                while chunk := sock.recv(65536):
                    data += chunk
                sock.close()
                status = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/1.1 ") else "closed"
                self.statuses[kind][status] += 1
            except OSError as exc:
                self.statuses[kind][type(exc).__name__] += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="arabert", help="bundled model name or QA model dir (default: %(default)s)")
    parser.add_argument("--dataset", default="arcd-test", help="SQuAD-format set (default: %(default)s)")
    parser.add_argument("--questions", type=int, default=100, help="questions asked round-robin (default: %(default)s)")
    parser.add_argument("--tag-model", default="arabert-ner", help="/v1/tag's model (default: %(default)s)")
    parser.add_argument("--classify-model", default="arabert-sentiment",
                        help="/v1/classify's model (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=120, help="length of the soak (default: %(default)s)")
    parser.add_argument("--normal", type=int, default=4, help="normal clients (default: %(default)s)")
    parser.add_argument("--dense", type=int, default=12,
                        help="clients of token-dense texts, enough to fill the queue (default: %(default)s)")
    parser.add_argument("--max-queue-tokens", type=int, default=20_000,
                        help="the server's --max-queue-tokens (default: %(default)s)")
    parser.add_argument("--max-context-chars", type=int, default=100_000,
                        help="the server's --max-context-chars (default: %(default)s)")
    parser.add_argument("--slack", type=float, default=3.0,
                        help="an answer may take this many times the queue's work at the slowest pace measured "
                             "(default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS on both sides (default: %(default)s)")
    parser.add_argument("--max-growth-mb", type=float, default=50.0, help="allowed RSS growth (default: %(default)s)")
    parser.add_argument("--max-log-lines", type=int, default=200, help="allowed log lines (default: %(default)s)")
    parser.add_argument("--json", help="write the report here")
    args = parser.parse_args()

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    from arabert_pipeline import Pipeline
    from arabert_pipeline.qa.data import read_squad

    questions = read_squad(args.dataset, misaligned="keep").examples[: args.questions]
    models = {"answer": Pipeline(args.model), "tag": Pipeline(args.tag_model, max_chars=args.max_context_chars),
              "classify": Pipeline(args.classify_model, max_chars=args.max_context_chars)}
    tokenizers = {"answer": models["answer"].qa.tokenizer, "tag": models["tag"].model.tokenizer,
                  "classify": models["classify"].model.tokenizer}
    counters = {route: token_counter(tokenizers[route], models[route].preprocessing) for route in ROUTES}
    paces = {}  # (route, kind) → the slowest seconds per token of work seen in this process

    def cost_of(route: str, text: str, question: str = "") -> int:
        """A request's work as the queue promises to bound it: its tokens, the special ones and 16."""
        count = counters[route]
        return (count(question) + count(text) + 3 if route == "answer" else count(text) + 2) + PAIR_OVERHEAD

    def reference(route: str, kind: str, text: str, question: str = ""):
        """The pipeline's answer to one input, as the route writes it, the request's body and its work; the pace
        noted."""
        cost = cost_of(route, text, question)
        started = time.perf_counter()
        found = models[route].answer(question, text) if route == "answer" else models[route](text)
        paces[route, kind] = max(paces.get((route, kind), 0.0), (time.perf_counter() - started) / cost)
        body = {"question": question, "context": text} if route == "answer" else {"text": text}
        return route, dumps(body), response_json(route, found), cost

    # The sequential references: one input at a time.
    cases = [reference("answer", "normal", e["context"], e["question"]) for e in questions]
    texts = list(dict.fromkeys(e["context"][:400] for e in questions))
    cases += [reference(route, "normal", text) for route in ("tag", "classify") for text in texts]
    dense = [reference(route, "dense short", unit * (600 // len(unit)), DENSE_QUESTION if route == "answer" else "")
             for route in ROUTES for unit in DENSE_UNITS]
    for route in ROUTES:  # a pace over many windows and pieces, as the long dense texts have them
        for unit in ("ب.", "و+"):
            reference(route, "dense long", unit * (3000 // len(unit)), DENSE_QUESTION if route == "answer" else "")
    slowest = max(paces.values())
    bound = args.max_queue_tokens * slowest * args.slack + 2.0

    log_file = Path(tempfile.mkstemp(prefix="soak-serve-", suffix=".log")[1])
    command = [sys.executable, "-m", "arabert_pipeline.cli", "serve", "--model", args.model, "--port", "0",
               "--tag-model", args.tag_model, "--classify-model", args.classify_model,
               "--timeout-headers", "1", "--timeout-body", "1", "--timeout-keep-alive", "1",
               "--max-connections", "64", "--shutdown-timeout", "2", "--max-queue-tokens", str(args.max_queue_tokens),
               "--max-context-chars", str(args.max_context_chars)]
    with log_file.open("w") as log:
        server = subprocess.Popen(command, stderr=log, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 120
        while not (match := re.search(r"serving on http://127\.0\.0\.1:(\d+)/", log_file.read_text())):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: {log_file.read_text()}")
            time.sleep(0.1)
        port = int(match.group(1))
        while metrics(port).get("arabert_serve_ready") != 1:
            time.sleep(0.1)
        start_lines = len(log_file.read_text().splitlines())

        stop = threading.Event()
        soak = Soak(port, cases, dense, stop, args.max_context_chars, cost_of)
        threads = [threading.Thread(target=soak.normal, args=(k,)) for k in range(args.normal)]
        threads += [threading.Thread(target=soak.dense, args=(k,)) for k in range(args.dense)]
        threads.append(threading.Thread(target=soak.distinct))
        threads += [threading.Thread(target=soak.hostile, args=(kind,), daemon=True) for kind in HOSTILE]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        memory = []
        while time.monotonic() - started < args.seconds:
            memory.append((round(time.monotonic() - started, 1), round(rss_mb(server.pid), 1)))
            time.sleep(1)
        stop.set()
        for thread in threads:  # a client in a model call is answered within the bound
            thread.join(bound + 60)
        final = metrics(port)
    finally:
        server.terminate()
        server.wait(60)
    log_text = log_file.read_text()
    log_lines = len(log_text.splitlines()) - start_lines
    fifth = max(1, len(memory) // 5)
    warm = statistics.median(m for _, m in memory[fifth : 2 * fifth])
    settled = statistics.median(m for _, m in memory[-fifth:])
    growth = settled - warm
    report = {
        "seconds": args.seconds, "normal_clients": args.normal, "dense_clients": args.dense,
        "normal_answers": soak.normal_answers, "dense_short_answers": soak.dense_answers,
        "mismatches": soak.mismatches[:20], "statuses": {k: dict(v) for k, v in soak.statuses.items()},
        "max_queue_tokens": args.max_queue_tokens,
        "pace_s_per_token": {f"{route} {kind}": round(pace, 6) for (route, kind), pace in paces.items()},
        "bound_s": round(bound, 1),
        "most_work_in_flight": soak.most_work_in_flight(),
        "largest_answered_work": max((cost for _, _, cost in soak.answered), default=0),
        "slowest_answer_s": {kind: round(max(times), 2) for kind, times in soak.latencies.items()},
        "rss_mb": {"second_fifth_median": warm, "last_fifth_median": settled, "end": memory[-1][1],
                   "max": max(m for _, m in memory),
                   "growth": round(growth, 1), "samples": memory},
        "log": {"lines": log_lines, "bytes": len(log_text.encode()), "tracebacks": log_text.count("Traceback")},
        "metrics": {k: v for k, v in final.items() if "hangups" in k or "abandoned" in k or "rejected" in k
                    or ("errors_total" in k)},
    }
    print(json.dumps({k: v for k, v in report.items() if k != "rss_mb"} | {
        "rss_mb": {k: v for k, v in report["rss_mb"].items() if k != "samples"}}, ensure_ascii=False, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    failures = []
    if soak.mismatches:
        failures.append(f"{len(soak.mismatches)} answers differ from the sequential loop's or failed")
    if not soak.normal_answers or not soak.dense_answers:
        failures.append(f"{soak.normal_answers} normal and {soak.dense_answers} short dense answers")
    # Requests being read, counted or written are in flight but not in the queue: half the queue again and one request
    # more allowed (the characters / 3 estimate this guards against let 4 times the queue through).
    allowed = args.max_queue_tokens * 3 // 2 + report["largest_answered_work"]
    if report["most_work_in_flight"] > allowed:
        failures.append(f"{report['most_work_in_flight']:,} tokens of work answered at once, more than the queue's "
                        f"{args.max_queue_tokens:,} allow ({allowed:,} with the requests on the wire)")
    held = {kind: max(times) for kind, times in soak.latencies.items() if max(times) > bound}
    if held:
        failures.append(f"answers held longer than the queue's {args.max_queue_tokens:,} tokens of work take at the "
                        f"slowest pace ({bound:.0f} s): {held}")
    if growth > args.max_growth_mb:
        failures.append(f"RSS grew {growth:.0f} MB (allowed {args.max_growth_mb:.0f})")
    if log_lines > args.max_log_lines or report["log"]["tracebacks"]:
        failures.append(f"the log: {log_lines} lines, {report['log']['tracebacks']} tracebacks")
    bad = [(kind, s) for kind in ("normal", "dense short", "dense long", "dense over the queue", "distinct")
           for s in soak.statuses[kind] if isinstance(s, int) and s >= 500 and s != 503]
    if bad:
        failures.append(f"clients got {bad}")
    print("\n".join(failures) or f"passed: {soak.normal_answers} normal and {soak.dense_answers} short dense answers "
                                  f"equal to the sequential loop's, none held past {bound:.0f} s, "
                                  f"RSS (medians) {warm:.0f} → {settled:.0f} MB, {log_lines} log lines")
    log_file.unlink()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

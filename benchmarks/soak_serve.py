"""A bounded soak of `arabert-pipeline serve`: hostile and slow clients beside normal ones (issue 37).

    python benchmarks/soak_serve.py                                  # the shipped model, 60 s, ARCD-test questions
    python benchmarks/soak_serve.py --seconds 600 --json soak.json

The server is the real command (`arabert-pipeline serve --port 0`) in its own process, with 1-second deadlines and a
limit of 64 connections, so that the hostile clients meet every limit many times. Beside --normal clients asking
ARCD-test questions one after the other (a 503 is retried after its Retry-After, as a client should), one thread of
each hostile kind runs in a loop:

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

Checked (exit status 1 when one fails): every normal answer equals `Pipeline.answer`'s for the same question, computed
in this process beforehand (text, offsets and score: bitwise on the ONNX backend); the server's resident memory
(VmRSS, sampled every second) grows by at most --max-growth-mb between the end of the first fifth of the run and the
end; its log stays under --max-log-lines; no 5xx other than 503 reaches a normal client. Reported: the requests of each
kind and their statuses, the memory samples, the log's size. Run by hand, not in CI (the suite's
tests/test_serve_hostile.py runs the same mix for a few seconds against an in-process server).
"""
from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import re
import socket
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


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/PID/status")


def post(port: int, body: bytes, headers: dict[str, str] | None = None, timeout: float = 120):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", "/v1/answer", body=body,
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


class Soak:
    def __init__(self, port: int, bodies: list[bytes], expected: list, stop: threading.Event):
        self.port, self.bodies, self.expected, self.stop = port, bodies, expected, stop
        self.statuses: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.mismatches: list[str] = []
        self.normal_answers = 0

    def head(self, length: int | None = None, content_type: str = "application/json", extra: str = "") -> bytes:
        lines = ["POST /v1/answer HTTP/1.1", f"Host: 127.0.0.1:{self.port}", f"Content-Type: {content_type}"]
        if length is not None:
            lines.append(f"Content-Length: {length}")
        return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()

    def normal(self, k: int) -> None:
        i = k
        while not self.stop.is_set():
            index = i % len(self.bodies)
            i += 7
            status, data = None, b""
            for _ in range(30):
                try:
                    status, headers, data = post(self.port, self.bodies[index])
                except OSError as exc:  # refused at the connection limit before the request was read
                    self.statuses["normal"][type(exc).__name__] += 1
                    time.sleep(0.5)
                    continue
                self.statuses["normal"][status] += 1
                if status != 503:
                    break
                time.sleep(float(headers.get("Retry-After", 1)))
            if status != 200:
                self.mismatches.append(f"question {index}: status {status}: {data[:200]!r}")
            elif json.loads(data)["answers"] != self.expected[index]:
                self.mismatches.append(f"question {index}: {json.loads(data)['answers']} != {self.expected[index]}")
            else:
                self.normal_answers += 1

    def hostile(self, kind: str) -> None:
        long_context = json.dumps({"question": "ما هذا؟", "context": "نص طويل جدا. " * 1540},
                                  ensure_ascii=False).encode()
        body = self.bodies[0]
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
    parser.add_argument("--seconds", type=float, default=60, help="length of the soak (default: %(default)s)")
    parser.add_argument("--normal", type=int, default=4, help="normal clients (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS on both sides (default: %(default)s)")
    parser.add_argument("--max-growth-mb", type=float, default=50.0, help="allowed RSS growth (default: %(default)s)")
    parser.add_argument("--max-log-lines", type=int, default=200, help="allowed log lines (default: %(default)s)")
    parser.add_argument("--json", help="write the report here")
    args = parser.parse_args()

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    from arabert_pipeline import Pipeline
    from arabert_pipeline.qa.data import read_squad

    questions = read_squad(args.dataset, misaligned="keep").examples[: args.questions]
    bodies = [json.dumps({"question": e["question"], "context": e["context"]}, ensure_ascii=False).encode()
              for e in questions]
    pipeline = Pipeline(args.model)
    expected = []
    for e in questions:  # the sequential reference: one question at a time
        found = pipeline.answer(e["question"], e["context"])
        expected.append([] if found is None else [{"text": found.text, "start": found.start, "end": found.end,
                                                   "score": found.score}])

    log_file = Path(tempfile.mkstemp(prefix="soak-serve-", suffix=".log")[1])
    command = [sys.executable, "-m", "arabert_pipeline.cli", "serve", "--model", args.model, "--port", "0",
               "--timeout-headers", "1", "--timeout-body", "1", "--timeout-keep-alive", "1",
               "--max-connections", "64", "--shutdown-timeout", "2"]
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
        soak = Soak(port, bodies, expected, stop)
        threads = [threading.Thread(target=soak.normal, args=(k,)) for k in range(args.normal)]
        threads += [threading.Thread(target=soak.hostile, args=(kind,), daemon=True) for kind in HOSTILE]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        memory = []
        while time.monotonic() - started < args.seconds:
            memory.append((round(time.monotonic() - started, 1), round(rss_mb(server.pid), 1)))
            time.sleep(1)
        stop.set()
        for thread in threads:
            thread.join(60)
        final = metrics(port)
    finally:
        server.terminate()
        server.wait(60)
    log_text = log_file.read_text()
    log_lines = len(log_text.splitlines()) - start_lines
    warm = memory[len(memory) // 5][1]
    growth = memory[-1][1] - warm
    report = {
        "seconds": args.seconds, "normal_clients": args.normal, "normal_answers": soak.normal_answers,
        "mismatches": soak.mismatches[:20], "statuses": {k: dict(v) for k, v in soak.statuses.items()},
        "rss_mb": {"after_first_fifth": warm, "end": memory[-1][1], "max": max(m for _, m in memory),
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
        failures.append(f"{len(soak.mismatches)} normal answers differ from the sequential loop's or failed")
    if not soak.normal_answers:
        failures.append("no normal answer")
    if growth > args.max_growth_mb:
        failures.append(f"RSS grew {growth:.0f} MB (allowed {args.max_growth_mb:.0f})")
    if log_lines > args.max_log_lines or report["log"]["tracebacks"]:
        failures.append(f"the log: {log_lines} lines, {report['log']['tracebacks']} tracebacks")
    bad = [s for s in soak.statuses["normal"] if isinstance(s, int) and s >= 500 and s != 503]
    if bad:
        failures.append(f"normal clients got {bad}")
    print("\n".join(failures) or f"passed: {soak.normal_answers} normal answers equal to the sequential loop's, "
                                  f"RSS {warm:.0f} → {memory[-1][1]:.0f} MB, {log_lines} log lines")
    log_file.unlink()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

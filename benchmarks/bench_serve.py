"""`arabert-pipeline serve` under load, against the sequential `Pipeline.answer` loop on the same questions.

    python benchmarks/bench_serve.py                                   # the shipped model, ARCD-test questions
    python benchmarks/bench_serve.py --concurrency 1 4 16 64 --requests 1000 --total 10000 --json serve.json

The server is the real command (`arabert-pipeline serve --port 0`) in its own process; the clients are this process's
asyncio tasks on the loopback interface, each with one keep-alive HTTP/1.1 connection, each sending its share of a
fixed number of requests one after the other (a closed loop: at most `c` requests in flight at concurrency c). The
questions go round-robin through the first --questions of the data set.

Reported:
- the sequential loop: `Pipeline.answer(question, context)` one question at a time, in this process, before the
  server starts and again after it stops (the machine's load drifts; the ratio is taken against the faster of the
  two, so it is the conservative one);
- per concurrency: throughput (requests/s over the level's wall time), p50/p99 latency (request sent → response
  read), errors (a non-200 status or a broken connection), and how many answers equal the sequential loop's
  (text, start, end and score: bitwise on the ONNX backend);
- the server's resident memory (VmRSS) after a warm-up and after --total requests in all (the last ones at
  --soak-concurrency), and the batch sizes it ran (from its /metrics).
Thread settings: both sides run ONNX Runtime with the same $OMP_NUM_THREADS (--threads sets it; unset, ONNX Runtime
takes one thread per core). Run by hand, not in CI.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from arabert_pipeline.serve.limits import ServeLimits  # noqa: E402 (light: no model, no numpy)

DEFAULTS = ServeLimits()


class Connection:
    """A keep-alive HTTP/1.1 connection that POSTs JSON: far cheaper per request than a general client, so that the
    load generator, which shares the machine's cores with the server, takes as little of them as it can."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader = self.writer = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode("ascii")
        self.writer.write(head + body)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        length, close = 0, False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
            elif name.strip().lower() == "connection" and value.strip().lower() == "close":
                close = True
        data = await self.reader.readexactly(length)
        if close:
            await self.close()
        return status, data

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(ConnectionError):  # the server may have closed first
                await self.writer.wait_closed()
            self.reader = self.writer = None


async def run_level(host: str, port: int, bodies: list[bytes], expected: list, concurrency: int,
                    requests: int) -> dict:
    """`concurrency` clients, `requests` requests in all (each client its share), questions round-robin."""
    latencies, errors, identical = [], 0, 0
    shares = [requests // concurrency + (i < requests % concurrency) for i in range(concurrency)]
    next_question = 0

    async def client(share: int) -> None:
        nonlocal errors, identical, next_question
        connection = Connection(host, port)
        try:
            for _ in range(share):
                index = next_question % len(bodies)
                next_question += 1
                started = time.perf_counter()
                try:
                    status, data = await connection.post("/v1/answer", bodies[index])
                except (ConnectionError, asyncio.IncompleteReadError, ValueError):
                    errors += 1
                    await connection.close()
                    continue
                latencies.append(time.perf_counter() - started)
                if status != 200:
                    errors += 1
                    continue
                identical += json.loads(data)["answers"] == expected[index]
        finally:
            await connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(client(share) for share in shares))
    seconds = time.perf_counter() - started
    return {"concurrency": concurrency, "requests": requests, "seconds": seconds, "throughput": requests / seconds,
            "p50_ms": 1000 * percentile(latencies, 50), "p99_ms": 1000 * percentile(latencies, 99),
            "errors": errors, "identical": identical}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]  # nearest rank


def sequential(pipeline, questions: list[dict]) -> dict:
    latencies, answers = [], []
    started, cpu = time.perf_counter(), time.process_time()
    for e in questions:
        t = time.perf_counter()
        found = pipeline.answer(e["question"], e["context"])
        latencies.append(time.perf_counter() - t)
        answers.append([] if found is None else
                       [{"text": found.text, "start": found.start, "end": found.end, "score": found.score}])
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"questions": len(questions), "seconds": seconds, "throughput": len(questions) / seconds,
            "p50_ms": 1000 * percentile(latencies, 50), "p99_ms": 1000 * percentile(latencies, 99),
            "cpu_ms_per_answer": 1000 * cpu / len(questions), "answers": answers}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its threads so far: unlike wall time, barely moved by other jobs on
    the machine, so it compares the server's work per answer with the loop's."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/PID/status")


def get(url: str) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except (urllib.error.URLError, ConnectionError):
        return 0, ""


def start_server(args, env) -> tuple[subprocess.Popen, str, int]:
    command = [sys.executable, "-m", "arabert_pipeline.cli", "serve", "--model", args.model, "--port", "0",
               "--max-wait-ms", str(args.max_wait_ms), "--max-batch-tokens", str(args.max_batch_tokens)]
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    line = process.stderr.readline()
    match = re.search(r"serving on http://([\d.]+):(\d+)/", line)
    if not match:
        process.kill()
        raise RuntimeError(f"the server did not start: {line}{process.stderr.read()}")
    host, port = match.group(1), int(match.group(2))
    deadline = time.monotonic() + 120
    while get(f"http://{host}:{port}/health")[0] != 200:
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the server did not get ready: {process.stderr.read()}")
        time.sleep(0.05)
    return process, host, port


def batch_sizes(url: str, since: dict | None = None) -> dict:
    """Model calls and pairs so far (from /metrics), or since an earlier reading; with the mean pairs per call."""
    _, text = get(url + "/metrics")
    samples = {k: float(v) for k, v in re.findall(r'^arabert_serve_batch_pairs_(sum|count) (\S+)$', text, re.MULTILINE)}
    batches = samples.get("count", 0.0) - (since or {}).get("batches", 0)
    pairs = samples.get("sum", 0.0) - (since or {}).get("pairs", 0)
    return {"batches": int(batches), "pairs": int(pairs), "mean_pairs": pairs / batches if batches else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="arabert", help="bundled model name or QA model dir (default: %(default)s)")
    parser.add_argument("--dataset", default="arcd-test", help="SQuAD-format set, or 'demo' for the bundled questions")
    parser.add_argument("--questions", type=int, default=200, help="distinct questions, first N (default: %(default)s)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--requests", type=int, default=1000, help="requests per concurrency level")
    parser.add_argument("--total", type=int, default=10_000,
                        help="requests in all before the last memory reading; the rest after the levels, at "
                             "--soak-concurrency (default: %(default)s)")
    parser.add_argument("--soak-concurrency", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=50, help="requests before the first memory reading")
    parser.add_argument("--max-wait-ms", type=float, default=DEFAULTS.max_wait_ms, help="the server's (its default)")
    parser.add_argument("--max-batch-tokens", type=int, default=DEFAULTS.max_batch_tokens,
                        help="the server's (its default)")
    parser.add_argument("--threads", type=int, help="$OMP_NUM_THREADS for the server and the loop (default: as set)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()

    if args.threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before this process's session exists
    from arabert_pipeline import Pipeline

    if args.dataset == "demo":
        from arabert_pipeline.pipeline.cli import read_demo

        questions = read_demo()[: args.questions]
    else:
        from arabert_pipeline.qa.data import read_squad

        questions = read_squad(args.dataset, misaligned="keep").examples[: args.questions]
    bodies = [json.dumps({"question": e["question"], "context": e["context"]}, ensure_ascii=False).encode()
              for e in questions]

    pipeline = Pipeline(args.model)
    for e in questions[:5]:
        pipeline.answer(e["question"], e["context"])
    before = sequential(pipeline, questions)
    expected = before.pop("answers")
    print(f"sequential Pipeline.answer ({pipeline.backend}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}): "
          f"{before['throughput']:.1f} q/s, p50 {before['p50_ms']:.1f} ms, p99 {before['p99_ms']:.1f} ms, "
          f"CPU {before['cpu_ms_per_answer']:.2f} ms/answer", flush=True)

    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    process, host, port = start_server(args, env)
    url = f"http://{host}:{port}"
    levels, memory = [], {}
    try:
        asyncio.run(run_level(host, port, bodies, expected, 4, args.warmup))
        memory["after_warmup_mb"] = rss_mb(process.pid)
        batches_so_far = batch_sizes(url)
        done = args.warmup
        for concurrency in args.concurrency:
            cpu, client_cpu = cpu_seconds(process.pid), time.process_time()
            level = asyncio.run(run_level(host, port, bodies, expected, concurrency, args.requests))
            level["cpu_ms_per_answer"] = 1000 * (cpu_seconds(process.pid) - cpu) / args.requests
            level["client_cpu_ms_per_request"] = 1000 * (time.process_time() - client_cpu) / args.requests
            done += args.requests
            level["rss_mb"] = rss_mb(process.pid)
            level.update(batch_sizes(url, since=batches_so_far))
            batches_so_far = batch_sizes(url)
            levels.append(level)
            print(f"  c={concurrency:3d}: {level['throughput']:6.1f} req/s, p50 {level['p50_ms']:7.1f} ms, "
                  f"p99 {level['p99_ms']:7.1f} ms, errors {level['errors']}, identical {level['identical']}/"
                  f"{args.requests}, server CPU {level['cpu_ms_per_answer']:.2f} ms/answer, "
                  f"{level['mean_pairs']:.1f} pairs/batch, RSS {level['rss_mb']:.0f} MB", flush=True)
        soak = None
        if args.total > done:
            soak = asyncio.run(run_level(host, port, bodies, expected, args.soak_concurrency, args.total - done))
            done = args.total
            print(f"  soak c={args.soak_concurrency}: {soak['requests']} more requests, {soak['throughput']:.1f} "
                  f"req/s, p50 {soak['p50_ms']:.1f} ms, p99 {soak['p99_ms']:.1f} ms, errors {soak['errors']}, "
                  f"identical {soak['identical']}/{soak['requests']}", flush=True)
        memory["after_total_mb"] = rss_mb(process.pid)
        memory["requests"] = done
        batches = batch_sizes(url)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            exit_code = process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            exit_code = "killed"
    after = sequential(pipeline, questions)
    after.pop("answers")
    baseline = max(before["throughput"], after["throughput"])
    print(f"sequential again: {after['throughput']:.1f} q/s, CPU {after['cpu_ms_per_answer']:.2f} ms/answer")
    print(f"server RSS: {memory['after_warmup_mb']:.0f} MB after {args.warmup} requests, "
          f"{memory['after_total_mb']:.0f} MB after {memory['requests']:,} "
          f"({memory['after_total_mb'] - memory['after_warmup_mb']:+.0f} MB); batches: {batches['batches']:,}, "
          f"{batches['mean_pairs']:.2f} pairs on average; exit status on SIGTERM: {exit_code}")
    for level in levels:
        level["vs_sequential"] = level["throughput"] / baseline
        print(f"  c={level['concurrency']}: {level['vs_sequential']:.2f}× the sequential loop")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "model": args.model, "backend": pipeline.backend, "threads": os.environ.get("OMP_NUM_THREADS"),
            "max_wait_ms": args.max_wait_ms, "max_batch_tokens": args.max_batch_tokens, "questions": len(questions),
            "sequential": [before, after], "levels": levels, "soak": soak, "memory": memory, "batches": batches,
            "sigterm_exit": exit_code}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

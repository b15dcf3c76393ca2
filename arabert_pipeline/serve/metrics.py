"""The service's counters and histograms, written in the Prometheus text format (version 0.0.4).

Written here rather than with prometheus_client: a handful of series, read and written on the event loop's thread
only, do not need a dependency with its own process-global registry (which would also leak series between apps
created in one process, as the tests create them).
"""
from __future__ import annotations

from collections import Counter

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Request latency, in seconds: a batch-1 answer of the shipped model takes ~10 ms on one core; a full queue waits
# seconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Histogram:
    def __init__(self, buckets):
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.count += 1
        self.sum += value
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
                break

    def lines(self, name: str, labels: str = "") -> list[str]:
        out, cumulative = [], 0
        sep = "," if labels else ""
        for bound, count in zip(self.buckets, self.counts, strict=True):
            cumulative += count
            out.append(f'{name}_bucket{{{labels}{sep}le="{_number(bound)}"}} {cumulative}')
        out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.count}')
        braces = f"{{{labels}}}" if labels else ""
        out.append(f"{name}_sum{braces} {_number(self.sum)}")
        out.append(f"{name}_count{braces} {self.count}")
        return out


class Metrics:
    """What /metrics reports. `path` labels come from a fixed set of routes (anything else is "other"), so that a
    client probing random URLs cannot grow the series without bound."""

    def __init__(self, paths: tuple[str, ...], timed_paths: tuple[str, ...]):
        self.paths = paths
        self.requests: Counter[tuple[str, int]] = Counter()
        self.latency = {path: Histogram(LATENCY_BUCKETS) for path in timed_paths}
        self.batch_pairs = Histogram(BATCH_BUCKETS)
        self.batch_seconds = Histogram(LATENCY_BUCKETS)
        self.rejected_full = 0
        self.hangups: Counter[str] = Counter()
        self.abandoned_pairs = 0

    def path_label(self, path: str) -> str:
        return path if path in self.paths else "other"

    def observe_request(self, path: str, status: int, seconds: float) -> None:
        label = self.path_label(path)
        self.requests[label, status] += 1
        if label in self.latency:
            self.latency[label].observe(seconds)

    def observe_hangup(self, path: str) -> None:
        self.hangups[self.path_label(path)] += 1

    def observe_batch(self, pairs: int, seconds: float) -> None:
        self.batch_pairs.observe(pairs)
        self.batch_seconds.observe(seconds)

    def render(self, *, waiting: int, running: int, queued_tokens: int, ready: bool) -> str:
        lines = [
            "# HELP arabert_serve_requests_total HTTP requests answered, by route and status code.",
            "# TYPE arabert_serve_requests_total counter",
        ]
        for (path, status), count in sorted(self.requests.items()):
            lines.append(f'arabert_serve_requests_total{{path="{path}",status="{status}"}} {count}')
        lines += [
            "# HELP arabert_serve_errors_total HTTP requests answered with a 4xx or 5xx status, by route and status.",
            "# TYPE arabert_serve_errors_total counter",
        ]
        for (path, status), count in sorted(self.requests.items()):
            if status >= 400:
                lines.append(f'arabert_serve_errors_total{{path="{path}",status="{status}"}} {count}')
        lines += [
            "# HELP arabert_serve_client_hangups_total Requests whose client hung up before the response, by route "
            "(not in requests_total: nobody received a status).",
            "# TYPE arabert_serve_client_hangups_total counter",
        ]
        for path, count in sorted(self.hangups.items()):
            lines.append(f'arabert_serve_client_hangups_total{{path="{path}"}} {count}')
        lines += [
            "# HELP arabert_serve_request_duration_seconds Time from a request's arrival to its response.",
            "# TYPE arabert_serve_request_duration_seconds histogram",
        ]
        for path, histogram in self.latency.items():
            lines += histogram.lines("arabert_serve_request_duration_seconds", f'path="{path}"')
        lines += [
            "# HELP arabert_serve_batch_pairs Question-context pairs answered by one model call.",
            "# TYPE arabert_serve_batch_pairs histogram",
            *self.batch_pairs.lines("arabert_serve_batch_pairs"),
            "# HELP arabert_serve_batch_duration_seconds Time of one model call.",
            "# TYPE arabert_serve_batch_duration_seconds histogram",
            *self.batch_seconds.lines("arabert_serve_batch_duration_seconds"),
            "# HELP arabert_serve_queue_depth Pairs accepted and waiting for a model call.",
            "# TYPE arabert_serve_queue_depth gauge",
            f"arabert_serve_queue_depth {waiting}",
            "# HELP arabert_serve_running_pairs Pairs in the model call under way.",
            "# TYPE arabert_serve_running_pairs gauge",
            f"arabert_serve_running_pairs {running}",
            "# HELP arabert_serve_queue_tokens Work accepted and not answered yet, in tokens (the queue's bound).",
            "# TYPE arabert_serve_queue_tokens gauge",
            f"arabert_serve_queue_tokens {queued_tokens}",
            "# HELP arabert_serve_rejected_full_total Pairs refused with 503 because the queue was full.",
            "# TYPE arabert_serve_rejected_full_total counter",
            f"arabert_serve_rejected_full_total {self.rejected_full}",
            "# HELP arabert_serve_abandoned_pairs_total Queued pairs dropped unanswered because their client hung up.",
            "# TYPE arabert_serve_abandoned_pairs_total counter",
            f"arabert_serve_abandoned_pairs_total {self.abandoned_pairs}",
            "# HELP arabert_serve_ready 1 once the model is loaded and answering.",
            "# TYPE arabert_serve_ready gauge",
            f"arabert_serve_ready {int(ready)}",
        ]
        return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return repr(float(value))  # Go's ParseFloat reads Python's repr of a float, "+Inf" aside (never written here)

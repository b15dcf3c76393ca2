"""uvicorn, with what the service needs and uvicorn lacks: deadlines on every phase of a connection, a connection
limit, JSON for the refusals made before the app sees a request, no log flood, and a shutdown that lets the app answer
its queue with 503 instead of having its requests cancelled.

uvicorn's h11 protocol times out only an idle kept-alive connection, and forgets that timer as soon as a byte arrives:
a connection that sends nothing, half a head, or part of a body stays open for ever. `GuardedH11Protocol` gives each
connection one deadline per phase, set when the phase begins and never moved by the bytes that arrive within it:

    head  timeout_headers     from the connection (or the first byte after a response) to the end of the head
    body  timeout_body        from the end of the head to the end of the body (the app answers 408 at the deadline;
                              the protocol closes the connection a moment later if it has not)
    idle  timeout_keep_alive  from a response to the first byte of the next request
    (none)                    while the app answers a request whose body it has read: the queue bounds that wait

Imported only by `build_server` (uvicorn is imported with it).
"""
from __future__ import annotations

import asyncio
import errno
import json
import logging
import time
from http import HTTPStatus
from typing import cast

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

from .limits import ServeLimits

log = logging.getLogger(__name__)
# How long the protocol waits past the body deadline for the app's own 408 before it closes the connection itself.
BODY_GRACE_S = 1.0
# Repeated warnings (refused connections, malformed requests, accept errors) are logged once per this many seconds,
# with a count of those held back: a client (or the open-files limit) can repeat them thousands of times a second.
LOG_INTERVAL_S = 10.0
SECURITY_HEADERS = [("X-Content-Type-Options", "nosniff")]


class Throttle:
    """Admits the first event of a kind at once, then at most one per `interval` seconds."""

    def __init__(self, interval: float = LOG_INTERVAL_S):
        self.interval = interval
        self._kinds: dict[str, list] = {}  # kind → [time of the last one admitted, events held back since]

    def admit(self, kind: str) -> str | None:
        """None to hold this event back, else what to add to its line: "", or how many were held back."""
        now = time.monotonic()
        entry = self._kinds.get(kind)
        if entry is not None and now - entry[0] < self.interval:
            entry[1] += 1
            return None
        note = f" ({entry[1]:,} more like it in the last {now - entry[0]:.0f} s, not logged)" \
            if entry is not None and entry[1] else ""
        self._kinds[kind] = [now, 0]
        return note


class RateLimitedLog:
    """A logger's lines, at most one per kind and interval (Throttle)."""

    def __init__(self, logger: logging.Logger, interval: float = LOG_INTERVAL_S):
        self.logger, self.throttle = logger, Throttle(interval)

    def __call__(self, kind: str, level: int, message: str, *args) -> None:
        note = self.throttle.admit(kind)
        if note is not None:
            self.logger.log(level, message + note, *args)


class _RateLimitFilter(logging.Filter):
    """On uvicorn's error logger: its per-request warnings about malformed requests, at most one per interval."""

    MESSAGES = ("Invalid HTTP request received.", "Exceeded concurrency limit.")

    def __init__(self, interval: float = LOG_INTERVAL_S):
        super().__init__()
        self.throttle = Throttle(interval)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg not in self.MESSAGES:
            return True
        note = self.throttle.admit(record.msg)
        if note:
            record.msg += note
        return note is not None


def _rate_limit_uvicorn_warnings() -> None:
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _RateLimitFilter) for f in logger.filters):
        logger.addFilter(_RateLimitFilter())


def raw_json_response(status: int, field: str | None, message: str, headers: dict[str, str] | None = None) -> bytes:
    """A complete HTTP/1.1 response with the app's JSON error body, for refusals made before (or instead of) a request
    cycle, where h11 cannot write one; the connection is closed after it."""
    body = json.dumps({"error": {"status": status, "field": field, "message": message}}).encode()
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", "Content-Type: application/json",
             f"Content-Length: {len(body)}", "Connection: close",
             *(f"{k}: {v}" for k, v in [*SECURITY_HEADERS, *(headers or {}).items()])]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with per-phase deadlines, a connection limit and JSON refusals (module docstring).
    `guarded_protocol(limits)` makes the subclass that carries the limits."""

    limits: ServeLimits = ServeLimits()
    events: RateLimitedLog = RateLimitedLog(log)

    def connection_made(self, transport) -> None:
        self._refused = False
        self._phase: str | None = None
        self._deadline: asyncio.TimerHandle | None = None
        if len(self.server_state.connections) >= self.limits.max_connections:
            # Refused here, before uvicorn counts it: the file descriptor is released at once, so a crowd of idle
            # connections can never take the process to its open-files limit.
            self._refused = True
            transport.write(raw_json_response(503, None, f"the server has {self.limits.max_connections:,} "
                                                         "connections open, its limit: retry shortly",
                                              {"Retry-After": "1"}))
            transport.close()
            self.events("connections", logging.WARNING, "refused a connection: %d open, the --max-connections limit",
                        self.limits.max_connections)
            return
        super().connection_made(transport)
        self._update()

    def connection_lost(self, exc) -> None:
        if self._refused:
            return
        self._set_deadline(None)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        self._update()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._update()

    def send_400_response(self, msg: str) -> None:
        # uvicorn's is text/plain; the service's errors are JSON everywhere.
        self.transport.write(raw_json_response(400, None, f"{msg} (not a valid HTTP/1.1 request)"))
        self.transport.close()

    # Deadlines --------------------------------------------------------------------------------------------------------

    def _current_phase(self) -> str | None:
        # uvicorn annotates both as always set; they are None before the connection is made and its first request.
        transport = cast("asyncio.Transport | None", self.transport)
        if transport is None or transport.is_closing():
            return None
        cycle = cast("RequestResponseCycle | None", self.cycle)
        if cycle is not None and not cycle.response_complete:
            return "body" if cycle.more_body else None
        if cycle is not None and self.conn.their_state is h11.IDLE and not self.conn.trailing_data[0]:
            return "idle"
        return "head"

    def _update(self) -> None:
        phase = self._current_phase()
        if phase != self._phase:
            self._set_deadline(phase)

    def _set_deadline(self, phase: str | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = phase
        if phase is not None:
            seconds = {"head": self.limits.timeout_headers, "body": self.limits.timeout_body + BODY_GRACE_S,
                       "idle": self.limits.timeout_keep_alive}[phase]
            self._deadline = self.loop.call_later(seconds, self._expire, phase)

    def _expire(self, phase: str) -> None:
        self._deadline = None
        if self.transport.is_closing() or self._current_phase() != phase:
            return
        if phase == "head" and self.conn.trailing_data[0]:
            self.transport.write(raw_json_response(
                408, None, f"the request's head did not arrive within {self.limits.timeout_headers:g} s"))
        elif phase == "body" and self.cycle is not None:
            # The app answers 408 at timeout_body while it reads; a cycle that is not being read is dropped as a
            # hang-up (the app sees http.disconnect), never left open.
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        self.transport.close()


def guarded_protocol(limits: ServeLimits) -> type[GuardedH11Protocol]:
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"limits": limits, "events": RateLimitedLog(log)})


class Server(uvicorn.Server):
    """uvicorn's server, which also (1) collapses the event loop's accept errors, and (2) tells the app that shutdown
    has begun before uvicorn starts waiting for its requests, so that the app can answer its queue in time."""

    def __init__(self, config: uvicorn.Config, limits: ServeLimits):
        super().__init__(config)
        self.limits = limits
        self._accept_errors = RateLimitedLog(log)

    async def startup(self, sockets=None) -> None:
        loop = asyncio.get_running_loop()
        previous = loop.get_exception_handler()

        def handle(loop, context) -> None:
            exc = context.get("exception")
            # An accept that failed for want of file descriptors: asyncio logs each with a traceback (cli.py's
            # ListeningSocket keeps it to one a second), and it can go on for as long as the limit is reached.
            if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM) \
                    and "accept" in str(context.get("message", "")):
                self._accept_errors("accept", logging.ERROR, "cannot accept connections: %s (the open-files limit; "
                                    "--max-connections is %d)", exc.strerror or exc, self.limits.max_connections)
                return
            if self.should_exit and isinstance(exc, ValueError) and "_start_serving" in repr(context.get("handle")):
                return  # asyncio's retry of a failed accept, come after the listening socket was closed
            if previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)

        loop.set_exception_handler(handle)
        await super().startup(sockets=sockets)

    async def shutdown(self, sockets=None) -> None:
        begin = getattr(getattr(self.config.app, "state", None), "begin_shutdown", None)
        if begin is not None:
            begin()
        await super().shutdown(sockets=sockets)


def build(app, limits: ServeLimits, *, access_log: bool = False, log_config="default") -> Server:
    options = {} if log_config == "default" else {"log_config": log_config}
    config = uvicorn.Config(
        app, lifespan="on", access_log=access_log, log_level="info", http=guarded_protocol(limits), ws="none",
        timeout_keep_alive=limits.timeout_keep_alive,  # type: ignore[arg-type]  # annotated int; call_later takes floats
        headers=list(SECURITY_HEADERS),
        # The app answers what is still queued at shutdown_timeout with 503; the margin is for the model call under
        # way then (one batch of max_batch_tokens, or one pair of the longest context) and the responses' writes.
        timeout_graceful_shutdown=limits.shutdown_timeout + 30,  # type: ignore[arg-type]  # int too; a wait's timeout
        **options)
    _rate_limit_uvicorn_warnings()
    return Server(config, limits)

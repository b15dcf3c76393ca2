"""The app's two ASGI middlewares (app.py): metrics for every response, and the access policy (policy.py) enforced
before anything reads a body."""
from __future__ import annotations

import time

from .metrics import Metrics
from .policy import AccessPolicy
from .requests import CLOSE, error_body


class MetricsMiddleware:
    """Counts every HTTP response by route and status, and times it (pure ASGI: no per-request task or copy). A
    request whose client hung up before its response began is counted as that, not by the status nobody received."""

    def __init__(self, app, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status, responded, hung_up = 500, False, False

        async def watch_receive():
            nonlocal hung_up
            message = await receive()
            if message["type"] == "http.disconnect" and not responded:
                hung_up = True
            return message

        async def send_status(message):
            nonlocal status, responded
            if message["type"] == "http.response.start":
                status, responded = message["status"], True
            await send(message)

        try:
            await self.app(scope, watch_receive, send_status)
        finally:
            if hung_up:
                self.metrics.observe_hangup(scope["path"])
            else:
                self.metrics.observe_request(scope["path"], status, time.perf_counter() - started)


class AccessMiddleware:
    """Refuses requests for another Host (400) or from another web page (403), as policy.py says, with the service's
    JSON errors; before anything reads the body."""

    def __init__(self, app, policy: AccessPolicy):
        from starlette.datastructures import Headers
        from starlette.responses import JSONResponse

        self.app, self.policy = app, policy
        self._headers, self._json = Headers, JSONResponse

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = self._headers(scope=scope)
        host = headers.get("host")
        problem = self.policy.host_problem(host)
        if problem is not None:
            status, field = 400, "Host"
        else:
            refusal = self.policy.cross_origin_problem(scope["method"], scope.get("scheme", "http"), host, headers)
            if refusal is None:
                return await self.app(scope, receive, send)
            status, (field, problem) = 403, refusal
        await self._json(error_body(status, field, problem), status, CLOSE)(scope, receive, send)

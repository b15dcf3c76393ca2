"""`arabert-pipeline serve`: the answer service (app.py) on uvicorn.

    arabert-pipeline serve                                  # the shipped model on http://127.0.0.1:8000/
    arabert-pipeline serve --model runs/qa/mini --port 9000 --max-wait-ms 10
    arabert-pipeline serve --index runs/news-index          # POST /v1/ask asks that collection

The port is bound before the model loads (--port 0 picks a free one; the line "serving on http://HOST:PORT/" on
stderr says which), and /health answers 503 until the model (and --index's collection) is loaded; a model or index
that fails to load stops the server with its one-line error. SIGTERM (or Ctrl-C) stops accepting
connections, answers the queue for --shutdown-timeout seconds (what is still queued then gets 503 + Retry-After), and
exits 0.
"""
from __future__ import annotations

import argparse
import dataclasses
import errno
import functools
import logging
import math
import signal
import socket
import threading
import time
import warnings

from ..errors import ConfigError, InputError
from ..pipeline.core import BACKENDS, BUNDLED_MODELS, DEFAULT_MODEL

log = logging.getLogger(__name__)
# File descriptors the process needs besides its connections: the listening socket, stdio, the event loop's, the
# model's files and the thread pools' (the shipped model's server holds ~30).
FD_RESERVE = 64


def register(subparsers) -> None:
    from .limits import ServeLimits

    defaults = ServeLimits()
    p = subparsers.add_parser(
        "serve",
        help="answer questions over HTTP: a JSON API, an Arabic web page, health and Prometheus metrics",
        description="Serve a QA model over HTTP: POST /v1/answer and /v1/answer/batch (JSON; answers identical to "
        "Pipeline.answer), with --index POST /v1/ask (a collection asked), GET / (a web page in Arabic), /health, "
        "/metrics (Prometheus), /openapi.json. "
        "Concurrent requests are answered together in one model batch (--max-batch-tokens, --max-wait-ms). "
        "Listens on the loopback interface unless --host says otherwise; there is no authentication. Requests naming "
        "another Host, or sent by another web page (cross-origin), are refused unless --allowed-hosts / "
        "--allowed-origins name them.",
    )
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"bundled model name ({', '.join(BUNDLED_MODELS)}), QA model dir or hub id (default: "
                        "%(default)s)")
    p.add_argument("--preprocessing", help="for models without arabert_pipeline.json: arabertv02, arabertv2 or none")
    p.add_argument("--classify-model", default="auto", metavar="NAME_OR_DIR",
                   help="the model of POST /v1/classify: a shipped task model name (arabert-sentiment) or a model dir "
                        "made by `finetune --task classification`; auto: the shipped sentiment model when this "
                        "checkout has it; none: no such route (404) (default: %(default)s)")
    p.add_argument("--tag-model", default="auto", metavar="NAME_OR_DIR",
                   help="the model of POST /v1/tag (arabert-ner, or a `finetune --task ner` dir); auto and none as "
                        "for --classify-model (default: %(default)s)")
    p.add_argument("--index", metavar="DIR",
                   help="serve POST /v1/ask over the collection indexed in DIR (made by `arabert-pipeline index`), "
                        "opened with the model (every file checked); the web page then asks it too (default: none, "
                        "/v1/ask answers 404)")
    p.add_argument("--backend", choices=BACKENDS, default="auto",
                   help="auto: ONNX Runtime when the model dir has a model.onnx (the shipped model does), else torch "
                        "(default: %(default)s)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: %(default)s, this machine only; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=8000, help="TCP port; 0 picks a free one (default: %(default)s)")
    p.add_argument("--max-batch-tokens", type=int, default=defaults.max_batch_tokens,
                   help="most tokens (counted with the model's preprocessing and tokenizer) in one model batch; a "
                        "longer single pair runs alone (default: %(default)s)")
    p.add_argument("--max-wait-ms", type=float, default=defaults.max_wait_ms,
                   help="how long a batch waits after its first pair for more to arrive; at 0 it takes what queued "
                        "while the previous batch ran (default: %(default)s)")
    p.add_argument("--max-queue-tokens", type=int, default=defaults.max_queue_tokens,
                   help="work accepted and not yet answered, in the model's tokens (+16 a pair); beyond, requests "
                        "get 503 + Retry-After, the time the excess takes at the recent pace, and a request that "
                        "alone costs more gets 413 (default: %(default)s)")
    p.add_argument("--max-question-chars", type=int, default=defaults.max_question_chars,
                   help="longer questions get 413 (the model's reader reads all of a question; default: %(default)s)")
    p.add_argument("--max-context-chars", type=int, default=defaults.max_context_chars,
                   help="longer contexts get 413 (memory and time grow with the context; default: %(default)s)")
    p.add_argument("--max-body-bytes", type=int,
                   help="larger request bodies get 413 (default: 1 MiB, or room for a --max-context-chars context "
                        "sent as \\uXXXX escapes if that is more)")
    p.add_argument("--max-top-k", type=int, default=defaults.max_top_k,
                   help="largest top_k a request may ask (default: %(default)s)")
    p.add_argument("--max-pairs", type=int, default=defaults.max_pairs,
                   help="most pairs in one /v1/answer/batch request (default: %(default)s)")
    p.add_argument("--max-connections", type=int, default=defaults.max_connections,
                   help="connections open at once; beyond, a new one gets 503 and is closed (lowered to fit the "
                        "open-files limit if that cannot be raised; default: %(default)s)")
    p.add_argument("--timeout-headers", type=float, default=defaults.timeout_headers,
                   help="seconds a client has to send a request's head, from connecting or from its first byte "
                        "(default: %(default)s)")
    p.add_argument("--timeout-body", type=float, default=defaults.timeout_body,
                   help="seconds a client has to send a request's body, from the end of its head; then 408 "
                        "(default: %(default)s)")
    p.add_argument("--timeout-keep-alive", type=float, default=defaults.timeout_keep_alive,
                   help="seconds an idle kept-alive connection stays open after a response (default: %(default)s)")
    p.add_argument("--shutdown-timeout", type=float, default=defaults.shutdown_timeout,
                   help="after SIGTERM, seconds the queue is answered for; what is still queued then gets 503 + "
                        "Retry-After (default: %(default)s)")
    p.add_argument("--allowed-hosts", default="",
                   help="comma-separated names (or *.domain patterns) besides this machine's loopback names and the "
                        "--host address that requests may name in their Host header; * for any (default: none)")
    p.add_argument("--allowed-origins", default="",
                   help="comma-separated web page origins (scheme://host[:port]) allowed to call the API from a "
                        "browser (CORS); * for any page on the web (default: none: only the server's own page)")
    p.add_argument("--access-log", action="store_true", help="log every request on stdout (uvicorn's access log)")
    p.set_defaults(run=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from .app import create_app
    from .limits import ServeLimits
    from .policy import AccessPolicy, is_loopback

    if not 0 <= args.port <= 65535:
        raise InputError(f"must be from 0 to 65535, got {args.port}", field="--port")
    limits = ServeLimits(max_batch_tokens=args.max_batch_tokens, max_wait_ms=args.max_wait_ms,
                         max_queue_tokens=args.max_queue_tokens, max_body_bytes=args.max_body_bytes,
                         max_context_chars=args.max_context_chars, max_question_chars=args.max_question_chars,
                         max_top_k=args.max_top_k, max_pairs=args.max_pairs, max_connections=args.max_connections,
                         timeout_headers=args.timeout_headers, timeout_body=args.timeout_body,
                         timeout_keep_alive=args.timeout_keep_alive, shutdown_timeout=args.shutdown_timeout)
    allowed_hosts, allowed_origins = _names(args.allowed_hosts), _names(args.allowed_origins)
    for flag, hosts, origins in (("--allowed-hosts", allowed_hosts, ()), ("--allowed-origins", (), allowed_origins)):
        try:  # before the model is resolved and the port taken
            AccessPolicy.for_address(None, None, hosts, origins)
        except ValueError as exc:
            raise InputError(str(exc), field=flag) from None
    backend = _check_model(args)
    tasks = task_loaders(args, limits)
    index = _index_loader(args.index)
    sock = bind(args.host, args.port)
    bound = sock.getsockname()[0]
    policy = AccessPolicy.for_address(args.host, bound, allowed_hosts, allowed_origins)
    limits = fit_open_files(limits)
    url = f"http://{_url_host(args.host)}:{sock.getsockname()[1]}/"
    # A service answers every user's text; the per-call warning about text without an Arabic letter would fill the log,
    # and so would the one about an index of another preprocessing, which the app logs once when it loads the index.
    warnings.filterwarnings("ignore", message=r".*no Arabic letter: answered anyway", category=UserWarning)
    warnings.filterwarnings("ignore", message=r"the index was built with the .* analysis", category=UserWarning)
    if not is_loopback(bound):  # the address bound, not the name given: 127.1, ::1 and localhost are loopback too
        log.warning("arabert-pipeline serve: listening on %s, reachable from other machines, with no "
                    "authentication", args.host)

    failures: list[BaseException] = []

    def load():
        from ..pipeline.core import Pipeline

        if backend == "torch":
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        return Pipeline(args.model, preprocessing=args.preprocessing, backend=args.backend,
                        max_context_chars=args.max_context_chars, max_question_chars=args.max_question_chars)

    def on_load_failure(exc: BaseException) -> None:  # called by the load the running server starts: `server` is set
        failures.append(exc)
        server.should_exit = True

    app = create_app(load, limits, policy=policy, on_load_failure=on_load_failure, model_name=str(args.model),
                     tasks=tasks, index=index)
    server = build_server(app, access_log=args.access_log)
    log.info("arabert-pipeline serve: serving on %s (model %s, loading)", url, args.model)
    with _sigterm_returns():
        server.run(sockets=[sock])
    if failures:
        raise failures[0] if isinstance(failures[0], ConfigError) else ConfigError(
            f"the model failed to load: {type(failures[0]).__name__}: {failures[0]}")
    return 0


def _index_loader(path: str | None):
    """A loader of the collection --index names (Index.open, which checks every file: run with the model's load), or
    None; what can be checked cheaply (a directory holding an index of a format this version reads) is checked now,
    before the port is taken."""
    if path is None:
        return None
    from ..retrieval.index import Index
    from ..retrieval.store import read_index_metadata

    read_index_metadata(path)
    return functools.partial(Index.open, path)


def task_loaders(args: argparse.Namespace, limits) -> dict:
    """"classify" / "tag" → a loader of the task pipeline each flag names; a named model or dir is resolved now, so a
    wrong one fails before the port is taken."""
    from ..pipeline import inputs
    from ..pipeline.tasks import TEXT_CLASSIFICATION, TOKEN_CLASSIFICATION, resolve_task_model, task_pipeline

    loaders = {}
    for name, model, task, shipped in (("classify", args.classify_model, TEXT_CLASSIFICATION, "arabert-sentiment"),
                                       ("tag", args.tag_model, TOKEN_CLASSIFICATION, "arabert-ner")):
        if model == "none" or (model == "auto" and not (inputs.MODELS_DIR / shipped / "config.json").is_file()):
            continue
        directory, _ = resolve_task_model(shipped if model == "auto" else model, task)
        # --backend is the QA model's; a shipped task model runs on ONNX Runtime only, whatever it says.
        loaders[name] = functools.partial(task_pipeline, directory, task, max_chars=limits.max_context_chars,
                                          backend="auto" if model == "auto" else args.backend)
    return loaders


def build_server(app, *, access_log: bool = False, log_config="default"):
    """A uvicorn server for `app` (made by create_app, whose limits it applies to connections: server.py);
    `log_config=None` leaves the process's logging as it is (tests)."""
    from .server import build

    return build(app, app.state.serve_limits, access_log=access_log, log_config=log_config)


def fit_open_files(limits):
    """`limits`, with max_connections within the open-files limit: raised to fit (up to the hard limit) if it can be,
    else max_connections lowered, so that the server refuses connections itself instead of failing to accept them."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return limits
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = limits.max_connections + FD_RESERVE
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return limits
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft >= needed:
        return limits
    fitted = max(1, soft - FD_RESERVE)
    log.warning("arabert-pipeline serve: --max-connections %d lowered to %d: the open-files limit is %d (ulimit -n)",
                limits.max_connections, fitted, soft)
    return dataclasses.replace(limits, max_connections=fitted)


def _names(value: str) -> list[str]:
    return [name.strip() for name in value.split(",") if name.strip()]


class ListeningSocket(socket.socket):
    """A listening socket whose accept, once it has failed for want of file descriptors, reports "nothing to accept"
    for the next moment. asyncio's accept loop goes on calling accept after such a failure, once for every connection
    the backlog may hold (2,048), logging each failure and scheduling a retry for each: a tight loop at the open-files
    limit. After the first failure it stops there, and asyncio's one retry (a second later) tries again."""

    PAUSE_S = 0.5
    _failed_at = -math.inf

    def accept(self):
        if time.monotonic() - self._failed_at < self.PAUSE_S:
            raise BlockingIOError(errno.EAGAIN, "paused after running out of file descriptors")
        try:
            return super().accept()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                self._failed_at = time.monotonic()
            raise


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket, bound here rather than by uvicorn so that --port 0 can report the port it got."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise InputError(f"cannot resolve {host!r} ({exc.strerror})", field="--host") from None
    sock = ListeningSocket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port} ({exc.strerror or exc})", field="--port") from None
    sock.listen(2048)  # connections made while the server starts wait in the backlog instead of being refused
    return sock


def _check_model(args: argparse.Namespace) -> str:
    """The backend the model will run on; a model that cannot resolve fails here, before a port is taken."""
    from ..pipeline.resolve import choose_backend

    return choose_backend(args.model, "cpu", args.backend)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class _sigterm_returns:
    """uvicorn shuts down gracefully on SIGTERM, then raises the signal again under the handler it found; with the
    default one the process would die by the signal (status 143) after a clean shutdown. Under this no-op handler it
    returns, and the command exits 0."""

    def __enter__(self):
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)

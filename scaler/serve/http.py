"""The HTTP port: ``/metrics`` (prometheus_client's own WSGI app), ``/healthz``, the status page.

* ``/metrics``     prometheus_client's app: text or OpenMetrics by ``Accept``, gzip by
                   ``Accept-Encoding``, ``?name[]=`` filters; ``HEAD`` answers the same headers
                   without a body (the library's app knows only GET and OPTIONS)
* ``/healthz``     200 ``ok`` while serving, 503 ``stopping`` after SIGTERM
* ``/``            the status page (``scaler.serve.status``), ``/status.json`` its data

The scaler's registry gets the process, platform and GC collectors and
``forescale_build_info{version,python_version,grpcio_version}`` here.

The listener is waitress: one event-loop thread reads requests and only a
complete one reaches its small thread pool (``HTTP_THREADS``), so idle or
dripping connections (slowloris) hold no thread. Slow clients cannot starve it
(issue 40, item 5): a request must arrive whole within ``HTTP_REQUEST_SECONDS``
of its first byte, an idle connection is closed after ``HTTP_IDLE_SECONDS``, a
new connection is always accepted and, past ``HTTP_CONNECTION_LIMIT`` open ones,
the connection waiting longest on an unfinished request (else idle longest) is
closed for it; ``/healthz`` is answered by a thread of its own, never queued
behind a slow ``/status.json`` or scrape.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import platform
import threading
import time
from importlib import metadata
from typing import Callable

from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher

from prometheus_client import GC_COLLECTOR, CollectorRegistry, Gauge, make_wsgi_app
from prometheus_client import gc_collector, platform_collector, process_collector

from . import status


def version() -> str:
    """The installed package's version (pyproject.toml), or ``0+unknown`` from a bare checkout."""
    try:
        return metadata.version("forescale")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def add_runtime_collectors(registry: CollectorRegistry) -> None:
    """Process (CPU, memory, fds), platform (Python) and GC collectors, and ``forescale_build_info``."""
    process_collector.ProcessCollector(registry=registry)
    platform_collector.PlatformCollector(registry=registry)
    if GC_COLLECTOR is not None:
        gc_collector.GCCollector(registry=registry)
    try:
        grpc_version = metadata.version("grpcio")
    except metadata.PackageNotFoundError:
        grpc_version = "unknown"
    Gauge("forescale_build_info", "forescale build: 1, with the version of the package, Python and grpcio",
          ("version", "python_version", "grpcio_version"), registry=registry
          ).labels(version(), platform.python_version(), grpc_version).set(1)


HTTP_THREADS = 4  # requests served at once (a scrape, the status page); each is answered from memory
HTTP_CONNECTION_LIMIT = 256  # connections open at once; a new one beyond closes the slowest (see the module doc)
HTTP_IDLE_SECONDS = 10  # a connection without a byte for this long is closed (checked every HTTP_SWEEP_SECONDS)
HTTP_REQUEST_SECONDS = 10  # a request not complete this long after its first byte is closed (a dripping client)
HTTP_SWEEP_SECONDS = 1


class TokenFile:
    """A bearer token in a file (a mounted Secret), read again when the file changes (``--http-token-file``)."""

    def __init__(self, path: str):
        self.path, self._token = path, b""
        self._stamp: tuple[int, int, int] | None = None
        self.get()
        if not self._token:
            raise ValueError(f"--http-token-file {path}: empty; accepted a file holding the token (16+ characters)")

    def get(self) -> bytes:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if stamp != self._stamp:
                with open(self.path, "rb") as f:
                    self._token, self._stamp = f.read(4096).strip(), stamp
        except OSError as e:
            if self._stamp is None:
                raise OSError(f"--http-token-file: cannot read {self.path}: {e.strerror}") from None
        return self._token  # a file gone after start keeps the last token


def authorized(environ, token: TokenFile | None) -> bool:
    if token is None:
        return True
    given = environ.get("HTTP_AUTHORIZATION", "")
    scheme, _, value = given.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.get())


def make_app(registry: CollectorRegistry, healthy: Callable[[], bool], clock: Callable[[], float], view=None,
             token: TokenFile | None = None, ledger=None):
    """The WSGI app of the HTTP port. ``view``: a ``scaler.serve.view.StatusView`` (per-trigger detail on the
    status page, ``/api/scaledobjects/{namespace}/{name}/decisions``). ``token``: every path but ``/healthz``
    wants ``Authorization: Bearer <token>`` (401 otherwise). ``ledger``: the fleet GPU budgets
    (``scaler.serve.ledger``): ``/budget/claims`` (the claims this replica made, for its peers) and each budget's
    members in ``/status.json``."""
    metrics_app = make_wsgi_app(registry)

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "/")
        method = environ.get("REQUEST_METHOD", "GET")
        head = method == "HEAD"
        if method not in ("GET", "HEAD"):
            return _send(start_response, "405 Method Not Allowed", "text/plain; charset=utf-8",
                         f"{method} not allowed: use GET or HEAD\n".encode(), head, [("Allow", "GET, HEAD")])
        if path != "/healthz" and not authorized(environ, token):
            return _send(start_response, "401 Unauthorized", "text/plain; charset=utf-8",
                         b"a bearer token is needed (--http-token-file): Authorization: Bearer <token>\n", head,
                         [("WWW-Authenticate", 'Bearer realm="forescale"')])
        if path == "/metrics":
            got: dict = {}

            def capture(status_line, headers, exc_info=None):
                got["status"], got["headers"] = status_line, headers

            body = b"".join(metrics_app({**environ, "REQUEST_METHOD": "GET"}, capture))
            headers = [h for h in got["headers"] if h[0].lower() != "content-length"]
            start_response(got["status"], headers + [("Content-Length", str(len(body)))])
            return [b"" if head else body]
        if path == "/healthz":
            ok = healthy()
            return _send(start_response, "200 OK" if ok else "503 Service Unavailable", "text/plain; charset=utf-8",
                         b"ok\n" if ok else b"stopping\n", head)
        if path == "/status.json":
            now = clock()
            budgets = None if ledger is None else [ledger.snapshot(n) for n in sorted(ledger.budgets)]
            return _send(start_response, "200 OK", "application/json",
                         status.status_json(registry, now, view.details(now) if view is not None else None, budgets),
                         head, [("Cache-Control", "no-store")])
        if path == "/budget/claims" and ledger is not None:
            return _send(start_response, "200 OK", "application/json", json.dumps(ledger.claims()).encode(), head,
                         [("Cache-Control", "no-store")])
        if path.startswith("/api/scaledobjects/"):
            doc = view.decisions(path, environ.get("QUERY_STRING", "")) if view is not None else None
            if doc is None:
                return _send(start_response, "404 Not Found", "application/json",
                             json.dumps({"error": "unknown ScaledObject or path: use "
                                         "/api/scaledobjects/{namespace}/{name}/decisions"}).encode(), head)
            return _send(start_response, "200 OK", "application/json", json.dumps(doc, allow_nan=False).encode(),
                         head, [("Cache-Control", "no-store")])
        if path in ("/", "/index.html"):
            return _send(start_response, "200 OK", "text/html; charset=utf-8", status.PAGE, head,
                         [("Content-Security-Policy", status.CSP)])
        return _send(start_response, "404 Not Found", "text/plain; charset=utf-8",
                     b"not found: try / (status), /metrics or /healthz\n", head)

    return app


def _send(start_response, code: str, ctype: str, body: bytes, head: bool, extra=()):
    start_response(code, [("Content-Type", ctype), ("Content-Length", str(len(body))), *extra])
    return [b"" if head else body]


class _Channel(HTTPChannel):
    """A connection that remembers when its unfinished request began (``started``; None between requests)."""

    started: float | None = None

    def received(self, data):
        partial = self.request
        if partial is None and data:
            self.started = self.server.monotonic()
        done = super().received(data)
        if self.request is None:
            self.started = None
        elif self.request is not partial and partial is not None:  # a request ended, the next one began
            self.started = self.server.monotonic()
        return done


class _Server(TcpWSGIServer):
    """waitress with the bounds of the module doc: request deadlines, eviction past the limit, /healthz apart."""

    channel_class = _Channel

    def __init__(self, *args, monotonic: Callable[[], float], **kw):
        self.monotonic = monotonic  # the request deadlines' clock (the server wiring passes time.monotonic)
        super().__init__(*args, **kw)
        self.health_dispatcher = ThreadedTaskDispatcher()
        self.health_dispatcher.set_thread_count(1)
        self.evicted = 0  # connections closed for a newer one (past HTTP_CONNECTION_LIMIT)
        self.timed_out = 0  # connections closed because their request did not arrive in time

    def readable(self):  # always accept: past the limit a new connection closes the slowest one (handle_accept)
        now = time.time()  # waitress' own clock (its channels' last_activity)
        if now >= self.next_channel_cleanup:
            self.next_channel_cleanup = now + self.adj.cleanup_interval
            self.maintenance(now)
        return self.accepting

    def handle_accept(self):
        super().handle_accept()
        over = len(self.active_channels) - self.adj.connection_limit
        if over > 0:
            idle = [c for c in self.active_channels.values() if not c.requests and not c.will_close]
            idle.sort(key=lambda c: (c.started is None, c.started or 0.0, c.last_activity))
            for c in idle[:over]:
                self.evicted += 1
                c.handle_close()

    def maintenance(self, now):
        super().maintenance(now)
        cutoff = self.monotonic() - HTTP_REQUEST_SECONDS
        for c in list(self.active_channels.values()):
            if not c.requests and c.started is not None and c.started < cutoff and not c.will_close:
                self.timed_out += 1
                c.will_close = True

    def add_task(self, task):
        requests = getattr(task, "requests", None)
        if requests and getattr(requests[0], "path", None) == "/healthz":
            self.health_dispatcher.add_task(task)  # liveness is never queued behind a slow request
        else:
            super().add_task(task)


class HttpEndpoint:
    """The HTTP listener in a daemon thread. ``OSError`` names the address when it cannot listen."""

    def __init__(self, host: str, port: int, app, monotonic: Callable[[], float]):
        self._map: dict = {}
        try:
            self.server = _Server(
                app, monotonic=monotonic, map=self._map, host=host, port=port, threads=HTTP_THREADS,
                connection_limit=HTTP_CONNECTION_LIMIT, channel_timeout=HTTP_IDLE_SECONDS,
                cleanup_interval=HTTP_SWEEP_SECONDS, asyncore_use_poll=True, ident="forescale",
                expose_tracebacks=False, clear_untrusted_proxy_headers=True)
        except OSError as e:
            raise OSError(f"cannot listen on {host}:{port} (HTTP, --http-port): {e.strerror or e}") from None
        self.port = int(self.server.effective_port)
        self._thread = threading.Thread(target=self.server.run, name="http", daemon=True)
        # waitress logs each refused connection and its queue depth: once per minute is enough
        logging.getLogger("waitress.queue").setLevel(logging.ERROR)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Close the listener and every connection (in the loop's own thread), then the worker threads."""
        def close_all() -> None:
            for dispatcher in list(self._map.values()):
                try:
                    dispatcher.close()
                except OSError:
                    pass
        if self._thread.is_alive():
            self.server.trigger.pull_trigger(close_all)
            self._thread.join(5.0)
        else:
            close_all()
        self.server.task_dispatcher.shutdown(cancel_pending=True, timeout=2)
        self.server.health_dispatcher.shutdown(cancel_pending=True, timeout=1)

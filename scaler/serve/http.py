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
dripping connections (slowloris) hold no thread; at most
``HTTP_CONNECTION_LIMIT`` connections are open (more wait in the backlog), and
an idle one is closed after ``HTTP_IDLE_SECONDS``.
"""

from __future__ import annotations

import json
import logging
import platform
import threading
from importlib import metadata
from typing import Callable

import waitress

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
HTTP_CONNECTION_LIMIT = 256  # connections open at once; more wait in the kernel's backlog
HTTP_IDLE_SECONDS = 10  # a connection without a byte for this long is closed (checked every HTTP_SWEEP_SECONDS)
HTTP_SWEEP_SECONDS = 2


def make_app(registry: CollectorRegistry, healthy: Callable[[], bool], clock: Callable[[], float], view=None):
    """The WSGI app of the HTTP port. ``view``: a ``scaler.serve.view.StatusView`` (per-trigger detail on the
    status page, ``/api/scaledobjects/{namespace}/{name}/decisions``)."""
    metrics_app = make_wsgi_app(registry)

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "/")
        method = environ.get("REQUEST_METHOD", "GET")
        head = method == "HEAD"
        if method not in ("GET", "HEAD"):
            return _send(start_response, "405 Method Not Allowed", "text/plain; charset=utf-8",
                         f"{method} not allowed: use GET or HEAD\n".encode(), head, [("Allow", "GET, HEAD")])
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
            return _send(start_response, "200 OK", "application/json",
                         status.status_json(registry, now, view.details(now) if view is not None else None), head,
                         [("Cache-Control", "no-store")])
        if path.startswith("/api/scaledobjects/"):
            doc = view.decisions(path) if view is not None else None
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


class HttpEndpoint:
    """The HTTP listener in a daemon thread. ``OSError`` names the address when it cannot listen."""

    def __init__(self, host: str, port: int, app):
        self._map: dict = {}
        try:
            self.server = waitress.create_server(
                app, map=self._map, host=host, port=port, threads=HTTP_THREADS,
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

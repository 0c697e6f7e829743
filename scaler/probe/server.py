"""HTTP endpoints of a probe: /metrics and Kubernetes-style health checks.

    GET /health/startup   200 once warm-up finished (startupProbe), else 503
    GET /health/ready     200 while ready (readinessProbe), else 503
    GET /health/live      200 while the process is healthy (livenessProbe); 503 after an
                          internal error (not after a bad input: restarting cannot fix that)
    GET /metrics          Prometheus text exposition
    GET /report           the JSON report once the run finished, else 503

Bodies are JSON: {"status": "ready"|"not ready"|"live"|"not live", "state", "phase", "reason", ...}.
"""

from __future__ import annotations

import errno
import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST

from .errors import ProbeError

if TYPE_CHECKING:
    from .runner import Probe

log = logging.getLogger("forescale.probe")


class _Handler(BaseHTTPRequestHandler):
    server: "ProbeServer"
    protocol_version = "HTTP/1.1"

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code: int, obj: dict) -> None:
        self._send(code, (json.dumps(obj) + "\n").encode(), "application/json")

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        probe = self.server.probe
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        try:
            if path == "/metrics":
                self._send(200, probe.metrics.exposition(), CONTENT_TYPE_LATEST)
            elif path in ("/health/startup", "/health/ready"):
                st = probe.state()
                body = st.as_dict()
                body["status"] = "ready" if st.ready else "not ready"
                self._json(200 if st.ready else 503, body)
            elif path == "/health/live":
                st = probe.state()
                body = st.as_dict()
                body["status"] = "live" if st.healthy else "not live"
                self._json(200 if st.healthy else 503, body)
            elif path == "/report":
                report = probe.report()
                if report is None:
                    self._json(503, {"status": "not ready", **probe.state().as_dict()})
                else:
                    self._json(200, report)
            elif path == "/":
                self._json(200, {"endpoints": ["/health/startup", "/health/ready", "/health/live", "/metrics",
                                               "/report"]})
            else:
                self._json(404, {"error": f"no such endpoint: {path}"})
        except Exception as exc:  # a handler bug must not take the sidecar down
            log.exception("probe http handler failed")
            self._json(500, {"error": f"{type(exc).__name__}: {exc}"})

    do_HEAD = do_GET

    def log_message(self, fmt: str, *args) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)


class ProbeServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, probe: "Probe", host: str, port: int) -> None:
        self.probe = probe
        if ":" in host:
            self.address_family = socket.AF_INET6
        try:
            super().__init__((host, port), _Handler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ProbeError(f"--serve {port}: port {port} on {host} is already in use; accepted: a free TCP "
                                 "port (or 0 to let the OS pick one)", param="--serve") from None
            raise ProbeError(f"--serve {port} --host {host}: cannot listen ({exc.strerror or exc}); accepted: an "
                             "address of this host (0.0.0.0 for all, 127.0.0.1 for local) and a free port",
                             param="--host") from None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        host = self.server_address[0]
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.port}"

    def start(self) -> "ProbeServer":
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="forescale-probe-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

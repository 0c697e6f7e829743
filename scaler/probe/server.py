"""HTTP endpoints of a probe: /metrics and Kubernetes-style health checks.

    GET /health/startup   200 once warm-up finished (startupProbe), else 503
    GET /health/ready     200 while ready (readinessProbe), else 503
    GET /health/live      200 while the process is healthy (livenessProbe); 503 after an
                          internal error (not after a bad input: restarting cannot fix that)
    GET /metrics          Prometheus text exposition
    GET /report           the JSON report once the run finished, else 503
    POST /v1/completions  OpenAI-compatible completions from the warmed model once ready, else 503
                          (body: {"prompt": str, "max_tokens": int = 16, "stream": bool = false, "model": any};
                          stream: server-sent events, one chunk per token, then ``data: [DONE]``)

Health bodies are JSON: {"status": "ready"|"not ready"|"live"|"not live", "state", "phase", "reason", ...}.
Completion errors are OpenAI-shaped: {"error": {"message", "type", "param", "code"}}; 400 for a bad body,
503 while not ready or when the queue is full (with Retry-After).
"""

from __future__ import annotations

import errno
import json
import logging
import queue
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, cast

from prometheus_client import CONTENT_TYPE_LATEST

from .completions import Overloaded, Rejected, decode, encode
from .errors import ProbeError
from .metrics import ProbeMetrics


class Served(Protocol):
    """What the server answers for: a ``runner.Probe`` (it times a model it runs) or a ``watch.Watcher`` (it times
    a model server it watches; ``watching`` true, ``url`` the server's, ``completions`` None)."""

    metrics: ProbeMetrics

    def state(self) -> Any: ...  # a ``runner.ProbeState``

    def report(self) -> dict | None: ...

    def completions(self, max_batch: int, max_queue: int, step_delay: float) -> Any: ...  # an Engine, or None

log = logging.getLogger("forescale.probe")
MAX_BODY = 1 << 20
DEFAULT_MAX_TOKENS = 16
TOKEN_TIMEOUT = 600.0  # seconds a handler waits for the next token before giving up


class BadRequest(ValueError):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def parse_completion(body: bytes) -> tuple[str, int, bool]:
    """(prompt, max_tokens, stream) from a request body; BadRequest naming the field otherwise."""
    try:
        obj = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the body is not JSON ({getattr(exc, 'msg', exc)}); accepted: a JSON object such as "
                         '{"prompt": "Hello", "max_tokens": 16}')
    if not isinstance(obj, dict):
        raise BadRequest(f"the body is a JSON {type(obj).__name__}; accepted: a JSON object with \"prompt\"")
    prompt = obj.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise BadRequest("prompt: missing or not a string; accepted: a string (or a list of one string)", "prompt")
    max_tokens = obj.get("max_tokens", DEFAULT_MAX_TOKENS)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise BadRequest(f"max_tokens: {str(max_tokens)[:40]!r} is not an integer >= 1", "max_tokens")
    stream = obj.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("stream: accepted: true or false", "stream")
    return prompt, max_tokens, stream


class _Handler(BaseHTTPRequestHandler):
    server: "ProbeServer"
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small writes (one event per token) must not wait for delayed ACKs
    streaming = False  # a completion's stream has begun (its status line is sent)

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
                                               "/report", "POST /v1/completions"]})
            else:
                self._json(404, {"error": f"no such endpoint: {path}"})
        except Exception as exc:  # a handler bug must not take the sidecar down
            log.exception("probe http handler failed")
            self._json(500, {"error": f"{type(exc).__name__}: {exc}"})

    do_HEAD = do_GET

    # ------------------------------------------------------------ POST /v1/completions

    def _error(self, code: int, message: str, kind: str, param: str | None = None, retry: bool = False) -> None:
        body = (json.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}}) + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if retry:
            self.send_header("Retry-After", "1")
        self.end_headers()
        self.server.probe.metrics.observe_request(code)  # counted before the client can read the answer
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 (http.server API)
        arrived = time.perf_counter()
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            return self._error(413 if length > MAX_BODY else 400, f"Content-Length: accepted: 0 to {MAX_BODY} bytes",
                               "invalid_request_error")
        body = self.rfile.read(length)
        if path != "/v1/completions":
            return self._error(404, f"no such endpoint: POST {path}; accepted: POST /v1/completions",
                               "invalid_request_error")
        try:
            self._complete(body, arrived)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a handler bug must not take the server down
            log.exception("completion handler failed")
            self.close_connection = True
            try:
                self._error(500, f"{type(exc).__name__}: {exc}", "server_error")
            except OSError:
                pass

    def _complete(self, body: bytes, arrived: float) -> None:
        probe = self.server.probe
        try:
            prompt, max_tokens, stream = parse_completion(body)
        except BadRequest as exc:
            return self._error(400, str(exc), "invalid_request_error", exc.param)
        engine = probe.completions(self.server.max_batch, self.server.max_queue, self.server.step_delay)
        if engine is None and getattr(probe, "watching", False):  # probe --watch: the model server answers these
            url = getattr(probe, "url")  # a watch.Watcher's: the model server's (not in Served)
            return self._error(404, f"this sidecar only times {url}; send completions there", "invalid_request_error")
        if engine is None:
            st = probe.state()
            return self._error(503, f"not ready: {st.reason or st.state}", "unavailable", retry=True)
        ids = encode(prompt, engine.vocab_size)
        try:
            c = engine.submit(ids, max_tokens)
        except Rejected as exc:
            return self._error(400, str(exc), "invalid_request_error", exc.param)
        except Overloaded as exc:
            return self._error(503, f"overloaded: {exc}; retry later", "unavailable", retry=True)
        rid, created, model = f"cmpl-{uuid.uuid4().hex[:24]}", int(time.time()), probe.metrics.model
        first: float | None = None
        self.streaming = False
        try:
            if stream:
                first = self._stream(c, rid, created, model, arrived)
            else:
                tokens = []
                for tok in c.results(TOKEN_TIMEOUT):
                    if first is None:
                        first = time.perf_counter() - arrived
                    tokens.append(tok)
                usage = {"prompt_tokens": len(ids), "completion_tokens": len(tokens),
                         "total_tokens": len(ids) + len(tokens)}
                self._json(200, {"id": rid, "object": "text_completion", "created": created, "model": model,
                                 "choices": [{"text": decode(tokens), "index": 0, "logprobs": None,
                                              "finish_reason": "length"}], "usage": usage})
        except (Overloaded, queue.Empty) as exc:
            c.cancel()
            if self.streaming:  # headers are out: end the stream
                self.close_connection = True
                return
            return self._error(503, f"unavailable: {exc or 'no token within the timeout'}", "unavailable", retry=True)
        except (BrokenPipeError, ConnectionResetError):
            c.cancel()
            raise
        probe.metrics.observe_request(200, time.perf_counter() - arrived, first)

    def _stream(self, c, rid: str, created: int, model: str, arrived: float) -> float | None:
        """Server-sent events over chunked transfer; the seconds to the first token."""
        it = c.results(TOKEN_TIMEOUT)
        tok = next(it, None)  # errors before the first token still get a proper status
        first = time.perf_counter() - arrived
        self.streaming = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(data: str) -> None:
            raw = data.encode()
            self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
            self.wfile.flush()

        def event(token: int) -> str:
            return "data: " + json.dumps({"id": rid, "object": "text_completion", "created": created, "model": model,
                                          "choices": [{"text": decode([token]), "index": 0, "logprobs": None,
                                                       "finish_reason": None}]}) + "\n\n"

        if tok is not None:
            chunk(event(tok))
            for tok in it:
                chunk(event(tok))
        chunk("data: " + json.dumps({"id": rid, "object": "text_completion", "created": created, "model": model,
                                     "choices": [{"text": "", "index": 0, "logprobs": None,
                                                  "finish_reason": "length"}]}) + "\n\n")
        chunk("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        return first

    def log_message(self, fmt: str, *args) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)


class ProbeServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    request_queue_size = 128  # listen backlog: a load test opens many connections at once

    def __init__(self, probe: Served, host: str, port: int, *, max_batch: int = 8, max_queue: int = 256,
                 step_delay: float = 0.0) -> None:
        self.probe = probe
        self.max_batch, self.max_queue, self.step_delay = max_batch, max_queue, step_delay
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

    def handle_error(self, request, client_address) -> None:
        """A client that went away mid-request is routine under load: no traceback on stderr."""
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionResetError, BrokenPipeError, TimeoutError)):
            log.debug("client %s went away: %s", client_address, exc)
            return
        super().handle_error(request, client_address)

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        host = cast(str, self.server_address[0])  # AF_INET/AF_INET6: a str
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

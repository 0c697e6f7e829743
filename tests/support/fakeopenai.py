"""A fake OpenAI-compatible server for the load generator's tests and benchmarks: real HTTP on 127.0.0.1, in a
thread (``FakeServer``; its fixture is tests/loadtest/conftest.py's ``fake_server``)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMPLETION = {"id": "cmpl-test", "object": "text_completion", "choices": [{"text": "ok", "index": 0,
                                                                           "finish_reason": "length"}]}


class FakeServer(ThreadingHTTPServer):
    """POST answers after ``delay`` seconds; ``serial`` makes it serve one request at a time, first come first
    served: a request's service starts when it reaches the queue or when the one before it ends, whichever is
    later, and ends ``delay`` later on the clock (the handler sleeps until then), so time, not the contended CPU,
    sets the capacity: at most one answer per ``delay`` over any stretch, and exactly that while a queue waits (a
    late thread answers late but moves no later request's end); ``latency`` (serial only): seconds each request
    spends before it reaches the queue, in parallel with the others (a network or prefill leg); ``status`` other
    than 200 answers that status; ``plain`` answers 200 with JSON that is no completion; otherwise a completion,
    as server-sent events when the body asks ``stream``. ``waits``: each serial request's queueing (its service's
    start - its arrival at the queue), on ``time.perf_counter`` (the generator's clock too: CLOCK_MONOTONIC).

    ``tokens=(a, p, d)``: an LLM server whose capacity the clock sets, serial as above: a request of ``i`` prompt
    words and ``max_tokens`` ``o`` is served in ``a + p i + d o`` seconds (overhead, prefill, decode), its first
    token streamed at ``start + a + p i + d``, each next one ``d`` later, then (``stream_options.include_usage``)
    a last chunk with ``usage`` (the words as prompt tokens, ``o`` completion tokens); one replica serves at most
    ``1 / (a + p i + d o)`` req/s, the capacity model ``min(1/a, (1/d) / ((p/d) i + o))`` (``a`` = 0: no
    ceiling). ``GET /v1/models`` names ``fake-llm``."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, delay: float = 0.0, serial: bool = False, status: int = 200, plain: bool = False,
                 latency: float = 0.0, tokens: tuple[float, float, float] | None = None) -> None:
        self.delay, self.serial, self.status, self.plain, self.latency = delay, serial, status, plain, latency
        self.tokens = tokens
        self.served: list[tuple[int, int]] = []  # tokens mode: (prompt words, answer tokens) of each request
        self.lock = threading.Lock()
        self.waits: list[float] = []
        self.free_at = 0.0  # serial: when the last admitted request's service ends
        super().__init__(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self.thread.join(5)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: FakeServer

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        raw = b'{"object": "list", "data": [{"id": "fake-llm", "object": "model"}]}'
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _stream_tokens(self, body: dict) -> None:
        """``tokens`` mode: serial service on the clock, each token sent at its time (see ``FakeServer``)."""
        srv = self.server
        a, p, d = srv.tokens
        words, out = len(str(body.get("prompt", "")).split()), int(body.get("max_tokens", 16))
        with srv.lock:
            arrived = time.perf_counter()
            start = max(arrived, srv.free_at)
            srv.free_at = start + a + p * words + d * out
            srv.waits.append(start - arrived)
            srv.served.append((words, out))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(doc) -> None:
            data = b"data: " + (doc if isinstance(doc, bytes) else json.dumps(doc).encode()) + b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        for k in range(1, out + 1):
            time.sleep(max(0.0, start + a + p * words + k * d - time.perf_counter()))
            chunk({"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": " tok",
                                                                        "finish_reason": None}], "usage": None})
        if (body.get("stream_options") or {}).get("include_usage"):
            chunk({"id": "c", "object": "text_completion", "choices": [],
                   "usage": {"prompt_tokens": words, "completion_tokens": out, "total_tokens": words + out}})
        chunk(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")

    def do_POST(self) -> None:  # noqa: N802
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if srv.tokens is not None and body.get("stream"):
            return self._stream_tokens(body)
        if srv.serial:
            if srv.latency:
                time.sleep(srv.latency)
            with srv.lock:
                arrived = time.perf_counter()
                start = max(arrived, srv.free_at)
                srv.free_at = end = start + srv.delay
                srv.waits.append(start - arrived)
            time.sleep(max(0.0, end - time.perf_counter()))
        elif srv.delay:
            time.sleep(srv.delay)
        if srv.status != 200:
            raw = b'{"error": {"message": "nope"}}'
            self.send_response(srv.status)
        elif srv.plain:  # 200, but not a completion: JSON without choices, never events
            raw = b'{"status": "fine"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        elif body.get("stream"):
            raw = ("data: " + json.dumps(COMPLETION) + "\n\ndata: [DONE]\n\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
        else:
            raw = json.dumps(COMPLETION).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

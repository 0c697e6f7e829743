"""Test servers for the load generator: real HTTP on 127.0.0.1, in a thread, stopped after each test."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

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
    start - its arrival at the queue), on ``time.perf_counter`` (the generator's clock too: CLOCK_MONOTONIC)."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, delay: float = 0.0, serial: bool = False, status: int = 200, plain: bool = False,
                 latency: float = 0.0) -> None:
        self.delay, self.serial, self.status, self.plain, self.latency = delay, serial, status, plain, latency
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

    def do_POST(self) -> None:  # noqa: N802
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
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


@pytest.fixture
def fake_server():
    servers: list[FakeServer] = []

    def make(**kw) -> FakeServer:
        s = FakeServer(**kw)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()

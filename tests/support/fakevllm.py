"""A fake vLLM for tests: an OpenAI-compatible ``POST /v1/completions`` whose capacity the clock sets, and vLLM's
metric names on ``GET /metrics``, on 127.0.0.1 in a thread.

``replicas`` servers of one request at a time each, first come first served: a request starts on the replica free
first, when it arrives or when that replica's last request ends, whichever is later, and ends ``service`` seconds
later on the clock (the handler sleeps until then and answers one streamed token). So ``replicas / service``
requests/s are served while any wait, however busy the machine: a late thread answers late but moves no later
request's start. ``/metrics`` is computed from that schedule at the time it is read (``time.monotonic``), per
replica (label ``replica``): ``vllm:num_requests_waiting`` (arrived, not started), ``vllm:num_requests_running``,
``vllm:request_success_total``, ``vllm:prompt_tokens_total`` and ``vllm:generation_tokens_total`` (a request's
prompt words and ``max_tokens``, counted when it ends).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "fake-vllm"


class FakeVllm(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, replicas: int = 2, service: float = 0.1) -> None:
        self.replicas, self.service = replicas, service
        self.lock = threading.Lock()
        self.free_at = [0.0] * replicas
        self.log: list[tuple[float, float, float, int, int, int]] = []  # arrival, start, end, replica, prompt, out
        super().__init__(("127.0.0.1", 0), _Handler)
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"

    def admit(self, prompt: int, out: int) -> float:
        """Schedule one request now; the time (monotonic) its answer is due."""
        with self.lock:
            now = time.monotonic()
            k = min(range(self.replicas), key=lambda i: self.free_at[i])
            start = max(now, self.free_at[k])
            self.free_at[k] = end = start + self.service
            self.log.append((now, start, end, k, prompt, out))
        return end

    def exposition(self) -> str:
        now = time.monotonic()
        with self.lock:
            log = list(self.log)
        per = {k: {"waiting": 0, "running": 0, "success": 0, "prompt": 0, "generation": 0}
               for k in range(self.replicas)}
        for arrival, start, end, k, prompt, out in log:
            m = per[k]
            if arrival <= now < start:
                m["waiting"] += 1
            elif start <= now < end:
                m["running"] += 1
            elif end <= now:
                m["success"] += 1
                m["prompt"] += prompt
                m["generation"] += out
        lines = []
        for name, kind, key in (("vllm:num_requests_waiting", "gauge", "waiting"),
                                ("vllm:num_requests_running", "gauge", "running"),
                                ("vllm:request_success_total", "counter", "success"),
                                ("vllm:prompt_tokens_total", "counter", "prompt"),
                                ("vllm:generation_tokens_total", "counter", "generation")):
            lines.append(f"# TYPE {name} {kind}")
            lines += [f'{name}{{model_name="{MODEL}",replica="{k}"}} {per[k][key]}' for k in per]
        return "\n".join(lines) + "\n"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self.thread.join(5)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeVllm

    def log_message(self, *args) -> None:
        pass

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/metrics":
            return self._send(200, self.server.exposition().encode(), "text/plain; version=0.0.4")
        if self.path == "/v1/models":
            return self._send(200, json.dumps({"data": [{"id": MODEL}]}).encode(), "application/json")
        self._send(404, b"{}", "application/json")

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        due = self.server.admit(len(str(body.get("prompt", "")).split()), int(body.get("max_tokens", 1)))
        time.sleep(max(0.0, due - time.monotonic()))
        chunk = {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": " ok", "finish_reason": "length"}]}
        if body.get("stream"):
            return self._send(200, ("data: " + json.dumps(chunk) + "\n\ndata: [DONE]\n\n").encode(), "text/event-stream")
        self._send(200, json.dumps(chunk).encode(), "application/json")

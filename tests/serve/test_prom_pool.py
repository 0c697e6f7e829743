"""``scaler.prompool.PromPool``: a total deadline against targets that drip or hang, one bounded pool per target,
no error body and no URL secret in messages. Real HTTP on 127.0.0.1 (raw sockets for the misbehaving targets)."""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from scaler.prom import Credentials, PrometheusClient, PromError, PromErrorKind, PromPool, redact_url
from scaler.spec import PrometheusTarget

T0 = 1_700_000_400


class Misbehaving:
    """A TCP server on 127.0.0.1: ``drip`` sends a valid answer one byte every 0.1 s; ``tarpit`` accepts and says nothing."""

    def __init__(self, mode: str):
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.accepted = 0
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            self._conns.append(c)
            if self.mode == "drip":
                threading.Thread(target=self._drip, args=(c,), daemon=True).start()

    def _drip(self, c: socket.socket) -> None:
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
        data = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        try:
            c.recv(65536)
            for i in range(len(data)):
                if self._stop.wait(0.1):
                    return
                c.send(data[i:i + 1])
        except OSError:
            pass

    def close(self) -> None:
        self._stop.set()
        for c in self._conns:
            c.close()
        self.sock.close()


@pytest.fixture
def pool():
    p = PromPool(per_target=4, max_in_flight=16)
    yield p
    p.close()


@pytest.mark.parametrize("mode", ["drip", "tarpit"])
def test_a_total_deadline_bounds_a_dripping_or_silent_target(pool, mode):
    bad = Misbehaving(mode)
    try:
        c = PrometheusClient(PrometheusTarget(bad.url, timeout_seconds=0.5), pool=pool)
        t0 = time.monotonic()
        with pytest.raises(PromError) as err:
            c.scalar("q", T0)
        took = time.monotonic() - t0
        # the drip needs ~12 s for its answer; a per-read timeout (0.5 s) would never fire on it (the margin
        # over 0.5 s is for a busy machine)
        assert took < 4.0, took
        assert err.value.kind is PromErrorKind.UNREACHABLE and "did not answer within 0.5s" in str(err.value)
    finally:
        bad.close()


class Counting(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, status: int = 200, body: bytes = b""):
        self.connections = 0
        self.active = 0
        self.peak = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                with server.lock:
                    server.connections += 1

            def do_GET(self):  # noqa: N802
                with server.lock:
                    server.active += 1
                    server.peak = max(server.peak, server.active)
                time.sleep(0.02)
                data = body or json.dumps({"status": "success", "data": {"resultType": "vector",
                                                                          "result": [{"metric": {}, "value": [T0, "3"]}]}}).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                with server.lock:
                    server.active -= 1

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self):
        self.shutdown()
        self.server_close()


def test_one_bounded_pool_is_shared_by_every_client_of_a_target(pool):
    srv = Counting()
    try:
        # 100 ScaledObjects' clients, 20 threads at once, 200 queries: at most per_target (4) connections
        clients = [PrometheusClient(PrometheusTarget(srv.url, query_parameters=(("so", str(i)),)), pool=pool)
                   for i in range(100)]
        with ThreadPoolExecutor(20) as ex:
            values = list(ex.map(lambda i: clients[i % 100].scalar("q", T0), range(200)))
        assert values == [3.0] * 200
        assert srv.connections <= 4 and srv.peak <= 4
        assert pool.requests == 200 and pool.connections() <= 4
    finally:
        srv.close()


def test_an_error_body_and_a_url_secret_are_never_echoed(pool):
    srv = Counting(status=400, body=json.dumps({"status": "error", "errorType": "bad_data",
                                                "error": "SECRET-IN-BODY " * 1000}).encode())
    try:
        url = srv.url + "/prom?token=SECRET-IN-URL"
        with pytest.raises(PromError) as err:
            PrometheusClient(PrometheusTarget(url), pool=pool).scalar("q", T0)
        msg = str(err.value)
        assert err.value.kind is PromErrorKind.REJECTED
        assert "HTTP Status Code 400 (bad_data)" in msg and "SECRET" not in msg and len(msg) < 200
    finally:
        srv.close()
    assert redact_url("https://u:pw@prom.example:9090/x?token=t#f") == "https://prom.example:9090/x"


def test_credentials_go_only_to_their_allowed_urls(pool):
    creds = Credentials("team-a", bearer_token="tok", allowed_urls=("https://prom.a:9090/",))
    PrometheusClient(PrometheusTarget("https://prom.a:9090/sub"), creds, pool=pool)  # below the allowed path: fine
    for other in ("https://prom.b:9090", "http://prom.a:9090", "https://prom.a:9091", "https://prom.a.evil:9090"):
        with pytest.raises(PromError) as err:
            PrometheusClient(PrometheusTarget(other), creds, pool=pool)
        assert err.value.kind is PromErrorKind.CREDENTIALS and "may not be sent to" in str(err.value)
        assert "tok" not in str(err.value)


def test_a_closed_pool_answers_at_once(pool):
    bad = Misbehaving("tarpit")
    try:
        c = PrometheusClient(PrometheusTarget(bad.url, timeout_seconds=30), pool=pool)
        got: list = []
        t = threading.Thread(target=lambda: got.append(pytest.raises(PromError, c.scalar, "q", T0)))
        t.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        pool.close(timeout=2.0)
        t.join(5)
        assert not t.is_alive() and time.monotonic() - t0 < 3.0  # not the 30 s timeout
        assert "stopping" in str(got[0].value)
    finally:
        bad.close()

"""``scaler.prom.PrometheusClient`` against a tiny scripted HTTP server on 127.0.0.1 (no network beyond loopback)."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest

from scaler.prom import MAX_POINTS, Credentials, PrometheusClient, PromError, PromErrorKind
from scaler.spec import PrometheusTarget

T0 = 1_700_000_400


class FakeServer(ThreadingHTTPServer):
    """Answers with ``responder(path, params) -> (status, body)``; records (path, params, headers)."""

    daemon_threads = True

    def __init__(self):
        self.requests: list[tuple[str, dict, dict]] = []
        self.responder = lambda path, params: (404, {"status": "error"})
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server API)
                u = urlparse(self.path)
                params = {k: v[0] for k, v in parse_qs(u.query).items()}
                server.requests.append((u.path, params, dict(self.headers)))
                status, body = server.responder(u.path, params)
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (timeout tests)
                    pass

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def server():
    s = FakeServer()
    thread = threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield s
    s.shutdown()
    s.server_close()
    thread.join(timeout=5)


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def vector(*values, labels=None) -> dict:
    result = [{"metric": (labels or [{}] * len(values))[i], "value": [T0, v]} for i, v in enumerate(values)]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def client(server: FakeServer, **target) -> PrometheusClient:
    return PrometheusClient(PrometheusTarget(server.url, **target))


def test_scalar_sends_time_parameters_and_headers(server):
    server.responder = lambda path, params: (200, vector("12.5"))
    c = PrometheusClient(PrometheusTarget(server.url, query_parameters=(("tenant", "a"),),
                                          custom_headers=(("X-Scope-OrgID", "team-a"),)),
                         Credentials("reader", bearer_token="s3cret"))
    assert c.scalar("sum(rate(x[2m]))", T0 + 0.25) == 12.5
    [(path, params, headers)] = server.requests
    assert path == "/api/v1/query"
    assert params == {"query": "sum(rate(x[2m]))", "time": "1700000400.250", "tenant": "a"}
    assert headers["X-Scope-OrgID"] == "team-a" and headers["Authorization"] == "Bearer s3cret"


def test_empty_result_is_zero_or_no_data(server):
    server.responder = lambda path, params: (200, vector())
    c = client(server)
    assert c.scalar("q", T0) == 0.0
    with pytest.raises(PromError) as err:
        c.scalar("q", T0, ignore_null=False)
    assert err.value.kind is PromErrorKind.NO_DATA and "ignoreNullValues=false" in str(err.value)


def test_several_series_are_refused(server):
    server.responder = lambda path, params: (200, vector("1", "2", "3", labels=[{"i": "a"}, {"i": "b"}, {"i": "c"}]))
    with pytest.raises(PromError) as err:
        client(server).scalar("rate(x[2m])", T0)
    assert err.value.kind is PromErrorKind.MULTIPLE_SERIES
    assert "more than one series" in str(err.value) and "sum(" in str(err.value)  # refused at the second


@pytest.mark.parametrize("raw", ["NaN", "+Inf", "-Inf"])
def test_non_finite_is_zero_with_ignore_null_else_no_data(server, raw):
    server.responder = lambda path, params: (200, vector(raw))
    c = client(server)
    assert c.scalar("q", T0) == 0.0
    with pytest.raises(PromError) as err:
        c.scalar("q", T0, ignore_null=False)
    assert err.value.kind is PromErrorKind.NO_DATA and raw in str(err.value)  # no usable value, like no series


def test_negative_values_are_returned_as_they_are(server):
    server.responder = lambda path, params: (200, vector("-2.5"))
    assert client(server).scalar("q", T0) == -2.5


@pytest.mark.parametrize("status,kind,attempts", [
    (400, PromErrorKind.REJECTED, 1),
    (401, PromErrorKind.REJECTED, 1),
    (422, PromErrorKind.REJECTED, 1),
    (500, PromErrorKind.UNREACHABLE, 1),
    (503, PromErrorKind.UNREACHABLE, 2),  # one quick retry on 502-504
])
def test_http_errors_map_to_kinds(server, status, kind, attempts):
    server.responder = lambda path, params: (status, {"status": "error", "error": "parse error at char 9"})
    with pytest.raises(PromError) as err:
        client(server).scalar("sum(rate(x[2m]", T0)
    assert err.value.kind is kind
    assert f"HTTP Status Code {status}" in str(err.value) and server.url in str(err.value)
    assert len(server.requests) == attempts


def test_a_slow_answer_is_unreachable(server):
    def slow(path, params):
        time.sleep(3.0)
        return 200, vector("1")

    server.responder = slow
    t0 = time.monotonic()
    with pytest.raises(PromError) as err:
        client(server, timeout_seconds=0.2).scalar("q", T0)
    assert time.monotonic() - t0 < 2.0  # did not wait for the answer (3 s; the margin is for a busy machine)
    assert err.value.kind is PromErrorKind.UNREACHABLE and server.url in str(err.value)


def test_a_refused_connection_is_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again at once: nobody listens there
    c = PrometheusClient(PrometheusTarget(f"http://127.0.0.1:{port}"))
    with pytest.raises(PromError) as err:
        c.scalar("q", T0)
    assert err.value.kind is PromErrorKind.UNREACHABLE and "is unreachable" in str(err.value)


@pytest.mark.parametrize("body", [b"<html>proxy login</html>", {"status": "success"}, {"data": []}])
def test_an_answer_that_is_not_the_prometheus_api_is_unreachable(server, body):
    server.responder = lambda path, params: (200, body)
    with pytest.raises(PromError) as err:
        client(server).scalar("q", T0)
    assert err.value.kind is PromErrorKind.UNREACHABLE and "sent an unreadable answer" in str(err.value)


def matrix_responder(series: dict[str, callable]):
    """A query_range answer: for each label value, f(t) at every step in [start, end]."""
    def respond(path, params):
        assert path == "/api/v1/query_range"
        start, end, step = int(params["start"]), int(params["end"]), float(params["step"].rstrip("s"))
        t = np.arange(start, end + step / 2, step)
        result = [{"metric": {"instance": name}, "values": [[float(x), repr(float(f(x)))] for x in t]}
                  for name, f in series.items()]
        return 200, {"status": "success", "data": {"resultType": "matrix", "result": result}}
    return respond


def test_a_long_range_is_split_under_the_point_limit_and_merged_per_series(server):
    server.responder = matrix_responder({"a": lambda x: (x - T0) / 60 % 7, "b": lambda x: 2.0})
    n = 25_000
    out = client(server).range("rate(x[2m])", T0, T0 + 60 * (n - 1), 60)
    chunks = [(int(p["start"]), int(p["end"])) for _, p, _ in server.requests]
    assert chunks == [(T0, T0 + 60 * 10_999), (T0 + 60 * 11_000, T0 + 60 * 21_999), (T0 + 60 * 22_000, T0 + 60 * 24_999)]
    assert all((e - s) / 60 + 1 <= MAX_POINTS for s, e in chunks)
    assert all(p["step"] == "60s" for _, p, _ in server.requests)
    assert [s["metric"] for s in out] == [{"instance": "a"}, {"instance": "b"}]
    for s in out:
        t = np.array([v[0] for v in s["values"]])
        np.testing.assert_array_equal(t, T0 + 60.0 * np.arange(n))  # contiguous, nothing twice
    a = np.array([float(v[1]) for v in out[0]["values"]])
    np.testing.assert_array_equal(a, np.arange(n) % 7)
    assert {v[1] for v in out[1]["values"]} == {"2.0"}


def test_a_short_range_is_one_request(server):
    server.responder = matrix_responder({"a": lambda x: 1.0})
    out = client(server).range("q", T0, T0 + 60 * (MAX_POINTS - 1), 60)
    assert len(server.requests) == 1 and len(out[0]["values"]) == MAX_POINTS


def test_a_bad_range_is_refused_before_any_request(server):
    with pytest.raises(ValueError):
        client(server).range("q", T0 + 60, T0, 60)
    assert server.requests == []


def test_range_series_is_one_regular_series(server):
    server.responder = matrix_responder({"a": lambda x: 5.0 + (x - T0) / 60})
    series, report = client(server).range_series("sum(rate(x[2m]))", T0, T0 + 60 * 119, 60)
    assert len(series) == 120 and series.step == 60.0 and report.points == 120 and report.missing == 0
    np.testing.assert_array_equal(series.t, T0 + 60.0 * np.arange(120))
    np.testing.assert_array_equal(series.y, 5.0 + np.arange(120))


def test_range_series_errors(server):
    server.responder = matrix_responder({})
    with pytest.raises(PromError) as err:
        client(server).range_series("q", T0, T0 + 600, 60)
    assert err.value.kind is PromErrorKind.NO_DATA
    server.responder = matrix_responder({"a": lambda x: 1.0, "b": lambda x: 2.0})
    with pytest.raises(PromError) as err:
        client(server).range_series("q", T0, T0 + 600, 60)
    assert err.value.kind is PromErrorKind.MULTIPLE_SERIES and "more than one series" in str(err.value)
    server.responder = lambda path, params: (400, {"status": "error"})
    with pytest.raises(PromError) as err:
        client(server).range_series("q", T0, T0 + 600, 60)
    assert err.value.kind is PromErrorKind.REJECTED

"""Issue 27 against the real server: 2,000 idle connections to the HTTP port (slowloris) hold no thread each
and are closed by the idle timeout; hostile names are refused before anything is held; an answer of many
series is refused at the second one with the server's memory bounded."""

from __future__ import annotations

import gzip
import http.server
import resource
import socket
import threading
import time
import urllib.request

import grpc
import pytest

from support.live import metadata, rss_bytes


def threads() -> int:
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("Threads:")).split()[1])


def test_two_thousand_idle_connections_hold_no_thread_each_and_are_closed(live_scaler):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 8192)), hard))
    s = live_scaler()
    port = s.server.http_port
    base = threads()
    socks = []
    try:
        for _ in range(2000):  # connect and say nothing (the kernel's backlog holds what the server has not accepted)
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", port))
            socks.append(c)
        time.sleep(2.0)
        held = threads()
        # before issue 27: one thread per connection (2,017 threads); now the pool's 4 and the event loop
        assert held - base <= 8, (base, held)
        # the idle ones are closed by the server (HTTP_IDLE_SECONDS 10, swept every 2 s): back to baseline
        t0 = time.monotonic()
        closed = 0
        while time.monotonic() - t0 < 30 and closed < 256:
            closed = 0
            for c in socks[:256]:
                try:
                    closed += c.recv(1) == b""
                except BlockingIOError:
                    pass
                except OSError:
                    closed += 1
            time.sleep(0.5)
        assert closed == 256, closed
        back_after = time.monotonic() - t0
    finally:
        for c in socks:
            c.close()
    # a scrape is answered once the idle connections are gone
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
    assert b"forescale_scaledobjects" in body
    assert threads() - base <= 8
    print(f"threads: baseline {base}, under 2000 idle connections {held}; idle ones closed after {back_after:.1f}s")


@pytest.mark.parametrize("namespace,name", [("chaos", "x" * 1_900_000), ("chaos", "Bad_Name"),
                                            ("n" * 64, "ok"), ("chaos", "line\nforged")])
def test_names_outside_kubernetes_rules_are_refused_and_never_exported(live_prom, live_scaler, namespace, name):
    s = live_scaler()
    with pytest.raises(grpc.RpcError) as err:
        s.stub.GetMetrics(__import__("scaler._proto.externalscaler_pb2", fromlist=["x"]).GetMetricsRequest(
            scaledObjectRef=s.ref(metadata(live_prom.url), name, namespace)), timeout=10)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "DNS-1123" in err.value.details() and len(err.value.details()) < 400  # no echo of the name
    assert s.server.registry.workloads() == []
    body = urllib.request.urlopen(f"http://127.0.0.1:{s.server.http_port}/metrics", timeout=10).read()
    assert len(body) < 200_000  # before: 12 calls with 1.9 MB names made one scrape 826 MB


class Hostile(http.server.BaseHTTPRequestHandler):
    """A Prometheus stand-in whose every answer is ``Hostile.body`` (gzip-encoded when ``Hostile.gzip``); range
    queries get ``Hostile.range_body`` when set."""
    body = b""
    range_body = b""
    gzip = False

    def do_GET(self):  # noqa: N802 - http.server's name
        if "query_range" in self.path and Hostile.range_body:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(Hostile.range_body)))
            self.end_headers()
            try:
                self.wfile.write(Hostile.range_body)
            except OSError:
                pass
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if Hostile.gzip:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(Hostile.body)))
        self.end_headers()
        try:
            self.wfile.write(Hostile.body)
        except OSError:
            pass

    def log_message(self, *a):
        pass


@pytest.fixture
def hostile():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_a_query_missing_sum_is_refused_at_the_second_series_in_observation_and_history(live_scaler, hostile):
    """A realistic mistake: 300,000 per-pod series, in the instant answer and in the range answers of the fit."""
    now = int(time.time())
    inst = b",".join(b'{"metric":{"pod":"p-%d"},"value":[%d,"0.5"]}' % (i, now) for i in range(300_000))
    Hostile.body, Hostile.gzip = b'{"status":"success","data":{"resultType":"vector","result":[' + inst + b"]}}", False
    values = b",".join(b'[%d,"0.5"]' % (now - 60 * k) for k in range(60))
    rng = b",".join(b'{"metric":{"pod":"p-%d"},"values":[%s]}' % (i, values) for i in range(20_000))
    Hostile.range_body = b'{"status":"success","data":{"resultType":"matrix","result":[' + rng + b"]}}"
    del inst, values, rng
    s = live_scaler()
    before = rss_bytes()
    peak = before
    md = metadata(hostile, mode="forecastAndScale", model="naive", history="1h", minHistory="30m")
    for _ in range(5):
        with pytest.raises(grpc.RpcError) as err:
            s.get(md, "nosum", timeout=10)
        peak = max(peak, rss_bytes())
        time.sleep(0.2)
    Hostile.range_body = b""
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "more than one series" in err.value.details() and "sum(" in err.value.details()
    # before issue 27: 880 MB per ScaledObject, all kept
    assert peak - before < 100 << 20, (before, peak)
    print(f"300,000 series: RSS {before >> 20} -> {peak >> 20} MiB")


def test_a_gzip_answer_of_millions_of_series_is_refused_early_with_bounded_memory(live_scaler, hostile):
    # 2.1 M tiny series, 60 MB of JSON, ~150 KB gzipped (the attack)
    series = b",".join([b'{"metric":{"i":"%d"},"value":[1,"1"]}' % i for i in range(2_100_000)])
    raw = b'{"status":"success","data":{"resultType":"vector","result":[' + series + b"]}}"
    Hostile.body, Hostile.gzip = gzip.compress(raw, 9), True
    del series, raw
    s = live_scaler()
    before = rss_bytes()
    with pytest.raises(grpc.RpcError) as err:
        s.get(metadata(hostile), "bomb", timeout=10)
    peak = rss_bytes()
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "more than one series" in err.value.details()
    # before issue 27: 1.7 GB peak, 1.5 GB kept; the cap is 1 MiB decompressed
    assert peak - before < 50 << 20, (before, peak)
    print(f"gzip bomb: {len(Hostile.body)} bytes sent, RSS {before >> 20} -> {peak >> 20} MiB")

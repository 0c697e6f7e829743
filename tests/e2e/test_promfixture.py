"""The real-Prometheus fixture really works: data in, the right answers out,
loopback only, and nothing left running."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import numpy as np
import pytest

from support import promfixture as pf

LLM = 'forescale_requests_total{job="llm",model="m1"}'
RATE = f"rate({LLM}[2m])"


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


# -- the session server ------------------------------------------------------


def test_rate_at_now_matches_trace(prometheus):
    now, end_at, trace = prometheus.now, prometheus.end_at, prometheus.trace
    assert end_at == now - pf.END_OFFSET_S == trace.end_at == trace.timestamps[-1]
    got = prometheus.query_value(RATE, time=now)
    # the samples in [now-120, now] span [now-115, now-10]: rate is the trace's mean there
    truth = trace.mean_qps(now - 115, now - pf.END_OFFSET_S)
    assert got is not None and truth > 0
    assert rel(got, truth) < 0.02
    assert rel(got, trace.expected_rate(now, 120)) < 1e-9
    # at the last sample the window is exactly the last two trace minutes
    at_end = prometheus.query_value(RATE, time=end_at)
    assert rel(at_end, trace.mean_qps(end_at - 120, end_at)) < 0.02
    assert rel(at_end, (trace.counts[-1] + trace.counts[-2]) / 120) < 1e-9


def test_prom_rate_emulation_matches_prometheus(prometheus):
    """expected_rate() reproduces Prometheus' rate() anywhere: historical
    unaligned times, the staleness tail after the data ends, before the start."""
    trace = prometheus.trace
    rng = np.random.default_rng(7)
    times = list(rng.uniform(trace.start + 600, prometheus.end_at, 20).round(3))
    times += [prometheus.end_at + d for d in (5, 16, 17, 30, 60, 100, 104, 106, 200)]
    times += [trace.start + 30, trace.start - 60]
    for t in times:
        got = prometheus.query_value(RATE, time=t)
        want = trace.expected_rate(t, 120)
        if want is None:
            assert got is None, t
        else:
            assert got is not None and rel(got, want) < 1e-9, (t, got, want)
    # the documented staleness: biased low at end+30 s, gone after end+105 s
    e = prometheus.end_at
    assert prometheus.query_value(RATE, time=e + 30) < 0.9 * prometheus.query_value(RATE, time=e)
    assert prometheus.query_value(RATE, time=e + 105) is not None  # 2 samples left
    assert prometheus.query_value(RATE, time=e + 105.001) is None
    assert prometheus.query_value(LLM, time=e + 299) is not None
    assert prometheus.query_value(LLM, time=e + 301) is None


def test_all_trace_samples_loaded(prometheus):
    trace = prometheus.trace
    assert len(trace.timestamps) == 14 * 86400 // 15 + 1
    n = prometheus.query_value(f"count_over_time({LLM}[15d])", time=prometheus.now)
    assert n == len(trace.timestamps)
    assert prometheus.query_value(f"timestamp({LLM})", time=prometheus.now) == prometheus.end_at
    # a day in the middle of the trace: the increase is the trace's request count
    t = prometheus.end_at - 7 * 86400
    inc = prometheus.query_value(f"{LLM} - {LLM} offset 1d", time=t)
    assert inc == trace.counter_at(t) - trace.counter_at(t - 86400) > 0


def test_flat_series(prometheus):
    for t in (prometheus.now, prometheus.now - 86400 + 7.5):
        v = prometheus.query_value('rate(forescale_flat_requests_total{job="flat"}[2m])', time=t)
        assert v == pytest.approx(5.0, rel=1e-9)


def test_multi_series(prometheus):
    res = prometheus.query("rate(forescale_multi_requests_total[2m])", time=prometheus.now)
    assert len(res) == 3
    got = {r["metric"]["instance"]: float(r["value"][1]) for r in res}
    assert got == pytest.approx({"a": 1.0, "b": 2.0, "c": 3.0}, rel=1e-9)
    assert all(r["metric"]["job"] == "multi" for r in res)
    total = prometheus.query_value("sum(rate(forescale_multi_requests_total[2m]))",
                                   time=prometheus.now)
    assert total == pytest.approx(6.0, rel=1e-9)
    with pytest.raises(ValueError, match="3 series"):
        prometheus.query_value("rate(forescale_multi_requests_total[2m])", time=prometheus.now)


def test_cold_start_gauge(prometheus):
    q = 'forescale_cold_start_seconds{phase="total",model="m1"}'
    assert prometheus.query_value(q, time=prometheus.now) == 240.0
    assert prometheus.query_value(q, time=prometheus.now - 2 * 86400) is None


def test_range_query_last_6h(prometheus):
    trace, end = prometheus.trace, prometheus.end_at
    start = end - 6 * 3600
    res = prometheus.query_range(RATE, start, end, 60)
    assert len(res) == 1
    pts = res[0]["values"]
    assert len(pts) == 6 * 60 + 1
    ts = np.array([p[0] for p in pts], dtype=float)
    vs = np.array([float(p[1]) for p in pts])
    assert np.allclose(ts, start + 60 * np.arange(len(pts)))
    want = np.array([trace.mean_qps(t - 120, t) for t in ts])
    assert np.max(np.abs(vs - want) / want) < 0.02
    # and ending at .now (unaligned with the samples): the emulation, exactly
    res = prometheus.query_range(RATE, prometheus.now - 6 * 3600, prometheus.now, "60s")
    pts = res[0]["values"]
    assert len(pts) == 361
    for t, v in pts:
        assert rel(float(v), trace.expected_rate(float(t), 120)) < 1e-9


def test_session_server_is_loopback_only(prometheus):
    assert prometheus.url == f"http://127.0.0.1:{prometheus.port}"
    assert prometheus.flags()["web.listen-address"] == f"127.0.0.1:{prometheus.port}"
    listening = _listening_sockets(prometheus.port)
    assert listening == {("tcp", "0100007F")}, listening


def _listening_sockets(port: int) -> set[tuple[str, str]]:
    """(family, local address hex) of the LISTEN sockets on ``port``."""
    found = set()
    for fam in ("tcp", "tcp6"):
        p = Path(f"/proc/net/{fam}")
        if not p.exists():
            continue
        for line in p.read_text().splitlines()[1:]:
            f = line.split()
            addr, prt = f[1].rsplit(":", 1)
            if int(prt, 16) == port and f[3] == "0A":
                found.add((fam, addr))
    return found


# -- servers of one's own ----------------------------------------------------


def test_factory_custom_series_live_at_wall_clock(prometheus_factory):
    """A ramp that extends an hour into the future looks live: rate() at the
    wall-clock time (no time=) is right whenever the test runs."""
    now = time.time()
    t = pf.sample_times(now - 3 * 3600, now + 3600)
    ramp = pf.SeriesSpec("ramp_requests", {"job": "ramp"}, "counter", t,
                         pf.counter_from_rate(t, lambda x: 1.0 + (x - t[0]) / 3600.0))
    srv = prometheus_factory([ramp])
    res = srv.query("rate(ramp_requests_total[2m])")
    assert len(res) == 1
    at, v = float(res[0]["value"][0]), float(res[0]["value"][1])
    assert abs(at - time.time()) < 5
    assert rel(v, ramp.rate(at)) < 1e-9
    assert 3.5 < v < 4.5  # ~1 + 3 h of ramp
    # future samples are invisible to queries at earlier times
    assert srv.query_value("timestamp(ramp_requests_total)", time=now) <= now + 0.001


def test_stop_really_stops(prometheus_factory):
    t = pf.sample_times(time.time() - 3600, time.time())
    srv = prometheus_factory([pf.SeriesSpec("g", {}, "gauge", t, np.ones(len(t)))])
    pid, port, workdir = srv.pid, srv.port, srv.workdir
    assert srv.running and workdir.is_dir()
    os.kill(pid, 0)  # alive
    assert srv.stop() == 0  # SIGTERM -> graceful exit
    assert not srv.running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    assert not workdir.exists()
    assert srv.stop() is None  # idempotent


def test_two_servers_at_once_with_different_data(prometheus_factory):
    t = pf.sample_times(time.time() - 3600, time.time())
    a = prometheus_factory([pf.SeriesSpec("x", {}, "gauge", t, np.full(len(t), 1.0))])
    b = prometheus_factory([pf.SeriesSpec("x", {}, "gauge", t, np.full(len(t), 2.0))])
    assert a.port != b.port
    assert a.query_value("x", time=t[-1]) == 1.0
    assert b.query_value("x", time=t[-1]) == 2.0


def test_fixed_port_in_use_fails_clearly(prometheus_factory, free_port):
    t = pf.sample_times(time.time() - 600, time.time())
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port))
        s.listen()
        with pytest.raises(pf.PrometheusStartError, match="could not bind"):
            prometheus_factory([pf.SeriesSpec("x", {}, "gauge", t, np.ones(len(t)))],
                               port=free_port)


def test_free_port(free_port):
    assert isinstance(free_port, int) and 1024 <= free_port < 65536
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port))


def test_missing_binaries_message(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pf.PrometheusNotInstalled, match="tests/system-deps.sh"):
        pf.find_binaries()


# -- the library -------------------------------------------------------------


def test_write_openmetrics_format(tmp_path):
    t = [100.0, 115.0, 130.5]
    path = pf.write_openmetrics(tmp_path / "x.om", [
        pf.SeriesSpec("req_total", {"job": "a", "q": 'x"\\\ny'}, "counter", t, [0, 1.5, 3]),
        pf.SeriesSpec("temp", {}, "gauge", t, [1, float("nan"), float("inf")], help="a\nb"),
        pf.SeriesSpec("req", {"job": "b"}, "counter", t, [0, 1, 2]),
    ])
    assert path.read_text().splitlines() == [
        "# HELP req req",
        "# TYPE req counter",
        'req_total{job="a",q="x\\"\\\\\\ny"} 0 100',
        'req_total{job="a",q="x\\"\\\\\\ny"} 1.5 115',
        'req_total{job="a",q="x\\"\\\\\\ny"} 3 130.500',
        'req_total{job="b"} 0 100',
        'req_total{job="b"} 1 115',
        'req_total{job="b"} 2 130.500',
        "# HELP temp a\\nb",
        "# TYPE temp gauge",
        "temp 1 100",
        "temp NaN 115",
        "temp +Inf 130.500",
        "# EOF",
    ]


def test_series_validation():
    with pytest.raises(ValueError, match="strictly increasing"):
        pf.SeriesSpec("x", {}, "gauge", [1.0, 1.0004], [1, 2])  # same ms: promtool drops it
    with pytest.raises(ValueError, match="strictly increasing"):
        pf.SeriesSpec("x", {}, "gauge", [2.0, 1.0], [1, 2])
    with pytest.raises(ValueError, match="counter"):
        pf.SeriesSpec("x", {}, "histogram", [1.0], [1])
    with pytest.raises(ValueError, match="label"):
        pf.SeriesSpec("x", {"bad-name": "v"}, "gauge", [1.0], [1])
    with pytest.raises(ValueError, match="twice"):
        s = pf.SeriesSpec("x", {"a": "1"}, "gauge", [1.0], [1])
        pf.write_openmetrics("/dev/null", [s, s])


def test_counter_from_rate():
    t = np.array([0.0, 15, 30, 60])
    assert list(pf.counter_from_rate(t, 2.0)) == [0, 30, 60, 120]
    assert list(pf.counter_from_rate(t, [9, 1, 2, 3], start=5)) == [5, 20, 50, 140]
    with pytest.raises(ValueError):
        pf.counter_from_rate(t, -1.0)


def test_trace_to_samples_shift_gaps_and_linearity(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text(
        "timestamp,count\n"
        "2000-01-01T00:00:00,60\n"
        "2000-01-01T00:01:00,120\n"
        "2000-01-01T00:02:00,\n"  # a gap (empty count)
        # 00:03 missing: a gap too
        "2000-01-01T00:04:00,240\n"
    )
    tr = pf.trace_to_samples(csv, end_at=1000.0, scrape_interval=15)
    assert tr.interval == 60 and tr.end_at == 1000.0 and tr.start == 1000.0 - 300
    assert list(tr.interval_starts) == [700, 760, 820, 880, 940]
    assert tr.qps_at(710) == 1.0 and tr.qps_at(760) == 2.0 and np.isnan(tr.qps_at(830))
    assert tr.qps_at(999) == 4.0 and np.isnan(tr.qps_at(1000))
    # samples every 15 s, last at end_at, none strictly inside the gap (820, 940)
    ts = list(tr.timestamps)
    assert ts[-1] == 1000.0 and 820.0 in ts and 940.0 in ts
    assert not any(820 < x < 940 for x in ts)
    assert list(np.diff(tr.values)[:4]) == [15, 15, 15, 15]  # linear: 60/min -> 15 per 15 s
    assert tr.values[-1] == 60 + 120 + 240 and tr.counter_at(880) == 180
    assert tr.mean_qps(940, 1000) == 4.0
    assert tr.expected_rate(1000, 60) == pytest.approx(4.0)
    # days= keeps the tail
    tail = pf.trace_to_samples(csv, end_at=1000.0, days=120 / 86400)
    assert list(tail.interval_starts) == [880, 940] and tail.start == 880

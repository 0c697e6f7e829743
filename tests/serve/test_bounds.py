"""Issue 27 beside the code it protects: monotonic ages (a stepped wall clock moves nothing), a frozen process
forgets nothing, staleness follows refreshInterval, the tracked-trigger cap, state files (size, FIFO, sparse,
a deleted state dir), range samples outside the window, pruned sessions, escaped log lines."""

from __future__ import annotations

import http.server
import json
import logging
import os
import threading
import time

import pytest

from scaler import prompool
from scaler.limits import MAX_STATE_FILE_BYTES, MAX_TRACKED
from scaler.prom import PrometheusClient, PromPool
from scaler.serve.cadence import stale_after
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.registry import Registry, RegistryConfig
from scaler.serve.logs import TextFormatter
from scaler.serve.state import JsonStore, StateTooLarge
from scaler.serve.workload import ScalerError
from scaler.spec import PrometheusTarget
from scaler.prom import CredentialStore
from support.clock import FakeClock
from support.fakes import FakePrometheus

WALL = 1_700_000_400.0
Q = "sum(rate(req_total[2m]))"


def md(**over) -> dict:
    return {"serverAddress": "http://prom.test:9090", "query": Q, "qpsPerReplica": "10", "mode": "reactive",
            "hpaTolerance": "0", **over}


class Env:
    def __init__(self, **cfg):
        self.wall, self.mono, self.prom = FakeClock(WALL), FakeClock(100.0), FakePrometheus()
        self.prom.set_scalar(Q, 12.0)
        self.metrics = ScalerMetrics()
        self.reg = Registry(self.wall, CredentialStore(None), self.metrics,
                            RegistryConfig(**{"first_wait_seconds": 2.0, **cfg}), client_factory=self.prom.factory(),
                            monotonic=self.mono)

    def advance(self, seconds: float, wall: float | None = None) -> None:
        self.mono.advance(seconds)
        self.wall.advance(seconds if wall is None else wall)


@pytest.fixture
def env():
    e = Env()
    yield e
    e.reg.stop()


def test_a_wall_clock_stepped_back_does_not_make_an_old_observation_fresh(env):
    wl = env.reg.workload("serving", "llm", md())
    env.prom.set_scalar(Q, PermissionError("unreachable"))  # refreshes fail from now on
    env.advance(130, wall=-600)  # 130 s pass; the wall clock is stepped back 10 min meanwhile
    with pytest.raises(ScalerError) as err:  # before: served 12 as fresh (age -470 s)
        env.reg.decision(wl)
    assert err.value.code == "UNAVAILABLE" and "130s ago" in str(err.value)


def test_a_wall_clock_stepped_forward_forgets_nothing(env):
    wl = env.reg.workload("serving", "llm", md())
    env.advance(10, wall=16 * 60)  # +16 min on the wall, 10 s really
    env.reg.tick()
    assert env.reg.workloads() == [wl]


def test_a_frozen_process_forgets_nothing_for_the_freeze():
    e = Env()
    try:
        wl = e.reg.workload("serving", "llm", md())
        e.reg.start(tick_seconds=0.02)
        time.sleep(0.1)
        e.mono.advance(16 * 60)  # SIGSTOP for 16 min: the scheduler wakes up 960 s late
        e.wall.advance(16 * 60)
        time.sleep(0.3)
        assert e.reg.workloads() == [wl]  # before: every ScaledObject forgotten, its files deleted
        e.reg.stop()  # the scheduler loop is what tells a freeze; a tick itself counts silence as it is
        e.mono.advance(901)
        e.reg.tick()
        assert e.reg.workloads() == []
    finally:
        e.reg.stop()


def test_staleness_scales_with_refresh_interval(env):
    wl = env.reg.workload("serving", "llm", md(refreshInterval="600"))  # 10 min, documented
    env.advance(300)  # older than the 120 s floor, within 4 intervals: served (before: UNAVAILABLE)
    assert stale_after(wl, env.reg.config) == 2400.0
    assert env.reg.decision(wl).planned == 12.0


def test_the_tracked_trigger_cap_evicts_unproven_triggers_and_refuses_when_all_are_in_use():
    """Issue 40, item 7: the cap was first come, first kept (one caller filled it in 2.7 s; then every new
    ScaledObject and every edit was RESOURCE_EXHAUSTED). A trigger polled fewer than PROVEN_POLLS times (a caller's
    one-shot) goes first, the least recently polled; only when every tracked one is in use is a new one refused."""
    from scaler.serve.registry import PROVEN_POLLS

    assert RegistryConfig().max_tracked == MAX_TRACKED == 2000 and PROVEN_POLLS == 3
    e = Env(max_tracked=3)
    try:
        wls = [e.reg.workload("serving", f"so-{i}", md()) for i in range(3)]  # polled once each: unproven
        e.advance(1)
        new = e.reg.workload("serving", "so-3", md())  # evicts so-0, the least recently polled
        assert {w.name for w in e.reg.workloads()} == {"so-1", "so-2", "so-3"} and new not in wls
        for _ in range(PROVEN_POLLS):  # KEDA polls the three: in use
            e.advance(15)
            for w in e.reg.workloads():
                e.reg.workload("serving", w.name, md())
        with pytest.raises(ScalerError) as err:
            e.reg.workload("serving", "so-4", md())
        assert err.value.code == "RESOURCE_EXHAUSTED" and "MAX_TRACKED 3" in str(err.value)
        assert e.reg.workload("serving", "so-1", md()) is wls[1]  # the tracked ones are still served
    finally:
        e.reg.stop()


def test_a_namespace_quota_keeps_one_caller_from_the_whole_cap():
    e = Env(max_tracked=10, max_tracked_per_namespace=3)
    try:
        for i in range(3):
            for _ in range(3):  # in use
                e.reg.workload("attacker", f"so-{i}", md())
                e.advance(15)
        with pytest.raises(ScalerError) as err:
            e.reg.workload("attacker", "so-3", md())
        assert "namespace attacker has 3 triggers here, its quota (--max-triggers-per-namespace 3)" in str(err.value)
        assert e.reg.workload("victims", "so-0", md()).namespace == "victims"  # another namespace: room
    finally:
        e.reg.stop()


def test_state_files_are_bounded_and_regular(tmp_path, caplog):
    metrics = ScalerMetrics()
    store = JsonStore(tmp_path / "state", metrics)
    get = metrics.registry.get_sample_value
    with pytest.raises(StateTooLarge):
        store.save("ns", "n", "m", {"x": "y" * MAX_STATE_FILE_BYTES}, version=1, key="k")
    assert get("forescale_state_errors_total", {"op": "write_too_large"}) == 1
    assert not store.path("ns", "n", "m").exists()
    # a FIFO swapped in: refused at once (before: the read hung)
    os.mkfifo(store.path("ns", "fifo", "m"))
    with caplog.at_level(logging.WARNING):
        assert store.load("ns", "fifo", "m", version=1, key="k") is None
    assert any("not a regular file" in r.getMessage() for r in caplog.records)
    # a huge sparse file: refused by its size, never read
    with open(store.path("ns", "sparse", "m"), "wb") as f:
        f.truncate(1 << 30)
    assert store.load("ns", "sparse", "m", version=1, key="k") is None
    assert get("forescale_state_errors_total", {"op": "read"}) == 2
    # the state dir deleted under the server: an error state in the metrics
    store.save("ns", "ok", "m", {"x": 1}, version=1, key="k")
    assert get("forescale_state_writable") == 1
    for p in (tmp_path / "state").iterdir():
        p.unlink()
    (tmp_path / "state").rmdir()
    with pytest.raises(OSError):
        store.save("ns", "ok", "m", {"x": 1}, version=1, key="k")
    assert get("forescale_state_writable") == 0 and get("forescale_state_errors_total", {"op": "write"}) == 1


def test_a_long_name_makes_a_short_file_name(tmp_path):
    store = JsonStore(tmp_path)
    path = store.path("n" * 63, "a" * 253, "forescale-x." + "f" * 32)
    assert len(path.name) <= 205
    store.save("n" * 63, "a" * 253, "forescale-x." + "f" * 32, {"x": 1}, version=1, key="k")
    assert store.load("n" * 63, "a" * 253, "forescale-x." + "f" * 32, version=1, key="k")["x"] == 1


class Matrix(http.server.BaseHTTPRequestHandler):
    """A range answer of one series: the asked window at 60 s plus one sample 30 years ahead."""

    def do_GET(self):  # noqa: N802
        from urllib.parse import parse_qs, urlparse
        q = parse_qs(urlparse(self.path).query)
        start, end = float(q["start"][0]), float(q["end"][0])
        values = [[t, "5"] for t in range(int(start), int(end) + 1, 60)] + [[end + 30 * 365 * 86400, "5"]]
        body = json.dumps({"status": "success", "data": {"resultType": "matrix",
                                                         "result": [{"metric": {}, "values": values}]}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_a_range_sample_outside_the_window_is_dropped_before_the_grid():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Matrix)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    pool = PromPool()
    try:
        c = PrometheusClient(PrometheusTarget(f"http://127.0.0.1:{srv.server_address[1]}"), pool=pool)
        series, _ = c.range_series("q", WALL - 3600, WALL, 60.0)
        # 3600 / 60 + 1 = 61 points; before: the sample 30 years ahead made a 15.8 M-point grid (810 MB)
        assert len(series) == 61 and series.t[-1] == WALL
    finally:
        pool.close()
        srv.shutdown()
        srv.server_close()


def test_sessions_of_targets_no_longer_used_are_closed(monkeypatch):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Matrix)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    monkeypatch.setattr(prompool, "SESSION_IDLE_SECONDS", 0.2)
    pool = PromPool(clock=time.monotonic)  # the server passes its monotonic clock
    try:
        port = srv.server_address[1]
        for host in ("127.0.0.1", "localhost"):  # two targets (two sessions)
            c = PrometheusClient(PrometheusTarget(f"http://{host}:{port}"), pool=pool)
            c.range("q", WALL - 60, WALL, 60.0)
        assert pool.sessions() == 2
        time.sleep(0.3)
        PrometheusClient(PrometheusTarget(f"http://127.0.0.1:{port}"), pool=pool).range("q", WALL - 60, WALL, 60.0)
        assert pool.sessions() == 1  # the unused one was closed (before: 3,000 kept)
    finally:
        pool.close()
        srv.shutdown()
        srv.server_close()


def test_a_newline_in_a_name_cannot_forge_a_log_line():
    rec = logging.LogRecord("scaler.serve.registry", logging.WARNING, __file__, 1,
                            "ScaledObject %s/%s: %s", ("ns", "llm\n2026-01-01 00:00:00 INFO forged", "x\r\x1b[31m"),
                            None)
    line = TextFormatter("%(levelname)s %(name)s: %(message)s").format(rec)
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert line == "WARNING scaler.serve.registry: ScaledObject ns/llm\\n2026-01-01 00:00:00 INFO forged: x\\r\\x1b[31m"


def test_a_changed_quantile_leaves_no_series_of_the_old_one():
    from scaler.policy import Decision, Reason
    from scaler.spec import parse_metadata

    metrics = ScalerMetrics()
    spec, _ = parse_metadata(md(mode="forecastAndScale"), name="llm", namespace="serving")
    labels = ("serving", "llm", "0123abcd")
    d = Decision(planned=40.0, reason=Reason.FORECAST, observed=30.0, forecast_peak=40.0, base=40.0,
                 forecast_mean_peak=35.0)
    metrics.export_decision(labels, d, spec.lead, 0.8)
    metrics.export_decision(labels, d, spec.lead, 0.9)  # a tuned choice moved the provisioned quantile
    got = {s.labels["quantile"]: s.value for fam in metrics.registry.collect() for s in fam.samples
           if s.name == "forescale_forecast_qps"}
    assert got == {"0.9": 40.0, "mean": 35.0}  # before: 0.8 stayed, frozen at its last value


def _series(metrics: ScalerMetrics) -> set[tuple[str, tuple]]:
    return {(s.name, tuple(sorted(s.labels.items()))) for fam in metrics.registry.collect() for s in fam.samples
            if s.labels.get("namespace") is not None}


def test_forgetting_a_trigger_removes_every_series_of_it_and_none_of_its_siblings():
    """``ScalerMetrics.forget`` removes the series whose extra label takes known values (reason, lead part) by key,
    and looks for the others (event, model, kind): a forgotten trigger leaves no series, its sibling keeps all."""
    from scaler.policy import Decision, Reason
    from scaler.spec import parse_metadata

    metrics = ScalerMetrics()
    spec, _ = parse_metadata(md(mode="forecastAndScale"), name="llm", namespace="serving")
    mine, sibling, other = ("serving", "llm", "aaaa0000"), ("serving", "llm", "bbbb1111"), ("serving", "web", "cccc2222")
    for labels, reason in ((mine, Reason.EVENT), (sibling, Reason.FORECAST), (other, Reason.MISSING_DATA)):
        d = Decision(planned=40.0, reason=reason, observed=30.0, forecast_peak=40.0, base=40.0, forecast_mean_peak=35.0,
                     event="launch")
        metrics.export_decision(labels, d, spec.lead, 0.9)
        metrics.prom_errors.labels(*labels, "timeout").inc()
        metrics.model_info.labels(*labels, "prophet").set(1)
        metrics.events_file_ok.labels(*labels).set(1)
    before = _series(metrics)
    keep = {s for s in before if ("trigger", mine[2]) not in s[1]}
    # per trigger: a reason gauge per policy.Reason (15: feedback, the loop's, and budget_capped among them), and 14
    # more: 3 lead parts, 2 forecast quantiles, observed, planned, the decisions and errors counters' _total and
    # _created (4), the event, events_file_ok, the model
    assert len(before) - len(keep) == len(keep) // 2 == len(Reason) + 14 == 29
    metrics.forget(*mine, whole=False)
    assert _series(metrics) == keep
    metrics.forget("serving", "llm")  # the ScaledObject's every trigger: the other ScaledObject's stay
    assert {s for s in _series(metrics) if ("scaledobject", "llm") in s[1]} == set()
    assert any(("trigger", other[2]) in s[1] for s in _series(metrics))

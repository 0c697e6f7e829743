"""The durable decision log (issue 36, item 4): JSON lines per trigger under ``<state-dir>/decisions/``, written off
the RPC thread, bounded, read over the same API after a restart."""

from __future__ import annotations

import json
import math
import urllib.request

import numpy as np

from scaler.policy import Decision, Reason
from scaler.serve.decisionlog import HEARTBEAT_SECONDS, DecisionLog, log_name
from scaler.serve.watch import Watch
from scaler.serve.workload import Workload
from scaler.spec import parse_metadata
from support import promfixture as pf
from support.clock import FakeClock
from support.fakes import wait_for
from support.scaler import Scaler

T0 = 1_700_000_400.0
KEY = ("serving", "llm", "forescale-serving-llm.0123456789abcdef0123456789abcdef")


def workload() -> Workload:
    spec, _ = parse_metadata({"serverAddress": "http://p:9090", "query": "q", "qpsPerReplica": "10",
                              "mode": "reactive"}, name="llm", namespace="serving")
    return Workload("serving", "llm", spec, client=None, created=T0, last_polled=T0,  # type: ignore[arg-type]
                    digest=KEY[2].rsplit(".", 1)[1] + "0" * 32)


def decision(planned: float, reason: Reason = Reason.MODE_REACTIVE) -> Decision:
    return Decision(planned=planned, reason=reason, observed=planned, forecast_peak=None, base=planned)


def test_changes_and_a_heartbeat_are_logged_and_rotation_bounds_the_file(tmp_path):
    journal = DecisionLog(tmp_path, max_bytes=16 * 1024)
    watch = Watch(journal=journal)
    wl = workload()
    try:
        # an hour at KEDA's 15 s cadence, 4 replicas all along (planned 35 / 10 per replica): the first decision
        # and one every HEARTBEAT_SECONDS (300 s): t = 0, 300, ..., 3600 -> 13 lines, not 241
        for k in range(241):
            watch.record(wl, decision(35.0), T0 + 15 * k, 300.0)
        watch.record(wl, decision(55.0), T0 + 3615, 300.0)  # 6 replicas: logged at once
        watch.record(wl, decision(55.0, Reason.PROMETHEUS_STALE), T0 + 3630, 300.0)  # another reason: logged
        for k, planned in enumerate((55.0, 55.0, 0.0, 0.0, 3.0)):  # IsActive: its changes only
            watch.note_active(wl, decision(planned), planned > 0, T0 + 3640 + k)
        journal.flush()
        active = [e for e in journal.read(wl.key) if e["kind"] == "is_active"]
        assert [(e["time"] - T0, e["active"]) for e in active] == [(3640, True), (3642, False), (3644, True)]
        got = [e for e in journal.read(wl.key) if e["kind"] == "decision"]
        assert [e["time"] - T0 for e in got] == [300.0 * i for i in range(13)] + [3615.0, 3630.0]
        assert [e["replicas"] for e in got[-3:]] == [4, 6, 6] and got[-1]["reason"] == "fallback_prometheus_stale"
        assert all(e["kind"] == "decision" for e in got) and len(watch.log(wl)["decisions"]) == 120  # the ring
        for k in range(3000):  # replicas changing every decision: rotated at 16 KiB, two generations kept
            watch.record(wl, decision(10.0 * (k % 7 + 1)), T0 + 4000 + 15 * k, 300.0)
        journal.flush()
        name = log_name(*wl.key)
        sizes = [(tmp_path / n).stat().st_size for n in (name, name + ".1")]
        assert max(sizes) <= 16 * 1024 and sum(sizes) > 16 * 1024
        assert journal.read(wl.key)[-1]["time"] == T0 + 4000 + 15 * 2999  # the newest is there
        journal.forget(*wl.key)
        assert journal.read(wl.key) == [] and not (tmp_path / name).exists()
    finally:
        journal.stop()


def test_a_day_at_keda_cadence_fits_and_the_retention_is_stated(tmp_path):
    """A diurnal day (10 to 90 req/s, 10 req/s per replica: 1 to 9 replicas) polled every 15 s: the bytes a day
    and the days MAX_BYTES x 2 hold (the figure docs/operating.md states)."""
    from scaler.serve.decisionlog import MAX_BYTES

    journal = DecisionLog(tmp_path)
    watch = Watch(journal=journal)
    wl = workload()
    try:
        n = 86400 // 15
        for k in range(n):
            rate = 50.0 - 40.0 * math.cos(2 * math.pi * k / n)
            watch.record(wl, decision(rate), T0 + 15 * k, 300.0)
        journal.flush()
        name = log_name(*wl.key)
        per_day = sum((tmp_path / f).stat().st_size for f in (name, name + ".1") if (tmp_path / f).exists())
        lines = len(journal.read(wl.key, limit=10 ** 6))
    finally:
        journal.stop()
    days = 2 * MAX_BYTES / per_day
    print(f"decision log: {lines} lines, {per_day} bytes for a day of {n} decisions; "
          f"2 x {MAX_BYTES // 1024} KiB hold {days:.1f} days")
    assert 16 <= lines < n // 10 and days >= 1.0  # replicas change 16 times a day, plus the heartbeat


def test_the_history_is_read_over_the_api_after_a_restart(tmp_path):
    now = float(int(__import__("time").time()))
    t = pf.sample_times(now - 3600, now + 600)
    prom = pf.PrometheusServer([pf.SeriesSpec("req", {"job": "x"}, "counter", t, pf.counter_from_rate(t, 25.0))])
    prom.start()
    md = {"serverAddress": prom.url, "query": 'sum(rate(req_total{job="x"}[2m]))', "qpsPerReplica": "10",
          "mode": "reactive", "hpaTolerance": "0"}
    clock = FakeClock(now)
    try:
        s = Scaler(clock, state_dir=str(tmp_path), refresh_seconds=1.0)
        try:
            for k in range(3):
                if k:
                    clock.advance(HEARTBEAT_SECONDS)
                    wl = s.server.registry.workloads()[0]
                    wait_for(lambda: (wl.attempted_at or 0) >= clock() and not wl.refreshing, 30)
                assert s.value(md).metricValueFloat == 25.0
            s.server.journal.flush()
        finally:
            s.close()
        s2 = Scaler(clock, state_dir=str(tmp_path))  # restarted: KEDA has not polled it yet
        try:
            url = f"http://127.0.0.1:{s2.server.http_port}/api/scaledobjects/serving/llm/decisions"
            doc = json.loads(urllib.request.urlopen(url, timeout=5).read())
            (trig,) = doc["triggers"]
            assert trig["tracked"] is False and [e["planned"] for e in trig["history"]] == [25.0] * 3
            assert [e["time"] for e in trig["history"]] == [now, now + HEARTBEAT_SECONDS, now + 2 * HEARTBEAT_SECONDS]
            later = json.loads(urllib.request.urlopen(f"{url}?since={now + 1}", timeout=5).read())
            assert len(later["triggers"][0]["history"]) == 2
            s2.value(md)  # polled again: tracked, its ring and its history together
            s2.server.journal.flush()
            doc = json.loads(urllib.request.urlopen(url, timeout=5).read())
            (trig,) = doc["triggers"]
            assert len(trig["decisions"]) == 1 and len(trig["history"]) == 4 and "tracked" not in trig
        finally:
            s2.close()
    finally:
        prom.stop()
    assert np.isfinite(now)

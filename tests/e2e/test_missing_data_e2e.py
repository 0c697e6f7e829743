"""Issue 36's live gap, end to end: a real Prometheus whose series stops for 5 minutes while forescale serves a
Prophet forecast, over real gRPC, on a fake clock that walks through the gap at KEDA's 15 s cadence.

Before: the empty query read as 0, the level correction (4h) pulled the forecast down to ~0 with reason
``forecast``. Now: the answer never drops below the forecast during the gap, the reason is
``fallback_missing_data``, and once the last good observation is older than ``stale_seconds`` (120 s) the answer
is UNAVAILABLE (KEDA's fallback). A real 0 series (and one that stops after being 0) still answers 0.
"""

from __future__ import annotations

import math
import time

import grpc
import numpy as np
import pytest

from scaler.policy import Reason, decide
from support import promfixture as pf
from support.clock import FakeClock
from support.scaler import Scaler, wait_for_fit

DAY = 86400.0
GAP_AFTER = 300.0  # the series stops 5 min after the walk starts ...
GAP = 300.0  # ... for 5 minutes
WINDOW = "1m"  # rate(...[1m]): empty from ~45 s into the gap until ~15 s after it
LEAD = 600.0


def rate(t):
    return 50.0 + 20.0 * np.sin(2 * np.pi * np.asarray(t) / DAY)


@pytest.fixture(scope="module")
def gap_prom():
    now0 = float(int(time.time()) // 60 * 60)
    gap0 = now0 + GAP_AFTER
    t = pf.sample_times(now0 - 3 * DAY, now0 + 1800)
    keep = (t < gap0) | (t >= gap0 + GAP)
    series = [pf.SeriesSpec("gap_requests", {"job": "gap"}, "counter", t[keep], pf.counter_from_rate(t, rate)[keep]),
              pf.SeriesSpec("zero_requests", {"job": "zero"}, "counter", t, np.zeros(len(t))),
              # 0 req/s, then gone at the gap (the workload scaled to zero, its pods and series with it)
              pf.SeriesSpec("idle_requests", {"job": "idle"}, "counter", t[t < gap0], np.zeros(int((t < gap0).sum())))]
    server = pf.PrometheusServer(series).start()
    yield server, now0, gap0
    server.stop()


def md(url: str, job: str, **over) -> dict:
    m = {"serverAddress": url, "query": f'sum(rate({job}_requests_total{{job="{job}"}}[{WINDOW}]))',
         "qpsPerReplica": "10", "coldStartSeconds": f"{LEAD:g}", "bufferSeconds": "0", "model": "prophet",
         "history": "3d", "minHistory": "2d", "quantile": "0.9", "levelCorrection": "4h", "refitInterval": "24h",
         "hpaTolerance": "0", "tuning": "off"}
    m.update(over)
    return m


def test_a_five_minute_gap_holds_on_the_forecast_then_goes_unavailable(gap_prom):
    prom, now0, gap0 = gap_prom
    clock = FakeClock(now0)
    s = Scaler(clock, refresh_seconds=1.0)  # every poll of the walk finds its observation due
    try:
        m = md(prom.url, "gap")
        zero, idle = md(prom.url, "zero", mode="reactive"), md(prom.url, "idle", mode="reactive")
        s.value(m, name="gap")
        wl = wait_for_fit(s, "gap")
        s.value(zero, name="zero")
        s.value(idle, name="idle")
        rows = []
        for k in range(int((GAP_AFTER + GAP + 300) // 15) + 1):  # now0 .. 15 min later, every 15 s
            t = now0 + 15 * k
            clock.advance(t - clock())
            for name in ("gap", "zero", "idle"):
                w = next(x for x in s.server.registry.workloads() if x.name == name)
                deadline = time.monotonic() + 30
                while (w.attempted_at or 0) < t or w.refreshing:  # this poll's refresh, done
                    assert time.monotonic() < deadline, f"no refresh of {name} at {t}"
                    time.sleep(0.02)
            fs = wl.forecast
            try:
                value, err = s.value(m, name="gap").metricValueFloat, None
                d = s.server.registry.decision(wl)
            except grpc.RpcError as e:
                value, err, d = None, e.code(), None
            fc = fs.forecast
            window = (fc.t >= t) & (fc.t <= t + LEAD)
            peak = float(np.max(fc.at_quantile(0.9)[window]))  # the forecast, uncorrected
            rows.append((t - gap0, value, err, d, peak, fs is wl.forecast))
            assert s.value(zero, name="zero").metricValueFloat == 0.0  # a real 0 series answers 0 ...
            assert s.value(idle, name="idle").metricValueFloat == 0.0  # ... and so does one gone after being 0
            assert s.stub.IsActive(s.ref(zero, name="zero"), timeout=5).result is False
    finally:
        s.close()

    missing = [r for r in rows if r[3] is not None and r[3].reason is Reason.MISSING_DATA]
    unavailable = [r for r in rows if r[2] is grpc.StatusCode.UNAVAILABLE]
    normal = [r for r in rows if r[3] is not None and r[3].reason in (Reason.FORECAST, Reason.OBSERVED_FLOOR)]
    # before the gap (and its 1 m rate window) and after it: the forecast, level-corrected
    assert all(r[0] < 60 or r[0] >= GAP for r in normal) and len(normal) >= 20
    # the gap: held on the forecast, never below it, until the last good observation is 120 s old ...
    assert len(missing) >= 4, [(r[0], r[3] and r[3].reason) for r in rows]
    for dt, value, _, d, peak, same in missing:
        assert 0 <= dt < GAP + 60
        if same:  # (a refit adopted meanwhile would compare another curve)
            assert value >= peak - 1e-6, (dt, value, peak)
        assert value >= d.observed - 1e-6  # the last good observation, held
    # ... then UNAVAILABLE until the series is back (KEDA's fallback), never a value below the forecast
    assert len(unavailable) >= 4 and all(60 < r[0] < GAP + 60 for r in unavailable)
    assert min(r[0] for r in unavailable) > max(r[0] for r in missing if r[0] < GAP)
    assert all(r[2] in (None, grpc.StatusCode.UNAVAILABLE) for r in rows)
    # what reading the gap as 0 gave, on the same curve and the first missing poll: far below the forecast
    dt, value, _, d, peak, _ = missing[0]
    old = decide(0.0, wl.forecast.forecast, wl.params(), gap0 + dt)
    print(f"gap: {len(missing)} polls held (first {value:.1f} req/s, forecast {peak:.1f}; read as 0 it was "
          f"{old.planned:.1f}, reason {old.reason.value}), {len(unavailable)} UNAVAILABLE, {len(normal)} normal")
    assert old.planned < 0.5 * peak and not math.isclose(old.planned, value)

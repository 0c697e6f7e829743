"""The drift response end to end: a real Prometheus backfilled with a trace whose level jumps 2.5x at a known
time, a real forescale server (real gRPC, real fit worker processes, the fake clock stepping one minute at a
time through the backfilled data), KEDA's GetMetrics as the caller.

Bound stated and tested: ``fallback_forecast_drift`` is served within 10 minutes of the jump at a 1-minute
step (lead 60 s: the minutes provisioned before the jump come due one after the other; the CUSUM alarms on
the 5th exceedance beyond the 20% margin at quantile 0.9; the next poll serves the fallback). The value served
is never below the observed rate; the reason clears once the level is back and the forecast covers 15 scored
minutes; on the same trace without the jump it never appears.

Timeline (fake-clock minutes after START; each step waits for the real scheduler's 1 s tick, so a minute costs
about a second of wall time): 15 minutes at the base level, the 2.5x jump for 40 minutes, then 35 minutes back at
the base level (90 steps). Measured on this timeline: the fallback from 5 minutes after the jump until 12 minutes
after the level returned. Both scenarios (with and without the jump) run at once, each with its own Prometheus,
server and clock: the steps wait on the scheduler's tick, not on the CPU.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from support import promfixture as pf
from support.clock import FakeClock
from support.scaler import Scaler, wait_for_fit

DAY = 86400.0
START = 1_700_000_400.0  # the first served minute (a multiple of 60)
JUMP_AT = START + 15 * 60
BACK_AT = JUMP_AT + 40 * 60
MINUTES = 15 + 40 + 35  # served minutes: base, jump, back at the base level
BOUND_MINUTES = 10


def level(t: np.ndarray, jump: bool) -> np.ndarray:
    base = 40.0 + 2.0 * np.sin(2 * np.pi * t / 3600.0)  # a little hourly wave: bands of a real width
    if jump:
        base = np.where((t >= JUMP_AT) & (t < BACK_AT), 2.5 * base, base)
    return base


def md(prom) -> dict:
    return {"serverAddress": prom.url, "query": "max(forescale_drift_qps)", "qpsPerReplica": "10",
            "model": "seasonal_naive", "history": "2d", "minHistory": "1d", "refitInterval": "1h",
            "levelCorrection": "0", "quantile": "0.9", "coldStartSeconds": "60", "bufferSeconds": "0",
            "hpaTolerance": "0", "headroom": "1", "tuning": "off"}


def reason_of(s: Scaler) -> str:
    got = [dict(k[1])["reason"] for k, v in s.metrics().items()
           if k[0] == "forescale_decision_reason" and v == 1.0]
    assert len(got) == 1, got
    return got[0]


def serve(base_dir, jump: bool, minutes: int) -> list[tuple[float, float, float, str]]:
    t = np.arange(START - 2 * DAY - 3600, START + minutes * 60 + 120, 60.0)
    with pf.PrometheusServer([pf.SeriesSpec("forescale_drift_qps", {"job": "t"}, "gauge", t, level(t, jump))],
                             base_dir=base_dir) as prom:
        return _serve(prom, minutes)


def _serve(prom, minutes: int) -> list[tuple[float, float, float, str]]:
    clock = FakeClock(START)
    s = Scaler(clock)
    out = []
    try:
        m = md(prom)
        s.value(m)
        wl = wait_for_fit(s, "llm", timeout=120)  # the first fit (a worker process)
        for _ in range(minutes):
            clock.advance(60)
            deadline = time.monotonic() + 30
            while wl.observed_at != clock():  # the scheduler's refresh of this minute
                assert time.monotonic() < deadline
                time.sleep(0.05)
            value = s.value(m).metricValueFloat
            out.append((clock(), wl.observed, value, reason_of(s)))
    finally:
        s.close()
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """{jump: what was served each minute}: the two scenarios side by side (no state shared but the process)."""
    base = tmp_path_factory.getbasetemp()
    with ThreadPoolExecutor(2) as ex:
        runs = {jump: ex.submit(serve, base, jump, MINUTES) for jump in (True, False)}
        return {jump: f.result() for jump, f in runs.items()}


def test_a_level_jump_serves_the_drift_fallback_then_clears(served):
    served = served[True]
    assert len(served) == MINUTES
    for t, observed, value, _ in served:
        assert value >= observed - 1e-9, (t, observed, value)  # never below the observed rate
    drift = [t for t, _, _, r in served if r == "fallback_forecast_drift"]
    assert drift, "the drift fallback never appeared"
    assert all(t >= JUMP_AT for t in drift)
    assert (drift[0] - JUMP_AT) / 60 <= BOUND_MINUTES
    # during the fallback the value holds the window max of the observed rate (2.5 x ~40)
    during = [(o, v) for t, o, v, r in served if r == "fallback_forecast_drift"]
    assert all(v >= 0.95 * 2.5 * 38.0 for _, v in during[:5])
    # the level came back at BACK_AT: the forecast covers again and the reason clears (15 scored minutes)
    last = served[-1]
    assert last[3] != "fallback_forecast_drift" and drift[-1] < BACK_AT + 30 * 60


def test_an_unchanged_trace_never_drifts(served):
    served = served[False]
    assert len(served) == MINUTES
    assert [r for *_, r in served if r == "fallback_forecast_drift"] == []
    assert all(v >= o - 1e-9 for _, o, v, _ in served)

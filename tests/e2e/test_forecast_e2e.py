"""Predictive path end to end: real Prometheus, real Prophet fits in worker processes, real gRPC.

WorldCup98 is cut at 12:00 of a match-period day, two weeks of history before
it; the site's daily rise starts right after noon (hourly means of about
13.7k, 17.8k, 23.3k requests/min at 11, 12 and 13 h), so with a 30-minute
lead the rise lies inside the window.
"""

from __future__ import annotations

import csv
import math
import time

import grpc
import pytest

from support import promfixture as pf
from support.paths import TRACES
from forecaster.models import make
from forecaster.series import from_prometheus_matrix
from scaler.prom import PrometheusClient
from scaler.spec import PrometheusTarget
from scaler.policy import PolicyParams, Reason, decide
from support.clock import FakeClock
from support.scaler import Scaler, wait_for_fit

CUT = "1998-06-24T12:00:00"
DAYS = 15
RATE = "sum(rate(forescale_requests_total[2m]))"


@pytest.fixture(scope="module")
def rising(tmp_path_factory):
    src = TRACES / "worldcup98" / "per_minute.csv"
    cut_csv = tmp_path_factory.mktemp("trace") / "cut.csv"
    with open(src) as f, open(cut_csv, "w", newline="") as out:
        rows = csv.reader(f)
        w = csv.writer(out)
        w.writerow(next(rows))
        for row in rows:
            if row[0] >= CUT:
                break
            w.writerow(row)
    now = float(int(time.time()))
    trace = pf.trace_to_samples(cut_csv, end_at=now - pf.END_OFFSET_S, days=DAYS)
    server = pf.PrometheusServer([trace.series("forescale_requests_total", {"job": "llm"})]).start()
    yield server, trace, now
    server.stop()


def meta(url: str, **over) -> dict:
    m = {"serverAddress": url, "query": RATE, "qpsPerReplica": "20", "coldStartSeconds": "1500",
         "bufferSeconds": "300", "model": "prophet", "history": "14d", "minHistory": "2d", "quantile": "0.9",
         "hpaTolerance": "0"}
    m.update(over)
    return m


def test_forecast_leads_the_daily_rise_and_survives_restart(rising, tmp_path):
    prom, trace, now = rising
    state = tmp_path / "state"
    s = Scaler(FakeClock(now), state_dir=str(state), refresh_seconds=1.0)
    try:
        m = meta(prom.url)
        observed = prom.query_value(RATE, time=now)
        assert observed == pytest.approx(trace.expected_rate(now), rel=1e-6)
        # before the first fit: the observed rate, with the reason
        first = s.value(m).metricValueFloat
        assert first == pytest.approx(observed)
        wl = wait_for_fit(s, "llm")
        v = s.value(m).metricValueFloat
        d = s.server.registry.decision(wl)
        assert d.reason is Reason.FORECAST
        # the daily rise is ahead: the plan is above what is observed now ...
        assert v > 1.05 * observed
        # ... and what really came in the next 30 minutes (the held-out part of the trace) justifies it
        real_next = trace_peak_after_cut()
        assert real_next > 1.05 * observed
        # the value is the 0.9 quantile's max over [now, now+L] of an independent fit on the same history: the
        # 14 days up to the fit's cutoff (a clock-aligned boundary at least 60 s before now)
        cut = wl.forecast.fitted_at
        assert cut % 60 == 0 and now - 1800 - 60 < cut <= now - 60
        hist = PrometheusClient(PrometheusTarget(prom.url)).range(RATE, cut - 14 * 86400 + 60, cut, 60)
        series, _ = from_prometheus_matrix(hist, 60.0)
        fc = make("prophet", seed=0, level_half_life=14400.0).fit(series).predict(360, (0.1, 0.5, 0.9))
        expected = decide(observed, fc, PolicyParams("forecastAndScale", 1800.0, 0.9, 20.0, hpa_tolerance=0.0,
                                                     level_correction_seconds=14400.0), now)
        # same data, model and seed: only the optimiser's path may differ (warm vs cold start): 2 %
        assert v == pytest.approx(expected.planned, rel=0.02)

        # shadow mode: the forecast is computed and exported, the value is the observed rate
        shadow = meta(prom.url, mode="forecastOnly")
        s.value(shadow, name="shadow")
        wait_for_fit(s, "shadow")
        assert s.value(shadow, name="shadow").metricValueFloat == pytest.approx(observed)
        exported = {k: v for k, v in s.metrics().items() if k[0] == "forescale_forecast_qps"
                    and dict(k[1])["scaledobject"] == "shadow"}
        assert max(exported.values()) > 1.05 * observed
        assert s.metrics()[("forescale_fit_duration_seconds_count", ())] >= 1  # the fits are counted here
    finally:
        s.close()

    # restart on the same state dir: the first call answers from the stored forecast, no fit needed
    # (same clock: the backfilled data ends at now, and rate() after its end is biased low)
    s2 = Scaler(FakeClock(now), state_dir=str(state))
    try:
        v2 = s2.value(m).metricValueFloat
        wl2 = next(w for w in s2.server.registry.workloads() if w.name == "llm")
        assert wl2.forecast.fitted_at == wl.forecast.fitted_at  # the stored curve, not a new fit
        assert s2.server.registry.decision(wl2).reason is Reason.FORECAST
        # the same curve, the same answer: the first call before any fit would have been the observed rate,
        # and v is more than 5 % above it
        assert v2 == pytest.approx(v, rel=1e-9)
        # answered without a fit (the fits' histogram counts none; no wall-clock bound: a busy machine is slow
        # either way)
        assert s2.metrics()[("forescale_fit_duration_seconds_count", ())] == 0
    finally:
        s2.close()


def trace_peak_after_cut() -> float:
    src = TRACES / "worldcup98" / "per_minute.csv"
    with open(src) as f:
        rows = [r for r in csv.reader(f)][1:]
    after = [float(r[1]) / 60 for r in rows if CUT <= r[0] < "1998-06-24T12:30:00"]
    return max(after)


def test_recent_point_models_are_re_predicted_from_now_between_fits(prometheus_factory):
    """linear_trend fitted once, then forecast again from each new 'now' with the newest points (no refit)."""
    now = float(int(time.time()))
    t = pf.sample_times(now - 86400, now + 3600)  # samples after the query time stay invisible to it
    slope = 0.2 / 60  # +0.2 req/s every minute
    prom = prometheus_factory([pf.SeriesSpec("ramp_requests_total", {"job": "ramp"}, "counter", t,
                                             pf.counter_from_rate(t, lambda x: 10.0 + slope * (x - t[0])))])
    s = Scaler(FakeClock(now), refresh_seconds=1.0)
    try:
        m = {"serverAddress": prom.url, "query": "sum(rate(ramp_requests_total[2m]))", "qpsPerReplica": "50",
             "model": "linear_trend", "history": "6h", "minHistory": "1h", "refitInterval": "1h",
             "levelCorrection": "0", "hpaTolerance": "0", "coldStartSeconds": "300", "bufferSeconds": "0",
             "quantile": "0.5"}
        s.value(m, name="ramp")
        wl = wait_for_fit(s, "ramp")
        cut = wl.forecast.fitted_at  # the fit's cutoff: the latest whole hour + the trigger's phase, 60 s settled
        if cut + 3600 + 60 <= now + 900:  # the next cutoff comes into force within 15 min: start from its fit
            s.clock.advance(cut + 3660 - now)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and wl.forecast.fitted_at != cut + 3600:
                try:
                    s.value(m, name="ramp")
                except grpc.RpcError as e:  # the jump left the observation stale: UNAVAILABLE until refreshed
                    assert e.code() is grpc.StatusCode.UNAVAILABLE, e
                time.sleep(0.1)
            assert wl.forecast.fitted_at == cut + 3600
            while time.monotonic() < deadline and s.server.forecasts.fitting(wl):
                time.sleep(0.1)
        start = s.clock()
        fitted_at, first = wl.forecast.fitted_at, wl.forecast.forecast
        s.clock.advance(900)
        deadline = time.monotonic() + 30
        # the re-prediction and the observation's refresh run on their own threads: wait for both (the
        # decision below refuses an observation older than stale_seconds, and the jump made the last one 900 s old)
        while time.monotonic() < deadline and ((wl.forecast.predicted_at or 0) < start + 900
                                               or (wl.observed_at or 0) < start + 900):
            time.sleep(0.1)
        fs = wl.forecast
        assert fs.predicted_at == start + 900 and fs.fitted_at == fitted_at  # re-predicted, not refitted
        assert fs.forecast.t[0] == math.floor((start + 900) / 60) * 60 + 60  # the curve starts from the new now
        # the newest points carry the ramp on: the plan at start+900 is the ramp's rate 5 min (L) later
        d = s.server.registry.decision(wl)
        expected = 10.0 + slope * (start + 900 + 300 - t[0])
        assert d.reason is Reason.FORECAST
        assert d.planned == pytest.approx(expected, rel=0.03)
        # the curve as fitted would have planned 15 minutes earlier for the level then
        assert first.window_max(start, start + 300, 0.5) < expected - 2.5
    finally:
        s.close()

"""Live scoring, the drift response and the decision log through the registry (fake Prometheus and clock, a real
FitService fitting in this thread, the real Watch), and the decisions API over real HTTP."""

from __future__ import annotations

import time

import json
import urllib.request

import numpy as np
import pytest

from scaler.policy import Reason
from scaler.serve.fitting import FitService
from scaler.serve.http import HttpEndpoint, make_app
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.view import StatusView
from scaler.serve.watch import DECISIONS_KEPT, Watch, WatchCollector, clean
from support.clock import FakeClock
from support.fakes import FakePrometheus, Harness, InlineExecutor

T0 = 1_700_000_400.0
Q = "sum(rate(req_total[2m]))"
LEVEL = 40.0


def md(**over) -> dict:
    m = {"serverAddress": "http://prom.test:9090", "query": Q, "qpsPerReplica": "10", "model": "naive",
         "history": "2h", "minHistory": "1h", "refitInterval": "1h", "levelCorrection": "0", "hpaTolerance": "0",
         "coldStartSeconds": "300", "bufferSeconds": "0", "quantile": "0.9", "headroom": "1.0"}
    m.update(over)
    return m


class Env(Harness):
    def __init__(self, **over):
        clock, metrics = FakeClock(T0), ScalerMetrics()
        self.fits = FitService(clock, metrics, pool=InlineExecutor(), io=InlineExecutor())
        self.watch = Watch(on_alarm=self.fits.refit_now)
        metrics.registry.register(WatchCollector(self.watch, clock))
        super().__init__(clock, FakePrometheus(), md(**over), metrics=metrics, forecasts=self.fits, watch=self.watch)
        self.rates: dict[float, float] = {}  # what each minute observed (the range queries answer the same)
        self.prom.set_range(Q, lambda t: np.array([self.rates.get(float(x), LEVEL if x <= T0 else np.nan) for x in t]))

    def minute(self, rate: float):
        """One minute: the rate is observed, KEDA polls, the caller records the decision it served."""
        self.rates[self.clock() + 60] = rate
        self.prom.set_scalar(Q, rate)
        return self.poll(60)


@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


def test_a_level_shift_serves_the_drift_fallback_never_below_observed_and_clears(env):
    wl, d = env.minute(LEVEL)
    assert d.reason is Reason.OBSERVED_FLOOR  # a flat forecast at the observed level
    for _ in range(30):  # half an hour of the level the forecast knows: scored, covered, no alarm
        wl, d = env.minute(LEVEL)
        assert d.reason is Reason.OBSERVED_FLOOR
    s = env.watch.summary(wl, env.clock())
    # the lead is 300 s: the first 5 minutes were provisioned but not due yet -> 31 - 5 = 26 scored
    assert s["scores"]["1h"]["scored"] == 26 and s["scores"]["1h"]["coverage"] == 1.0
    fits = len(env.prom.calls_of("range"))
    # the level jumps 2.5x; the naive forecast follows the newest point only as it is re-predicted, yet the
    # minutes provisioned before the jump are scored against it: exceedances, the CUSUM alarms on the 5th
    served = []
    for i in range(40):
        rate = 2.5 * LEVEL
        wl, d = env.minute(rate)
        served.append((i, d.reason, d.planned, env.sample("forescale_forecast_coverage", window="1h")))
        assert d.planned >= rate  # never below the observed rate
    drift = [i for i, r, _, _ in served if r is Reason.FORECAST_DRIFT]
    assert drift and drift[0] <= 5  # within 6 minutes of the jump (bound: lead + 5 scored exceedances)
    assert len(env.prom.calls_of("range")) > fits  # the alarm refitted at once (not a refitInterval later)
    assert env.sample("forescale_forecast_drift_alarms_total") >= 1
    # the 5th exceedance (jump minute 4) alarms, so minute 5 is the first served in fallback; by then 26 + 6 minutes
    # are scored, the 5 provisioned before the jump exceeded (the re-predicted naive curve covers the rest):
    # coverage 27/32
    assert drift[0] == 5 and served[5][3] == pytest.approx(27 / 32)
    # the forecast follows the new level: its quantile covers again and the reason clears
    assert served[-1][1] is not Reason.FORECAST_DRIFT and env.sample("forescale_forecast_drift") == 0


def test_an_unchanged_level_never_drifts(env):
    for _ in range(120):
        wl, d = env.minute(LEVEL)
        assert d.reason is Reason.OBSERVED_FLOOR
    assert env.sample("forescale_forecast_drift_alarms_total") == 0
    assert env.sample("forescale_forecast_coverage", window="1h") == 1.0


def test_the_decision_log_is_a_bounded_ring_with_fits(env):
    for _ in range(DECISIONS_KEPT + 10):
        wl, d = env.minute(LEVEL)
    log = env.watch.log(wl)
    assert len(log["decisions"]) == DECISIONS_KEPT
    first, last = log["decisions"][0], log["decisions"][-1]
    assert last["time"] == env.clock() and first["time"] == env.clock() - 60 * (DECISIONS_KEPT - 1)
    # planned 40 req/s at qpsPerReplica 10 -> 4 replicas
    assert (last["observed"], last["planned"], last["replicas"], last["reason"], last["model"]) == \
        (40.0, 40.0, 4, "observed_floor", "naive")
    assert last["forecast_window_max"] == pytest.approx(40.0) and last["lead_seconds"] == 300.0
    assert log["fits"][0]["outcome"] == "fitted" and log["fits"][0]["model"] == "naive"


def test_decisions_api_over_http_404_and_no_unbounded_text(env):
    env.prom.set_range(Q, lambda t: np.full(t.shape, np.nan))
    wl, d = env.minute(LEVEL)
    assert d.reason is Reason.INSUFFICIENT_HISTORY
    http = HttpEndpoint("127.0.0.1", 0, make_app(env.metrics.registry, lambda: True, env.clock,
                                                  StatusView(env.reg, env.watch)), monotonic=time.monotonic)
    http.start()
    try:
        url = f"http://127.0.0.1:{http.port}"
        doc = json.loads(urllib.request.urlopen(url + "/api/scaledobjects/serving/llm/decisions", timeout=5).read())
        (trig,) = doc["triggers"]
        assert trig["trigger"] == wl.trigger and trig["decisions"][-1]["reason"] == "fallback_insufficient_history"
        assert trig["last_error"] == "forecast (fallback_insufficient_history): no history returned"
        for path in ("/api/scaledobjects/serving/nope/decisions", "/api/scaledobjects/serving/llm",
                     "/api/scaledobjects/%3Cb%3E/x/decisions"):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(url + path, timeout=5)
            assert e.value.code == 404
        status = json.loads(urllib.request.urlopen(url + "/status.json", timeout=5).read())
        (row,) = status["scaledobjects"]
        assert row["last_error"] == trig["last_error"] and row["drift"]["active"] is False
    finally:
        http.stop()


def test_messages_are_cut_and_cleaned():
    assert clean("a\x00b\nc") == "a b c"
    assert clean("x" * 5000) == "x" * 300 + "..."


def test_a_reactive_switch_leaves_no_stale_forecast_or_model_series(env):
    wl, d = env.minute(LEVEL)
    assert env.sample("forescale_model_info", model="naive") == 1
    assert env.sample("forescale_forecast_qps", quantile="0.9") is not None
    import dataclasses
    wl.spec = dataclasses.replace(wl.spec, mode="reactive")  # as a tuned choice would
    d = env.reg.decision(wl)
    env.reg.record(wl, d)
    assert d.reason is Reason.MODE_REACTIVE
    assert env.sample("forescale_model_info", model="naive") is None
    assert env.sample("forescale_forecast_qps", quantile="0.9") is None


def test_memory_per_trigger_is_bounded_at_1000_scaledobjects():
    """tracemalloc around 1,000 triggers' entries filled (every ring, bucket and pending minute in use)."""
    import tracemalloc

    from support.watchfill import fill, workloads

    wls, watch = workloads(1000), Watch()

    def measured(run, triggers: int) -> float:
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        run()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        return sum(s.size_diff for s in after.compare_to(before, "filename")) / triggers

    per = measured(lambda: fill(watch, wls), 1000)
    # the bound stated in docs/self-watch.md: 24 KiB per trigger (measured 22.3). Its parts: the decision ring 120 x 8 floats
    # (7.7 KiB) + its label slots (1 KiB), the buckets (60 + 96) x 7 floats (8.7 KiB), the observed-max ring
    # 30 x 2 (0.5 KiB), a few pending minutes and small objects
    assert 16_000 < per < 24 * 1024, per
    # more decisions for the same triggers add nothing: the rings are full, the windows roll. Measured on 100 of
    # the 1,000 full triggers (a day later): the figure is per trigger and the same as over all 1,000 (456 vs 468
    # bytes measured), at a tenth of the traced work (each traced fill of 1,000 x 120 decisions costs ~25 s)
    grown = measured(lambda: fill(watch, wls[:100], start=T0 + 86400), 100)
    assert grown < 512, grown  # bytes per trigger (allocator noise)
    assert len(watch) == 1000


def test_tuning_choices_are_logged_with_why_and_cut(env):
    from scaler.serve.workload import Tuned

    wl, _ = env.minute(LEVEL)
    tuned = Tuned(key="k", settings=(("quantile", 0.95),), label="predictive naive q0.95", policy="predictive",
                  chosen_at=T0, met=True, miss=0.002, cost_ratio=1.2,
                  summary="40 configurations swept (7 Pareto) on 3.0 d of history; target miss 0.500 %: met\x00" + "x" * 500)
    env.watch.note_tuned(wl, tuned)
    env.watch.note_tuned(wl, tuned)  # the same choice again (a restore): logged once
    (t,) = env.watch.log(wl)["tuning"]
    assert (t["outcome"], t["chosen"], t["policy"], t["target_met"], t["expected_miss"], t["expected_cost_ratio"]) == \
        ("chosen", "predictive naive q0.95", "predictive", True, 0.002, 1.2)
    assert t["why"].startswith("40 configurations swept (7 Pareto)") and "\x00" not in t["why"]
    assert len(t["why"]) == 203  # cut at 200 characters + "..."


def test_a_decision_changes_nothing_its_caller_records_it(env):
    """Issue 22 (item 7): ``decision()`` has no side effects -- no metric, score or log entry moves until the
    caller records what it served."""
    from prometheus_client import generate_latest

    wl, _ = env.minute(LEVEL)

    def state():
        return generate_latest(env.metrics.registry), env.watch.log(wl), env.watch.summary(wl, env.clock())

    before = state()
    decisions = [env.reg.decision(wl) for _ in range(3)]
    assert state() == before and len({(d.planned, d.reason) for d in decisions}) == 1
    env.reg.record(wl, decisions[0])
    assert state() != before and len(env.watch.log(wl)["decisions"]) == len(before[1]["decisions"]) + 1

"""``forecastErrorSeconds: auto`` in the server: the lead's forecast-error part measured from its own scored
decisions (``scaler.leaderror`` through ``serve.watch``), exported, on the status detail, and in force."""

from __future__ import annotations

import numpy as np
import pytest

from scaler.leaderror import PRIOR_MINUTES
from scaler.serve.fitting import FitService
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.view import StatusView
from scaler.serve.watch import Watch, WatchCollector
from support.clock import FakeClock
from support.fakes import FakePrometheus, Harness, InlineExecutor

T0 = 1_700_000_400.0
Q = "sum(rate(req_total[2m]))"
LEVEL = 40.0


class Env(Harness):
    """A naive forecast fitted in this thread on a flat history (as tests/serve/test_watch.py has it)."""

    def __init__(self, **over):
        clock, metrics = FakeClock(T0), ScalerMetrics()
        self.fits = FitService(clock, metrics, pool=InlineExecutor(), io=InlineExecutor())
        self.watch = Watch()
        metrics.registry.register(WatchCollector(self.watch, clock))
        meta = {"serverAddress": "http://prom.test:9090", "query": Q, "qpsPerReplica": "10", "model": "naive",
                "history": "2h", "minHistory": "1h", "refitInterval": "1h", "levelCorrection": "0",
                "hpaTolerance": "0", "coldStartSeconds": "300", "quantile": "0.9", **over}
        super().__init__(clock, FakePrometheus(), meta, metrics=metrics, forecasts=self.fits, watch=self.watch)
        self.prom.set_range(Q, lambda t: np.full(len(t), LEVEL))

    def minute(self, rate: float):
        self.prom.set_scalar(Q, rate)
        return self.poll(60)


@pytest.fixture
def env():
    e = Env(forecastErrorSeconds="auto")
    yield e
    e.close()


def test_a_forecast_on_time_shrinks_the_prior_toward_zero_and_the_lead_follows(env):
    wl, d = env.minute(LEVEL)
    # the prior: 30 s until a minute is scored; L = 300 + 30 + 60 + 15 = 405 s, L0 = 375 s
    assert wl.lead().forecast_error_seconds == 30.0 and wl.lead().seconds == 405.0
    for _ in range(40):
        wl, d = env.minute(LEVEL)
    # the flat forecast covers every minute at once (d* = 0). The decision at T0 + 60 k (k = 1..41; T0 is a whole
    # minute) provisions the minute containing T0 + 60 k + 375 s, i.e. minute k + 6, scored by an observation in it
    # or later: the last one is in minute 41, so k + 6 <= 41: n = 35, derived = 60 x 30 / (60 + 35) = 18.95 s
    fe = env.watch.forecast_error(wl, env.clock())
    assert fe["measured_seconds"] == 0.0 and fe["scored_minutes"] == 35 and fe["auto"]
    assert fe["derived_seconds"] == pytest.approx(PRIOR_MINUTES * 30.0 / (PRIOR_MINUTES + 35))
    assert wl.lead().forecast_error_seconds == pytest.approx(fe["derived_seconds"])
    assert wl.lead().seconds == pytest.approx(375.0 + fe["derived_seconds"])
    assert env.sample("forescale_forecast_error_seconds", kind="derived") == pytest.approx(fe["derived_seconds"])
    assert env.sample("forescale_forecast_error_seconds", kind="measured") == 0.0
    detail = StatusView(env.reg, env.watch).details(env.clock())[wl.labels]
    assert detail["forecast_error"]["in_force_seconds"] == pytest.approx(fe["derived_seconds"])


def test_a_forecast_too_low_grows_it_toward_the_bound():
    e = Env(forecastErrorSeconds="auto")
    try:
        wl, _ = e.minute(LEVEL)
        for _ in range(40):  # the traffic runs at twice what the (flat, naive) forecast of the history says ...
            e.prom.set_range(Q, lambda t: np.full(len(t), LEVEL))  # (its refits see the old level only)
            wl, _ = e.minute(2 * LEVEL)
        # ... and no longer window covers it: d* = 600 s (the bound) for every scored minute past the first fit;
        # the 0.9-quantile of d* is 600, the derived value (60 x 30 + n x 600) / (60 + n) grows with n
        fe = e.watch.forecast_error(wl, e.clock())
        n = fe["scored_minutes"]
        assert fe["measured_seconds"] == 600.0 and n > 30
        assert fe["derived_seconds"] == pytest.approx((PRIOR_MINUTES * 30.0 + n * 600.0) / (PRIOR_MINUTES + n))
        assert wl.lead().seconds == pytest.approx(375.0 + fe["derived_seconds"])
    finally:
        e.close()


def test_a_typed_value_stays_in_force_and_the_derivation_is_shown_beside_it():
    e = Env(forecastErrorSeconds="45")
    try:
        for _ in range(20):
            wl, _ = e.minute(LEVEL)
        fe = e.watch.forecast_error(wl, e.clock())
        assert fe["scored_minutes"] > 0 and fe["measured_seconds"] == 0.0 and not fe["auto"]
        assert fe["in_force_seconds"] == 45.0 and wl.lead().seconds == 300 + 45 + 60 + 15
        assert fe["derived_seconds"] < 45.0  # what auto would use
    finally:
        e.close()

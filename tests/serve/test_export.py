"""What a decision exports: read from the ``Decision`` (``decide(with_mean=True)``) and the spec only."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from forecaster.base import Forecast
from scaler.policy import PolicyParams, Reason, decide
from scaler.prom import CredentialStore
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.registry import Registry, RegistryConfig
from scaler.serve.workload import ForecastState
from support.fakes import FakePrometheus, sample_value

T0 = 1_700_000_400.0
Q = "sum(rate(req_total[2m]))"
CORRECTION = 20 * 0.5 ** 0.5  # the residual (30 - 50) halved over 300 s with a 600 s half-life, at now + L


def curve() -> Forecast:
    t = T0 - 600 + 60 * np.arange(60)
    return Forecast(t, np.full(60, 50.0), {0.1: np.full(60, 40.0), 0.9: np.full(60, 60.0)}, "naive")


def params(**kw) -> PolicyParams:
    base = dict(mode="forecastAndScale", lead_seconds=300.0, quantile=0.9, qps_per_replica=10.0, hpa_tolerance=0.0,
                level_correction_seconds=600.0)
    base.update(kw)
    return PolicyParams(**base)


def test_decide_gives_the_corrected_mean_peak_only_when_asked():
    d = decide(30.0, curve(), params(), T0, with_mean=True)
    assert d.reason is Reason.FORECAST
    assert d.forecast_peak == pytest.approx(60 - CORRECTION) and d.planned == pytest.approx(60 - CORRECTION)
    assert d.forecast_mean_peak == pytest.approx(50 - CORRECTION)
    plain = decide(30.0, curve(), params(), T0)
    assert plain.forecast_mean_peak is None
    assert (plain.planned, plain.reason, plain.forecast_peak) == (d.planned, d.reason, d.forecast_peak)
    # without correction the window's mean is the curve's
    assert decide(30.0, curve(), params(level_correction_seconds=0), T0, with_mean=True).forecast_mean_peak == 50.0
    # forecastOnly still reports both; no usable forecast, neither
    shadow = decide(30.0, curve(), params(mode="forecastOnly"), T0, with_mean=True)
    assert (shadow.planned, shadow.forecast_mean_peak) == (30.0, pytest.approx(50 - CORRECTION))
    for d in (decide(30.0, curve(), params(mode="reactive"), T0, with_mean=True),
              decide(30.0, curve(), params(), T0 + 3600, with_mean=True),  # stale
              decide(30.0, curve(), params(qps_per_replica=1.0), T0, history_max=1.0, with_mean=True)):  # absurd
        assert d.forecast_peak is None and d.forecast_mean_peak is None


class CountingClock:
    def __init__(self, t: float):
        self.t, self.reads = t, 0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self.reads += 1
            return self.t


@pytest.fixture
def reg():
    prom = FakePrometheus()
    prom.set_scalar(Q, 30.0)
    clock = CountingClock(T0)
    r = Registry(clock, CredentialStore(None), ScalerMetrics(), RegistryConfig(), client_factory=prom.factory())
    yield r
    r.stop()


def md(**over) -> dict:
    m = {"serverAddress": "http://prom.test:9090", "query": Q, "qpsPerReplica": "10", "model": "naive",
         "levelCorrection": "10m", "hpaTolerance": "0", "coldStartSeconds": "240", "bufferSeconds": "60",
         "quantile": "0.9"}
    m.update(over)
    return m


def sample(reg: Registry, name: str, **labels) -> float | None:
    return sample_value(reg.metrics.registry, name, {"namespace": "serving", "scaledobject": "llm", **labels})


def test_a_decision_is_exported_from_the_decision_and_the_spec(reg):
    wl = reg.workload("serving", "llm", md())
    fs = ForecastState(forecast=curve(), fitted_at=T0, key=wl.spec.forecast_key())
    assert reg.adopt_forecast(wl, fs, fs.key)
    reads = reg.clock.reads
    d = reg.decision(wl)
    # two clock reads per decision (the monotonic age, the wall time of the forecast; one fake serves both)
    assert reg.clock.reads == reads + 2
    assert d.planned == pytest.approx(60 - CORRECTION)
    # the decision itself changes nothing: exported when its caller records it (GetMetrics), reading no clock
    assert sample(reg, "forescale_planned_qps") is None and sample(reg, "forescale_decisions_total", reason="forecast") is None
    reg.export(wl, d)
    assert reg.clock.reads == reads + 2
    assert sample(reg, "forescale_observed_qps") == 30.0
    assert sample(reg, "forescale_planned_qps") == pytest.approx(60 - CORRECTION)
    assert sample(reg, "forescale_forecast_qps", quantile="0.9") == pytest.approx(60 - CORRECTION)
    assert sample(reg, "forescale_forecast_qps", quantile="mean") == pytest.approx(50 - CORRECTION)
    assert sample(reg, "forescale_lead_seconds", part="total") == 300.0
    assert sample(reg, "forescale_lead_seconds", part="cold_start") == 240.0
    assert sample(reg, "forescale_lead_seconds", part="buffer") == 60.0
    assert sample(reg, "forescale_decision_reason", reason="forecast") == 1.0
    assert sample(reg, "forescale_decision_reason", reason="observed_floor") == 0.0
    assert sample(reg, "forescale_decisions_total", reason="forecast") == 1.0
    reg.export(wl, reg.decision(wl))
    assert sample(reg, "forescale_decisions_total", reason="forecast") == 2.0


def test_no_forecast_series_without_a_usable_forecast(reg):
    wl = reg.workload("serving", "llm", md(mode="reactive"))
    d = reg.decision(wl)
    reg.export(wl, d)
    assert (d.planned, d.reason) == (30.0, Reason.MODE_REACTIVE)
    assert sample(reg, "forescale_planned_qps") == 30.0
    assert sample(reg, "forescale_forecast_qps", quantile="0.9") is None
    assert sample(reg, "forescale_forecast_qps", quantile="mean") is None
    assert sample(reg, "forescale_decision_reason", reason="mode_reactive") == 1.0

"""The registry with a fake Prometheus client and a fake clock: refresh, staleness, errors, forgetting, spec changes."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from forecaster.base import Forecast
from scaler.policy import Reason
from scaler.prom import CredentialStore, PromError, PromErrorKind
from scaler.serve.cadence import retire_after
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.registry import Registry, RegistryConfig
from scaler.serve.workload import ForecastState, ScalerError
from support.clock import FakeClock
from support.fakes import FakePrometheus, sample_value, wait_for

T0 = 1_700_000_400.0
Q = "sum(rate(req_total[2m]))"
Q2 = "sum(rate(other_total[2m]))"


def md(**over) -> dict:
    m = {"serverAddress": "http://prom.test:9090", "query": Q, "qpsPerReplica": "10", "mode": "reactive",
         "hpaTolerance": "0"}
    m.update(over)
    return {k: v for k, v in m.items() if v is not None}


class Env:
    def __init__(self, **config):
        self.clock = FakeClock(T0)
        self.prom = FakePrometheus()
        self.metrics = ScalerMetrics()
        self.forgotten: list = []
        cfg = {"refresh_seconds": 5.0, "stale_seconds": 120.0, "forget_seconds": 900.0, "first_wait_seconds": 2.0}
        cfg.update(config)
        self.reg = Registry(self.clock, CredentialStore(None), self.metrics, RegistryConfig(**cfg),
                            client_factory=self.prom.factory())

    def refresh(self, wl) -> None:
        """One scheduler tick, and the refresh it started, done."""
        self.reg.tick()
        wait_for(lambda: not wl.refreshing)

    def sample(self, name: str, **labels) -> float | None:
        return sample_value(self.metrics.registry, name, {"namespace": "serving", "scaledobject": "llm", **labels})


@pytest.fixture
def env():
    e = Env()
    yield e
    e.reg.stop()


def test_first_call_waits_for_one_refresh_at_the_clock(env):
    env.prom.set_scalar(Q, 12.5)
    wl = env.reg.workload("serving", "llm", md())
    assert wl.first_done.is_set() and (wl.observed, wl.observed_at) == (12.5, T0)
    # evaluated at Prometheus' own now (no time=): a scaler clock ahead or behind moves nothing (issue 27)
    # ignoreNullValues is the registry's to apply (a missing series is not a zero): the client is asked for a value
    assert env.prom.calls_of("scalar") == [("scalar", Q, None, False)]
    d = env.reg.decision(wl)
    assert (d.planned, d.reason) == (12.5, Reason.MODE_REACTIVE)
    # the next calls answer from memory: no query until the cache expires
    env.reg.workload("serving", "llm", md())
    env.clock.advance(4.9)
    env.refresh(wl)
    assert len(env.prom.calls_of("scalar")) == 1
    env.clock.advance(0.1)
    env.refresh(wl)
    assert len(env.prom.calls_of("scalar")) == 2 and wl.observed_at == T0 + 5.0


def test_the_first_wait_is_bounded():
    e = Env(first_wait_seconds=0.3)
    try:
        e.prom.set_scalar(Q, 7.0)
        e.prom.gate = threading.Event()
        t0 = time.monotonic()
        wl = e.reg.workload("serving", "llm", md())
        waited = time.monotonic() - t0
        assert 0.25 <= waited < 2.0
        with pytest.raises(ScalerError) as err:
            e.reg.decision(wl)
        assert err.value.code == "UNAVAILABLE" and "no observation from Prometheus yet" in str(err.value)
        e.prom.gate.set()
        wait_for(wl.first_done.is_set)
        assert e.reg.decision(wl).planned == 7.0
    finally:
        e.prom.gate.set()
        e.reg.stop()


def test_last_good_observation_stands_in_for_stale_seconds_then_unavailable(env):
    env.prom.set_scalar(Q, 12.0)
    wl = env.reg.workload("serving", "llm", md())
    env.prom.set_scalar(Q, PromError(PromErrorKind.UNREACHABLE, "Prometheus at http://prom.test:9090 is unreachable"))
    env.clock.advance(60)
    env.refresh(wl)
    d = env.reg.decision(wl)
    assert (d.planned, d.reason) == (12.0, Reason.PROMETHEUS_STALE)
    assert env.sample("forescale_prometheus_errors_total", kind="unreachable") == 1
    env.clock.advance(60)  # exactly stale_seconds after the last good observation: still served
    env.refresh(wl)
    assert env.reg.decision(wl).planned == 12.0
    assert env.sample("forescale_prometheus_errors_total", kind="unreachable") == 2
    env.clock.advance(1)  # 121 s: past the edge
    with pytest.raises(ScalerError) as err:
        env.reg.decision(wl)
    assert err.value.code == "UNAVAILABLE"
    assert "unreachable" in str(err.value) and "last good observation 121s ago" in str(err.value)
    # Prometheus is back: a fresh value, no fallback
    env.prom.set_scalar(Q, 9.0)
    env.clock.advance(5)
    env.refresh(wl)
    d = env.reg.decision(wl)
    assert (d.planned, d.reason) == (9.0, Reason.MODE_REACTIVE)


def test_unreachable_on_first_sight_is_unavailable(env):
    env.prom.set_scalar(Q, PromError(PromErrorKind.UNREACHABLE, "Prometheus at x did not answer within 5s"))
    wl = env.reg.workload("serving", "llm", md())
    with pytest.raises(ScalerError) as err:
        env.reg.decision(wl)
    assert err.value.code == "UNAVAILABLE" and "did not answer within 5s" in str(err.value)


@pytest.mark.parametrize("kind", [PromErrorKind.REJECTED, PromErrorKind.NO_DATA, PromErrorKind.MULTIPLE_SERIES,
                                  PromErrorKind.BAD_VALUE])
def test_configuration_errors_are_failed_precondition_even_with_a_good_value_before(env, kind):
    env.prom.set_scalar(Q, 12.0)
    # no series is an error where ignoreNullValues is false (with the default it is missing data or a zero)
    wl = env.reg.workload("serving", "llm", md(ignoreNullValues="false" if kind is PromErrorKind.NO_DATA else None))
    assert env.reg.decision(wl).planned == 12.0
    env.prom.set_scalar(Q, PromError(kind, f"the {kind.value} message"))
    env.clock.advance(5)
    env.refresh(wl)
    with pytest.raises(ScalerError) as err:
        env.reg.decision(wl)  # never the stale value: waiting does not fix a configuration
    assert err.value.code == "FAILED_PRECONDITION"
    assert str(err.value) == f"ScaledObject serving/llm: the {kind.value} message"
    assert env.sample("forescale_prometheus_errors_total", kind=kind.value) == 1


def test_ignore_null_values_false_makes_no_series_an_error(env):
    wl = env.reg.workload("serving", "llm", md(ignoreNullValues="false"))  # the fake has no value: NO_DATA
    with pytest.raises(ScalerError) as err:
        env.reg.decision(wl)
    assert err.value.code == "FAILED_PRECONDITION" and "ignoreNullValues=false" in str(err.value)


def test_missing_credentials_are_failed_precondition(env):
    with pytest.raises(ScalerError) as err:
        env.reg.workload("serving", "llm", md(credentials="prom-reader"))
    assert err.value.code == "FAILED_PRECONDITION"
    assert "credentials 'prom-reader'" in str(err.value) and "no credentials directory" in str(err.value)
    assert env.reg.workloads() == [] and env.prom.calls == []


def test_bad_metadata_is_invalid_argument(env):
    with pytest.raises(ScalerError) as err:
        env.reg.workload("serving", "llm", md(qpsPerReplica="0"))
    assert err.value.code == "INVALID_ARGUMENT" and "'qpsPerReplica'" in str(err.value)


def test_negative_observation_is_floored(env):
    env.prom.set_scalar(Q, -3.0)
    wl = env.reg.workload("serving", "llm", md())
    assert wl.observed == 0.0 and env.reg.decision(wl).planned == 0.0


def test_a_scaledobject_not_polled_for_forget_seconds_is_forgotten(env):
    class Recorder:
        def __init__(self):
            self.forgotten = []

        def forget(self, wl):
            self.forgotten.append(wl.key)

        def restore(self, wl):
            return None

        def maybe_refit(self, wl, now, adopt):
            pass

    rec = Recorder()
    env.reg.forecasts = rec
    env.prom.set_scalar(Q, 12.0)
    wl = env.reg.workload("serving", "llm", md(mode="forecastAndScale"))
    env.reg.record(wl, env.reg.decision(wl))  # served, as GetMetrics does: exported
    assert env.sample("forescale_observed_qps") == 12.0
    assert env.metrics.registry.get_sample_value("forescale_scaledobjects") == 1
    env.clock.advance(600)
    env.reg.workload("serving", "llm", md(mode="forecastAndScale"))  # a poll at T0+600
    env.clock.advance(900)  # exactly forget_seconds since that poll: kept
    env.refresh(wl)
    assert env.reg.workloads() == [wl] and rec.forgotten == []
    env.clock.advance(1)
    env.reg.tick()
    assert env.reg.workloads() == []
    assert rec.forgotten == [wl.key] and wl.key[2].startswith("forescale-serving-llm.")
    assert env.sample("forescale_observed_qps") is None  # its series are gone too
    assert env.metrics.registry.get_sample_value("forescale_scaledobjects") == 0
    # seen again: a new workload, refreshed afresh
    wl2 = env.reg.workload("serving", "llm", md(mode="forecastAndScale"))
    assert wl2 is not wl and wl2.created == T0 + 1501 and wl2.observed_at == T0 + 1501


def test_another_metadata_map_is_another_workload_that_starts_from_what_its_sibling_knows(env):
    """An edit (or a second trigger, or another caller) never replaces the workload in force (issue 27, H1)."""
    env.prom.set_scalar(Q, 12.0)
    env.prom.set_scalar(Q2, 30.0)
    wl = env.reg.workload("serving", "llm", md())
    # a new target: a second workload; the same series, so it starts from the sibling's observation, no query
    wl_b = env.reg.workload("serving", "llm", md(qpsPerReplica="20"))
    assert wl_b is not wl and wl.spec.qps_per_replica == 10.0 and wl_b.spec.qps_per_replica == 20.0
    assert (wl_b.observed, wl_b.observed_at) == (12.0, T0) and len(env.prom.calls_of("scalar")) == 1
    assert wl_b.trigger != wl.trigger and len(wl_b.trigger) == 8
    both = {"namespace": "serving", "scaledobject": "llm"}
    get = env.metrics.registry.get_sample_value
    assert get("forescale_target_qps_per_replica", {**both, "trigger": wl.trigger}) == 10.0
    assert get("forescale_target_qps_per_replica", {**both, "trigger": wl_b.trigger}) == 20.0
    # another query: a third workload, refreshed on its own; the first ones keep their value
    wl_c = env.reg.workload("serving", "llm", md(qpsPerReplica="20", query=Q2))
    assert (wl_c.observed, wl_c.observed_at) == (30.0, T0)
    assert env.prom.calls_of("scalar")[-1] == ("scalar", Q2, None, False)
    assert env.reg.decision(wl).planned == 12.0 and env.reg.decision(wl_c).planned == 30.0


def test_an_edited_trigger_is_retired_after_its_silence_and_its_series_go(env):
    """The user edits the ScaledObject: KEDA polls only the new map; the old one is retired once it was silent
    for retire_after (60 s floor, 3 of its learned polls) while the new one is polled, and its series go with it."""
    env.prom.set_scalar(Q, 12.0)
    old = env.reg.workload("serving", "llm", md())
    for _ in range(4):  # KEDA polled the old map every 15 s: its cadence is learned (retire after max(60, 3 x 15))
        env.clock.advance(15)
        old = env.reg.workload("serving", "llm", md())
    env.reg.record(old, env.reg.decision(old))  # served: exported
    env.clock.advance(10)
    new = env.reg.workload("serving", "llm", md(metricName="renamed"))
    env.reg.record(new, env.reg.decision(new))
    for _ in range(5):  # KEDA polls the new map every 15 s; 60 s of silence for the old one at the end
        env.clock.advance(15)
        env.reg.workload("serving", "llm", md(metricName="renamed"))
        env.reg.tick()
    assert env.reg.workloads() == [old, new] or env.reg.workloads() == [new]
    env.clock.advance(1)
    env.reg.workload("serving", "llm", md(metricName="renamed"))
    env.reg.tick()
    assert env.reg.workloads() == [new]
    get = env.metrics.registry.get_sample_value
    assert get("forescale_observed_qps", {"namespace": "serving", "scaledobject": "llm", "trigger": old.trigger}) is None
    assert get("forescale_observed_qps", {"namespace": "serving", "scaledobject": "llm", "trigger": new.trigger}) == 12.0


def test_the_client_follows_the_target(env):
    env.reg.workload("serving", "llm", md())
    env.reg.workload("serving", "llm", md(timeout="2000"))
    assert [t.timeout_seconds for t in env.prom.targets] == [5.0, 2.0]


def test_a_forecast_is_adopted_only_for_the_current_forecast_key(env):
    wl = env.reg.workload("serving", "llm", md(mode="forecastAndScale", model="naive"), wait=False)
    key = wl.spec.forecast_key()
    fc = Forecast(T0 + 60 * np.arange(1, 100), np.full(99, 40.0), {}, "naive")
    # another map's workload (another model) has another key: a result for it is refused here
    other_wl = env.reg.workload("serving", "llm", md(mode="forecastAndScale", model="linear_trend"), wait=False)
    foreign = ForecastState(forecast=fc, fitted_at=T0, key=other_wl.spec.forecast_key())
    assert not env.reg.adopt_forecast(wl, foreign, other_wl.spec.forecast_key())
    assert wl.forecast == ForecastState()
    fresh = ForecastState(forecast=fc, fitted_at=T0, key=key)
    assert env.reg.adopt_forecast(wl, fresh, key) and wl.forecast is fresh
    assert other_wl.forecast == ForecastState()  # never shared
    # a re-prediction of a curve that was replaced meanwhile is refused too
    other = ForecastState(forecast=fc, fitted_at=T0 + 1, key=key)
    assert not env.reg.adopt_forecast(wl, other, key, replaces=foreign)
    assert env.reg.adopt_forecast(wl, other, key, replaces=fresh) and wl.forecast is other


def test_another_map_never_inherits_a_forecast(env):
    """Issue 40, item 6: a caller's map with the victim's forecast key (same Prometheus, query, model, history) made
    the victim's new trigger inherit the caller's curve, fitted for another lead, quantile and events. A curve is
    its own map's: another map starts with none and is fitted on its own."""
    env.prom.set_scalar(Q, 12.0)
    wl = env.reg.workload("serving", "llm", md(mode="forecastAndScale", model="naive", levelCorrection="0"))
    fc = Forecast(T0 + 60 * np.arange(0, 100), np.full(100, 40.0), {0.8: np.full(100, 45.0)}, "naive")  # 0.8: the default
    fs = ForecastState(forecast=fc, fitted_at=T0, key=wl.spec.forecast_key())
    assert env.reg.adopt_forecast(wl, fs, fs.key)
    edited = env.reg.workload("serving", "llm", md(mode="forecastAndScale", model="naive", levelCorrection="0",
                                                   qpsPerReplica="20", coldStartSeconds="600"))
    assert edited is not wl and edited.spec.forecast_key() == fs.key and edited.forecast == ForecastState()
    assert (edited.observed, edited.observed_at) == (12.0, T0)  # the observation (the same series) is shared
    assert env.reg.decision(edited).reason is Reason.NO_FORECAST_YET and wl.forecast is fs


# -- missing data is unknown, not zero (issue 36, item 1) ----------------------------------------------------------
def test_a_series_that_stops_is_held_as_missing_then_unavailable(env):
    """12 req/s, then no series: served 12 (the last good observation, held), reason fallback_missing_data, not 0;
    UNAVAILABLE once the last good observation is older than stale_seconds (120 s), as a stale one; back when the
    series is."""
    env.prom.set_scalar(Q, 12.0)
    wl = env.reg.workload("serving", "llm", md())
    env.prom.set_scalar(Q, None)  # the series stops (a scrape gap): the query returns no series
    for t in (5, 60, 120):  # refreshed at T0 + 5, + 60, + 120: still within 120 s of the last good one (T0)
        env.clock.advance(t - (env.clock() - T0))
        env.refresh(wl)
        d = env.reg.decision(wl)
        assert (d.planned, d.reason, d.observed) == (12.0, Reason.MISSING_DATA, 12.0), t
    assert env.sample("forescale_prometheus_errors_total", kind="no_data") is None  # no error: a successful query
    env.clock.advance(1)  # 121 s after the last good observation
    with pytest.raises(ScalerError) as err:
        env.reg.decision(wl)
    assert err.value.code == "UNAVAILABLE"
    # missing since the refresh at T0 + 5: 116 s; the last good observation (T0) is 121 s old
    assert "no usable value (no series, or NaN) for 116s" in str(err.value) and "121s ago" in str(err.value)
    env.prom.set_scalar(Q, 9.0)  # back
    env.clock.advance(5)
    env.refresh(wl)
    d = env.reg.decision(wl)
    assert (d.planned, d.reason) == (9.0, Reason.MODE_REACTIVE) and wl.missing_since is None


@pytest.mark.parametrize("before,activation", [(None, "0"), (0.0, "0"), (0.4, "0.5")])
def test_no_series_after_none_or_an_idle_one_is_a_real_zero(env, before, activation):
    """ignoreNullValues true, as KEDA users expect it: no series ever, or none after the last one was at or below
    activationThreshold (the workload scaled to zero, its pods and series gone) reads 0."""
    env.prom.set_scalar(Q, before)
    wl = env.reg.workload("serving", "llm", md(activationThreshold=activation))
    env.prom.set_scalar(Q, None)
    env.clock.advance(5)
    env.refresh(wl)
    d = env.reg.decision(wl)
    assert (d.planned, d.reason) == (0.0, Reason.MODE_REACTIVE) and wl.missing_since is None
    assert env.reg.workloads()[0].observed_at == T0 + 5  # a fresh observation: never UNAVAILABLE for it


def test_a_sibling_polled_by_another_caller_never_retires_a_trigger(env):
    """Issue 40, item 6: a victim at zero replicas, polled by KEDA's IsActive every 90 s, and an attacker's
    GetMetricSpec every 2 s for the same namespace/name with another map: the victim was 'edited' and forgotten
    between KEDA's polls (a new trigger's bound was 60 s). Now its own silence is measured against its own learned
    cadence (3 x 90 s), and a trigger with no cadence learned yet is not retired before forget_seconds."""
    env.prom.set_scalar(Q, 0.0)
    victim = env.reg.workload("serving", "llm", md())
    attacker = md(query="vector(0)")
    t = 0.0
    for poll in range(5):  # 5 KEDA polls, 90 s apart: 450 s, with the attacker at work in between
        for _ in range(45):
            env.clock.advance(2)
            t += 2
            env.reg.workload("serving", "llm", attacker, wait=False)
            env.reg.tick()
        assert victim in env.reg.workloads(), (poll, t)
        assert env.reg.workload("serving", "llm", md()) is victim  # KEDA's poll finds the same workload
    assert victim.poll_interval == pytest.approx(90.0)
    assert retire_after(victim, env.reg.config) == 270.0

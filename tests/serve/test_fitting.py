"""The forecast service with a fake Prometheus, a fake clock and in-process executors (real models, no processes)."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest

from scaler.policy import Reason
from scaler.prom import PromError, PromErrorKind
from scaler.serve.fitjob import FitJob
from scaler.serve.fitting import FitService, anchored
from scaler.serve.forecastdoc import forecast_document, forecast_from_document, forecast_key_hash
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.state import JsonStore, file_name
from scaler.serve.workload import ForecastState
from support.clock import FakeClock
from scaler.serve.worker import SETTLE_SECONDS, cutoff, phase
from support.fakes import FakePrometheus, Harness, InlineExecutor, signed, wait_for

T0 = 1_700_000_400.0  # a multiple of 60: the clock's start
END = T0  # where a history queried at T0 ends: re-predictions'
Q = "sum(rate(req_total[2m]))"
FILE = "serving__llm__forescale-serving-llm.json"  # the name before the metadata digest was part of it


def md(**over) -> dict:
    m = {"serverAddress": "http://prom.test:9090", "query": Q, "qpsPerReplica": "10", "model": "naive",
         "history": "2h", "minHistory": "1h", "refitInterval": "1h", "levelCorrection": "0", "hpaTolerance": "0",
         "coldStartSeconds": "300", "bufferSeconds": "0", "quantile": "0.9"}
    m.update(over)
    return m


class Env(Harness):
    """The registry with a real FitService (models fitted in this thread) and an optional store."""

    def __init__(self, state_dir=None, clock=None, prom=None, pool=None):
        clock, metrics = clock or FakeClock(T0), ScalerMetrics()
        self.store = JsonStore(state_dir) if state_dir is not None else None
        self.fits = FitService(clock, metrics, store=self.store, pool=pool or InlineExecutor(), io=InlineExecutor())
        super().__init__(clock, prom or FakePrometheus(), md(), metrics=metrics, forecasts=self.fits)


@pytest.fixture
def env():
    e = Env()
    e.prom.set_scalar(Q, 12.0)
    e.prom.set_range(Q, lambda t: np.full(t.shape, 40.0))
    yield e
    e.close()


def b0(wl, now: float = T0) -> float:
    """The fit's data cutoff in force at ``now``: the latest whole hour plus the trigger's phase (a digest of its
    identity, whole minutes), at least SETTLE_SECONDS (60) old."""
    b = cutoff(now, 3600.0, wl.key)
    assert b % 60 == 0 and now - 3600 - SETTLE_SECONDS < b <= now - SETTLE_SECONDS
    assert (b - phase(wl.key, 3600.0)) % 3600 == 0
    return b


def observe(env, wl) -> None:
    """A poll, one scheduler tick and the observation refresh it starts, done, at the current clock."""
    assert env.workload() is wl
    env.reg.tick()
    wait_for(lambda: not wl.refreshing and wl.observed_at == env.clock())


def test_a_fit_is_adopted_and_decides(env):
    wl = env.workload()
    assert env.reg.decision(wl).reason is Reason.NO_FORECAST_YET
    env.reg.tick()
    end = b0(wl)  # the history ends at the cutoff, not at now: the same in every replica
    assert env.prom.calls_of("range") == [("range", Q, end - 7200 + 60, end, 60.0)]
    fs = wl.forecast
    assert (fs.fitted_at, fs.predicted_at, fs.model, fs.history_max) == (end, T0, "naive", 40.0)
    assert fs.key == wl.spec.forecast_key() and fs.unusable is None
    # 6 h ahead of the cutoff, the minimum horizon (2 x 1 h + 300 s lead + 60 s settle is less)
    assert fs.forecast.t[0] == end + 60 and len(fs.forecast) == 360
    assert not env.fits.fitting(wl)
    d = env.reg.decision(wl)
    assert (d.planned, d.reason, d.forecast_peak, d.forecast_mean_peak) == (40.0, Reason.FORECAST, 40.0, 40.0)
    assert env.sample("forescale_last_fit_timestamp_seconds") == T0
    assert env.sample("forescale_model_info", model="naive") == 1
    env.reg.tick()  # not due, and the curve was predicted at this very time: nothing to do
    assert len(env.prom.calls_of("range")) == 1


def test_too_short_a_history_is_insufficient(env):
    env.prom.set_range(Q, lambda t: np.where(t > t[-1] - 1800, 40.0, np.nan))  # the window's last 30 points
    wl = env.workload()
    env.reg.tick()
    fs = wl.forecast
    assert fs.unusable is Reason.INSUFFICIENT_HISTORY and fs.forecast is None
    assert fs.detail == "0.5 h of history, minHistory is 1.0 h"
    d = env.reg.decision(wl)
    assert (d.planned, d.reason) == (12.0, Reason.INSUFFICIENT_HISTORY)


def test_no_history_is_insufficient(env):
    env.prom.set_range(Q, lambda t: np.full(t.shape, np.nan))
    wl = env.workload()
    env.reg.tick()
    assert (wl.forecast.unusable, wl.forecast.detail) == (Reason.INSUFFICIENT_HISTORY, "no history returned")


def test_a_failed_first_fit_falls_back_and_is_retried_with_a_capped_backoff(env):
    env.prom.set_range(Q, PromError(PromErrorKind.UNREACHABLE, "Prometheus at http://prom.test:9090 is unreachable"))
    wl = env.workload()
    env.reg.tick()
    assert wl.forecast.unusable is Reason.FIT_FAILED and "unreachable" in wl.forecast.detail
    assert env.reg.decision(wl).reason is Reason.FIT_FAILED
    # the history query failed: a Prometheus error, not a failed fit (the Prometheus alert, not the fit one)
    assert env.sample("forescale_prometheus_errors_total", kind="history_unreachable") == 1
    assert env.sample("forescale_fit_failures_total") is None
    # backoff 60 s, 120 s, 240 s, ... (RETRY_FIRST_SECONDS doubling): tries at +60, +180, +420 from the first
    tries = []
    for minute in range(1, 9):
        env.clock.advance(60)
        env.workload()
        env.reg.tick()
        tries.append(len(env.prom.calls_of("range")))
    assert tries == [2, 2, 3, 3, 3, 3, 4, 4]
    env.prom.set_range(Q, lambda t: np.full(t.shape, 40.0))
    env.clock.advance(360)  # +840 s: the 4th failure at +420 s waits 480 s, until +900 s
    env.workload()
    env.reg.tick()
    assert len(env.prom.calls_of("range")) == 4
    env.clock.advance(60)
    env.workload()
    env.reg.tick()
    assert len(env.prom.calls_of("range")) == 5 and wl.forecast.unusable is None
    assert env.sample("forescale_prometheus_errors_total", kind="history_unreachable") == 4
    observe(env, wl)
    assert env.reg.decision(wl).planned == 40.0


def test_retry_delay_doubles_and_is_capped():
    from scaler.serve.fitting import retry_delay
    assert [retry_delay(n, 3600) for n in (1, 2, 3, 4, 5, 6, 40)] == [60, 120, 240, 480, 900, 900, 900]
    assert retry_delay(3, 200) == 200  # never later than the refit interval


def test_a_failing_model_counts_as_a_fit_failure_and_last_fit_is_the_completion_time():
    clock = FakeClock(T0)

    class Slow(InlineExecutor):  # the fit takes 7 s of the fake clock
        def submit(self, fn, /, *args, **kwargs):
            clock.advance(7)
            return super().submit(fn, *args, **kwargs)

    e = Env(clock=clock, pool=Slow())
    try:
        e.prom.set_scalar(Q, 12.0)
        e.prom.set_range(Q, lambda t: np.full(t.shape, 40.0))
        wl = e.workload()
        e.reg.tick()
        assert wl.forecast.fitted_at == b0(wl) and wl.forecast.completed_at == T0 + 7
        assert e.sample("forescale_last_fit_timestamp_seconds") == T0 + 7  # finished, not scheduled
    finally:
        e.close()


def test_a_failed_refit_keeps_serving_the_previous_curve_while_it_applies(env):
    wl = env.workload()
    env.reg.tick()
    curve = wl.forecast.forecast
    env.prom.set_range(Q, PromError(PromErrorKind.REJECTED, "Prometheus answered HTTP Status Code 400"))
    env.clock.advance(3600)  # refit due
    env.workload()  # KEDA polls
    env.reg.tick()
    fs = wl.forecast
    assert fs.forecast is curve and fs.fitted_at == b0(wl) and fs.unusable is None
    assert fs.detail == "refit failed: Prometheus answered HTTP Status Code 400"
    assert env.sample("forescale_prometheus_errors_total", kind="history_rejected") == 1
    observe(env, wl)
    d = env.reg.decision(wl)
    assert (d.planned, d.reason) == (40.0, Reason.FORECAST)
    # retried after RETRY_FIRST_SECONDS (60), not at every tick
    env.clock.advance(59)
    env.reg.tick()
    assert len(env.prom.calls_of("range")) == 2
    env.clock.advance(1)
    env.reg.tick()
    assert len(env.prom.calls_of("range")) == 3 and wl.forecast.forecast is curve
    # the curve ends 6 h after its cutoff; with a 300 s lead it covers decisions up to 6 h - 300 s after it
    env.clock.advance(b0(wl) + 21600 - 300 - env.clock())
    observe(env, wl)  # a current observation: staleness of the observation is not what this test is about
    assert env.reg.decision(wl).reason is Reason.FORECAST
    env.clock.advance(1)  # the observation is 1 s old: current
    d = env.reg.decision(wl)
    assert (d.planned, d.reason, d.forecast_peak) == (12.0, Reason.FORECAST_STALE, None)


def test_a_metadata_change_mid_fit_is_another_workload_and_leaves_the_fit_alone(tmp_path):
    """Issue 27 (H1): a second map for the same names never replaces the first, even mid-fit: the fit in flight
    is adopted for the workload it was made for, and the edited map is fitted for its own inputs."""
    holder = {}
    e = Env(state_dir=tmp_path, pool=InlineExecutor(before=lambda: holder["change"]()))
    try:
        e.prom.set_scalar(Q, 12.0)
        e.prom.set_range(Q, lambda t: np.full(t.shape, 40.0))
        wl = e.workload()
        old_key = wl.spec.forecast_key()
        edited = []
        holder["change"] = lambda: edited.append(e.workload(history="90m"))  # mid-fit: another history window
        e.reg.tick()
        assert wl.spec.forecast_key() == old_key and wl.forecast.key == old_key and wl.forecast.forecast is not None
        assert json.loads((tmp_path / file_name(*wl.key)).read_text())["key"] == forecast_key_hash(wl.spec)
        other = edited[0]
        assert other is not wl and other.forecast == ForecastState()
        holder["change"] = lambda: None
        e.reg.tick()  # the next tick fits the edited map for its own inputs
        assert other.forecast.key == other.spec.forecast_key() and other.forecast.forecast is not None
        end = b0(other)  # its own cutoff (its identity holds its metadata's digest)
        assert ("range", Q, end - 5400 + 60, end, 60.0) in e.prom.calls_of("range")
        assert json.loads((tmp_path / file_name(*other.key)).read_text())["key"] == forecast_key_hash(other.spec)
    finally:
        e.close()


def test_recent_point_models_are_re_predicted_between_fits(env):
    wl = env.workload()
    env.reg.tick()
    fitted = wl.forecast
    env.prom.set_range(Q, lambda t: np.full(t.shape, 55.0))  # the level moved up since the fit
    env.clock.advance(59)
    env.reg.tick()
    assert wl.forecast is fitted  # not a step yet
    env.clock.advance(1)
    env.reg.tick()
    fs = wl.forecast
    assert env.prom.calls_of("range")[-1] == ("range", Q, END + 60 - 29 * 60, END + 60, 60.0)
    assert (fs.fitted_at, fs.predicted_at) == (b0(wl), T0 + 60)  # re-predicted, not refitted
    assert fs.forecast.t[0] == END + 120 and fs.forecast.t[-1] == fitted.forecast.t[-1]
    observe(env, wl)
    d = env.reg.decision(wl)
    assert (d.planned, d.reason) == (55.0, Reason.FORECAST)


def test_forecasts_survive_a_restart(tmp_path, env):
    e = Env(state_dir=tmp_path, prom=env.prom)
    try:
        wl = e.workload()
        e.reg.tick()
        fs = wl.forecast
    finally:
        e.close()
    doc = json.loads((tmp_path / file_name(*wl.key)).read_text())
    assert (doc["version"], doc["namespace"], doc["name"], doc["metric"]) == (1, "serving", "llm", wl.key[2])
    assert wl.key[2] == "forescale-serving-llm." + wl.digest[:32]
    assert doc["key"] == forecast_key_hash(wl.spec) and doc["model_state"]["model"] == "naive"
    ranges_before = len(env.prom.calls_of("range"))
    e2 = Env(state_dir=tmp_path, prom=env.prom)
    try:
        wl2 = e2.workload()
        got = wl2.forecast
        assert (got.fitted_at, got.model, got.history_max, got.key) == (b0(wl2), "naive", 40.0, wl2.spec.forecast_key())
        np.testing.assert_array_equal(got.forecast.t, fs.forecast.t)
        np.testing.assert_array_equal(got.forecast.quantiles[0.9], fs.forecast.quantiles[0.9])
        assert e2.reg.decision(wl2).planned == 40.0
        assert len(env.prom.calls_of("range")) == ranges_before  # answered without a fit
        assert e2.sample("forescale_last_fit_timestamp_seconds") == T0
        # the stored model state warm-starts re-predictions at once
        e2.clock.advance(60)
        e2.reg.tick()
        assert wl2.forecast.predicted_at == T0 + 60 and wl2.forecast.fitted_at == b0(wl2)
    finally:
        e2.close()
    # other inputs: the stored curve is not theirs
    e3 = Env(state_dir=tmp_path, prom=env.prom)
    try:
        assert e3.workload(model="linear_trend").forecast == ForecastState()
    finally:
        e3.close()


def old_format_document(key: str) -> dict:
    """A state file exactly as the scaler wrote it before the stores were merged."""
    return {"version": 1, "namespace": "serving", "name": "llm", "metric": "forescale-serving-llm", "key": key,
            "fitted_at": T0 - 600, "model": "naive", "history_max": 50.0, "fit_seconds": 0.01,
            "forecast": {"t": [END + 60 * i for i in range(-10, 30)], "mean": [33.0] * 40,
                         "quantiles": {"0.1": [30.0] * 40, "0.5": [33.0] * 40, "0.9": [36.0] * 39 + [None]}},
            "model_state": None}


def test_an_unsigned_file_is_ignored_and_refitted(tmp_path, env, caplog):
    """A document without the scaler's HMAC (a forged one, or one written before signing) is not adopted."""
    spec_env = Env(prom=env.prom)
    key = forecast_key_hash(spec_env.workload().spec)
    spec_env.close()
    (tmp_path / FILE).write_text(json.dumps(old_format_document(key)))
    e = Env(state_dir=tmp_path, prom=env.prom)
    try:
        with caplog.at_level(logging.WARNING):
            wl = e.workload()
        assert wl.forecast == ForecastState()
        assert any("not signed with this scaler's state key" in r.getMessage() for r in caplog.records)
    finally:
        e.close()


def test_a_signed_file_in_the_previous_layout_is_read(tmp_path, env):
    spec_env = Env(prom=env.prom)
    key = forecast_key_hash(spec_env.workload().spec)
    spec_env.close()
    (tmp_path / FILE).write_text(signed(tmp_path, old_format_document(key)))
    e = Env(state_dir=tmp_path, prom=env.prom)
    try:
        wl = e.workload()
        fs = wl.forecast
        assert (fs.fitted_at, fs.model, fs.history_max, fs.fit_seconds) == (T0 - 600, "naive", 50.0, 0.01)
        assert math.isnan(fs.forecast.quantiles[0.9][-1]) and fs.forecast.quantiles[0.9][0] == 36.0
        d = e.reg.decision(wl)
        assert (d.planned, d.reason) == (36.0, Reason.FORECAST)
    finally:
        e.close()


@pytest.mark.parametrize("content,message", [
    ("{not json", "unreadable"),
    (None, "unreadable"),  # a directory where the file should be
    ("[1, 2]", "malformed"),
    ("KEYED", "malformed"),  # the right version and key, a forecast without its mean
    # valid JSON with the right version and key, but inconsistent: gave INTERNAL on every call until a refit
    ("KEYED:short-quantile", "malformed"),  # a quantile curve one point shorter than t
    ("KEYED:unordered", "malformed"),  # t not increasing
    ("KEYED:nan-fitted", "malformed"),  # fitted_at not a number
    ("KEYED:bad-level", "malformed"),  # a quantile level outside (0, 1)
])
def test_an_unreadable_or_malformed_file_is_ignored(tmp_path, env, caplog, content, message):
    path = tmp_path / FILE
    if content is None:
        path.mkdir()
    elif content.startswith("KEYED"):
        spec_env = Env(prom=env.prom)
        doc = old_format_document(forecast_key_hash(spec_env.workload().spec))
        spec_env.close()
        f = doc["forecast"]
        {"KEYED": lambda: f.pop("mean"),
         "KEYED:short-quantile": lambda: f["quantiles"]["0.9"].pop(),
         "KEYED:unordered": lambda: f["t"].reverse(),
         "KEYED:nan-fitted": lambda: doc.update(fitted_at="soon"),
         "KEYED:bad-level": lambda: f["quantiles"].update({"1.5": f["mean"]})}[content]()
        path.write_text(signed(tmp_path, doc))  # signed: the content's own checks refuse it
    else:
        path.write_text(content)
    e = Env(state_dir=tmp_path, prom=env.prom)
    try:
        with caplog.at_level(logging.WARNING):
            wl = e.workload()
        assert wl.forecast == ForecastState()
        assert any(f"ignoring {message} state file {path}" in r.getMessage() for r in caplog.records)
        e.reg.tick()  # and the service fits afresh
        assert wl.forecast.forecast is not None and wl.forecast.fitted_at == b0(wl)
    finally:
        e.close()


def test_non_finite_values_are_stored_as_null(tmp_path):
    from forecaster.base import Forecast

    fc = Forecast(np.array([1.0, 2.0, 3.0]), np.array([1.0, np.nan, np.inf]), {0.9: np.array([np.nan, 2.0, 3.0])})
    fs = ForecastState(forecast=fc, fitted_at=5.0, history_max=float("nan"), model="naive", fit_seconds=0.5)
    store = JsonStore(tmp_path)
    store.save("ns", "n", "m", forecast_document(fs, {"model": "naive"}), version=1, key="k")
    text = (tmp_path / "ns__n__m.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    doc = json.loads(text)
    assert doc["forecast"]["mean"] == [1.0, None, None] and doc["history_max"] is None
    back, state = forecast_from_document(store.load("ns", "n", "m", version=1, key="k"), ("key",))
    assert np.isnan(back.forecast.mean[1:]).all() and back.forecast.quantiles[0.9][1] == 2.0
    assert (back.fitted_at, back.key, state) == (5.0, ("key",), {"model": "naive"})
    assert store.load("ns", "n", "m", version=2, key="k") is None
    assert store.load("ns", "n", "m", version=1, key="other") is None
    store.forget("ns", "n", "m")
    assert store.load("ns", "n", "m", version=1, key="k") is None and not (tmp_path / "ns__n__m.json").exists()


def test_an_unwritable_state_dir_is_refused_with_a_clear_message(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OSError) as err:
        JsonStore(blocker / "state")
    assert str(err.value).startswith(f"--state-dir: {blocker / 'state'} is not writable")


def test_file_names_are_safe(tmp_path):
    store = JsonStore(tmp_path)
    assert store.path("team a", "llm/x", "forescale-team-a").name == "team_a__llm_x__forescale-team-a.json"


def test_two_replicas_fit_on_the_same_cutoffs_whenever_they_start(env):
    """Issue 22 (item 6): a replica started mid-interval fits at once on the latest cutoff's window, as one
    that has been running all along; both refit when the next cutoff is in force (60 s after it), not before."""
    env.prom.set_range(Q, lambda t: 40.0 + 10.0 * np.sin(t / 5000.0))  # a curve that tells windows apart
    wl = env.workload()
    env.reg.tick()
    c = b0(wl)
    late_start = c + 3600 + SETTLE_SECONDS - 1  # the other replica starts a second before the next cutoff is in force
    other = Env(clock=FakeClock(late_start), prom=env.prom)
    try:
        wl2 = other.workload()
        other.reg.tick()
        assert wl2.key == wl.key and wl2.forecast.fitted_at == wl.forecast.fitted_at == c
        np.testing.assert_array_equal(wl2.forecast.forecast.t, wl.forecast.forecast.t)
        np.testing.assert_allclose(wl2.forecast.forecast.quantiles[0.9], wl.forecast.forecast.quantiles[0.9], rtol=1e-12)
        # the first replica: nothing due until the next cutoff is in force, then a fit on its window
        env.clock.advance(late_start - env.clock())
        env.workload()
        env.reg.tick()
        assert wl.forecast.fitted_at == c and len(env.prom.calls_of("range")) == 3  # two fits, one re-prediction
        for e, w in ((env, wl), (other, wl2)):
            e.clock.advance(1)
            e.workload()
            e.reg.tick()
            assert w.forecast.fitted_at == c + 3600
        assert env.prom.calls_of("range")[-1] == env.prom.calls_of("range")[-2] == ("range", Q, c + 3600 - 7200 + 60,
                                                                                   c + 3600, 60.0)
        np.testing.assert_allclose(wl2.forecast.forecast.quantiles[0.9], wl.forecast.forecast.quantiles[0.9], rtol=1e-12)
    finally:
        other.close()


def test_a_fit_on_the_first_cutoff_of_a_day_starts_cold_the_others_warm():
    """Two replicas' warm-start chains meet again: the fit on a day's first cutoff (1 in 24 at refitInterval 1h)
    starts cold, the next ones from the previous fit's parameters."""
    pool = InlineExecutor()
    e = Env(pool=pool)
    try:
        e.prom.set_scalar(Q, 12.0)
        e.prom.set_range(Q, lambda t: np.full(t.shape, 40.0))
        wl = e.workload()
        p = phase(wl.key, 3600.0)
        day_anchor = math.floor((T0 - p) / 86400) * 86400 + p + 86400  # the next cutoff at k x 3600 + p with k % 24 == 0
        day_anchor += 86400 if day_anchor - 3600 + SETTLE_SECONDS <= T0 else 0  # the cutoff before it still ahead
        assert anchored(day_anchor, 3600.0, wl.key) and not anchored(day_anchor - 3600, 3600.0, wl.key)
        assert not anchored(day_anchor + 1, 3600.0, wl.key)  # off the cutoffs (a drift alarm's fit at now)
        e.clock.advance(day_anchor - 3600 + SETTLE_SECONDS - T0)  # the cutoff before it: the first fit, cold (no state)
        e.workload()
        e.reg.tick()
        e.clock.advance(3600)  # the day's first cutoff: cold although a state is there
        e.workload()
        e.reg.tick()
        e.clock.advance(3600)  # the next: warm
        e.workload()
        e.reg.tick()
        jobs = [args[0] for fn, args in pool.submitted if isinstance(args[0], FitJob)]
        assert [j.t[-1] for j in jobs] == [day_anchor - 3600, day_anchor, day_anchor + 3600]
        assert [j.warm_state is not None for j in jobs] == [False, False, True]
    finally:
        e.close()

"""The registry and the fitter under failure: staleness judged at answer time, a hung target that holds no one
else, learned polling cadence, forgetting takes everything, a dead fit worker is replaced."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

from scaler.policy import Reason
from scaler.prom import CredentialStore
from scaler.serve.cadence import refresh_interval
from scaler.serve.fitting import FitService
from scaler.serve.worker import SETTLE_SECONDS, cutoff
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.registry import Registry, RegistryConfig
from scaler.serve.state import JsonStore
from scaler.serve.workload import ScalerError
from support.clock import FakeClock
from support.fakes import FakePrometheus, Harness, InlineExecutor, wait_for

T0 = 1_700_000_400.0
Q = "sum(rate(req_total[2m]))"


def md(server="http://prom.test:9090", **over) -> dict:
    return {"serverAddress": server, "query": Q, "qpsPerReplica": "10", "mode": "reactive", "hpaTolerance": "0",
            **over}


class GatedProm(FakePrometheus):
    """Scalar calls to one server hang until released; the others answer at once."""

    def __init__(self, hung_server: str):
        super().__init__()
        self.hung_server, self.release = hung_server, threading.Event()
        self.inflight_hung = 0

    def factory(self):
        def make(target, credentials=None):
            prom = self

            class Client:
                def scalar(self, query, at=None, *, ignore_null=True):
                    if target.server_address == prom.hung_server:
                        prom.inflight_hung += 1
                        prom.release.wait(10)
                    return FakePrometheus.scalar(prom, query, at, ignore_null=ignore_null)
            return Client()
        return make


def registry(prom, clock, **cfg) -> Registry:
    config = RegistryConfig(**{"refresh_seconds": 5.0, "stale_seconds": 120.0, "first_wait_seconds": 0.2, **cfg})
    return Registry(clock, CredentialStore(None), ScalerMetrics(), config, client_factory=prom.factory())


def test_a_value_not_renewed_goes_stale_then_unavailable_at_answer_time():
    clock, prom = FakeClock(T0), FakePrometheus()
    prom.set_scalar(Q, 12.0)
    reg = registry(prom, clock)
    try:
        wl = reg.workload("serving", "llm", md())
        assert reg.decision(wl).reason is Reason.MODE_REACTIVE
        prom.gate = threading.Event()  # every later refresh hangs: no error is ever recorded
        reg.tick()
        # late_after = 2 x 5 s (refresh) + 5 s (timeout) + 2 s = 17 s
        clock.advance(17)
        assert reg.decision(wl).reason is Reason.MODE_REACTIVE
        clock.advance(1)
        d = reg.decision(wl)
        assert (d.planned, d.reason) == (12.0, Reason.PROMETHEUS_STALE)
        clock.advance(120 - 18 + 1)  # 121 s after the last good observation
        with pytest.raises(ScalerError) as err:
            reg.decision(wl)
        assert err.value.code == "UNAVAILABLE" and "last good observation 121s ago" in str(err.value)
        prom.gate.set()
    finally:
        reg.stop()


def test_a_hung_target_holds_at_most_its_share_of_refreshes():
    clock, prom = FakeClock(T0), GatedProm("http://hung:9090")
    prom.set_scalar(Q, 4.0)
    reg = registry(prom, clock, io_workers=8, per_target_refreshes=3)
    try:
        hung = [reg.workload("serving", f"hung-{i}", md("http://hung:9090"), wait=False) for i in range(20)]
        good = reg.workload("serving", "good", md("http://good:9090"))
        for _ in range(6):  # 30 s of ticks: the good one is refreshed every 5 s behind 20 hung ones
            clock.advance(5)
            reg.workload("serving", "good", md("http://good:9090"))
            reg.tick()
            wait_for(lambda: not good.refreshing)
            d = reg.decision(good)
            assert (d.planned, d.reason) == (4.0, Reason.MODE_REACTIVE)
        # per_target_refreshes = 3: three hung requests hold three of the 8 I/O threads; the 17 others wait their turn
        assert prom.inflight_hung == 3 and sum(w.refreshing for w in hung) == 3
        prom.release.set()
    finally:
        prom.release.set()
        reg.stop()


def test_the_refresh_interval_follows_keda_polls_or_refresh_interval():
    clock, prom = FakeClock(T0), FakePrometheus()
    reg = registry(prom, clock)
    try:
        wl = reg.workload("serving", "llm", md())
        assert refresh_interval(wl, reg.config) == 5.0  # nothing learned yet: the floor
        for _ in range(30):  # KEDA polls every 30 s
            clock.advance(30)
            reg.workload("serving", "llm", md())
        assert refresh_interval(wl, reg.config) == pytest.approx(30.0)
        wl2 = reg.workload("serving", "fixed", md(refreshInterval="12s"))
        assert refresh_interval(wl2, reg.config) == 12.0
    finally:
        reg.stop()


def test_a_forgotten_scaledobject_takes_its_state_files_caches_and_series(tmp_path):
    clock, prom = FakeClock(T0), FakePrometheus()
    prom.set_scalar(Q, 3.0)
    store = JsonStore(tmp_path)
    metrics = ScalerMetrics()
    reg = Registry(clock, CredentialStore(None), metrics, RegistryConfig(forget_seconds=900.0), stores=(store,),
                   client_factory=prom.factory())
    try:
        wl = reg.workload("serving", "llm", md(unknownKey="x"))
        reg.decision(wl)
        store.save(*wl.key, {"x": 1}, version=1, key="k")
        assert reg.specs.warned and len(reg.specs)  # the caches this test is about
        clock.advance(901)
        reg.tick()
        # forgotten, but its files stay until a sweep forget_seconds later (it may come back: issue 27)
        assert reg.workloads() == [] and len(list(tmp_path.glob("*.json"))) == 1
        clock.advance(899)
        reg.tick()
        assert len(list(tmp_path.glob("*.json"))) == 1
        clock.advance(1)
        reg.tick()
        assert list(tmp_path.glob("*.json")) == []
        assert not reg.specs.warned and not len(reg.specs) and reg.specs.bytes == 0
        assert metrics.registry.get_sample_value("forescale_observed_qps",
                                                 {"namespace": "serving", "scaledobject": "llm"}) is None
    finally:
        reg.stop()


def test_the_spec_cache_is_bounded_in_bytes():
    clock, prom = FakeClock(T0), FakePrometheus()
    reg = registry(prom, clock, max_spec_cache_bytes=100_000)
    try:
        for i in range(200):  # 200 distinct valid maps holding an ~8 KB query each: 1.6 MB of specs
            reg.spec_for("serving", f"big-{i}", md(query=f"{Q} + vector({i})" + " " * 8000))
        # one entry of i = 188: keys and values 34 (serverAddress) + 5 + 24 + 14 + 8000 (query) + 15 + 12 + 13 = 8117,
        # + namespace 7 + name 7 + 200 overhead = 8331 bytes; 100000 // 8331 = 12 entries fit
        assert reg.specs.bytes <= 100_000 and len(reg.specs) == 12  # the cache under test
        for i in range(200):  # invalid 1 MB values: the cached error holds a short message, not the value
            with pytest.raises(ScalerError) as err:
                reg.spec_for("serving", f"bad-{i}", md(qpsPerReplica="x" * (1 << 20)))
            assert "MAX_VALUE_BYTES" in str(err.value) and len(str(err.value)) < 400
        assert reg.specs.bytes <= 100_000
    finally:
        reg.stop()


def _fit_env(tmp_path, pool_factory):
    clock, metrics, prom = FakeClock(T0), ScalerMetrics(), FakePrometheus()
    prom.set_scalar(Q, 12.0)
    prom.set_range(Q, lambda t: np.full(t.shape, 40.0))
    fits = FitService(clock, metrics, io=InlineExecutor(), pool_factory=pool_factory)
    fits.start()
    h = Harness(clock, prom, {**md(), "mode": "forecastAndScale", "model": "naive", "history": "2h",
                              "minHistory": "1h", "refitInterval": "1h", "levelCorrection": "0"},
                metrics=metrics, forecasts=fits)
    return h, fits


def test_a_dead_fit_worker_is_replaced_and_the_fit_retried(tmp_path):
    ctx = multiprocessing.get_context("fork")
    h, fits = _fit_env(tmp_path, lambda: ProcessPoolExecutor(1, mp_context=ctx))
    try:
        pool = fits.worker.pool  # the pool whose worker this test kills
        pool.submit(int, 1).result()  # the worker exists
        for p in list(pool._processes.values()):  # noqa: SLF001
            os.kill(p.pid, signal.SIGKILL)  # as the OOM killer does
            p.join(5)
        wl = h.workload()
        h.reg.tick()  # the fit: BrokenProcessPool, pool replaced, retried once, fitted
        assert wl.forecast.unusable is None and wl.forecast.model == "naive"
        assert h.metrics.registry.get_sample_value("forescale_fit_worker_restarts_total") == 1
        assert h.metrics.registry.get_sample_value("forescale_fit_retries_total") == 1
    finally:
        h.close()


def test_failing_fits_are_the_workloads_own_and_short_history_is_waiting(tmp_path):
    """A model that always crashes: the trigger's reason is fallback_fit_failed and its failures are counted on its
    own series; a model that wants more history (InsufficientHistory from the worker) is waiting: reason
    fallback_insufficient_history, no failure counted, tried again on the next cutoff (issue 40, item 3: either used
    to turn the whole server NOT_SERVING; the service has no health of its own any more)."""
    from forecaster.base import InsufficientHistory

    class Pool:
        def __init__(self, exc):
            self.exc = exc

        def submit(self, fn, *a):
            raise self.exc

        def shutdown(self, **kw):
            pass

    h, fits = _fit_env(tmp_path, lambda: Pool(RuntimeError("model crashed")))
    try:
        wl = h.workload()
        h.reg.tick()
        assert wl.forecast.unusable is Reason.FIT_FAILED and h.reg.decision(wl).reason is Reason.FIT_FAILED
        assert h.sample("forescale_fit_failures_total") == 1
        assert not hasattr(fits, "healthy")
    finally:
        h.close()
    h, fits = _fit_env(tmp_path, lambda: Pool(InsufficientHistory("seasonal_naive: 2 days needed")))
    try:
        wl = h.workload()
        h.reg.tick()
        assert wl.forecast.unusable is Reason.INSUFFICIENT_HISTORY and "2 days needed" in wl.forecast.detail
        assert h.reg.decision(wl).reason is Reason.INSUFFICIENT_HISTORY
        assert h.sample("forescale_fit_failures_total") is None
        assert wl.forecast.fitted_at is not None  # tried again on the next cutoff, not after a failure's backoff
    finally:
        h.close()


def test_after_a_restart_overdue_refits_are_spread_over_a_refit_interval(tmp_path):
    store = JsonStore(tmp_path)

    def env(clock):
        metrics, prom = ScalerMetrics(), FakePrometheus()
        prom.set_scalar(Q, 12.0)
        prom.set_range(Q, lambda t: np.full(t.shape, 40.0))
        fits = FitService(clock, metrics, store=store, pool=InlineExecutor(), io=InlineExecutor())
        return Harness(clock, prom, {**md(), "mode": "forecastAndScale", "model": "naive", "history": "2h",
                                     "minHistory": "1h", "refitInterval": "1h", "levelCorrection": "0"},
                       metrics=metrics, forecasts=fits)

    first = env(FakeClock(T0))
    names = [f"so-{i}" for i in range(6)]
    for n in names:
        first.reg.workload("serving", n, first.metadata())
    first.reg.tick()
    first.close()
    assert len(list(tmp_path.glob("*.json"))) == 6
    clock = FakeClock(T0 + 3 * 3600)  # restarted 3 h later: every stored forecast is 2 refit intervals old
    h = env(clock)
    try:
        for n in names:
            h.reg.workload("serving", n, h.metadata())
        fitted_at = []
        for _ in range(60):  # one refit interval, a poll and a tick a minute
            for n in names:
                h.reg.workload("serving", n, h.metadata(), wait=False)
            h.reg.tick()
            fits = [c for c in h.prom.calls_of("range") if c[3] - c[2] > 3600]  # history, not re-prediction
            fitted_at += [clock() for _ in range(len(fits) - len(fitted_at))]
            clock.advance(60)
        # each refit came once, when its trigger's next cutoff came into force: its next boundary (the whole hour
        # plus its phase, whole minutes drawn from a digest of its key, which holds the metadata digest) plus the
        # 60 s settle -- 240, 1140, 1260, 1380, 1980 and 2520 s after the restart, not all six at the first tick
        restart = clock.t - 3600
        due = sorted(cutoff(restart, 3600.0, wl.key) + 3600 + SETTLE_SECONDS - restart for wl in h.reg.workloads())
        assert [t - restart for t in fitted_at] == due == [240, 1140, 1260, 1380, 1980, 2520], fitted_at
    finally:
        h.close()


def test_a_repeated_refresh_error_is_logged_once_a_minute_with_a_count(caplog):
    import logging

    from scaler.prom import PromError, PromErrorKind

    clock, prom = FakeClock(T0), FakePrometheus()
    prom.set_scalar(Q, PromError(PromErrorKind.UNREACHABLE, "Prometheus at http://prom.test:9090 is unreachable"))
    reg = registry(prom, clock)
    try:
        with caplog.at_level(logging.WARNING, logger="scaler.serve.registry"):
            wl = reg.workload("serving", "llm", md())
            for _ in range(24):  # 2 minutes of 5 s refreshes: 25 failures in all
                clock.advance(5)
                reg.workload("serving", "llm", md())
                reg.tick()
                wait_for(lambda: not wl.refreshing)
        lines = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
        # at 0 s, at 60 s (with the 11 held back between: 5..55 s) and at 120 s (11 more: 65..115 s)
        assert len(lines) == 3, lines
        assert "[11 more like this in the last 60s]" in lines[1] and "[11 more like this in the last 60s]" in lines[2]
    finally:
        reg.stop()


def test_a_cold_start_query_past_the_lead_cap_is_failed_precondition_until_the_metadata_changes():
    clock, prom = FakeClock(T0), FakePrometheus()
    prom.set_scalar(Q, 3.0)
    prom.set_scalar("tcold", 90_000.0)  # L = 90000 + 105 (default buffer parts) > MAX_LEAD_SECONDS = 86400
    reg = registry(prom, clock)
    try:
        wl = reg.workload("serving", "llm", md(coldStartQuery="tcold"))
        with pytest.raises(ScalerError) as err:
            reg.decision(wl)
        assert err.value.code == "FAILED_PRECONDITION" and "MAX_LEAD_SECONDS" in str(err.value)
        assert "90000s" in str(err.value) and "90105s" in str(err.value)
        wl = reg.workload("serving", "llm", md())  # coldStartQuery removed: coldStartSeconds stands
        assert reg.decision(wl).planned == 3.0
    finally:
        reg.stop()

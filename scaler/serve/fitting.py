"""Background forecast fits: off the RPC threads, in worker processes, persisted.

For each workload the service refits on clock-aligned cutoffs every
``refitInterval`` (``worker.cutoff``: the same in every replica; at once when
the spec's forecast inputs change, on the latest cutoff): a range query for
the ``history`` window that ends at the cutoff (I/O thread), then the model
fit and a curve for the next hours in a worker
process (``fitjob``; Prophet holds the GIL in its Python parts and runs Stan). The curve
and the fitted model's parameters (for warm-started refits) are kept in
memory and written to ``--state-dir`` (``forecastdoc``: the key and the document), so a
restarted scaler answers with a forecast at once.

RPCs never wait on any of this: they read ``Workload.forecast``, which only
the registry writes: every result goes to the registry's ``adopt`` callback,
which keeps it only if the spec's forecast inputs did not change meanwhile.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import multiprocessing
import os
import time
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Callable

import numpy as np

from forecaster.base import Forecast, InsufficientHistory

from ..policy import Reason
from ..prom import PromError, PromErrorKind
from ..spec import ScalerSpec
from .load import load_series
from .metrics import ScalerMetrics, drop_series
from .opsmetrics import ops_metrics
from .fitjob import FitJob, holiday_args, run_fit
from .gate import Gate
from .forecastdoc import STATE_VERSION, forecast_document, forecast_from_document, forecast_key_hash
from .state import JsonStore
from .worker import SETTLE_SECONDS, Worker, cutoff, phase, worker_init
from .workload import Adopt, ForecastState, Workload

log = logging.getLogger(__name__)

MIN_HORIZON_SECONDS = 6 * 3600.0
# Models whose forecast depends on the newest points: between refits they are re-predicted from now with the
# last RECENT_STEPS points (a short range query and numpy; no fit), every step.
REPREDICT_MODELS = frozenset({"naive", "linear_trend", "seasonal_naive", "auto"})
RECENT_STEPS = 30
# a failed fit is retried after RETRY_FIRST_SECONDS, doubling per failure in a row, at most RETRY_MAX_SECONDS
# (and never later than the refit interval)
RETRY_FIRST_SECONDS = 60.0
RETRY_MAX_SECONDS = 900.0
# A fit on a cutoff that is the first of its day (one in every round(ANCHOR_SECONDS / refitInterval) cutoffs,
# counted from the epoch) starts cold; the others warm-start from the previous fit. Two replicas that fitted the
# same cutoffs since the last such anchor hold identical curves (a warm start lands elsewhere on Prophet's flat
# optimum than a cold one: docs/performance.md).
ANCHOR_SECONDS = 86400.0
FIT_IO_THREADS = 8  # fits and re-predictions in flight (their range queries, then the wait for a worker process)
FIT_IO_PER_TARGET = 2  # ... of them per Prometheus host:port and per namespace


def anchored(at: float, interval: float, key: tuple) -> bool:
    """The fit on cutoff ``at`` of the workload ``key`` starts cold (see ``ANCHOR_SECONDS``); ``at`` off the
    cutoffs (a drift alarm's fit, at now) never does."""
    k = (at - phase(key, interval)) / interval
    return k == math.floor(k) and int(k) % max(1, round(ANCHOR_SECONDS / interval)) == 0


def retry_delay(failures: int, refit_interval: float) -> float:
    """Seconds before the next try after ``failures`` failed fits in a row: 60, 120, 240, ... capped at
    ``RETRY_MAX_SECONDS`` and at the refit interval."""
    return min(RETRY_FIRST_SECONDS * 2.0 ** min(failures - 1, 16), RETRY_MAX_SECONDS, refit_interval)


class FitService:
    """Implements ``workload.ForecastService``.

    ``store``: where forecasts survive a restart (None: memory only). ``pool``
    runs the fits (default: ``workers`` forkserver processes, made by
    ``start``); ``io`` runs the range queries and hands results over (default:
    a thread pool). Tests pass executors of their own.
    """

    def __init__(self, clock: Callable[[], float], metrics: ScalerMetrics, *, store: JsonStore | None = None,
                 workers: int = 1, pool: Executor | None = None, io: Executor | None = None,
                 pool_factory: Callable[[], Executor] | None = None):
        self.clock = clock
        self.metrics = metrics
        self.store = store
        self.workers = workers
        self.ops = ops_metrics(metrics)
        # the history queries' share (issue 40, item 4): a hung host:port or one namespace holds at most
        # FIT_IO_PER_TARGET of the FIT_IO_THREADS; the rest of its fits stay due, holding no thread
        self.gate = Gate(FIT_IO_PER_TARGET, FIT_IO_PER_TARGET)
        self.worker = Worker(io or ThreadPoolExecutor(max_workers=max(FIT_IO_THREADS, 2 * workers),
                                                      thread_name_prefix="fit-io"),
                             pool, pool_factory or self._new_pool, on_broken=self._broken)
        self._lock = self.worker.lock  # one lock for the skeleton's state and the service's own
        self._model_state: dict[tuple, dict] = {}  # warm-start parameters per workload key
        self._spread_until: dict[tuple, float] = {}  # a restored forecast's age-due refit waits until then
        self._urgent: set[tuple] = set()  # refit on the next tick, whatever the schedule (a drift alarm)

    def _new_pool(self) -> Executor:
        # forkserver: never fork the gRPC process itself (threads); workers import the models once
        ctx = multiprocessing.get_context("forkserver")
        return ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx, initializer=worker_init,
                                   initargs=(os.getpid(),))

    def _broken(self, replaced: bool) -> None:
        if replaced:
            self.ops.worker_restarts.inc()
            log.warning("a fit worker died; worker pool replaced")
        self.ops.fit_retries.inc()

    def start(self) -> None:
        self.worker.start()

    def stop(self) -> None:
        """Bounded: queued work is dropped and worker processes are killed, not awaited."""
        self.worker.stop()

    # -- ForecastService -------------------------------------------------------
    def fitting(self, wl: Workload) -> bool:
        return self.worker.busy(wl.key)

    def maybe_refit(self, wl: Workload, now: float, adopt: Adopt) -> None:
        key, spec, fs = wl.key, wl.spec, wl.forecast
        fkey = spec.forecast_key()

        at = cutoff(now, spec.refit_interval_seconds, key)  # the same in every replica (worker.cutoff)

        url, ns, entered = spec.prometheus.server_address, wl.namespace, []

        def choose(backing_off: bool):  # under the worker's lock
            urgent = key in self._urgent  # a drift alarm: on the newest data, whatever a failure's backoff
            work: Callable[..., None] | None = functools.partial(self._fit, at=now) if urgent else None
            if work is None and backing_off:
                return None
            if work is None and (fs.key != fkey or fs.fitted_at is None or (
                    fs.fitted_at < at and now >= self._spread_until.get(key, -math.inf))):
                work = functools.partial(self._fit, at=at)
            if work is None and (spec.model in REPREDICT_MODELS and fs.forecast is not None
                                 and key in self._model_state and now - (fs.predicted_at or 0.0) >= spec.step_seconds):
                work = self._repredict
            if work is None or not self.gate.enter(url, ns, now):  # its host:port or namespace at its share: due
                return None
            self._urgent.discard(key)
            entered.append(True)
            return functools.partial(self._gated, work, url, ns)
        if not self.worker.schedule(key, now, choose, wl, spec, now, adopt) and entered:
            self.gate.leave(url, ns)  # chosen but not submitted (stopping)

    def _gated(self, work, url: str, ns: str, *args) -> None:
        try:
            work(*args)
        finally:
            self.gate.leave(url, ns)

    def refit_now(self, wl: Workload) -> None:
        """A drift alarm: fit on the next tick (once), whatever the refit interval or a failure's backoff."""
        with self._lock:
            self._urgent.add(wl.key)

    def forget(self, wl: Workload) -> None:
        self.worker.forget(wl.key)
        with self._lock:
            self._urgent.discard(wl.key)
            self._model_state.pop(wl.key, None)
            self._spread_until.pop(wl.key, None)
        # its state file stays: the registry's sweep removes it once the trigger stayed away (it may come back)

    def restore(self, wl: Workload) -> ForecastState | None:
        """A stored forecast fitted for the same inputs (restart), for the registry to adopt."""
        if self.store is None:
            return None
        got = None
        # its own file, else one written before the metadata digest was part of the name (its key still checked)
        for where in (wl.key, (wl.namespace, wl.name, wl.spec.metric_name)):
            got = self.store.read(where, lambda doc: forecast_from_document(doc, wl.spec.forecast_key()),
                                  version=STATE_VERSION, key=forecast_key_hash(wl.spec))
            if got is not None:
                break
        if got is None:
            return None
        fs, model_state = got
        with self._lock:
            if model_state:
                self._model_state[wl.key] = model_state
            # after a restart every stored forecast may be due at once: an overdue one is refitted once its
            # trigger's next cutoff is in force (spread over one refit interval); the stored curve serves meanwhile
            interval = wl.spec.refit_interval_seconds
            self._spread_until[wl.key] = cutoff(self.clock(), interval, wl.key) + interval + SETTLE_SECONDS
        self._export(wl, fs)
        log.info("ScaledObject %s/%s: restored a %s forecast fitted at %.0f", wl.namespace, wl.name, fs.model,
                 fs.fitted_at)
        return fs

    # -- the work (I/O thread) -------------------------------------------------
    def _fit(self, wl: Workload, spec: ScalerSpec, now: float, adopt: Adopt, at: float) -> None:
        """A fit on the history up to ``at`` (a cutoff, or now for a drift alarm), its result handed to ``adopt``."""
        key, started, fkey = wl.key, time.perf_counter(), spec.forecast_key()
        model_state = None
        try:
            state, model_state, points = self._fit_once(wl, spec, now, at)
        except Exception as e:  # a fit must never take the service down
            log.warning("ScaledObject %s/%s: forecast fit failed: %s", wl.namespace, wl.name,
                        e if isinstance(e, (PromError, ValueError)) else f"{type(e).__name__}: {e}")
            if isinstance(e, PromError):  # the history query failed: a Prometheus error (its alert), not a failed fit
                self.metrics.prom_errors.labels(*wl.labels, "history_" + e.kind.value).inc()
            else:
                self.metrics.fit_failures.labels(*wl.labels).inc()
            self.worker.failed(key, now, lambda n: retry_delay(n, spec.refit_interval_seconds))
            old = wl.forecast
            if old.forecast is not None and old.key == fkey:
                # keep serving the previous curve while it covers the lead window (decide() checks)
                state = dataclasses.replace(old, unusable=None, detail=f"refit failed: {e}")
            else:  # fitted_at None: due again once the backoff has passed (not a whole refit interval)
                state = ForecastState(unusable=Reason.FIT_FAILED, detail=str(e), key=fkey, fitted_at=None)
        else:
            self.worker.succeeded(key)
        if adopt(wl, state, fkey) and model_state is not None:
            self._keep(wl, spec, state, model_state, points)
        self.metrics.fit_duration.observe(time.perf_counter() - started)

    def _keep(self, wl: Workload, spec: ScalerSpec, fs: ForecastState, model_state: dict, points: int) -> None:
        """An adopted fit: its parameters warm-start the next one, and it is stored and exported."""
        with self._lock:
            self._model_state[wl.key] = model_state
        if self.store is not None:
            try:
                self.store.save(*wl.key, forecast_document(fs, model_state),
                                version=STATE_VERSION, key=forecast_key_hash(spec))
            except (OSError, ValueError) as e:
                log.warning("cannot write forecast state for %s/%s: %s", wl.namespace, wl.name, e)
        self._export(wl, fs)
        log.info("ScaledObject %s/%s: fitted %s on %d points in %.2fs", wl.namespace, wl.name, fs.model,
                 points, fs.fit_seconds or 0.0)

    def _repredict(self, wl: Workload, spec: ScalerSpec, now: float, adopt: Adopt) -> None:
        """The last fit, forecast again from ``now`` with the newest points (naive, linear_trend, ...)."""
        from forecaster.models import from_state

        old = wl.forecast
        try:
            step = spec.step_seconds
            end = math.floor(now / step) * step
            fc_old = old.forecast
            if fc_old is None:  # (maybe_refit re-predicts only a curve)
                raise ValueError("no curve to re-predict")
            horizon = int(round((fc_old.t[-1] - end) / step))
            if horizon <= 0:
                raise ValueError("the curve no longer reaches past now")
            recent, _ = load_series(wl.client, spec, end - (RECENT_STEPS - 1) * step, end, step)
            with self._lock:
                model_state = self._model_state[wl.key]
            fitted = from_state(model_state)
            fc = fitted.predict(horizon, tuple(sorted(fc_old.quantiles)), origin=end, recent=recent)
            new = dataclasses.replace(old, forecast=Forecast(fc.t, fc.mean, dict(fc.quantiles), fc_old.model),
                                      predicted_at=now)
        except Exception as e:  # keep the current curve; the next step tries again
            log.debug("ScaledObject %s/%s: re-prediction skipped: %s", wl.namespace, wl.name, e)
            new = dataclasses.replace(old, predicted_at=now)
        adopt(wl, new, spec.forecast_key(), replaces=old)

    def _fit_once(self, wl: Workload, spec: ScalerSpec, now: float,
                  at: float) -> tuple[ForecastState, dict | None, int]:
        """The new state, the fitted model's parameters (None: nothing fitted) and the points it used: the
        ``history`` window up to ``at`` (``fitted_at``), a curve from there on past ``now`` + the horizon."""
        step, fkey = spec.step_seconds, spec.forecast_key()
        end = math.floor(at / step) * step
        self.ops.queries.labels("history").inc()
        try:
            series, report = load_series(wl.client, spec, end - spec.history_seconds + step, end, step)
        except PromError as e:
            if e.kind is not PromErrorKind.NO_DATA:
                raise
            return ForecastState(unusable=Reason.INSUFFICIENT_HISTORY, detail="no history returned", key=fkey,
                                 fitted_at=at), None, 0
        finite = np.isfinite(series.y)
        covered = float(series.t[finite][-1] - series.t[finite][0] + step) if finite.any() else 0.0
        if covered < spec.min_history_seconds:
            return ForecastState(unusable=Reason.INSUFFICIENT_HISTORY, key=fkey, fitted_at=at,
                                 detail=f"{covered / 3600:.1f} h of history, minHistory is "
                                        f"{spec.min_history_seconds / 3600:.1f} h"), None, 0
        lead = wl.horizon_lead().seconds
        # from the cutoff, not now (every replica asks for the same curve): past now + lead until the next
        # cutoff's fit, due a refit interval + SETTLE_SECONDS after ``at``, with a refit interval to spare
        horizon_s = max(MIN_HORIZON_SECONDS,
                        2 * spec.refit_interval_seconds + lead + SETTLE_SECONDS + (end - series.t[-1]))
        quantiles = tuple(sorted({0.1, 0.5, 0.9, round(spec.quantile, 6)}))
        with self._lock:  # cold on an anchor cutoff
            warm = None if anchored(at, spec.refit_interval_seconds, wl.key) else self._model_state.get(wl.key)
        job = FitJob(spec.model, series.t, series.y, step, int(math.ceil(horizon_s / step)), quantiles, warm,
                     spec.level_correction_seconds, spec.quantile, **holiday_args(spec, float(series.t[0]), end + horizon_s))
        try:
            out = self.worker.run(run_fit, job)
        except InsufficientHistory as e:  # the model wants more than there is yet: waiting, not a failure
            return ForecastState(unusable=Reason.INSUFFICIENT_HISTORY, key=fkey, fitted_at=at, detail=str(e)), None, 0
        fc = Forecast(out["t"], out["mean"], out["quantiles"], out["model"])
        fs = ForecastState(forecast=fc, fitted_at=at, completed_at=self.clock(), predicted_at=now, history_max=float(np.nanmax(series.y)),
                           model=out["model"], fit_seconds=out["seconds"], key=fkey, detail=report.message)
        return fs, out["state"], int(finite.sum())

    def _export(self, wl: Workload, fs: ForecastState) -> None:
        m = self.metrics
        done = fs.completed_at if fs.completed_at is not None else fs.fitted_at
        if done is not None:
            m.last_fit.labels(*wl.labels).set(done)
        drop_series(m.model_info, lambda k: k[:3] == wl.labels)
        m.model_info.labels(*wl.labels, fs.model or wl.spec.model).set(1)

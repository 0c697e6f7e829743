"""Background forecast fits: off the RPC threads, in worker processes, persisted.

For each workload the service refits on ``refitInterval`` (and at once when
the spec's forecast inputs change): a range query for the ``history`` window
(I/O thread), then the model fit and a curve for the next hours in a worker
process (Prophet holds the GIL in its Python parts and runs Stan). The curve
and the fitted model's parameters (for warm-started refits) are kept in
memory and written to ``--state-dir``, so a restarted scaler answers with a
forecast at once.

RPCs never wait on any of this: they read ``Workload.forecast``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import multiprocessing
import os
import re
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from forecaster.base import Forecast, Series

from .metrics import ScalerMetrics
from ..policy import Reason
from ..prom import PromError
from ..spec import ScalerSpec
from .workload import ForecastState, Workload

log = logging.getLogger(__name__)

MIN_HORIZON_SECONDS = 6 * 3600.0
# Models whose forecast depends on the newest points: between refits they are re-predicted from now with the
# last RECENT_STEPS points (a short range query and numpy; no fit), every step.
REPREDICT_MODELS = frozenset({"naive", "linear_trend", "seasonal_naive", "auto"})
RECENT_STEPS = 30
RETRY_AFTER_FAILURE_SECONDS = 300.0
STATE_VERSION = 1


@dataclass(frozen=True)
class FitJob:
    """Everything a worker process needs (plain data: it crosses a process boundary)."""

    model: str
    t: np.ndarray
    y: np.ndarray
    step: float
    horizon: int
    quantiles: tuple[float, ...]
    warm_state: dict | None
    level_half_life: float  # the policy's levelCorrection: the bands are measured for that correction
    seed: int = 0


def run_fit(job: FitJob) -> dict:
    """Fit and predict in a worker process. Returns plain data (forecast arrays, model state)."""
    from forecaster.models import from_state, make, to_state

    t0 = time.perf_counter()
    series = Series(job.t, job.y, job.step)
    warm = None
    if job.warm_state is not None:
        try:
            warm = from_state(job.warm_state)
        except ValueError:
            warm = None  # a state from another model or version: fit cold
    fitted = make(job.model, seed=job.seed, level_half_life=job.level_half_life).fit(series, warm_start=warm)
    fc = fitted.predict(job.horizon, job.quantiles)
    return {
        "t": fc.t, "mean": fc.mean, "quantiles": dict(fc.quantiles),
        "model": getattr(fitted, "chosen", job.model) or job.model,
        "state": to_state(fitted),
        "seconds": time.perf_counter() - t0,
    }


def forecast_key_hash(spec: ScalerSpec) -> str:
    """A one-way digest of what a forecast depends on (headers may hold secrets: never stored in clear)."""
    p = spec.prometheus
    material = repr((p.server_address, p.query_parameters, p.custom_headers, p.credentials, spec.query,
                     spec.model, spec.history_seconds, spec.step_seconds, spec.level_correction_seconds))
    return hashlib.sha256(material.encode()).hexdigest()[:32]


def _state_name(namespace: str, name: str, metric: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{namespace}__{name}__{metric}")
    return f"{safe}.json"


def _jsonable(a) -> list:
    return [None if not math.isfinite(float(x)) else float(x) for x in np.asarray(a, dtype=float)]


def _array(v) -> np.ndarray:
    return np.array([np.nan if x is None else x for x in v], dtype=float)


class StateStore:
    """Forecasts on disk, one JSON file per trigger, written atomically."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        probe = self.root / ".write-test"
        try:
            probe.write_text("ok")
            probe.unlink()
        except OSError as e:
            raise OSError(f"--state-dir {self.root} is not writable: {e.strerror}") from None

    def save(self, wl: Workload, fs: ForecastState, model_state: dict | None) -> None:
        fc = fs.forecast
        if fc is None:
            return
        doc = {
            "version": STATE_VERSION, "namespace": wl.namespace, "name": wl.name, "metric": wl.spec.metric_name,
            "key": forecast_key_hash(wl.spec), "fitted_at": fs.fitted_at, "model": fs.model,
            "history_max": fs.history_max, "fit_seconds": fs.fit_seconds,
            "forecast": {"t": _jsonable(fc.t), "mean": _jsonable(fc.mean),
                         "quantiles": {f"{q:g}": _jsonable(v) for q, v in fc.quantiles.items()}},
            "model_state": model_state,
        }
        path = self.root / _state_name(wl.namespace, wl.name, wl.spec.metric_name)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)

    def load(self, wl: Workload) -> tuple[ForecastState, dict | None] | None:
        path = self.root / _state_name(wl.namespace, wl.name, wl.spec.metric_name)
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            log.warning("ignoring unreadable state file %s: %s", path, e)
            return None
        if doc.get("version") != STATE_VERSION or doc.get("key") != forecast_key_hash(wl.spec):
            return None  # fitted for other inputs: refit
        try:
            f = doc["forecast"]
            fc = Forecast(_array(f["t"]), _array(f["mean"]),
                          {float(q): _array(v) for q, v in f["quantiles"].items()}, doc.get("model", ""))
            fs = ForecastState(forecast=fc, fitted_at=float(doc["fitted_at"]), history_max=doc.get("history_max"),
                               model=doc.get("model", ""), fit_seconds=doc.get("fit_seconds"),
                               key=wl.spec.forecast_key())
        except (KeyError, TypeError, ValueError) as e:
            log.warning("ignoring malformed state file %s: %s", path, e)
            return None
        return fs, doc.get("model_state")

    def forget(self, wl: Workload) -> None:
        try:
            (self.root / _state_name(wl.namespace, wl.name, wl.spec.metric_name)).unlink()
        except FileNotFoundError:
            pass


class FitService:
    """Implements ``workload.ForecastService``."""

    def __init__(self, clock: Callable[[], float], metrics: ScalerMetrics, *, state_dir: str | None = None,
                 workers: int = 1):
        self.clock = clock
        self.metrics = metrics
        self.store = StateStore(state_dir) if state_dir else None
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._io = ThreadPoolExecutor(max_workers=max(2, 2 * workers), thread_name_prefix="fit-io")
        self._model_state: dict[tuple, dict] = {}  # warm-start parameters per workload key
        self._retry_at: dict[tuple, float] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        # forkserver: never fork the gRPC process itself (threads); workers import the models once
        ctx = multiprocessing.get_context("forkserver")
        self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx)

    def stop(self) -> None:
        self._io.shutdown(wait=False, cancel_futures=True)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    # -- ForecastService -------------------------------------------------------
    def maybe_refit(self, wl: Workload, now: float) -> None:
        key = wl.key
        fs = wl.forecast
        if fs.fitting or self._pool is None:
            return
        spec = wl.spec
        due = (fs.key != spec.forecast_key() or fs.fitted_at is None
               or now - fs.fitted_at >= spec.refit_interval_seconds)
        if now < self._retry_at.get(key, -math.inf):
            return
        if not due:
            if (spec.model in REPREDICT_MODELS and fs.forecast is not None and fs.key == spec.forecast_key()
                    and key in self._model_state and now - (fs.predicted_at or 0.0) >= spec.step_seconds):
                fs.fitting = True
                try:
                    self._io.submit(self._repredict, wl, spec, now)
                except RuntimeError:
                    fs.fitting = False
            return
        fs.fitting = True
        try:
            self._io.submit(self._fit, wl, spec, now)
        except RuntimeError:
            fs.fitting = False

    def forget(self, wl: Workload) -> None:
        self._model_state.pop(wl.key, None)
        self._retry_at.pop(wl.key, None)

    def restore(self, wl: Workload) -> None:
        """Adopt a stored forecast fitted for the same inputs (restart)."""
        if self.store is None or wl.forecast.forecast is not None:
            return
        loaded = self.store.load(wl)
        if loaded is None:
            return
        fs, model_state = loaded
        wl.forecast = fs
        if model_state:
            self._model_state[wl.key] = model_state
        self._export(wl, fs)
        log.info("ScaledObject %s/%s: restored a %s forecast fitted at %.0f", wl.namespace, wl.name, fs.model,
                 fs.fitted_at)

    # -- the work (I/O thread) -------------------------------------------------
    def _fit(self, wl: Workload, spec: ScalerSpec, now: float) -> None:
        key, started = wl.key, time.perf_counter()
        try:
            state = self._fit_once(wl, spec, now)
        except Exception as e:  # a fit must never take the service down
            log.warning("ScaledObject %s/%s: forecast fit failed: %s", wl.namespace, wl.name,
                        e if isinstance(e, (PromError, ValueError)) else f"{type(e).__name__}: {e}")
            self.metrics.fit_failures.labels(wl.namespace, wl.name).inc()
            self._retry_at[key] = now + min(spec.refit_interval_seconds, RETRY_AFTER_FAILURE_SECONDS)
            old = wl.forecast
            if old.forecast is not None and old.key == spec.forecast_key():
                # keep serving the previous curve while it covers the lead window (decide() checks)
                state = dataclasses.replace(old, unusable=None, detail=f"refit failed: {e}")
            else:
                state = ForecastState(unusable=Reason.FIT_FAILED, detail=str(e), key=spec.forecast_key(),
                                      fitted_at=now)
        else:
            self._retry_at.pop(key, None)
        state.fitting = False
        if wl.spec.forecast_key() == spec.forecast_key():
            wl.forecast = state
        else:
            wl.forecast.fitting = False
        self.metrics.fit_duration.observe(time.perf_counter() - started)

    def _repredict(self, wl: Workload, spec: ScalerSpec, now: float) -> None:
        """The last fit, forecast again from ``now`` with the newest points (naive, linear_trend, ...)."""
        from forecaster.models import from_state
        from forecaster.series import from_prometheus_matrix

        old = wl.forecast
        try:
            step = spec.step_seconds
            end = math.floor(now / step) * step
            result = wl.client.range(spec.query, end - (RECENT_STEPS - 1) * step, end, step)
            fc_old = old.forecast
            horizon = int(round((fc_old.t[-1] - end) / step))
            if not result or horizon <= 0:
                raise ValueError("no recent points" if not result else "the curve no longer reaches past now")
            recent, _ = from_prometheus_matrix(result, step)
            fitted = from_state(self._model_state[wl.key])
            fc = fitted.predict(horizon, tuple(sorted(fc_old.quantiles)), origin=end, recent=recent)
            new = dataclasses.replace(old, forecast=Forecast(fc.t, fc.mean, dict(fc.quantiles), fc_old.model),
                                      predicted_at=now, fitting=False)
        except Exception as e:  # keep the current curve; the next tick tries again
            log.debug("ScaledObject %s/%s: re-prediction skipped: %s", wl.namespace, wl.name, e)
            new = dataclasses.replace(old, predicted_at=now, fitting=False)
        if wl.spec.forecast_key() == spec.forecast_key() and wl.forecast is old:
            wl.forecast = new
        else:
            wl.forecast.fitting = False

    def _fit_once(self, wl: Workload, spec: ScalerSpec, now: float) -> ForecastState:
        from forecaster.series import from_prometheus_matrix

        step = spec.step_seconds
        end = math.floor(now / step) * step
        result = wl.client.range(spec.query, end - spec.history_seconds + step, end, step)
        if not result:
            return ForecastState(unusable=Reason.INSUFFICIENT_HISTORY, detail="no history returned",
                                 key=spec.forecast_key(), fitted_at=now)
        series, report = from_prometheus_matrix(result, step)
        finite = np.isfinite(series.y)
        covered = float(series.t[finite][-1] - series.t[finite][0] + step) if finite.any() else 0.0
        if covered < spec.min_history_seconds:
            return ForecastState(unusable=Reason.INSUFFICIENT_HISTORY, key=spec.forecast_key(), fitted_at=now,
                                 detail=f"{covered / 3600:.1f} h of history, minHistory is {spec.min_history_seconds / 3600:.1f} h")
        lead = spec.lead.seconds if wl.cold_start is None else spec.lead.with_cold_start(wl.cold_start).seconds
        horizon_s = max(MIN_HORIZON_SECONDS, 2 * spec.refit_interval_seconds + lead + (now - series.t[-1]))
        quantiles = tuple(sorted({0.1, 0.5, 0.9, round(spec.quantile, 6)}))
        job = FitJob(spec.model, series.t, series.y, step, int(math.ceil(horizon_s / step)), quantiles,
                     self._model_state.get(wl.key), spec.level_correction_seconds)
        out = self._pool.submit(run_fit, job).result()
        fc = Forecast(out["t"], out["mean"], out["quantiles"], out["model"])
        fs = ForecastState(forecast=fc, fitted_at=now, predicted_at=now, history_max=float(np.nanmax(series.y)),
                           model=out["model"],
                           fit_seconds=out["seconds"], key=spec.forecast_key(),
                           detail=report.message if hasattr(report, "message") else "")
        self._model_state[wl.key] = out["state"]
        if self.store is not None:
            try:
                self.store.save(wl, fs, out["state"])
            except OSError as e:
                log.warning("cannot write forecast state for %s/%s: %s", wl.namespace, wl.name, e)
        self._export(wl, fs)
        log.info("ScaledObject %s/%s: fitted %s on %d points in %.2fs", wl.namespace, wl.name, fs.model,
                 int(finite.sum()), out["seconds"])
        return fs

    def _export(self, wl: Workload, fs: ForecastState) -> None:
        m = self.metrics
        if fs.fitted_at is not None:
            m.last_fit.labels(wl.namespace, wl.name).set(fs.fitted_at)
        for k in [k for k in list(m.model_info._metrics) if k[:2] == (wl.namespace, wl.name)]:
            m.model_info.remove(*k)
        m.model_info.labels(wl.namespace, wl.name, fs.model or wl.spec.model).set(1)

"""Historical forecasts over the simulated span: what the server would have had at each moment.

A model is refitted every ``refit`` seconds of simulated time on the
``history`` window before the cutoff and asked in between for a forecast from
each cutoff (``forecaster.evaluate.historical_forecasts``); every quantile any
policy variant needs comes from the same fit. The curves are scored at
horizon L the way the policy uses them (level-corrected at the cutoff), and
packed as arrays to cross a process boundary cheaply.
"""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Sequence

import numpy as np

from forecaster.base import FitFailed, Forecast, InsufficientHistory, Series
from forecaster.calendar import DEFAULT_HOLIDAY_AS_CODE, UTC

from ..policy import Reason
from .fitcache import FIT_FAILED, INSUFFICIENT, OK, FitCache, config_key, fit_key
from .scenario import DAY


@dataclass(frozen=True)
class Curve:
    """A forecast curve as the server would hold it: usable from ``since`` (the fit's cutoff)."""

    since: float
    forecast: Forecast | None
    history_max: float | None = None
    unusable: Reason | None = None  # why there is no usable forecast (passed to decide)



@dataclass
class ModelRun:
    """One model's forecasts over the simulated span and their scores."""

    model: str
    curves: list[Curve]
    target_t: np.ndarray  # the time each scored forecast point is for (horizon = L), for the report
    mean_at_l: np.ndarray
    lo_at_l: np.ndarray
    hi_at_l: np.ndarray
    scores: dict = field(default_factory=dict)
    fits: int = 0
    failures: dict = field(default_factory=dict)
    seconds: float = 0.0
    reused: int = 0  # fits (and failed fits) taken from a FitCache


def slice_series(series: Series, lo: float, hi: float) -> Series:
    """Points with ``lo <= t < hi`` (views, no copy)."""
    a = int(np.searchsorted(series.t, lo, side="left"))
    b = int(np.searchsorted(series.t, hi, side="left"))
    return Series(series.t[a:b], series.y[a:b], series.step)


class _Counted:
    """A Forecaster that counts its fits, ticks the progress bar and survives a failed refit.

    ``historical_forecasts`` skips a cutoff on InsufficientHistory; a FitFailed
    (the optimiser gave up) keeps the previous fit, as the server keeps its
    last good curve, or counts as too little history when there is none.

    ``chain_steps`` > 0: a fit whose cutoff is a multiple of that many steps (of the epoch) starts cold, without
    the previous fit (neither as Stan's init nor as the fallback), so that a warm-start chain does not depend on
    where a replay began (``Settings.aligned``). ``cache`` (``fitcache.FitCache``) with ``config`` (the model's
    configuration digest): fits are looked up by configuration, exact data window and warm-start chain, and
    stored; a hit replays the same outcome (fit, failure and counts) as the fit itself.
    """

    def __init__(self, inner, progress: Callable[[int], None] | None, *, chain_steps: int = 0,
                 cache: FitCache | None = None, config: bytes = b""):
        self.inner, self.name, self.progress = inner, inner.name, progress
        self.fits = 0
        self.reused = 0  # of ``fits`` and failures, how many came from the cache
        self.failures: dict[str, int] = {}
        self.chain_steps, self.cache, self.config = int(chain_steps), cache, config
        self._last: tuple[object, bytes] | None = None  # the last object returned and its key (the chain)

    def _fail(self, kind: str) -> None:
        self.failures[kind] = self.failures.get(kind, 0) + 1

    @property
    def prepare(self):
        """The model's ``prepare`` (its fit's work that needs no earlier fit, made ahead by
        ``historical_forecasts``), or None: the model has none, or fits come from the cache (a hit would waste it)."""
        return getattr(self.inner, "prepare", None) if self.cache is None else None

    def fit(self, series: Series, *, warm_start=None, prepared=None):
        if self.progress:
            self.progress(1)
        if warm_start is not None and self.chain_steps and len(series):
            if (clock_index(float(series.t[-1]), series.step) + 1) % self.chain_steps == 0:
                warm_start = None  # a chain starts here
        key = None
        cutoff = float(series.t[-1]) + series.step if len(series) else math.nan
        if self.cache is not None:
            if warm_start is None:
                key = fit_key(self.config, series.t, series.y, series.step, None)
            elif self._last is not None and warm_start is self._last[0]:
                key = fit_key(self.config, series.t, series.y, series.step, self._last[1])
            hit = self.cache.get(key) if key is not None else None
            if hit is not None:
                self.reused += 1
                return self._outcome(hit.outcome, hit.fitted, warm_start, key)
        try:
            more = {} if prepared is None else {"prepared": prepared}
            fitted = self.inner.fit(series, warm_start=warm_start, **more)
        except InsufficientHistory:
            return self._fresh(INSUFFICIENT, None, warm_start, key, cutoff)
        except FitFailed:
            return self._fresh(FIT_FAILED, None, warm_start, key, cutoff)
        return self._fresh(OK, fitted, warm_start, key, cutoff)

    def _fresh(self, outcome: str, fitted, warm_start, key: bytes | None, cutoff: float):
        """A fresh fit's outcome: kept in the cache (a key exists only with one), then returned as ``_outcome``."""
        if key is not None and self.cache is not None:
            self.cache.put(key, outcome, fitted, cutoff)
        return self._outcome(outcome, fitted, warm_start, key)

    def _outcome(self, outcome: str, fitted, warm_start, key: bytes | None):
        """What a fit with this outcome returns or raises (the same for a fresh fit and a cached one)."""
        if outcome == INSUFFICIENT:
            self._fail(INSUFFICIENT)
            raise InsufficientHistory("too little history for a fit")
        if outcome == FIT_FAILED:
            self._fail(FIT_FAILED)
            if warm_start is None:
                raise InsufficientHistory("fit failed with no earlier fit to fall back on")
            fitted = warm_start
        else:
            self.fits += 1
        self._last = (fitted, key) if key is not None else None
        return fitted


def padded(series: Series, extra: int) -> Series:
    """The series followed by ``extra`` NaN points: cutoffs may reach its end (NaN actuals are not scored)."""
    t = np.concatenate([series.t, series.t[-1] + series.step * np.arange(1, extra + 1)])
    return Series(t, np.concatenate([series.y, np.full(extra, np.nan)]), series.step)


def _window_max(series: Series, cutoffs: np.ndarray, seconds: float) -> np.ndarray:
    """max of the finite points in ``[c - seconds, c)`` for each cutoff (the absurdity check's history max)."""
    y = np.where(np.isfinite(series.y), series.y, -np.inf)
    lo = np.searchsorted(series.t, cutoffs - seconds, side="left")
    hi = np.searchsorted(series.t, cutoffs, side="left")
    out = np.full(len(cutoffs), np.nan)
    for j, (a, b) in enumerate(zip(lo, hi)):
        if b > a:
            out[j] = float(y[a:b].max())
    return np.where(np.isfinite(out), out, np.nan)


def band(q: float) -> tuple[float, ...]:
    """The quantiles of the band the report draws around the provisioned one: q(1-q) .. q (just 0.5 for 0.5)."""
    return (round(1 - q, 6), q) if q != 0.5 else (0.5,)


def run_model(series: Series, model: str, start: float, end: float, *, horizon: int, score_points: int,
              refit_every: int, history_seconds: float, quantiles: Sequence[float], q: float,
              level_seconds: float, seed: int = 0, progress: Callable[[int], None] | None = None,
              holiday_days: tuple[int, ...] = (), holiday_as: int = DEFAULT_HOLIDAY_AS_CODE,
              special_days: tuple[int, ...] = (), events: tuple = (), aligned: bool = False, fits: FitCache | None = None,
              timezone: str = UTC, accuracy: bool = True) -> ModelRun:
    """Historical forecasts from every cutoff in ``[start, end)`` (``forecaster.evaluate``), scored at horizon L.

    A cutoff c sees only points before c; the model is refitted every
    ``refit_every`` cutoffs on the ``history_seconds`` before it and forecasts
    from each cutoff in between. ``horizon`` points per forecast (enough for
    the policy's window from any poll until the next cutoff);
    ``score_points`` = L in steps, the horizon scored. ``quantiles`` must hold
    ``band(q)``: the scored band at L is that one, whatever else was asked for. ``holiday_days``/``holiday_as``/
    ``events``/``timezone``: the holiday mechanism (``forecaster.models.make_for_policy``; the days are that zone's).

    ``aligned``: refits at the multiples of ``refit_every`` steps of the epoch (the clock), not counted from
    ``start``; the curves at ``start`` come from the aligned fit before it, and warm-start chains restart cold
    at the multiples of ``chain_steps(refit_every, step)`` (a day or less), so the fit at a cutoff is the same
    whatever the replay's start (the fits of the chain before ``start`` are made, not forecast from). ``fits``:
    a ``fitcache.FitCache`` the fits are taken from and kept in (a hit is the same fit: see ``fitcache``).
    ``accuracy`` False: the curves alone (``scores`` holds the number of cutoffs, the band at L is empty).
    """
    from forecaster import evaluate

    quiet_prophet_import()
    from forecaster.models import make_for_policy

    t_start = time.perf_counter()
    step = series.step
    fseries = padded(series.until(end), horizon - 1)  # the last cutoff is end - step
    chain, fit_from = 0, None
    if aligned:
        chain = chain_steps(refit_every, step)
        first = clock_index(start, step) // refit_every * refit_every  # the aligned fit in force at start
        fit_from = first // chain * chain * step  # where its chain starts (cold); cutoffs() moves it onto the grid
    counted = _Counted(make_for_policy(model, seed=seed, level_half_life=level_seconds, quantile=q,
                                       holiday_days=holiday_days, holiday_as=holiday_as, events=events,
                                       timezone=timezone), progress,
                       chain_steps=chain, cache=fits,
                       config=config_key(model, seed, level_seconds, q, tuple(holiday_days), holiday_as, tuple(events),
                                         *((timezone,) if timezone != UTC else ())))
    fcs = evaluate.historical_forecasts(counted, fseries, start=start, horizon=horizon, stride=1,
                                        train_window=history_seconds, refit_every=refit_every,
                                        quantiles=tuple(quantiles), fit_from=fit_from, fit_ahead=True)
    fcs = [(c, f) for c, f in fcs if start - 1e-6 <= c < end]
    cut = np.array([c for c, _ in fcs], dtype=float)
    hmax = _window_max(series, cut, history_seconds) if len(cut) else np.array([])
    curves: list[Curve] = []
    known = set(np.round(cut, 3))
    for c in np.arange(start, end, step):  # cutoffs the model skipped: too little history
        if round(float(c), 3) not in known:
            curves.append(Curve(float(c), None, None, Reason.INSUFFICIENT_HISTORY))
    for (c, f), h in zip(fcs, hmax):
        curves.append(Curve(float(c), f, None if not np.isfinite(h) else float(h)))
    curves.sort(key=lambda cv: cv.since)
    if not accuracy:
        none = np.array([], dtype=float)
        return ModelRun(model, curves, none, none, none, none, {"cutoffs": len(fcs)}, counted.fits, counted.failures,
                        time.perf_counter() - t_start, counted.reused)
    # accuracy, as the policy uses the curve: level-corrected at the cutoff, scored L ahead
    lc = evaluate.level_corrected(fseries, fcs, level_seconds) if level_seconds > 0 else fcs
    season = max(1, int(round(DAY / step)))
    if len(series.until(start)) <= season:
        season = 1
    scores: dict[str, object] = dict(evaluate.score(fseries, lc, q=q, season=season, h=score_points))
    scores.update(cutoffs=len(fcs), horizon_steps=int(score_points), mase_season_steps=int(season))
    if special_days:
        scores["days"] = split_scores(fseries, lc, special_days, q=q, season=season, h=score_points, tz=timezone)
    lo_q, hi_q = min(band(q)), max(band(q))
    k = score_points - 1
    target = np.array([f.t[k] for _, f in lc], dtype=float)
    mean = np.array([f.mean[k] for _, f in lc], dtype=float)
    lo = np.array([f.at_quantile(lo_q)[k] for _, f in lc], dtype=float)
    hi = np.array([f.at_quantile(hi_q)[k] for _, f in lc], dtype=float)
    return ModelRun(model, curves, target, mean, lo, hi, scores, counted.fits, counted.failures,
                    time.perf_counter() - t_start, counted.reused)


def clock_index(t: float, step: float) -> int:
    """The step of the clock a time falls in (``floor(t / step)``): a grid with any phase maps one point a step."""
    return int(math.floor(t / step + 1e-6))


MAX_CHAIN_SECONDS = DAY  # an aligned warm-start chain is at most this long (unless one refit interval is longer)


def chain_steps(refit_every: int, step: float) -> int:
    """The length in steps of an aligned warm-start chain: the most whole refit intervals in a day (at least one)."""
    return refit_every * max(1, int(MAX_CHAIN_SECONDS // (refit_every * step)))


def split_scores(series: Series, forecasts: list, special_days: Sequence[int], *, q: float, season: int,
                 h: int, tz: str = UTC) -> dict[str, dict]:
    """``evaluate.score`` on the forecasts whose scored point (``h`` steps ahead) falls on an ordinary day and on
    one of ``special_days`` (day numbers local to ``tz``: holidays and events), separately. Each subset's MASE is scaled by the
    seasonal-naive error before its own first cutoff."""
    from forecaster import evaluate

    from forecaster.calendar import local_days

    days = np.asarray(special_days, dtype=np.int64)
    scored = local_days([c + (h - 1) * series.step for c, _ in forecasts], tz)
    on = [bool(x) for x in np.isin(scored, days)]
    out = {}
    for name, want in (("ordinary", False), ("holiday_or_event", True)):
        part = [f for f, o in zip(forecasts, on) if o == want]
        out[name] = dict(evaluate.score(series, part, q=q, season=season, h=h))
    return out


def quiet_prophet_import() -> None:
    """prophet logs 'Importing plotly failed' at import time: noise for a backtest that never uses plotly."""
    import logging

    lg = logging.getLogger("prophet.plot")
    lg.setLevel(logging.CRITICAL)
    if not any(isinstance(h, logging.NullHandler) for h in lg.handlers):
        lg.addHandler(logging.NullHandler())  # else, with propagate off, logging's last-resort handler prints it


# --------------------------------------------------------------------------- curves across processes


@dataclass
class Packed:
    """A model's curves as arrays (cheap to send to a worker; one quantile at a time rebuilt there)."""

    model: str
    since: np.ndarray  # (n,) epoch seconds each curve is valid from
    index: np.ndarray  # (n,) row in t/mean/quantiles, -1 = no forecast
    history_max: np.ndarray  # (n,), NaN = None
    unusable: list  # (n,) Reason value or None
    t: np.ndarray  # (m, h)
    mean: np.ndarray
    quantiles: dict[float, np.ndarray]

    @staticmethod
    def from_curves(model: str, curves: Sequence[Curve]) -> "Packed":
        fcs = [c.forecast for c in curves if c.forecast is not None]
        h = len(fcs[0]) if fcs else 0
        if any(len(f) != h for f in fcs):
            raise ValueError("forecasts of unequal length cannot be packed")
        qs = sorted(fcs[0].quantiles) if fcs else []
        index = np.full(len(curves), -1, dtype=np.int64)
        k = 0
        for i, c in enumerate(curves):
            if c.forecast is not None:
                index[i] = k
                k += 1

        def stack(get):
            return np.vstack([get(f) for f in fcs]) if fcs else np.zeros((0, h))

        return Packed(
            model=model,
            since=np.array([c.since for c in curves], dtype=np.float64),
            index=index,
            history_max=np.array([np.nan if c.history_max is None else c.history_max for c in curves], dtype=float),
            unusable=[None if c.unusable is None else c.unusable.value for c in curves],
            t=stack(lambda f: f.t), mean=stack(lambda f: f.mean),
            quantiles={q: stack(lambda f, q=q: f.quantiles[q]) for q in qs},
        )

    def only(self, qs: Iterable[float]) -> "Packed":
        """The same curves with just the quantiles ``qs`` (what one batch of variants needs)."""
        keep = {q: self.quantiles[q] for q in self.quantiles if any(abs(q - x) < 1e-9 for x in qs)}
        return replace(self, quantiles=keep)

    def curves(self, shift: float = 0.0) -> list[Curve]:
        out = []
        for i in range(len(self.since)):
            k = int(self.index[i])
            fc = None
            if k >= 0:
                fc = Forecast(self.t[k], self.mean[k] + shift, {q: v[k] + shift for q, v in self.quantiles.items()},
                              self.model)
            hm = float(self.history_max[i])
            out.append(Curve(float(self.since[i]), fc, None if not math.isfinite(hm) else hm + shift,
                             None if self.unusable[i] is None else Reason(self.unusable[i])))
        return out


def fit_task(series: Series, model: str, start: float, end: float, kw: dict) -> tuple[ModelRun, Packed]:
    """One model's historical forecasts (in a worker process), packed."""
    mr = run_model(series, model, start, end, **kw)
    packed = Packed.from_curves(model, mr.curves)
    mr.curves = []  # rebuilt from the packed arrays by the caller (smaller to send)
    return mr, packed


class _Stopped(Exception):
    """A model's fits abandoned because the replay stopped (an error elsewhere, an interrupt)."""


def fit_threaded(tasks: Sequence[tuple[Series, str, float, float, dict]],
                 meanwhile: Callable[[], None]) -> list[tuple[ModelRun, Packed]]:
    """``fit_task(*task)`` for each task, each in a thread of its own, while ``meanwhile()`` runs in this one.

    A fit's time is mostly CmdStan's process, outside the GIL, so the other models and the replay proceed
    meanwhile. The same calls as one after the other, so the same numbers. If ``meanwhile`` or a task fails (or
    an interrupt comes), the threads still running stop at their next fit instead of being waited for.
    """
    stop = threading.Event()

    def check(_: int) -> None:  # called before each fit
        if stop.is_set():
            raise _Stopped()

    pool = ThreadPoolExecutor(max_workers=max(1, len(tasks)), thread_name_prefix="fits")
    try:
        futures = [pool.submit(fit_task, *task[:4], dict(task[4], progress=check)) for task in tasks]
        meanwhile()
        return [f.result() for f in futures]
    finally:
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)


def restore(mr: ModelRun, packed: Packed) -> ModelRun:
    """The model run with its curves rebuilt from the packed arrays."""
    mr.curves = packed.curves()
    return mr


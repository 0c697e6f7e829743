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
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Sequence

import numpy as np

from forecaster.base import FitFailed, Forecast, InsufficientHistory, Series
from forecaster.calendar import DEFAULT_HOLIDAY_AS_CODE

from ..policy import Reason
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
    """

    def __init__(self, inner, progress: Callable[[int], None] | None):
        self.inner, self.name, self.progress = inner, inner.name, progress
        self.fits = 0
        self.failures: dict[str, int] = {}

    def fit(self, series: Series, *, warm_start=None):
        if self.progress:
            self.progress(1)
        try:
            fitted = self.inner.fit(series, warm_start=warm_start)
        except InsufficientHistory:
            self.failures["insufficient_history"] = self.failures.get("insufficient_history", 0) + 1
            raise
        except FitFailed:
            self.failures["fit_failed"] = self.failures.get("fit_failed", 0) + 1
            if warm_start is None:
                raise InsufficientHistory("fit failed with no earlier fit to fall back on") from None
            return warm_start
        self.fits += 1
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
              holiday_days: tuple[int, ...] = (), holiday_as: int = DEFAULT_HOLIDAY_AS_CODE, special_days: tuple[int, ...] = (),
              events: tuple = ()) -> ModelRun:
    """Historical forecasts from every cutoff in ``[start, end)`` (``forecaster.evaluate``), scored at horizon L.

    A cutoff c sees only points before c; the model is refitted every
    ``refit_every`` cutoffs on the ``history_seconds`` before it and forecasts
    from each cutoff in between. ``horizon`` points per forecast (enough for
    the policy's window from any poll until the next cutoff);
    ``score_points`` = L in steps, the horizon scored. ``quantiles`` must hold
    ``band(q)``: the scored band at L is that one, whatever else was asked for. ``holiday_days``/``holiday_as``/
    ``events``: the holiday mechanism (``forecaster.models.make_for_policy``).
    """
    from forecaster import evaluate

    quiet_prophet_import()
    from forecaster.models import make_for_policy

    t_start = time.perf_counter()
    step = series.step
    fseries = padded(series.until(end), horizon - 1)  # the last cutoff is end - step
    counted = _Counted(make_for_policy(model, seed=seed, level_half_life=level_seconds, quantile=q,
                                       holiday_days=holiday_days, holiday_as=holiday_as, events=events), progress)
    fcs = evaluate.historical_forecasts(counted, fseries, start=start, horizon=horizon, stride=1,
                                        train_window=history_seconds, refit_every=refit_every,
                                        quantiles=tuple(quantiles))
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
    # accuracy, as the policy uses the curve: level-corrected at the cutoff, scored L ahead
    lc = evaluate.level_corrected(fseries, fcs, level_seconds) if level_seconds > 0 else fcs
    season = max(1, int(round(DAY / step)))
    if len(series.until(start)) <= season:
        season = 1
    scores = dict(evaluate.score(fseries, lc, q=q, season=season, h=score_points))
    scores.update(cutoffs=len(fcs), horizon_steps=int(score_points), mase_season_steps=int(season))
    if special_days:
        scores["days"] = split_scores(fseries, lc, special_days, q=q, season=season, h=score_points)
    lo_q, hi_q = min(band(q)), max(band(q))
    k = score_points - 1
    target = np.array([f.t[k] for _, f in lc], dtype=float)
    mean = np.array([f.mean[k] for _, f in lc], dtype=float)
    lo = np.array([f.at_quantile(lo_q)[k] for _, f in lc], dtype=float)
    hi = np.array([f.at_quantile(hi_q)[k] for _, f in lc], dtype=float)
    return ModelRun(model, curves, target, mean, lo, hi, scores, counted.fits, counted.failures,
                    time.perf_counter() - t_start)


def split_scores(series: Series, forecasts: list, special_days: Sequence[int], *, q: float, season: int,
                 h: int) -> dict[str, dict]:
    """``evaluate.score`` on the forecasts whose scored point (``h`` steps ahead) falls on an ordinary day and on
    one of ``special_days`` (epoch days: holidays and events), separately. Each subset's MASE is scaled by the
    seasonal-naive error before its own first cutoff."""
    from forecaster import evaluate

    days = np.asarray(special_days, dtype=np.int64)
    on = [bool(np.isin(int((c + (h - 1) * series.step) // DAY), days)) for c, _ in forecasts]
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
        stack = (lambda get: np.vstack([get(f) for f in fcs]) if fcs else np.zeros((0, h)))
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


def restore(mr: ModelRun, packed: Packed) -> ModelRun:
    """The model run with its curves rebuilt from the packed arrays."""
    mr.curves = packed.curves()
    return mr


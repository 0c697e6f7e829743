"""Nixtla statsforecast models behind the forecaster contract: ``mstl`` and ``ets``.

* ``mstl``  MSTL (multiple seasonal-trend decomposition by Loess) with a daily and a weekly season (those the
            history covers at least twice), the trend by AutoETS without season.
* ``ets``   AutoETS with a daily additive season and no trend (the error type chosen by AICc): left free,
            AICc picks a linear trend on some series and extrapolates it for hours (a day-ahead forecast of
            a daily cycle went below zero); the level correction follows the level instead.

Fits stay fast at any trace resolution: the series is averaged onto a fixed
coarse grid first (``fit_step``: 15 min for mstl, so 96 and 672 points per
season; 1 h for ets, whose seasonal models take at most 24 points per
season), gaps interpolated linearly. At fit time the model forecasts a table
of ``TABLE_SECONDS`` ahead (mean and the quantiles ``QGRID`` from
statsforecast's prediction intervals: quantile q is the upper edge of the
(2q-1) interval, 1-q its lower edge); ``predict`` interpolates that table at
the requested timestamps and quantiles, so a restored state forecasts
exactly as the fitted model. Forecasting from a later origin evaluates the
table further on (as prophet does); the policy's level correction brings in
the current observation.
"""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..base import FitFailed, Forecast, InsufficientHistory, Series
from ..level import DEFAULT_HALF_LIFE_SECONDS
from ._common import (arr_from_json, arr_to_json, check_quantiles, finalize, grid, history_max, require,
                      require_model, resolve_origin)

DAY, WEEK = 86400.0, 604800.0
QGRID = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.975, 0.99, 0.995)
TABLE_SECONDS = 2 * DAY


def coarse(series: Series, fit_step: float) -> tuple[np.ndarray, np.ndarray, float]:
    """The series averaged onto a grid of ``fit_step`` (>= its own step), gaps interpolated: (t, y, step)."""
    fs = max(float(fit_step), float(series.step))
    k = max(1, int(round(fs / series.step)))
    fs = k * series.step
    n = len(series) // k
    y = series.y[len(series) - n * k:].reshape(n, k) if n else np.zeros((0, k))
    t = series.t[len(series) - n * k:][::k] if n else np.zeros(0)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(y)
        cnt = ok.sum(axis=1)
        m = np.where(cnt > 0, np.where(ok, y, 0.0).sum(axis=1) / np.maximum(cnt, 1), np.nan)
    good = np.isfinite(m)
    if good.sum() >= 2 and not good.all():
        m = np.interp(np.arange(n), np.flatnonzero(good), m[good])
    return t.astype(float), m, fs


def _within_bucket(series: Series, fs: float) -> np.ndarray:
    """Quantiles ``QGRID`` of the fine points' deviation from their coarse bucket's mean (0 at the median).

    The model sees bucket means, whose spread is smaller than the points'; adding these quantiles to its
    bands gives back the variation inside a bucket (an approximation of the sum of two errors that keeps
    the median where the model put it).
    """
    k = max(1, int(round(fs / series.step)))
    n = len(series) // k
    if k == 1 or n == 0:
        return np.zeros(len(QGRID))
    y = series.y[len(series) - n * k:].reshape(n, k)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN bucket: its points are NaN, dropped below
        d = (y - np.nanmean(y, axis=1, keepdims=True)).ravel()
    d = d[np.isfinite(d)]
    if d.size < 10:
        return np.zeros(len(QGRID))
    out = np.quantile(d, QGRID)
    return out - out[QGRID.index(0.5)]


def _levels() -> list[float]:
    return sorted({round(abs(2 * q - 1) * 100, 6) for q in QGRID if q != 0.5})



STATS_MODELS = ("mstl", "ets")


def statsforecast_available() -> bool:
    """Whether the optional statsforecast package (the ``forescale[models]`` extra) is installed."""
    return importlib.util.find_spec("statsforecast") is not None


def missing_models_message(name: str) -> str:
    return (f"model {name!r} needs the statsforecast package, which the base install leaves out: "
            "pip install 'forescale[models]' (or pick prophet, seasonal_naive, naive, linear_trend, envelope or auto)")


@dataclass(frozen=True)
class _Table:
    t: np.ndarray  # coarse timestamps (start of each coarse step) the table is for
    mean: np.ndarray
    q: np.ndarray  # (len(QGRID), len(t))


def _table(model, t_last: float, fs: float, flat: float | None) -> _Table:
    h = int(np.ceil(TABLE_SECONDS / fs))
    t = t_last + fs * np.arange(1, h + 1)
    if flat is not None:
        return _Table(t, np.full(h, flat), np.full((len(QGRID), h), flat))
    levels = _levels()
    out = model.predict(h=h, level=levels)
    mean = np.asarray(out["mean"], dtype=float)
    rows = []
    for q in QGRID:
        if q == 0.5:
            rows.append(mean)
            continue
        lv = next(x for x in levels if abs(x - abs(2 * q - 1) * 100) < 1e-6)
        key = f"{'hi' if q > 0.5 else 'lo'}-{lv}"  # statsforecast names the columns by the level as passed
        rows.append(np.asarray(out[key], dtype=float))
    qs = np.maximum.accumulate(np.vstack(rows), axis=0)  # non-crossing in q
    return _Table(t, mean, qs)


@dataclass(frozen=True)
class _StatsForecaster:
    seed: int = 0  # accepted for a uniform interface; the models are deterministic
    fit_step: float = 900.0
    level_half_life: float = DEFAULT_HALF_LIFE_SECONDS  # accepted so every model takes the same options; unused

    name = ""

    def seasons(self, span: float, fs: float) -> list[int]:  # pragma: no cover (overridden)
        raise NotImplementedError

    def build(self, seasons: list[int]):  # pragma: no cover (overridden)
        raise NotImplementedError

    def fit(self, series: Series, *, warm_start=None) -> "StatsFitted":
        require(series, 2, self.name)
        if series.span_seconds < 2 * DAY - 1e-6:
            raise InsufficientHistory(f"{self.name}: {series.span_seconds / 3600:.1f} h of history; at least 2 days "
                                      "needed (a daily season seen twice)")
        t, y, fs = coarse(series, self.fit_step)
        if np.isfinite(y).sum() < 2:
            raise InsufficientHistory(f"{self.name}: no finite points on the {fs:g} s fit grid")
        seasons = self.seasons(len(y) * fs, fs)
        flat = float(y[0]) if np.ptp(y) == 0 else None
        if not statsforecast_available():
            raise ValueError(missing_models_message(self.name))
        model = None
        if flat is None:
            try:
                model = self.build(seasons).fit(y)
            except Exception as e:  # the optimiser's failures come as assorted exceptions
                raise FitFailed(f"{self.name}: {type(e).__name__}: {e}") from None
        tab = _table(model, float(t[-1]), fs, flat)
        spread = _within_bucket(series, fs)
        qtable = np.maximum.accumulate(tab.q + spread[:, None], axis=0)
        return StatsFitted(model=self.name, step=series.step, last_t=float(series.t[-1]), fit_step=fs,
                           table_t=tab.t, mean=tab.mean, qtable=qtable, history_max=history_max(series),
                           seasons=tuple(seasons))


@dataclass(frozen=True)
class MstlForecaster(_StatsForecaster):
    """MSTL, daily + weekly seasons, AutoETS trend (statsforecast)."""

    fit_step: float = 900.0
    name = "mstl"

    def seasons(self, span: float, fs: float) -> list[int]:
        return [int(round(p / fs)) for p in (DAY, WEEK) if span >= 2 * p - 1e-6]

    def build(self, seasons: list[int]):
        from statsforecast.models import MSTL, AutoETS

        return MSTL(season_length=seasons, trend_forecaster=AutoETS(model="ZZN"))


@dataclass(frozen=True)
class EtsForecaster(_StatsForecaster):
    """AutoETS, daily additive season, no trend (statsforecast)."""

    fit_step: float = 3600.0
    name = "ets"

    def seasons(self, span: float, fs: float) -> list[int]:
        return [int(round(DAY / fs))]

    def build(self, seasons: list[int]):
        from statsforecast.models import AutoETS

        return AutoETS(season_length=seasons[0], model="ZNA")


@dataclass(frozen=True, eq=False)
class StatsFitted:
    model: str
    step: float
    last_t: float
    fit_step: float
    table_t: np.ndarray
    mean: np.ndarray
    qtable: np.ndarray
    history_max: float
    seasons: tuple[int, ...] = ()

    @property
    def chosen(self) -> str:
        return self.model

    def _at(self, t: np.ndarray, row: np.ndarray) -> np.ndarray:
        centre = self.table_t + 0.5 * self.fit_step  # a coarse value is the mean over its step
        return np.interp(t, centre, row)

    def predict(self, horizon: int, quantiles: Sequence[float] = (), *, origin: float | None = None,
                recent: Series | None = None) -> Forecast:
        qs = check_quantiles(quantiles)
        origin, _ = resolve_origin(self.last_t, self.step, origin, recent)
        t = grid(origin, self.step, horizon)
        mean = self._at(t, self.mean)
        rows = np.vstack([self._at(t, r) for r in self.qtable]) if len(t) else np.zeros((len(QGRID), 0))
        bands = {q: np.array([np.interp(q, QGRID, rows[:, i]) for i in range(len(t))]) for q in qs}
        return finalize(t, mean, bands, self.model)

    def to_state(self) -> dict:
        return {"model": self.model, "version": 1, "step": self.step, "last_t": self.last_t,
                "fit_step": self.fit_step, "table_t": arr_to_json(self.table_t), "mean": arr_to_json(self.mean),
                "qtable": [arr_to_json(r) for r in self.qtable], "qgrid": list(QGRID),
                "history_max": self.history_max, "seasons": list(self.seasons)}

    @staticmethod
    def restorer(name: str):
        def from_state(d: dict) -> "StatsFitted":
            require_model(d, name)
            if [float(x) for x in d["qgrid"]] != list(QGRID):
                raise ValueError(f"{name} state has another quantile grid")
            return StatsFitted(model=name, step=float(d["step"]), last_t=float(d["last_t"]),
                               fit_step=float(d["fit_step"]), table_t=arr_from_json(d["table_t"]),
                               mean=arr_from_json(d["mean"]), qtable=np.vstack([arr_from_json(r) for r in d["qtable"]]),
                               history_max=float(d["history_max"]), seasons=tuple(int(s) for s in d["seasons"]))
        return from_state


class MstlFitted:
    from_state = staticmethod(StatsFitted.restorer("mstl"))


class EtsFitted:
    from_state = staticmethod(StatsFitted.restorer("ets"))

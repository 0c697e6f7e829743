"""Seasonal naive: the value one season before the target.

The season is a week when the history spans at least two weeks, else a day
when it spans at least two days; shorter histories raise
``InsufficientHistory``. A target more than one season ahead reuses the last
observed season (lag k * season). A missing lagged value is replaced by the
last finite value before it.

Quantiles: the empirical distribution of the errors of the forecast as the
policy uses it, over the last ``window`` seconds: with ``r[i] = y[i] -
y[i - season]`` (the seasonal residual) and level correction of half-life
``level_half_life`` (``forecaster.level``), the error h steps ahead is
``r[i+h] - w_h * r[i]``, ``w_h = 0.5 ** (h * step / half_life)``;
``level_half_life=0`` gives the plain residual quantiles. Added to the
forecast, floored at 0.

Holidays (``holiday_days``: days local to ``holiday_tz``, ``forecaster.calendar``): a holiday is
not copied into the next season; an ordinary target whose source falls on a
holiday takes the last ordinary day of the same weekday (one more season
back), and a holiday target is forecast as the same time of day on the last
ordinary ``holiday_as`` weekday (default Sunday). The band residuals skip
holiday points the same way (they are substituted before differencing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..calendar import UTC, shift_off_holidays, substitute_holidays
from ..base import Forecast, InsufficientHistory, Series
from ..level import DEFAULT_HALF_LIFE_SECONDS
from ._common import (BandTable, arr_from_json, arr_to_json, bands_for, check_quantiles, finalize, finalize_rows, grid,
                      grid_rows, h_grid, history_max, merged_tail, require, require_model, resolve_origin)

NAME = "seasonal_naive"
DAY, WEEK = 86400.0, 604800.0


def season_for(span_seconds: float) -> float | None:
    """Weekly with >= 2 weeks of history, daily with >= 2 days, else None."""
    if span_seconds >= 2 * WEEK - 1e-6:
        return WEEK
    if span_seconds >= 2 * DAY - 1e-6:
        return DAY
    return None


@dataclass(frozen=True)
class SeasonalNaiveForecaster:
    """``season``: None = by history length (see module doc), or seconds. ``window``: seconds for the bands."""

    seed: int = 0
    season: float | None = None
    window: float = 7 * DAY
    level_half_life: float = DEFAULT_HALF_LIFE_SECONDS  # bands for the level-corrected forecast; 0 = plain
    holiday_days: tuple[int, ...] = ()  # day numbers (local to holiday_tz) that are holidays, past and future
    holiday_as: int = 6  # a holiday target is forecast as this weekday (Monday = 0, Sunday = 6)
    holiday_tz: str = UTC  # the time zone of the holiday days (``timezone``)

    name = NAME

    def fit(self, series: Series, *, warm_start=None) -> "SeasonalNaiveFitted":
        season = self.season if self.season is not None else season_for(series.span_seconds)
        if season is None:
            raise InsufficientHistory(f"{NAME}: {series.span_seconds / 3600:.1f} h of history; at least 2 days "
                                      "needed (daily season), 2 weeks for weekly")
        lag = int(round(season / series.step))
        if lag < 1 or len(series) < 2 * lag:
            raise InsufficientHistory(f"{NAME}: {len(series)} points, at least 2 seasons ({2 * lag}) needed")
        require(series, 2, NAME)
        days = np.asarray(self.holiday_days, dtype=np.int64)
        y = substitute_holidays(series.t, series.y, days, season, self.holiday_tz) if len(days) else series.y
        tail_n = min(len(y), lag + int(round(self.window / series.step)))
        yt = y[-tail_n:]
        res = yt[lag:] - yt[:-lag]
        hl = self.level_half_life
        if hl > 0:
            hs = h_grid(max(1, min(int(np.ceil(8 * hl / series.step)), len(res) // 2)), 20)

            def errors(h: int) -> np.ndarray:
                w = 0.5 ** (h * series.step / hl)
                return res[h:] - w * res[:-h] if h < len(res) else np.array([])
            table = BandTable.from_errors(hs, errors)
        else:
            table = BandTable.from_errors(np.array([1]), lambda h: res)
        # the last season is all that predict needs; with holidays, up to 3 seasons (and 15 days) so a
        # holiday can be skipped and a holiday target can find its ``holiday_as`` day
        n_keep = lag if not len(days) else min(len(y), max(3 * lag, int(round(15 * DAY / series.step))))
        keep = series.y[-n_keep:]
        return SeasonalNaiveFitted(step=series.step, last_t=float(series.t[-1]), lag=lag,
                                   t0=float(series.t[-n_keep]), values=keep.copy(), bands=table,
                                   history_max=history_max(series), holiday_days=tuple(int(d) for d in days),
                                   holiday_as=int(self.holiday_as), holiday_tz=self.holiday_tz)


@dataclass(frozen=True, eq=False)
class SeasonalNaiveFitted:
    step: float
    last_t: float
    lag: int  # steps in one season
    t0: float  # timestamp of values[0]
    values: np.ndarray  # the last season of training values
    bands: BandTable
    history_max: float
    holiday_days: tuple[int, ...] = ()
    holiday_as: int = 6
    holiday_tz: str = UTC
    model: str = NAME

    @property
    def chosen(self) -> str:
        return self.model

    def predict(self, horizon: int, quantiles: Sequence[float] = (), *, origin: float | None = None,
                recent: Series | None = None) -> Forecast:
        origin, _ = resolve_origin(self.last_t, self.step, origin, recent)
        return self.predict_origins(horizon, quantiles, [origin], recent)[0]

    def predict_origins(self, horizon: int, quantiles: Sequence[float], origins: Sequence[float],
                        recent: Series | None = None) -> list[Forecast]:
        """``predict(horizon, quantiles, origin=o, recent=recent)`` for each origin, bit for bit. Where the
        origins and ``recent`` lie on the stored grid, there are no holidays and the history up to the last origin
        has no gap, each forecast is that history at fixed offsets from its origin: every row in one indexing
        (a replay forecasts from every cutoff between two fits); otherwise one origin at a time (``_one``)."""
        qs = check_quantiles(quantiles)
        os_ = np.asarray(origins, dtype=float).reshape(-1)
        src = self._sources(horizon, os_, recent)
        if src is None:
            return [self._one(horizon, qs, float(o), recent) for o in os_]
        hist, idx = src
        mean = hist[idx]
        return finalize_rows(grid_rows(os_, self.step, horizon), mean, bands_for(self.bands, mean, qs), self.model)

    def _sources(self, horizon: int, os_: np.ndarray, recent: Series | None) -> tuple[np.ndarray, np.ndarray] | None:
        """The merged history up to the last origin and each row's indices into it, or None where a row could
        differ from ``_one`` (holidays, a gap to fill, an origin or a recent point off the grid)."""
        if self.holiday_days or horizon < 1 or not os_.size:
            return None
        last, rec = resolve_origin(self.last_t, self.step, float(os_.max()), recent)
        pos = (os_ - self.t0) / self.step
        n = np.rint(pos).astype(np.int64)  # each origin's index, as ``_one`` rounds it
        if n.min() < 0 or np.abs(pos - n).max() > 1e-6:
            return None
        if rec is not None:
            r = (rec.t - self.t0) / self.step
            if np.abs(r - np.rint(r)).max() > 1e-6:
                return None
        _, hist = merged_tail(self.t0, self.values, self.step, rec, last)
        if not np.isfinite(hist[:int(n.max()) + 1]).all():  # a gap: ``_one`` fills it from before each origin
            return None
        h = np.arange(1, horizon + 1)
        back = h - -(-h // self.lag) * self.lag  # k seasons back, so that the source is at or before the origin
        return hist, np.clip(n[:, None] + back[None, :], 0, n[:, None])

    def _one(self, horizon: int, qs: tuple[float, ...], origin: float, recent: Series | None) -> Forecast:
        origin, recent = resolve_origin(self.last_t, self.step, origin, recent)
        t = grid(origin, self.step, horizon)
        t0, hist = merged_tail(self.t0, self.values, self.step, recent, origin)
        hist = _ffill(hist)
        n_origin = int(round((origin - t0) / self.step))  # index of origin in hist
        h = np.arange(1, horizon + 1)
        k = -(-h // self.lag)  # seasons back, so that the source is at or before origin
        src = n_origin + h - k * self.lag
        if self.holiday_days:
            src_t = shift_off_holidays(t, t0 + src * self.step, origin, self.lag * self.step,
                                       np.asarray(self.holiday_days, dtype=np.int64), self.holiday_as,
                                       tz=self.holiday_tz)
            moved = np.rint((src_t - t0) / self.step).astype(np.int64)
            src = np.where(moved >= 0, moved, src)  # not enough stored history: the plain source
        src = np.clip(src, 0, len(hist) - 1) if len(hist) else src
        mean = hist[src] if len(hist) else np.full(horizon, np.nan)
        if np.isnan(mean).any():
            fallback = hist[np.isfinite(hist)][-1] if np.isfinite(hist).any() else 0.0
            mean = np.where(np.isnan(mean), fallback, mean)
        return finalize(t, mean, bands_for(self.bands, mean, qs), self.model)

    def to_state(self) -> dict:
        return {"model": NAME, "version": 1, "step": self.step, "last_t": self.last_t, "lag": self.lag,
                "t0": self.t0, "values": arr_to_json(self.values), "bands": self.bands.to_state(),
                "history_max": self.history_max, "holiday_days": list(self.holiday_days),
                "holiday_as": self.holiday_as, **({"holiday_tz": self.holiday_tz} if self.holiday_tz != UTC else {})}

    @staticmethod
    def from_state(d: dict) -> "SeasonalNaiveFitted":
        require_model(d, NAME)
        return SeasonalNaiveFitted(step=float(d["step"]), last_t=float(d["last_t"]), lag=int(d["lag"]),
                                   t0=float(d["t0"]), values=arr_from_json(d["values"]),
                                   bands=BandTable.from_state(d["bands"]), history_max=float(d["history_max"]),
                                   holiday_days=tuple(int(x) for x in d.get("holiday_days", ())),
                                   holiday_as=int(d.get("holiday_as", 6)), holiday_tz=str(d.get("holiday_tz", UTC)))


def _ffill(y: np.ndarray) -> np.ndarray:
    """Forward-fill NaN (a leading NaN run takes the first finite value)."""
    if not len(y):
        return y
    ok = np.isfinite(y)
    if ok.all() or not ok.any():
        return y
    idx = np.where(ok, np.arange(len(y)), -1)
    np.maximum.accumulate(idx, out=idx)
    first = np.flatnonzero(ok)[0]
    idx[idx < 0] = first
    return y[idx]

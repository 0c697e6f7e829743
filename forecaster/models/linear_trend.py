"""Linear trend, the classic seed predictor: the mean of the last 5 points plus
their least-squares trend, extrapolated.

The least-squares line through the last ``points`` finite observations (at
their real timestamps, so a gap does not bend the slope) is evaluated at each
future timestamp; with one finite point the line is flat.

Quantiles: the empirical distribution of the predictor's own h-step errors,
replayed over the last ``window`` seconds of history, added to the line and
floored at 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, cast

import numpy as np

from ..base import Forecast, Series
from ..level import DEFAULT_HALF_LIFE_SECONDS
from ._common import (BandTable, arr_from_json, arr_to_json, bands_for, check_quantiles, finalize, finalize_rows, grid,
                      grid_rows, h_grid, history_max, require, require_model, resolve_origin)

NAME = "linear_trend"


@dataclass(frozen=True)
class LinearTrendForecaster:
    seed: int = 0
    points: int = 5
    window: float = 86400.0
    max_band_horizon: int = 720
    level_half_life: float = DEFAULT_HALF_LIFE_SECONDS  # accepted so every model takes the same options; unused

    name = NAME

    def fit(self, series: Series, *, warm_start=None) -> "LinearTrendFitted":
        require(series, 1, NAME)
        tail = series.tail(self.window)
        y, p = tail.y, self.points
        hmax = min(self.max_band_horizon, max(1, (len(y) - p) // 2))
        table = BandTable.zero()
        if len(y) > p + 1:
            # the predictor at every origin i (using y[i-p+1..i]) on the grid, vectorised
            x = np.arange(p) - (p - 1) / 2.0
            mean = np.convolve(y, np.ones(p) / p, mode="valid")  # origin i = j + p - 1
            slope = np.convolve(y, x[::-1] / np.sum(x * x), mode="valid")
            centre_gap = (p - 1) / 2.0

            def errors(h: int) -> np.ndarray:
                if h >= len(mean):
                    return np.array([])
                pred = mean[:-h] + slope[:-h] * (centre_gap + h)
                return y[p - 1 + h:] - pred
            table = BandTable.from_errors(h_grid(hmax), errors)
        ft, fy = _last_finite_points(series.t, series.y, p)
        return LinearTrendFitted(step=series.step, last_t=float(series.t[-1]), pts_t=ft, pts_y=fy, points=p,
                                 bands=table, history_max=history_max(series))


@dataclass(frozen=True, eq=False)
class LinearTrendFitted:
    step: float
    last_t: float
    pts_t: np.ndarray  # the last finite training points
    pts_y: np.ndarray
    points: int
    bands: BandTable
    history_max: float
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
        """``predict(horizon, quantiles, origin=o, recent=recent)`` for each origin, bit for bit. An origin
        with ``points`` finite points of ``recent`` just before it draws its line through them: those rows at
        once (a replay forecasts from every cutoff between two fits); the others one at a time (``_one``)."""
        qs = check_quantiles(quantiles)
        os_ = np.asarray(origins, dtype=float).reshape(-1)
        out: list[Forecast | None] = [None] * os_.size
        p = self.points
        fast = np.zeros(os_.size, dtype=bool)
        if recent is not None and len(recent) >= p >= 2 and os_.size:
            end = np.searchsorted(recent.t, os_ + 0.5 * self.step, side="left")  # len(recent.until(o + step / 2))
            idx = np.maximum(end, p)[:, None] - p + np.arange(p)
            fast = (end >= p) & np.isfinite(recent.y[idx]).all(axis=1)
        if fast.any():
            assert recent is not None  # fast rows only come from ``recent``
            rows = np.flatnonzero(fast)
            t = grid_rows(os_[rows], self.step, horizon)
            mean = line_rows(recent.t[idx[rows]], recent.y[idx[rows]], t)
            for i, fc in zip(rows, finalize_rows(t, mean, bands_for(self.bands, mean, qs), self.model)):
                out[i] = fc
        for i in np.flatnonzero(~fast):
            out[i] = self._one(horizon, qs, float(os_[i]), recent)
        return cast("list[Forecast]", out)  # every row filled

    def _one(self, horizon: int, qs: tuple[float, ...], origin: float, recent: Series | None) -> Forecast:
        origin, recent = resolve_origin(self.last_t, self.step, origin, recent)
        pt, py = self.pts_t, self.pts_y
        if recent is not None:
            rt, ry = _last_finite_points(recent.t, recent.y, self.points)
            if rt.size:
                keep = pt < rt[0]  # training points older than recent fill up to ``points``
                pt = np.concatenate((pt[keep], rt))[-self.points:]
                py = np.concatenate((py[keep], ry))[-self.points:]
        t = grid(origin, self.step, horizon)
        mean = line(pt, py, t)
        return finalize(t, mean, bands_for(self.bands, mean, qs), self.model)

    def to_state(self) -> dict:
        return {"model": NAME, "version": 1, "step": self.step, "last_t": self.last_t, "points": self.points,
                "pts_t": arr_to_json(self.pts_t), "pts_y": arr_to_json(self.pts_y),
                "bands": self.bands.to_state(), "history_max": self.history_max}

    @staticmethod
    def from_state(d: dict) -> "LinearTrendFitted":
        require_model(d, NAME)
        return LinearTrendFitted(step=float(d["step"]), last_t=float(d["last_t"]), pts_t=arr_from_json(d["pts_t"]),
                                 pts_y=arr_from_json(d["pts_y"]), points=int(d["points"]),
                                 bands=BandTable.from_state(d["bands"]), history_max=float(d["history_max"]))


def line(pt: np.ndarray, py: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The least-squares line through (pt, py) evaluated at t (flat through one point)."""
    if pt.size == 0:
        return np.zeros_like(t)
    if pt.size == 1:
        return np.full_like(t, py[0])
    return line_rows(pt[None, :], py[None, :], np.asarray(t, dtype=float)[None, :])[0]


def line_rows(pt: np.ndarray, py: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``line`` for each row: ``pt``, ``py`` of shape (rows, k >= 2), ``t`` (rows, n). The sums run left to
    right over the columns, so a row's numbers do not depend on the rows beside it (``np.mean`` and ``np.dot``
    sum in an order that may change with the array's shape)."""
    k = pt.shape[1]
    tc = _row_sums(pt) / k
    dx = pt - tc[:, None]
    pm = _row_sums(py) / k
    slope = _row_sums(dx * (py - pm[:, None])) / _row_sums(dx * dx)
    return pm[:, None] + slope[:, None] * (t - tc[:, None])


def _row_sums(a: np.ndarray) -> np.ndarray:
    out = a[:, 0].copy()
    for j in range(1, a.shape[1]):
        out = out + a[:, j]
    return out


def _last_finite_points(t: np.ndarray, y: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray]:
    ok = np.flatnonzero(np.isfinite(y))[-p:]
    return t[ok].astype(float), y[ok].astype(float)

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
from typing import Sequence

import numpy as np

from ..base import Forecast, Series
from ..level import DEFAULT_HALF_LIFE_SECONDS
from ._common import (BandTable, arr_from_json, arr_to_json, bands_for, check_quantiles, finalize, grid, h_grid,
                      history_max, require, require_model, resolve_origin)

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
        qs = check_quantiles(quantiles)
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
    tc = pt.mean()
    dx = pt - tc
    slope = float(np.dot(dx, py - py.mean()) / np.dot(dx, dx))
    return py.mean() + slope * (t - tc)


def _last_finite_points(t: np.ndarray, y: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray]:
    ok = np.flatnonzero(np.isfinite(y))[-p:]
    return t[ok].astype(float), y[ok].astype(float)

"""An example forescale model plugin: an exponentially weighted mean with residual bands (``model: ewma``).

It imports only ``forecaster.base`` (the interface: ``Series``, ``Forecast``, ``InsufficientHistory``) from
forescale, which loads it through the entry point group ``forescale.models``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from forecaster.base import Forecast, InsufficientHistory, Series

GRID = np.linspace(0.01, 0.99, 99)  # the residual quantiles kept (a fit's whole state is a few hundred floats)


def _smooth(level: float | None, t: np.ndarray, y: np.ndarray, half_life: float, last_t: float) -> float | None:
    """The weighted mean carried over the finite points of (t, y) after ``last_t``: each point moves the level by
    1 - 0.5 ** (dt / half_life) of the way to it (dt: the time since the previous point)."""
    prev = last_t
    for ti, yi in zip(t.tolist(), y.tolist()):
        if not math.isfinite(yi):
            continue
        if level is None:
            level = yi
        else:
            a = 1.0 - 0.5 ** (max(ti - prev, 0.0) / half_life)
            level += a * (yi - level)
        prev = ti
    return level


@dataclass(frozen=True)
class EwmaFitted:
    model: str
    chosen: str
    step: float
    last_t: float
    history_max: float
    level: float
    half_life: float
    residuals: tuple[float, ...]  # the one-step errors' quantiles at GRID

    def predict(
        self,
        horizon: int,
        quantiles: Sequence[float] = (),
        *,
        origin: float | None = None,
        recent: Series | None = None,
    ) -> Forecast:
        for q in quantiles:
            if not 0 < q < 1:
                raise ValueError(f"quantile {q}: accepted is a number strictly between 0 and 1")
        level = self.level
        if recent is not None and len(recent):
            end = float(recent.t[-1]) if origin is None else float(origin)
            keep = (recent.t > self.last_t) & (recent.t <= end)
            moved = _smooth(level, recent.t[keep], recent.y[keep], self.half_life, self.last_t)
            level = level if moved is None else moved
            origin = end
        origin = self.last_t if origin is None else float(origin)
        k = np.arange(1, horizon + 1, dtype=np.float64)
        t = origin + self.step * k
        mean = np.full(horizon, max(level, 0.0))
        bands = {
            float(q): np.maximum(mean + float(np.interp(q, GRID, self.residuals)) * np.sqrt(k), 0.0) for q in quantiles
        }
        return Forecast(t, mean, bands, self.model)

    def to_state(self) -> dict:
        return {
            "model": self.model,
            "version": 1,
            "step": self.step,
            "last_t": self.last_t,
            "history_max": self.history_max,
            "level": self.level,
            "half_life": self.half_life,
            "residuals": list(self.residuals),
        }

    @staticmethod
    def from_state(d: dict) -> "EwmaFitted":
        if d.get("model") != EwmaForecaster.name:
            raise ValueError(f"state is for model {d.get('model')!r}, not {EwmaForecaster.name!r}")
        return EwmaFitted(
            d["model"],
            d["model"],
            float(d["step"]),
            float(d["last_t"]),
            float(d["history_max"]),
            float(d["level"]),
            float(d["half_life"]),
            tuple(float(x) for x in d["residuals"]),
        )


@dataclass(frozen=True)
class EwmaForecaster:
    """``fit(series) -> EwmaFitted``: the level at the series' end and the quantiles of its one-step errors."""

    name = "ewma"  # the entry point's name (a class attribute, not a field)
    fitted = EwmaFitted  # what fit returns; the registry restores fits through its from_state
    seed: int = 0  # every model takes a seed (this one is deterministic without it)
    level_half_life: float = 14400.0  # every model takes it; the policy's level correction, not used here
    half_life: float = 1800.0  # seconds: the weighted mean's half-life
    min_points: int = 10

    def fit(self, series: Series, *, warm_start=None) -> EwmaFitted:
        ok = np.isfinite(series.y)
        if int(ok.sum()) < self.min_points:
            raise InsufficientHistory(f"ewma needs {self.min_points} finite points, got {int(ok.sum())}")
        t, y = series.t[ok], series.y[ok]
        errors = np.empty(len(y) - 1)
        level = float(y[0])
        for i in range(1, len(y)):
            errors[i - 1] = y[i] - level
            level += (1.0 - 0.5 ** ((t[i] - t[i - 1]) / self.half_life)) * (y[i] - level)
        rq = tuple(float(v) for v in np.quantile(errors, GRID))
        return EwmaFitted(
            self.name,
            self.name,
            float(series.step),
            float(series.t[-1]),
            float(np.max(y)),
            level,
            float(self.half_life),
            rq,
        )

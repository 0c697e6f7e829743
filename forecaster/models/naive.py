"""Naive: tomorrow looks like now. The last finite value, held flat.

Quantiles: the empirical distribution of h-step changes ``y[i+h] - y[i]``
over the last ``window`` seconds of history (absolute requests/s), added to
the last value and floored at 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..base import Forecast, Series
from ..level import DEFAULT_HALF_LIFE_SECONDS
from ._common import (BandTable, bands_for, check_quantiles, finalize, grid, h_grid, history_max, last_finite, require,
                      require_model, resolve_origin)

NAME = "naive"


@dataclass(frozen=True)
class NaiveForecaster:
    """``window``: seconds of recent history the error bands are learnt from (default 1 day)."""

    seed: int = 0  # accepted for a uniform interface; the model is deterministic
    window: float = 86400.0
    max_band_horizon: int = 720  # steps; longer horizons reuse this one's band
    level_half_life: float = DEFAULT_HALF_LIFE_SECONDS  # accepted so every model takes the same options; unused

    name = NAME

    def fit(self, series: Series, *, warm_start=None) -> "NaiveFitted":
        require(series, 1, NAME)
        tail = series.tail(self.window)
        y = tail.y
        hmax = min(self.max_band_horizon, max(1, len(y) // 2))
        table = BandTable.from_errors(h_grid(hmax), lambda h: y[h:] - y[:-h] if h < len(y) else np.array([]))
        level = last_finite(series.y)
        assert level is not None  # require(): a finite point at least
        return NaiveFitted(step=series.step, last_t=float(series.t[-1]), level=float(level),
                           bands=table, history_max=history_max(series))


@dataclass(frozen=True)
class NaiveFitted:
    step: float
    last_t: float
    level: float
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
        level = self.level
        if recent is not None:
            v = last_finite(recent.y)
            if v is not None:
                level = v
        t = grid(origin, self.step, horizon)
        mean = np.full(t.size, level)
        return finalize(t, mean, bands_for(self.bands, mean, qs), self.model)

    def to_state(self) -> dict:
        return {"model": NAME, "version": 1, "step": self.step, "last_t": self.last_t, "level": self.level,
                "history_max": self.history_max, "bands": self.bands.to_state()}

    @staticmethod
    def from_state(d: dict) -> "NaiveFitted":
        require_model(d, NAME)
        return NaiveFitted(step=float(d["step"]), last_t=float(d["last_t"]), level=float(d["level"]),
                           bands=BandTable.from_state(d["bands"]), history_max=float(d["history_max"]))

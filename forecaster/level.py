"""Level correction: carry the forecast's current residual over the horizon.

A curve fitted an hour ago does not know that traffic right now runs 20 %
above it. The residual at ``now`` (observed minus the forecast mean there) is
added to every point of the curve, decaying with a half-life, and the result
is floored at 0. Pure array arithmetic, cheap enough to run on every decision.
"""

from __future__ import annotations

import numpy as np

from .base import Forecast


def residual_at(forecast: Forecast, now: float, observed: float) -> float:
    """observed - mean(now), the mean interpolated on the curve (0 if now is off the curve)."""
    if not len(forecast) or now < forecast.t[0] - _step(forecast) or now > forecast.t[-1]:
        return 0.0
    return float(observed - np.interp(now, forecast.t, forecast.mean))


def level_correct(forecast: Forecast, now: float, observed: float, half_life_seconds: float) -> Forecast:
    """The forecast with the residual at ``now`` carried forward, halving every ``half_life_seconds``."""
    if half_life_seconds <= 0 or not len(forecast):
        return forecast
    r = residual_at(forecast, now, observed)
    if r == 0.0:
        return forecast
    w = np.power(0.5, np.maximum(forecast.t - now, 0.0) / half_life_seconds)
    shift = r * w
    return Forecast(
        forecast.t,
        np.maximum(forecast.mean + shift, 0.0),
        {q: np.maximum(v + shift, 0.0) for q, v in forecast.quantiles.items()},
        forecast.model,
    )


def _step(forecast: Forecast) -> float:
    return float(forecast.t[1] - forecast.t[0]) if len(forecast) > 1 else 0.0

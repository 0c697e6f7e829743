"""Level correction: carry the forecast's current residual over the horizon.

A curve fitted an hour ago does not know that traffic right now runs 20 %
above it. The residual at ``now`` (observed minus the forecast mean there) is
added to every point of the curve, decaying with a half-life, and the result
is floored at 0. Pure array arithmetic, cheap enough to run on every decision.
"""

from __future__ import annotations

import numpy as np

from .base import Forecast

# The default half-life of the carried residual (seconds), measured with
# tests/bench/bench_forecast_accuracy.py (prophet, rolling origin): 4 h was within
# 2 % of the best half-life tried (10 min to 8 h) at 3 and 10 min ahead on
# worldcup98 (1 min) and at 30 min to 2 h on nab_nyc_taxi (30 min); 4 % behind
# 8 h at 30 min on worldcup98. 30 min was 9-58 % worse than plain naive on
# worldcup98 and 9-35 % worse than 4 h on nab_nyc_taxi.
# Pass the same half-life to the models (``level_half_life``) so that their
# quantile bands are calibrated for the corrected curve.
DEFAULT_HALF_LIFE_SECONDS = 14400.0


def residual_at(forecast: Forecast, now: float, observed: float) -> float:
    """observed - mean(now), the mean interpolated on the curve (0 if now is off the curve).

    Within the step before the curve's first point the first point stands in
    (``np.interp`` clamps). A curve precomputed at fit time covers ``now``;
    ``forecaster.evaluate.historical_forecasts(include_now=True)`` builds such
    curves for backtests.
    """
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

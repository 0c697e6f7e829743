"""Level correction: carry the forecast's current residual over the horizon.

A curve fitted an hour ago does not know that traffic right now runs 20 %
above it. The residual at ``now`` (observed minus the forecast mean there) is
added to every point of the curve, decaying with a half-life, and the result
is floored at 0. Pure array arithmetic, cheap enough to run on every decision.
"""

from __future__ import annotations

from typing import Callable

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
    curves for backtests. A view of ``residual_rows`` on one row.
    """
    if not len(forecast):
        return 0.0
    return float(residual_rows(forecast.t[None, :], forecast.mean[None, :], np.array([now], dtype=float),
                               np.array([observed], dtype=float))[0])


def level_correct(forecast: Forecast, now: float, observed: float, half_life_seconds: float) -> Forecast:
    """The forecast with the residual at ``now`` carried forward, halving every ``half_life_seconds``."""
    if half_life_seconds <= 0 or not len(forecast):
        return forecast
    t, mean = forecast.t[None, :], forecast.mean[None, :]
    r = residual_rows(t, mean, np.array([now], dtype=float), np.array([observed], dtype=float))
    if r[0] == 0.0:
        return forecast
    fix = corrector(t, r, np.array([now], dtype=float), half_life_seconds)
    return Forecast(forecast.t, fix(mean)[0], {q: fix(v[None, :])[0] for q, v in forecast.quantiles.items()},
                    forecast.model)


def residual_rows(t: np.ndarray, mean: np.ndarray, now: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """``residual_at`` for curves stacked as rows (n, h), one ``now`` and ``observed`` per row."""
    n, h = t.shape
    if h == 0:
        return np.zeros(n)
    step = t[:, 1] - t[:, 0] if h > 1 else np.zeros(n)
    on = ~((now < t[:, 0] - step) | (now > t[:, -1]))
    return np.where(on, observed - interp_rows(now, t, mean), 0.0)


def corrector(t: np.ndarray, residual: np.ndarray, now: np.ndarray,
              half_life_seconds: float) -> Callable[[np.ndarray], np.ndarray]:
    """The level correction of one band of rows: ``band + residual x 0.5^((t - now)+ / half-life)``, floored at 0.

    Rows whose residual is exactly 0 are left as they are (not floored),
    as ``level_correct`` leaves such a curve alone.
    """
    with np.errstate(invalid="ignore", over="ignore"):  # a subnormal half-life: (t - now) / it is Inf, its weight 0
        w = np.power(0.5, np.maximum(t - now[:, None], 0.0) / half_life_seconds)
        shift = residual[:, None] * w
    zero = (residual == 0.0)[:, None]

    def fix(band: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):  # Inf - Inf in a broken curve: NaN, judged absurd later
            return np.where(zero, band, np.maximum(band + shift, 0.0))

    return fix


def interp_rows(x: np.ndarray, xp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """``np.interp(x[i], xp[i], fp[i])`` for every row i, with numpy's arithmetic (bit for bit).

    Each row of ``xp`` increasing; below a row's first point its first value,
    above its last point its last value, on a point exactly that point's value,
    else ``slope * (x - xp[j]) + fp[j]`` (and numpy's fallbacks for a NaN).
    """
    n, h = xp.shape
    rows = np.arange(n)
    if h == 1:
        return fp[:, 0].copy()
    j = (xp <= x[:, None]).sum(axis=1) - 1  # searchsorted(row, x, "right") - 1
    jj = np.clip(j, 0, h - 2)
    x0, x1, y0, y1 = xp[rows, jj], xp[rows, jj + 1], fp[rows, jj], fp[rows, jj + 1]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        slope = (y1 - y0) / (x1 - x0)
        out = slope * (x - x0) + y0
        other = slope * (x - x1) + y1
    out = np.where(np.isnan(out), other, out)
    out = np.where(np.isnan(out) & (y0 == y1), y0, out)
    out = np.where(x0 == x, y0, out)
    out = np.where(j >= h - 1, fp[:, -1], out)
    out = np.where(j < 0, fp[:, 0], out)
    return np.where(np.isnan(x), x, out)

"""Forecast accuracy metrics: plain functions on arrays, NaN-safe.

A pair (actual, predicted) where either is NaN is skipped; a metric with
nothing left to score is NaN.
"""

from __future__ import annotations

import numpy as np


def _pair(a, b) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(a, dtype=float).ravel()
    b = np.asarray(b, dtype=float).ravel()
    if a.shape != b.shape:
        raise ValueError(f"arrays of different lengths: {a.size} and {b.size}")
    ok = np.isfinite(a) & np.isfinite(b)
    return a[ok], b[ok]


def seasonal_mae(insample, season: int = 1) -> float:
    """Mean absolute ``season``-step difference of ``insample`` (the in-sample seasonal-naive error)."""
    x = np.asarray(insample, dtype=float).ravel()
    if season < 1:
        raise ValueError(f"season must be >= 1 step, got {season}")
    if x.size <= season:
        return float("nan")
    d = np.abs(x[season:] - x[:-season])
    d = d[np.isfinite(d)]
    return float(d.mean()) if d.size else float("nan")


def mase(actual, predicted, insample, season: int = 1) -> float:
    """Mean absolute scaled error: MAE(actual, predicted) / the in-sample seasonal-naive MAE.

    ``season`` is a lag in steps (1 = naive scaling; 1440 = daily at 1 min).
    Below 1: better than seasonal naive was in sample. NaN when the scale is 0
    or undefined.
    """
    a, p = _pair(actual, predicted)
    scale = seasonal_mae(insample, season)
    if not a.size or not np.isfinite(scale) or scale <= 0:
        return float("nan")
    return float(np.mean(np.abs(a - p)) / scale)


def wape(actual, predicted) -> float:
    """Weighted absolute percentage error: sum|actual - predicted| / sum|actual| (a fraction, not %)."""
    a, p = _pair(actual, predicted)
    denom = np.sum(np.abs(a))
    if not a.size or denom <= 0:
        return float("nan")
    return float(np.sum(np.abs(a - p)) / denom)


def pinball(actual, predicted_q, q: float) -> float:
    """Mean pinball (quantile) loss of the ``q`` quantile forecast, in the data's units.

    ``q * (a - p)`` when the actual is above the forecast, ``(1 - q) * (p - a)`` below.
    """
    if not 0.0 < q < 1.0:
        raise ValueError(f"q must lie strictly between 0 and 1, got {q}")
    a, p = _pair(actual, predicted_q)
    if not a.size:
        return float("nan")
    d = a - p
    return float(np.mean(np.maximum(q * d, (q - 1.0) * d)))


def coverage(actual, upper, *, lower=None) -> float:
    """Fraction of actuals covered.

    One-sided (the default, what provisioning for a quantile needs):
    ``coverage(actual, predicted_q)`` = fraction of actual <= predicted_q,
    which should be about ``q``. Two-sided: ``coverage(actual, upper, lower=lower)``
    = fraction of lower <= actual <= upper.
    """
    a, u = _pair(actual, upper)
    if lower is None:
        return float(np.mean(a <= u)) if a.size else float("nan")
    a = np.asarray(actual, dtype=float).ravel()
    u = np.asarray(upper, dtype=float).ravel()
    lo = np.asarray(lower, dtype=float).ravel()
    if not (a.shape == u.shape == lo.shape):
        raise ValueError("actual, upper and lower must have one length")
    ok = np.isfinite(a) & np.isfinite(u) & np.isfinite(lo)
    if not ok.any():
        return float("nan")
    return float(np.mean((lo[ok] <= a[ok]) & (a[ok] <= u[ok])))

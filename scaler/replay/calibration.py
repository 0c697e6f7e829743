"""Window-max calibration: a band for what the policy provisions, the capacity over [t, t+L].

Pointwise quantiles say how far the rate may be above the forecast at each
moment; the policy needs the max over the whole window ``[t, t + L]``. So,
from the rolling-origin forecasts the replay already has (one per cutoff),
each cutoff ``c`` whose window has passed gives a residual

    r_c = max demand over [c, c + L]  -  max over [c, c + L] of the forecast mean
                                          (level-corrected at c, as ``decide`` uses it)

and a curve made at ``c`` provisions its mean's window max plus the
conformal ``q`` quantile of the residuals realised before ``c`` within the
last ``WINDOW_SECONDS`` (split conformal: the ``ceil((n + 1) q)``-th smallest
of n). ``decide`` then runs unchanged on a curve whose quantile ``q`` is
``mean + Q_q(c)``. With fewer than ``MIN_RESIDUALS`` realised residuals (the
start of the simulated span) the model's pointwise quantile stands in.

Replay only: the server does not compute these residuals (yet), so the
``window`` band is measured against the pointwise one but not offered as
trigger metadata.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np

from ..policy import Curves, PolicyParams, decide_array
from .forecasts import Curve, Packed
from .scenario import Scenario

WINDOW_SECONDS = 7 * 86400.0
MIN_RESIDUALS = 30


def residuals(sc: Scenario, curves: Sequence[Curve] | Packed, params: PolicyParams) -> tuple[np.ndarray, np.ndarray]:
    """``(c, r_c)`` for every curve whose window ``[c, c + L]`` lies inside the scenario (time order)."""
    pk = curves if isinstance(curves, Packed) else Packed.from_curves("", curves)
    lead = params.lead_seconds
    mean_only = PolicyParams(mode="forecastAndScale", lead_seconds=lead, quantile=0.5,
                             qps_per_replica=params.qps_per_replica, level_correction_seconds=params.level_correction_seconds)
    end = sc.t0 + sc.n * sc.tick
    keep = (pk.index >= 0) & (sc.t0 <= pk.since) & (pk.since + lead < end)
    if not keep.any():
        return np.zeros(0), np.zeros(0)
    cs = pk.since[keep]
    rows = pk.index[keep]
    i = np.floor((cs - sc.t0) / sc.tick + 1e-9).astype(np.int64)
    j = np.floor((cs + lead - sc.t0) / sc.tick + 1e-9).astype(np.int64)
    stack = Curves(pk.t[rows], pk.mean[rows], {})
    d = decide_array(sc.observed[i], cs, mean_only, stack, np.arange(len(cs)))
    ok = ~np.isnan(d.forecast_peak)
    realised = np.array([float(sc.demand[a:b + 1].max()) for a, b in zip(i[ok], j[ok])], dtype=float)
    return cs[ok], realised - d.forecast_peak[ok]


def rank(n: int, q: float) -> int:
    """Split conformal's rank among n residuals: ``ceil((n + 1) q)``, at most n (the max), at least 1."""
    return min(n, max(1, int(math.ceil((n + 1) * q - 1e-9))))


def conformal(r: np.ndarray, q: float) -> float:
    """The ``ceil((n + 1) q)``-th smallest of ``r`` (its max when that rank exceeds n)."""
    k = rank(len(r), q)
    return float(np.partition(r, k - 1)[k - 1])


def rolling_conformal(r: np.ndarray, lo: np.ndarray, hi: np.ndarray, q: float) -> np.ndarray:
    """``conformal(r[a:b], q)`` for each window ``(a, b)`` of ``zip(lo, hi)``: the same values.

    A replay's windows only move forward (``lo`` and ``hi`` non-decreasing): they are kept sorted as they
    slide (a residual in, one out, each found by bisection) instead of partitioned anew at every cutoff, which
    cost O(window) each: a week of 1-minute cutoffs is 10,080 windows of up to 10,080 residuals. Other
    windows, or residuals with a NaN, take ``conformal`` one window at a time.
    """
    from bisect import bisect_left, insort

    lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    if not len(lo):
        return np.zeros(0)
    r = np.asarray(r, dtype=float)
    if np.isnan(r).any() or (np.diff(lo) < 0).any() or (np.diff(hi) < 0).any() or (hi - lo < 1).any():
        return np.array([conformal(r[a:b], q) for a, b in zip(lo, hi)], dtype=float)
    vals = r.tolist()
    window: list[float] = []  # vals[a0:b0], sorted
    a0 = b0 = int(lo[0])
    out = np.empty(len(lo))
    for i, (a, b) in enumerate(zip(lo.tolist(), hi.tolist())):
        if a >= b0:  # nothing in common with the window before
            window, a0, b0 = [], a, a
        while b0 < b:
            insort(window, vals[b0])
            b0 += 1
        while a0 < a:
            del window[bisect_left(window, vals[a0])]
            a0 += 1
        out[i] = window[rank(b - a, q) - 1]
    return out


def calibrated(sc: Scenario, curves: Sequence[Curve] | Packed, params: PolicyParams) -> tuple[list[Curve] | Packed, int]:
    """The curves with quantile ``params.quantile`` replaced by mean + the window-max residual's quantile.

    Returns the curves (packed when given packed: the replay's form, no object per cutoff) and how many of
    them fell back to the pointwise quantile (too few residuals yet).
    """
    pk = curves if isinstance(curves, Packed) else Packed.from_curves("", curves)
    if not (pk.index >= 0).any():  # no forecast at all (too little history throughout): nothing to calibrate
        return (pk if isinstance(curves, Packed) else list(curves)), 0
    q, lead = params.quantile, params.lead_seconds
    cs, rs = residuals(sc, pk, params)
    hi = np.searchsorted(cs, pk.since - lead, side="right")  # realised: c_j + L <= c
    lo = np.searchsorted(cs, pk.since - WINDOW_SECONDS, side="left")
    has = pk.index >= 0
    use = has & (hi - lo >= MIN_RESIDUALS)
    key = next((k for k in pk.quantiles if abs(k - q) < 1e-9), None)
    if key is None:
        raise ValueError(f"the curves have no quantile {q:g} band to calibrate")
    band = pk.quantiles[key].copy()  # the curves that fall back keep their pointwise band
    rows = pk.index[use]
    if rows.size:
        shift = rolling_conformal(rs, lo[use], hi[use], q)
        band[rows] = np.maximum(pk.mean[rows] + shift[:, None], 0.0)
    quantiles = {k: v for k, v in pk.quantiles.items() if k != key}
    quantiles[q] = band
    out = replace(pk, quantiles=quantiles)
    fallback = int((has & ~use).sum())
    return (out if isinstance(curves, Packed) else out.curves()), fallback

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
from typing import Sequence

import numpy as np

from forecaster.base import Forecast

from ..policy import Curves, PolicyParams, decide_array
from .forecasts import Curve
from .scenario import Scenario

WINDOW_SECONDS = 7 * 86400.0
MIN_RESIDUALS = 30


def residuals(sc: Scenario, curves: Sequence[Curve], params: PolicyParams) -> tuple[np.ndarray, np.ndarray]:
    """``(c, r_c)`` for every curve whose window ``[c, c + L]`` lies inside the scenario (time order)."""
    lead = params.lead_seconds
    mean_only = PolicyParams(mode="forecastAndScale", lead_seconds=lead, quantile=0.5,
                             qps_per_replica=params.qps_per_replica, level_correction_seconds=params.level_correction_seconds)
    end = sc.t0 + sc.n * sc.tick
    keep = [cv for cv in curves if cv.forecast is not None and sc.t0 <= cv.since and cv.since + lead < end]
    if not keep:
        return np.zeros(0), np.zeros(0)
    cs = np.array([cv.since for cv in keep], dtype=float)
    i = np.floor((cs - sc.t0) / sc.tick + 1e-9).astype(np.int64)
    j = np.floor((cs + lead - sc.t0) / sc.tick + 1e-9).astype(np.int64)
    fcs = [cv.forecast for cv in keep]
    stack = Curves(np.vstack([f.t for f in fcs]), np.vstack([f.mean for f in fcs]), {})  # type: ignore[union-attr]
    d = decide_array(sc.observed[i], cs, mean_only, stack, np.arange(len(keep)))
    ok = ~np.isnan(d.forecast_peak)
    realised = np.array([float(sc.demand[a:b + 1].max()) for a, b in zip(i[ok], j[ok])], dtype=float)
    return cs[ok], realised - d.forecast_peak[ok]


def conformal(r: np.ndarray, q: float) -> float:
    """The ``ceil((n + 1) q)``-th smallest of ``r`` (its max when that rank exceeds n)."""
    n = len(r)
    k = min(n, max(1, int(math.ceil((n + 1) * q - 1e-9))))
    return float(np.partition(r, k - 1)[k - 1])


def calibrated(sc: Scenario, curves: Sequence[Curve], params: PolicyParams) -> tuple[list[Curve], int]:
    """The curves with quantile ``params.quantile`` replaced by mean + the window-max residual's quantile.

    Returns the curves and how many of them fell back to the pointwise quantile (too few residuals yet).
    """
    q, lead = params.quantile, params.lead_seconds
    cs, rs = residuals(sc, curves, params)
    out: list[Curve] = []
    fallback = 0
    for cv in curves:
        if cv.forecast is None:
            out.append(cv)
            continue
        c = cv.since
        hi = int(np.searchsorted(cs, c - lead, side="right"))  # realised: c_j + L <= c
        lo = int(np.searchsorted(cs, c - WINDOW_SECONDS, side="left"))
        if hi - lo < MIN_RESIDUALS:
            fallback += 1
            out.append(cv)
            continue
        shift = conformal(rs[lo:hi], q)
        f = cv.forecast
        out.append(Curve(c, Forecast(f.t, f.mean, {q: np.maximum(f.mean + shift, 0.0)}, f.model), cv.history_max,
                         cv.unusable))
    return out, fallback

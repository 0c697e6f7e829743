"""Envelope: the largest value seen around the same moment of the previous periods (Crane EHPA's DSP idea).

For a target time tau the forecast is

    envelope(tau) = max over j = 1..k of  max y[tau - j P - w, tau - j P + w]

with ``P`` the detected period (a day or a week: the candidate the history
covers at least twice with the higher autocorrelation), ``w`` the window
half-width (``window`` seconds) and ``k`` the periods in one week (7 for a
daily period, 1 for a weekly one). Crane's EHPA provisions a margin times such
a periodic envelope; here the margin is the policy's ``headroom``. Every
quantile equals the envelope: it is already an upper bound, not a
distribution. Points the history does not hold are left out of the max; a
target with none falls back to the last finite value.

Fitting keeps only the last ``k P + w`` of the history; ``predict`` from a
later origin fills what came after training from ``recent``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..base import Forecast, InsufficientHistory, Series
from ..level import DEFAULT_HALF_LIFE_SECONDS
from ._common import (arr_from_json, arr_to_json, check_quantiles, finalize, grid, history_max, last_finite,
                      merged_tail, require, require_model, resolve_origin)

NAME = "envelope"
DAY, WEEK = 86400.0, 604800.0
DEFAULT_WINDOW = 3600.0  # seconds each side of the same moment of a past period



def running_max(y: np.ndarray, half: int) -> np.ndarray:
    """``out[i] = max(y[i - half : i + half + 1])``, -inf outside ``y`` (scipy's ``maximum_filter1d`` with a
    constant -inf border, without scipy in the base install): doublings, so O(n log window)."""
    size = 2 * half + 1
    pad = np.full(half, -np.inf)
    m = np.concatenate([pad, y, pad])  # m[i] = max of p[i : i + width], width doubling up to <= size
    width = 1
    while width * 2 <= size:
        m = np.maximum(m[:-width], m[width:])
        width *= 2
    n = len(y)
    # two overlapping windows of `width` cover [i, i + size)
    return np.maximum(m[:n], m[size - width: size - width + n])


def detect_period(y: np.ndarray, step: float) -> float | None:
    """DAY or WEEK: of the candidates the series covers at least twice, the one with the higher autocorrelation."""
    best, best_r = None, -np.inf
    for period in (DAY, WEEK):
        lag = int(round(period / step))
        if lag < 1 or len(y) < 2 * lag:
            continue
        a, b = y[lag:], y[:-lag]
        ok = np.isfinite(a) & np.isfinite(b)
        if ok.sum() < 3:
            continue
        sa, sb = a[ok], b[ok]
        r = 1.0 if sa.std() == 0 or sb.std() == 0 else float(np.corrcoef(sa, sb)[0, 1])
        if r > best_r + 1e-12:
            best, best_r = period, r
    return best


def periods_in_week(period: float) -> int:
    return max(1, int(round(WEEK / period)))


def envelope_at(y: np.ndarray, targets: np.ndarray, lag: int, half: int, k: int) -> np.ndarray:
    """``max_j max y[i - j lag - half .. i - j lag + half]`` for each target index ``i`` (NaN where no point).

    ``y`` on a regular grid, NaN = missing; indices outside ``y`` hold nothing.
    """
    yy = np.where(np.isfinite(y), y, -np.inf)
    m = running_max(yy, half) if len(yy) else yy
    targets = np.asarray(targets, dtype=np.int64)
    out = np.full(targets.shape, -np.inf)
    n = len(m)
    for j in range(1, k + 1):
        src = targets - j * lag
        # a centre outside y can still reach into it by up to ``half`` points
        inside = (src >= 0) & (src < n)
        out[inside] = np.maximum(out[inside], m[src[inside]])
        for edge in ((src < 0) & (src + half >= 0), (src >= n) & (src - half < n)):
            for i in np.flatnonzero(edge):
                a, b = max(0, src[i] - half), min(n, src[i] + half + 1)
                if b > a:
                    out[i] = max(out[i], float(yy[a:b].max()))
    return np.where(np.isfinite(out), out, np.nan)


@dataclass(frozen=True)
class EnvelopeForecaster:
    """``window``: half-width in seconds; ``period``: None = detected (DAY or WEEK), or seconds."""

    seed: int = 0  # accepted for a uniform interface; the model is deterministic
    window: float = DEFAULT_WINDOW
    period: float | None = None
    level_half_life: float = DEFAULT_HALF_LIFE_SECONDS  # accepted so every model takes the same options; unused

    name = NAME

    def fit(self, series: Series, *, warm_start=None) -> "EnvelopeFitted":
        require(series, 2, NAME)
        period = self.period if self.period is not None else detect_period(series.y, series.step)
        if period is None:
            raise InsufficientHistory(f"{NAME}: {series.span_seconds / 3600:.1f} h of history; two periods "
                                      "(at least 2 days) needed to find the period")
        lag = int(round(period / series.step))
        half = max(0, int(round(self.window / series.step)))
        if lag < 1 or half >= lag:
            raise InsufficientHistory(f"{NAME}: window {self.window:g} s must be shorter than the period {period:g} s")
        k = periods_in_week(period)
        keep = min(len(series), k * lag + half + 1)
        return EnvelopeFitted(step=series.step, last_t=float(series.t[-1]), lag=lag, half=half, k=k,
                              t0=float(series.t[-keep]), values=series.y[-keep:].copy(),
                              history_max=history_max(series))


@dataclass(frozen=True, eq=False)
class EnvelopeFitted:
    step: float
    last_t: float
    lag: int  # steps in one period
    half: int  # window half-width in steps
    k: int  # periods looked back
    t0: float  # timestamp of values[0]
    values: np.ndarray
    history_max: float
    model: str = NAME

    @property
    def chosen(self) -> str:
        return self.model

    def predict(self, horizon: int, quantiles: Sequence[float] = (), *, origin: float | None = None,
                recent: Series | None = None) -> Forecast:
        qs = check_quantiles(quantiles)
        origin, recent = resolve_origin(self.last_t, self.step, origin, recent)
        t = grid(origin, self.step, horizon)
        t0, hist = merged_tail(self.t0, self.values, self.step, recent, origin)
        n_origin = int(round((origin - t0) / self.step))
        hist = hist[:n_origin + 1]  # nothing after the origin (no peeking)
        env = envelope_at(hist, n_origin + np.arange(1, horizon + 1), self.lag, self.half, self.k)
        if np.isnan(env).any():
            last = last_finite(hist)
            env = np.where(np.isnan(env), 0.0 if last is None else last, env)
        return finalize(t, env, {q: env.copy() for q in qs}, self.model)

    def to_state(self) -> dict:
        return {"model": NAME, "version": 1, "step": self.step, "last_t": self.last_t, "lag": self.lag,
                "half": self.half, "k": self.k, "t0": self.t0, "values": arr_to_json(self.values),
                "history_max": self.history_max}

    @staticmethod
    def from_state(d: dict) -> "EnvelopeFitted":
        require_model(d, NAME)
        return EnvelopeFitted(step=float(d["step"]), last_t=float(d["last_t"]), lag=int(d["lag"]),
                              half=int(d["half"]), k=int(d["k"]), t0=float(d["t0"]),
                              values=arr_from_json(d["values"]), history_max=float(d["history_max"]))

"""The forecaster contract: series in, forecast curve out.

Models take arrays and return arrays (statsforecast style). Time is always
epoch seconds (float64); rates are requests per second (float64).

* ``Series``   a regular grid ``t`` (step ``step``) with values ``y``; NaN marks a
  missing point that hygiene could not fill.
* ``Forecaster.fit(series) -> Fitted``; ``Fitted.predict(horizon, quantiles)``
  returns a ``Forecast`` that starts one step after the series' last point.
* ``Forecast``  timestamps, mean and one array per requested quantile, all the
  same length, quantiles ordered and non-negative.

Forecasting from a later origin (a model fitted an hour ago, asked now)::

    fitted = make("prophet").fit(history)          # at 12:00, on history up to 11:59
    fc = fitted.predict(30, (0.9,), origin=now_t, recent=last_points)

``origin`` is the timestamp of the newest observation the forecast may use:
the curve starts at ``origin + step``. ``recent`` is a ``Series`` of the
observations up to ``origin`` (points after it are ignored: no peeking); with
``recent`` and no ``origin`` the origin is ``recent``'s last point; with
neither, the training series' last point. What each model takes from
``recent``: naive its last finite value, linear_trend its last five finite
points, seasonal_naive the values one season before each target (``recent``
fills what came after training), prophet nothing: the fitted curve is simply
evaluated at the later timestamps (the policy's level correction,
``forecaster.level``, brings in the current observation). The quantile bands
are those learnt at fit time.

This package never imports ``scaler``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np


@dataclass(frozen=True)
class Series:
    """A regular time grid of request rates."""

    t: np.ndarray  # epoch seconds, strictly increasing by ``step``
    y: np.ndarray  # requests/s, NaN = missing
    step: float  # seconds

    def __post_init__(self) -> None:
        if self.t.shape != self.y.shape or self.t.ndim != 1:
            raise ValueError(f"t and y must be 1-D arrays of one length, got {self.t.shape} and {self.y.shape}")
        if not self.step > 0:
            raise ValueError(f"step must be > 0 seconds, got {self.step}")

    def __len__(self) -> int:
        return int(self.t.shape[0])

    @property
    def span_seconds(self) -> float:
        return float(self.t[-1] - self.t[0] + self.step) if len(self) else 0.0

    def tail(self, seconds: float) -> "Series":
        """The last ``seconds`` of the series."""
        if not len(self):
            return self
        a = int(np.searchsorted(self.t, self.t[-1] - seconds, side="right"))  # t is increasing: a slice (a view)
        return Series(self.t[a:], self.y[a:], self.step)

    def until(self, t_end: float) -> "Series":
        """Points with timestamp < ``t_end`` (for no-peeking backtests)."""
        b = int(np.searchsorted(self.t, t_end, side="left"))
        return Series(self.t[:b], self.y[:b], self.step)


@dataclass(frozen=True)
class Forecast:
    """A forecast curve: mean and quantiles over future timestamps."""

    t: np.ndarray
    mean: np.ndarray
    quantiles: Mapping[float, np.ndarray] = field(default_factory=dict)
    model: str = ""

    def __len__(self) -> int:
        return int(self.t.shape[0])

    def at_quantile(self, q: float | None) -> np.ndarray:
        """The curve for quantile ``q`` (None or 0.5 without a 0.5 band -> mean).

        A quantile that was not computed is interpolated between the nearest
        computed ones (the mean standing in for 0.5); outside them, the nearest.
        """
        return blend(self.quantiles, self.mean, q)

    def window_max(self, start: float, end: float, q: float | None) -> float | None:
        """Max of the quantile curve over points with ``start <= t <= end``.

        The curve is piecewise constant over each step: the point whose
        interval contains ``start`` counts too. None when the curve does not
        reach ``end`` (a stale forecast must not be trusted). A view of
        ``window_max_rows`` on one row.
        """
        if not len(self):
            return None
        peak, ok = window_max_rows(self.t[None, :], self.at_quantile(q)[None, :], np.array([start], dtype=float),
                                   np.array([end], dtype=float))
        return float(peak[0]) if ok[0] else None

    def slice(self, start: float, end: float) -> "Forecast":
        keep = (self.t >= start) & (self.t <= end)
        return Forecast(self.t[keep], self.mean[keep], {k: v[keep] for k, v in self.quantiles.items()}, self.model)


def blend(quantiles: Mapping[float, np.ndarray], mean: np.ndarray, q: float | None,
          correct: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """``Forecast.at_quantile`` on bands of any shape (one curve, or curves stacked as rows).

    ``correct``, if given, is applied to each band used before they are
    blended (the policy's level correction acts band by band).
    """
    fix = correct or (lambda a: a)
    if q is None:
        return fix(mean)
    for k, v in quantiles.items():
        if abs(k - q) < 1e-9:
            return fix(v)
    levels = dict(quantiles)
    levels.setdefault(0.5, mean)
    ks = sorted(levels)
    if q <= ks[0]:
        return fix(levels[ks[0]])
    if q >= ks[-1]:
        return fix(levels[ks[-1]])
    hi = next(k for k in ks if k > q)
    lo = max(k for k in ks if k < q)
    w = (q - lo) / (hi - lo)
    # Inf in a broken curve blends to NaN (Inf - Inf), which the policy judges absurd
    with np.errstate(invalid="ignore", over="ignore"):
        return (1 - w) * fix(levels[lo]) + w * fix(levels[hi])


def window_max_rows(t: np.ndarray, v: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``Forecast.window_max`` for curves stacked as rows: row i over ``start[i] <= t <= end[i]``.

    ``t`` and ``v`` are (n, h), each row of ``t`` increasing (a curve's
    grid); returns the maxima (n,) and whether each exists (False: the row
    does not reach ``end``, or no point falls in the window).
    """
    n, h = t.shape
    if h == 0:
        return np.full(n, np.nan), np.zeros(n, dtype=bool)
    step = t[:, 1] - t[:, 0] if h > 1 else np.zeros(n)
    # searchsorted(row, x, "right") is the count of points <= x: the window is lo <= index < hi
    inside = (t > (start - step)[:, None]) & (t <= end[:, None])
    ok = ~(t[:, -1] < end) & inside.any(axis=1)
    peak = np.where(inside, v, -np.inf).max(axis=1)
    return np.where(ok, peak, np.nan), ok


class Fitted(Protocol):
    """A fitted model of one series.

    ``model``: the family name (``auto`` keeps its own name and says what it
    picked in ``chosen``; the others have ``chosen == model``). ``step``: the
    grid step in seconds. ``last_t``: the training series' last timestamp.
    ``history_max``: the largest finite training value (for the policy's
    absurdity check). ``to_state()``: a JSON-able dict, restored by
    ``forecaster.models.from_state``.

    Optional: ``predict_origins(horizon, quantiles, origins, recent=None) -> list[Forecast]``:
    ``predict(horizon, quantiles, origin=o, recent=recent)`` for each origin, bit for bit, in one call
    (``evaluate.historical_forecasts`` uses it for a refit's cutoffs; a wrapper must not forward it).
    """

    model: str
    chosen: str
    step: float
    last_t: float
    history_max: float

    def predict(self, horizon: int, quantiles: Sequence[float] = (), *, origin: float | None = None,
                recent: Series | None = None) -> Forecast:
        """Forecast ``horizon`` points at ``origin + step * (1..horizon)``.

        ``origin`` defaults to the last point of ``recent``, else to ``last_t``
        (see the module docstring for forecasting from a later origin).
        """
        ...

    def to_state(self) -> dict: ...


class Forecaster(Protocol):
    """A model family. ``fit`` must be deterministic for a given seed.

    ``warm_start``: a previous ``Fitted`` of the same family on (mostly) the
    same series; models that optimise (prophet) start from its parameters,
    the others ignore it.
    """

    name: str

    def fit(self, series: Series, *, warm_start: Fitted | None = None) -> Fitted: ...


class InsufficientHistory(ValueError):
    """The series is too short (or too empty) for this model; not a guess."""


class FitFailed(RuntimeError):
    """The model's optimiser failed on this series (policy reason ``fallback_fit_failed``)."""

"""Prophet's fitted curve, evaluated with numpy from the MAP parameters, and the forecasts made from it.

``forecaster.models.prophet`` fits (Stan); this module predicts: the curve of a fit is a function of time
alone, so ``ProphetFitted.predict_origins`` forecasts from many origins with one evaluation of it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..base import Forecast, Series
from ..calendar import UTC, as_weekday_times
from ._common import BandTable, bands_for, check_quantiles, finalize_rows, grid_rows, require_model, resolve_origin

NAME = "prophet"
DAY = 86400.0


@dataclass(frozen=True, eq=False)
class ProphetCurve:
    """Prophet's mean curve from its MAP parameters (additive mode, linear growth, absmax scaling)."""

    start: float  # epoch seconds of the first fitted point
    t_scale: float  # seconds
    y_scale: float
    k: float
    m: float
    delta: np.ndarray
    changepoints_t: np.ndarray  # scaled time
    beta: np.ndarray
    sigma_obs: float
    seasonalities: tuple[tuple[str, float, int], ...]
    transform: str
    offset: float

    def scaled(self, t: np.ndarray) -> np.ndarray:
        """The curve on Prophet's scaled axis (before y_scale and the inverse transform)."""
        ts = (np.asarray(t, dtype=float) - self.start) / self.t_scale
        if self.delta.size:
            on = self.changepoints_t[None, :] <= ts[:, None]
            k_t = self.k + (on * self.delta).sum(axis=1)
            m_t = self.m + (on * (-self.changepoints_t * self.delta)).sum(axis=1)
        else:
            k_t, m_t = self.k, self.m
        out = k_t * ts + m_t
        if self.seasonalities:
            # a row's own sum (a BLAS product differs by an ulp or so with the row's place in the matrix): the
            # curve at a time is the same number whether it is evaluated alone or among others (predict_origins)
            out = out + (features_sliding(t, self.seasonalities) * self.beta).sum(axis=1)
        return out

    def __call__(self, t: np.ndarray) -> np.ndarray:
        return inverse(self.scaled(t) * self.y_scale, self.transform, self.offset)

    def to_state(self) -> dict:
        return {"start": self.start, "t_scale": self.t_scale, "y_scale": self.y_scale, "k": self.k, "m": self.m,
                "delta": self.delta.tolist(), "changepoints_t": self.changepoints_t.tolist(),
                "beta": self.beta.tolist(), "sigma_obs": self.sigma_obs,
                "seasonalities": [list(s) for s in self.seasonalities], "transform": self.transform,
                "offset": self.offset}

    @staticmethod
    def from_state(d: dict) -> "ProphetCurve":
        return ProphetCurve(start=float(d["start"]), t_scale=float(d["t_scale"]), y_scale=float(d["y_scale"]),
                            k=float(d["k"]), m=float(d["m"]), delta=np.asarray(d["delta"], dtype=float),
                            changepoints_t=np.asarray(d["changepoints_t"], dtype=float),
                            beta=np.asarray(d["beta"], dtype=float), sigma_obs=float(d["sigma_obs"]),
                            seasonalities=tuple((str(n), float(p), int(o)) for n, p, o in d["seasonalities"]),
                            transform=str(d["transform"]), offset=float(d["offset"]))


@dataclass(frozen=True, eq=False)
class ProphetFitted:
    step: float
    last_t: float
    curve: ProphetCurve
    bands: BandTable
    history_max: float
    fit_step: float
    level_half_life: float
    model: str = NAME
    holiday_days: tuple[int, ...] = ()
    holiday_as: int = 6
    holiday_tz: str = UTC

    @property
    def chosen(self) -> str:
        return self.model

    def predict(self, horizon: int, quantiles: Sequence[float] = (), *, origin: float | None = None,
                recent: Series | None = None) -> Forecast:
        """The fitted curve at ``origin + step * (1..horizon)``; ``recent`` only sets the origin. A holiday
        point is the curve at the same time on the ``holiday_as`` weekday of its week. ``predict_origins`` on
        one origin."""
        origin, _ = resolve_origin(self.last_t, self.step, origin, recent)
        return self.predict_origins(horizon, quantiles, [origin])[0]

    def predict_origins(self, horizon: int, quantiles: Sequence[float], origins: Sequence[float],
                        recent: Series | None = None) -> list[Forecast]:
        """``predict(horizon, quantiles, origin=o)`` for each of ``origins`` (``recent`` changes nothing but the
        origin, and the origins are given), the same numbers bit for bit: the
        curve is evaluated once at every distinct time the forecasts need (consecutive origins share all but
        one), the bands and the flooring act on all rows at once (a replay forecasts from every cutoff)."""
        qs = check_quantiles(quantiles)
        t = grid_rows(np.asarray(origins, dtype=float), self.step, horizon)
        u, inv = np.unique(t, return_inverse=True)
        at = as_weekday_times(u, np.asarray(self.holiday_days, dtype=np.int64), self.holiday_as,
                              self.holiday_tz) if self.holiday_days else u
        mean = self.curve(at)[inv].reshape(t.shape)
        return finalize_rows(t, mean, bands_for(self.bands, mean, qs), self.model)

    def stan_params(self) -> dict[str, Any]:
        """Stan's parameters of this fit (the ``init`` of a warm-started refit)."""
        c = self.curve
        return {"k": c.k, "m": c.m, "delta": c.delta.copy(), "beta": c.beta.copy(), "sigma_obs": c.sigma_obs,
                "y_scale": c.y_scale}

    def to_state(self) -> dict:
        return {"model": NAME, "version": 1, "step": self.step, "last_t": self.last_t,
                "curve": self.curve.to_state(), "bands": self.bands.to_state(), "history_max": self.history_max,
                "fit_step": self.fit_step, "level_half_life": self.level_half_life,
                **({"holiday_days": list(self.holiday_days), "holiday_as": self.holiday_as} if self.holiday_days else {}),
                **({"holiday_tz": self.holiday_tz} if self.holiday_days and self.holiday_tz != UTC else {})}

    @staticmethod
    def from_state(d: dict) -> "ProphetFitted":
        require_model(d, NAME)
        return ProphetFitted(step=float(d["step"]), last_t=float(d["last_t"]), curve=ProphetCurve.from_state(d["curve"]),
                             bands=BandTable.from_state(d["bands"]), history_max=float(d["history_max"]),
                             fit_step=float(d["fit_step"]), level_half_life=float(d["level_half_life"]),
                             holiday_days=tuple(int(x) for x in d.get("holiday_days", ())),
                             holiday_as=int(d.get("holiday_as", 6)), holiday_tz=str(d.get("holiday_tz", UTC)))


def features(t: np.ndarray, seasonalities: Sequence[tuple[str, float, int]]) -> np.ndarray:
    """Prophet's Fourier features (days since the epoch, sin/cos interleaved, seasonalities in order)."""
    days = np.asarray(t, dtype=float).reshape(-1) / DAY
    out = np.empty((days.size, 2 * sum(int(order) for _, _, order in seasonalities)))
    col = 0
    for _, period, order in seasonalities:
        x = 2.0 * np.pi * days / period
        ix = np.multiply.outer(x, np.arange(1, order + 1, dtype=float))  # x * i: the same product as i * x
        out[:, col:col + 2 * order:2] = np.sin(ix)
        out[:, col + 1:col + 2 * order:2] = np.cos(ix)
        col += 2 * order
    return out


SLIDING_MIN_ROWS = 1024  # calls at least this long keep their rows for the thread's next call
SLIDING_MAX_BYTES = 16 * 2**20  # ... unless the rows exceed this (a week at 30 s steps and 70 features: 11 MiB)


class _Rows(threading.local):
    key: tuple | None = None
    t: np.ndarray | None = None
    values: np.ndarray | None = None


_last = _Rows()


def features_sliding(t: np.ndarray, seasonalities: Sequence[tuple[str, float, int]]) -> np.ndarray:
    """``features(t)`` (read-only), reusing the rows of the times this thread's previous long call ended with:
    a refit's in-sample band window (a week of points) is its predecessor's moved by one refit interval, so
    only the new times are computed. A row is a function of its time alone, so the rows are the same bit for
    bit. Bounded: a thread keeps the rows of its last call of ``SLIDING_MIN_ROWS`` or more, up to
    ``SLIDING_MAX_BYTES`` (a week of 1-minute points and 70 features: 5.6 MB)."""
    t = np.asarray(t, dtype=float).reshape(-1)
    if t.size < SLIDING_MIN_ROWS:
        return features(t, seasonalities)
    key = tuple(tuple(s) for s in seasonalities)
    prev_t, prev = _last.t, _last.values  # set and cleared together with ``key``
    out = None
    if _last.key == key:
        assert prev_t is not None and prev is not None
        j = int(np.searchsorted(prev_t, t[0]))
        n = min(prev_t.size - j, t.size)
        if n > 0 and np.array_equal(prev_t[j:j + n], t[:n]):
            out = np.empty((t.size, prev.shape[1]))
            out[:n] = prev[j:j + n]
            out[n:] = features(t[n:], seasonalities)
    if out is None:
        out = features(t, seasonalities)
    out.flags.writeable = False
    if out.nbytes <= SLIDING_MAX_BYTES:
        _last.key, _last.t, _last.values = key, t.copy(), out
    else:
        _last.key = _last.t = _last.values = None
    return out


def forward(y: np.ndarray, transform: str, offset: float) -> np.ndarray:
    return np.log(np.maximum(y, 0.0) + offset) if transform == "log" else y


def inverse(z: np.ndarray, transform: str, offset: float) -> np.ndarray:
    return np.exp(z) - offset if transform == "log" else z

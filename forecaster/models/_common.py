"""Shared pieces of the models: forecast grids, origins, empirical error bands, JSON helpers."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..base import Fitted, Forecast, InsufficientHistory, Series

# quantile levels stored in every band table; others are interpolated
LEVELS = np.round(np.concatenate(([0.005], np.arange(0.01, 1.0, 0.01), [0.995])), 3)
MIN_ERRORS = 10  # fewer error samples than this: the band has zero width


def finite_points(series: Series) -> int:
    return int(np.count_nonzero(np.isfinite(series.y)))


def require(series: Series, n: int, model: str) -> None:
    """Raise InsufficientHistory unless ``series`` has at least ``n`` finite points."""
    k = finite_points(series)
    if k < n:
        raise InsufficientHistory(f"{model}: {k} finite point(s) in the history, at least {n} needed")


def history_max(series: Series) -> float:
    y = series.y[np.isfinite(series.y)]
    return float(y.max()) if y.size else 0.0


def resolve_origin(last_t: float, step: float, origin: float | None, recent: Series | None) -> tuple[float, Series | None]:
    """The origin to forecast from and the part of ``recent`` at or before it."""
    if recent is not None and len(recent):
        if origin is None:
            origin = float(recent.t[-1])
        recent = recent.until(origin + 0.5 * step)
        if not len(recent):
            recent = None
    else:
        recent = None
    if origin is None:
        origin = last_t
    return float(origin), recent


def grid(origin: float, step: float, horizon: int) -> np.ndarray:
    """The times ``origin + step * (1..horizon)``."""
    return grid_rows(np.array([origin], dtype=float), step, horizon)[0]


def grid_rows(origins: np.ndarray, step: float, horizon: int) -> np.ndarray:
    """``grid`` for each origin, as the rows of one array."""
    if horizon < 0:
        raise ValueError(f"horizon must be >= 0 steps, got {horizon}")
    return np.asarray(origins, dtype=float).reshape(-1, 1) + step * np.arange(1, horizon + 1, dtype=float)


def check_quantiles(quantiles: Sequence[float]) -> tuple[float, ...]:
    qs = tuple(float(q) for q in quantiles)
    for q in qs:
        if not 0.0 < q < 1.0:
            raise ValueError(f"quantiles must lie strictly between 0 and 1, got {q}")
    return qs


def finalize(t: np.ndarray, mean: np.ndarray, bands: dict[float, np.ndarray], model: str) -> Forecast:
    """Floor at 0, replace non-finite values by the mean, and make the quantiles non-crossing."""
    rows = {q: np.asarray(v, dtype=float)[None, :] for q, v in bands.items()}
    return finalize_rows(np.asarray(t)[None, :], np.asarray(mean, dtype=float)[None, :], rows, model)[0]


def finalize_rows(t: np.ndarray, mean: np.ndarray, bands: dict[float, np.ndarray], model: str) -> list[Forecast]:
    """``finalize`` on curves stacked as rows (``t``, ``mean`` and each band of shape (curves, points)), one
    Forecast a row (views of the stacked arrays): each number as ``finalize`` of its row alone."""
    mean = np.where(np.isfinite(mean), mean, 0.0)
    mean = np.maximum(mean, 0.0)
    qs = sorted(bands)
    stack = np.zeros((0,) + mean.shape)
    if qs:
        stack = np.array([bands[q] for q in qs], dtype=float)  # (quantiles, curves, points)
        stack = np.where(np.isfinite(stack), stack, mean)
        stack = np.maximum(np.sort(stack, axis=0), 0.0)  # monotone in q, pointwise
    return [Forecast(t[i], mean[i], dict(zip(qs, stack[:, i])), model) for i in range(mean.shape[0])]


def last_finite(y: np.ndarray) -> float | None:
    idx = np.flatnonzero(np.isfinite(y))
    return float(y[idx[-1]]) if idx.size else None


def h_grid(hmax: int, n: int = 16) -> np.ndarray:
    """Integer horizons 1..hmax, log-spaced, at most ``n`` of them."""
    hmax = max(1, int(hmax))
    return np.unique(np.rint(np.geomspace(1, hmax, num=min(n, hmax))).astype(int))


class Wrapping:
    """A fitted model that wraps another's (``self.inner``): its step, last point and history max are the inner
    model's (``auto``'s chosen model, the holiday mechanism's wrapped one)."""

    inner: Fitted  # declared for the type checker: each subclass's own field

    @property
    def chosen(self) -> str:
        return self.inner.model

    @property
    def step(self) -> float:
        return self.inner.step

    @property
    def last_t(self) -> float:
        return self.inner.last_t

    @property
    def history_max(self) -> float:
        return self.inner.history_max


@dataclass(frozen=True)
class BandTable:
    """Empirical error quantiles by horizon: ``values[i, j]`` = quantile ``LEVELS[j]`` at ``hs[i]`` steps.

    ``relative``: the errors were divided by (curve + ``offset``) and are
    multiplied back by it at predict time (bands that scale with traffic).
    """

    hs: np.ndarray
    values: np.ndarray
    relative: bool = False
    offset: float = 0.0
    columns: dict = field(default_factory=dict, compare=False, repr=False)  # quantile -> its column, memoised
    steps: dict = field(default_factory=dict, compare=False, repr=False)  # (quantile, n) -> at(1..n, q), memoised

    @staticmethod
    def zero() -> "BandTable":
        return BandTable(np.array([1]), np.zeros((1, LEVELS.size)))

    @staticmethod
    def from_errors(hs: np.ndarray, errors_at: Callable[[int], np.ndarray], *, relative: bool = False,
                    offset: float = 0.0) -> "BandTable":
        rows, keep = [], []
        for h in hs:
            e = np.asarray(errors_at(int(h)), dtype=float)
            e = e[np.isfinite(e)]
            if e.size >= MIN_ERRORS:
                rows.append(e)
                keep.append(int(h))
        if not rows:
            return BandTable.zero()
        values = np.maximum.accumulate(quantile_rows(rows, LEVELS), axis=1)  # monotone in q
        return BandTable(np.array(keep), values, relative, offset)

    def at(self, h: np.ndarray, q: float) -> np.ndarray:
        """The error quantile ``q`` at horizons ``h`` (steps), interpolated; clamped outside the table."""
        col = self.columns.get(q)
        if col is None:  # the same few quantiles are asked at every predict between two fits: computed once
            col = self.columns[q] = np.array([np.interp(q, LEVELS, row) for row in self.values])
        return np.interp(np.asarray(h, dtype=float), self.hs.astype(float), col)

    def at_steps(self, n: int, q: float) -> np.ndarray:
        """``at(1..n, q)``, memoised: every predict between two fits asks the same horizons (read-only)."""
        e = self.steps.get((q, n))
        if e is None:
            if len(self.steps) >= 64:  # bounded: a caller asking ever new horizons recomputes instead
                self.steps.clear()
            e = self.steps[(q, n)] = self.at(np.arange(1, n + 1), q)
            e.flags.writeable = False
        return e

    def apply(self, mean: np.ndarray, h: np.ndarray | int, q: float) -> np.ndarray:
        """The band ``q`` around ``mean`` at horizons ``h`` (steps); an int ``n`` is the horizons 1..n."""
        e = self.at_steps(h, q) if isinstance(h, int) else self.at(h, q)
        if self.relative:
            return mean + (np.maximum(mean, 0.0) + self.offset) * e
        return mean + e

    def to_state(self) -> dict:
        return {"hs": self.hs.tolist(), "values": _f(self.values.tolist()), "relative": self.relative,
                "offset": self.offset, "levels": LEVELS.tolist()}

    @staticmethod
    def from_state(d: dict) -> "BandTable":
        levels = np.asarray(d.get("levels", LEVELS), dtype=float)
        values = np.asarray(d["values"], dtype=float).reshape(len(d["hs"]), -1)
        if levels.shape != LEVELS.shape or not np.allclose(levels, LEVELS):
            values = np.vstack([np.interp(LEVELS, levels, row) for row in values])
        return BandTable(np.asarray(d["hs"], dtype=int), values, bool(d.get("relative", False)),
                         float(d.get("offset", 0.0)))


def quantile_rows(rows: Sequence[np.ndarray], qs: np.ndarray) -> np.ndarray:
    """``np.vstack([np.quantile(r, qs) for r in rows])`` for finite rows of any lengths, in one sort.

    numpy's default (linear, Hyndman & Fan 7) arithmetic step by step, so the numbers are the same
    bit for bit: the virtual index ``(n - 1) * q``, its floor and the next order statistic (both
    the last one at or past it, where numpy's index is -1 and its weight ``v + 1``), the weight
    ``v - floor`` and numpy's two-sided lerp. The rows are sorted together, padded with +inf.
    """
    n = np.array([len(r) for r in rows], dtype=np.int64)
    if not n.size:
        return np.zeros((0, len(qs)))
    if n.min() < 1:
        raise ValueError("quantile_rows: every row needs at least one value")
    pad = np.full((n.size, int(n.max())), np.inf)
    for i, r in enumerate(rows):
        pad[i, :n[i]] = r
    pad.sort(axis=1)
    qs = np.asarray(qs, dtype=float)
    virtual = (n - 1)[:, None] * qs[None, :]
    prev = np.floor(virtual)
    last = virtual >= (n - 1)[:, None]
    prev_i = np.where(last, -1, prev.astype(np.intp))  # numpy's index of the last order statistic
    gamma = virtual - prev_i
    lo = np.where(last, n[:, None] - 1, prev_i)
    hi = np.where(last, n[:, None] - 1, prev_i + 1)
    ix = np.arange(n.size)[:, None]
    a, b = pad[ix, lo], pad[ix, hi]
    diff = b - a
    out = a + diff * gamma
    return np.where(gamma >= 0.5, b - diff * (1 - gamma), out)


def bands_for(table: BandTable, mean: np.ndarray, quantiles: Sequence[float]) -> dict[float, np.ndarray]:
    """The bands around a curve, or around curves stacked as rows (the same horizons 1..n on each)."""
    return {q: table.apply(mean, int(mean.shape[-1]), q) for q in quantiles}


def _f(x):
    """Nested lists with NaN/Inf replaced by None (strict JSON)."""
    if isinstance(x, list):
        return [_f(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def arr_to_json(a: np.ndarray) -> list:
    return _f(np.asarray(a, dtype=float).tolist())


def arr_from_json(v: list) -> np.ndarray:
    return np.array([np.nan if x is None else x for x in v], dtype=float)


def merged_tail(t0: float, y: np.ndarray, step: float, recent: Series | None, origin: float) -> tuple[float, np.ndarray]:
    """Stored history (starting at ``t0``) extended with ``recent`` up to ``origin``, on one grid.

    Where both have a point, ``recent`` wins; grid slots neither covers are NaN.
    """
    n_end = int(round((origin - t0) / step)) + 1
    n = max(len(y), n_end)
    out = np.full(n, np.nan)
    out[:len(y)] = y
    if recent is not None and len(recent):
        idx = np.rint((recent.t - t0) / step).astype(np.int64)
        ok = (idx >= 0) & (idx < n) & np.isfinite(recent.y)
        out[idx[ok]] = recent.y[ok]
    return t0, out[:max(n_end, 0)] if n_end < n else out


def require_model(state: dict, name: str) -> None:
    if state.get("model") != name:
        raise ValueError(f"state is for model {state.get('model')!r}, not {name!r}")


__all__ = ["BandTable", "InsufficientHistory", "LEVELS", "arr_from_json", "arr_to_json", "bands_for",
           "check_quantiles", "finalize", "finalize_rows", "finite_points", "grid", "grid_rows", "h_grid", "history_max", "last_finite",
           "merged_tail", "quantile_rows", "require", "require_model", "resolve_origin"]

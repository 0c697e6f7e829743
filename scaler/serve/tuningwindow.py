"""The history a ``tuning: auto`` run sweeps: its cutoff's window, or a first choice's earlier one.

A run on the cutoff ``at`` reads the ``fetch`` seconds of history up to it (``tuning.fetch_seconds``: ``history``
before every replayed fit). When that covers less than the first selection needs (``tuningMinHistory``, at least
``minHistory``), the data began after the cutoff's window did (a young workload): the first choice is made on the
earliest boundary of a finer grid (``retry_seconds``, phased per trigger as the cutoffs are: the same in every
replica) whose history covers it, and until such a boundary has passed the run waits (``NotEnoughHistory``, with
how long is missing).
"""

from __future__ import annotations

import math

import numpy as np

from forecaster.base import Series

from ..prom import PrometheusClient, PromError, PromErrorKind
from ..spec import ScalerSpec
from .load import load_series
from .worker import SETTLE_SECONDS, last_boundary, phase


class NotEnoughHistory(Exception):
    """The history covers less than tuningMinHistory (or minHistory) yet."""

    def __init__(self, covered: float, need: float):
        super().__init__(f"{covered / 3600:.1f} h of history, the first selection needs {need / 3600:.1f} h "
                         f"(tuningMinHistory)")
        self.wait_seconds = need - covered


class NoHistory(ValueError):
    """The query returned no history up to the cutoff."""


def covered(series: Series) -> float:
    """Seconds from the first to the last finite point of ``series``, one step included (0 when none)."""
    finite = np.isfinite(series.y)
    return float(series.t[finite][-1] - series.t[finite][0] + series.step) if finite.any() else 0.0


def run_window(client: PrometheusClient, key: tuple, spec: ScalerSpec, now: float, at: float, fetch: float,
               grid: float) -> tuple[Series, float, float]:
    """The history a run on the cutoff ``at`` sweeps, the cutoff it runs on (``at``, or a first choice's earlier
    ``grid`` boundary) and the time its finite points cover; ``NotEnoughHistory`` while it is too short."""
    step = spec.step_seconds
    need = max(spec.min_history_seconds, spec.tuning_min_history_seconds)
    end = math.floor(at / step) * step
    try:
        series, have = history(client, spec, end - fetch + step, end)  # history before every replayed fit
    except NoHistory:  # the data began after this cutoff (a young workload): the first window's grid below
        have = 0.0
    if have < need:
        series, at, have = first_window(client, key, spec, now, at, need, grid)
    if have < need:
        raise NotEnoughHistory(have, need)
    return series, at, have


def history(client: PrometheusClient, spec: ScalerSpec, start: float, end: float) -> tuple[Series, float]:
    """The history from ``start`` to ``end`` (on the step grid) and the time its finite points cover."""
    try:
        series, _ = load_series(client, spec, start, end, spec.step_seconds)
    except PromError as e:
        if e.kind is PromErrorKind.NO_DATA:
            raise NoHistory("no history returned by the query") from None
        raise
    return series, covered(series)


def first_window(client: PrometheusClient, key: tuple, spec: ScalerSpec, now: float, at: float, need: float,
                 grid: float) -> tuple[Series, float, float]:
    """A first choice whose ``tuningInterval`` cutoff has too short a history: the window up to the earliest
    boundary of a finer grid (``retry_seconds``, the same in every replica) whose history covers ``need``,
    that boundary and the time it covers; while that boundary is ahead, the latest one's."""
    step = spec.step_seconds
    offset = phase(key, grid)
    latest = last_boundary(now - SETTLE_SECONDS, grid, offset)
    # from the start of ``at``'s window (the history began after it): where it began, whatever ``latest`` is
    since = math.floor(at / step) * step - spec.history_seconds + step
    series, _ = history(client, spec, math.floor(since / step) * step, math.floor(latest / step) * step)
    finite = np.isfinite(series.y)
    keep = series.t > math.floor(latest / step) * step - spec.history_seconds
    have = covered(Series(series.t[keep], series.y[keep], step))
    if have >= need and finite.any():
        first = math.ceil((float(series.t[finite][0]) - step + need - offset) / grid) * grid + offset
        if at < first < latest:  # (after ``at``: a choice made on it is not due again before the next cutoff)
            end = math.floor(first / step) * step
            keep = (series.t > end - spec.history_seconds) & (series.t <= end)
            series = Series(series.t[keep], series.y[keep], step)
            return series, first, covered(series)
    return Series(series.t[keep], series.y[keep], step), latest, have

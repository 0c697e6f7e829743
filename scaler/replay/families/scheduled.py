"""``scheduled``: a quantile of each hour of the week (or day) of the history, L ahead, no observed floor (a
baseline through the HPA's emulation, not a forescale trigger)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..hpa import value_ticks
from ..keda import run_hpa
from ..policies import Context
from ..scenario import DAY, Timeline
from ..variant import Variant
from .base import Knobs, PolicyFamily


class Scheduled(PolicyFamily):
    name = "scheduled"
    hpa = False

    def default(self, s: Knobs) -> Variant:
        return Variant(self.name, quantile=s.quantile)

    def sweep(self, grid: Any, s: Knobs) -> list[Variant]:
        return [self.default(s)] + [Variant(self.name, quantile=q) for q in grid.scheduled_quantiles]

    def timeline(self, ctx: Context, v: Variant) -> tuple[Timeline, str]:
        sc, hpa = ctx.scenario, ctx.hpa
        assert v.quantile is not None
        weekly = ctx.train_seconds >= 7 * DAY
        prof = hour_profile(ctx.train_t, ctx.train_y, float(v.quantile), weekly)
        times = sc.t0 + sc.tick * value_ticks(sc.n, hpa, sc.tick)
        vals = np.maximum(prof[hour_slot(times, weekly)], prof[hour_slot(times + ctx.lead_seconds, weekly)])
        note = (
            f"q{v.quantile:g} of each hour of the {'week' if weekly else 'day'} in the history, "
            f"{ctx.lead_seconds:g}s ahead, no observed floor"
        )
        return run_hpa(sc, vals, hpa), note


def hour_profile(t: np.ndarray, y: np.ndarray, q: float, weekly: bool) -> np.ndarray:
    """The ``q`` quantile of the rate in each hour of the week (168) or of the day (24)."""
    slots = 168 if weekly else 24
    s = hour_slot(t, weekly)
    prof = np.full(slots, np.nan)
    ok = np.isfinite(y)
    overall = float(np.quantile(y[ok], q)) if ok.any() else 0.0
    for k in range(slots):
        v = y[ok & (s == k)]
        prof[k] = float(np.quantile(v, q)) if v.size else overall
    return prof


def hour_slot(t: np.ndarray, weekly: bool) -> np.ndarray:
    h = np.floor(np.asarray(t, dtype=float) / 3600.0).astype(np.int64)
    return (h + 72) % 168 if weekly else h % 24  # epoch 0 was a Thursday: Monday 00:00 -> slot 0


FAMILY = Scheduled()

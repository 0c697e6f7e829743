"""The replay's decision primitives every policy family builds on (each family's own code is its module in
``families``).

The HPA-driven families compute the value KEDA gets at each poll with the server's own ``decide`` in two stages:
stage 1 (``PolicyFamily.stage1``: the forecast window, level correction: ``Decision.base``, through
``planned_values``) and ``finish`` (headroom and dead-band compensation, which ``decide`` applies last), so that
variants differing only in those share the expensive stage (``batches.evaluate_batch``). ``Context`` is what every
evaluation reads; ``fixed_pool`` is a pool that never scales.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..policy import NO_REASON, REASONS, Curves, PolicyParams, Reason, decide_array
from .llm import LoopSettings
from .forecasts import Curve, Packed
from .hpa import Hpa, value_ticks
from .scenario import EPS, Scenario, Timeline


@dataclass(frozen=True)
class Context:
    """What every variant needs (plain data: it crosses a process boundary)."""

    scenario: Scenario
    hpa: Hpa
    qps: float
    lead_seconds: float
    tolerance: float  # the emulated HPA's; compensation on = the policy uses it too
    train_t: np.ndarray  # the finite history before the simulated span (scheduled, hybrid floor)
    train_y: np.ndarray
    train_seconds: float
    peak: float  # the simulated span's peak rate (keep_alive)
    trace_t: np.ndarray = field(default_factory=lambda: np.zeros(0))  # the whole trace up to the span's end
    trace_y: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (the anchors read it, before each poll)
    trace_step: float = 60.0
    events: tuple = ()  # forecaster.eventsfile.Event: the user's events, on every forecast family's decision
    loop: LoopSettings | None = None  # the closed loop (closedloop): every HPA family's answer corrected by it


# --------------------------------------------------------------------------- the decision at every poll


@dataclass
class Planned:
    """The values a forecast-driven policy returns at each poll, with the reasons counted."""

    values: np.ndarray
    reasons: dict[str, int] = field(default_factory=dict)


def polled_decisions(sc: Scenario, hpa: Hpa, params: PolicyParams, curves: Sequence[Curve] | Packed,
                     ticks: np.ndarray | None = None):
    """``decide_array`` at every tick KEDA asks the scaler (``hpa.value_ticks``; or at ``ticks``) with the
    curve in force then: ``(times, observed, Decisions)``.

    ``curves`` (or the same packed) sorted by ``since``; at a time t the latest curve with
    ``since <= t`` is used (none yet: ``decide`` falls back to observed).
    """
    idx = value_ticks(sc.n, hpa, sc.tick) if ticks is None else ticks
    times = sc.t0 + sc.tick * idx
    obs = sc.observed[idx]
    since = curves.since if isinstance(curves, Packed) else np.array([c.since for c in curves], dtype=np.float64)
    which = np.searchsorted(since, times + EPS, side="right") - 1
    stack, row_of, bad, hmax = stacked(curves)
    at = np.clip(which, 0, None)
    none = which < 0
    rows = np.where(none, -1, row_of[at]) if len(since) else np.full(len(idx), -1)
    d = decide_array(obs, times, params, stack, rows,
                     unusable=np.where(none, NO_REASON, bad[at]) if len(since) else None,
                     history_max=np.where(none, np.nan, hmax[at]) if len(since) else None)
    return times, obs, d


def planned_values(sc: Scenario, hpa: Hpa, params: PolicyParams, curves: Sequence[Curve] | Packed,
                   ticks: np.ndarray | None = None) -> Planned:
    """The server's ``decide`` at every tick KEDA asks the scaler (or at ``ticks``) with the curve in force
    then (``polled_decisions``). Hybrid's warm floor is ``params.floor_qps``."""
    d = polled_decisions(sc, hpa, params, curves, ticks)[2]
    return Planned(d.planned, d.reason_counts())


def stacked(curves: Sequence[Curve] | Packed) -> tuple[Curves | None, np.ndarray, np.ndarray, np.ndarray]:
    """The curves' forecasts as rows (None if none), and per curve: its row (-1 none), unusable code, history max."""
    if isinstance(curves, Packed):
        bad = np.array([NO_REASON if u is None else REASONS.index(Reason(u)) for u in curves.unusable], dtype=np.int64)
        stack = Curves(curves.t, curves.mean, curves.quantiles) if len(curves.t) else None
        return stack, curves.index, bad, curves.history_max
    fcs = [c.forecast for c in curves if c.forecast is not None]
    row_of = np.full(len(curves), -1, dtype=np.int64)
    row_of[[i for i, c in enumerate(curves) if c.forecast is not None]] = np.arange(len(fcs))
    bad = np.array([NO_REASON if c.unusable is None else REASONS.index(c.unusable) for c in curves], dtype=np.int64)
    hmax = np.array([np.nan if c.history_max is None else c.history_max for c in curves], dtype=np.float64)
    if not fcs:
        return None, row_of, bad, hmax
    h = len(fcs[0])
    if any(len(f) != h for f in fcs):
        raise ValueError("forecasts of unequal length cannot be stacked")
    qs = list(fcs[0].quantiles)
    stack = Curves(np.vstack([f.t for f in fcs]), np.vstack([f.mean for f in fcs]),
                   {q: np.vstack([f.quantiles[q] for f in fcs]) for q in qs})
    return stack, row_of, bad, hmax


def finish(base: np.ndarray, qps: float, headroom: float, tolerance: float) -> np.ndarray:
    """Stage 2: headroom and dead-band compensation, by ``decide`` itself (reactive mode on the base values)."""
    if headroom == 1.0 and tolerance <= 0:
        return base
    return decide_array(base, np.zeros(len(base)), finishing(qps, headroom, tolerance), None).planned


def finishing(qps: float, headroom: float, tolerance: float) -> PolicyParams:
    """Stage 2's knobs: ``decide`` in reactive mode on the base values applies headroom and compensation only."""
    return PolicyParams(mode="reactive", lead_seconds=0.0, quantile=0.5, qps_per_replica=qps, headroom=headroom,
                        hpa_tolerance=tolerance)


def fixed_pool(sc: Scenario, replicas: int) -> Timeline:
    """A constant, always-ready pool (keep_alive)."""
    r = np.full(sc.n, int(replicas), dtype=np.int64)
    return Timeline(replicas=r, ready=r.copy())

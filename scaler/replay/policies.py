"""Policies that are not the HPA (fixed pool, oracle) and the server's decision replayed at every KEDA poll."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from forecaster.base import Forecast

from ..policy import Decision, PolicyParams, Reason, decide
from .hpa import Hpa, poll_ticks
from .scenario import EPS, Scenario, Timeline


def fixed_pool(sc: Scenario, replicas: int) -> Timeline:
    """A constant, always-ready pool (keep_alive)."""
    r = np.full(sc.n, int(replicas), dtype=np.int64)
    return Timeline(replicas=r, ready=r.copy())


def oracle(sc: Scenario) -> Timeline:
    """Perfect foresight, no HPA limits: every pod starts exactly T_cold before it is needed.

    Replicas are interchangeable, so the cheapest plan with zero misses is
    found level by level: the k-th replica is needed on the ticks where
    ``need >= k``; it is kept through a gap of at most T_cold (cheaper than a
    new cold start) and otherwise deleted and created again T_cold before the
    next run. Pods needed at tick 0 are ready at tick 0 (as for every policy);
    a cold start that would begin before tick 0 is counted from tick 0.
    """
    need = sc.need()
    n, cold = sc.n, sc.cold_ticks
    ready = np.zeros(n + 1, dtype=np.int64)
    total = np.zeros(n + 1, dtype=np.int64)
    top = int(need.max()) if n else 0
    for k in range(1, top + 1):
        on = np.concatenate([[False], need >= k, [False]])
        d = np.diff(on.astype(np.int8))
        starts = np.flatnonzero(d == 1)
        ends = np.flatnonzero(d == -1)  # exclusive
        if len(starts) > 1:
            gaps = starts[1:] - ends[:-1]
            join = gaps <= cold
            keep_start = np.concatenate([[True], ~join])
            keep_end = np.concatenate([~join, [True]])
            starts, ends = starts[keep_start], ends[keep_end]
        np.add.at(ready, starts, 1)
        np.add.at(ready, ends, -1)
        born = np.where(starts > 0, np.maximum(starts - cold, 0), 0)
        np.add.at(total, born, 1)
        np.add.at(total, ends, -1)
    return Timeline(replicas=np.cumsum(total[:n]), ready=np.cumsum(ready[:n]))


# --------------------------------------------------------------------------- the decision, replayed


@dataclass(frozen=True)
class Curve:
    """A forecast curve as the server would hold it: usable from ``since`` (the fit's cutoff)."""

    since: float
    forecast: Forecast | None
    history_max: float | None = None
    unusable: Reason | None = None  # why there is no usable forecast (passed to decide)


@dataclass
class Planned:
    """The values a forecast-driven policy returns at each poll, with the reasons counted."""

    values: np.ndarray
    reasons: dict[str, int] = field(default_factory=dict)


def planned_values(sc: Scenario, hpa: Hpa, params: PolicyParams, curves: Sequence[Curve], *,
                   observed_offset: float = 0.0) -> Planned:
    """Call the server's ``decide`` at every KEDA poll with the curve in force then.

    ``curves`` sorted by ``since``; at a poll at time t the latest curve with
    ``since <= t`` is used (none yet: ``decide`` falls back to observed).
    ``observed_offset`` is added to the observed rate (hybrid's warm floor,
    whose curves carry the same offset).
    """
    idx = poll_ticks(sc.n, hpa, sc.tick)
    times = sc.t0 + sc.tick * idx
    obs = sc.observed[idx] + observed_offset
    since = np.array([c.since for c in curves], dtype=np.float64)
    which = np.searchsorted(since, times + EPS, side="right") - 1
    out = np.empty(len(idx), dtype=np.float64)
    reasons: dict[str, int] = {}
    for k in range(len(idx)):
        w = int(which[k])
        cur = curves[w] if w >= 0 else None
        d: Decision = decide(float(obs[k]), cur.forecast if cur else None, params, float(times[k]),
                             unusable=cur.unusable if cur else None, history_max=cur.history_max if cur else None)
        out[k] = d.planned
        reasons[d.reason.value] = reasons.get(d.reason.value, 0) + 1
    return Planned(out, reasons)


def reactive_values(sc: Scenario, hpa: Hpa, qps_per_replica: float) -> Planned:
    """KEDA's Prometheus scaler: the observed rate as is (``decide`` in reactive mode, no dead-band compensation)."""
    params = PolicyParams(mode="reactive", lead_seconds=0.0, quantile=0.5, qps_per_replica=qps_per_replica,
                          hpa_tolerance=0.0)
    return planned_values(sc, hpa, params, ())

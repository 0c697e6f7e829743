"""THE per-family code of the replay: how each policy family turns the scenario into replicas.

Every family is implemented here once, and ``backtest``, ``backtest --sweep``,
``tune`` and the server's ``tuning: auto`` all reach it through
``engine.run``. The HPA-driven families compute the value KEDA gets at each
poll with the server's own ``decide`` in two stages: ``base_values`` (the
forecast window, level correction: ``Decision.base``) and ``finish``
(headroom and dead-band compensation, which ``decide`` applies last), so that
variants differing only in those share the expensive stage; identical value
sequences are replayed once.

* ``reactive``        KEDA's Prometheus scaler: the observed rate (``decide`` in reactive mode)
* ``linear_trend``, ``seasonal_naive``, ``predictive``  ``decide(forecastAndScale)`` on the model's curves
* ``hybrid``          an always-warm floor (a percentile of the history, as ``minReplicaCount``)
                      plus ``predictive`` above it
* ``envelope``, ``aws_like``, ``mimir_like``  published autoscalers re-implemented (``anchors``), through the
                      same stage 2 and HPA
* ``scheduled``       a quantile of each hour of the day/week of the history, L ahead, no observed floor
* ``keep_alive``      a fixed pool sized for the simulated span's peak, in hindsight
* ``oracle``          perfect foresight: every pod started exactly T_cold before it is needed
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from ..policy import NO_REASON, REASONS, Curves, PolicyParams, Reason, decide_array
from . import calibration, search
from .anchors import ANCHORS, anchor_values
from .forecasts import Curve, Packed
from .hpa import Hpa, run_hpa, value_ticks
from .scenario import DAY, EPS, Outcome, Scenario, Timeline, evaluate
from .variants import HPA_FAMILIES, Variant


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
    events: tuple = ()  # forecaster.calendar.Event: the user's events, on every forecast family's decision


@dataclass
class Evaluated:
    variant: Variant
    outcome: Outcome
    reasons: dict
    note: str
    timeline: Timeline | None  # kept for the family's default configuration only
    extra: dict = field(default_factory=dict)  # e.g. hybrid's minReplicaCount


# --------------------------------------------------------------------------- the HPA-driven families


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


def base_values(ctx: Context, v: Variant, packed: Packed | None) -> tuple[np.ndarray, dict, Hpa, str, dict]:
    """Stage 1 of a decision at every KEDA poll: ``decide`` without headroom and compensation.

    Returns the value per poll (``Decision.base``: max(observed, forecast peak)
    or observed), the reasons counted, the HPA to replay it with, a note and
    extras (hybrid: its ``minReplicaCount``).
    """
    sc, hpa, qps = ctx.scenario, ctx.hpa, ctx.qps
    if v.policy == "reactive":
        params = PolicyParams(mode="reactive", lead_seconds=0.0, quantile=0.5, qps_per_replica=qps,
                              headroom=1.0, hpa_tolerance=0.0)
        pv = planned_values(sc, hpa, params, ())
        return pv.values, {}, hpa, "KEDA's Prometheus scaler: value = rate over 2 min, as is", {}
    if v.policy in ANCHORS:
        vals, note = anchor_values(ctx, v.policy, v.window_seconds)
        return vals, {}, hpa, note, {}
    assert packed is not None and v.quantile is not None and v.level_correction_seconds is not None
    params = PolicyParams(mode="forecastAndScale", lead_seconds=ctx.lead_seconds, quantile=v.quantile,
                          qps_per_replica=qps, headroom=1.0, hpa_tolerance=0.0,
                          level_correction_seconds=v.level_correction_seconds, events=ctx.events)
    if v.policy == "hybrid":
        assert v.floor_percentile is not None
        y = ctx.train_y
        floor_qps = float(np.percentile(y, v.floor_percentile)) if y.size else 0.0
        floor = int(math.ceil(floor_qps / qps - 1e-9)) if floor_qps > 0 else 0
        shift = floor * qps
        pv = planned_values(sc, hpa, replace(params, floor_qps=shift), packed)
        h2 = replace(hpa, min_replicas=max(hpa.min_replicas, floor), max_replicas=max(hpa.max_replicas, floor))
        note = (f"{floor} always-warm replica(s) (p{v.floor_percentile:g} of the history, {floor_qps:.4g} req/s) "
                f"+ predictive above them")
        return pv.values, pv.reasons, h2, note, {"minReplicaCount": max(hpa.min_replicas, floor),
                                                 "floorReplicas": floor}
    if v.band == "window":
        cal, fell_back = calibration.calibrated(sc, packed, params)
        pv = planned_values(sc, hpa, params, cal)
        note = (f"decide(forecastAndScale), model {packed.model}, mean's window max + the q{v.quantile:g} window-max "
                f"residual (conformal; {fell_back} early curves on the pointwise band), L={ctx.lead_seconds:g}s")
        return pv.values, pv.reasons, hpa, note, {}
    pv = planned_values(sc, hpa, params, packed)
    note = f"decide(forecastAndScale), model {packed.model}, q={v.quantile:g}, L={ctx.lead_seconds:g}s"
    return pv.values, pv.reasons, hpa, note, {}


def finish(base: np.ndarray, qps: float, headroom: float, tolerance: float) -> np.ndarray:
    """Stage 2: headroom and dead-band compensation, by ``decide`` itself (reactive mode on the base values)."""
    if headroom == 1.0 and tolerance <= 0:
        return base
    p = PolicyParams(mode="reactive", lead_seconds=0.0, quantile=0.5, qps_per_replica=qps, headroom=headroom,
                     hpa_tolerance=tolerance)
    return decide_array(base, np.zeros(len(base)), p, None).planned


def _knob_note(v: Variant, tolerance: float) -> str:
    """What a variant adds to its family's note: headroom, and compensation where it is not the family's habit."""
    note = f", x {v.headroom:g}" if v.headroom != 1.0 else ""
    if v.policy == "reactive" and tolerance > 0:
        note += ", pushed past the HPA dead band"
    elif v.policy != "reactive" and tolerance <= 0:
        note += ", no dead-band compensation"
    return note


def evaluate_batch(ctx: Context, batch: Sequence[tuple[Variant, bool]], packed: Packed | None,
                   target_miss: float | None = None) -> list[Evaluated]:
    """Replay configurations; ``(variant, keep_timeline)`` pairs, all of one model and quantile (or none).

    With ``target_miss``: also, per stage-1 value sequence and compensation setting in the batch, the
    cheapest headroom meeting it (``search``), as a variant marked ``searched`` (none where even the
    largest headroom misses more, or where the answer is one of the batch's own headroom values).
    """
    sc, qps = ctx.scenario, ctx.qps
    stage1: dict[tuple, tuple] = {}
    replayed: dict[tuple, Timeline] = {}
    out: list[Evaluated] = []
    groups: dict[tuple, tuple[Variant, list[tuple[float, Outcome]]]] = {}  # (k1, compensation) -> first, tried

    def replay(base: np.ndarray, hpa: Hpa, headroom: float, tol: float) -> Timeline:
        values = finish(base, qps, headroom, tol)
        key = (hpa, values.tobytes())
        if key not in replayed:
            replayed[key] = run_hpa(sc, values, hpa)
        return replayed[key]

    for v, keep in batch:
        if v.policy not in HPA_FAMILIES:
            out.append(baseline(ctx, v, keep))
            continue
        k1 = (v.policy, v.model, v.quantile, v.level_correction_seconds, v.floor_percentile, v.window_seconds, v.band)
        if k1 not in stage1:
            stage1[k1] = base_values(ctx, v, packed)
        base, reasons, hpa, note, extra = stage1[k1]
        tol = ctx.tolerance if v.compensation else 0.0
        tl = replay(base, hpa, v.headroom, tol)
        o = evaluate(sc, tl)
        groups.setdefault((k1, v.compensation), (v, []))[1].append((v.headroom, o))
        out.append(Evaluated(v, o, dict(reasons), note + _knob_note(v, tol), tl if keep else None, dict(extra)))
    if target_miss is None:
        return out
    for (k1, comp), (v0, tried) in groups.items():
        base, reasons, hpa, note, extra = stage1[k1]
        tol = ctx.tolerance if comp else 0.0
        found = search.cheapest_meeting(lambda h: evaluate(sc, replay(base, hpa, h, tol)), target_miss,
                                        seed=tuple(tried))
        if found is not None and all(abs(found.headroom - h) > 1e-9 for h, _ in tried):  # a grid point: nothing new
            v = replace(v0, headroom=float(found.headroom), searched=True)
            out.append(Evaluated(v, found.outcome, dict(reasons), note + _knob_note(v, tol) + ", searched",
                                 None, dict(extra)))
    return out


# --------------------------------------------------------------------------- the other families


def baseline(ctx: Context, v: Variant, keep: bool) -> Evaluated:
    """``scheduled``, ``keep_alive`` and ``oracle``."""
    sc, hpa, qps = ctx.scenario, ctx.hpa, ctx.qps
    if v.policy == "scheduled":
        weekly = ctx.train_seconds >= 7 * DAY
        prof = hour_profile(ctx.train_t, ctx.train_y, float(v.quantile), weekly)
        times = sc.t0 + sc.tick * value_ticks(sc.n, hpa, sc.tick)
        vals = np.maximum(prof[hour_slot(times, weekly)], prof[hour_slot(times + ctx.lead_seconds, weekly)])
        tl = run_hpa(sc, vals, hpa)
        note = (f"q{v.quantile:g} of each hour of the {'week' if weekly else 'day'} in the history, "
                f"{ctx.lead_seconds:g}s ahead, no observed floor")
    elif v.policy == "keep_alive":
        n = int(math.ceil(ctx.peak / qps - 1e-9)) if ctx.peak > 0 else 1
        tl = fixed_pool(sc, n)
        note = f"{n} replicas always ready (the simulated span's peak, in hindsight)"
    elif v.policy == "oracle":
        tl = oracle(sc)
        note = "perfect foresight, pods started exactly T_cold ahead, no HPA limits"
    else:
        raise ValueError(f"unknown policy family {v.policy!r}")
    return Evaluated(v, evaluate(sc, tl), {}, note, tl if keep else None)


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

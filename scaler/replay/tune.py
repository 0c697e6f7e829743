"""THE "tune one series" pipeline: the sweep, the targeted headroom search, the selection.

``forescale tune`` (``scaler.cli.tune``), the fleet (``scaler.fleet.jobs``) and the server's
``tuning: auto`` (``scaler.serve.tuning``) all call ``tune``; what they print, write or apply comes from
its ``Tuning`` through the family table (``families.to_spec`` -> ``specwrite.to_metadata``).

With a world in the settings (a node pool, cold-start phases, a queue: ``world.World``), every point is
replayed once more in it (``in_world``: the same KEDA/HPA values, the cluster's delays on top) and ranked on
those numbers, as ``backtest --advise`` ranks its options; with a P95 target only the points meeting it
may be selected.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence, cast

import numpy as np

from ..misstarget import MissTarget
from . import engine, families, frontier, variants
from .fitcache import FitCache
from .forecasts import Packed
from .hpa import Hpa
from .keda import run_hpa
from .plan import context_of
from .batches import base_values, baseline
from .policies import finish
from .world import live


@dataclass(frozen=True)
class Tuning:
    result: engine.Result
    selection: frontier.Selection

    @property
    def point(self) -> frontier.Point | None:
        return self.selection.point

    def deployment(self) -> dict:
        """The ``ScalerSpec`` fields of the selection (``families.deployment``); ValueError when there is none."""
        p = self.selection.point
        if p is None:
            raise ValueError(self.selection.message)
        return families.deployment(p.variant, tolerance=self.result.tolerance, extra=p.extra)


def tune(trace: engine.Trace, settings: engine.Settings, target_miss: float | MissTarget,
         max_cost_ratio: float | None = None, *, grid: variants.Grid | None = None, jobs: int | None = 1,
         progress: engine.Progress | None = None, families_allowed: Sequence[str] = families.SELECTABLE,
         fits: FitCache | None = None, accuracy: bool = True) -> Tuning:
    """Sweep every family of ``grid`` over its knobs on ``trace``, search each one's headroom for the cheapest
    value meeting ``target_miss`` and select the cheapest configuration meeting it within ``max_cost_ratio``
    (``frontier.select``). ``accuracy`` False: no accuracy table (``engine.run``; the selection does not read it).
    Raises ``engine.ReplayError`` for bad input."""
    grid = grid or variants.Grid()
    r = engine.run(trace, settings, variants.variants(grid, settings),
                   score=variants.accuracy_models(settings, grid.families), jobs=jobs, progress=progress,
                   target_miss=target_miss, fits=fits, accuracy=accuracy)
    pool = r.points
    if settings.holidays:  # replayed with and without the holiday handling: the selection chooses
        r = with_and_without_holidays(r, trace, settings, grid, jobs, progress, target_miss, fits, accuracy)
        pool = r.points
    if settings.world.active:
        pts, p95 = in_world(r)
        r = replace(r, points=pts)
        target = settings.world.p95_target_seconds
        pool = [p for p in pts if target is None or ((lat := p95.get(id(p))) is not None and lat <= target + 1e-9)]
    assert r.target_miss is not None  # resolved from tune's target_miss, never None
    sel = frontier.select(pool or r.points, r.target_miss, max_cost_ratio, families=families_allowed)
    return Tuning(r, sel)


NO_HOLIDAYS = "/no-holidays"  # suffix of a model's accuracy entry fitted without the holiday handling


def model_key(v: variants.Variant) -> str | None:
    """The ``Result.models`` key of the curves ``v`` was replayed on."""
    return None if v.model is None else v.model + (NO_HOLIDAYS if v.calendar is False else "")


def with_and_without_holidays(r: engine.Result, trace: engine.Trace, settings: engine.Settings,
                              grid: variants.Grid, jobs: int | None, progress: engine.Progress | None,
                              target_miss: float | MissTarget, fits: FitCache | None = None,
                              accuracy: bool = True) -> engine.Result:
    """``r`` (replayed with ``settings.holidays``) plus every forecast family's variants replayed once more with
    the holiday handling off (``Settings.holiday_handling``: the same days still split the accuracy), so the
    selection chooses whether it pays off for this workload: the forecast points marked ``calendar`` True (kept)
    or False (dropped), the Pareto flags over both, the models fitted without it under ``<model>/no-holidays``.
    Events (multipliers, floors) apply in both: they are the user's. The model-free families are not replayed
    twice (their points are the same either way)."""
    fams = tuple(f for f in grid.families if f in families.FORECAST_FAMILIES or f in (families.Family.PREDICTIVE,
                                                                                      families.Family.HYBRID))
    if not fams:
        return r
    off = engine.run(trace, replace(settings, holiday_handling=False),
                     variants.variants(replace(grid, families=fams), settings),
                     score=variants.accuracy_models(settings, fams), jobs=jobs, progress=progress,
                     target_miss=target_miss, fits=fits, accuracy=accuracy)

    def mark(p: frontier.Point, kept: bool) -> frontier.Point:
        if p.variant.model is None:
            return p
        return replace(p, variant=replace(p.variant, calendar=kept), default=p.default and kept)

    pts = [mark(p, True) for p in r.points] + [mark(p, False) for p in off.points if p.variant.model is not None]
    ranked = [i for i, p in enumerate(pts) if p.policy != families.Family.ORACLE]
    flags = frontier.pareto_flags([pts[i].miss for i in ranked], [pts[i].cost for i in ranked])
    for i, f in zip(ranked, flags):
        pts[i] = replace(pts[i], pareto=f)
    models = {**r.models, **{m + NO_HOLIDAYS: mr for m, mr in off.models.items()}}
    timing = {**r.timing, "no_holidays_seconds": off.timing.get("total_seconds", 0.0)}
    return replace(r, points=pts, models=models, timing=timing)


def answers(r: engine.Result, v: variants.Variant, ctx=None, packs: dict | None = None,
            stage1: dict | None = None) -> tuple[np.ndarray, Hpa]:
    """What KEDA gets from the HPA-driven configuration ``v`` of ``r`` at each of its calls (``hpa.value_ticks``),
    and the HPA that replays them: the family's stage 1 on ``r``'s curves, then headroom and the dead-band push
    (``policies.finish``), as the engine's batches compute them. ``ctx``, ``packs``, ``stage1``: shared between
    calls over one result (the stage 1 of a model and quantile is computed once)."""
    ctx = ctx if ctx is not None else context_of(r)
    packs = packs if packs is not None else {m: Packed.from_curves(m, mr.curves) for m, mr in r.models.items()
                                             if mr.curves}
    stage1 = stage1 if stage1 is not None else {}
    k1 = (v.policy, v.model, v.quantile, v.level_correction_seconds, v.floor_percentile, v.window_seconds, v.band,
          v.calendar)
    if k1 not in stage1:
        pk = packs.get(model_key(v)) if v.model is not None else None
        if pk is not None and v.quantile is not None:  # as the engine's batches: this quantile only
            pk = pk.only([v.quantile])
        stage1[k1] = base_values(ctx, v, pk)
    base, _, hpa, _, _ = stage1[k1]
    return finish(base, ctx.qps, v.headroom, ctx.tolerance if v.compensation else 0.0), hpa


def in_world(r: engine.Result) -> tuple[list[frontier.Point], dict[int, float | None]]:
    """``r``'s points replayed in its world (same values, the cluster and queue on top): the points with the
    world's outcomes (Pareto flags and cost ratios recomputed) and each one's P95 latency (by ``id``)."""
    W, sc, s = r.settings.world, r.scenario, r.settings
    ctx = context_of(r)
    packs = {m: Packed.from_curves(m, mr.curves) for m, mr in r.models.items() if mr.curves}
    stage1: dict = {}
    lived = []
    for p in r.points:
        v = p.variant
        if families.TABLE[v.policy].hpa:
            tl = run_hpa(sc, *answers(r, v, ctx, packs, stage1))
        else:
            kept = baseline(ctx, v, True).timeline
            assert kept is not None  # keep=True keeps it
            tl = kept
        lv = live(W, sc, tl, seed=s.seed)
        money = lv.money or {}
        usd = money.get("total_dollars", money.get("dollars"))  # GPUs (+ lost requests' value when given)
        lived.append((p, lv.outcome, lv.latency.p95_seconds if lv.latency is not None else None, usd))
    oracle_h = next((o.replica_hours for p, o, _, _ in lived if p.policy == families.Family.ORACLE), 0.0)
    ranked = [(p, o, usd) for p, o, _, usd in lived if p.policy != families.Family.ORACLE]
    by_usd = all(usd is not None for _, _, usd in ranked)  # priced pools: the frontier in dollars
    flags = dict(zip((id(p) for p, _, _ in ranked), frontier.pareto_flags(
        [o.underprovisioned_fraction for _, o, _ in ranked],
        [cast(float, usd) if by_usd else o.replica_hours for _, o, usd in ranked])))
    out, p95 = [], {}
    for p, o, lat, usd in lived:
        q = replace(p, outcome=o, cost_ratio=(o.replica_hours / oracle_h) if oracle_h > 0 else None,
                    pareto=flags.get(id(p), False), dollars=usd)
        out.append(q)
        p95[id(q)] = lat
    return out, p95

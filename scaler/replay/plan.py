"""``backtest --advise`` as a plan: each option's knobs searched on this trace, in the world, at the SLO.

Per option (``advice.CANDIDATES``), the knobs searched, every configuration replayed through the
same KEDA/HPA emulation (``policies``, ``hpa``) and the world (``world.live``: the node pool, the
queue, the scenarios), and the cheapest one meeting the SLO kept (none meets it: the one closest):

* keep-alive   the hot-pool size (``advice.hot_pool``: a binary search)
* scheduled    the schedule: the hourly profile of the history (UTC hour of the day) at quantile
               ``SCHEDULE_QUANTILES``, each hour's replicas started one lead time early: KEDA
               ``cron`` triggers, one window per hour, replayed as those windows run
* hybrid       the floor (``FLOOR_PERCENTILES`` of the history, whole replicas) x ``HEADROOMS``
* reactive     ``HEADROOMS`` (with and without dead-band compensation)
* predictive   ``HEADROOMS`` at the backtest's model, quantile and level correction

Each kept option carries a ``Deploy`` (what to print: a forescale trigger through the family table,
or the cron windows), and the paragraph says why with this trace's numbers (``facts``).
Pure: a ``Result`` in, an ``Advice`` out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from . import advice as adv
from .engine import Result
from .forecasts import Packed, slice_series
from .hpa import Hpa, value_ticks
from .keda import run_hpa
from .batches import base_values
from .policies import Context, finish, fixed_pool
from .scenario import Scenario
from .families import Family as F
from .variants import Variant, default_variant
from .world import World, live

HEADROOMS = (1.0, 1.1, 1.2, 1.3, 1.5, 2.0)
FLOOR_PERCENTILES = (10.0, 25.0, 50.0)
SCHEDULE_QUANTILES = (0.8, 0.9, 0.95, 0.99)


@dataclass(frozen=True)
class Facts:
    """This trace's numbers the paragraph argues with."""

    peak: float  # req/s, the simulated span's
    quiet: float  # req/s, the 10th percentile of its hourly means
    rise: float  # req/s: the largest increase of the demand within one lead time
    lead: float  # seconds
    qps: float  # per replica

    @property
    def rise_replicas(self) -> int:
        return int(math.ceil(self.rise / self.qps - 1e-9))


def context_of(r: Result) -> Context:
    """The replay context of ``r`` (what ``engine.run`` built: the scenario, the HPA, the history before the span)."""
    s, sc = r.settings, r.scenario
    series = r.trace.series
    train = slice_series(series, r.sim_start - s.history_seconds, r.sim_start)
    ok = np.isfinite(train.y)
    hpa = Hpa(target=r.qps_per_replica, min_replicas=s.min_replicas, max_replicas=s.max_replicas,
              tolerance_up=s.hpa_tolerance, activation_threshold=s.activation_threshold)
    upto = slice_series(series, float(series.t[0]), r.sim_end)
    span = slice_series(series, r.sim_start, r.sim_end).y
    peak = float(np.nanmax(span)) if np.isfinite(span).any() else 0.0  # as ``prepare.setup`` has it
    return Context(sc, hpa, r.qps_per_replica, r.lead.seconds, s.hpa_tolerance, train.t[ok], train.y[ok],
                   len(train) * series.step, peak, upto.t, upto.y, series.step, tuple(s.events))


def facts(r: Result) -> Facts:
    sc = r.scenario
    k = max(1, int(math.ceil(r.lead.seconds / sc.tick)))
    d = sc.demand
    rise = 0.0
    if d.size > k:
        ahead = sliding_window_view(d[1:], k).max(axis=1)  # the max over the next lead time, from each tick
        rise = max(0.0, float(np.max(ahead - d[:ahead.size])))
    hourly = _hourly(sc)
    quiet = float(np.percentile(hourly, 10)) if hourly.size else 0.0
    return Facts(float(d.max()), quiet, rise, r.lead.seconds, r.qps_per_replica)


def _hourly(sc: Scenario) -> np.ndarray:
    per = max(1, int(round(3600.0 / sc.tick)))
    k = sc.n // per
    return sc.demand[:k * per].reshape(k, per).mean(axis=1) if k else np.array([])


def plan(r: Result, world: World, *, target_miss: float) -> adv.Advice:
    """Every option at its cheapest searched configuration meeting the SLO (``advice.meets``), ranked by cost."""
    sc, s = r.scenario, r.settings
    p95_target = world.p95_target_seconds
    ctx = context_of(r)
    priced = world.placement is not None and world.placement.priced
    unit = adv.DOLLARS if priced else "GPU-node-hours" if world.pool is not None else "GPU-hours"
    slo = (f"P95 latency <= {p95_target:g} s" if p95_target is not None
           else f"missed requests <= {100 * target_miss:g} %")

    def option(policy: str, tl, deploy: adv.Deploy, detail: str, tried: int) -> adv.Option:
        lv = live(world, sc, tl, seed=s.seed)
        p95 = lv.latency.p95_seconds if lv.latency is not None else None
        o, m = lv.outcome, lv.metrics()
        hours = float(m["gpu_hours"] if priced else m.get("gpu_node_hours", o.replica_hours))
        cost = hours if not priced else float(m["total_dollars"] if "total_dollars" in m else m["dollars"])
        return adv.Option(policy, cost, o.underprovisioned_fraction, p95,
                          lv.latency.timed_out_fraction if lv.latency is not None else None,
                          adv.meets(o.underprovisioned_fraction, p95, target_miss, p95_target), detail, deploy, tried,
                          hours if priced else None)

    def best(cands: list[adv.Option]) -> adv.Option:
        ok = [o for o in cands if o.meets]
        if ok:
            return min(ok, key=lambda o: (o.cost, o.miss))
        return min(cands, key=lambda o: ((o.p95 if p95_target is not None and o.p95 is not None else 0.0), o.miss,
                                         o.cost))

    opts: list[adv.Option] = []
    n, _ = adv.hot_pool(sc, world, target_miss, p95_target, seed=s.seed)
    opts.append(option(F.KEEP_ALIVE, fixed_pool(sc, n),
                       adv.Deploy(Variant(F.REACTIVE), n, n), f"{n} replicas always ready", 1 + int(math.log2(max(n, 1)))))
    opts.append(best([scheduled(ctx, q, option) for q in SCHEDULE_QUANTILES]))
    packed = None
    if s.model in r.models and r.models[s.model].curves:
        packed = Packed.from_curves(s.model, r.models[s.model].curves)
    hpa_fams: list[tuple[str, list[Variant]]] = []
    comps = (False, True) if s.hpa_tolerance > 0 else (False,)
    hpa_fams.append((F.REACTIVE, [Variant(F.REACTIVE, headroom=h, compensation=c) for h in HEADROOMS for c in comps]))
    if packed is not None:
        dv = default_variant(F.PREDICTIVE, s)
        hpa_fams.append((F.HYBRID, [Variant(F.HYBRID, dv.model, dv.quantile, dv.level_correction_seconds, h,
                                            dv.compensation, f) for f in FLOOR_PERCENTILES for h in HEADROOMS]))
        hpa_fams.append((F.PREDICTIVE, [Variant(F.PREDICTIVE, dv.model, dv.quantile, dv.level_correction_seconds, h,
                                                dv.compensation) for h in HEADROOMS]))
    for fam, vs in hpa_fams:
        cands = []
        stage1: dict = {}
        for v in vs:
            k1 = (v.floor_percentile,)
            if k1 not in stage1:
                stage1[k1] = base_values(ctx, v, packed)
            base, _, hpa, _, extra = stage1[k1]
            tl = run_hpa(sc, finish(base, ctx.qps, v.headroom, ctx.tolerance if v.compensation else 0.0), hpa)
            lo = int(extra.get("minReplicaCount", s.min_replicas))
            cands.append(option(fam, tl, adv.Deploy(v, lo, max(s.max_replicas, lo), tuple(sorted(extra.items()))),
                                describe(v, extra), len(vs)))
        opts.append(best(cands))
    opts.sort(key=lambda x: (not x.meets, x.cost))
    pick = opts[0] if opts and opts[0].meets else None
    return adv.Advice(unit, slo, opts, pick, paragraph(opts, pick, facts(r), unit, slo, adv.days_of(sc), r))


def describe(v: Variant, extra: dict) -> str:
    parts = []
    if v.floor_percentile is not None:
        parts.append(f"floor {extra.get('floorReplicas', 0)} replicas (p{v.floor_percentile:g} of the history)")
    parts.append(f"headroom {v.headroom:g}")
    if v.policy == F.REACTIVE:
        parts.append("dead band compensated" if v.compensation else "dead band as KEDA has it")
    return ", ".join(parts)


def scheduled(ctx: Context, q: float, option: Callable) -> adv.Option:
    """The hourly profile at quantile ``q`` as KEDA cron windows: hour h's replicas from one lead time
    (rounded up to the minute) before h:00 until (h+1):00, UTC; the HPA takes the largest active window."""
    sc, qps = ctx.scenario, ctx.qps
    slot = np.floor(ctx.train_t / 3600.0).astype(np.int64) % 24
    ok = np.isfinite(ctx.train_y)
    overall = float(np.quantile(ctx.train_y[ok], q)) if ok.any() else 0.0
    prof = np.array([float(np.quantile(ctx.train_y[ok & (slot == h)], q)) if (ok & (slot == h)).any() else overall
                     for h in range(24)])
    need = np.ceil(prof / qps - 1e-9).astype(np.int64)
    lead_min = int(math.ceil(ctx.lead_seconds / 60.0 - 1e-9))
    times = sc.t0 + sc.tick * value_ticks(sc.n, ctx.hpa, sc.tick)
    now_h = np.floor(times / 3600.0).astype(np.int64) % 24
    next_h = np.floor((times + lead_min * 60.0) / 3600.0).astype(np.int64) % 24
    values = np.maximum(need[now_h], need[next_h]) * qps
    tl = run_hpa(sc, values, ctx.hpa)
    cron = []
    for h in range(24):
        if need[h] <= 0:
            continue
        start = (h * 60 - lead_min) % 1440
        cron.append((f"{start % 60} {start // 60} * * *", f"0 {(h + 1) % 24} * * *", int(need[h])))
    lo = ctx.hpa.min_replicas
    return option(F.SCHEDULED, tl, adv.Deploy(None, lo, max(ctx.hpa.max_replicas, lo), (), tuple(cron)),
                  f"hourly q{q:g} of the history, {int(need.min())}..{int(need.max())} replicas, "
                  f"{lead_min} min early", len(SCHEDULE_QUANTILES))


def paragraph(opts: list[adv.Option], pick: adv.Option | None, f: Facts, unit: str, slo: str, days: float,
              r: Result) -> str:
    """Why, in this trace's numbers: its shape, what each option's searched knobs cost, the runner-up's gap."""
    shape = (f"Over these {days:.3g} day(s) the demand peaks at {f.peak:.4g} req/s ({math.ceil(f.peak / f.qps - 1e-9)} "
             f"replicas of {f.qps:g}), its quiet hours run at {f.quiet:.4g} req/s, and it rises by up to "
             f"{f.rise:.4g} req/s ({f.rise_replicas} replicas) within one lead time of {f.lead:g} s.")
    by = {o.policy: o for o in opts}
    if pick is None:
        closest = min(opts, key=lambda o: o.miss) if opts else None
        return (f"{shape} None of the candidates meets {slo} at any knob value searched; the closest is "
                f"{adv.LABELS.get(closest.policy, closest.policy) if closest else '-'} "
                f"({closest.detail if closest else ''}: missed {100 * closest.miss if closest else 0:.3f} %). Loosen "
                f"the SLO or shorten the cold start (--prepull, a node cache).")
    why = {
        F.KEEP_ALIVE: (f"a fixed pool of {pick.detail.split()[0]} replicas is cheaper than any scaling option here: the "
                       f"peak is only {f.peak / max(f.quiet, 1e-9):.3g}x the quiet hours"),
        F.SCHEDULED: (f"the days repeat closely enough that a fixed schedule ({pick.detail}) meets it without "
                      f"following the load"),
        F.HYBRID: (f"its floor ({pick.detail}) keeps the quiet-hour load of {f.quiet:.4g} req/s warm and absorbs "
                   f"the forecast's misses, while the {f.rise:.4g} req/s rises are started a lead time ahead"),
        F.REACTIVE: (f"the load's largest rise within a lead time, {f.rise_replicas} replicas, is small enough for "
                     f"following the observed rate ({pick.detail})"),
        F.PREDICTIVE: (f"the forecast starts the {f.rise_replicas} replicas a lead-time rise needs before it arrives "
                       f"({pick.detail})"),
    }[pick.policy]
    ka = by.get(F.KEEP_ALIVE)
    if pick.policy != F.KEEP_ALIVE and ka is not None and ka.cost > 0:
        why += f"; {100 * (1 - pick.cost / ka.cost):.0f} % less than a hot pool of {ka.detail.split()[0]} replicas"
    react = by.get(F.REACTIVE)
    if pick.policy != F.REACTIVE and react is not None and not react.meets:
        why += (f"; reactive, even at its best searched setting ({react.detail}), misses "
                f"{100 * react.miss:.3f} %" + (f" with P95 {react.p95:.3g} s" if react.p95 is not None else ""))
    runner = [o for o in opts if o is not pick]
    nxt = ""
    if runner:
        o = runner[0]
        gap = f"{100 * (o.cost / pick.cost - 1):+.0f} %" if pick.cost > 0 else ""
        nxt = (f" Runner-up: {adv.LABELS.get(o.policy, o.policy)} ({o.detail}) at {adv.amount(o.cost, unit)} ({gap})"
               + ("" if o.meets else f", which does not meet it (missed {100 * o.miss:.3f} %)") + ".")
    return (f"{shape} At this SLO, pick {adv.LABELS.get(pick.policy, pick.policy)} ({pick.detail}): it meets {slo} at "
            f"{adv.amount(pick.cost, unit)}, because {why}.{nxt}")

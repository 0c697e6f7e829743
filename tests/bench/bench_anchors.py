"""forescale against re-implemented published autoscalers, on real traces it was never tuned for.

Per trace (T_cold 180 s, the last 7 days simulated, minReplicaCount 1, HPA
tolerance 0.1, maxReplicaCount 1000, refit every 2 h, history 14 d, ``tune``'s grid plus the
targeted headroom search at 0.2x reactive's miss), prints:

* reactive's miss; the goal (0.2x reactive); the oracle's replica-hours;
* each anchor family's best point at <= 1.15x the oracle (lowest miss), and forescale's (selectable families);
* ``tune``'s choice at the goal, whether any anchor point dominates it, and the cheapest point of any
  family meeting the goal;
* the out-of-the-box policy (Prophet q0.9, level correction 4 h): miss and cost ratio, and whether it
  halves reactive's miss at <= 1.3x;
* window-max vs pointwise bands (predictive, level correction 4 h): the cheapest point meeting the goal;
* forecast accuracy at horizon L of prophet, mstl, ets, seasonal_naive and linear_trend, and fit seconds;

then the default chosen by measurement: of the configurations swept on every
trace, the one whose worst regret (distance to the trace's own frontier: the
larger of the extra cost at equal miss, in oracle replica-hours, and the
extra miss at equal cost, in reactive's miss) is smallest among those that halve reactive's miss at <= 1.3x on the most traces;
and the speed ratio per variant of the new sweep against the families of
before (no anchors, no window band, no search), on the 21-day trace.

Run (long: about an hour on 2 busy cores): ``.venv/bin/python tests/bench/bench_anchors.py [--jobs 2] [--only NAME]``
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support.shared_traces import DAY, TRACE_SPECS, load, settings_for  # noqa: E402

ANCHORS = ("envelope", "aws_like", "mimir_like")
SCORE = ("prophet", "seasonal_naive", "linear_trend", "mstl", "ets")

def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f} %"


def pt(p) -> str:
    return "-" if p is None else f"{100 * p.miss:.2f} % at {p.cost_ratio:.2f}x ({p.label})"


def dominated_by(p, others) -> list:
    return [o for o in others if o.miss <= p.miss and o.cost <= p.cost and (o.miss < p.miss or o.cost < p.cost)]


def one_trace(name, rel, qps, days, jobs):
    from scaler.replay import engine, frontier, variants

    tr = load(name, rel, days)
    s = settings_for(qps)
    base = engine.run(tr, s, [variants.default_variant("reactive", s)])
    reactive = next(p for p in base.points if p.policy == "reactive")
    goal = 0.2 * reactive.miss
    t0 = time.perf_counter()
    r = engine.run(tr, s, variants.variants(variants.Grid(), s), score=SCORE, jobs=jobs, target_miss=goal)
    wall = time.perf_counter() - t0
    pts = [p for p in r.points if p.policy != "oracle"]
    best = {}
    for fam in ANCHORS:
        ok = [p for p in pts if p.policy == fam and p.cost_ratio <= 1.15]
        best[fam] = min(ok, key=lambda p: (p.miss, p.cost)) if ok else None
    mine = [p for p in pts if p.selectable]
    ok = [p for p in mine if p.cost_ratio <= 1.15]
    best["forescale"] = min(ok, key=lambda p: (p.miss, p.cost)) if ok else None
    sel = frontier.select(r.points, goal)
    meeting = [p for p in pts if p.miss <= goal]
    cheapest_any = min(meeting, key=lambda p: p.cost) if meeting else None
    anchors_pts = [p for p in pts if p.policy in ANCHORS]
    dom = dominated_by(sel.point, anchors_pts) if sel.point is not None else []
    oob = next(p for p in pts if p.policy == "predictive" and p.default)
    bands = {}
    for band in (None, "window"):
        c = [p for p in pts if p.policy == "predictive" and p.variant.band == band and p.miss <= goal
             and p.variant.level_correction_seconds == s.level_correction_seconds]
        bands[band or "pointwise"] = min(c, key=lambda p: p.cost) if c else None
    out = {"name": name, "reactive": reactive.miss, "goal": goal, "oracle_h": r.oracle_hours, "best": best,
           "sel": sel, "cheapest_any": cheapest_any, "dominated_by": dom, "oob": oob, "bands": bands,
           "wall": wall, "variants": len(r.points), "searched": sum(p.variant.searched for p in r.points),
           "models": {m: (mr.scores, mr.seconds, mr.fits) for m, mr in r.models.items()}, "points": r.points}
    return out


def report(o) -> None:
    print(f"\n== {o['name']}: reactive {pct(o['reactive'])}, goal {pct(o['goal'])}, oracle {o['oracle_h']:.1f} "
          f"replica-h; {o['variants']} points ({o['searched']} searched) in {o['wall']:.0f} s")
    for fam in (*ANCHORS, "forescale"):
        print(f"   best at <= 1.15x  {fam:<10} {pt(o['best'][fam])}")
    sel = o["sel"]
    print(f"   tune at the goal   {pt(sel.point)} -> {'met' if sel.met else 'NOT MET'}")
    print(f"   dominated by an anchor point: {'no' if not o['dominated_by'] else pt(o['dominated_by'][0])}")
    print(f"   cheapest meeting the goal (any family): {pt(o['cheapest_any'])}")
    oob = o["oob"]
    ok = oob.miss <= 0.5 * o["reactive"] and oob.cost_ratio <= 1.3
    print(f"   out of the box     {pt(oob)} -> {'halves reactive at <= 1.3x' if ok else 'FAILS half-at-1.3x'}")
    for b, p in o["bands"].items():
        print(f"   band {b:<10} cheapest predictive (lc 4h) meeting the goal: {pt(p)}")
    print(f"   {'model':<15}{'MASE':>7}{'WAPE':>7}{'pinball':>10}{'cover':>7}{'fit s':>8}")
    for m, (sc, sec, fits) in o["models"].items():
        f = lambda x: "-" if x is None or not math.isfinite(x) else f"{x:.3f}"  # noqa: E731
        print(f"   {m:<15}{f(sc.get('mase')):>7}{f(sc.get('wape')):>7}{f(sc.get('pinball')):>10}"
              f"{f(sc.get('coverage')):>7}{sec:>8.1f}")


def regret(p, pts, reactive_miss: float, oracle_h: float) -> float:
    """Distance of ``p`` to the frontier of ``pts``, in the trace's own scales: the larger of the extra cost
    over the cheapest point missing no more (in oracle replica-hours) and the extra miss over the best point
    costing no more (in reactive's miss). 0 on the frontier."""
    c_at = min((q.cost for q in pts if q.miss <= p.miss), default=p.cost)
    m_at = min((q.miss for q in pts if q.cost <= p.cost), default=p.miss)
    return max((p.cost - c_at) / oracle_h, (p.miss - m_at) / reactive_miss if reactive_miss > 0 else 0.0)


def choose_default(results) -> None:
    from scaler.replay import families

    common = None
    for o in results:
        keys = {p.variant for p in o["points"] if p.selectable and not p.variant.searched}
        common = keys if common is None else common & keys
    rows = []
    for v in common or ():
        worst, fails = 0.0, 0
        for o in results:
            pts = [p for p in o["points"] if p.policy != "oracle"]
            p = next(q for q in pts if q.variant == v)
            worst = max(worst, regret(p, pts, o["reactive"], o["oracle_h"]))
            fails += not (p.miss <= 0.5 * o["reactive"] and p.cost_ratio <= 1.3)
        rows.append((fails, worst, v))
    rows.sort(key=lambda r: (r[0], r[1]))
    print("\n== the default by measurement: fewest traces failing 'half of reactive's miss at <= 1.3x', then the "
          "smallest worst regret to each trace's frontier")
    for fails, worst, v in rows[:8]:
        print(f"   {families.label(v):<48} fails on {fails} of {len(results)}, worst regret {worst:.3f}")
    cur = [r for r in rows if r[2].policy == "predictive" and r[2].quantile == 0.9 and r[2].headroom == 1.0
           and r[2].level_correction_seconds == 14400.0 and r[2].band is None and r[2].compensation]
    for fails, worst, v in cur:
        print(f"   today's default: {families.label(v):<32} fails on {fails}, worst regret {worst:.3f}")


def speed(jobs) -> None:
    from scaler.cli import traces
    from forecaster.base import Series
    from scaler.replay import engine, variants

    tr = traces.bundled_trace()
    s0 = tr.series
    keep = s0.t >= s0.t[-1] + s0.step - 21 * DAY
    tr = replace(tr, series=Series(s0.t[keep], s0.y[keep], s0.step), name="worldcup98 (bundled), last 21 d")
    s = engine.Settings(span_seconds=7 * DAY, refit_seconds=7200.0)
    old = variants.Grid(families=tuple(f for f in variants.FAMILIES if f not in ANCHORS), window_band_quantiles=())
    new = variants.Grid()
    res = {}
    for label, grid, target in (("before (no anchors, no window band, no search)", old, None),
                                ("now (anchors, window band, search at 0.5 %)", new, 0.005)):
        vs = variants.variants(grid, s)
        t0 = time.perf_counter()
        r = engine.run(tr, s, vs, score=variants.accuracy_models(s, grid.families), jobs=jobs, target_miss=target)
        wall = time.perf_counter() - t0
        res[label] = (wall, len(r.points))
        print(f"   {label:<50} {wall:7.1f} s, {len(r.points)} points, {wall / len(r.points):.2f} s per point")
    (w0, n0), (w1, n1) = res.values()
    print(f"   ratio per point (now / before): {(w1 / n1) / (w0 / n0):.2f}  (total {w1 / w0:.2f}x)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default=None, help="one trace name (substring)")
    ap.add_argument("--no-speed", action="store_true")
    a = ap.parse_args()
    from scaler.replay.forecasts import quiet_prophet_import

    quiet_prophet_import()
    import logging

    logging.getLogger("cmdstanpy").setLevel(logging.WARNING)
    results = []
    for spec in TRACE_SPECS:
        if a.only and a.only not in spec[0]:
            continue
        o = one_trace(*spec, a.jobs)
        report(o)
        results.append(o)
        sys.stdout.flush()
    if len(results) > 1:
        choose_default(results)
    if not a.no_speed:
        print("\n== speed, sweep of the last 21 days of the bundled trace (7 d simulated, refit 2 h)")
        speed(a.jobs)


if __name__ == "__main__":
    main()

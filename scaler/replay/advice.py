"""``backtest --advise``: which way of keeping GPUs is cheapest at the user's SLO, from their own trace.

Candidates: keep-alive (the smallest always-ready pool that meets the SLO,
searched here), scheduled (peak/off-peak from the history's daily profile),
hybrid (a hot floor plus a cold burst; with ``--timeout`` as its maximum wait
the requests past it are the degraded ones), reactive and predictive (the
family defaults the backtest replayed). Cost: GPU-node-hours with a node pool,
else GPU-hours (one GPU per replica). The SLO: P95 latency at or below the
target when one is given, else missed requests at or below ``target_miss``.
Pure: the numbers in, a ranking and a paragraph out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .policies import fixed_pool
from .scenario import DAY, Scenario
from .variants import Variant
from .world import World, live

CANDIDATES = ("keep_alive", "scheduled", "hybrid", "reactive", "predictive")
LABELS = {"keep_alive": "keep-alive hot pool", "scheduled": "scheduled peak/off-peak",
          "hybrid": "hybrid hot floor + cold burst", "reactive": "reactive (the observed rate)",
          "predictive": "predictive (forescale)"}


@dataclass(frozen=True)
class Deploy:
    """What runs an option on a cluster: a forescale trigger running ``variant`` (with ``extra``: hybrid's floor),
    or KEDA ``cron`` windows; and the ScaledObject's replica bounds."""

    variant: Variant | None
    min_replicas: int
    max_replicas: int
    extra: tuple[tuple[str, object], ...] = ()
    cron: tuple[tuple[str, str, int], ...] = ()  # (start, end, desiredReplicas), cron expressions in UTC


@dataclass(frozen=True)
class Option:
    policy: str
    cost: float  # GPU-node-hours (or GPU-hours without a pool)
    miss: float
    p95: float | None
    timed_out: float | None
    meets: bool
    detail: str = ""
    deploy: Deploy | None = None  # set by ``plan`` (the searched knobs, ready to print)
    tried: int = 1  # configurations of this option evaluated


@dataclass(frozen=True)
class Advice:
    unit: str
    slo: str
    options: list[Option]  # cheapest meeting the SLO first, then the others by cost
    pick: Option | None
    paragraph: str

    @property
    def runner_up(self) -> Option | None:
        rest = [o for o in self.options if o is not self.pick]
        return rest[0] if self.pick is not None and rest else None


def _cost(world_metrics: Mapping, replica_hours: float) -> float:
    return float(world_metrics.get("gpu_node_hours", replica_hours))


def meets(miss: float, p95: float | None, target_miss: float, p95_target: float | None) -> bool:
    if p95_target is not None:
        return p95 is not None and p95 <= p95_target + 1e-9
    return miss <= target_miss + 1e-12


def hot_pool(sc: Scenario, world: World, target_miss: float, p95_target: float | None) -> tuple[int, object]:
    """The smallest always-ready pool meeting the SLO (binary search: more replicas never miss more)."""
    peak = int(math.ceil(float(sc.demand.max()) / sc.qps_per_replica - 1e-9)) if sc.demand.size else 1
    lo, hi = 1, max(1, peak)

    def ok(n: int):
        lv = live(world, sc, fixed_pool(sc, n))
        p95 = lv.latency.p95_seconds if lv.latency is not None else None
        return meets(lv.outcome.underprovisioned_fraction, p95, target_miss, p95_target), lv

    _, best = ok(hi)  # the peak pool; if even it misses the SLO it is the answer that comes closest
    while lo < hi:
        mid = (lo + hi) // 2
        m_ok, lv = ok(mid)
        if m_ok:
            hi, best = mid, lv
        else:
            lo = mid + 1
    return hi, best


def advise(policies: Mapping[str, object], sc: Scenario, world: World, *, target_miss: float,
           days: float) -> Advice:
    """``policies``: the backtest's PolicyRun per family (outcome, world metrics, note)."""
    p95_target = world.p95_target_seconds
    unit = "GPU-node-hours" if world.pool is not None else "GPU-hours"
    slo = (f"P95 latency <= {p95_target:g} s" if p95_target is not None
           else f"missed requests <= {100 * target_miss:g} %")
    opts: list[Option] = []
    n, lv = hot_pool(sc, world, target_miss, p95_target)
    p95 = lv.latency.p95_seconds if lv.latency is not None else None
    opts.append(Option("keep_alive", _cost(lv.metrics(), lv.outcome.replica_hours), lv.outcome.underprovisioned_fraction,
                       p95, lv.latency.timed_out_fraction if lv.latency is not None else None,
                       meets(lv.outcome.underprovisioned_fraction, p95, target_miss, p95_target),
                       f"{n} replicas always ready"))
    for name in CANDIDATES[1:]:
        p = policies.get(name)
        if p is None:
            continue
        o, w = p.outcome, p.world
        p95 = w.get("p95_latency_seconds")
        detail = ""
        if name == "hybrid" and world.timeout_seconds is not None:
            detail = (f"{100 * w.get('timed_out_fraction', 0.0):.3g} % of requests wait past "
                      f"{world.timeout_seconds:g} s (degraded)")
        opts.append(Option(name, _cost(w, o.replica_hours), o.underprovisioned_fraction, p95,
                           w.get("timed_out_fraction"), meets(o.underprovisioned_fraction, p95, target_miss, p95_target),
                           detail))
    opts.sort(key=lambda x: (not x.meets, x.cost))
    pick = opts[0] if opts and opts[0].meets else None
    return Advice(unit, slo, opts, pick, paragraph(opts, pick, sc, unit, slo, days))


def paragraph(opts: list[Option], pick: Option | None, sc: Scenario, unit: str, slo: str, days: float) -> str:
    """One paragraph: which to pick and why, from the trace's own shape."""
    hourly = _hourly(sc)
    shape = ""
    if hourly.size >= 2 and hourly.max() > 0:
        lo_h = float(np.percentile(hourly, 10))
        ratio = float(hourly.max()) / lo_h if lo_h > 0 else math.inf
        shape = (f"Your traffic's busiest hour carries {ratio:.3g}x its quiet hours (10th percentile)"
                 if math.isfinite(ratio) else "Your traffic drops to nothing in its quiet hours")
        shape += "; " if pick is not None else ". "
    by = {o.policy: o for o in opts}
    ka = by.get("keep_alive")
    if pick is None:
        cheapest = min(opts, key=lambda o: o.miss) if opts else None
        return (f"{shape}none of the candidates meets {slo} over these {days:.3g} days as replayed; the closest is "
                f"{LABELS.get(cheapest.policy, cheapest.policy) if cheapest else '-'}. Loosen the SLO, add "
                f"headroom (forescale tune searches the knobs), or shorten the cold start (--prepull, a node cache).")
    saving = ""
    if ka is not None and pick.policy != "keep_alive" and ka.cost > 0:
        saving = f", {100 * (1 - pick.cost / ka.cost):.0f} % less than a keep-alive hot pool ({ka.detail}, {ka.cost:.1f})"
    why = {
        "keep_alive": "the load is too flat or the cold start too long for scaling to pay: keep the pool hot",
        "scheduled": "the daily pattern is regular enough that a fixed peak/off-peak schedule follows it",
        "hybrid": "a small always-warm floor absorbs the surprises the forecast misses, the burst above it scales",
        "reactive": "the load moves slowly against the cold start, so following it is enough",
        "predictive": "the forecast starts the pods a cold start ahead of the load, which reacting cannot",
    }[pick.policy]
    others = [o for o in opts if o.meets and o is not pick]
    runner = (f" Next: {LABELS.get(others[0].policy, others[0].policy)} at {others[0].cost:.1f}."
              if others else " No other candidate meets it.")
    return (f"{shape}pick {LABELS.get(pick.policy, pick.policy)}: it meets {slo} at {pick.cost:.1f} {unit} over "
            f"{days:.3g} days{saving}, because {why}.{runner}")


def _hourly(sc: Scenario) -> np.ndarray:
    per = max(1, int(round(3600.0 / sc.tick)))
    k = sc.n // per
    if k == 0:
        return np.array([])
    return sc.demand[:k * per].reshape(k, per).mean(axis=1)


def days_of(sc: Scenario) -> float:
    return sc.n * sc.tick / DAY

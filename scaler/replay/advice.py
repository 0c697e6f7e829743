"""``backtest --advise``: which way of keeping GPUs is cheapest at the user's SLO, from their own trace.

The pieces: the candidates, an option and its ``Deploy`` (what to print), the SLO test, the smallest hot
pool. The search over each option's knobs and the paragraph are ``plan`` (``plan.plan``). Candidates:
keep-alive, scheduled (an hourly schedule as KEDA cron windows), hybrid (a hot floor plus a cold burst;
with ``--timeout`` as its maximum wait the requests past it are the degraded ones), reactive and
predictive. Cost: dollars with priced GPU pools (``--pools``: the pools' bills, plus the lost requests' value
when one is given), else GPU-node-hours with a node pool, else GPU-hours (one GPU per replica); with dollars each
option's GPU-hours are kept beside them. The SLO: P95
latency at or below the target when one is given, else missed requests at or below ``target_miss``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .policies import fixed_pool
from .scenario import DAY, Scenario
from .variant import Variant
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
    cost: float  # in the advice's unit: dollars (priced pools), GPU-node-hours (a node pool) or GPU-hours
    miss: float
    p95: float | None
    timed_out: float | None
    meets: bool
    detail: str = ""
    deploy: Deploy | None = None  # set by ``plan`` (the searched knobs, ready to print)
    tried: int = 1  # configurations of this option evaluated
    gpu_hours: float | None = None  # with dollars as the unit: the GPU-hours billed, beside them


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

    def amount(self, cost: float) -> str:
        """``cost`` in the advice's unit, as the table and the paragraph print it."""
        return amount(cost, self.unit)


DOLLARS = "dollars"


def amount(cost: float, unit: str) -> str:
    """``$1,234`` for dollars, ``123.4 GPU-hours`` otherwise."""
    return f"${cost:,.0f}" if unit == DOLLARS else f"{cost:.1f} {unit}"


def meets(miss: float, p95: float | None, target_miss: float, p95_target: float | None) -> bool:
    if p95_target is not None:
        return p95 is not None and p95 <= p95_target + 1e-9
    return miss <= target_miss + 1e-12


def hot_pool(sc: Scenario, world: World, target_miss: float, p95_target: float | None, *,
             seed: int = 0) -> tuple[int, object]:
    """The smallest always-ready pool meeting the SLO (binary search: more replicas never miss more)."""
    peak = int(math.ceil(float(sc.demand.max()) / sc.qps_per_replica - 1e-9)) if sc.demand.size else 1
    lo, hi = 1, max(1, peak)

    def ok(n: int):
        lv = live(world, sc, fixed_pool(sc, n), seed=seed)
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


def days_of(sc: Scenario) -> float:
    return sc.n * sc.tick / DAY

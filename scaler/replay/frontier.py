"""The miss-vs-cost plane: points, the Pareto frontier, and the selection ``tune`` and ``tuning: auto`` make."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .scenario import Outcome
from . import families
from .families import SELECTABLE, is_selectable
from .variant import Variant

COST_TIE = 0.005  # costs within 0.5 % count as equal in the selection


@dataclass(frozen=True)
class Point:
    """One configuration on the miss-vs-cost plane."""

    variant: Variant
    outcome: Outcome
    cost_ratio: float | None  # replica-hours / oracle's
    pareto: bool
    default: bool  # the configuration `forescale backtest` runs for this family
    extra: dict = field(default_factory=dict)

    @property
    def policy(self) -> str:
        return self.variant.policy

    @property
    def label(self) -> str:
        """The configuration as tables and reports name it (``families.label``)."""
        return families.label(self.variant)

    @property
    def miss(self) -> float:
        return self.outcome.underprovisioned_fraction

    @property
    def cost(self) -> float:
        return self.outcome.replica_hours

    @property
    def selectable(self) -> bool:
        return is_selectable(self.variant)

    def knobs(self, tolerance: float) -> dict:
        """The knob values in the trigger metadata's vocabulary (JSON-able; ``families.knobs``)."""
        return families.knobs(self.variant, tolerance, self.extra)


def pareto_flags(miss: Sequence[float], cost: Sequence[float]) -> list[bool]:
    """True for the points no other point dominates (<= on both, < on one): minimise both."""
    m = np.asarray(miss, dtype=float)
    c = np.asarray(cost, dtype=float)
    out = []
    for i in range(len(m)):
        dom = (m <= m[i]) & (c <= c[i]) & ((m < m[i]) | (c < c[i]))
        out.append(not bool(dom.any()))
    return out


@dataclass(frozen=True)
class Selection:
    point: Point | None
    met: bool  # the target miss (and the cost cap) is met
    target_miss: float
    max_cost_ratio: float | None
    message: str


def select(points: Sequence[Point], target_miss: float, max_cost_ratio: float | None = None, *,
           families: Sequence[str] = SELECTABLE) -> Selection:
    """The cheapest configuration whose miss is <= ``target_miss`` (and cost ratio <= ``max_cost_ratio``).

    Only configurations no other feasible one dominates (misses less for no
    more cost) are considered. Costs within 0.5 % count as equal; then the
    simpler configuration wins
    (family order of ``SELECTABLE``, then without holiday handling before with it, then smaller headroom, no compensation
    before compensation, lower quantile), then the lower miss. When nothing
    meets the target: the lowest-miss configuration within the cost cap (or
    overall when there is no cap or nothing is within it), ``met`` False.
    """
    cands = [p for p in points if p.policy in families and p.selectable]
    if not cands:
        return Selection(None, False, target_miss, max_cost_ratio, "no selectable configuration was swept")
    within_cap = [p for p in cands if max_cost_ratio is None or (p.cost_ratio is not None and p.cost_ratio <= max_cost_ratio + 1e-12)]
    feasible = [p for p in within_cap if p.miss <= target_miss + 1e-15]
    cap_txt = "" if max_cost_ratio is None else f" and cost <= {max_cost_ratio:g}x oracle"
    if feasible:
        # a dominated point is never the answer: among the non-dominated feasible ones, the cheapest
        flags = pareto_flags([p.miss for p in feasible], [p.cost for p in feasible])
        front = [p for p, f in zip(feasible, flags) if f]
        cheapest = min(p.cost for p in front)
        tied = [p for p in front if p.cost <= cheapest * (1 + COST_TIE) + 1e-12]
        best = min(tied, key=lambda p: (_simplicity(p), p.miss, p.cost))
        return Selection(best, True, target_miss, max_cost_ratio,
                         f"cheapest configuration with missed requests <= {100 * target_miss:g} %{cap_txt}")
    pool = within_cap or cands
    best = min(pool, key=lambda p: (p.miss, p.cost, _simplicity(p)))
    if within_cap:
        why = (f"no configuration meets the target (missed requests <= {100 * target_miss:g} %{cap_txt}); "
               f"this is the lowest miss {'within the cost cap' if max_cost_ratio is not None else 'found'}")
    else:
        why = (f"no configuration is within the cost cap ({max_cost_ratio:g}x oracle); this is the lowest miss "
               f"found, at {best.cost_ratio or float('nan'):.2f}x")
    return Selection(best, False, target_miss, max_cost_ratio, why)


def _simplicity(p: Point) -> tuple:
    v = p.variant
    order = [n for n, f in families.TABLE.items() if f.selectable]  # the table's order: simplest first
    return (order.index(v.policy), v.calendar is True, v.headroom, v.compensation, v.quantile or 0.0,
            v.level_correction_seconds or 0.0, v.floor_percentile or 0.0, v.window_seconds or 0.0)

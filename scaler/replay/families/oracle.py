"""``oracle``: perfect foresight, every pod started exactly T_cold before it is needed, no HPA limits: the cost
reference (cost_ratio 1), never Pareto-ranked nor selected."""

from __future__ import annotations

import numpy as np

from ..policies import Context
from ..scenario import Scenario, Timeline
from ..variant import Variant
from .base import PolicyFamily


class Oracle(PolicyFamily):
    name = "oracle"
    hpa = False

    def timeline(self, ctx: Context, v: Variant) -> tuple[Timeline, str]:
        return oracle(ctx.scenario), "perfect foresight, pods started exactly T_cold ahead, no HPA limits"


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


FAMILY = Oracle()

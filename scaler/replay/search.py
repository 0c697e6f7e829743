"""Targeted tuning: along a family's monotone knob, the cheapest value that meets a miss target.

The knob searched is the margin every HPA-driven family shares: ``headroom``
(the multiplier on the value KEDA gets, >= 1). More headroom never asks for
fewer replicas, so the miss falls and the cost rises with it (up to the HPA's
integer steps, which is why the answer is the cheapest *evaluated* value
that meets the target, not the last bisection point). The search runs on one
stage-1 value sequence (a family at one quantile, level correction, window,
floor: ``policies.base_values``), which every step reuses; a step is only
stage 2 and the HPA replay.

1. headroom 1 meets the target: that is the answer (the knob cannot go lower);
2. else the upper bracket grows (1.05, 1.1, 1.2, 1.4, 1.8, 2.6, 4.2) until the target is met (never: no answer);
3. then bisection (on log headroom) until the best value found misses at least ``1 - TOLERANCE``
   of the target, or the bracket is narrower than ``RESOLUTION``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from .scenario import Outcome

TOLERANCE = 0.05  # stop once the miss is within 5 % below the target
RESOLUTION = 0.002  # relative width of the headroom bracket at which bisection stops
MAX_HEADROOM = 4.2
MAX_STEPS = 24


@dataclass(frozen=True)
class Found:
    headroom: float
    outcome: Outcome
    tried: tuple[tuple[float, Outcome], ...]  # every headroom evaluated, in order


def cheapest_meeting(evaluate: Callable[[float], Outcome], target_miss: float, *,
                     seed: tuple[tuple[float, Outcome], ...] = ()) -> Found | None:
    """The cheapest headroom whose replay misses at most ``target_miss`` (None: not even ``MAX_HEADROOM``).

    ``evaluate(headroom) -> Outcome``; ``seed``: outcomes already known (the grid's headrooms), counted as tried.
    """
    tried: dict[float, Outcome] = {round(h, 9): o for h, o in seed}

    def f(h: float) -> Outcome:
        k = round(h, 9)
        if k not in tried:
            tried[k] = evaluate(h)
        return tried[k]

    def ok(o: Outcome) -> bool:
        return o.underprovisioned_fraction <= target_miss + 1e-15

    def best() -> tuple[float, Outcome] | None:
        good = [(o.replica_hours, h, o) for h, o in tried.items() if ok(o)]
        if not good:
            return None
        c, h, o = min(good, key=lambda x: (x[0], x[1]))
        return h, o

    def done(o: Outcome) -> bool:
        return o.underprovisioned_fraction >= (1 - TOLERANCE) * target_miss

    lo = 1.0
    if ok(f(lo)):
        h, o = best()  # type: ignore[misc]
        return Found(h, o, tuple(tried.items()))
    hi = None
    for h in (1.05, 1.1, 1.2, 1.4, 1.8, 2.6, MAX_HEADROOM):
        if ok(f(h)):
            hi = h
            break
        lo = h
    if hi is None:
        return None
    steps = 0
    while steps < MAX_STEPS and hi / lo - 1 > RESOLUTION and not done(f(hi)):
        mid = round(math.sqrt(lo * hi), 4)  # a value the trigger metadata prints exactly
        if not lo < mid < hi:
            break
        if ok(f(mid)):
            hi = mid
        else:
            lo = mid
        steps += 1
    h, o = best()  # type: ignore[misc]
    return Found(h, o, tuple(tried.items()))

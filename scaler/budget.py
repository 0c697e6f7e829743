"""A fleet GPU budget: who gets the GPUs when the workloads' own plans ask for more than the budget holds.

One pure function, ``arbitrate``, used by the offline fleet replay (``tune --by ... --gpu-budget``) and by the server's
live budget alike, so that what the replay shows is what the server does. Each workload's **claim** is what its own
policy asks for at this tick (``desired`` replicas for a ``load`` in req/s, each replica serving ``capacity`` req/s on
``gpus_per_replica`` GPUs) and the floor it never gives away (``minimum``: its minReplicaCount, which the HPA enforces
whatever the scaler answers). Two rules (``RULES``):

* ``value`` (the default): every workload first gets its minimum; the GPUs left go one replica at a time to the
  replica that saves the most lost value per GPU, ``value_per_request x min(capacity, unserved load) /
  gpus_per_replica`` (a request's value in $, or 1 for all when none is given: then the most requests per GPU win).
  The marginal gain of a workload's next replica never rises, so when replicas are the same size this greedy choice
  loses the least value that whole replicas can; with mixed sizes it is the greedy rule, not a knapsack optimum.
  Ties go as the equal share would send them (the fewest GPUs above the minimum first, then the smaller GPU count,
  then the name, so every scaler replica computes the same answer): with one value for all and every workload short,
  the GPUs are shared, not handed to the first name. A claim's load is its whole plan, headroom included: cutting
  the headroom of a valuable workload (its protection through the cold start) for another's base was measured to
  lose more value, not less.
* ``equal``: the equal-share cap, the baseline it is measured against: every workload first gets its minimum, then
  the GPUs left are shared equally (max-min fair in GPUs): one replica at a time to the workload with the fewest GPUs
  granted above its minimum that still fits, so a share one workload does not need passes on to the others.

Neither rule grants a workload more than it asked for: a budget caps, it never scales up. A budget below the sum of
the minimums cannot be met by any answer (the HPA keeps minReplicaCount) and is refused (``BudgetError``).

From an answer to a claim and back, the same offline and live: ``claim`` reads a member's own planned value as the
replicas the HPA makes of it (``desired_replicas``: KEDA's milli-quantities, ceil(value / target)); ``capped`` is the
answer a grant allows: the plan itself when nothing was taken, else ``granted_value`` (grant x the target in
milli-units, which the HPA divides back to exactly the grant: no dead-band push, which would ask for more).
``parse_budget`` reads ``16`` (GPUs of any type) or ``h100=16,l4=40`` (per GPU type).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from .deadband import to_milli

RULES = ("value", "equal")
DEFAULT_RULE = "value"
EPS = 1e-9
ANY = "*"  # the key of a budget that counts GPUs of every type together


class BudgetError(ValueError):
    """A budget or a claim that no answer can meet; the message names the value and what is accepted."""


@dataclass(frozen=True)
class Claim:
    """What one workload's own plan asks for at one tick."""

    name: str
    desired: int  # replicas its policy answers
    minimum: int = 0  # minReplicaCount: kept whatever the budget
    gpus_per_replica: float = 1.0
    capacity: float = 1.0  # req/s one replica serves
    load: float | None = None  # req/s the desired replicas are for; default desired x capacity
    value_per_request: float = 1.0  # $ of one lost request (1 for all: requests per GPU decide)

    @property
    def demand(self) -> float:
        return self.desired * self.capacity if self.load is None else self.load

    def check(self) -> None:
        if self.desired < 0 or self.minimum < 0:
            raise BudgetError(f"workload {self.name!r}: replicas {self.desired}, minimum {self.minimum}: "
                              "accepted are whole numbers >= 0")
        for what, v in (("gpusPerReplica", self.gpus_per_replica), ("capacity", self.capacity)):
            if not (math.isfinite(v) and v > 0):
                raise BudgetError(f"workload {self.name!r}: {what} {v!r}: accepted is a finite number > 0")
        for what, v in (("load", self.demand), ("value per request", self.value_per_request)):
            if not (math.isfinite(v) and v >= 0):
                raise BudgetError(f"workload {self.name!r}: {what} {v!r}: accepted is a finite number >= 0")


@dataclass(frozen=True)
class Grant:
    """What one workload gets: ``replicas`` (<= max(desired, minimum)); ``capped`` when that is below ``desired``."""

    name: str
    replicas: int
    desired: int
    gpus: float
    lost_load: float  # req/s its granted replicas cannot serve
    lost_value: float  # lost_load x value per request ($/s, or req/s with value 1)

    @property
    def capped(self) -> bool:
        return self.replicas < self.desired


def check_budget(budget: float) -> float:
    if not (math.isfinite(budget) and budget >= 0):
        raise BudgetError(f"GPU budget {budget!r}: accepted is a finite number of GPUs >= 0")
    return float(budget)


def arbitrate(claims: Sequence[Claim], budget: float, rule: str = DEFAULT_RULE) -> tuple[Grant, ...]:
    """Grants for ``claims`` within ``budget`` GPUs by ``rule``; in the claims' order."""
    budget = check_budget(budget)
    if rule not in RULES:
        raise BudgetError(f"budget rule {rule!r}: accepted are {', '.join(RULES)}")
    names = [c.name for c in claims]
    if len(set(names)) != len(names):
        raise BudgetError("two claims share a name: each workload is named once")
    for c in claims:
        c.check()
    floor = sum(c.minimum * c.gpus_per_replica for c in claims)
    if floor > budget + EPS:
        raise BudgetError(f"GPU budget {budget:g} is below the {floor:g} GPUs the minReplicaCounts keep "
                          f"({', '.join(f'{c.name}: {c.minimum}' for c in claims if c.minimum)}): "
                          "accepted is a budget >= the sum of minReplicaCount x gpusPerReplica")
    start = [c.minimum for c in claims]
    left = budget - floor
    got = _fill(claims, start, left, _gain if rule == "value" else _share)
    return tuple(_grant(c, n) for c, n in zip(claims, got))


def _gain(c: Claim, have: int) -> float:
    """Lost value per GPU that the workload's next replica saves, given ``have`` replicas."""
    return c.value_per_request * min(c.capacity, max(0.0, c.demand - have * c.capacity)) / c.gpus_per_replica


def _share(c: Claim, have: int) -> float:
    """Equal share: the fewer GPUs a workload holds above its minimum, the sooner its next replica."""
    return -(have - c.minimum) * c.gpus_per_replica


def _fill(claims: Sequence[Claim], start: list[int], left: float, score) -> list[int]:
    """One replica at a time to the best ``score`` of the next replica that still fits."""
    got = list(start)
    def entry(i: int) -> tuple:
        c = claims[i]
        return -score(c, got[i]), (got[i] - c.minimum) * c.gpus_per_replica, c.gpus_per_replica, c.name, i

    heap = [entry(i) for i, c in enumerate(claims) if got[i] < c.desired]
    heapq.heapify(heap)
    while heap:
        *_, g, _, i = heapq.heappop(heap)
        if g > left + EPS:
            continue  # its next replica does not fit; a smaller one of another workload may
        got[i] += 1
        left -= g
        if got[i] < claims[i].desired:
            heapq.heappush(heap, entry(i))
    return got


def _grant(c: Claim, n: int) -> Grant:
    lost = max(0.0, c.demand - n * c.capacity)
    return Grant(name=c.name, replicas=n, desired=c.desired, gpus=n * c.gpus_per_replica,
                 lost_load=lost, lost_value=lost * c.value_per_request)


def desired_replicas(value: float, qps_per_replica: float) -> int:
    """The replicas an AverageValue metric of ``value`` asks the HPA for: ceil(value / target) in KEDA's
    milli-quantities (a value that is not a number, or <= 0, asks for none)."""
    t = to_milli(qps_per_replica)
    return -(-to_milli(value) // t) if t > 0 else 0


def granted_value(replicas: int, qps_per_replica: float) -> float:
    """The value that asks the HPA for exactly ``replicas``: replicas x the target, in milli-units."""
    return replicas * to_milli(qps_per_replica) / 1000.0


def claim(name: str, planned: float, qps_per_replica: float, *, minimum: int = 0, gpus_per_replica: float = 1.0,
          value_per_request: float = 1.0) -> Claim:
    """A member's claim from its own planned value (req/s): the replicas it asks the HPA for, for that load."""
    load = planned if math.isfinite(planned) and planned > 0 else 0.0
    return Claim(name, desired_replicas(planned, qps_per_replica), minimum, gpus_per_replica, qps_per_replica, load,
                 value_per_request)


def capped(planned: float, grant: Grant, qps_per_replica: float) -> float:
    """The answer ``grant`` allows: ``planned`` when the grant holds what it asks for, else ``granted_value``."""
    return planned if grant.replicas >= grant.desired else granted_value(grant.replicas, qps_per_replica)


def parse_budget(text: str, types: Sequence[str] | None = None) -> dict[str, float]:
    """``16`` -> {ANY: 16.0}; ``h100=16,l4=40`` -> {"H100": 16.0, "L4": 40.0}, the types among ``types`` (upper-case
    GPU types; None: per-type budgets are not accepted). ``BudgetError`` naming the part and what is accepted."""
    text = str(text).strip()
    form = "a finite number of GPUs >= 0 (16)" + ("" if types is None else
                                          f", or GPUs per type TYPE=N,... with TYPE among {', '.join(types)}")
    if "=" not in text:
        try:
            return {ANY: check_budget(float(text))}
        except ValueError:
            raise BudgetError(f"GPU budget {text[:40]!r}: accepted is {form}") from None
    if types is None:
        raise BudgetError(f"GPU budget {text[:40]!r}: a budget per GPU type needs the pool file that names the types "
                          "(--pools); accepted without one is a number of GPUs (16)")
    out: dict[str, float] = {}
    for part in text.split(","):
        k, _, v = part.partition("=")
        key = k.strip().upper()
        if key not in types:
            raise BudgetError(f"GPU budget {part.strip()[:40]!r}: unknown GPU type {k.strip()[:20]!r}; accepted: "
                              f"{', '.join(types)}")
        if key in out:
            raise BudgetError(f"GPU budget: {key} given twice; accepted is each type once")
        try:
            out[key] = check_budget(float(v))
        except ValueError:
            raise BudgetError(f"GPU budget {part.strip()[:40]!r}: accepted is {form}") from None
    return out


def budget_text(budgets: Mapping[str, float]) -> str:
    """``parse_budget``'s input written back (messages, tables)."""
    if set(budgets) == {ANY}:
        return f"{budgets[ANY]:g} GPUs"
    return ", ".join(f"{k} {v:g}" for k, v in budgets.items())

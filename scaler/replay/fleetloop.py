"""A fleet replayed jointly under a GPU budget, tick by tick: who gets the GPUs when the plans ask for more.

Each workload was tuned alone; here its own answers (``fleetmember.Member``) are replayed in lockstep with the
others', and at every tick (``replay``):

1. **The answers** (what the server does live, ``scaler.serve.budget``): every member's claim is its own planned
   value read as the replicas it asks the HPA for (``budget.claim``); where the claims of one budget need more GPUs
   than it holds, ``budget.arbitrate`` grants each a share by the rule, and a member's answer becomes
   ``budget.capped``: its own plan, or exactly its grant x qpsPerReplica in KEDA's milli-units.
2. **The HPA and KEDA** of every member act on its answer (``fleetmember.Pods.step``: the project's compiled rules).
   Their scale-down stabilisation (300 s) keeps pods after an answer falls, so capping answers alone would let
   the fleet overrun the budget while another member grows.
3. **The GPUs**, as a fixed pool of the budget's size: a pod binds only to a free GPU, a Pending pod holds none
   (and has not begun its start-up). Where the Pending pods of one budget want more GPUs than are free, the same
   ``budget.arbitrate`` (each member keeping what it holds) decides who binds. So the GPUs held (starting + ready
   pods) never exceed the budget at any tick; the loop checks it at every tick (``BudgetOverrun``).

With no budget (``budgets`` None) every Pending pod binds at once and each member replays exactly as
``keda.run_hpa`` replays it alone (tested tick for tick). Members run on one tick grid; each starts at its own
tick of it (``offset``). Pure: arrays in, a ``FleetReplay`` out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .. import budget as bud
from .fleetmember import Member, Pods
from .scenario import EPS, Outcome, Timeline, evaluate


class BudgetOverrun(AssertionError):
    """The GPUs held at a tick exceeded a budget: a bug in the loop, never an input's fault."""


@dataclass(frozen=True)
class Played:
    """One member's replay: its pods holding GPUs and ready (``timeline``, the value KEDA held), the Deployment's
    count (``want``: Pending pods are ``want - timeline.replicas``), and the ticks its answer was capped."""

    member: Member
    offset: int
    timeline: Timeline
    want: np.ndarray
    capped: np.ndarray  # bool per tick: the answer was below the member's own plan
    outcome: Outcome

    @property
    def pending(self) -> np.ndarray:
        return self.want - self.timeline.replicas

    @property
    def gave_way(self) -> np.ndarray:
        """Ticks where the budget held it back: its answer capped or a pod of it Pending."""
        return self.capped | (self.pending > 0)


@dataclass(frozen=True)
class FleetReplay:
    played: tuple[Played, ...]
    gpus: dict[str, np.ndarray]  # per budget key: GPUs held (starting + ready pods) per fleet tick
    budgets: dict[str, float] | None
    rule: str
    t0: float
    tick: float


def grid(members: Sequence[Member]) -> tuple[float, float, list[int], int]:
    """The fleet's tick grid: its start, its tick, each member's first tick on it, its length. Members must share
    the tick and lie on one grid (t0 differing by whole ticks)."""
    tick = members[0].scenario.tick
    t0 = min(m.scenario.t0 for m in members)
    offsets = []
    for m in members:
        off = (m.scenario.t0 - t0) / tick
        if m.scenario.tick != tick or abs(off - round(off)) > 1e-6:
            raise ValueError(f"member {m.name!r}: its ticks ({m.scenario.t0:g} + k x {m.scenario.tick:g} s) are not "
                             f"on the fleet's grid ({t0:g} + k x {tick:g} s)")
        offsets.append(int(round(off)))
    n = max(o + m.scenario.n for o, m in zip(offsets, members))
    return t0, tick, offsets, n


def replay(members: Sequence[Member], budgets: Mapping[str, float] | None, rule: str = bud.DEFAULT_RULE) -> FleetReplay:
    """The members replayed jointly within ``budgets`` (GPUs per budget key; None: no budget) by ``rule``."""
    if not members:
        raise ValueError("a fleet replay needs at least one member")
    names = [m.name for m in members]
    if len(set(names)) != len(names):
        raise ValueError("two members share a name: each workload is named once")
    if budgets is not None:
        missing = sorted({m.key for m in members} - set(budgets))
        if missing:
            raise ValueError(f"no budget for {', '.join(missing)}: accepted keys {', '.join(budgets)}")
        for key, total in budgets.items():
            bud.arbitrate([bud.Claim(m.name, 0, m.minimum, m.gpus_per_replica) for m in members if m.key == key],
                          total, rule)  # a budget below the minReplicaCounts: BudgetError naming them
    t0, tick, offsets, n = grid(members)
    pods = [Pods(m) for m in members]
    answers = [np.zeros(m.scenario.n) for m in members]
    capped = [np.zeros(m.scenario.n, dtype=bool) for m in members]
    want = [np.zeros(m.scenario.n, dtype=np.int64) for m in members]
    keys = sorted({m.key for m in members})
    gpus = {k: np.zeros(n) for k in keys}
    for i in range(n):
        live = [(k, p, i - offsets[k]) for k, p in enumerate(pods) if 0 <= i - offsets[k] < p.m.scenario.n]
        _answers(live, budgets, rule, answers, capped)
        if any(j == 0 for _, _, j in live):
            _begin(live, budgets, rule, answers)
        for k, p, j in live:
            p.step(j, answers[k][j] if p.plan(j) is not None else None)
            want[k][j] = p.want
        _bind(live, budgets, rule)
        for key in keys:
            gpus[key][i] = sum(p.bound * p.m.gpus_per_replica for _, p, _ in live if p.m.key == key)
            if budgets is not None and gpus[key][i] > budgets[key] + EPS:
                raise BudgetOverrun(f"tick {i}: {gpus[key][i]:g} GPUs held in budget {key} of {budgets[key]:g}")
    played = []
    for k, (m, p) in enumerate(zip(members, pods)):
        tl = p.timeline(answers[k])
        played.append(Played(m, offsets[k], tl, want[k], capped[k], evaluate(m.scenario, tl)))
    return FleetReplay(tuple(played), gpus, None if budgets is None else dict(budgets), rule, t0, tick)


def _fits(claims: Sequence[bud.Claim], total: float) -> bool:
    """Every claim's ask (at least its minimum) fits: each rule then grants every ask and caps nobody."""
    return sum(max(c.desired, c.minimum) * c.gpus_per_replica for c in claims) <= total + bud.EPS


def _answers(live, budgets, rule, answers, capped) -> None:
    """Each live member's answer at its tick: its own plan where KEDA calls it (kept as its claim, ``Pods.own``),
    capped by the arbitration of its budget over every member's latest plan; between calls the value held."""
    for k, p, j in live:
        plan = p.plan(j)
        if plan is not None:
            answers[k][j] = plan
        elif j > 0:
            answers[k][j] = answers[k][j - 1]
    if budgets is None:
        return
    for key, total in budgets.items():
        group = [(k, p, j) for k, p, j in live if p.m.key == key]
        claims = [bud.claim(p.m.name, p.own, p.m.hpa.target, minimum=p.m.minimum,
                            gpus_per_replica=p.m.gpus_per_replica, value_per_request=p.m.value_per_request)
                  for _, p, _ in group]
        if _fits(claims, total):
            continue
        for (k, p, j), g in zip(group, bud.arbitrate(claims, total, rule)):
            if g.capped and p.plan(j) is not None:
                answers[k][j] = bud.capped(p.own, g, p.m.hpa.target)
                capped[k][j] = True


def _begin(live, budgets, rule, answers) -> None:
    """Members at their first tick start steady (``keda.steady_start`` on their first answer), their pods ready;
    under a budget only as many as the free GPUs hold (``_bind``'s arbitration), the rest Pending."""
    new = [(p, p.start(answers[k][0])) for k, p, j in live if j == 0]
    if budgets is None:
        for p, want in new:
            p.begin(want, want)
        return
    for p, want in new:
        p.begin(want, 0)
    take = _grants(live, budgets, rule)
    for p, want in new:
        p.begin(want, take.get(p.m.name, 0))


def _grants(live, budgets, rule) -> dict[str, int]:
    """Per member with Pending pods, how many the free GPUs of its budget take (each member keeps what it holds)."""
    out: dict[str, int] = {}
    for key, total in budgets.items():
        group = [p for _, p, _ in live if p.m.key == key]
        if not any(p.pending > 0 for p in group):
            continue
        claims = [bud.Claim(p.m.name, p.want, p.bound, p.m.gpus_per_replica, p.m.hpa.target, p.own,
                            p.m.value_per_request) for p in group]
        grants = [c.desired for c in claims] if _fits(claims, total) else \
            [g.replicas for g in bud.arbitrate(claims, total, rule)]
        out.update({p.m.name: g - p.bound for p, g in zip(group, grants) if g > p.bound})
    return out


def _bind(live, budgets, rule) -> None:
    """Pending pods bind to free GPUs: all of them without a budget; else as ``_grants`` arbitrates."""
    if budgets is None:
        for _, p, j in live:
            p.grow(j, p.pending)
        return
    take = _grants(live, budgets, rule)
    for _, p, j in live:
        p.grow(j, take.get(p.m.name, 0))

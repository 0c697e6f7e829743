"""A fleet GPU budget, offline: the tuned workloads replayed jointly under it, by both rules, and what it cost.

``members`` turns each tuned workload's selection (``jobs.Tuned.drive``: its answers at KEDA's calls, its HPA, its
demand) into a ``replay.fleetloop.Member`` with its GPUs per replica, the value of its lost requests and the budget
it draws on. ``replay_budget`` replays the fleet three times with ``fleetloop.replay``: without a budget (each
workload as tuned alone: the fleet's unconstrained peak, and the cost the budget adds to), then within the budget by
the value-weighted rule and by the equal share, and reports per workload and for the fleet who gave way (its answer
capped, or a pod Pending for a GPU), when, and what it cost: requests lost above the unconstrained replay's and their
value. A budget given as a percentage is of the unconstrained fleet peak. Pure: no files, no terminal.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Mapping, Sequence

import numpy as np

from .. import budget as bud
from ..replay import fleetloop
from ..replay.fleetmember import Member

PERIODS = 5  # the longest periods a workload gave way, per rule, in the JSON and the report


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def members(tuned: Sequence[tuple[str, Member]], values: Mapping[str, float], gpus: Mapping[str, float],
            key: str = bud.ANY) -> list[Member]:
    """The fleet's members: each workload's selection (``Tuned.drive``) named by its file id, with its GPUs per
    replica, value per lost request and budget key."""
    return [replace(m, name=fid, gpus_per_replica=gpus[fid], value_per_request=values[fid], key=key)
            for fid, m in tuned]


def resolve(budgets: Mapping[str, float] | None, percent: float | None, free: fleetloop.FleetReplay) -> dict:
    """The budgets in GPUs: as given, or ``percent`` of the unconstrained fleet peak of each key."""
    if percent is None:
        assert budgets is not None
        return dict(budgets)
    return {k: float(np.floor(percent / 100.0 * g.max() + 1e-9)) for k, g in free.gpus.items()}


def replay_budget(ms: Sequence[Member], budgets: Mapping[str, float] | None, rule: str,
                  percent: float | None = None) -> tuple[dict, dict[str, fleetloop.FleetReplay]]:
    """The fleet replayed without a budget and within it by both rules: the JSON section and the replays (by
    ``none``, ``value``, ``equal``). The rule deployed (``rule``) is named; both are measured."""
    free = fleetloop.replay(ms, None)
    total = resolve(budgets, percent, free)
    runs = {"none": free, **{r: fleetloop.replay(ms, total, r) for r in bud.RULES}}
    base = {p.member.name: p for p in free.played}
    out = {"gpus": total, "given": f"{percent:g}% of the unconstrained peak" if percent is not None
           else bud.budget_text(total), "rule": rule,
           "unconstrained": {"peak_gpus": {k: float(g.max()) for k, g in free.gpus.items()},
                             "peak_at": {k: iso(free.t0 + free.tick * int(np.argmax(g))) for k, g in free.gpus.items()},
                             **fleet_totals(free, base)},
           "rules": {r: {"peak_gpus": {k: float(g.max()) for k, g in runs[r].gpus.items()},
                         "never_over_budget": all(runs[r].gpus[k].max() <= total[k] + bud.EPS for k in total),
                         **fleet_totals(runs[r], base)} for r in bud.RULES},
           "workloads": [workload_figures(name, base, runs) for name in base]}
    return out, runs


def lost(p: fleetloop.Played) -> tuple[float, float]:
    return p.outcome.missed_requests, p.outcome.missed_requests * p.member.value_per_request


def fleet_totals(fr: fleetloop.FleetReplay, base: Mapping[str, fleetloop.Played]) -> dict:
    """The fleet's lost requests and value, above the unconstrained replay's too, GPU-hours and minutes given way."""
    req = sum(lost(p)[0] for p in fr.played)
    val = sum(lost(p)[1] for p in fr.played)
    req0 = sum(lost(base[p.member.name])[0] for p in fr.played)
    val0 = sum(lost(base[p.member.name])[1] for p in fr.played)
    minutes = sum(int(p.gave_way.sum()) for p in fr.played) * fr.tick / 60.0
    return {"lost_requests": req, "lost_value": val, "extra_lost_requests": req - req0, "extra_lost_value": val - val0,
            "gave_way_minutes": minutes, "workloads_gave_way": sum(bool(p.gave_way.any()) for p in fr.played),
            "gpu_hours": sum(float(p.timeline.replicas.sum()) * p.member.gpus_per_replica for p in fr.played)
            * fr.tick / 3600.0}


def workload_figures(name: str, base: Mapping[str, fleetloop.Played], runs: Mapping[str, fleetloop.FleetReplay]) -> dict:
    """One workload: unconstrained, and per rule when and how long it gave way and what that cost."""
    b = base[name]
    req0, val0 = lost(b)
    out = {"workload": name, "value_per_request": b.member.value_per_request,
           "gpus_per_replica": b.member.gpus_per_replica, "budget": b.member.key,
           "unconstrained": {"lost_requests": req0, "lost_value": val0,
                             "missed_fraction": b.outcome.underprovisioned_fraction}}
    for r in bud.RULES:
        p = next(x for x in runs[r].played if x.member.name == name)
        req, val = lost(p)
        tick = runs[r].tick
        out[r] = {"capped_minutes": int(p.capped.sum()) * tick / 60.0,
                  "pending_minutes": int((p.pending > 0).sum()) * tick / 60.0,
                  "gave_way_minutes": int(p.gave_way.sum()) * tick / 60.0, "periods": periods(p, tick),
                  "lost_requests": req, "lost_value": val, "extra_lost_requests": req - req0,
                  "extra_lost_value": val - val0, "missed_fraction": p.outcome.underprovisioned_fraction,
                  "gpu_hours": float(p.timeline.replicas.sum()) * p.member.gpus_per_replica * tick / 3600.0}
    return out


def periods(p: fleetloop.Played, tick: float) -> list[dict]:
    """The longest stretches (at most ``PERIODS``) in which the workload gave way: start, end, minutes."""
    g = np.concatenate([[False], p.gave_way, [False]]).astype(np.int8)
    starts, ends = np.flatnonzero(np.diff(g) == 1), np.flatnonzero(np.diff(g) == -1)
    t0 = p.member.scenario.t0
    spans = sorted(zip(starts, ends), key=lambda se: (se[0] - se[1], se[0]))[:PERIODS]
    return [{"start": iso(t0 + tick * s), "end": iso(t0 + tick * e), "minutes": (e - s) * tick / 60.0}
            for s, e in sorted(spans)]

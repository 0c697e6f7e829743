"""Replicas placed on GPU node pools of different types, and what each pool costs in GPU-hours and dollars.

A ``Placement`` is the rule the user deploys: one pool (a ``nodeSelector`` on the Deployment) or a priority
list (the cluster autoscaler's priority expander, Karpenter NodePool weights: a Pending pod goes to the first
pool that can still add a node). The HPA's replica count per tick is split in that order: the first pool takes
up to its ``max_nodes x`` replicas per node, the next the rest, the last whatever remains (Pending there when it
is full too); on scale-down the newest replicas go first, so the overflow pools empty first. Each pool is then
replayed as ``cluster.simulate`` replays one (its nodes, boots, warm pool, placeholders, kills), with the
cold start a replica has on that GPU type, and the ready capacity is the sum over pools of ready replicas x
their capacity (x ``qpsPerReplica``, the first pool's).

Spot pools lose nodes at ``interruptions_per_node_hour``: the replay draws that many node losses (Poisson, seeded)
over the node-hours a first replay of the pool used, at ticks weighted by its nodes, and replays it again with
them (the placeholder and kill machinery of ``cluster``). Dollars per pool: ``money.Billing`` of its node-hours
(and stopped warm nodes). Pure: no clock, no files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from ..coldstart import StartDraws
from ..gpus import Choice, PoolFile, require_prices
from ..money import Billing, lost_value
from .cluster import Kill, Phases, Pool, Replay, simulate
from .scenario import Scenario, Timeline


@dataclass(frozen=True)
class Placed:
    """One pool of a placement, as a replica finds it."""

    name: str  # the choice: h100, or h100/3g.40gb
    pool: Pool  # gpus_per_node: replicas per node (slices per node for MIG)
    capacity: float = 1.0  # a replica's req/s here, x the first pool's (qpsPerReplica)
    cold_start_seconds: float | None = None  # T_cold on this GPU type (None: the run's)
    billing: Billing | None = None  # None: no price (GPU-hours only)
    node_gpus: int | None = None  # GPUs a node bills (None: the pool's gpus_per_node, one GPU per replica)
    gpu_fraction: float = 1.0  # GPUs one replica holds (a slice: its share)
    interruptions_per_node_hour: float = 0.0  # spot
    node_selector: tuple[tuple[str, str], ...] = ()  # the Deployment's, to land here (the pool file's)
    tolerations: tuple = ()
    resource: str = "nvidia.com/gpu"  # the extended resource a replica requests (a slice: nvidia.com/mig-...)
    resource_count: int = 1

    def __post_init__(self) -> None:
        if not (math.isfinite(self.capacity) and self.capacity > 0):
            raise ValueError(f"pool {self.name}: capacity {self.capacity!r}: accepted is a number > 0")


@dataclass(frozen=True)
class Placement:
    pools: tuple[Placed, ...]  # preferred first
    qps_scale: float = 1.0  # the first pool's replica capacity, x qpsPerReplica (the HPA's target is sized to it)

    def __post_init__(self) -> None:
        if not self.pools:
            raise ValueError("a placement needs at least one pool")

    @property
    def rule(self) -> str:
        return "nodeSelector" if len(self.pools) == 1 else "priority"

    @property
    def first(self) -> Placed:
        return self.pools[0]

    @property
    def priced(self) -> bool:
        """Every pool has a price: the placement's cost can be told in dollars."""
        return all(p.billing is not None for p in self.pools)


def placed(c: Choice, first_capacity: float) -> Placed:
    """One ``gpus.Choice`` as the replay runs it: a node holds ``slots_per_node`` replicas; it bills its GPUs."""
    p, w = c.pool, c.pool.warm
    d = Pool()
    pool = Pool(c.slots_per_node, p.max_nodes, p.node_boot_seconds, d.idle_seconds if p.idle_seconds is None
                else p.idle_seconds, 0 if w is None else w.nodes, 0.0 if w is None else w.boot_seconds)
    rate = p.per_gpu_hour()
    bill = None if rate is None else Billing(p.gpus_per_node, rate, 0.0 if w is None else w.stopped_fraction)
    return Placed(c.key, pool, c.capacity / first_capacity, c.cold_start_seconds, bill, p.gpus_per_node,
                  c.gpu_fraction, p.price.interruptions_per_node_hour if p.capacity_type == "spot" else 0.0,
                  p.node_selector, p.tolerations, c.resource, 1 if c.slice is not None else c.gpus)


def from_file(pf: PoolFile, keys: Sequence[str] = (), *, money: bool = False) -> Placement:
    """The placement of ``keys`` (``h100``, ``h100/3g.40gb``; default the file's ``placement``, else its pools in
    order) with capacities relative to the first; ``money``: every pool needs its price (``gpus.PoolError``)."""
    cs = [pf.choice(k) for k in (keys or pf.placement or [p.name for p in pf.pools])]
    if money:
        require_prices(cs)
    return Placement(tuple(placed(c, cs[0].capacity) for c in cs), cs[0].capacity)


def replica_qps(qps: float, placement: Placement | None) -> float:
    """The HPA's target per replica: ``qps`` is a replica of capacity 1 (``--qps-per-replica``, or the engine's
    derived value); the replicas deployed are the first pool's (``qps_scale`` of it)."""
    return qps if placement is None else qps * placement.qps_scale


def split(replicas: np.ndarray, placement: Placement) -> list[np.ndarray]:
    """The replica count per tick split over the pools in priority order (the last takes what remains)."""
    rest = np.asarray(replicas, dtype=np.int64).copy()
    out = []
    for k, p in enumerate(placement.pools):
        cap = p.pool.max_nodes * p.pool.gpus_per_node
        part = rest if k == len(placement.pools) - 1 else np.minimum(rest, cap)
        out.append(part.copy())
        rest = rest - part
    return out


def interruptions(rep: Replay, rate: float, seed: int) -> list[Kill]:
    """Spot node losses: Poisson(rate x node-hours of ``rep``) at ticks weighted by its nodes (seeded)."""
    if rate <= 0 or rep.nodes is None or not rep.nodes.sum():
        return []
    rng = np.random.default_rng(seed)
    k = int(rng.poisson(rate * float(rep.nodes.sum()) * rep.tick / 3600.0))
    if not k:
        return []
    w = rep.nodes.astype(np.float64)
    ticks = np.sort(rng.choice(len(w), size=k, replace=True, p=w / w.sum()))
    return [Kill(int(t), 1, node=True, tag=1) for t in ticks]


@dataclass(frozen=True)
class PlacedReplay:
    """What the pools made of a replica count: the timeline (ready in units of the first pool's replicas), the
    pools' replays summed (nodes, pending, placeholders), and each pool's figures."""

    timeline: Timeline
    replay: Replay
    pools: dict[str, dict]


def live(placement: Placement, phases: Phases, sc: Scenario, tl: Timeline, *, prepull: bool = False,
         placeholders: np.ndarray | int = 0, kills: Sequence[Kill] = (), seed: int = 0,
         starts: StartDraws | None = None) -> PlacedReplay:
    """``tl``'s replicas on the placement's pools (placeholders and the scenarios' kills on the first pool)."""
    parts = split(tl.replicas, placement)
    reps: list[Replay] = []
    figures: dict[str, dict] = {}
    shared = phases.total - phases.pod
    for k, (p, part) in enumerate(zip(placement.pools, parts)):
        cold = sc.cold_start_seconds if p.cold_start_seconds is None else p.cold_start_seconds
        ph = replace(phases, pod=max(0.0, cold - shared))
        ph_k = placeholders if k == 0 else 0
        kills_k = list(kills) if k == 0 else []
        rep = simulate(part, ph, sc.tick, pool=p.pool, prepull=prepull, placeholders=ph_k, kills=kills_k,
                       seed=seed, starts=starts if k == 0 else None)
        spot = interruptions(rep, p.interruptions_per_node_hour, seed + 1000 + k)
        if spot:
            rep = simulate(part, ph, sc.tick, pool=p.pool, prepull=prepull, placeholders=ph_k,
                           kills=sorted(kills_k + spot, key=lambda x: x.tick), seed=seed,
                           starts=starts if k == 0 else None)
        reps.append(rep)
        figures[p.name] = pool_figures(p, rep, part, len(spot))
    ready: np.ndarray = np.sum([r.timeline.ready.astype(np.float64) * p.capacity
                                for r, p in zip(reps, placement.pools)], axis=0)
    if all(p.capacity == 1.0 for p in placement.pools):
        ready = np.rint(ready).astype(np.int64)

    def total(xs: list) -> np.ndarray:
        return np.sum(xs, axis=0).astype(np.int64)

    stopped = [r.stopped for r in reps if r.stopped is not None]
    combined = Replay(Timeline(replicas=tl.replicas, ready=ready), total([r.nodes for r in reps if r.nodes is not None]),
                      total([r.pending for r in reps]), total([r.placeholders for r in reps]),
                      tuple(x for r in reps for x in r.kills), sc.tick, total(stopped) if stopped else None,
                      sum(r.warm_starts for r in reps))
    return PlacedReplay(Timeline(replicas=tl.replicas, ready=ready, value=tl.value), combined, figures)


def pool_figures(p: Placed, rep: Replay, replicas: np.ndarray, interrupted: int) -> dict:
    """One pool's GPU-hours (billed: its nodes' GPUs; held: its pods') and dollars."""
    node_h = rep.gpu_node_hours or 0.0
    gpus = p.pool.gpus_per_node if p.node_gpus is None else p.node_gpus
    out = {"node_hours": node_h, "gpu_hours": node_h * gpus, "replica_hours": float(replicas.sum() * rep.tick / 3600.0),
           "pod_gpu_hours": float(replicas.sum() * rep.tick / 3600.0) * p.gpu_fraction,
           "peak_nodes": int(rep.nodes.max()) if rep.nodes is not None and rep.nodes.size else 0,
           "stopped_node_hours": rep.stopped_node_hours, "warm_starts": rep.warm_starts,
           "spot_interruptions": interrupted, "unplaced_replica_hours": unplaced(p, rep)}
    if p.billing is not None:
        out["dollars"] = p.billing.dollars(node_h, rep.stopped_node_hours) + \
            rep.warm_starts * p.billing.node_hour * p.pool.provision_seconds / 3600.0  # each replacement's boot
    return out


def unplaced(p: Placed, rep: Replay) -> float:
    """Replica-hours Pending while the pool was at its maximum: replicas that found no GPU anywhere (the split
    sends a pool only what its nodes hold, the last pool the rest)."""
    if rep.nodes is None:
        return 0.0
    full = rep.nodes >= p.pool.max_nodes
    return float(rep.pending[full].sum() * rep.tick / 3600.0)


def totals(figures: dict[str, dict], missed_requests: float = 0.0, value: float | None = None) -> dict:
    """The pools' dollars, billed GPU-hours and unplaced replica-hours summed (dollars None when a pool has no
    price); with a ``value`` per lost request: ``lost_dollars`` = missed x value and ``total_dollars``."""
    priced = all("dollars" in f for f in figures.values())
    dollars = sum(f["dollars"] for f in figures.values()) if priced else None
    out = {"dollars": dollars, "gpu_hours": sum(f["gpu_hours"] for f in figures.values()),
           "pod_gpu_hours": sum(f["pod_gpu_hours"] for f in figures.values()),
           "unplaced_replica_hours": sum(f["unplaced_replica_hours"] for f in figures.values())}
    lost = lost_value(missed_requests, value)
    if lost is not None:
        out["lost_dollars"] = lost
        out["total_dollars"] = None if dollars is None else dollars + lost
    return out

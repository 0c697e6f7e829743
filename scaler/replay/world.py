"""The cluster, the queue and the scenarios around the replicas: what ``engine.run`` adds when asked.

``World()`` (the default) adds nothing: the engine's numbers are then exactly
those of a replay without it. Otherwise each policy's replica count goes
through the node pool and its kills (``cluster.simulate``), its ready
capacity through the FIFO queue (``latency``), and the scenarios' checks are
scored (``scenarios.checks``). The ``placeholder`` row is predictive with a
placeholder Deployment driven by the same forecast at the longer lead
T_node + T_cold + T_buffer: ``ceil(max(0, value_long - value) / qps)``
placeholder pods at each KEDA poll (``deploy/example/placeholder``: the
ScaledObject's scalingModifiers formula), so nodes are up before the pods
need them. Pure: no clock, no files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..coldstart import StartDraws, StartSample
from ..policy import PolicyParams
from .cluster import Phases, Pool, Replay, simulate
from .forecasts import Curve
from .hpa import Hpa, value_ticks
from .latency import Latency, Waits, waits
from .policies import planned_values
from .scenario import EPS, Outcome, Scenario, Timeline, evaluate
from . import scenarios as scn

PLACEHOLDER = "placeholder"  # the row of the placeholder policy (predictive + a placeholder Deployment)


@dataclass(frozen=True)
class World:
    """Every knob of the cluster, the queue and the scenarios (defaults: off, today's replay)."""

    phases: Phases | None = None  # None: one phase, T_cold
    pool: Pool | None = None  # None: unlimited GPUs, no nodes
    prepull: bool = False  # the image is on every node (the pre-puller DaemonSet)
    overprovision_gpus: int = 0  # placeholder pods always held (the over-provisioning knob)
    placeholder_policy: bool = False  # add the ``placeholder`` row (needs a pool)
    service_seconds: float | None = None  # None with latency on: 0 (queueing delay only)
    timeout_seconds: float | None = None
    p95_target_seconds: float | None = None
    scenarios: tuple[str, ...] = ()
    starts: StartSample | None = None  # sampled start-ups (past ones): each pod draws its own, not ``phases``

    def specs(self) -> tuple[scn.Spec, ...]:
        return tuple(scn.parse(s) for s in self.scenarios)

    @property
    def latency_on(self) -> bool:
        return (self.service_seconds is not None or self.timeout_seconds is not None
                or self.p95_target_seconds is not None or bool(self.scenarios))

    @property
    def cluster_on(self) -> bool:
        return (self.phases is not None or self.pool is not None or self.prepull or self.overprovision_gpus > 0
                or self.starts is not None
                or any(scn.parse(s).kind in ("pod-kill", "node-loss") for s in self.scenarios))

    @property
    def active(self) -> bool:
        return self.cluster_on or self.latency_on or self.placeholder_policy

    @property
    def extra_lead_seconds(self) -> float:
        """How much further the placeholder policy's forecast looks (T_node)."""
        return self.pool.provision_seconds if self.placeholder_policy and self.pool is not None else 0.0

    def validate(self, cold_start_seconds: float) -> None:
        """ValueError naming the bad knob."""
        self.specs()
        if self.phases is not None and abs(self.phases.total - cold_start_seconds) > 1e-6:
            raise ValueError(f"the cold-start phases sum to {self.phases.total:g} s, T_cold is {cold_start_seconds:g} s")
        if self.starts is not None and self.phases is not None:
            raise ValueError("sampled start-ups and fixed cold-start phases: give one of them")
        if self.placeholder_policy and self.pool is None:
            raise ValueError("the placeholder policy needs a GPU node pool (--gpus-per-node)")
        if self.overprovision_gpus < 0:
            raise ValueError(f"over-provisioning {self.overprovision_gpus} GPUs: accepted is >= 0")
        for name in ("service_seconds", "timeout_seconds", "p95_target_seconds"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v >= 0 and (v > 0 or name == "service_seconds")):
                raise ValueError(f"{name.replace('_', ' ')} {v!r}: accepted is a finite number of seconds "
                                 f"{'>= 0' if name == 'service_seconds' else '> 0'}")


@dataclass
class Lived:
    """One policy in the world: its timeline (ready as the cluster allowed) and what it cost and felt."""

    timeline: Timeline
    outcome: Outcome
    replay: Replay | None
    latency: Latency | None
    waits: Waits | None

    def metrics(self) -> dict:
        d: dict = {}
        if self.replay is not None and self.replay.nodes is not None:
            d["gpu_node_hours"] = self.replay.gpu_node_hours
            d["peak_nodes"] = int(self.replay.nodes.max()) if self.replay.nodes.size else 0
            d["placeholder_gpu_hours"] = float(self.replay.placeholders.sum() * self.replay.tick / 3600.0)
        if self.replay is not None:
            d["pending_pod_hours"] = float(self.replay.pending.sum() * self.replay.tick / 3600.0)
        if self.latency is not None:
            d.update(self.latency.as_dict())
        return d


def live(world: World, sc: Scenario, tl: Timeline, *, placeholders: np.ndarray | int = 0, seed: int = 0) -> Lived:
    """A policy's replica count in the world."""
    rep = None
    if world.cluster_on or not isinstance(placeholders, int) or placeholders:
        phases = world.phases or Phases(pod=sc.cold_start_seconds)
        ph = np.asarray(placeholders, dtype=np.int64) + world.overprovision_gpus
        rep = simulate(tl.replicas, phases, sc.tick, pool=world.pool, prepull=world.prepull, placeholders=ph,
                       kills=scn.kills(world.specs(), sc.n, sc.tick, seed), seed=seed,
                       starts=None if world.starts is None else StartDraws(world.starts, seed))
        tl = Timeline(replicas=tl.replicas, ready=rep.timeline.ready, value=tl.value)
    lat = w = None
    if world.latency_on:
        service = world.service_seconds or 0.0
        w = waits(sc.demand, tl.ready.astype(np.float64) * sc.qps_per_replica, sc.tick, world.timeout_seconds)
        lat = w.latency(service, world.timeout_seconds)
    return Lived(tl, evaluate(sc, tl), rep, lat, w)


def checks(world: World, name: str, sc: Scenario, lived: Lived, lead_seconds: float, seed: int = 0) -> list[dict]:
    specs = world.specs()
    if not specs:
        return []
    return scn.checks(name, specs, lived.timeline.ready, sc.demand, sc.qps_per_replica, sc.tick, lead_seconds,
                      scn.kills(specs, sc.n, sc.tick, seed), lived.waits, world.service_seconds or 0.0,
                      world.timeout_seconds, world.p95_target_seconds)


def placeholder_counts(sc: Scenario, hpa: Hpa, value: np.ndarray, curves: Sequence[Curve], *, lead_long: float,
                       quantile: float, level_correction_seconds: float) -> np.ndarray:
    """Placeholder pods per tick: ``ceil(max(0, value_long - value) / qps)`` at each KEDA poll, held.

    ``value``: the predictive policy's metric value per tick (``Timeline.value``);
    ``value_long``: ``decide`` on the same curves at lead ``lead_long``.
    """
    qps = sc.qps_per_replica
    params = PolicyParams(mode="forecastAndScale", lead_seconds=lead_long, quantile=quantile, qps_per_replica=qps,
                          headroom=1.0, hpa_tolerance=0.0, level_correction_seconds=level_correction_seconds)
    long = planned_values(sc, hpa, params, curves).values
    idx = value_ticks(sc.n, hpa, sc.tick)
    short = np.asarray(value, dtype=np.float64)[idx]
    per_poll = np.ceil(np.maximum(long - short, 0.0) / qps - EPS).astype(np.int64)
    held = np.repeat(per_poll, np.diff(np.append(idx, sc.n)))
    return held[:sc.n]

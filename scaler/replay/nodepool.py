"""The cluster replay's plain data: cold-start ``Phases``, a GPU node ``Pool`` (with its warm pool), a ``Kill``,
and the ``Replay`` that ``cluster.simulate`` returns (``cluster`` re-exports them). Pure: no clock, no files."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .scenario import Timeline


@dataclass(frozen=True)
class Phases:
    """A pod's cold start in seconds, by phase (their sum is T_cold on a node without the image)."""

    scheduling: float = 0.0
    image_pull: float = 0.0  # paid only on a node without the image
    container_start: float = 0.0
    pod: float = 0.0  # weight load + warm-up (the probe's phases)

    def __post_init__(self) -> None:
        for name in ("scheduling", "image_pull", "container_start", "pod"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} {v!r} s: accepted is a finite number of seconds >= 0")

    @property
    def total(self) -> float:
        return self.scheduling + self.image_pull + self.container_start + self.pod


@dataclass(frozen=True)
class Pool:
    """A GPU node pool (defaults: a cloud GPU node, the cluster autoscaler's scale-down-unneeded-time)."""

    gpus_per_node: int = 8
    max_nodes: int = 1000
    provision_seconds: float = 300.0  # Pending noticed + node boot (drivers, device plugin)
    idle_seconds: float = 600.0  # empty this long -> removed
    warm_nodes: int = 0  # a warm pool: stopped nodes that start in ``warm_boot_seconds`` (0: none)
    warm_boot_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1 or self.max_nodes < 1 or self.warm_nodes < 0:
            raise ValueError(f"gpus per node {self.gpus_per_node}, max nodes {self.max_nodes} and warm nodes "
                             f"{self.warm_nodes}: accepted is >= 1 (warm nodes >= 0)")
        for name in ("provision_seconds", "idle_seconds", "warm_boot_seconds"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"node {name} {v!r}: accepted is a finite number of seconds >= 0")


@dataclass(frozen=True)
class Kill:
    """At tick ``tick``: ``count`` pods killed (``node=False``) or ``count`` nodes lost (``node=True``)."""

    tick: int
    count: int = 1
    node: bool = False
    tag: int = 0  # which scenario made it


@dataclass(frozen=True)
class Replay:
    """What the cluster made of a replica count."""

    timeline: Timeline  # replicas as the HPA asked (Pending included), ready as the cluster allowed
    nodes: np.ndarray | None  # nodes existing (booting or up) per tick; None without a pool
    pending: np.ndarray  # real pods without a GPU per tick
    placeholders: np.ndarray  # placeholder pods holding a GPU per tick
    kills: tuple[tuple[int, int], ...]  # (tick, ready pods lost) per Kill, in order
    tick: float
    stopped: np.ndarray | None = None  # warm-pool nodes stopped per tick (None without a warm pool)
    warm_starts: int = 0  # nodes started from the warm pool (each replaced by a new stopped one)

    @property
    def stopped_node_hours(self) -> float:
        return 0.0 if self.stopped is None else float(self.stopped.sum() * self.tick / 3600.0)

    @property
    def gpu_node_hours(self) -> float | None:
        """Node-hours of the pool (a node counts from its provisioning to its removal)."""
        return None if self.nodes is None else float(self.nodes.sum() * self.tick / 3600.0)

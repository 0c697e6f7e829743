"""The cluster under the replicas: cold start by phases, a GPU node pool, placeholder pods, pod kills.

The HPA emulation (``hpa.run_hpa``) decides how many pods exist at each tick;
its decisions depend on the metric only, never on readiness, so the node pool
is replayed afterwards over that replica count (``simulate``) and gives the
ready count, Pending pods and the nodes (GPU-node-hours) per tick. Pure: no
clock, no files; every input is an argument.

A pod's start (``Phases``), on the node it lands on::

    bind  = max(created + scheduling, node ready, the tick a GPU became free)
    image = node already holds it (or --prepull): bind; else bind + image_pull
            (a pull already running on that node is shared)
    ready = max(bind, image) + container_start + pod   (pod = weight load + warm-up: the probe's phases)

and it serves from the first tick start at or after ``ready``. Nodes
(``Pool``): a Pending pod with no free GPU on a node that is up or booting
makes the cluster autoscaler add a node, up ``provision_seconds`` later
(Pending noticed + boot), at most ``max_nodes``; a node without pods for
``idle_seconds`` is removed. Nodes the replay starts with hold the image.
Placeholder pods (over-provisioning) hold GPUs at a lower priority: a real pod
that finds no free GPU on a node that is up preempts one and binds at once;
the evicted placeholder goes Pending and asks for a node like any pod.
A killed pod is replaced by its ReplicaSet in the same tick (the replica
count does not move); a lost node takes its pods with it.

Sampled start-ups (``starts``: a ``StartDraws`` over past start-ups, e.g.
kube-state-metrics' or a CSV): each pod draws its own instead of ``Phases``.
A pod that binds to a node already up draws created->ready from the starts
that found a free node (``ready = bind + draw``, scheduling and pull
included); one that waits for a node booting draws scheduled->ready from the
starts that waited for a new node (``ready = node ready + draw``: the boot is
the pool's); without a pool, created->ready from all of them (node boots at
the rate they happened). Draws are seeded and taken in pod order.

Without a pool (``pool=None``) GPUs are unlimited and there are no nodes: a
pod pulls its image unless ``prepull``. With ``Phases(0, 0, 0, T_cold)``, no
pool and no kills, ``simulate`` gives exactly ``run_hpa``'s ready count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..coldstart import StartDraws
from .scenario import EPS, Timeline


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

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1 or self.max_nodes < 1:
            raise ValueError(f"gpus per node {self.gpus_per_node} and max nodes {self.max_nodes}: accepted is >= 1")
        for name in ("provision_seconds", "idle_seconds"):
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

    @property
    def gpu_node_hours(self) -> float | None:
        """Node-hours of the pool (a node counts from its provisioning to its removal)."""
        return None if self.nodes is None else float(self.nodes.sum() * self.tick / 3600.0)


class _Node:
    __slots__ = ("ready", "image", "real", "held", "empty_since")

    def __init__(self, ready: float, image: float | None):
        self.ready = ready  # seconds from t0 when it is up
        self.image = image  # when the image is on it (None: not pulled yet)
        self.real = 0
        self.held = 0  # placeholder pods bound to it
        self.empty_since: float | None = ready


class _Pod:
    __slots__ = ("created", "node", "ready_tick")

    def __init__(self, created: float):
        self.created = created
        self.node: _Node | None = None
        self.ready_tick: int | None = None


def simulate(replicas: np.ndarray, phases: Phases, tick: float, *, pool: Pool | None = None, prepull: bool = False,
             placeholders: np.ndarray | int = 0, kills: Sequence[Kill] = (), seed: int = 0,
             starts: StartDraws | None = None) -> Replay:
    """Replay a replica count per tick (``Timeline.replicas``) on the cluster.

    ``placeholders``: placeholder pods wanted per tick (or a constant). Pods
    alive at tick 0 are ready, on nodes that hold the image. Scale-down and
    kills: the newest pods go first on scale-down (ReplicaSet ranking); a kill
    takes ready pods chosen at random (``seed``); a node loss takes the node
    with the most pods.
    """
    reps = np.asarray(replicas, dtype=np.int64)
    n = int(reps.shape[0])
    want_ph = np.broadcast_to(np.asarray(placeholders, dtype=np.int64), (n,))
    rng = np.random.default_rng(seed)
    kills_at: dict[int, list[Kill]] = {}
    for k in kills:
        kills_at.setdefault(int(k.tick), []).append(k)
    gpus = pool.gpus_per_node if pool is not None else 0
    ready_on = np.zeros(n + 1, dtype=np.int64)
    ready_off = np.zeros(n + 1, dtype=np.int64)
    nodes_out = np.zeros(n, dtype=np.int64) if pool is not None else None
    pending_out = np.zeros(n, dtype=np.int64)
    held_out = np.zeros(n, dtype=np.int64)
    lost: list[tuple[int, int]] = []

    pods: list[_Pod] = []
    nodes: list[_Node] = []
    ph_pending = 0  # placeholder pods without a GPU
    waiting: list[_Pod] = []  # real pods without a node, oldest first
    first = int(reps[0]) if n else 0
    for _ in range(first):
        p = _Pod(-math.inf)
        p.ready_tick = 0
        pods.append(p)
    ready_on[0] = first
    if pool is not None:
        init_ph = int(want_ph[0]) if n else 0
        need = first + init_ph
        for _ in range(-(-need // gpus)):
            nodes.append(_Node(-math.inf, -math.inf))
        slots = [nd for nd in nodes for _ in range(gpus)]
        for p, nd in zip(pods, slots):
            p.node = nd
            nd.real += 1
        for nd in slots[first:first + init_ph]:
            nd.held += 1
        for nd in nodes:
            nd.empty_since = None if nd.real or nd.held else -math.inf

    def free(nd: _Node) -> int:
        return gpus - nd.real - nd.held

    def release(nd: _Node | None, now: float, real: bool = True) -> None:
        if nd is None:
            return
        if real:
            nd.real -= 1
        else:
            nd.held -= 1
        if nd.real == 0 and nd.held == 0:
            nd.empty_since = max(now, nd.ready)

    def drop(p: _Pod, i: int) -> None:
        rt = p.ready_tick
        if rt is not None:
            if rt <= i:
                ready_off[i] += 1
            elif rt < n:
                ready_on[rt] -= 1
        if p.node is None and p in waiting:
            waiting.remove(p)
        release(p.node, i * tick)

    def start(p: _Pod, nd: _Node | None, now: float) -> None:
        if starts is not None:
            return start_sampled(p, nd, now)
        bind = max(p.created + phases.scheduling, now)
        if nd is not None:
            bind = max(bind, nd.ready)
            nd.real += 1
            nd.empty_since = None
            if nd.image is None:
                nd.image = bind + (0.0 if prepull else phases.image_pull)
            image = nd.image
        else:
            image = bind + (0.0 if prepull else phases.image_pull)
        p.node = nd
        rt = int(math.ceil((max(bind, image) + phases.container_start + phases.pod) / tick - EPS))
        p.ready_tick = rt
        if rt < n:
            ready_on[rt] += 1

    def start_sampled(p: _Pod, nd: _Node | None, now: float) -> None:
        if nd is None:
            ready = max(p.created, now) + starts.total()
        else:
            nd.real += 1
            nd.empty_since = None
            if nd.image is None:
                nd.image = max(now, nd.ready)
            ready = (max(p.created, now) + starts.on_warm_node()) if nd.ready <= now + EPS \
                else nd.ready + starts.after_new_node()
        p.node = nd
        rt = int(math.ceil(ready / tick - EPS))
        p.ready_tick = rt
        if rt < n:
            ready_on[rt] += 1

    def new_node(now: float) -> _Node | None:
        if len(nodes) >= pool.max_nodes:
            return None
        nd = _Node(now + pool.provision_seconds, (now + pool.provision_seconds) if prepull else None)
        nd.empty_since = None
        nodes.append(nd)
        return nd

    def place(now: float) -> None:
        nonlocal ph_pending
        while waiting:
            p = waiting[0]
            if pool is None:
                start(p, None, now)
                waiting.pop(0)
                continue
            up = [nd for nd in nodes if nd.ready <= now + EPS]
            nd = next((x for x in up if free(x) > 0 and x.image is not None), None) \
                or next((x for x in up if free(x) > 0), None)
            if nd is None:
                victim = next((x for x in up if x.held > 0), None)
                if victim is not None:  # preemption of a placeholder
                    victim.held -= 1
                    ph_pending += 1
                    nd = victim
            if nd is None:
                nd = next((x for x in nodes if x.ready > now + EPS and free(x) > 0), None) or new_node(now)
            if nd is None:
                break  # at max nodes: stays Pending, retried every tick
            start(p, nd, now)
            waiting.pop(0)
        if pool is not None:
            while ph_pending > 0:
                nd = next((x for x in nodes if free(x) > 0), None) or new_node(now)
                if nd is None:
                    break
                nd.held += 1
                nd.empty_since = None
                ph_pending -= 1

    placed_ph = lambda: sum(nd.held for nd in nodes)  # noqa: E731
    # only the ticks where something can happen are replayed: a replica or placeholder count changes, a kill,
    # a node's idle time runs out, or a pod or placeholder is still without a GPU (then every tick)
    events = sorted({0, *kills_at, *(np.flatnonzero(np.diff(reps) != 0) + 1).tolist(),
                     *((np.flatnonzero(np.diff(want_ph) != 0) + 1).tolist() if pool is not None else [])})
    ev = 0
    i = 0
    while i < n:
        now = i * tick
        if pool is not None and nodes:  # the cluster autoscaler's scale-down of unneeded nodes
            keep = [nd for nd in nodes if nd.empty_since is None or now - nd.empty_since < pool.idle_seconds - EPS]
            if len(keep) != len(nodes):
                nodes[:] = keep
        target = int(reps[i])
        while len(pods) > target:  # scale-down: the newest first
            drop(pods.pop(), i)
        for k in kills_at.get(i, ()):
            if k.node and pool is not None:
                gone = 0
                for _ in range(k.count):
                    if not nodes:
                        break
                    victim = max(nodes, key=lambda x: x.real)
                    nodes.remove(victim)
                    ph_pending += victim.held
                    victim.held = 0
                    for p in [p for p in pods if p.node is victim]:
                        gone += int(p.ready_tick is not None and p.ready_tick <= i)
                        drop(p, i)
                        pods.remove(p)
                        q = _Pod(now)
                        pods.append(q)
                        waiting.append(q)
                lost.append((i, gone))
            else:
                ready = [j for j, p in enumerate(pods) if p.ready_tick is not None and p.ready_tick <= i]
                chosen = sorted(rng.choice(ready, size=min(k.count, len(ready)), replace=False).tolist()) \
                    if ready else []
                for j in reversed(chosen):
                    p = pods.pop(j)
                    drop(p, i)
                for _ in chosen:
                    q = _Pod(now)
                    pods.append(q)
                    waiting.append(q)
                lost.append((i, len(chosen)))
        while len(pods) < target:
            q = _Pod(now)
            pods.append(q)
            waiting.append(q)
        if pool is not None:
            want = int(want_ph[i])
            have = placed_ph() + ph_pending
            if want > have:
                ph_pending += want - have
            while have > want:  # pending ones go first, then the newest nodes' ones
                have -= 1
                if ph_pending:
                    ph_pending -= 1
                else:
                    nd = next(x for x in reversed(nodes) if x.held > 0)
                    release(nd, now, real=False)
        place(now)
        while ev < len(events) and events[ev] <= i:
            ev += 1
        nxt = events[ev] if ev < len(events) else n
        if waiting or ph_pending:
            nxt = i + 1
        if pool is not None:
            for nd in nodes:
                if nd.empty_since is not None:
                    due = int(math.ceil((max(nd.empty_since, 0.0) + pool.idle_seconds - EPS) / tick))
                    nxt = min(nxt, max(due, i + 1))
        nxt = min(nxt, n)
        pending_out[i:nxt] = len(waiting)
        if nodes_out is not None:
            nodes_out[i:nxt] = len(nodes)
            held_out[i:nxt] = placed_ph()
        i = nxt
    ready = np.cumsum(ready_on[:n] - ready_off[:n])
    return Replay(Timeline(replicas=reps.copy(), ready=ready), nodes_out, pending_out, held_out, tuple(lost), tick)

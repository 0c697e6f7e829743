"""The cluster under the replicas: cold start by phases, a GPU node pool, placeholder pods, pod kills.

The HPA emulation (``keda.run_hpa``) decides how many pods exist at each tick;
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

    Only the ticks where something can happen are replayed (``_Cluster.next_tick``); each is, in order: the
    cluster autoscaler's scale-down of unneeded nodes, the HPA's count (scale-down the newest first), the kills,
    the new pods, the placeholders wanted, then every pod without a node placed (``_Cluster.place``).
    """
    c = _Cluster(np.asarray(replicas, dtype=np.int64), phases, tick, pool, prepull, placeholders, kills, seed, starts)
    i = 0
    while i < c.n:
        now = i * tick
        c.remove_idle_nodes(now)
        target = int(c.reps[i])
        while len(c.pods) > target:  # scale-down: the newest first
            c.drop(c.pods.pop(), i)
        for k in c.kills_at.get(i, ()):
            c.lost.append((i, c.kill_node(k, i, now) if k.node and pool is not None else c.kill_pods(k, i, now)))
        while len(c.pods) < target:
            c.create(now)
        c.want_placeholders(i, now)
        c.place(now)
        nxt = c.next_tick(i)
        c.pending_out[i:nxt] = len(c.waiting)
        if c.nodes_out is not None:
            c.nodes_out[i:nxt] = len(c.nodes)
            c.held_out[i:nxt] = c.placed_placeholders()
        i = nxt
    ready = np.cumsum(c.ready_on[:c.n] - c.ready_off[:c.n])
    return Replay(Timeline(replicas=c.reps.copy(), ready=ready), c.nodes_out, c.pending_out, c.held_out,
                  tuple(c.lost), tick)


class _Cluster:
    """``simulate``'s state: the pods, the nodes, the pods waiting for a GPU, and what is recorded per tick."""

    def __init__(self, reps: np.ndarray, phases: Phases, tick: float, pool: Pool | None, prepull: bool,
                 placeholders: np.ndarray | int, kills: Sequence[Kill], seed: int, starts: StartDraws | None):
        self.reps, self.phases, self.tick, self.pool, self.prepull, self.starts = reps, phases, tick, pool, prepull, \
            starts
        n = self.n = int(reps.shape[0])
        self.want_ph = np.broadcast_to(np.asarray(placeholders, dtype=np.int64), (n,))
        self.rng = np.random.default_rng(seed)
        self.kills_at: dict[int, list[Kill]] = {}
        for k in kills:
            self.kills_at.setdefault(int(k.tick), []).append(k)
        self.gpus = pool.gpus_per_node if pool is not None else 0
        self.ready_on = np.zeros(n + 1, dtype=np.int64)
        self.ready_off = np.zeros(n + 1, dtype=np.int64)
        self.nodes_out = np.zeros(n, dtype=np.int64) if pool is not None else None
        self.pending_out = np.zeros(n, dtype=np.int64)
        self.held_out = np.zeros(n, dtype=np.int64)
        self.lost: list[tuple[int, int]] = []
        self.pods: list[_Pod] = []
        self.nodes: list[_Node] = []
        self.ph_pending = 0  # placeholder pods without a GPU
        self.waiting: list[_Pod] = []  # real pods without a node, oldest first
        self.steady_start()
        # the ticks where something can happen: a replica or placeholder count changes, a kill (and, found as the
        # replay goes, a node's idle time running out or a pod or placeholder still without a GPU: every tick)
        self.events = sorted({0, *self.kills_at, *(np.flatnonzero(np.diff(reps) != 0) + 1).tolist(),
                              *((np.flatnonzero(np.diff(self.want_ph) != 0) + 1).tolist() if pool is not None else [])})
        self.ev = 0

    def steady_start(self) -> None:
        """Tick 0: the first count's pods ready, on nodes that hold the image, with the first placeholders."""
        first = int(self.reps[0]) if self.n else 0
        for _ in range(first):
            p = _Pod(-math.inf)
            p.ready_tick = 0
            self.pods.append(p)
        self.ready_on[0] = first
        if self.pool is None:
            return
        init_ph = int(self.want_ph[0]) if self.n else 0
        for _ in range(-(-(first + init_ph) // self.gpus)):
            self.nodes.append(_Node(-math.inf, -math.inf))
        slots = [nd for nd in self.nodes for _ in range(self.gpus)]
        for p, nd in zip(self.pods, slots):
            p.node = nd
            nd.real += 1
        for nd in slots[first:first + init_ph]:
            nd.held += 1
        for nd in self.nodes:
            nd.empty_since = None if nd.real or nd.held else -math.inf

    def free(self, nd: _Node) -> int:
        return self.gpus - nd.real - nd.held

    def placed_placeholders(self) -> int:
        return sum(nd.held for nd in self.nodes)

    def release(self, nd: _Node | None, now: float, real: bool = True) -> None:
        if nd is None:
            return
        if real:
            nd.real -= 1
        else:
            nd.held -= 1
        if nd.real == 0 and nd.held == 0:
            nd.empty_since = max(now, nd.ready)

    def drop(self, p: _Pod, i: int) -> None:
        rt = p.ready_tick
        if rt is not None:
            if rt <= i:
                self.ready_off[i] += 1
            elif rt < self.n:
                self.ready_on[rt] -= 1
        if p.node is None and p in self.waiting:
            self.waiting.remove(p)
        self.release(p.node, i * self.tick)

    def create(self, now: float) -> None:
        """A new pod, waiting for a node."""
        q = _Pod(now)
        self.pods.append(q)
        self.waiting.append(q)

    def ready_at(self, p: _Pod, seconds: float) -> None:
        rt = int(math.ceil(seconds / self.tick - EPS))
        p.ready_tick = rt
        if rt < self.n:
            self.ready_on[rt] += 1

    def start(self, p: _Pod, nd: _Node | None, now: float) -> None:
        if self.starts is not None:
            return self.start_sampled(p, nd, now)
        phases = self.phases
        bind = max(p.created + phases.scheduling, now)
        if nd is not None:
            bind = max(bind, nd.ready)
            nd.real += 1
            nd.empty_since = None
            if nd.image is None:
                nd.image = bind + (0.0 if self.prepull else phases.image_pull)
            image = nd.image
        else:
            image = bind + (0.0 if self.prepull else phases.image_pull)
        p.node = nd
        self.ready_at(p, max(bind, image) + phases.container_start + phases.pod)

    def start_sampled(self, p: _Pod, nd: _Node | None, now: float) -> None:
        starts = self.starts
        assert starts is not None
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
        self.ready_at(p, ready)

    def new_node(self, now: float) -> _Node | None:
        pool = self.pool
        assert pool is not None
        if len(self.nodes) >= pool.max_nodes:
            return None
        nd = _Node(now + pool.provision_seconds, (now + pool.provision_seconds) if self.prepull else None)
        nd.empty_since = None
        self.nodes.append(nd)
        return nd

    def node_for(self, now: float) -> _Node | None:
        """A GPU for the oldest waiting pod: a free one on an up node (with the image first), a preempted
        placeholder's, one on a booting node, a new node; None at max nodes."""
        up = [nd for nd in self.nodes if nd.ready <= now + EPS]
        nd = next((x for x in up if self.free(x) > 0 and x.image is not None), None) \
            or next((x for x in up if self.free(x) > 0), None)
        if nd is None:
            victim = next((x for x in up if x.held > 0), None)
            if victim is not None:  # preemption of a placeholder
                victim.held -= 1
                self.ph_pending += 1
                nd = victim
        if nd is None:
            nd = next((x for x in self.nodes if x.ready > now + EPS and self.free(x) > 0), None) or self.new_node(now)
        return nd

    def place(self, now: float) -> None:
        while self.waiting:
            p = self.waiting[0]
            nd = None if self.pool is None else self.node_for(now)
            if self.pool is not None and nd is None:
                break  # at max nodes: stays Pending, retried every tick
            self.start(p, nd, now)
            self.waiting.pop(0)
        if self.pool is not None:
            while self.ph_pending > 0:
                nd = next((x for x in self.nodes if self.free(x) > 0), None) or self.new_node(now)
                if nd is None:
                    break
                nd.held += 1
                nd.empty_since = None
                self.ph_pending -= 1

    def remove_idle_nodes(self, now: float) -> None:
        """The cluster autoscaler's scale-down of nodes unneeded for ``idle_seconds``."""
        pool = self.pool
        if pool is not None and self.nodes:
            keep = [nd for nd in self.nodes
                    if nd.empty_since is None or now - nd.empty_since < pool.idle_seconds - EPS]
            if len(keep) != len(self.nodes):
                self.nodes[:] = keep

    def kill_node(self, k: Kill, i: int, now: float) -> int:
        """A node loss: the node with the most pods, ``k.count`` times; its pods recreated. Ready pods lost."""
        gone = 0
        for _ in range(k.count):
            if not self.nodes:
                break
            victim = max(self.nodes, key=lambda x: x.real)
            self.nodes.remove(victim)
            self.ph_pending += victim.held
            victim.held = 0
            for p in [p for p in self.pods if p.node is victim]:
                gone += int(p.ready_tick is not None and p.ready_tick <= i)
                self.drop(p, i)
                self.pods.remove(p)
                self.create(now)
        return gone

    def kill_pods(self, k: Kill, i: int, now: float) -> int:
        """``k.count`` ready pods chosen at random, recreated. Ready pods lost."""
        ready = [j for j, p in enumerate(self.pods) if p.ready_tick is not None and p.ready_tick <= i]
        chosen = sorted(self.rng.choice(ready, size=min(k.count, len(ready)), replace=False).tolist()) \
            if ready else []
        for j in reversed(chosen):
            self.drop(self.pods.pop(j), i)
        for _ in chosen:
            self.create(now)
        return len(chosen)

    def want_placeholders(self, i: int, now: float) -> None:
        """Placeholders to the count wanted at tick ``i``: new ones pending; fewer: pending ones go first, then
        the newest nodes' ones."""
        if self.pool is None:
            return
        want = int(self.want_ph[i])
        have = self.placed_placeholders() + self.ph_pending
        if want > have:
            self.ph_pending += want - have
        while have > want:
            have -= 1
            if self.ph_pending:
                self.ph_pending -= 1
            else:
                nd = next(x for x in reversed(self.nodes) if x.held > 0)
                self.release(nd, now, real=False)

    def next_tick(self, i: int) -> int:
        """The next tick where something can happen (every tick while a pod or placeholder waits for a GPU)."""
        while self.ev < len(self.events) and self.events[self.ev] <= i:
            self.ev += 1
        nxt = self.events[self.ev] if self.ev < len(self.events) else self.n
        if self.waiting or self.ph_pending:
            nxt = i + 1
        if self.pool is not None:
            for nd in self.nodes:
                if nd.empty_since is not None:
                    due = int(math.ceil((max(nd.empty_since, 0.0) + self.pool.idle_seconds - EPS) / self.tick))
                    nxt = min(nxt, max(due, i + 1))
        return min(nxt, self.n)

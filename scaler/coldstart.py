"""T_cold measured from the cluster's own pod start-ups (pure: no I/O, no clock); the trigger keys that ask for it
(``coldStartFrom: cluster``) are ``scaler.coldstartkeys``.

Input: one ``PodStart`` per pod instance (kube-state-metrics timestamps:
created, scheduled, started, ready; its container restarts; its owner and when
it was last seen). Output: a ``ColdStartEstimate``: T_cold = the
``coldStartQuantile`` of created->ready over the starts that count, the phases
beside it, how many starts counted and why the others did not.

What counts as a cold start caused by scaling (each exclusion is counted):

* ``before_window``: created before the window (an old pod: its ready time may
  be that of a later restart or readiness flap, never of its creation);
* ``not_ready``: no ready time (still starting, never ready, or a
  kube-state-metrics older than v2.8, which has no ``kube_pod_status_ready_time``);
* ``restarted``: a container restarted before the pod was first seen ready
  (the pod keeps its created time and the Ready condition's time moves to the
  last restart's, so created->ready would mix a failed start with its retry;
  restarts after the first readiness change nothing: the first ready time is
  the one kept);
* ``rollout``: a Deployment's pod created while a pod of another ReplicaSet of
  the same Deployment was still present (surge pods of a rollout replace
  pods, they are not caused by scaling up);
* ``replacement``: a StatefulSet pod whose name an earlier pod instance had
  (a rollout or an eviction recreates an ordinal; scaling up adds a new one);
* ``negative``: a phase shorter than 0 (clock skew between the API server and
  a kubelet, or a timestamp missing and read as 0);
* ``absurd``: created->ready longer than ``MAX_COLD_START_SECONDS``.

Phases: ``scheduling`` (created->scheduled: waiting for a node, node
provisioning shows here), ``container_start`` (scheduled->started: the kubelet
picking the pod up), ``start_to_ready`` (started->ready: image pull, weight
load, compile, warm-up, readiness probe). They are T_cold split in the
proportions of the tail: the starts at or above T_cold, whose phase sums are
scaled to T_cold, so the phases add up to T_cold exactly and show what the
slow starts spend their time on.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

from .coldstartkeys import ClusterSource

PHASES = ("scheduling", "container_start", "start_to_ready")
SKIP_REASONS = ("before_window", "not_ready", "restarted", "rollout", "replacement", "negative", "absurd")
MAX_COLD_START_SECONDS = 86400.0  # a start-up longer than a day is a stuck pod, not a cold start
PROBE_LOW_RATIO = 0.5  # a probe's T_cold below half the cluster's: the probe misses part of the start-up


@dataclass(frozen=True)
class PodStart:
    """One pod instance as kube-state-metrics saw it (unix seconds; None: no such series)."""

    pod: str
    created: float | None
    scheduled: float | None = None
    started: float | None = None
    ready: float | None = None
    restarts: float = 0.0
    owner: str = ""  # the controlling ReplicaSet (Deployment) or StatefulSet name
    last_seen: float | None = None  # when its series were last seen (at the query's step)
    uid: str = ""


@dataclass(frozen=True)
class ColdStartEstimate:
    seconds: float | None  # T_cold; None: fewer than min_samples starts counted
    quantile: float
    samples: int  # starts that counted
    phases: tuple[tuple[str, float], ...] = ()  # (phase, seconds), adding up to ``seconds``
    skipped: tuple[tuple[str, int], ...] = ()  # (reason, count), reasons in SKIP_REASONS order
    reason: str = ""  # why ``seconds`` is None, for people
    durations: tuple[float, ...] = ()  # created->ready of the starts that counted, sorted

    @property
    def skipped_total(self) -> int:
        return sum(n for _, n in self.skipped)



def classify(pods: Iterable[PodStart], window_start: float, kind: str = "Deployment") -> tuple[list[PodStart], dict[str, int]]:
    """The starts that count, and the others counted by reason (``SKIP_REASONS``); O(n log n)."""
    pods = list(pods)
    first_of_name: dict[str, float] = {}  # StatefulSet: the earliest instance of each pod name
    lives: dict[str, tuple[list[float], list[float]]] = {}  # Deployment: per ReplicaSet, created (sorted) and
    dated = [(p.created, p) for p in pods if p.created is not None]  # max last_seen so far
    for t_created, p in sorted(dated, key=lambda d: d[0]):
        first_of_name.setdefault(p.pod, t_created)
        created, alive_until = lives.setdefault(p.owner, ([], []))
        created.append(t_created)
        alive_until.append(max(alive_until[-1] if alive_until else -math.inf,
                               p.last_seen if p.last_seen is not None else -math.inf))

    def other_replicaset_present(p: PodStart) -> bool:
        t_created = _at(p.created)
        for owner, (created, alive_until) in lives.items():
            i = bisect.bisect_left(created, t_created)  # that ReplicaSet's pods created before p
            if owner != p.owner and i > 0 and alive_until[i - 1] >= t_created:
                return True
        return False

    skipped = {r: 0 for r in SKIP_REASONS}
    counted = []
    for p in pods:
        why = _skip_reason(p, window_start)
        if why is None and kind == "StatefulSet" and first_of_name[p.pod] < _at(p.created):
            why = "replacement"
        if why is None and kind == "Deployment" and other_replicaset_present(p):
            why = "rollout"
        if why is None:
            why = _bad_durations(p)
        if why is None:
            counted.append(p)
        else:
            skipped[why] += 1
    return counted, skipped


def _at(t: float | None) -> float:
    """A timestamp the caller already relies on being there (a pod ``_skip_reason`` let through, ``_phases``'s
    ``full``)."""
    assert t is not None
    return t


def _cold_seconds(p: PodStart) -> float:
    """created->ready of a pod ``_skip_reason`` let through (it has both)."""
    return _at(p.ready) - _at(p.created)


def _skip_reason(p: PodStart, window_start: float) -> str | None:
    if p.created is None or p.created < window_start:
        return "before_window"
    if p.ready is None:
        return "not_ready"
    if p.restarts > 0:
        return "restarted"
    return None


def _bad_durations(p: PodStart) -> str | None:
    known = [m for m in (p.created, p.scheduled, p.started, p.ready) if m is not None]
    if any(b < a for a, b in zip(known, known[1:])):
        return "negative"
    if _cold_seconds(p) > MAX_COLD_START_SECONDS:
        return "absurd"
    return None


def quantile(values: Iterable[float], q: float) -> float:
    """The q-quantile with linear interpolation between order statistics (numpy's default, type 7):
    sorted x_0..x_{n-1}, h = (n-1) q, x_floor(h) + (h - floor(h)) (x_ceil(h) - x_floor(h))."""
    return float(np.quantile(np.asarray(list(values), dtype=float), q))


def estimate(pods: Iterable[PodStart], source: ClusterSource, now: float) -> ColdStartEstimate:
    """T_cold and its phases from the pods seen over ``[now - window, now]``."""
    counted, skipped = classify(pods, now - source.window_seconds, source.kind or "Deployment")
    skipped_t = tuple(skipped.items())
    durations = tuple(sorted(_cold_seconds(p) for p in counted))
    if not counted:
        return ColdStartEstimate(None, source.quantile, 0, skipped=skipped_t, reason=_none_reason(source, skipped))
    if len(counted) < source.min_samples:
        return ColdStartEstimate(None, source.quantile, len(counted), skipped=skipped_t, durations=durations,
                                 reason=f"{len(counted)} cold starts of {source.describe()} in the last "
                                        f"{_hours(source.window_seconds)}, coldStartMinSamples is {source.min_samples}")
    t_cold = quantile(durations, source.quantile)
    return ColdStartEstimate(t_cold, source.quantile, len(counted), _phases(counted, t_cold), skipped_t,
                             durations=durations)


def _phases(counted: list[PodStart], t_cold: float) -> tuple[tuple[str, float], ...]:
    """T_cold split as the tail's phases are (the starts at or above T_cold with all four timestamps)."""
    full = [p for p in counted if p.scheduled is not None and p.started is not None]
    if not full:
        return ()
    tail = [p for p in full if _cold_seconds(p) >= t_cold] or [max(full, key=_cold_seconds)]
    sums = [sum(_at(p.scheduled) - _at(p.created) for p in tail), sum(_at(p.started) - _at(p.scheduled) for p in tail),
            sum(_at(p.ready) - _at(p.started) for p in tail)]
    total = sum(sums)
    if total <= 0:
        return ()
    return tuple((name, t_cold * s / total) for name, s in zip(PHASES, sums))


def _none_reason(source: ClusterSource, skipped: Mapping[str, int]) -> str:
    seen = sum(skipped.values())
    if seen == 0:
        return (f"no pods of {source.describe()} in the last {_hours(source.window_seconds)} (check the name and "
                "that kube-state-metrics is scraped by this Prometheus)")
    parts = ", ".join(f"{n} {r}" for r, n in skipped.items() if n)
    return f"no cold start of {source.describe()} counted in the last {_hours(source.window_seconds)} ({parts})"


def _hours(seconds: float) -> str:
    return f"{seconds / 86400:g}d" if seconds >= 86400 and seconds % 86400 == 0 else f"{seconds / 3600:g}h"


@dataclass(frozen=True)
class InForce:
    """The T_cold the lead uses, where it came from and why."""

    seconds: float
    source: str  # cluster | probe | config
    reason: str  # "" when from the cluster; else why the cluster's figure is not used


def resolve(cluster: ColdStartEstimate | None, cluster_reason: str, probe: float | None, configured: float) -> InForce:
    """Cluster's T_cold when it has one; else the probe's metric (coldStartQuery); else coldStartSeconds."""
    if cluster is not None and cluster.seconds is not None:
        return InForce(cluster.seconds, "cluster", "")
    why = cluster_reason or (cluster.reason if cluster is not None else "no cluster measurement yet")
    if probe is not None:
        return InForce(probe, "probe", why + "; using the probe's metric (coldStartQuery)")
    return InForce(configured, "config", why + f"; using coldStartSeconds={configured:g}")


@dataclass(frozen=True)
class ClusterReading:
    """What the scaler last learned from the cluster for one ScaledObject (``scaler.serve.coldstart``)."""

    source: ClusterSource  # the keys it was read for (a change of keys drops it)
    estimate: ColdStartEstimate | None = None  # the last good estimate
    at: float | None = None  # when ``estimate`` was computed
    error: str = ""  # why the latest attempt failed ("" when it did not)
    stale: bool = False  # ``estimate`` is too old to use (the queries kept failing): the fallback stands in


def in_force(source: ClusterSource | None, reading: ClusterReading | None, probe: float | None,
             configured: float) -> InForce:
    """The T_cold of one ScaledObject: coldStartFrom metadata keeps coldStartQuery, else coldStartSeconds;
    coldStartFrom cluster uses the cluster's estimate while it has a usable one, else falls back (``resolve``)."""
    if source is None:
        return InForce(probe, "probe", "") if probe is not None else InForce(configured, "config", "")
    if reading is None or reading.source != source:
        return resolve(None, "no cluster measurement yet", probe, configured)
    if reading.stale:
        return resolve(None, f"the cluster's T_cold is stale ({reading.error or 'not renewed'})", probe, configured)
    if reading.estimate is None:
        return resolve(None, reading.error or "no cluster measurement yet", probe, configured)
    return resolve(reading.estimate, "", probe, configured)


def cross_check(probe: float | None, cluster: float | None) -> tuple[float | None, str]:
    """probe / cluster, and a warning when the probe's figure is far below the cluster's (``PROBE_LOW_RATIO``)."""
    if probe is None or cluster is None or cluster <= 0:
        return None, ""
    ratio = probe / cluster
    if ratio < PROBE_LOW_RATIO:
        return ratio, (f"the probe's T_cold {probe:g}s is {ratio:.2f}x the cluster's p-quantile {cluster:g}s: the probe "
                       "misses part of the start-up (node boot, image pull, scheduling)")
    return ratio, ""


# -- sampled start-ups for the replay ---------------------------------------------------------------------------------

NEW_NODE_SCHEDULING_SECONDS = 60.0  # a start that waited longer than this to be scheduled waited for a new node


@dataclass(frozen=True)
class StartSample:
    """Past start-ups for the replay (``scaler.replay.cluster``): each simulated pod draws one.

    ``warm``: created->ready of the starts scheduled within ``NEW_NODE_SCHEDULING_SECONDS``
    (a node with a free GPU was there); ``new_node``: scheduled->ready of the others (the
    node's boot is the replay's own when it has a node pool; the pull on a fresh node and
    the load stay in the draw); ``total``: created->ready of all (no pool: node boots at the
    rate they happened)."""

    warm: tuple[float, ...]
    new_node: tuple[float, ...]
    total: tuple[float, ...]
    t_cold: float  # what the scaler would pick: the quantile of ``total``
    quantile: float

    @classmethod
    def from_pods(cls, pods: Iterable[PodStart], q: float = 0.9) -> "StartSample":
        """From counted starts (``classify`` first): ValueError when none has a ready time."""
        warm, new, total = [], [], []
        for p in pods:
            if p.created is None or p.ready is None or p.ready < p.created:
                continue
            total.append(p.ready - p.created)
            if p.scheduled is not None and p.scheduled - p.created > NEW_NODE_SCHEDULING_SECONDS:
                new.append(p.ready - p.scheduled)
            else:
                warm.append(p.ready - p.created)
        if not total:
            raise ValueError("no start-up with both a created and a ready time")
        return cls(tuple(warm), tuple(new), tuple(total), quantile(total, q), q)

    def summary(self) -> dict:
        """The distribution as the report shows it."""
        t = np.asarray(self.total, dtype=float)
        return {"starts": len(self.total), "new_node_starts": len(self.new_node),
                "p50_seconds": float(np.quantile(t, 0.5)), "p90_seconds": float(np.quantile(t, 0.9)),
                "p99_seconds": float(np.quantile(t, 0.99)), "max_seconds": float(t.max()),
                "t_cold_seconds": self.t_cold, "t_cold_quantile": self.quantile}


class StartDraws:
    """Seeded draws from a ``StartSample`` (deterministic: the same seed and order give the same starts)."""

    def __init__(self, sample: StartSample, seed: int = 0):
        self.sample = sample
        self.rng = np.random.default_rng(seed)

    def _pick(self, values: tuple[float, ...]) -> float:
        return float(values[int(self.rng.integers(len(values)))])

    def total(self) -> float:
        return self._pick(self.sample.total)

    def on_warm_node(self) -> float:
        return self._pick(self.sample.warm or self.sample.total)

    def after_new_node(self) -> float:
        """scheduled->ready on a node that just booted (the warm starts' whole time when none waited for one)."""
        return self._pick(self.sample.new_node or self.sample.warm)


__all__ = ["StartSample", "StartDraws", "ClusterReading", "in_force", "PodStart", "ColdStartEstimate", "InForce",
           "classify", "estimate", "quantile", "resolve", "cross_check", "PHASES", "SKIP_REASONS"]

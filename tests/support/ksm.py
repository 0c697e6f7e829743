"""kube-state-metrics-shaped series for a real Prometheus (``promfixture``): pods with known start-ups.

Each ``FakePod`` becomes the series kube-state-metrics v2.8+ exports for it,
scraped every ``SCRAPE`` seconds while the pod exists: ``kube_pod_created``,
``kube_pod_status_scheduled_time``, ``kube_pod_start_time``,
``kube_pod_status_ready_time`` (each from the moment the timestamp exists),
``kube_pod_owner`` and ``kube_pod_container_status_restarts_total``; plus one
``kube_replicaset_owner`` per ReplicaSet.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .promfixture import SeriesSpec

SCRAPE = 60.0


@dataclass(frozen=True)
class FakePod:
    name: str
    owner: str  # ReplicaSet (or StatefulSet) name
    created: float
    sched: float  # created -> scheduled
    start: float  # scheduled -> started
    ready: float | None  # started -> ready; None: never ready
    until: float  # deleted (series end)
    owner_kind: str = "ReplicaSet"
    restarts_at: tuple[float, ...] = ()  # container restarts (absolute times)
    ready_at_override: float | None = None  # the Ready condition's time as exported (moved by a restart)
    uid: str = ""
    labels: tuple[tuple[str, str], ...] = ()  # kube_pod_labels (label_<name> as kube-state-metrics writes them)

    @property
    def total(self) -> float:
        return self.sched + self.start + (self.ready or 0.0)


def _times(start: float, end: float) -> np.ndarray:
    first = np.ceil(start / SCRAPE) * SCRAPE
    return np.arange(first, end + 1e-9, SCRAPE)


def pod_series(p: FakePod, namespace: str) -> list[SeriesSpec]:
    labels = {"namespace": namespace, "pod": p.name, "uid": p.uid or f"uid-{p.name}"}
    out = []
    sched_at = p.created + p.sched
    start_at = sched_at + p.start
    marks = [("kube_pod_created", p.created, p.created), ("kube_pod_status_scheduled_time", sched_at, sched_at),
             ("kube_pod_start_time", start_at, start_at)]
    if p.ready is not None:
        ready_at = p.ready_at_override if p.ready_at_override is not None else start_at + p.ready
        marks.append(("kube_pod_status_ready_time", ready_at, ready_at))
    for name, since, value in marks:
        t = _times(since, p.until)
        if len(t):
            out.append(SeriesSpec(name, labels, "gauge", t, [value] * len(t)))
    t = _times(p.created, p.until)
    out.append(SeriesSpec("kube_pod_owner", {**labels, "owner_kind": p.owner_kind, "owner_name": p.owner,
                                             "owner_is_controller": "true"}, "gauge", t, [1.0] * len(t)))
    if p.labels:
        out.append(SeriesSpec("kube_pod_labels", {**labels, **dict(p.labels)}, "gauge", t, [1.0] * len(t)))
    restarts = [float(sum(1 for r in p.restarts_at if r <= x)) for x in t]
    out.append(SeriesSpec("kube_pod_container_status_restarts", {**labels, "container": "server"}, "counter", t,
                          restarts))
    return out


def replicaset_series(rs: str, deployment: str, namespace: str, start: float, end: float) -> SeriesSpec:
    t = _times(start, end)
    return SeriesSpec("kube_replicaset_owner", {"namespace": namespace, "replicaset": rs, "owner_kind": "Deployment",
                                                "owner_name": deployment, "owner_is_controller": "true"},
                      "gauge", t, [1.0] * len(t))

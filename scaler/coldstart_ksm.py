"""kube-state-metrics series -> ``PodStart`` records (pure: the query text and the parse of its answer).

One range query per ScaledObject per refit: every term is ``last_over_time``
over one step, so the points tile the window with no gap whatever the step,
each tagged with a ``forescale_ksm`` label naming its series (so ``or`` keeps
them apart). Only the target's pods are returned: each timestamp term is
joined ``and on(namespace, pod)`` with the owner (or label) series that picks
them.

Series used (kube-state-metrics version that added them):

====================================== ======= ===========================================
``kube_pod_created``                   v1.0    created (metadata.creationTimestamp)
``kube_pod_owner``                     v1.1    pod -> ReplicaSet / StatefulSet
``kube_pod_start_time``                v1.1    started (status.startTime: the kubelet
                                               took the pod, before pulling images)
``kube_pod_status_scheduled_time``     v1.4    scheduled (PodScheduled condition)
``kube_replicaset_owner``              v1.5    ReplicaSet -> Deployment
``kube_pod_container_status_restarts_total`` v1.0 restarts
``kube_pod_status_ready_time``         v2.8    ready (Ready condition's last transition)
``kube_pod_labels``                    v1.0    coldStartSelector (labels in
                                               ``--metric-labels-allowlist`` only, v2.0+)
====================================== ======= ===========================================

Without ``kube_pod_status_ready_time`` (kube-state-metrics before v2.8) every
pod is ``not_ready`` and the reason says so.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Iterable, Iterator

from .coldstart import PodStart
from .coldstartkeys import ClusterSource

MAX_STEPS = 288  # points per series: a 7d window at 35 min steps, 1d at 5 min
MIN_STEP_SECONDS = 60.0
MAX_SERIES = 20000  # a namespace with more pod series than this is refused (bounded memory), with a reason
TERMS = (  # (tag, metric, aggregation over one step)
    ("created", "kube_pod_created", "last_over_time"),
    ("scheduled", "kube_pod_status_scheduled_time", "last_over_time"),
    ("started", "kube_pod_start_time", "last_over_time"),
    ("ready", "kube_pod_status_ready_time", "min_over_time"),
    ("restarts", "kube_pod_container_status_restarts_total", "max_over_time"),
)
TAG = "forescale_ksm"


def step_for(window_seconds: float) -> float:
    return max(MIN_STEP_SECONDS, math.ceil(window_seconds / MAX_STEPS / 60.0) * 60.0)


def _q(v: str) -> str:
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _picker(ns: str, source: ClusterSource) -> str:
    """The selector of ``source``'s pods (``ns``: the namespace matcher)."""
    if source.kind == "StatefulSet":
        return f'kube_pod_owner{{{ns},owner_kind="StatefulSet",owner_name={_q(source.name)}}}'
    if source.kind == "Deployment":
        # a Deployment's ReplicaSets are NAME-<pod-template-hash>; kube_replicaset_owner confirms each one
        return f'kube_pod_owner{{{ns},owner_kind="ReplicaSet",owner_name=~{_q(re.escape(source.name) + "-[a-z0-9]+")}}}'
    return f"kube_pod_labels{{{ns},{source.selector}}}"


def pods_query(namespace: str, source: ClusterSource, step: float) -> str:
    """The one PromQL range query for ``source``'s pods in ``namespace``, evaluated at ``step``."""
    ns = f"namespace={_q(namespace)}"
    w = f"[{int(step)}s]"
    pick = f"last_over_time({_picker(ns, source)}{w})"
    terms = [f'label_replace({agg}({metric}{{{ns}}}{w}) and on(namespace, pod) {pick}, "{TAG}", "{tag}", "", "")'
             for tag, metric, agg in TERMS]
    terms.append(f'label_replace({pick}, "{TAG}", "owner", "", "")')
    if source.kind == "Deployment":
        terms.append(f'label_replace(last_over_time(kube_replicaset_owner{{{ns},owner_kind="Deployment",'
                     f'owner_name={_q(source.name)}}}{w}), "{TAG}", "replicaset", "", "")')
    return "\n or ".join(terms)


def pods_instant_query(namespace: str, source: ClusterSource, step: float) -> str:
    """The one PromQL *instant* query (at the window's end) for ``source``'s pods in ``namespace``: one point per
    pod and term, every series aggregated to (namespace, pod, uid) (issue 40, item 10: the range query's 288
    points per series made a 300-pod Deployment's answer 8.9 MB; this one is ~0.15 KB per series, ~1.2 MB for
    1,000 pods). The times that need steps are taken over subqueries at ``step`` that tile the window as the
    range query did: ``last_seen`` (the last step whose preceding step holds a ``kube_pod_created`` sample),
    ``ready_seen`` (the first such step of the Ready time) and ``restarts`` (their sum over the pod's containers,
    at most up to the step where Ready is first seen)."""
    ns = f"namespace={_q(namespace)}"
    win, s = f"{int(source.window_seconds)}s", f"{int(step)}s"
    pick = f"last_over_time({_picker(ns, source)}[{win}])"
    by = "max by (namespace, pod, uid)"

    def term(tag: str, expr: str) -> str:
        return f'label_replace({by} ({expr}) and on(namespace, pod) {pick}, "{TAG}", "{tag}", "", "")'

    ready_step = f"min_over_time(kube_pod_status_ready_time{{{ns}}}[{s}])"
    terms = [term("created", f"last_over_time(kube_pod_created{{{ns}}}[{win}])"),
             term("last_seen", f"max_over_time(timestamp(last_over_time(kube_pod_created{{{ns}}}[{s}]))[{win}:{s}])"),
             term("scheduled", f"last_over_time(kube_pod_status_scheduled_time{{{ns}}}[{win}])"),
             term("started", f"last_over_time(kube_pod_start_time{{{ns}}}[{win}])"),
             term("ready", f"min_over_time(kube_pod_status_ready_time{{{ns}}}[{win}])"),
             term("ready_seen", f"min_over_time(timestamp({ready_step})[{win}:{s}])"),
             term("restarts", f"max_over_time((sum by (namespace, pod, uid) (max_over_time("
                              f"kube_pod_container_status_restarts_total{{{ns}}}[{s}])) unless on(namespace, pod, uid) "
                              f"min_over_time(kube_pod_status_ready_time{{{ns}}}[{s}] offset {s}))[{win}:{s}])"),
             f'label_replace(max by (namespace, pod, uid, owner_name) ({pick}), "{TAG}", "owner", "", "")']
    if source.kind == "Deployment":
        terms.append(f'label_replace(max by (namespace, replicaset) (last_over_time(kube_replicaset_owner{{{ns},'
                     f'owner_kind="Deployment",owner_name={_q(source.name)}}}[{win}])), "{TAG}", "replicaset", "", "")')
    return "\n or ".join(terms)


def pods_from_vector(result: list[dict], source: ClusterSource) -> list[PodStart]:
    """``pods_instant_query``'s answer -> one PodStart per pod instance (uid, else name) of the target."""
    rs_of_deployment: set[str] = set()
    rec: dict[tuple[str, str], dict] = {}
    for tag, r, v in _pod_series(result, source, rs_of_deployment, rec, _point):
        if tag in ("created", "last_seen", "scheduled", "started", "ready", "restarts"):
            r[tag] = v
    return _pod_starts(rec, rs_of_deployment, source, lambda r: r.get("restarts", 0.0))


def _point(s: dict) -> float | None:
    raw = (s.get("value") or [None, None])[1]
    return float(raw) if _finite(raw) else None


class KsmShapeError(ValueError):
    """The answer is not what the query asks for (too many series, no pods...): the message says what."""


def pods_from_matrix(result: list[dict], source: ClusterSource) -> list[PodStart]:
    """The range query's answer -> one PodStart per pod instance (uid, else name) of the target."""
    rs_of_deployment: set[str] = set()
    rec: dict[tuple[str, str], dict] = {}
    for tag, r, values in _pod_series(result, source, rs_of_deployment, rec, _points):
        if tag == "created":
            r["created"] = values[-1][1]
            r["last_seen"] = values[-1][0]
        elif tag == "ready":
            r["ready"], r["ready_seen"] = min(v for _, v in values), values[0][0]
        elif tag == "restarts":
            r.setdefault("restart_series", []).append(values)  # one per container
        elif tag in ("scheduled", "started"):
            r[tag] = values[-1][1]
    return _pod_starts(rec, rs_of_deployment, source, _restarts_until_ready)


def _points(s: dict) -> list[tuple[float, float]] | None:
    return [(float(t), float(v)) for t, v in s.get("values") or [] if _finite(v)] or None


def _pod_series(result: list[dict], source: ClusterSource, rs_of_deployment: set[str],
                rec: dict[tuple[str, str], dict], read: Callable[[dict], Any]) -> Iterator[tuple[str | None, dict, Any]]:
    """Each series with a finite ``read`` of it: (its tag, its pod instance's record in ``rec``, what was read), the
    Deployment's ReplicaSets (into ``rs_of_deployment``) and the pods' owners taken on the way."""
    _check_series(result, source)
    for s in result:
        m = s.get("metric") or {}
        tag, got = m.get(TAG), read(s)
        if got is None:
            continue
        if tag == "replicaset":
            rs_of_deployment.add(m.get("replicaset", ""))
            continue
        r = rec.setdefault((m.get("pod", ""), m.get("uid", "")), {})
        if tag == "owner":
            r["owner"] = m.get("owner_name", "")
        else:
            yield tag, r, got


def _restarts_until_ready(r: dict) -> float:
    """The range answer's restarts up to the pod's first readiness seen (later ones do not matter), per container."""
    seen = r.get("ready_seen", math.inf)
    return sum(max((v for t, v in vs if t <= seen), default=0.0) for vs in r.get("restart_series", []))


def _check_series(result: list[dict], source: ClusterSource) -> None:
    if len(result) > MAX_SERIES:
        raise KsmShapeError(f"{len(result)} series for {source.describe()}, more than {MAX_SERIES} (MAX_SERIES): "
                            "a shorter coldStartWindow or a narrower coldStartSelector")


def _pod_starts(rec: dict[tuple[str, str], dict], rs_of_deployment: set[str], source: ClusterSource,
                restarts: Callable[[dict], float]) -> list[PodStart]:
    """One PodStart per pod instance read (``rec``: (pod, uid) -> its terms) of the target, oldest first."""
    pods = []
    for (pod, uid), r in rec.items():
        if source.kind == "Deployment" and r.get("owner") not in rs_of_deployment:
            continue  # a ReplicaSet named like the Deployment's, not owned by it
        if "created" not in r:
            continue
        pods.append(PodStart(pod, _ts(r.get("created")), _ts(r.get("scheduled")), _ts(r.get("started")),
                             _ts(r.get("ready")), restarts(r), r.get("owner", ""), r.get("last_seen"), uid))
    pods.sort(key=lambda p: (p.created or 0.0, p.pod))
    return pods


def _finite(v) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def _ts(v: float | None) -> float | None:
    """A timestamp gauge; 0 (an unset time, as kube-state-metrics writes it) reads as missing."""
    return None if v is None or v <= 0 else v


def ksm_versions_note(pods: Iterable[PodStart]) -> str:
    """A hint when no pod has a ready time: kube_pod_status_ready_time needs kube-state-metrics v2.8 or later."""
    pods = list(pods)
    if pods and all(p.ready is None for p in pods):
        return " (no kube_pod_status_ready_time: kube-state-metrics v2.8 or later exports it)"
    return ""

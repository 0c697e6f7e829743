"""What the real controllers did, read from kube-apiserver's audit log and forescale's record of its answers.

Per ScaledObject (its HPA is ``keda-hpa-<name>``, its Deployment ``<name>``):

* ``syncs``: each HPA reconcile: when the HPA read the scale (and the count it read), and each external metric
  it then asked KEDA for (when the request came and went);
* ``status``: every HPA status write (desiredReplicas), ``scales``: every write of the Deployment's scale and by
  whom (the HPA is ``system:kube-controller-manager``, KEDA's loop ``keda-operator``);
* ``health``: KEDA's fallback health per metric (its status patches), ``hpa``: the HPA KEDA created;
* ``pods``: each pod's creation, Ready (KWOK's status patch) and deletion times;
* ``answers``: forescale's answers (``scaler.drill.scaler``'s record), by ScaledObject and method.

Times are epoch seconds of the wall clock (the apiserver's and forescale's, one machine).
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path

KCM = "system:kube-controller-manager"
KEDA = "keda-operator"
SUFFIX: dict[str, int | Decimal] = {
    "": 1, "m": Decimal("0.001"), "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15,
    "E": 10 ** 18, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40}
_QTY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def quantity(text: str) -> Decimal:
    """A Kubernetes quantity ("12345m", "10", "1.5k", "1e3") as a Decimal."""
    m = _QTY.match(str(text).strip())
    if not m or m.group(2) not in SUFFIX:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return Decimal(m.group(1)) * SUFFIX[m.group(2)]


def milli(text: str) -> int:
    """A quantity in milli-units, as the HPA compares them (rounded up, as ``MilliValue``)."""
    q = quantity(text) * 1000
    return int(q.to_integral_value(rounding="ROUND_CEILING"))


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass
class Sync:
    at: float  # the HPA read the scale
    current: int  # ... and its spec.replicas
    metrics: dict[str, tuple[float, float]] = field(default_factory=dict)  # metric -> (received, completed)
    wrote: float | None = None  # when the HPA's write of a new scale was done (its scale event is a moment after)
    refused: bool = False  # its write was refused (a 409 when the scale moved under it): it reads the scale again

    @property
    def decided(self) -> float:
        """When the HPA decided: its metrics were in (its clock for the windows and periods)."""
        return max([self.at, *(done for _, done in self.metrics.values())])


@dataclass
class Pod:
    name: str
    created: float
    ready: float | None = None
    deleted: float | None = None


@dataclass
class Timelines:
    syncs: dict[str, list[Sync]] = field(default_factory=lambda: defaultdict(list))
    status: dict[str, list[tuple[float, int]]] = field(default_factory=lambda: defaultdict(list))
    scales: dict[str, list[tuple[float, str, int]]] = field(default_factory=lambda: defaultdict(list))
    health: dict[str, list[tuple[float, dict]]] = field(default_factory=lambda: defaultdict(list))
    hpa: dict[str, dict] = field(default_factory=dict)
    pods: dict[str, dict[str, Pod]] = field(default_factory=lambda: defaultdict(dict))
    answers: dict[tuple[str, str], list[dict]] = field(default_factory=lambda: defaultdict(list))

    def desired_after(self, so: str, t0: float, t1: float) -> int | None:
        """The desiredReplicas of the last status write in ``[t0, t1)``, None without one."""
        out = None
        for t, d in self.status[so]:
            if t0 <= t < t1:
                out = d
        return out


def deployment_of(pod_name: str) -> str:
    """``<deployment>-<replicaset hash>-<suffix>`` -> ``<deployment>``."""
    return pod_name.rsplit("-", 2)[0]


def read(audit_log: Path, answers: Path | None = None) -> Timelines:
    tl = Timelines()
    last_sync: dict[str, Sync] = {}
    for line in audit_log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        _event(tl, ev, last_sync)
    if answers is not None and answers.exists():
        for line in answers.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                a = json.loads(line)
            except ValueError:
                continue
            tl.answers[(a["name"], a["method"])].append(a)
    for rows in tl.answers.values():
        rows.sort(key=lambda a: a["wall"])
    return tl


def _event(tl: Timelines, ev: dict, last_sync: dict[str, Sync]) -> None:
    ref, user, verb = ev.get("objectRef", {}), ev.get("user", {}).get("username", ""), ev.get("verb")
    code = ev.get("responseStatus", {}).get("code", 0)
    if ev.get("stage") != "ResponseComplete":
        return
    t, done = ts(ev["requestReceivedTimestamp"]), ts(ev["stageTimestamp"])
    group, res, sub, name = ref.get("apiGroup", ""), ref.get("resource", ""), ref.get("subresource"), ref.get("name")
    scale = group == "apps" and res == "deployments" and sub == "scale"
    if code >= 300:
        # the HPA retries a refused write within the same sync (RetryOnConflict: get the scale again, write the
        # same desired replicas on it): that get is no sync of its own, and no metrics are read for it
        if scale and user == KCM and verb in ("update", "patch") and name in last_sync:
            last_sync[name].refused = True
        return
    if scale:
        if verb == "get" and user == KCM and name in last_sync and last_sync[name].refused:
            last_sync[name].refused = False
        elif verb == "get" and user == KCM:
            sync = Sync(t, int(ev["responseObject"]["spec"].get("replicas", 0)))
            tl.syncs[name].append(sync)
            last_sync[name] = sync
        elif verb in ("update", "patch"):
            tl.scales[name].append((t, user, int((ev.get("requestObject") or {}).get("spec", {}).get("replicas", 0))))
            if user == KCM and name in last_sync and last_sync[name].wrote is None:
                last_sync[name].wrote = done
    elif group == "external.metrics.k8s.io" and user == KCM:
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(ev["requestURI"]).query)
        sel = (q.get("labelSelector") or [""])[0]
        so = sel.split("scaledobject.keda.sh/name=", 1)[-1].split(",")[0]
        if so in last_sync:
            last_sync[so].metrics[res] = (t, done)
    elif group == "autoscaling" and res == "horizontalpodautoscalers":
        so = name.removeprefix("keda-hpa-") if name else ""
        if sub == "status" and user == KCM:
            obj = ev.get("requestObject") or {}
            tl.status[so].append((t, int(obj.get("status", {}).get("desiredReplicas", 0))))
        elif sub is None and user == KEDA and (ev.get("responseObject") or {}).get("spec"):
            tl.hpa[so] = ev["responseObject"]  # as the apiserver defaulted it
    elif group == "keda.sh" and res == "scaledobjects" and sub == "status":
        health = ((ev.get("requestObject") or {}).get("status") or {}).get("health")
        if health is not None:
            tl.health[name].append((t, health))
    elif group == "" and res == "pods":
        if verb == "create":
            pod_name = (ev.get("responseObject") or {}).get("metadata", {}).get("name")
            if pod_name:
                tl.pods[deployment_of(pod_name)][pod_name] = Pod(pod_name, t)
        elif name:
            pod = tl.pods[deployment_of(name)].get(name)
            if pod is None:
                return
            if verb == "patch" and sub == "status" and user == "kwok" and pod.ready is None:
                pod.ready = done
            elif verb == "delete" and pod.deleted is None:
                pod.deleted = t

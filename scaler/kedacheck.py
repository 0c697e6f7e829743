"""What KEDA and the Kubernetes API server refuse in a ScaledObject, offline: the one validator.

``problems(doc)`` checks a ScaledObject (parsed YAML, ``manifest_yaml.load_all``) as a cluster with KEDA
v2.21.0 would, in the cluster's order:

1. the API server (``scaler.kedaschema``): ``apiVersion`` keda.sh/v1alpha1; the CRD's ``openAPIV3Schema``
   (shipped in ``scaler/data/keda/``) made strict as ``kubectl apply``'s field validation is (an unknown field
   such as ``spec.minReplicas`` is an error, not silently pruned; a null is dropped first, as the API server
   prunes it); ``metadata`` as ObjectMeta (a DNS-1123 name); the CRD's rule minReplicaCount <= maxReplicaCount;
2. only when those pass (the webhook never sees an object the API server refused), KEDA's admission webhook
   (``apis/keda/v1alpha1/scaledobject_webhook.go``): the name's length (a label value, and the HPA's name),
   idleReplicaCount below minReplicaCount, a fallback needs a trigger other than cpu/memory, unique trigger
   names, useCachedMetrics not on cpu/memory/cron, scalingModifiers' formula (names the triggers, compiles)
   and target (> 0), fallback behavior scalingModifiers needs a formula; its two warnings
   (pollingInterval and cooldownPeriod that change nothing);
3. what KEDA's operator and the HPA it creates refuse next: a trigger type KEDA has no scaler for, a
   metricType outside AverageValue/Value (Utilization for cpu/memory only), the HPA's behavior rules
   (selectPolicy Max/Min/Disabled, policies Pods/Percent with value > 0 and periodSeconds in 1..1800, at
   least one policy, a stabilization window in 0..3600 s, a non-negative tolerance).

Each ``Problem`` names its path (``spec.triggers[0].metricType``), the value received and what is accepted;
``forescale check`` prints them, ``manifest.plans`` (``backtest --scaledobject``) refuses with the same text.
Cross-object rules (two ScaledObjects for one workload) and what needs the cluster (the workload's kind) are
not checked.
"""

from __future__ import annotations

import difflib
import re
from functools import cache
from importlib.resources import files
from typing import Any, Mapping

from . import formula
from .kedaschema import MAX_LABEL, Problem, api_server, pruned, show

KEDA_VERSION = "v2.21.0"
API_VERSION = "keda.sh/v1alpha1"
RESOURCE_TYPES = ("cpu", "memory")  # KEDA's resource-metric scalers
MAX_POLICY_PERIOD = 1800  # autoscaling/v2: a scaling policy's periodSeconds
MAX_STABILIZATION = 3600  # autoscaling/v2: stabilizationWindowSeconds
_QUANTITY = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?")
_SUFFIX = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}


def problems(doc: Mapping) -> list[Problem]:
    """Every refusal (and KEDA's warnings) for the ScaledObject ``doc``; empty when a cluster takes it."""
    out = []
    if doc.get("apiVersion") != API_VERSION:
        out.append(Problem("apiVersion", f"{show(doc.get('apiVersion'))}: KEDA {KEDA_VERSION} serves ScaledObject "
                                         f"as {API_VERSION} only (kubectl: no matches for that kind and version); "
                                         f"accepted: {API_VERSION}"))
    doc = pruned(doc)
    out += api_server(doc)
    if out:
        return out
    return _webhook(doc) + _operator(doc)


def errors(doc: Mapping) -> list[Problem]:
    """``problems`` without the warnings: what makes a cluster refuse ``doc``."""
    return [p for p in problems(doc) if not p.warning]


@cache
def scaler_types() -> tuple[str, ...]:
    """KEDA's trigger types (``scaler/data/keda/scaler-types.txt``)."""
    text = (files("scaler") / "data" / "keda" / "scaler-types.txt").read_text(encoding="utf-8")
    return tuple(ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#"))


# --------------------------------------------------------------------------- KEDA's admission webhook


def _webhook(doc: Mapping) -> list[Problem]:
    spec, name = doc["spec"], doc["metadata"]["name"]
    trig = spec["triggers"]
    adv = spec.get("advanced") or {}
    out = []
    hpa = ((adv.get("horizontalPodAutoscalerConfig") or {}).get("name")) or f"keda-hpa-{name}"
    if len(name) > MAX_LABEL:
        out.append(Problem("metadata.name", f"{len(name)} characters; KEDA uses the name as a label value: "
                                            f"accepted: at most {MAX_LABEL}"))
    elif len(hpa) > MAX_LABEL:
        out.append(Problem("metadata.name", f"KEDA's HPA would be named {hpa!r} ({len(hpa)} characters); accepted: "
                                            f"at most {MAX_LABEL}: shorten the name or set "
                                            f"spec.advanced.horizontalPodAutoscalerConfig.name"))
    lo = spec.get("minReplicaCount")
    hpa_lo = 0 if lo is None else max(lo, 1)  # KEDA compares with the HPA's minReplicas when it is given
    idle = spec.get("idleReplicaCount")
    if idle is not None and idle >= hpa_lo:
        seen_as = "absent: 0" if lo is None else f"{lo}, counted as 1" if lo == 0 else str(lo)
        out.append(Problem("spec.idleReplicaCount", f"{idle} is not below minReplicaCount ({seen_as}); accepted: an "
                                                    f"idleReplicaCount below minReplicaCount (KEDA's webhook)"))
    mods = adv.get("scalingModifiers")
    using = bool(mods)
    if spec.get("fallback") and not using and all(t["type"] in RESOURCE_TYPES for t in trig):
        out.append(Problem("spec.fallback", "KEDA's fallback needs a trigger other than cpu and memory (one whose "
                                            "metric KEDA serves itself); accepted: such a trigger, or no fallback"))
    seen: dict[str, int] = {}
    for i, t in enumerate(trig):
        if t.get("useCachedMetrics") and t["type"] in (*RESOURCE_TYPES, "cron"):
            out.append(Problem(f"spec.triggers[{i}].useCachedMetrics", f"true on a {t['type']} trigger: KEDA "
                                                                       f"supports it on other scalers only"))
        n = t.get("name") or ""
        if n and n in seen:
            out.append(Problem(f"spec.triggers[{i}].name", f"{n!r} is the name of spec.triggers[{seen[n]}] too; "
                                                           f"accepted: trigger names unique in the ScaledObject"))
        seen.setdefault(n, i)
    if mods:
        out += _modifiers(mods, trig)
    if (spec.get("fallback") or {}).get("behavior") == "scalingModifiers" and not (mods or {}).get("formula"):
        out.append(Problem("spec.fallback.behavior", "scalingModifiers needs spec.advanced.scalingModifiers.formula"))
    out += _warnings(spec, using)
    return out


def _modifiers(m: Mapping, trig: list) -> list[Problem]:
    at = "spec.advanced.scalingModifiers"
    text = m.get("formula") or ""
    if not text:
        return [Problem(f"{at}.formula", "missing; a scalingModifiers block needs a formula (over trigger names)")]
    out = []
    if not m.get("target"):
        out.append(Problem(f"{at}.target", "missing; a formula needs a target (the HPA target of its value)"))
    else:
        try:
            t = float(m["target"])
        except ValueError:
            t = float("nan")
        if not t > 0:
            out.append(Problem(f"{at}.target", f"{show(m['target'])}: accepted: a number > 0 (a string)"))
    names = tuple(t["name"] for t in trig if t.get("name") and t["type"] not in RESOURCE_TYPES)
    why = formula.keda_problem(text, names)
    if why:
        out.append(Problem(f"{at}.formula", why))
    return out


def _warnings(spec: Mapping, modifiers: bool) -> list[Problem]:
    lo, idle = spec.get("minReplicaCount") or 0, spec.get("idleReplicaCount")
    polling_matters = lo == 0 or idle is not None or any(t.get("useCachedMetrics") for t in spec["triggers"])
    out = []
    if "pollingInterval" in spec and not polling_matters and not modifiers:
        out.append(Problem("spec.pollingInterval", "changes no scaling here (KEDA's warning): with minReplicaCount "
                                                   ">= 1, no idleReplicaCount and no useCachedMetrics the HPA "
                                                   "polls the metric itself; it only paces KEDA's status updates",
                           warning=True))
    if "cooldownPeriod" in spec and lo > 0 and idle is None:
        out.append(Problem("spec.cooldownPeriod", "changes nothing here (KEDA's warning): it applies only with "
                                                  "minReplicaCount 0 or an idleReplicaCount", warning=True))
    return out


# --------------------------------------------------------------------------- KEDA's operator and the HPA


def _operator(doc: Mapping) -> list[Problem]:
    spec, out = doc["spec"], []
    types = scaler_types()
    for i, t in enumerate(spec["triggers"]):
        kind, at = t["type"], f"spec.triggers[{i}]"
        if kind not in types:
            near = difflib.get_close_matches(kind, types, n=1, cutoff=0.6)
            out.append(Problem(f"{at}.type", f"{show(kind)}: KEDA {KEDA_VERSION} has no scaler of that type (its "
                                             f"operator refuses the ScaledObject){f'; did you mean {near[0]!r}?' if near else ''}"
                                             f" accepted: external (forescale), prometheus, cron, ... "
                                             f"({len(types)} types)"))
        mt = t.get("metricType")
        ok = ("Utilization", "AverageValue") if kind in RESOURCE_TYPES else ("AverageValue", "Value")
        if mt is None and kind in RESOURCE_TYPES:
            out.append(Problem(f"{at}.metricType", f"missing; KEDA's {kind} scaler needs one (since v2.18): accepted: "
                                                   f"{', '.join(ok)}"))
        elif mt is not None and mt not in ok:
            out.append(Problem(f"{at}.metricType", f"{show(mt)}: accepted for a trigger of type {kind}: {', '.join(ok)}"
                                                   + ("" if kind in RESOURCE_TYPES else " (absent: AverageValue)")))
    beh = ((spec.get("advanced") or {}).get("horizontalPodAutoscalerConfig") or {}).get("behavior") or {}
    for side in ("scaleUp", "scaleDown"):
        if side in beh:
            out += _rules(beh[side], f"spec.advanced.horizontalPodAutoscalerConfig.behavior.{side}")
    return out


def _rules(r: Mapping, at: str) -> list[Problem]:
    """autoscaling/v2's validation of one side of the HPA's behavior (the API server refuses KEDA's HPA)."""
    out = []
    w = r.get("stabilizationWindowSeconds")
    if w is not None and not 0 <= w <= MAX_STABILIZATION:
        out.append(Problem(f"{at}.stabilizationWindowSeconds", f"{w}: accepted: 0..{MAX_STABILIZATION} (seconds)"))
    sel = r.get("selectPolicy")
    if sel is not None and sel not in ("Max", "Min", "Disabled"):
        out.append(Problem(f"{at}.selectPolicy", f"{show(sel)}: accepted: Max, Min, Disabled"))
    pols = r.get("policies")
    if pols is not None and not pols:
        out.append(Problem(f"{at}.policies", "an empty list; accepted: at least one {type, value, periodSeconds} "
                                             "(or leave policies out for Kubernetes' defaults)"))
    for i, p in enumerate(pols or []):
        if p["type"] not in ("Pods", "Percent"):
            out.append(Problem(f"{at}.policies[{i}].type", f"{show(p['type'])}: accepted: Pods, Percent"))
        if p["value"] <= 0:
            out.append(Problem(f"{at}.policies[{i}].value", f"{p['value']}: accepted: a whole number > 0"))
        if not 0 < p["periodSeconds"] <= MAX_POLICY_PERIOD:
            out.append(Problem(f"{at}.policies[{i}].periodSeconds",
                               f"{p['periodSeconds']}: accepted: 1..{MAX_POLICY_PERIOD} (seconds)"))
    tol = r.get("tolerance")
    if tol is not None and quantity(tol) < 0:
        out.append(Problem(f"{at}.tolerance", f"{show(tol)}: accepted: a quantity >= 0 (a fraction, e.g. 0.05)"))
    return out


def quantity(v: Any) -> float:
    """A Kubernetes quantity (``0.05``, ``50m``, ``1e-2``, ``2Ki``) as a float; the schema's pattern has passed."""
    if isinstance(v, (int, float)):
        return float(v)
    m = _QUANTITY.fullmatch(str(v).strip())
    if m is None:
        raise ValueError(f"not a Kubernetes quantity: {show(v)}")
    x = float(m.group(1) + (m.group(2) or ""))
    return x * _SUFFIX.get(m.group(3) or "", 1.0)


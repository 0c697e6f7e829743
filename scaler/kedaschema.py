"""What the Kubernetes API server refuses in a ScaledObject, before KEDA sees it; and the ``Problem`` every check
of ``scaler.kedacheck`` reports.

``api_server(doc)`` checks the object (nulls pruned first, ``pruned``, as the API server prunes them) against
KEDA's CRD ``openAPIV3Schema`` (shipped in ``scaler/data/keda/``) made strict as ``kubectl apply``'s field
validation is (an unknown field such as ``spec.minReplicas`` is an error, not silently pruned), ``metadata`` as
ObjectMeta (a DNS-1123 name and namespace), and the CRD's rule minReplicaCount <= maxReplicaCount. Each schema
error becomes a ``Problem`` that names its path, the value received (``show``: short, never a megabyte) and what
is accepted.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any, Iterator, Mapping

from .scaledobject import MAX_REPLICAS

MAX_LABEL = 63  # a label value and a DNS-1123 label (the ScaledObject's name is both, KEDA's HPA name too)
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# ObjectMeta as a client may send it (the CRD leaves metadata to the API server)
_META = {"type": "object", "additionalProperties": False, "properties": {
    **{k: {"type": "string"} for k in ("name", "generateName", "namespace", "uid", "resourceVersion", "selfLink",
                                        "creationTimestamp", "deletionTimestamp")},
    "generation": {"type": "integer"}, "deletionGracePeriodSeconds": {"type": "integer"},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    "finalizers": {"type": "array", "items": {"type": "string"}},
    "ownerReferences": {"type": "array", "items": {"type": "object"}},
    "managedFields": {"type": "array", "items": {"type": "object"}}}}


@dataclass(frozen=True)
class Problem:
    """One thing KEDA (or the API server, or the HPA) refuses, or warns about, at ``path``."""

    path: str  # spec.triggers[0].metricType; "" for the object
    message: str
    warning: bool = False

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def api_server(doc: Mapping) -> list[Problem]:
    """What the API server refuses in ``doc`` (already ``pruned``): the strict schema, ObjectMeta, the CRD's rule."""
    return _schema(doc) + _cel(doc)


def pruned(v: Any) -> Any:
    """``v`` without null mapping values (the API server prunes them before it validates)."""
    if isinstance(v, Mapping):
        return {k: pruned(x) for k, x in v.items() if x is not None}
    return [pruned(x) for x in v] if isinstance(v, list) else v


@cache
def _validator():
    import jsonschema
    import yaml

    crd = yaml.safe_load((files("scaler") / "data" / "keda" / "keda.sh_scaledobjects.yaml").read_text("utf-8"))
    schema = _strict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = _META
    schema["properties"]["status"] = {}  # the status is the operator's, never applied
    schema["required"] = ["apiVersion", "kind", "metadata", "spec"]
    checker = jsonschema.FormatChecker()
    checker.checks("int32")(lambda v: not isinstance(v, int) or -2 ** 31 <= v < 2 ** 31)
    checker.checks("int64")(lambda v: not isinstance(v, int) or -2 ** 63 <= v < 2 ** 63)
    return jsonschema.Draft4Validator(schema, format_checker=checker)  # draft 4: 1.0 is not an integer


def _strict(node: Any) -> Any:
    """The schema with every object that lists its properties closed (``additionalProperties: false``)."""
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items() if k != "description"}
        if "properties" in out and "additionalProperties" not in out and \
                not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    return [_strict(v) for v in node] if isinstance(node, list) else node


def _schema(doc: Mapping) -> list[Problem]:
    out, seen = [], set()
    for e in sorted(_validator().iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path]):
        for p in _translate(e):
            if p.path not in seen:
                seen.add(p.path)
                out.append(p)
    meta = doc.get("metadata") or {}
    if not out and not meta.get("name"):
        out.append(Problem("metadata.name", "missing; kubectl apply needs the ScaledObject's name"))
    for key, rx, what, n in (("name", _DNS_SUBDOMAIN, "a DNS-1123 subdomain: lower-case letters, digits, '-' and "
                                                      "'.'", 253),
                             ("namespace", _DNS_LABEL, "a DNS-1123 label: lower-case letters, digits and '-'", MAX_LABEL)):
        v = meta.get(key)
        if isinstance(v, str) and v and (len(v) > n or not rx.fullmatch(v)):
            out.append(Problem(f"metadata.{key}", f"{show(v)}: accepted: {what}, at most {n} characters"))
    return out


def _translate(e) -> Iterator[Problem]:
    path = _path(e.absolute_path)
    v, kind = e.instance, e.validator
    if kind == "additionalProperties":
        allowed = sorted((e.schema.get("properties") or {}))
        for k in sorted(set(v) - set(allowed)):
            near = difflib.get_close_matches(k, allowed, n=1, cutoff=0.6)
            yield Problem(_join(path, k), f"unknown field {show(k)}: KEDA's ScaledObject has no such field (kubectl "
                                          f"apply refuses it){f'; did you mean {near[0]!r}?' if near else ''} "
                                          f"accepted here: {', '.join(allowed)}")
    elif kind == "required":
        for k in e.validator_value:
            if isinstance(v, Mapping) and k not in v:
                yield Problem(_join(path, k), f"missing; KEDA's schema requires it{_HINT.get(k, '')}")
    elif kind == "enum":
        yield Problem(path, f"{show(v)}: accepted: {', '.join(map(str, e.validator_value))}")
    elif kind == "minItems":
        yield Problem(path, f"an empty list; accepted: at least {e.validator_value} item(s)")
    elif kind == "minLength":
        yield Problem(path, "empty; accepted: a non-empty string")
    elif kind == "minimum":
        yield Problem(path, f"got {show(v)}; accepted: a whole number >= {e.validator_value}{_unit(path)}")
    elif kind in ("pattern", "anyOf"):
        yield Problem(path, f"{show(v)}: accepted: a Kubernetes quantity, a number or a string such as 0.05 or 50m")
    elif kind == "format":
        yield Problem(path, f"{show(v)}: out of range; accepted: a whole number that fits {e.validator_value}")
    elif kind == "type":
        got = show(v) if isinstance(v, (Mapping, list)) else f"{show(v)} ({_kind(v)})"
        yield Problem(path, f"got {got}; accepted: {_accepted(e.schema, path)}")
    else:  # pragma: no cover - the CRD uses no other keyword
        yield Problem(path, e.message[:200])


_HINT = {"scaleTargetRef": " (the workload to scale: scaleTargetRef: {name: my-deployment})",
         "triggers": " (at least one trigger)", "replicas": " (the replicas KEDA sets while the metric fails)",
         "failureThreshold": " (failed polls before the fallback applies)"}


def _accepted(schema: Mapping, path: str) -> str:
    t = schema.get("type")
    if t == "integer":
        lo = schema.get("minimum")
        return "a whole number" + (f" >= {lo}" if lo is not None else "") + _unit(path)
    if t == "string" and re.search(r"\.metadata\.[^.]+$", path) and path.startswith("spec.triggers"):
        return "a string (KEDA's trigger metadata is map[string]string: quote numbers and booleans)"
    return {"string": "a string", "boolean": "true or false", "object": "a mapping", "array": "a list",
            "number": "a number"}.get(str(t), str(t))


def _unit(path: str) -> str:
    return " (seconds, without a unit)" if re.search(r"(Period|Interval|Seconds)$", path) else ""


def _cel(doc: Mapping) -> list[Problem]:
    """The CRD's x-kubernetes-validations rule, evaluated by the API server (also beside other errors, unless a
    type is wrong)."""
    spec = doc.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    lo, hi = spec.get("minReplicaCount"), spec.get("maxReplicaCount", MAX_REPLICAS)
    if _whole(lo) and _whole(hi) and lo > hi:
        return [Problem("spec.minReplicaCount", f"{lo} is greater than maxReplicaCount {hi}"
                                                f"{'' if 'maxReplicaCount' in spec else ' (its default)'}; accepted: "
                                                f"minReplicaCount <= maxReplicaCount (KEDA's CRD rule)")]
    return []

# --------------------------------------------------------------------------- text


def _path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def show(v: Any) -> str:
    """A value as a message may quote it: short, never a megabyte."""
    if isinstance(v, Mapping):
        return "a mapping"
    if isinstance(v, list):
        return "a list"
    text = json.dumps(v) if isinstance(v, (str, bool, int, float)) or v is None else repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "a boolean"
    return {int: "a whole number", float: "a number", str: "a string", type(None): "null"}.get(
        type(v), "a mapping" if isinstance(v, Mapping) else "a list" if isinstance(v, list) else type(v).__name__)

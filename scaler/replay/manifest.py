"""A KEDA ScaledObject manifest as the replay runs it: parsed, checked field by field, turned into a ``Plan``.

``plans(documents)`` takes parsed YAML documents (``(where, document)``
pairs, read by ``scaler.manifest_yaml``; non-ScaledObject documents are skipped), refuses what KEDA
refuses (``scaler.kedacheck``, as ``forescale check``) and returns one ``Plan`` per
ScaledObject; ``engine.run(..., scaled_objects=plans)`` replays them next to
the policy families. Every field the replay honours is listed in ``SPEC``;
any other field is a ``ManifestError`` naming the field and the document, never ignored.

Triggers (``scaler.replay.manifesttrigger``): ``external`` (forescale's scaler: its metadata through
``spec.parse_metadata``, the server's parser), ``prometheus`` (``threshold``,
``activationThreshold``; its series is given to the replay by trigger name)
and ``cron`` (``timezone``, ``start``, ``end``, ``desiredReplicas``). The field
readers and ``ManifestError``: ``scaler.replay.manifestfields``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping

from ..deadband import KUBERNETES_TOLERANCE
# KEDA's and Kubernetes' defaults for what a ScaledObject leaves out: the core's, which the writer uses too
from ..scaledobject import (COOLDOWN_SECONDS, DOWN_DEFAULT, DOWN_WINDOW_SECONDS, MAX_REPLICAS, METRIC_TYPES,
                           MIN_REPLICAS, POLLING_SECONDS, REPLAY_ANNOTATION, SELECT_DEFAULT, UP_DEFAULT,
                           UP_WINDOW_SECONDS)
from .. import formula, kedacheck
from ..kedaschema import pruned
from .hpa import Hpa, ScalingPolicy, ScalingRules
from .keda import FALLBACK_BEHAVIORS, Fallback
from .manifestfields import ManifestError, known, mapping, number, whole
from .manifesttrigger import Trigger, parse_trigger

# the fields the replay honours or that cannot change what it computes (identity, naming, ownership)
SPEC = {"scaleTargetRef", "pollingInterval", "cooldownPeriod", "initialCooldownPeriod", "minReplicaCount",
        "maxReplicaCount", "idleReplicaCount", "fallback", "advanced", "triggers"}
ADVANCED = {"horizontalPodAutoscalerConfig", "scalingModifiers", "restoreToOriginalReplicaCount"}
HPA_CONFIG = {"behavior", "name"}
RULES = {"stabilizationWindowSeconds", "selectPolicy", "policies", "tolerance"}


@dataclass(frozen=True)
class Modifiers:
    """``advanced.scalingModifiers``."""

    formula: formula.Formula
    target: float
    activation_target: float
    per_pod: bool


@dataclass(frozen=True)
class Plan:
    """One ScaledObject, ready to replay."""

    name: str
    namespace: str
    where: str  # FILE document N
    hpa: Hpa  # KEDA's and the HPA's settings (its target is the first trigger's; each metric has its own)
    triggers: tuple[Trigger, ...]
    fallback: Fallback | None
    modifiers: Modifiers | None
    explicit_up_tolerance: bool  # behavior.scaleUp.tolerance given (else the cluster's, --hpa-tolerance)
    replay: str = ""  # metadata.annotations[REPLAY_ANNOTATION]: the world it was ranked in (read by the CLI)


def with_events(plans_: Iterable[Plan], read: Callable[[Plan, Trigger], tuple[tuple, str]]) -> list[Plan]:
    """``plans_`` with each forescale trigger that sets ``eventsFile`` holding ``read(plan, trigger)``'s events and
    their source (the path in the manifest is one in the scaler's pod: the caller says which file stands for it)."""
    out = []
    for p in plans_:
        trig = []
        for t in p.triggers:
            if t.kind == "forescale" and t.spec is not None and t.spec.events_file:
                events, source = read(p, t)
                t = replace(t, events=tuple(events), events_source=source)
            trig.append(t)
        out.append(replace(p, triggers=tuple(trig)))
    return out


def with_cold_starts(plans_: Iterable[Plan], decide: Callable[[Plan, Trigger], tuple[float, str]]) -> list[Plan]:
    """``plans_`` with each forescale trigger of ``coldStartFrom: cluster`` leading with ``decide(plan, trigger)``'s
    T_cold (seconds, and the note saying where it came from): the start-ups the caller holds, as the server reads
    them (``scaler.coldstart``)."""
    out = []
    for p in plans_:
        trig = []
        for t in p.triggers:
            if t.kind == "forescale" and t.spec is not None and t.spec.cold_start_cluster is not None:
                seconds, note = decide(p, t)
                t = replace(t, spec=replace(t.spec, lead=t.spec.lead.with_cold_start(seconds)), cold_start_note=note)
            trig.append(t)
        out.append(replace(p, triggers=tuple(trig)))
    return out


def plans(documents: Iterable[tuple[str, Any]]) -> list[Plan]:
    """The ScaledObjects among ``(where, document)`` pairs, in order; raises ``ManifestError``."""
    out: list[Plan] = []
    for where, doc in _expanded(documents):
        if doc is None:
            continue
        if not isinstance(doc, Mapping):
            raise ManifestError(f"{where}: not a YAML mapping (a Kubernetes object), got {type(doc).__name__}")
        if doc.get("kind") != "ScaledObject" or not str(doc.get("apiVersion", "")).startswith("keda.sh/"):
            continue
        refused = kedacheck.errors(doc)  # what KEDA refuses, as `forescale check` says it
        if refused:
            name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), Mapping) else None
            raise ManifestError("\n".join(f"{where} (ScaledObject {str(name or '')!r}): {p}" for p in refused))
        out.append(plan(where, pruned(doc)))  # a null is no value: the API server drops it before KEDA reads
    names = [p.name for p in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ManifestError(f"ScaledObject name {dup[0]!r} appears more than once; each replayed ScaledObject "
                            f"is a policy named by its metadata.name, so names must differ")
    return out


def _expanded(documents: Iterable[tuple[str, Any]]) -> Iterable[tuple[str, Any]]:
    """The documents, a ``kind: List`` (``kubectl get ... -o yaml``) replaced by its items."""
    for where, doc in documents:
        if isinstance(doc, Mapping) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            for i, item in enumerate(doc["items"]):
                yield f"{where} item {i + 1}", item
        else:
            yield where, doc


def plan(where: str, doc: Mapping) -> Plan:
    md = doc.get("metadata") or {}
    name = str(md.get("name") or "")
    if not name:
        raise ManifestError(f"{where}: ScaledObject without metadata.name (the replay names the policy after it)")
    at = f"{where} (ScaledObject {name!r})"
    for k in (md.get("annotations") or {}):
        if str(k).startswith("autoscaling.keda.sh/"):
            raise ManifestError(f"{at}: metadata.annotations.{k}: pausing KEDA cannot be replayed; remove it")
    spec = mapping(doc.get("spec"), at, "spec")
    known(spec, SPEC, at, "spec")
    ints = {k: whole(spec, k, at, "spec") for k in ("pollingInterval", "cooldownPeriod", "initialCooldownPeriod",
                                                    "minReplicaCount", "maxReplicaCount", "idleReplicaCount")}
    poll = ints["pollingInterval"] if ints["pollingInterval"] is not None else POLLING_SECONDS
    if poll < 1:
        raise ManifestError(f"{at}: spec.pollingInterval {poll}: accepted is >= 1 (seconds)")
    lo = ints["minReplicaCount"] or MIN_REPLICAS
    hi = ints["maxReplicaCount"] if ints["maxReplicaCount"] is not None else MAX_REPLICAS
    if hi < max(lo, 1):
        raise ManifestError(f"{at}: spec.maxReplicaCount {hi} below minReplicaCount {lo} (or 0)")
    idle = ints["idleReplicaCount"]
    if idle is not None and (idle != 0 or lo < 1):
        raise ManifestError(f"{at}: spec.idleReplicaCount {idle}: KEDA supports only 0, with minReplicaCount >= 1")
    adv = mapping(spec.get("advanced"), at, "spec.advanced", optional=True)
    known(adv, ADVANCED, at, "spec.advanced")
    hpa_cfg = mapping(adv.get("horizontalPodAutoscalerConfig"), at, "spec.advanced.horizontalPodAutoscalerConfig",
                      optional=True)
    known(hpa_cfg, HPA_CONFIG, at, "spec.advanced.horizontalPodAutoscalerConfig")
    beh_at = "spec.advanced.horizontalPodAutoscalerConfig.behavior"
    beh = mapping(hpa_cfg.get("behavior"), at, beh_at, optional=True)
    known(beh, {"scaleUp", "scaleDown"}, at, beh_at)
    up = _rules(beh.get("scaleUp"), at, f"{beh_at}.scaleUp", UP_WINDOW_SECONDS, UP_DEFAULT, KUBERNETES_TOLERANCE.up)
    down = _rules(beh.get("scaleDown"), at, f"{beh_at}.scaleDown", DOWN_WINDOW_SECONDS, DOWN_DEFAULT,
                  KUBERNETES_TOLERANCE.down)
    trig_raw = spec.get("triggers")
    if not isinstance(trig_raw, list) or not trig_raw:
        raise ManifestError(f"{at}: spec.triggers must be a non-empty list")
    triggers = tuple(parse_trigger(t, i, at, name, str(md.get("namespace") or "")) for i, t in enumerate(trig_raw))
    tn = [t.name for t in triggers]
    if len(set(tn)) != len(tn):
        raise ManifestError(f"{at}: two triggers share the name {next(n for n in tn if tn.count(n) > 1)!r}")
    mods = _modifiers(adv.get("scalingModifiers"), at, triggers)
    fb = _fallback(spec.get("fallback"), at, mods)
    value = next((t for t in triggers if not t.per_pod), None)
    if fb is not None and mods is None and value is not None:
        raise ManifestError(f"{at}: spec.fallback with {value.where}.metricType Value cannot be replayed: KEDA falls "
                            f"back on a Value metric too (the fallback replicas over the ready ones), the replay on "
                            f"AverageValue metrics only; replay it with AverageValue or without the fallback")
    hpa = Hpa(target=triggers[0].target, min_replicas=lo, max_replicas=hi, tolerance_up=up.tolerance,
              tolerance_down=down.tolerance, polling_seconds=float(poll),
              cooldown_seconds=float(ints["cooldownPeriod"] if ints["cooldownPeriod"] is not None
                                     else COOLDOWN_SECONDS),
              initial_cooldown_seconds=float(ints["initialCooldownPeriod"] or 0), idle_replicas=idle,
              activation_threshold=triggers[0].activation, scale_up=up, scale_down=down,
              legacy=hpa_cfg.get("behavior") is None)
    up_tol = "tolerance" in ((beh.get("scaleUp") or {}) if isinstance(beh.get("scaleUp"), Mapping) else {})
    replay = str((md.get("annotations") or {}).get(REPLAY_ANNOTATION) or "")
    return Plan(name, str(md.get("namespace") or ""), where, hpa, triggers, fb, mods, up_tol, replay)


# --------------------------------------------------------------------------- parts


def _rules(raw: Any, at: str, path: str, window: float, default: tuple, tol: float) -> ScalingRules:
    r = mapping(raw, at, path, optional=True)
    known(r, RULES, at, path)
    w = whole(r, "stabilizationWindowSeconds", at, path)
    if w is not None and w > 3600:
        raise ManifestError(f"{at}: {path}.stabilizationWindowSeconds {w}: accepted is 0..3600")
    select = r.get("selectPolicy", SELECT_DEFAULT)
    if select not in ("Max", "Min", "Disabled"):
        raise ManifestError(f"{at}: {path}.selectPolicy {select!r}: accepted are Max, Min, Disabled")
    pols_raw = r.get("policies")
    if pols_raw is None:
        pols = tuple(ScalingPolicy(k, float(v), float(p)) for k, v, p in default)
    else:
        if not isinstance(pols_raw, list) or (not pols_raw and select != "Disabled"):
            raise ManifestError(f"{at}: {path}.policies must be a non-empty list of {{type, value, periodSeconds}}")
        out = []
        for i, p in enumerate(pols_raw):
            pp = mapping(p, at, f"{path}.policies[{i}]")
            known(pp, {"type", "value", "periodSeconds"}, at, f"{path}.policies[{i}]")
            kind = pp.get("type")
            if kind not in ("Pods", "Percent"):
                raise ManifestError(f"{at}: {path}.policies[{i}].type {kind!r}: accepted are Pods, Percent")
            v, per = whole(pp, "value", at, f"{path}.policies[{i}]"), whole(pp, "periodSeconds", at,
                                                                            f"{path}.policies[{i}]")
            if not v or not per or per > 1800:
                raise ManifestError(f"{at}: {path}.policies[{i}]: value must be > 0 and periodSeconds in 1..1800")
            out.append(ScalingPolicy(kind, float(v), float(per)))
        pols = tuple(out)
    t = tol if r.get("tolerance") is None else number(r.get("tolerance"), at, f"{path}.tolerance")
    if "scaleDown" in path and t >= 1:
        raise ManifestError(f"{at}: {path}.tolerance {t:g}: accepted is a fraction in [0, 1)")
    return ScalingRules(float(window if w is None else w), select, pols, t)



def _modifiers(raw: Any, at: str, triggers: tuple[Trigger, ...]) -> Modifiers | None:
    path = "spec.advanced.scalingModifiers"
    m = mapping(raw, at, path, optional=True)
    if not m:
        return None
    known(m, {"formula", "target", "activationTarget", "metricType"}, at, path)
    if not m.get("formula") or m.get("target") in (None, ""):
        raise ManifestError(f"{at}: {path} needs both formula and target")
    try:
        f = formula.parse(str(m["formula"]), tuple(t.name for t in triggers))
    except formula.FormulaError as e:
        raise ManifestError(f"{at}: {path}.formula: {e}") from None
    target = number(m["target"], at, f"{path}.target")
    if target <= 0:
        raise ManifestError(f"{at}: {path}.target must be > 0")
    mt = m.get("metricType", METRIC_TYPES[0])
    if mt not in METRIC_TYPES:
        raise ManifestError(f"{at}: {path}.metricType {mt!r}: accepted are {', '.join(METRIC_TYPES)}")
    act = number(m.get("activationTarget", "0"), at, f"{path}.activationTarget")
    return Modifiers(f, target, act, mt == "AverageValue")


def _fallback(raw: Any, at: str, mods: Modifiers | None) -> Fallback | None:
    if raw is None:
        return None
    f = mapping(raw, at, "spec.fallback")
    known(f, {"failureThreshold", "replicas", "behavior"}, at, "spec.fallback")
    thr, rep = whole(f, "failureThreshold", at, "spec.fallback"), whole(f, "replicas", at, "spec.fallback")
    if thr is None or rep is None:
        raise ManifestError(f"{at}: spec.fallback needs failureThreshold and replicas")
    beh = f.get("behavior", "static")
    if beh not in FALLBACK_BEHAVIORS:
        raise ManifestError(f"{at}: spec.fallback.behavior {beh!r} cannot be replayed; accepted: "
                            f"{', '.join(FALLBACK_BEHAVIORS)}")
    if mods is not None and float(mods.target) != int(mods.target):
        raise ManifestError(f"{at}: spec.fallback with scalingModifiers needs a whole-number target (KEDA)")
    return Fallback(thr, rep, beh)

"""A KEDA ScaledObject manifest as the replay runs it: parsed, checked field by field, turned into a ``Plan``.

``plans(documents)`` takes parsed YAML documents (``(where, document)``
pairs, read by ``scaler.manifest_yaml``; non-ScaledObject documents are skipped), refuses what KEDA
refuses (``scaler.kedacheck``, as ``forescale check``) and returns one ``Plan`` per
ScaledObject; ``engine.run(..., scaled_objects=plans)`` replays them next to
the policy families. Every field the replay honours is listed in ``SPEC``;
any other field is a ``ManifestError`` naming the field and the document, never ignored.

Triggers: ``external`` (forescale's scaler: its metadata through
``spec.parse_metadata``, the server's parser), ``prometheus`` (``threshold``,
``activationThreshold``; its series is given to the replay by trigger name)
and ``cron`` (``timezone``, ``start``, ``end``, ``desiredReplicas``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..deadband import KUBERNETES_TOLERANCE
# KEDA's and Kubernetes' defaults for what a ScaledObject leaves out: the core's, which the writer uses too
from ..scaledobject import (COOLDOWN_SECONDS, DOWN_DEFAULT, DOWN_WINDOW_SECONDS, MAX_REPLICAS, METRIC_TYPES,
                           MIN_REPLICAS, POLLING_SECONDS, REPLAY_ANNOTATION, SELECT_DEFAULT, UP_DEFAULT,
                           UP_WINDOW_SECONDS)
from ..spec import MetadataError, ScalerSpec, parse_metadata
from .. import formula, kedacheck
from .hpa import Hpa, ScalingPolicy, ScalingRules
from .keda import FALLBACK_BEHAVIORS, Fallback

# the fields the replay honours or that cannot change what it computes (identity, naming, ownership)
SPEC = {"scaleTargetRef", "pollingInterval", "cooldownPeriod", "initialCooldownPeriod", "minReplicaCount",
        "maxReplicaCount", "idleReplicaCount", "fallback", "advanced", "triggers"}
ADVANCED = {"horizontalPodAutoscalerConfig", "scalingModifiers", "restoreToOriginalReplicaCount"}
HPA_CONFIG = {"behavior", "name"}
RULES = {"stabilizationWindowSeconds", "selectPolicy", "policies", "tolerance"}
TRIGGER = {"type", "name", "metricType", "metadata", "authenticationRef", "useCachedMetrics"}
PROMETHEUS_KEYS = {"serverAddress", "query", "threshold", "activationThreshold", "ignoreNullValues", "namespace",
                   "unsafeSsl", "timeout", "queryParameters", "customHeaders", "authModes", "metricName"}
CRON_KEYS = {"timezone", "start", "end", "desiredReplicas"}
TRIGGER_TYPES = ("external (forescale)", "prometheus", "cron")


class ManifestError(ValueError):
    """A manifest the replay cannot run as KEDA would: names the document, the field and what is accepted."""


@dataclass(frozen=True)
class Trigger:
    """One trigger as the replay evaluates it."""

    kind: str  # forescale | prometheus | cron
    name: str  # its ``name`` or ``trigger<i>``
    where: str  # spec.triggers[i]
    per_pod: bool  # metricType AverageValue (else Value)
    target: float  # the HPA target: qpsPerReplica, threshold, 1 (cron)
    activation: float  # IsActive = value > activation
    spec: ScalerSpec | None = None  # forescale
    ignore_null: bool = True  # prometheus: an empty result is 0 (else a failed poll)
    query: str = ""  # prometheus: its PromQL (fetched from --prometheus when no series is given)
    timezone: str = "Etc/UTC"  # cron
    start: str = ""
    end: str = ""
    desired: int = 1
    events: tuple = ()  # forescale with eventsFile: its events (``forecaster.calendar.Event``; ``with_events``)
    events_source: str = ""  # where they were read (the note says it)
    cached: bool = False  # useCachedMetrics: the HPA reads what KEDA's last poll cached (else it asks at each sync)
    cold_start_note: str = ""  # coldStartFrom cluster replayed from start-ups (``with_cold_starts``): how, for the note


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
        out.append(plan(where, doc))
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
    spec = _mapping(doc.get("spec"), at, "spec")
    _known(spec, SPEC, at, "spec")
    ints = {k: _int(spec, k, at, "spec") for k in ("pollingInterval", "cooldownPeriod", "initialCooldownPeriod",
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
    adv = _mapping(spec.get("advanced"), at, "spec.advanced", optional=True)
    _known(adv, ADVANCED, at, "spec.advanced")
    hpa_cfg = _mapping(adv.get("horizontalPodAutoscalerConfig"), at, "spec.advanced.horizontalPodAutoscalerConfig",
                       optional=True)
    _known(hpa_cfg, HPA_CONFIG, at, "spec.advanced.horizontalPodAutoscalerConfig")
    beh_at = "spec.advanced.horizontalPodAutoscalerConfig.behavior"
    beh = _mapping(hpa_cfg.get("behavior"), at, beh_at, optional=True)
    _known(beh, {"scaleUp", "scaleDown"}, at, beh_at)
    up = _rules(beh.get("scaleUp"), at, f"{beh_at}.scaleUp", UP_WINDOW_SECONDS, UP_DEFAULT, KUBERNETES_TOLERANCE.up)
    down = _rules(beh.get("scaleDown"), at, f"{beh_at}.scaleDown", DOWN_WINDOW_SECONDS, DOWN_DEFAULT,
                  KUBERNETES_TOLERANCE.down)
    trig_raw = spec.get("triggers")
    if not isinstance(trig_raw, list) or not trig_raw:
        raise ManifestError(f"{at}: spec.triggers must be a non-empty list")
    triggers = tuple(_trigger(t, i, at, name, str(md.get("namespace") or "")) for i, t in enumerate(trig_raw))
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


def _mapping(v: Any, at: str, path: str, optional: bool = False) -> Mapping:
    if v is None and optional:
        return {}
    if not isinstance(v, Mapping):
        raise ManifestError(f"{at}: {path} must be a mapping, got {type(v).__name__}")
    return v


def _known(m: Mapping, allowed: set, at: str, path: str) -> None:
    for k in m:
        if k not in allowed:
            raise ManifestError(f"{at}: field {path}.{k} cannot be replayed; the replay honours {path}."
                                f"{{{', '.join(sorted(allowed))}}}")


def _int(m: Mapping, key: str, at: str, path: str) -> int | None:
    v = m.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ManifestError(f"{at}: {path}.{key} {v!r}: accepted is a whole number >= 0")
    return v


def _number(v: Any, at: str, path: str, lo: float = 0.0) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ManifestError(f"{at}: {path} {str(v)[:40]!r}: accepted is a number") from None
    if not (x == x and abs(x) != float("inf")) or x < lo:
        raise ManifestError(f"{at}: {path} {str(v)[:40]!r}: accepted is a finite number >= {lo:g}")
    return x


def _rules(raw: Any, at: str, path: str, window: float, default: tuple, tol: float) -> ScalingRules:
    r = _mapping(raw, at, path, optional=True)
    _known(r, RULES, at, path)
    w = _int(r, "stabilizationWindowSeconds", at, path)
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
            pp = _mapping(p, at, f"{path}.policies[{i}]")
            _known(pp, {"type", "value", "periodSeconds"}, at, f"{path}.policies[{i}]")
            kind = pp.get("type")
            if kind not in ("Pods", "Percent"):
                raise ManifestError(f"{at}: {path}.policies[{i}].type {kind!r}: accepted are Pods, Percent")
            v, per = _int(pp, "value", at, f"{path}.policies[{i}]"), _int(pp, "periodSeconds", at,
                                                                          f"{path}.policies[{i}]")
            if not v or not per or per > 1800:
                raise ManifestError(f"{at}: {path}.policies[{i}]: value must be > 0 and periodSeconds in 1..1800")
            out.append(ScalingPolicy(kind, float(v), float(per)))
        pols = tuple(out)
    t = tol if r.get("tolerance") is None else _number(r.get("tolerance"), at, f"{path}.tolerance")
    if "scaleDown" in path and t >= 1:
        raise ManifestError(f"{at}: {path}.tolerance {t:g}: accepted is a fraction in [0, 1)")
    return ScalingRules(float(window if w is None else w), select, pols, t)


def _trigger(raw: Any, i: int, at: str, so_name: str, namespace: str) -> Trigger:
    where = f"spec.triggers[{i}]"
    t = _mapping(raw, at, where)
    _known(t, TRIGGER, at, where)
    kind = t.get("type")
    name = str(t.get("name") or f"trigger{i}")
    mt = t.get("metricType", METRIC_TYPES[0])
    if mt not in METRIC_TYPES:
        raise ManifestError(f"{at}: {where}.metricType {mt!r}: accepted are {', '.join(METRIC_TYPES)}")
    md = _mapping(t.get("metadata"), at, f"{where}.metadata")
    md = {str(k): str(v) for k, v in md.items()}
    per_pod = mt == "AverageValue"
    cached = t.get("useCachedMetrics", False)
    if not isinstance(cached, bool):
        raise ManifestError(f"{at}: {where}.useCachedMetrics {cached!r}: accepted are true, false")
    return replace(_typed(kind, name, where, md, per_pod, at, so_name, namespace), cached=cached)


def _typed(kind: Any, name: str, where: str, md: dict[str, str], per_pod: bool, at: str, so_name: str,
           namespace: str) -> Trigger:
    if kind == "external":
        try:
            spec, unknown = parse_metadata(md, name=so_name, namespace=namespace)
        except MetadataError as e:
            raise ManifestError(f"{at}: {where}.metadata: {e}") from None
        if unknown:
            raise ManifestError(f"{at}: field {where}.metadata.{unknown[0]} is not a forescale key (the replay "
                                f"reads an external trigger as forescale's; see `forescale check`)")
        if spec.token_query:  # the replay of a ScaledObject has the request trace alone: never drop the tokens silently
            raise ManifestError(f"{at}: {where}.metadata.tokenQuery: a trigger on tokens is not replayed from a "
                                "ScaledObject; accepted: replay a trace with token columns and --tokens-per-replica")
        if spec.capacity.model_file:
            raise ManifestError(f"{at}: {where}.metadata.capacityModel: a trigger on a capacity model is not replayed "
                                "from a ScaledObject; accepted: replay a trace with token columns and "
                                "--capacity-model FILE")
        return Trigger("forescale", name, where, per_pod, spec.qps_per_replica, spec.activation_threshold, spec)
    if kind == "prometheus":
        _known(md, PROMETHEUS_KEYS, at, f"{where}.metadata")
        if "threshold" not in md:
            raise ManifestError(f"{at}: {where}.metadata.threshold is required (the HPA target)")
        thr = _number(md["threshold"], at, f"{where}.metadata.threshold")
        if thr <= 0:
            raise ManifestError(f"{at}: {where}.metadata.threshold must be > 0")
        act = _number(md.get("activationThreshold", "0"), at, f"{where}.metadata.activationThreshold")
        ign = md.get("ignoreNullValues", "true").lower()
        if ign not in ("true", "false"):
            raise ManifestError(f"{at}: {where}.metadata.ignoreNullValues {ign!r}: accepted are true, false")
        return Trigger("prometheus", name, where, per_pod, thr, act, ignore_null=ign == "true",
                       query=md.get("query", ""))
    if kind == "cron":
        _known(md, CRON_KEYS, at, f"{where}.metadata")
        for k in ("timezone", "start", "end", "desiredReplicas"):
            if not md.get(k):
                raise ManifestError(f"{at}: {where}.metadata.{k} is required (cron: timezone, start, end, "
                                    f"desiredReplicas)")
        desired = md["desiredReplicas"]
        if not desired.isdigit() or int(desired) < 1:
            raise ManifestError(f"{at}: {where}.metadata.desiredReplicas {desired!r}: accepted is a whole number >= 1")
        try:
            check_cron(md["timezone"], md["start"], md["end"])
        except ValueError as e:
            raise ManifestError(f"{at}: {where}.metadata: {e}") from None
        return Trigger("cron", name, where, per_pod, 1.0, 0.0, timezone=md["timezone"], start=md["start"],
                       end=md["end"], desired=int(desired))
    raise ManifestError(f"{at}: {where}.type {kind!r} cannot be replayed; accepted: {', '.join(TRIGGER_TYPES)}")


def check_cron(timezone: str, start: str, end: str) -> None:
    """Raise ValueError naming what is wrong with a cron trigger's timezone or expressions."""
    from croniter import croniter

    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"timezone {timezone[:60]!r}: accepted is an IANA name such as Europe/Berlin") from None
    for key, expr in (("start", start), ("end", end)):
        if len(expr.split()) != 5 or not croniter.is_valid(expr):
            raise ValueError(f"{key} {expr[:60]!r}: accepted is a five-field cron expression (minute hour "
                             f"day-of-month month day-of-week), e.g. '0 8 * * 1-5'")


def _modifiers(raw: Any, at: str, triggers: tuple[Trigger, ...]) -> Modifiers | None:
    path = "spec.advanced.scalingModifiers"
    m = _mapping(raw, at, path, optional=True)
    if not m:
        return None
    _known(m, {"formula", "target", "activationTarget", "metricType"}, at, path)
    if not m.get("formula") or m.get("target") in (None, ""):
        raise ManifestError(f"{at}: {path} needs both formula and target")
    try:
        f = formula.parse(str(m["formula"]), tuple(t.name for t in triggers))
    except formula.FormulaError as e:
        raise ManifestError(f"{at}: {path}.formula: {e}") from None
    target = _number(m["target"], at, f"{path}.target")
    if target <= 0:
        raise ManifestError(f"{at}: {path}.target must be > 0")
    mt = m.get("metricType", METRIC_TYPES[0])
    if mt not in METRIC_TYPES:
        raise ManifestError(f"{at}: {path}.metricType {mt!r}: accepted are {', '.join(METRIC_TYPES)}")
    act = _number(m.get("activationTarget", "0"), at, f"{path}.activationTarget")
    return Modifiers(f, target, act, mt == "AverageValue")


def _fallback(raw: Any, at: str, mods: Modifiers | None) -> Fallback | None:
    if raw is None:
        return None
    f = _mapping(raw, at, "spec.fallback")
    _known(f, {"failureThreshold", "replicas", "behavior"}, at, "spec.fallback")
    thr, rep = _int(f, "failureThreshold", at, "spec.fallback"), _int(f, "replicas", at, "spec.fallback")
    if thr is None or rep is None:
        raise ManifestError(f"{at}: spec.fallback needs failureThreshold and replicas")
    beh = f.get("behavior", "static")
    if beh not in FALLBACK_BEHAVIORS:
        raise ManifestError(f"{at}: spec.fallback.behavior {beh!r} cannot be replayed; accepted: "
                            f"{', '.join(FALLBACK_BEHAVIORS)}")
    if mods is not None and float(mods.target) != int(mods.target):
        raise ManifestError(f"{at}: spec.fallback with scalingModifiers needs a whole-number target (KEDA)")
    return Fallback(thr, rep, beh)

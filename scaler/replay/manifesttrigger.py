"""One trigger of a ScaledObject as the replay runs it: ``parse_trigger`` reads ``spec.triggers[i]`` into a
``Trigger``, field by field (``TRIGGER``; any other field is a ``ManifestError``).

* ``external``: forescale's scaler, its metadata through ``spec.parse_metadata`` (the server's parser);
* ``prometheus``: ``threshold`` (the HPA target), ``activationThreshold``, ``ignoreNullValues``, ``query``
  (``PROMETHEUS_KEYS``); its series is given to the replay by trigger name;
* ``cron``: ``timezone``, ``start``, ``end``, ``desiredReplicas`` (``CRON_KEYS``, ``check_cron``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..scaledobject import METRIC_TYPES
from ..spec import MetadataError, ScalerSpec, parse_metadata
from .manifestfields import ManifestError, known, mapping, number

TRIGGER = {"type", "name", "metricType", "metadata", "authenticationRef", "useCachedMetrics"}
PROMETHEUS_KEYS = {"serverAddress", "query", "threshold", "activationThreshold", "ignoreNullValues", "namespace",
                   "unsafeSsl", "timeout", "queryParameters", "customHeaders", "authModes", "metricName"}
CRON_KEYS = {"timezone", "start", "end", "desiredReplicas"}
TRIGGER_TYPES = ("external (forescale)", "prometheus", "cron")


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
    events: tuple = ()  # forescale with eventsFile: its events (``forecaster.eventsfile.Event``; ``with_events``)
    events_source: str = ""  # where they were read (the note says it)
    cached: bool = False  # useCachedMetrics: the HPA reads what KEDA's last poll cached (else it asks at each sync)
    cold_start_note: str = ""  # coldStartFrom cluster replayed from start-ups (``with_cold_starts``): how, for the note


def parse_trigger(raw: Any, i: int, at: str, so_name: str, namespace: str) -> Trigger:
    """``spec.triggers[i]`` of the ScaledObject ``so_name`` (``at`` names it in errors); raises ``ManifestError``."""
    where = f"spec.triggers[{i}]"
    t = mapping(raw, at, where)
    known(t, TRIGGER, at, where)
    kind = t.get("type")
    name = str(t.get("name") or f"trigger{i}")
    mt = t.get("metricType", METRIC_TYPES[0])
    if mt not in METRIC_TYPES:
        raise ManifestError(f"{at}: {where}.metricType {mt!r}: accepted are {', '.join(METRIC_TYPES)}")
    md = mapping(t.get("metadata"), at, f"{where}.metadata")
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
        known(md, PROMETHEUS_KEYS, at, f"{where}.metadata")
        if "threshold" not in md:
            raise ManifestError(f"{at}: {where}.metadata.threshold is required (the HPA target)")
        thr = number(md["threshold"], at, f"{where}.metadata.threshold")
        if thr <= 0:
            raise ManifestError(f"{at}: {where}.metadata.threshold must be > 0")
        act = number(md.get("activationThreshold", "0"), at, f"{where}.metadata.activationThreshold")
        ign = md.get("ignoreNullValues", "true").lower()
        if ign not in ("true", "false"):
            raise ManifestError(f"{at}: {where}.metadata.ignoreNullValues {ign!r}: accepted are true, false")
        return Trigger("prometheus", name, where, per_pod, thr, act, ignore_null=ign == "true",
                       query=md.get("query", ""))
    if kind == "cron":
        known(md, CRON_KEYS, at, f"{where}.metadata")
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

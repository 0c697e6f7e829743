"""THE family table: each policy family's name, knobs, and how a configuration of it maps to ``ScalerSpec``.

``Variant -> ScalerSpec -> trigger metadata`` goes through ``to_spec`` and
``scaler.spec.to_metadata`` and nowhere else: ``forescale tune``, the fleet's
ScaledObjects, ``backtest --advise``, the frontier JSON's ``knobs`` and the
server's ``tuning: auto`` all call ``deployment`` / ``to_spec`` / ``metadata``.

A family is a ``Family`` (a ``StrEnum``: it compares equal to its name, so
JSON and the CLI keep plain strings). Per family the table says which
metadata keys its configurations set (``knobs``), whether the value goes
through KEDA and the HPA (``hpa``), whether a ScaledObject with forescale's
trigger can run it as replayed (``selectable``), and its fixed model if any.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Mapping

from ..spec import ScalerSpec, format_duration, parse_metadata, to_metadata

if TYPE_CHECKING:  # pragma: no cover
    from .variants import Variant


class Family(StrEnum):
    REACTIVE = "reactive"
    LINEAR_TREND = "linear_trend"
    SEASONAL_NAIVE = "seasonal_naive"
    PREDICTIVE = "predictive"
    HYBRID = "hybrid"
    ENVELOPE = "envelope"
    AWS_LIKE = "aws_like"
    MIMIR_LIKE = "mimir_like"
    SCHEDULED = "scheduled"
    KEEP_ALIVE = "keep_alive"
    ORACLE = "oracle"


FORECAST_KNOBS = ("mode", "model", "quantile", "levelCorrection", "headroom", "hpaTolerance")


@dataclass(frozen=True)
class Entry:
    family: Family
    knobs: tuple[str, ...]  # the trigger metadata keys its configurations set (empty: not expressible)
    hpa: bool  # its value goes through KEDA and the HPA (headroom, dead-band compensation apply)
    selectable: bool  # a ScaledObject with forescale's trigger runs it as replayed (tune / advice may pick it)
    in_table: bool  # a row of the backtest table (``--policies``)
    model: str | None = None  # its fixed forecast model
    anchor: bool = False  # a published autoscaler, re-implemented (``anchors``)


TABLE: dict[Family, Entry] = {e.family: e for e in (
    Entry(Family.REACTIVE, ("mode", "headroom", "hpaTolerance"), True, True, True),
    Entry(Family.LINEAR_TREND, FORECAST_KNOBS, True, True, True, model="linear_trend"),
    Entry(Family.SEASONAL_NAIVE, FORECAST_KNOBS, True, True, False, model="seasonal_naive"),
    Entry(Family.PREDICTIVE, FORECAST_KNOBS, True, True, True),
    Entry(Family.HYBRID, FORECAST_KNOBS + ("floorReplicas",), True, True, True),
    Entry(Family.ENVELOPE, ("mode", "model", "levelCorrection", "headroom", "hpaTolerance"), True, True, True,
          anchor=True),
    Entry(Family.AWS_LIKE, (), True, False, True, anchor=True),
    Entry(Family.MIMIR_LIKE, (), True, False, True, anchor=True),
    Entry(Family.SCHEDULED, (), False, False, True),
    Entry(Family.KEEP_ALIVE, (), False, False, True),
    Entry(Family.ORACLE, (), False, False, True),
)}

FAMILIES = tuple(TABLE)
ANCHORS = tuple(f for f, e in TABLE.items() if e.anchor)
POLICIES = tuple(f for f, e in TABLE.items() if e.in_table)  # the backtest table, in its order
SELECTABLE = tuple(f for f, e in TABLE.items() if e.selectable)  # simplest first: the selection's tie-break
HPA_FAMILIES = tuple(f for f, e in TABLE.items() if e.hpa)
FORECAST_FAMILIES = {f: e.model for f, e in TABLE.items() if e.model is not None}  # family -> fixed model


def family(name: str) -> Family:
    """``name`` as a Family (ValueError naming the accepted ones)."""
    try:
        return Family(name)
    except ValueError:
        raise ValueError(f"unknown policy family {name!r}; accepted: {', '.join(FAMILIES)}") from None


def deployment(v: "Variant", *, tolerance: float, extra: Mapping | None = None) -> dict:
    """The ``ScalerSpec`` fields that make the scaler run ``v`` (ValueError when it cannot).

    ``tolerance``: the HPA's (dead-band compensation on = the value is pushed past it);
    ``extra``: what the replay found for the configuration (hybrid: ``floorReplicas``).
    """
    fam = family(v.policy)
    if not TABLE[fam].selectable:
        raise ValueError(f"{fam} is not expressible as forescale trigger metadata")
    out: dict = {"headroom": float(v.headroom), "hpa_tolerance": float(tolerance) if v.compensation else 0.0,
                 "floor_replicas": 0}
    if fam is Family.REACTIVE:
        out["mode"] = "reactive"
    elif fam is Family.ENVELOPE:  # the servable model at its fixed window; no level correction, as replayed
        out.update(mode="forecastAndScale", model="envelope", level_correction_seconds=0.0)
    else:
        out.update(mode="forecastAndScale", model=str(v.model), quantile=float(v.quantile),
                   level_correction_seconds=float(v.level_correction_seconds or 0.0))
    if fam is Family.HYBRID:
        out["floor_replicas"] = int((extra or {}).get("floorReplicas", 0))
    if v.calendar is False:  # ``tune`` found the holiday handling does not pay off: the forecast runs without it
        out["holidays"] = ""
    return out


def to_spec(v: "Variant", base: ScalerSpec, *, tolerance: float, extra: Mapping | None = None) -> ScalerSpec:
    """``base`` (the workload's metric, lead, history...) running ``v``: its knobs pinned (``tuning: off``)."""
    return dataclasses.replace(base, tuning="off", **deployment(v, tolerance=tolerance, extra=extra))


def metadata(v: "Variant", base: ScalerSpec, *, tolerance: float, extra: Mapping | None = None,
             name: str = "", namespace: str = "") -> dict[str, str]:
    """Trigger metadata (all strings) running ``v``: ``to_metadata`` of ``to_spec``, with the family's knobs and
    ``tuning: off`` said explicitly (a pasted configuration runs as printed, whatever a later default)."""
    spec = to_spec(v, base, tolerance=tolerance, extra=extra)
    full = to_metadata(spec, name=name, namespace=namespace, defaults=True)
    keep = set(to_metadata(spec, name=name, namespace=namespace)) | set(TABLE[family(v.policy)].knobs) | {"tuning"}
    return {k: val for k, val in full.items() if k in keep}  # the family's knobs said even at their default


PLACEHOLDER_BASE = parse_metadata({"serverAddress": "http://prometheus:9090", "query": "vector(1)",
                                   "qpsPerReplica": "1"})[0]


def knobs(v: "Variant", tolerance: float, extra: Mapping | None = None) -> dict:
    """A configuration's knobs in the trigger metadata's vocabulary (JSON-able): for a selectable one the
    family's keys of ``metadata`` (strings, as pasted); for the others the variant's own values."""
    k: dict = {}
    if v.window_seconds is not None:
        k["envelopeWindow"] = format_duration(v.window_seconds)
    ok = TABLE[family(v.policy)].selectable and (v.policy != Family.ENVELOPE or _servable_window(v))
    if ok and v.band is None:
        md = to_metadata(to_spec(v, PLACEHOLDER_BASE, tolerance=tolerance, extra=extra), defaults=True)
        k.update({key: md[key] for key in TABLE[family(v.policy)].knobs if key in md})
    else:
        if v.model is not None:
            k["model"] = v.model
        if v.quantile is not None:
            k["quantile"] = v.quantile
        if v.level_correction_seconds is not None:
            k["levelCorrection"] = format_duration(v.level_correction_seconds)
        if TABLE[family(v.policy)].hpa:
            k["headroom"] = v.headroom
            k["hpaTolerance"] = tolerance if v.compensation else 0.0
        if v.band is not None:
            k["band"] = v.band
    if v.floor_percentile is not None:
        k["floorPercentile"] = v.floor_percentile
    if v.calendar is not None:  # tune with holidays: replayed with or without the holiday handling
        k["holidays"] = "kept" if v.calendar else "dropped"
    for key, val in (extra or {}).items():
        k.setdefault(key, val)
    return k


def _servable_window(v: "Variant") -> bool:
    from forecaster.models.envelope import DEFAULT_WINDOW

    return v.window_seconds is not None and abs(v.window_seconds - DEFAULT_WINDOW) < 1e-6

"""THE family table: every policy family, one module each, registered in ``TABLE`` in the order the backtest
table, the sweep and the selection's tie-break use.

A family is one module of this package with a ``PolicyFamily`` (``base``): its knobs, its configurations, its
metadata mapping, its evaluation and its label. A new family is one new module and one line in ``TABLE`` below
(``tests/replay/test_family_plugin.py`` adds one from the tests with ``register``).

``Variant -> ScalerSpec -> trigger metadata`` goes through ``to_spec`` and ``scaler.specwrite.to_metadata`` and nowhere
else: ``forescale tune``, the fleet's ScaledObjects, ``backtest --advise``, the frontier JSON's ``knobs`` and the
server's ``tuning: auto`` all call ``deployment`` / ``to_spec`` / ``metadata`` / ``knobs`` here.

The modules: ``reactive``, ``linear_trend`` and ``seasonal_naive`` (both ``fixedmodel``), ``predictive``, ``hybrid``,
``envelope``, ``aws_like`` and ``mimir_like`` (both ``published``), ``scheduled``, ``keep_alive``, ``oracle``; ``base``:
the ``PolicyFamily`` interface and the forecast families' shared parts.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from ...durations import format_duration
from ...spec import ScalerSpec, parse_metadata
from ...specwrite import to_metadata
from ..variant import Variant
from . import (
    aws_like,
    envelope,
    hybrid,
    keep_alive,
    linear_trend,
    mimir_like,
    oracle,
    predictive,
    reactive,
    scheduled,
    seasonal_naive,
)
from .base import PolicyFamily

TABLE: dict[str, PolicyFamily] = {
    f.name: f
    for f in (
        reactive.FAMILY,
        linear_trend.FAMILY,
        seasonal_naive.FAMILY,
        predictive.FAMILY,
        hybrid.FAMILY,
        envelope.FAMILY,
        aws_like.FAMILY,
        mimir_like.FAMILY,
        scheduled.FAMILY,
        keep_alive.FAMILY,
        oracle.FAMILY,
    )
}


class Family:
    """The built-in families' names, for code that names one (``F.PREDICTIVE``); each is its module's own."""

    REACTIVE = reactive.FAMILY.name
    LINEAR_TREND = linear_trend.FAMILY.name
    SEASONAL_NAIVE = seasonal_naive.FAMILY.name
    PREDICTIVE = predictive.FAMILY.name
    HYBRID = hybrid.FAMILY.name
    ENVELOPE = envelope.FAMILY.name
    AWS_LIKE = aws_like.FAMILY.name
    MIMIR_LIKE = mimir_like.FAMILY.name
    SCHEDULED = scheduled.FAMILY.name
    KEEP_ALIVE = keep_alive.FAMILY.name
    ORACLE = oracle.FAMILY.name


# the built-in table's views, in its order (a family ``register``ed later is reached through ``TABLE`` by name)
FAMILIES = tuple(TABLE)
ANCHORS = tuple(n for n, f in TABLE.items() if f.anchor)
POLICIES = tuple(n for n, f in TABLE.items() if f.in_table)  # the backtest table, in its order
SELECTABLE = tuple(n for n, f in TABLE.items() if f.selectable)  # simplest first: the selection's tie-break
HPA_FAMILIES = tuple(n for n, f in TABLE.items() if f.hpa)
FORECAST_FAMILIES = {n: f.model for n, f in TABLE.items() if f.model is not None}  # family -> fixed model


def register(fam: PolicyFamily) -> None:
    """Add a family to the table (after the built-ins); ValueError if its name is taken."""
    if not fam.name or fam.name in TABLE:
        raise ValueError(f"policy family name {fam.name!r} is empty or taken; taken: {', '.join(TABLE)}")
    TABLE[fam.name] = fam


def unregister(name: str) -> None:
    """Remove a family ``register`` added (a built-in stays)."""
    if name in FAMILIES:
        raise ValueError(f"{name} is a built-in family")
    TABLE.pop(name, None)


def family(name: str) -> PolicyFamily:
    """The family named ``name`` (ValueError naming the accepted ones)."""
    f = TABLE.get(str(name))
    if f is None:
        raise ValueError(f"unknown policy family {name!r}; accepted: {', '.join(TABLE)}")
    return f


def label(v: Variant) -> str:
    """A configuration as the tables, the report and the decision log name it, e.g. ``predictive prophet q0.9
    lc 30m x1.1``."""
    return family(v.policy).label(v)


def is_selectable(v: Variant) -> bool:
    """Whether the scaler can run ``v`` (trigger metadata): the envelope only at its servable window."""
    return family(v.policy).servable(v)


def deployment(v: Variant, *, tolerance: float, extra: Mapping | None = None) -> dict:
    """The ``ScalerSpec`` fields that make the scaler run ``v`` (ValueError when it cannot).

    ``tolerance``: the HPA's (dead-band compensation on = the value is pushed past it);
    ``extra``: what the replay found for the configuration (hybrid: ``floorReplicas``).
    """
    return family(v.policy).deployment(v, tolerance=tolerance, extra=extra)


def to_spec(v: Variant, base: ScalerSpec, *, tolerance: float, extra: Mapping | None = None) -> ScalerSpec:
    """``base`` (the workload's metric, lead, history...) running ``v``: its knobs pinned (``tuning: off``)."""
    return dataclasses.replace(base, tuning="off", **deployment(v, tolerance=tolerance, extra=extra))


def metadata(
    v: Variant, base: ScalerSpec, *, tolerance: float, extra: Mapping | None = None, name: str = "", namespace: str = ""
) -> dict[str, str]:
    """Trigger metadata (all strings) running ``v``: ``to_metadata`` of ``to_spec``, with the family's knobs and
    ``tuning: off`` said explicitly (a pasted configuration runs as printed, whatever a later default)."""
    spec = to_spec(v, base, tolerance=tolerance, extra=extra)
    full = to_metadata(spec, name=name, namespace=namespace, defaults=True)
    keep = set(to_metadata(spec, name=name, namespace=namespace)) | set(family(v.policy).knobs) | {"tuning"}
    return {k: val for k, val in full.items() if k in keep}  # the family's knobs said even at their default


PLACEHOLDER_BASE = parse_metadata(
    {"serverAddress": "http://prometheus:9090", "query": "vector(1)", "qpsPerReplica": "1"}
)[0]


def knobs(v: Variant, tolerance: float, extra: Mapping | None = None) -> dict:
    """A configuration's knobs in the trigger metadata's vocabulary (JSON-able): for a servable one the
    family's keys of ``metadata`` (strings, as pasted); for the others the variant's own values."""
    fam = family(v.policy)
    k: dict = {}
    if v.window_seconds is not None:
        k["envelopeWindow"] = format_duration(v.window_seconds)
    if fam.servable(v):
        md = to_metadata(to_spec(v, PLACEHOLDER_BASE, tolerance=tolerance, extra=extra), defaults=True)
        k.update({key: md[key] for key in fam.knobs if key in md})
    else:
        if v.model is not None:
            k["model"] = v.model
        if v.quantile is not None:
            k["quantile"] = v.quantile
        if v.level_correction_seconds is not None:
            k["levelCorrection"] = format_duration(v.level_correction_seconds)
        if fam.hpa:
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

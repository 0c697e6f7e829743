"""The configurations a run replays: the family defaults and the sweep (plain data; each family's code is its module
in ``families``).

Families (``policy`` in the JSON) and their knobs, named as the trigger metadata names them:

* ``reactive``       KEDA's Prometheus scaler, with ``headroom`` x dead-band compensation
                     (``hpaTolerance`` 0 = off)
* ``linear_trend``   the seed predictor: ``quantile`` x ``headroom``
* ``seasonal_naive`` the same day last week/yesterday: ``quantile`` x ``headroom``
* ``predictive``     forescale's model (prophet by default): ``quantile`` x ``levelCorrection`` x ``headroom``
* ``hybrid``         an always-warm floor (``floorPercentile`` of the history, expressed as
                     ``minReplicaCount``) plus predictive above it
* ``envelope``       Crane EHPA's periodic envelope (``anchors``): ``window`` x margin (``headroom``); the servable
                     ``model: envelope`` is its 1 h window (``ENVELOPE_WINDOW``), the one ``tune`` may pick
* ``aws_like``, ``mimir_like``  AWS predictive scaling and Mimir's predictive trigger, re-implemented (``anchors``):
                     margin (``headroom``); anchors to compare against, not expressible as forescale metadata
* ``scheduled``, ``keep_alive``  baselines (not expressible as forescale metadata)
* ``oracle``         perfect foresight: the cost reference (cost_ratio 1), never Pareto-ranked nor selected

``defaults(settings)`` is what ``forescale backtest`` runs (one configuration
per family); ``variants(grid, settings)`` is the sweep (every family over its
knob values, each family's default first). Both are lists of ``Variant`` for
``engine.run``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from forecaster.models.envelope import DEFAULT_WINDOW as ENVELOPE_WINDOW

from .families import (ANCHORS, FAMILIES, FORECAST_FAMILIES, HPA_FAMILIES, POLICIES, SELECTABLE, TABLE,  # noqa: F401
                       Family, family, is_selectable)
from .families import Family as F
from .families.base import Knobs
from .variant import Variant  # noqa: F401 (re-exported: the configurations' type)

ACCURACY_BASELINES = ("seasonal_naive", "linear_trend")  # scored next to the settings' model


@dataclass(frozen=True)
class Grid:
    """The knob values swept per family (the family's default configuration is always added)."""

    reactive_headroom: tuple[float, ...] = (1.0, 1.05, 1.1, 1.2, 1.3, 1.5)
    reactive_compensation: tuple[bool, ...] = (False, True)
    quantiles: tuple[float, ...] = (0.5, 0.8, 0.9, 0.95, 0.99)  # predictive
    level_corrections: tuple[float, ...] = (0.0, 1800.0, 14400.0)  # predictive, half-life seconds (0 = off)
    headroom: tuple[float, ...] = (1.0, 1.1)  # the forecast families
    simple_quantiles: tuple[float, ...] = (0.5, 0.9)  # linear_trend, seasonal_naive
    hybrid_floor_percentiles: tuple[float, ...] = (10.0, 25.0)
    scheduled_quantiles: tuple[float, ...] = (0.9, 0.99)
    envelope_windows: tuple[float, ...] = (300.0, ENVELOPE_WINDOW)  # seconds each side
    anchor_margins: tuple[float, ...] = (1.0, 1.1, 1.3)  # headroom of the anchor families
    window_band_quantiles: tuple[float, ...] = (0.8, 0.9, 0.95, 0.99)  # forecast families, window-max band
    families: tuple[str, ...] = FAMILIES

    def __post_init__(self) -> None:
        bad = [f for f in self.families if f not in TABLE]
        if bad:
            raise ValueError(f"unknown policy family {', '.join(bad)}; accepted: {', '.join(TABLE)}")


def default_variant(name: str, settings: Knobs) -> Variant:
    """The configuration ``forescale backtest`` runs for family ``name`` (the settings' knobs)."""
    return family(name).default(settings)


def defaults(settings, families: Sequence[str] | None = None) -> list[Variant]:
    """One default configuration per family (``settings.policies`` unless given), and always the oracle."""
    fams = tuple(settings.policies if families is None else families)
    out = [default_variant(f, settings) for f in fams]
    if F.ORACLE not in fams:
        out.append(Variant(F.ORACLE))  # the cost reference
    return out


def accuracy_models(settings, families: Sequence[str] | None = None) -> tuple[str, ...]:
    """The models of the accuracy table: the settings' model and the baselines (none for a sweep of
    ``families`` without a forecast of the settings' model: no predictive, no hybrid)."""
    if families is not None and not {F.PREDICTIVE, F.HYBRID} & set(families):
        return ()
    return tuple(dict.fromkeys((settings.model, *ACCURACY_BASELINES)))


def variants(grid: Grid, settings: Knobs) -> list[Variant]:
    """The sweep: every family's knob values (``PolicyFamily.sweep``), its default configuration first, in the
    table's order; the oracle always, last (the cost reference)."""
    out: list[Variant] = []
    for name, fam in TABLE.items():
        if name in grid.families and name != F.ORACLE:
            for v in fam.sweep(grid, settings):
                if v not in out:
                    out.append(v)
    if Variant(F.ORACLE) not in out:
        out.append(Variant(F.ORACLE))
    return out


def is_default(v: Variant, settings: Knobs) -> bool:
    """Whether ``v`` is the configuration ``forescale backtest`` runs for its family."""
    return v == default_variant(v.policy, settings)

"""Policy families, their knobs and the variants a run replays (plain data; the code per family is in ``policies``).

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
from typing import TYPE_CHECKING, Sequence

from forecaster.models.envelope import DEFAULT_WINDOW as ENVELOPE_WINDOW

from ..spec import format_duration
from .families import (ANCHORS, FAMILIES, FORECAST_FAMILIES, HPA_FAMILIES, POLICIES, SELECTABLE, TABLE,  # noqa: F401
                       Family, family)
from .families import Family as F

if TYPE_CHECKING:  # pragma: no cover
    from .engine import Settings

# the families, their knobs and what each maps to: the table in ``families`` (re-exported here)
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
        bad = [f for f in self.families if f not in FAMILIES]
        if bad:
            raise ValueError(f"unknown policy family {', '.join(bad)}; accepted: {', '.join(FAMILIES)}")


@dataclass(frozen=True)
class Variant:
    """One configuration of one family."""

    policy: str
    model: str | None = None
    quantile: float | None = None
    level_correction_seconds: float | None = None
    headroom: float = 1.0
    compensation: bool = True  # push the value past the HPA's dead band
    floor_percentile: float | None = None  # hybrid
    window_seconds: float | None = None  # envelope
    band: str | None = None  # None: the model's pointwise quantile; "window": window-max calibration (``calibration``)
    searched: bool = False  # found by ``tune``'s targeted search along headroom (``search``), not a grid point
    calendar: bool | None = None  # ``tune`` with holidays: True = the holiday handling kept, False = dropped

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", family(self.policy))  # a Family (equal to its name)

    def label(self) -> str:
        parts = [self.policy]
        if self.window_seconds is not None:
            parts.append(f"w {format_duration(self.window_seconds)}")
        if self.policy in (F.PREDICTIVE, F.HYBRID) and self.model:
            parts.append(self.model)
        if self.calendar is not None:
            parts.append("holidays" if self.calendar else "no-holidays")
        if self.floor_percentile is not None:
            parts.append(f"floor p{self.floor_percentile:g}")
        if self.quantile is not None:
            parts.append(f"q{self.quantile:g}")
        if self.band is not None:
            parts.append(f"{self.band}-max band")
        if self.level_correction_seconds is not None and self.policy in (F.PREDICTIVE, F.HYBRID):
            parts.append(f"lc {format_duration(self.level_correction_seconds)}")
        if self.policy not in (F.SCHEDULED, F.KEEP_ALIVE, F.ORACLE):
            parts.append(f"x{self.headroom:g}")
            if not self.compensation:
                parts.append("no dead-band comp.")
        if self.searched:
            parts.append("(searched)")
        return " ".join(parts)


def default_variant(family: str, settings: "Settings") -> Variant:
    """The configuration ``forescale backtest`` runs for ``family`` (the settings' knobs)."""
    s = settings
    comp = s.hpa_tolerance > 0
    if family == F.REACTIVE:
        return Variant(F.REACTIVE, compensation=False)  # what KEDA's Prometheus scaler does
    if family in FORECAST_FAMILIES:
        return Variant(family, FORECAST_FAMILIES[family], s.quantile, s.level_correction_seconds, s.headroom, comp)
    if family == F.PREDICTIVE:
        return Variant(F.PREDICTIVE, s.model, s.quantile, s.level_correction_seconds, s.headroom, comp)
    if family == F.HYBRID:
        return Variant(F.HYBRID, s.model, s.quantile, s.level_correction_seconds, s.headroom, comp,
                       s.hybrid_floor_percentile)
    if family == F.ENVELOPE:
        return Variant(F.ENVELOPE, headroom=1.0, compensation=comp, window_seconds=ENVELOPE_WINDOW)
    if family in ANCHORS:
        return Variant(family, headroom=1.0, compensation=False)  # as published: no dead-band compensation
    if family == F.SCHEDULED:
        return Variant(F.SCHEDULED, quantile=s.quantile)
    if family in (F.KEEP_ALIVE, F.ORACLE):
        return Variant(family)
    raise ValueError(f"unknown policy family {family!r}; accepted: {', '.join(FAMILIES)}")


def defaults(settings: "Settings", families: Sequence[str] | None = None) -> list[Variant]:
    """One default configuration per family (``settings.policies`` unless given), and always the oracle."""
    fams = tuple(settings.policies if families is None else families)
    out = [default_variant(f, settings) for f in fams]
    if F.ORACLE not in fams:
        out.append(Variant(F.ORACLE))  # the cost reference
    return out


def accuracy_models(settings: "Settings", families: Sequence[str] | None = None) -> tuple[str, ...]:
    """The models of the accuracy table: the settings' model and the baselines (none for a sweep of
    ``families`` without a forecast of the settings' model: no predictive, no hybrid)."""
    if families is not None and not {F.PREDICTIVE, F.HYBRID} & set(families):
        return ()
    return tuple(dict.fromkeys((settings.model, *ACCURACY_BASELINES)))


def variants(grid: Grid, settings: "Settings") -> list[Variant]:
    """The sweep: every family's knob values, its default configuration first."""
    s = settings
    comp_default = s.hpa_tolerance > 0
    comps = tuple(dict.fromkeys(c for c in grid.reactive_compensation if c is False or s.hpa_tolerance > 0))
    out: list[Variant] = []

    def add(v: Variant) -> None:
        if v not in out:
            out.append(v)

    fams = grid.families
    if F.REACTIVE in fams:
        add(default_variant(F.REACTIVE, s))
        for h in grid.reactive_headroom:
            for c in comps or (False,):
                add(Variant(F.REACTIVE, headroom=h, compensation=c))
    for fam, model in FORECAST_FAMILIES.items():
        if fam in fams and not (F.PREDICTIVE in fams and s.model == model):
            add(default_variant(fam, s))
            for q in grid.simple_quantiles:
                for h in grid.headroom:
                    add(Variant(fam, model, q, s.level_correction_seconds, h, comp_default))
            for q in grid.window_band_quantiles:
                add(Variant(fam, model, q, s.level_correction_seconds, 1.0, comp_default, band="window"))
    if F.PREDICTIVE in fams:
        add(default_variant(F.PREDICTIVE, s))
        for q in grid.quantiles:
            for lc in grid.level_corrections:
                for h in grid.headroom:
                    add(Variant(F.PREDICTIVE, s.model, q, lc, h, comp_default))
        for q in grid.window_band_quantiles:
            add(Variant(F.PREDICTIVE, s.model, q, s.level_correction_seconds, 1.0, comp_default, band="window"))
    if F.HYBRID in fams:
        add(default_variant(F.HYBRID, s))
        for p in grid.hybrid_floor_percentiles:
            add(Variant(F.HYBRID, s.model, s.quantile, s.level_correction_seconds, s.headroom, comp_default, p))
    for fam in ANCHORS:
        if fam in fams:
            add(default_variant(fam, s))
            for w in (grid.envelope_windows if fam == F.ENVELOPE else (None,)):
                for h in grid.anchor_margins:
                    add(Variant(fam, headroom=h, compensation=comp_default, window_seconds=w))
    if F.SCHEDULED in fams:
        add(default_variant(F.SCHEDULED, s))
        for q in grid.scheduled_quantiles:
            add(Variant(F.SCHEDULED, quantile=q))
    if F.KEEP_ALIVE in fams:
        add(Variant(F.KEEP_ALIVE))
    add(Variant(F.ORACLE))  # always: the cost reference
    return out


def is_selectable(v: Variant) -> bool:
    """Whether the scaler can run ``v`` (trigger metadata): the envelope only at its servable window."""
    if v.band is not None:
        return False  # the server computes pointwise bands only
    if v.policy == F.ENVELOPE:
        return v.window_seconds is not None and abs(v.window_seconds - ENVELOPE_WINDOW) < 1e-6
    return TABLE[v.policy].selectable


def is_default(v: Variant, settings: "Settings") -> bool:
    """Whether ``v`` is the configuration ``forescale backtest`` runs for its family."""
    return v == default_variant(v.policy, settings)

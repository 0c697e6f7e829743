"""What a policy family is (``PolicyFamily``) and the parts the forecast families share.

A family is one module of this package holding one ``PolicyFamily`` (``FAMILY``): its name and knobs, its
configurations (``default``, ``sweep``), how a configuration maps to the scaler's ``ScalerSpec`` fields
(``deployment``; only a ``selectable`` family has one), how it is evaluated on a replay (``stage1``: the value
KEDA gets at each poll before headroom and dead-band compensation, for a family whose value goes through KEDA and
the HPA; ``timeline``: the replicas, for one that does not) and how it is labelled. The table
(``scaler.replay.families``) lists the modules; the engine, the sweep, ``tune``, the frontier and the server's
``tuning: auto`` reach a family only through it.

``settings`` below is the replay's ``Settings`` (``scaler.replay.settings``): a family reads its knobs from it
(``Knobs``) and needs nothing else of it.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

import numpy as np

from ...durations import format_duration
from ...policy import PolicyParams
from .. import calibration
from ..forecasts import Packed
from ..hpa import Hpa
from ..policies import Context, planned_values
from ..scenario import Timeline
from ..variant import Variant

# the metadata keys a forecast family's configuration sets
FORECAST_KNOBS = ("mode", "model", "quantile", "levelCorrection", "headroom", "hpaTolerance")

# stage 1 of an evaluation: the value per poll, the reasons counted, the HPA it is replayed with, a note, extras
Stage1 = tuple[np.ndarray, dict, Hpa, str, dict]


class Knobs(Protocol):
    """What of the replay's settings a family's default configuration reads (read-only)."""

    @property
    def model(self) -> str: ...

    @property
    def quantile(self) -> float: ...

    @property
    def level_correction_seconds(self) -> float: ...

    @property
    def headroom(self) -> float: ...

    @property
    def hpa_tolerance(self) -> float: ...

    @property
    def hybrid_floor_percentile(self) -> float: ...


class PolicyFamily:
    """One policy family. Subclasses set the class attributes and override what applies to them."""

    name: str = ""
    knobs: tuple[str, ...] = ()  # the trigger metadata keys its configurations set (empty: not expressible)
    hpa: bool = True  # its value goes through KEDA and the HPA (headroom, dead-band compensation apply)
    selectable: bool = False  # a ScaledObject with forescale's trigger runs it as replayed (tune / advice may pick it)
    in_table: bool = True  # a row of the backtest table (``--policies``)
    model: str | None = None  # its fixed forecast model
    anchor: bool = False  # a published autoscaler, re-implemented (``anchors``)
    names_model: bool = False  # its label names the model and the level correction (the model is a knob)
    compensated: bool = True  # its value is pushed past the HPA's dead band by habit (a note says when it is not)

    # ---- configurations

    def default(self, s: Knobs) -> Variant:
        """The configuration ``forescale backtest`` runs for this family."""
        return Variant(self.name)

    def sweep(self, grid: Any, s: Knobs) -> list[Variant]:
        """The sweep's configurations of this family, its default first (none: the family sits the sweep out);
        ``grid`` is the sweep's ``variants.Grid`` (a family reads its own fields of it)."""
        return [self.default(s)]

    def servable(self, v: Variant) -> bool:
        """Whether the scaler runs ``v`` as replayed (its trigger metadata exists)."""
        return self.selectable and v.band is None  # the server computes pointwise bands only

    # ---- the metadata mapping

    def fields(self, v: Variant, extra: Mapping) -> dict:
        """The ``ScalerSpec`` fields of ``v`` besides headroom, the HPA tolerance and the floor (selectable only)."""
        raise ValueError(f"{self.name} is not expressible as forescale trigger metadata")

    def deployment(self, v: Variant, *, tolerance: float, extra: Mapping | None = None) -> dict:
        """The ``ScalerSpec`` fields that make the scaler run ``v`` (ValueError when it cannot)."""
        if not self.selectable:
            raise ValueError(f"{self.name} is not expressible as forescale trigger metadata")
        out: dict = {
            "headroom": float(v.headroom),
            "hpa_tolerance": float(tolerance) if v.compensation else 0.0,
            "floor_replicas": 0,
        }
        out.update(self.fields(v, extra or {}))
        if v.calendar is False:  # ``tune`` found the holiday handling does not pay off: the forecast runs without it
            out["holidays"] = ""
        return out

    # ---- the evaluation

    def stage1(self, ctx: Context, v: Variant, packed: Packed | None) -> Stage1:
        """Stage 1 of a decision at every KEDA poll (an ``hpa`` family): ``decide`` without headroom and
        compensation (``Decision.base``)."""
        raise NotImplementedError(f"{self.name}: an HPA family needs stage1")

    def timeline(self, ctx: Context, v: Variant) -> tuple[Timeline, str]:
        """The replicas over the scenario and a note (a family that is not an ``hpa`` one)."""
        raise NotImplementedError(f"{self.name}: a family without the HPA needs timeline")

    # ---- the label

    def label(self, v: Variant) -> str:
        parts = [self.name]
        if v.window_seconds is not None:
            parts.append(f"w {format_duration(v.window_seconds)}")
        if self.names_model and v.model:
            parts.append(v.model)
        if v.calendar is not None:
            parts.append("holidays" if v.calendar else "no-holidays")
        if v.floor_percentile is not None:
            parts.append(f"floor p{v.floor_percentile:g}")
        if v.quantile is not None:
            parts.append(f"q{v.quantile:g}")
        if v.band is not None:
            parts.append(f"{v.band}-max band")
        if v.level_correction_seconds is not None and self.names_model:
            parts.append(f"lc {format_duration(v.level_correction_seconds)}")
        if self.hpa:
            parts.append(f"x{v.headroom:g}")
            if not v.compensation:
                parts.append("no dead-band comp.")
        if v.searched:
            parts.append("(searched)")
        return " ".join(parts)


# --------------------------------------------------------------------------- the forecast families' shared parts


def forecast_fields(v: Variant) -> dict:
    """A forecast configuration as ``ScalerSpec`` fields: forecastAndScale with its model, quantile, correction."""
    assert v.quantile is not None
    return {
        "mode": "forecastAndScale",
        "model": str(v.model),
        "quantile": float(v.quantile),
        "level_correction_seconds": float(v.level_correction_seconds or 0.0),
    }


def forecast_params(ctx: Context, v: Variant) -> PolicyParams:
    """``decide(forecastAndScale)`` of a forecast configuration, without headroom and compensation (stage 1)."""
    assert v.quantile is not None and v.level_correction_seconds is not None
    return PolicyParams(
        mode="forecastAndScale",
        lead_seconds=ctx.lead_seconds,
        quantile=v.quantile,
        qps_per_replica=ctx.qps,
        headroom=1.0,
        hpa_tolerance=0.0,
        level_correction_seconds=v.level_correction_seconds,
        events=ctx.events,
    )


def forecast_stage1(ctx: Context, v: Variant, packed: Packed | None) -> Stage1:
    """The model's curves through ``decide``: its pointwise quantile, or the window-max band (``calibration``)."""
    assert packed is not None
    sc, hpa = ctx.scenario, ctx.hpa
    params = forecast_params(ctx, v)
    if v.band == "window":
        cal, fell_back = calibration.calibrated(sc, packed, params)
        pv = planned_values(sc, hpa, params, cal)
        note = (
            f"decide(forecastAndScale), model {packed.model}, mean's window max + the q{v.quantile:g} window-max "
            f"residual (conformal; {fell_back} early curves on the pointwise band), L={ctx.lead_seconds:g}s"
        )
        return pv.values, pv.reasons, hpa, note, {}
    pv = planned_values(sc, hpa, params, packed)
    note = f"decide(forecastAndScale), model {packed.model}, q={v.quantile:g}, L={ctx.lead_seconds:g}s"
    return pv.values, pv.reasons, hpa, note, {}


def forecast_sweep(fam: PolicyFamily, grid: Any, s: Knobs, model: str, quantiles, level_corrections) -> list[Variant]:
    """A forecast family's sweep: ``quantiles`` x ``level_corrections`` x the grid's headroom, then the window-max
    band at the grid's band quantiles (headroom 1)."""
    comp = s.hpa_tolerance > 0
    out = [
        Variant(fam.name, model, q, lc, h, comp) for q in quantiles for lc in level_corrections for h in grid.headroom
    ]
    out += [
        Variant(fam.name, model, q, s.level_correction_seconds, 1.0, comp, band="window")
        for q in grid.window_band_quantiles
    ]
    return out

"""``reactive``: KEDA's Prometheus scaler, the observed rate (``decide`` in reactive mode), with ``headroom`` x
dead-band compensation (``hpaTolerance`` 0 = off) as its knobs."""

from __future__ import annotations

from typing import Any

from ...policy import PolicyParams
from ..policies import Context, planned_values
from ..variant import Variant
from .base import Knobs, PolicyFamily, Stage1


class Reactive(PolicyFamily):
    name = "reactive"
    knobs = ("mode", "headroom", "hpaTolerance")
    selectable = True
    compensated = False  # KEDA's Prometheus scaler passes the rate as it is

    def default(self, s: Knobs) -> Variant:
        return Variant(self.name, compensation=False)  # what KEDA's Prometheus scaler does

    def sweep(self, grid: Any, s: Knobs) -> list[Variant]:
        comps = tuple(dict.fromkeys(c for c in grid.reactive_compensation if c is False or s.hpa_tolerance > 0))
        return [self.default(s)] + [
            Variant(self.name, headroom=h, compensation=c) for h in grid.reactive_headroom for c in comps or (False,)
        ]

    def fields(self, v: Variant, extra) -> dict:
        return {"mode": "reactive"}

    def stage1(self, ctx: Context, v: Variant, packed) -> Stage1:
        params = PolicyParams(
            mode="reactive", lead_seconds=0.0, quantile=0.5, qps_per_replica=ctx.qps, headroom=1.0, hpa_tolerance=0.0
        )
        pv = planned_values(ctx.scenario, ctx.hpa, params, ())
        return pv.values, {}, ctx.hpa, "KEDA's Prometheus scaler: value = rate over 2 min, as is", {}


FAMILY = Reactive()

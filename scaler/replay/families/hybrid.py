"""``hybrid``: an always-warm floor (``floorPercentile`` of the history, as ``minReplicaCount`` and
``floorReplicas``) plus ``predictive`` above it."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping

import numpy as np

from ..policies import Context, planned_values
from ..variant import Variant
from .base import FORECAST_KNOBS, Knobs, PolicyFamily, Stage1, forecast_fields, forecast_params


class Hybrid(PolicyFamily):
    name = "hybrid"
    knobs = FORECAST_KNOBS + ("floorReplicas",)
    selectable = True
    names_model = True

    def default(self, s: Knobs) -> Variant:
        return Variant(
            self.name,
            s.model,
            s.quantile,
            s.level_correction_seconds,
            s.headroom,
            s.hpa_tolerance > 0,
            s.hybrid_floor_percentile,
        )

    def sweep(self, grid: Any, s: Knobs) -> list[Variant]:
        d = self.default(s)
        return [d] + [replace(d, floor_percentile=p) for p in grid.hybrid_floor_percentiles]

    def fields(self, v: Variant, extra: Mapping) -> dict:
        return {**forecast_fields(v), "floor_replicas": int(extra.get("floorReplicas", 0))}

    def stage1(self, ctx: Context, v: Variant, packed) -> Stage1:
        assert packed is not None and v.floor_percentile is not None
        sc, hpa, qps = ctx.scenario, ctx.hpa, ctx.qps
        y = ctx.train_y
        floor_qps = float(np.percentile(y, v.floor_percentile)) if y.size else 0.0
        floor = int(math.ceil(floor_qps / qps - 1e-9)) if floor_qps > 0 else 0
        pv = planned_values(sc, hpa, replace(forecast_params(ctx, v), floor_qps=floor * qps), packed)
        h2 = replace(hpa, min_replicas=max(hpa.min_replicas, floor), max_replicas=max(hpa.max_replicas, floor))
        note = (
            f"{floor} always-warm replica(s) (p{v.floor_percentile:g} of the history, {floor_qps:.4g} req/s) "
            f"+ predictive above them"
        )
        return (
            pv.values,
            pv.reasons,
            h2,
            note,
            {"minReplicaCount": max(hpa.min_replicas, floor), "floorReplicas": floor},
        )


FAMILY = Hybrid()

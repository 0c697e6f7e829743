"""``predictive``: forescale's model (the settings' model, prophet by default) through ``decide(forecastAndScale)``;
knobs ``quantile`` x ``levelCorrection`` x ``headroom`` (and the window-max band, replay only)."""

from __future__ import annotations

from typing import Any

from ..variant import Variant
from .base import FORECAST_KNOBS, Knobs, PolicyFamily, forecast_fields, forecast_stage1, forecast_sweep


class Predictive(PolicyFamily):
    name = "predictive"
    knobs = FORECAST_KNOBS
    selectable = True
    names_model = True

    def default(self, s: Knobs) -> Variant:
        return Variant(self.name, s.model, s.quantile, s.level_correction_seconds, s.headroom, s.hpa_tolerance > 0)

    def sweep(self, grid: Any, s: Knobs) -> list[Variant]:
        return [self.default(s)] + forecast_sweep(self, grid, s, s.model, grid.quantiles, grid.level_corrections)

    def fields(self, v: Variant, extra) -> dict:
        return forecast_fields(v)

    stage1 = staticmethod(forecast_stage1)


FAMILY = Predictive()

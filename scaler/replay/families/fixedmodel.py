"""A forecast family whose model is fixed (``linear_trend``, ``seasonal_naive``): ``decide(forecastAndScale)`` on
that model's curves, knobs ``quantile`` x ``headroom`` (and the window-max band, replay only)."""

from __future__ import annotations

from typing import Any

from ..variant import Variant
from .base import FORECAST_KNOBS, Knobs, PolicyFamily, forecast_fields, forecast_stage1, forecast_sweep


class FixedModel(PolicyFamily):
    knobs = FORECAST_KNOBS
    selectable = True

    def __init__(self, name: str, *, in_table: bool):
        self.name = self.model = name
        self.in_table = in_table

    def default(self, s: Knobs) -> Variant:
        return Variant(self.name, self.model, s.quantile, s.level_correction_seconds, s.headroom, s.hpa_tolerance > 0)

    def sweep(self, grid: Any, s: Knobs) -> list[Variant]:
        if "predictive" in grid.families and s.model == self.model:
            return []  # the predictive family's sweep is this model's already
        return [self.default(s)] + forecast_sweep(
            self, grid, s, str(self.model), grid.simple_quantiles, (s.level_correction_seconds,)
        )

    def fields(self, v: Variant, extra) -> dict:
        return forecast_fields(v)

    stage1 = staticmethod(forecast_stage1)

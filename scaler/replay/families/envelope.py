"""``envelope``: Crane EHPA's periodic envelope (``anchors.envelope_values``): ``window`` x margin (``headroom``);
the servable ``model: envelope`` is its 1 h window (``ENVELOPE_WINDOW``), the one ``tune`` may pick."""

from __future__ import annotations

from typing import Any

from forecaster.models.envelope import DEFAULT_WINDOW as ENVELOPE_WINDOW

from ..anchors import envelope_values
from ..policies import Context
from ..variant import Variant
from .base import Knobs, PolicyFamily, Stage1


class Envelope(PolicyFamily):
    name = "envelope"
    knobs = ("mode", "model", "levelCorrection", "headroom", "hpaTolerance")
    selectable = True
    anchor = True

    def default(self, s: Knobs) -> Variant:
        return Variant(self.name, headroom=1.0, compensation=s.hpa_tolerance > 0, window_seconds=ENVELOPE_WINDOW)

    def sweep(self, grid: Any, s: Knobs) -> list[Variant]:
        comp = s.hpa_tolerance > 0
        return [self.default(s)] + [
            Variant(self.name, headroom=h, compensation=comp, window_seconds=w)
            for w in grid.envelope_windows
            for h in grid.anchor_margins
        ]

    def servable(self, v: Variant) -> bool:
        """Only at the servable window (``model: envelope``)."""
        return v.band is None and v.window_seconds is not None and abs(v.window_seconds - ENVELOPE_WINDOW) < 1e-6

    def fields(self, v: Variant, extra) -> dict:
        # the servable model at its fixed window; no level correction, as replayed
        return {"mode": "forecastAndScale", "model": "envelope", "level_correction_seconds": 0.0}

    def stage1(self, ctx: Context, v: Variant, packed) -> Stage1:
        vals, note = envelope_values(ctx, float(v.window_seconds if v.window_seconds is not None else 3600.0))
        return vals, {}, ctx.hpa, note, {}


FAMILY = Envelope()

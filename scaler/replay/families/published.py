"""An anchor family that forescale's metadata cannot express (``aws_like``, ``mimir_like``): a published
autoscaler's value (``anchors``) through the same stage 2 and HPA, margin (``headroom``) as its knob."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..policies import Context
from ..variant import Variant
from .base import Knobs, PolicyFamily, Stage1


class Published(PolicyFamily):
    anchor = True

    def __init__(self, name: str, values: Callable[[Context], tuple[np.ndarray, str]]):
        self.name, self.values = name, values

    def default(self, s: Knobs) -> Variant:
        return Variant(self.name, headroom=1.0, compensation=False)  # as published: no dead-band compensation

    def sweep(self, grid: Any, s: Knobs) -> list[Variant]:
        comp = s.hpa_tolerance > 0
        return [self.default(s)] + [
            Variant(self.name, headroom=h, compensation=comp, window_seconds=None) for h in grid.anchor_margins
        ]

    def stage1(self, ctx: Context, v: Variant, packed) -> Stage1:
        vals, note = self.values(ctx)
        return vals, {}, ctx.hpa, note, {}

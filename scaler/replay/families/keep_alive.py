"""``keep_alive``: a fixed pool sized for the simulated span's peak, in hindsight (a baseline, no HPA)."""

from __future__ import annotations

import math

from ..policies import Context, fixed_pool
from ..scenario import Timeline
from ..variant import Variant
from .base import PolicyFamily


class KeepAlive(PolicyFamily):
    name = "keep_alive"
    hpa = False

    def timeline(self, ctx: Context, v: Variant) -> tuple[Timeline, str]:
        n = int(math.ceil(ctx.peak / ctx.qps - 1e-9)) if ctx.peak > 0 else 1
        return fixed_pool(ctx.scenario, n), f"{n} replicas always ready (the simulated span's peak, in hindsight)"


FAMILY = KeepAlive()

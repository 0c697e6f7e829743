"""The missed-request target of tuning: a fraction of requests, or a multiple of reactive KEDA's miss.

``0.005`` asks for at most 0.5 % of requests above ready capacity. ``0.5x``
asks for at most half of what plain reactive KEDA (the Prometheus scaler,
headroom 1, the HPA's tolerance) misses on the same replayed traffic, which
is a target that means the same thing on smooth and on bursty traffic. The
replay engine turns a relative target into a fraction (``engine.run``), once
it has replayed reactive on the same span. ``parse_cost_cap`` reads the cost
cap that goes with the target. Pure; no dependencies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ACCEPTED = ("a fraction of requests in [0, 1), e.g. 0.005 (0.5 %), or a multiple of reactive KEDA's missed "
            "fraction on the same traffic in [0, 1], e.g. 0.5x")


@dataclass(frozen=True)
class MissTarget:
    value: float
    relative: bool = False  # True: value x reactive's missed fraction

    def absolute(self, reactive_miss: float) -> float:
        """The target as a fraction of requests, given reactive's missed fraction on the same replay."""
        return self.value * reactive_miss if self.relative else self.value

    def __str__(self) -> str:
        """The metadata form, read back exactly by ``parse_miss_target``."""
        short = f"{self.value:g}"
        text = short if float(short) == self.value else repr(float(self.value))
        return text + "x" if self.relative else text

    def describe(self) -> str:
        """For messages: '0.5x reactive's miss' or '0.5 %'."""
        return f"{self.value:g}x reactive's miss" if self.relative else f"{100 * self.value:g} %"


def parse_miss_target(text: str) -> MissTarget:
    """``0.005`` or ``0.5x`` (also ``0.5X``, spaces around); ValueError naming what is accepted."""
    s = str(text).strip()
    relative = s[-1:] in ("x", "X")
    body = s[:-1].strip() if relative else s
    try:
        x = float(body)
    except ValueError:
        raise ValueError(f"{_shown(s)} is not {ACCEPTED}") from None
    if not math.isfinite(x) or x < 0 or (x > 1 if relative else x >= 1):
        raise ValueError(f"{_shown(s)} is out of range: {ACCEPTED}")
    return MissTarget(x, relative)


COST_CAP_FORM = "a number in (0, 1000] (replica-hours / the oracle's), e.g. 1.3, or none"


def parse_cost_cap(text: str) -> float | None:
    """``maxCostRatio`` / ``--max-cost-ratio``: a number in (0, 1000], or ``none`` (no cap); ValueError else."""
    s = str(text).strip()
    if s.lower() == "none":
        return None
    x = float(s)  # ValueError for words
    if not 0 < x <= 1000:  # NaN fails too
        raise ValueError(s)
    return x


def as_target(value: float | MissTarget | None) -> MissTarget | None:
    """A plain number is an absolute fraction."""
    if value is None or isinstance(value, MissTarget):
        return value
    return MissTarget(float(value), False)


def _shown(s: str) -> str:
    return repr(s if len(s) <= 40 else s[:40] + "...")

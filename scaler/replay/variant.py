"""One configuration of one policy family (``Variant``): plain data, the key every replay, point and choice carries.

What a family does with its configurations (their defaults, the sweep, the metadata, the evaluation, the label) is
the family's own module (``scaler.replay.families``); this module knows no family.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    """One configuration of one family (``policy``: the family's name, as the JSON and the CLI write it)."""

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

    def stage1_key(self) -> tuple:
        """What stage 1 of its evaluation depends on (``families.PolicyFamily.stage1``): the variants that share it
        differ in headroom and compensation alone, and share one stage 1 (and one process in a batch)."""
        return (
            self.policy,
            self.model,
            self.quantile,
            self.level_correction_seconds,
            self.floor_percentile,
            self.window_seconds,
            self.band,
        )

"""THE "tune one series" pipeline: the sweep, the targeted headroom search, the selection.

``forescale tune`` (``scaler.cli.tune``), the fleet (``scaler.fleet.jobs``) and the server's
``tuning: auto`` (``scaler.serve.tuning``) all call ``tune``; what they print, write or apply comes from
its ``Tuning`` through the family table (``families.to_spec`` -> ``spec.to_metadata``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..misstarget import MissTarget
from . import engine, families, frontier, variants


@dataclass(frozen=True)
class Tuning:
    result: engine.Result
    selection: frontier.Selection

    @property
    def point(self) -> frontier.Point | None:
        return self.selection.point

    def deployment(self) -> dict:
        """The ``ScalerSpec`` fields of the selection (``families.deployment``); ValueError when there is none."""
        p = self.selection.point
        if p is None:
            raise ValueError(self.selection.message)
        return families.deployment(p.variant, tolerance=self.result.tolerance, extra=p.extra)


def tune(trace: engine.Trace, settings: engine.Settings, target_miss: float | MissTarget,
         max_cost_ratio: float | None = None, *, grid: variants.Grid | None = None, jobs: int | None = 1,
         progress: engine.Progress | None = None, families_allowed: Sequence[str] = families.SELECTABLE) -> Tuning:
    """Sweep every family of ``grid`` over its knobs on ``trace``, search each one's headroom for the cheapest
    value meeting ``target_miss`` and select the cheapest configuration meeting it within ``max_cost_ratio``
    (``frontier.select``). Raises ``engine.ReplayError`` for bad input."""
    grid = grid or variants.Grid()
    r = engine.run(trace, settings, variants.variants(grid, settings),
                   score=variants.accuracy_models(settings, grid.families), jobs=jobs, progress=progress,
                   target_miss=target_miss)
    sel = frontier.select(r.points, r.target_miss, max_cost_ratio, families=families_allowed)
    return Tuning(r, sel)

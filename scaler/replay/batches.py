"""Configurations replayed in batches: each family's stage 1 once per value sequence, then headroom and dead-band
compensation (``policies.finish``) and the HPA for every variant sharing it (``evaluate_batch``), the family found
in the table (``families``). ``engine.run``, ``tune`` and the advice all evaluate through here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from . import closedloop, search
from .families import family
from .families.base import Stage1
from .forecasts import Packed
from .hpa import Hpa
from .keda import run_hpa
from .policies import Context, finish
from .scenario import Outcome, Timeline, evaluate
from .variant import Variant


@dataclass
class Evaluated:
    variant: Variant
    outcome: Outcome
    reasons: dict
    note: str
    timeline: Timeline | None  # kept for the family's default configuration only
    extra: dict = field(default_factory=dict)  # e.g. hybrid's minReplicaCount


def base_values(ctx: Context, v: Variant, packed: Packed | None) -> Stage1:
    """Stage 1 of a decision at every KEDA poll, by the variant's family (``PolicyFamily.stage1``): ``decide``
    without headroom and compensation. Returns the value per poll (``Decision.base``: max(observed, forecast
    peak) or observed), the reasons counted, the HPA to replay it with, a note and extras (hybrid: its
    ``minReplicaCount``)."""
    return family(v.policy).stage1(ctx, v, packed)


def _knob_note(v: Variant, tolerance: float) -> str:
    """What a variant adds to its family's note: headroom, and compensation where it is not the family's habit."""
    note = f", x {v.headroom:g}" if v.headroom != 1.0 else ""
    habit = family(v.policy).compensated
    if not habit and tolerance > 0:
        note += ", pushed past the HPA dead band"
    elif habit and tolerance <= 0:
        note += ", no dead-band compensation"
    return note


def evaluate_batch(
    ctx: Context, batch: Sequence[tuple[Variant, bool]], packed: Packed | None, target_miss: float | None = None
) -> list[Evaluated]:
    """Replay configurations; ``(variant, keep_timeline)`` pairs, all of one model and quantile (or none).

    With ``target_miss``: also, per stage-1 value sequence and compensation setting in the batch, the
    cheapest headroom meeting it (``search``), as a variant marked ``searched`` (none where even the
    largest headroom misses more, or where the answer is one of the batch's own headroom values).
    """
    sc, qps = ctx.scenario, ctx.qps
    stage1: dict[tuple, tuple] = {}
    replayed: dict[tuple, Timeline] = {}  # by (hpa, values) or, with the loop, (hpa, base, headroom, tol)
    raised: dict[tuple, int] = {}  # the closed loop's raised answers per replay (reason feedback)
    learnt: dict[tuple, str] = {}  # capacity: learned, what each replay ended on (its note)
    out: list[Evaluated] = []
    groups: dict[tuple, tuple[Variant, list[tuple[float, Outcome]]]] = {}  # (k1, compensation) -> first, tried

    def replay(base: np.ndarray, hpa: Hpa, headroom: float, tol: float) -> Timeline:
        if ctx.loop is not None:  # the closed loop: the answers depend on the queue, call by call
            closed = (hpa, base.tobytes(), headroom, tol)
            if closed not in replayed:
                run = closedloop.run(
                    sc, base, hpa, qps=qps, headroom=headroom, tolerance=tol, loop=ctx.loop,
                    settle_seconds=ctx.lead_seconds,
                )  # fmt: skip
                replayed[closed], raised[closed] = run.timeline, run.raised
                learnt[closed] = learned_note(run.learned, qps)
            return replayed[closed]
        values = finish(base, qps, headroom, tol)
        key = (hpa, values.tobytes())
        if key not in replayed:
            replayed[key] = run_hpa(sc, values, hpa)
        return replayed[key]

    for v, keep in batch:
        if not family(v.policy).hpa:
            out.append(baseline(ctx, v, keep))
            continue
        k1 = v.stage1_key()
        if k1 not in stage1:
            stage1[k1] = base_values(ctx, v, packed)
        base, reasons, hpa, note, extra = stage1[k1]
        tol = ctx.tolerance if v.compensation else 0.0
        tl = replay(base, hpa, v.headroom, tol)
        o = evaluate(sc, tl)
        groups.setdefault((k1, v.compensation), (v, []))[1].append((v.headroom, o))
        why, learned = dict(reasons), ""
        if ctx.loop is not None:
            why["feedback"] = raised[(hpa, base.tobytes(), v.headroom, tol)]
            learned = learnt[(hpa, base.tobytes(), v.headroom, tol)]
        out.append(Evaluated(v, o, why, note + _knob_note(v, tol) + learned, tl if keep else None, dict(extra)))
    if target_miss is None:
        return out
    for (k1, comp), (v0, tried) in groups.items():
        base, reasons, hpa, note, extra = stage1[k1]
        tol = ctx.tolerance if comp else 0.0
        found = search.cheapest_meeting(
            lambda h: evaluate(sc, replay(base, hpa, h, tol)), target_miss, seed=tuple(tried)
        )
        if found is not None and all(abs(found.headroom - h) > 1e-9 for h, _ in tried):  # a grid point: nothing new
            v = replace(v0, headroom=float(found.headroom), searched=True)
            out.append(
                Evaluated(v, found.outcome, dict(reasons), note + _knob_note(v, tol) + ", searched", None, dict(extra))
            )
    return out


def learned_note(learned, qps: float) -> str:
    """What ``capacity: learned`` ended on, for the variant's note ("" when it was not replayed)."""
    if learned is None:
        return ""
    if learned.estimate is None:
        return (
            f", capacity learned: no estimate in the last day ({learned.samples} saturated samples), "
            f"{learned.in_force:.4g} in force at the end (configured {qps:g})"
        )
    return (
        f", capacity learned {learned.estimate:.4g} req/s per replica ({learned.samples} samples), "
        f"{learned.in_force:.4g} in force at the end (configured {qps:g})"
    )


def baseline(ctx: Context, v: Variant, keep: bool) -> Evaluated:
    """A family without the HPA (``scheduled``, ``keep_alive``, ``oracle``): its own timeline."""
    tl, note = family(v.policy).timeline(ctx, v)
    return Evaluated(v, evaluate(ctx.scenario, tl), {}, note, tl if keep else None)

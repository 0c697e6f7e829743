"""An LLM server's figures in the backtest's output: TTFT and ITL per policy, the closed loop's settings and raises
(``scaler.replay.llm``, ``scaler.replay.closedloop``); only with token columns or a loop target."""

from __future__ import annotations

import math

from ..replay.engine import Result
from ..replay.llm import MAX_UTILISATION, QUANTILE


def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def add_llm_json(r: Result, doc: dict) -> None:
    """Per policy ``ttft_p95_s``, ``itl_p95_s``; ``settings.llm`` (the latency model, the loop, the capacity factor)."""
    s = r.settings
    if not s.llm_figures:
        return
    for name, p in r.policies.items():
        doc["policies"][name].update({k: _num(v) for k, v in p.llm.items()})
    lp = s.loop
    doc["settings"]["llm"] = {
        "itl_seconds": s.itl_seconds,
        "max_utilisation": MAX_UTILISATION,
        "quantile": QUANTILE,
        "capacity_factor": s.capacity_factor,
        "capacity": "learned" if s.capacity_learned else "configured",
        "loop": None if lp is None else {"queue_target": lp.queue, "ttft_target_seconds": lp.ttft,
                                         "itl_target_seconds": lp.itl, "step": s.loop_rule.step,
                                         "max_factor": s.loop_rule.max_factor, "inside": s.loop_rule.inside,
                                         "half_life_seconds": s.loop_rule.half_life_seconds},
    }


def format_llm(r: Result) -> str:
    """The TTFT and ITL per policy, with the closed loop's raised answers ("" without token columns or a loop)."""
    s = r.settings
    if not s.llm_figures:
        return ""
    lp = s.loop
    lines = [f"LLM         TTFT = FIFO wait + a step + prefill, ITL = {s.itl_seconds:g}s / (1 - min(utilisation, "
             f"{MAX_UTILISATION:g})); p{100 * QUANTILE:g} over the requests"]
    if lp is not None:
        parts = [f"queue {lp.queue:g} per ready replica" if lp.queue is not None else "",
                 f"TTFT {lp.ttft:g}s" if lp.ttft is not None else "", f"ITL {lp.itl:g}s" if lp.itl is not None else ""]
        lines.append(f"closed loop targets {', '.join(p for p in parts if p)}: every HPA policy's answer x the loop's "
                     f"factor (raised: the calls where it raised the answer)")
    if s.capacity_factor != 1.0:
        lines.append(f"capacity    a replica sustains 1/{s.capacity_factor:g} of its configured figure")
    if s.capacity_learned:
        lines.append("capacity    learned online (capacity: learned): each call planned in replicas of the figure "
                     "learned before it (the policies' notes say where it ended)")
    head = f"{'policy':<13}{'missed %':>9}{'replica-h':>11}{'TTFT p95 s':>12}{'ITL p95 s':>11}" + \
           (f"{'raised':>9}" if lp is not None else "")
    lines += ["", head, "-" * len(head)]
    for name, p in r.policies.items():
        t, i = p.llm.get("ttft_p95_s", math.nan), p.llm.get("itl_p95_s", math.nan)
        raised = p.reasons.get("feedback")
        lines.append(f"{name:<13}{100 * p.outcome.underprovisioned_fraction:>9.3f}{p.outcome.replica_hours:>11.1f}"
                     f"{t:>12.3g}{i:>11.3g}" + (f"{'-' if raised is None else raised:>9}" if lp is not None else ""))
    return "\n".join(lines)

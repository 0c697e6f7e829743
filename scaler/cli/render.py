"""What the verbs print and write: the backtest table and JSON contract, the frontier, trigger metadata, progress;
what the world options add (and ``--advise``) is ``render_world``.

The JSON contract is documented in the README ("The JSON contract").
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Mapping, Sequence

import numpy as np

from ..replay.engine import Result
from ..replay.prepare import iso
from ..replay.scenario import DAY
from ..replay.frontier import Point, Selection
from ..replay import families
from ..replay.families import Family as F
from ..scaledobject import AUTHENTICATION_REF, DEFAULT_SCALER_ADDRESS, POLLING_SECONDS, scaled_object
from ..spec import DEFAULTS, ScalerSpec, format_duration, parse_duration, parse_metadata
from .calendarout import calendar_json, holiday_lines
from .replayflags import world_flags
from .serveraddr import without_credentials


# one colour per policy in every plot and page (report's PNGs, report_html's page)
COLORS = {"reactive": "#d62728", "linear_trend": "#9467bd", "predictive": "#1f77b4", "hybrid": "#17becf",
          "scheduled": "#8c564b", "keep_alive": "#7f7f7f", "oracle": "#2ca02c", "envelope": "#ff7f0e",
          "aws_like": "#bcbd22", "mimir_like": "#aec7e8"}


def json_float(x: float) -> float | None:
    """JSON-safe float (NaN/Inf -> null)."""
    return float(x) if x is not None and math.isfinite(x) else None


def to_json(r: Result) -> dict:
    """The JSON contract (README, "The JSON contract"; extra keys scripts may ignore)."""
    s = r.settings
    oh = r.oracle_hours
    pols = {}
    for name, p in r.policies.items():
        d = p.outcome.as_dict()
        d["cost_ratio"] = json_float(p.outcome.replica_hours / oh) if oh else None
        d["cold_start_request_fraction"] = (json_float(p.outcome.cold_start_requests / p.outcome.requests)
                                            if p.outcome.requests else 0.0)
        d["note"] = p.note
        if p.reasons:
            d["reasons"] = dict(sorted(p.reasons.items()))
        pols[name] = d
    fc = {}
    for m, mr in r.models.items():
        fc[m] = {k: (json_float(v) if isinstance(v, float) else v) for k, v in mr.scores.items() if k != "days"}
        if "days" in mr.scores:  # --holidays/--events: the accuracy on ordinary days and on holidays/events
            fc[m]["days"] = {part: {k: (json_float(v) if isinstance(v, float) else v) for k, v in sc.items()}
                             for part, sc in mr.scores["days"].items()}
        fc[m]["fits"] = mr.fits
        if mr.failures:
            fc[m]["failures"] = mr.failures
    series = r.trace.series
    return {
        "trace": {
            "name": r.trace.name,
            "points": int(len(series)),
            "step_seconds": float(series.step),
            "span_days": float(series.span_seconds / DAY),
            "source": r.trace.source,
            "hygiene": r.trace.hygiene,
        },
        "settings": {
            "cold_start_seconds": r.lead.cold_start_seconds,
            "lead_seconds": r.lead.seconds,
            "buffer_seconds": r.lead.buffer_seconds,
            "qps_per_replica": r.qps_per_replica,
            "qps_per_replica_source": r.qps_note,
            "model": s.model,
            "quantile": s.quantile,
            "history_seconds": s.history_seconds,
            "refit_seconds": s.refit_seconds,
            "level_correction_seconds": s.level_correction_seconds,
            "headroom": s.headroom,
            "hpa_tolerance": s.hpa_tolerance,
            "min_replicas": s.min_replicas,
            "max_replicas": s.max_replicas,
            "tick_seconds": r.scenario.tick,
            "polling_seconds": float(POLLING_SECONDS),
            "rate_window_seconds": 120.0,
            "simulated_start": iso(r.sim_start),
            "simulated_end": iso(r.sim_end),
            "simulated_days": (r.sim_end - r.sim_start) / DAY,
            "policies": list(r.policies),
            **({"tokens": {"tokens_per_replica": s.tokens.tokens_per_replica, "input_token_weight":
                           s.tokens.input_weight, "scaled_on": "binding" if s.token_aware else "requests",
                           **({"requests_per_replica": s.tokens.requests_per_replica,
                               "lengths": list(s.tokens.lengths)} if s.tokens.lengths is not None else {})}}
               if s.tokens is not None else {}),
        },
        "forecast": fc,
        "policies": pols,
        "notes": list(r.notes),
        "timing": {k: round(v, 3) for k, v in r.timing.items()},
        **calendar_json(r),
    }


def format_table(r: Result) -> str:
    """The terminal summary: what was run, then one row per policy and one per model."""
    s = r.settings
    oh = r.oracle_hours
    lines = [
        f"trace     {r.trace.name}: {len(r.trace.series)} points at {r.trace.series.step:g}s, "
        f"{r.trace.series.span_seconds / DAY:.1f} d ({r.trace.hygiene})",
        f"simulated {iso(r.sim_start)} .. {iso(r.sim_end)} ({(r.sim_end - r.sim_start) / DAY:.2f} d, "
        f"{r.scenario.n} ticks of {r.scenario.tick:g}s)",
        f"replica   {r.qps_per_replica:g} req/s per replica ({r.qps_note}); T_cold {r.lead.cold_start_seconds:g}s, "
        f"lead L = T_cold + {r.lead.buffer_seconds:g}s = {r.lead.seconds:g}s",
        f"forecast  {s.model} q{s.quantile:g}, fitted on {s.history_seconds / DAY:g} d before each cutoff, "
        f"refit every {s.refit_seconds / 60:g} min ({r.models[s.model].fits if s.model in r.models else 0} fits), "
        f"forecast from every {r.trace.series.step:g}s cutoff",
        f"HPA       tolerance {s.hpa_tolerance:g} (scale-up), +max(4 pods, 100 %)/15 s, 300 s down-stabilisation, "
        f"replicas {s.min_replicas}..{s.max_replicas}, KEDA polls every 30 s",
    ]
    lines += [f"note      {n}" for n in r.notes]
    lines.append("")
    head = f"{'policy':<13}{'missed %':>9}{'viol min':>9}{'replica-h':>11}{'x oracle':>9}{'scale-ups':>10}{'peak':>6}" \
           f"{'in cold start %':>17}"
    lines += [head, "-" * len(head)]
    for name, p in r.policies.items():
        o = p.outcome
        ratio = f"{o.replica_hours / oh:.2f}" if oh else "-"
        lines.append(f"{name:<13}{100 * o.underprovisioned_fraction:>9.3f}{o.violation_minutes:>9d}"
                     f"{o.replica_hours:>11.1f}{ratio:>9}{o.scale_ups:>10d}{o.peak_replicas:>6d}"
                     f"{100 * o.cold_start_requests / o.requests if o.requests else 0:>17.1f}")
    lines.append("(missed: requests above ready capacity; viol min: minutes with any; in cold start: requests that "
                 "arrived while a replica was starting)")
    lines += [f"replayed  {p.note}" for p in r.policies.values() if p.note.startswith("ScaledObject ")]
    lines.append("")
    lines.append(f"forecast accuracy at horizon L (rolling origin, {len(next(iter(r.models.values())).curves)} cutoffs; "
                 f"scored level-corrected, as the policy uses it)")
    head2 = f"{'model':<16}{'MASE':>8}{'WAPE':>8}{'pinball':>10}{'coverage':>10}{'fits':>6}"
    lines += [head2, "-" * len(head2)]
    for m, mr in r.models.items():
        sc = mr.scores
        lines.append(f"{m:<16}{column(sc['mase'], 8, 3)}{column(sc['wape'], 8, 3)}{column(sc['pinball'], 10, 2)}"
                     f"{column(sc['coverage'], 10, 3)}{mr.fits:>6d}")
        for part, ps in sc.get("days", {}).items():
            lines.append(f"{'  ' + part.replace('_or_', '/'):<16}{column(ps['mase'], 8, 3)}{column(ps['wape'], 8, 3)}"
                         f"{column(ps['pinball'], 10, 2)}{column(ps['coverage'], 10, 3)}{'':>6}")
    lines.append(f"(coverage: share of actuals at or below the q{s.quantile:g} forecast; MASE scaled by the "
                 f"in-sample seasonal-naive error)")
    return "\n".join(lines + holiday_lines(r))


def column(x: float, w: int, d: int) -> str:
    """``x`` in a column of width ``w`` with ``d`` decimals; one too large for it in 3 significant digits (a
    column never grows with the value: a 600-digit WAPE once did); None, NaN and Inf as ``-``."""
    if x is None or not math.isfinite(x):
        return f"{'-':>{w}}"
    text = f"{x:.{d}f}"
    return f"{text:>{w}}" if len(text) < w else f"{x:>{w}.3g}"


def frontier_json(r: Result) -> list[dict]:
    """The ``frontier`` list of the JSON contract."""
    out = []
    for p in r.points:
        o = p.outcome
        out.append({
            "policy": p.policy,
            "knobs": p.knobs(r.tolerance),
            "underprovisioned_fraction": o.underprovisioned_fraction,
            "violation_minutes": o.violation_minutes,
            "replica_hours": o.replica_hours,
            "cost_ratio": p.cost_ratio,
            **({} if p.dollars is None else {"dollars": p.dollars}),
            "pareto": p.pareto,
            "label": p.label,
            "selectable": p.selectable,
            "default": p.default,
            "reference": p.policy == F.ORACLE,
            "scale_ups": o.scale_ups,
            "peak_replicas": o.peak_replicas,
        })
    return out


def selection_json(sel: Selection, r: Result, md: Mapping[str, str] | None = None,
                   manifest: Mapping | None = None) -> dict:
    p = sel.point
    d: dict = {"target_miss": sel.target_miss, "reactive_miss": r.reactive_miss, "max_cost_ratio": sel.max_cost_ratio,
               "met": sel.met, "message": sel.message}
    if p is not None:
        d.update(policy=p.policy, label=p.label, knobs=p.knobs(r.tolerance),
                 underprovisioned_fraction=p.miss, violation_minutes=p.outcome.violation_minutes,
                 replica_hours=p.cost, cost_ratio=p.cost_ratio, pareto=p.pareto,
                 **({} if p.dollars is None else {"dollars": p.dollars}))
    if md is not None:
        d["metadata"] = dict(md)
    if manifest is not None:
        d["manifest"] = dict(manifest)  # the whole ScaledObject printed
    return d


def format_frontier(r: Result, *, only_pareto: bool = False) -> str:
    """The terminal table of the sweep, sorted by cost."""
    usd = bool(r.points) and all(p.dollars is not None or p.policy == F.ORACLE for p in r.points)
    pts = sorted(r.points, key=lambda p: ((p.dollars or 0.0) if usd else p.cost, p.miss))
    w = 56 if any(p.variant.calendar is not None for p in pts) else 44  # with/without holidays: longer labels
    head = f"{'':2}{'configuration':<{w}}{'missed %':>10}{'viol min':>9}{'replica-h':>11}{'x oracle':>9}" + \
        (f"{'$':>11}" if usd else "")
    lines = [head, "-" * len(head)]
    for p in pts:
        if only_pareto and not (p.pareto or p.policy == F.ORACLE):
            continue
        mark = "*" if p.pareto else ("o" if p.policy == F.ORACLE else " ")
        ratio = "-" if p.cost_ratio is None else f"{p.cost_ratio:.3f}"
        lines.append(f"{mark:<2}{p.label[:w - 1]:<{w}}{100 * p.miss:>10.3f}{p.outcome.violation_minutes:>9d}"
                     f"{p.cost:>11.1f}{ratio:>9}" + (f"{p.dollars or 0.0:>11,.0f}" if usd else ""))
    n_p = sum(p.pareto for p in r.points)
    lines.append(f"(* Pareto-optimal: no other configuration misses less for the same cost or less; {n_p} of "
                 f"{len(r.points) - 1}; o = oracle, the cost reference)")
    return "\n".join(lines)


PLACEHOLDER_NOTES = {"serverAddress": "replace: your Prometheus", "query": "replace: your request rate (req/s)"}
def base_spec(r: Result, *, server_address: str, query: str) -> ScalerSpec:
    """The workload's trigger as the replay saw it (metric, replica size, lead, history), no policy knobs yet."""
    s = r.settings
    md = {"serverAddress": without_credentials(server_address), "query": query, "qpsPerReplica": f"{r.qps_per_replica!r}",
          "coldStartSeconds": f"{r.lead.cold_start_seconds!r}"}
    if s.buffer_seconds is not None:
        md["bufferSeconds"] = f"{s.buffer_seconds!r}"
    if s.history_seconds != parse_duration(DEFAULTS["history"]):
        md["history"] = format_duration(s.history_seconds)
        if s.history_seconds < parse_duration(DEFAULTS["minHistory"]):
            # the replay trusts a forecast as soon as its model fits; minHistory may not exceed history
            md["minHistory"] = md["history"]
    if s.refit_seconds != parse_duration(DEFAULTS["refitInterval"]):
        md["refitInterval"] = format_duration(s.refit_seconds)  # the cadence replayed is the one deployed
    spec = parse_metadata(md)[0]
    # the holiday handling replayed (a configuration that dropped it clears it: families.deployment)
    return dataclasses.replace(spec, holidays=s.holidays, holiday_window=s.holiday_window, holiday_as=s.holiday_as,
                               timezone=s.timezone)


def metadata_for(p: Point, r: Result, *, server_address: str, query: str,
                 scaler_address: str = DEFAULT_SCALER_ADDRESS) -> dict[str, str]:
    """Trigger metadata (all strings) that makes the scaler run configuration ``p`` (``families.metadata``)."""
    md = families.metadata(p.variant, base_spec(r, server_address=server_address, query=query),
                           tolerance=r.tolerance, extra=p.extra)
    return {"scalerAddress": scaler_address, **md}


def manifest_for(p: Point, r: Result, md: Mapping[str, str], *, name: str, namespace: str = "",
                 pools: Mapping[str, object] | None = None) -> dict:
    """The whole ScaledObject running ``p`` (``scaledobject.scaled_object``): hybrid's floor as minReplicaCount too,
    the world it was ranked in as its ``forescale.io/replay`` annotation (``replayflags.world_flags``; ``pools``: the
    pool options as given)."""
    lo = int(p.extra.get("minReplicaCount", r.settings.min_replicas))
    return with_mtls(scaled_object(md, name=name, namespace=namespace, min_replicas=lo,
                                  max_replicas=max(r.settings.max_replicas, lo), tolerance=r.tolerance,
                                  replay=world_flags(r, pools)))


def with_mtls(doc: dict) -> dict:
    """``doc`` with its forescale trigger using the Helm chart's default mTLS (``scaledobject.AUTHENTICATION_REF``)."""
    for t in doc["spec"]["triggers"]:
        if t["type"] == "external":
            t["authenticationRef"] = dict(AUTHENTICATION_REF)
    return doc


def _scalar(v, quote: bool = True) -> str:
    if not quote and isinstance(v, str) and re.fullmatch(r"[A-Za-z][\w./-]*", v) and v.lower() not in (
            "true", "false", "yes", "no", "on", "off", "null", "y", "n"):
        return v  # a plain word reads back as itself
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return f"{v:g}" if isinstance(v, float) else str(v)
    return json.dumps(str(v))  # a double-quoted YAML string (KEDA's metadata values are strings)


def _yaml(obj, pad: str, notes: Mapping[str, str], quote: bool = False) -> list[str]:
    lines: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{k}:")
                inner = quote or k == "metadata" and "type" in obj  # a trigger's metadata: every value quoted
                lines += _yaml(v, pad + "  ", notes, inner)
            else:
                note = f"  # {notes[k]}" if quote and k in notes else ""
                text = _scalar(v, quote) if not isinstance(v, (dict, list)) else json.dumps(v)
                lines.append(f"{pad}{k}: {text}{note}")
    else:
        for item in obj:
            sub = (_yaml(item, pad + "  ", notes, quote) if isinstance(item, (dict, list))
                   else [f"{pad}  {_scalar(item, quote)}"])
            sub[0] = f"{pad}- {sub[0][len(pad) + 2:]}"
            lines += sub
    return lines


def manifest_yaml(doc: Mapping, comments: Sequence[str] = (), *, notes: Mapping[str, str] | None = None) -> str:
    """A whole ScaledObject as YAML to ``kubectl apply`` (values of trigger metadata double-quoted);
    ``comments`` go above it, ``notes`` at the end of a trigger metadata key's line."""
    lines = [f"# {c}" for c in comments] + _yaml(dict(doc), "", dict(notes or {}))
    return "\n".join(lines) + "\n"


def render_metadata(md: Mapping[str, str], comments: Sequence[str] = (), *, notes: Mapping[str, str] | None = None,
                    indent: int = 4) -> str:
    """A trigger block to paste under ``spec.triggers`` of a ScaledObject, already indented there (``indent``
    spaces: under ``  triggers:``), values quoted (KEDA wants strings); ``comments`` above it."""
    pad = " " * indent
    body = _yaml([{"type": "external", "metadata": dict(md)}], pad, dict(notes or {}))
    return "\n".join([f"{pad}# {c}" for c in comments] + body) + "\n"


def progress_bar(desc: str, enabled: bool | None, unit: str = "fit"):
    """A ``progress(done, total)`` callback drawing tqdm on stderr, and its closer; ``enabled`` None = a terminal only."""
    if enabled is False:
        return None, (lambda: None)
    from tqdm import tqdm

    bar = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, desc=desc, unit=unit, leave=False, disable=None if enabled is None else False,
                       dynamic_ncols=True, mininterval=0.5)
        bar.update(done)

    def close() -> None:
        if bar is not None:
            bar.close()

    return progress, close


def pool(x: np.ndarray, k: int, how: str) -> np.ndarray:
    """``x`` pooled over runs of ``k`` points by max or min (plots keep the peaks on long spans)."""
    if k <= 1:
        return x
    m = -(-len(x) // k)
    pad = np.full(m * k, np.nan)
    pad[:len(x)] = x
    r = pad.reshape(m, k)
    return np.nanmax(r, axis=1) if how == "max" else np.nanmin(r, axis=1)

"""``engine.run``'s first step: the trace as replayed and what every run over it starts from (``Setup``).

``setup`` places the simulated span at the end of the trace (``span_seconds``, leaving ``history_seconds`` before
it, or from ``--sim-start``), sizes a replica (``qps_per_replica``, else the simulated peak over
``TARGET_PEAK_REPLICAS`` rounded to a figure a person would pick: ``nice_round``), and builds the KEDA/HPA
``Scenario`` with its cold starts: on the requests, or with ``--tokens-per-replica`` on the binding load of
requests and tokens (``token_scenario``, ``token_notes``), the load scaled by ``capacity_factor`` when the
replicas are overstated. ``prepared`` adds the world's load scenarios (``scenarios``) to the trace first.
Bad input is a ``ReplayError`` naming the value and what is accepted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timezone

import numpy as np

from ..deadband import target_refusal
from ..spec import LeadTime
from . import llm, scenarios, tokenload
from .forecasts import slice_series
from .hpa import Hpa
from .pools import replica_qps
from .scenario import DAY, TICK_SECONDS, Scenario, scenario
from .settings import ReplayError, Settings, Trace

TARGET_PEAK_REPLICAS = 20  # the derived qps per replica makes the simulated peak need about this many


def nice_round(x: float) -> float:
    """Round to 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 x 10^k (a figure a person would pick)."""
    if not x > 0:
        return 1.0
    k = math.floor(math.log10(x))
    base = x / 10 ** k
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if base <= m * 1.0000001:
            return float(m * 10 ** k)
    return float(10 ** (k + 1))


@dataclass(frozen=True)
class Setup:
    """What every run over a trace starts from: the simulated span, the replica size, the KEDA/HPA scenario."""

    start: float
    end: float
    notes: list[str]
    peak: float
    qps: float
    qps_note: str
    lead: LeadTime
    scenario: Scenario
    hpa: Hpa
    serving: llm.Serving = llm.Serving()  # the latency model's inputs (TTFT and ITL; the loop's signals)


def setup(trace: Trace, settings: Settings) -> Setup:
    """The simulated span (the end of the trace, leaving history before it), qps per replica and scenario."""
    series = trace.series
    step = series.step
    t_first, t_end = float(series.t[0]), float(series.t[-1] + step)
    length = t_end - t_first
    notes: list[str] = []
    if settings.sim_start is not None:
        start = float(settings.sim_start)
        if not t_first < start < t_end:
            raise ReplayError(f"--sim-start {iso(start)} is outside the trace ({iso(t_first)} .. {iso(t_end)})")
    else:
        start = max(t_end - settings.span_seconds, t_first + min(settings.history_seconds, length / 2))
    start = t_first + math.ceil((start - t_first) / step - 1e-9) * step  # on the trace grid
    end = min(t_end, start + settings.span_seconds)
    if end - start < 4 * TICK_SECONDS:
        raise ReplayError(f"the trace is too short to simulate: {length:g} s")
    if start - t_first < settings.history_seconds:
        notes.append(f"only {(start - t_first) / DAY:.2f} d of history before the simulated span "
                     f"(history window {settings.history_seconds / DAY:g} d)")
    span = slice_series(series, start, end)
    peak = float(np.nanmax(span.y)) if np.isfinite(span.y).any() else 0.0
    if settings.qps_per_replica is None:
        one = nice_round(peak / TARGET_PEAK_REPLICAS) if peak > 0 else 1.0
        qps = replica_qps(one, settings.world.placement)  # given, the CLI scaled it (--pools)
        qps_note = (f"derived: the simulated peak {peak:.4g} req/s / {TARGET_PEAK_REPLICAS} replicas, "
                    f"rounded (--qps-per-replica to set it)" + ("" if qps == one else f", x{qps / one:g} on the "
                                                               f"first pool (--pools)"))
    else:
        qps, qps_note = float(settings.qps_per_replica), "given"
    if why := target_refusal(qps):
        raise ReplayError(f"qpsPerReplica {why}; it was {qps_note}")
    sc = scenario(series.t, series.y, step, start, end, cold_start_seconds=settings.cold_start_seconds,
                      qps_per_replica=qps)
    serving = llm.Serving(settings.itl_seconds)
    if settings.tokens is not None:
        requests = sc
        sc = token_scenario(trace, settings, sc, start, end, qps)
        notes += token_notes(trace, settings, start, end, qps)
        cap = settings.tokens
        assert trace.input_tokens is not None
        prompt = tokenload.prompt_per_request(requests, series, trace.input_tokens, start, end)
        serving = llm.Serving(settings.itl_seconds,
                              settings.capacity_factor * cap.input_weight * prompt / cap.tokens_per_replica)
    if settings.capacity_factor != 1.0:  # the replicas sustain 1/f of what they are configured for
        sc = replace(sc, demand=sc.demand * settings.capacity_factor)
        notes.append(f"capacity overstated x{settings.capacity_factor:g}: a replica sustains 1/"
                     f"{settings.capacity_factor:g} of qpsPerReplica; judged on {settings.capacity_factor:g} x the "
                     "load (its requests counted in that unit), scaled on the load as it is")
    hpa = Hpa(target=qps, min_replicas=settings.min_replicas, max_replicas=settings.max_replicas,
                  tolerance_up=settings.hpa_tolerance, activation_threshold=settings.activation_threshold)
    return Setup(start, end, notes, peak, qps, qps_note, settings.lead(), sc, hpa, serving)

def token_notes(trace: Trace, settings: Settings, start: float, end: float, qps: float) -> list[str]:
    """What the table says of the tokens: where they bind, and where a measured model's lengths were left."""
    cap = settings.tokens
    assert cap is not None
    series, k = trace.series, tokenload.weighted(trace, cap)
    share = tokenload.token_share(series, k, qps, cap, start, end)
    notes = [f"tokens: {cap.tokens_per_replica:g} weighted tokens/s per replica (input weight {cap.input_weight:g}); "
             f"the tokens bind in {100 * share:.1f} % of the simulated intervals; scaled on "
             f"{'the binding load' if settings.token_aware else 'req/s alone'}"]
    if cap.lengths is not None:
        held = tokenload.clamped_share(series, k, cap, start, end)
        notes.append(f"capacity model: the mix left the lengths it was measured on ({cap.lengths[0]:.4g}-"
                     f"{cap.lengths[1]:.4g} weighted tokens per request) in {100 * held:.1f} % of the simulated "
                     "intervals: held to the nearest measured length (clamped, not extrapolated)")
    return notes


def token_scenario(trace: Trace, settings: Settings, requests: Scenario, start: float, end: float,
                   qps: float) -> Scenario:
    """The scenario judged on the binding load of requests and tokens (``tokenload``); ReplayError without tokens."""
    cap = settings.tokens
    assert cap is not None
    if not trace.has_tokens:
        raise ReplayError(f"--tokens-per-replica needs a trace with token counts: {trace.source} has no "
                          "'input_tokens' and 'output_tokens' columns; accepted: a CSV with the header "
                          "timestamp,count,input_tokens,output_tokens (sums per interval)")
    s = trace.series
    k = tokenload.weighted(trace, cap)
    kw = dict(cold_start_seconds=settings.cold_start_seconds, qps_per_replica=qps)
    toks = scenario(s.t, tokenload.equivalent(s.y, k, qps, cap), s.step, start, end, **kw)
    need = scenario(s.t, tokenload.judged(s, k, qps, cap), s.step, start, end, **kw)
    return tokenload.with_need(requests, toks, need, token_aware=settings.token_aware, cap=cap)


def prepared(trace: Trace, settings: Settings) -> tuple[Trace, Setup]:
    """The trace as replayed (the world's load scenarios added to it) and its ``Setup``."""
    su = setup(trace, settings)
    W = settings.world
    if W.active and any(sp.kind in scenarios.LOAD_KINDS for sp in W.specs()):  # the load scenarios on the trace
        if settings.tokens is not None:
            raise ReplayError("--scenario's load scenarios change the requests, not the tokens: accepted is one "
                              "of them, --tokens-per-replica or a load --scenario")
        trace = replace(trace, series=scenarios.with_load(trace.series, su.start, W.specs()))
        su = replace(setup(trace, replace(settings, qps_per_replica=su.qps)), qps_note=su.qps_note)
    return trace, su


def iso(t: float) -> str:
    """Epoch seconds as ISO-8601 UTC (messages, tables)."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

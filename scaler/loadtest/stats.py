"""The load test's arithmetic, pure: arrival schedules, per-step statistics, the knee and the recommendation.

No I/O and no clock here: the generator (:mod:`scaler.loadtest.generator`) records one
:class:`Record` per request; everything below turns records into numbers.

Definitions (all times in seconds, relative to the step's start):

* a request's **latency** runs from its *scheduled* arrival to its last byte, so time the generator
  itself lost before sending counts against the server's figure (no coordinated omission);
  **TTFT** runs from the scheduled arrival to the first token of a streamed answer;
* **offered** rate: requests actually sent within the step's window / the window;
  **achieved** rate: successful answers / the time from the step's start to the last one (at least
  the window);
* **ITL** (inter-token latency): the gaps between consecutive streamed tokens of an answer, all the step's
  answers' gaps pooled (as vLLM's ``vllm:inter_token_latency_seconds`` histogram pools them);
* a step **meets the SLO** when at least ``percentile`` % of *all* its requests (errors and timeouts
  count as misses) finished within ``slo`` seconds and, when given, had their first token within
  ``slo_ttft``; and, with ``slo_itl``, the ``percentile``-th ITL of the step is at most ``slo_itl``
  (``slo`` None: the latency to the last byte is not judged, as for long answers held to TTFT and ITL);
* the generator **cannot sustain** a step when it offered less than 95 % of the target, or when the
  step misses the SLO only because of the generator's own send lag (actual send - scheduled time):
  with each request's lag taken off its latency it would have met it. (Lag only adds latency, so a
  step that meets the SLO despite it is evidence.) With ``max_lag`` set, a send-lag p99 above it
  also counts (strict timing, for benchmarks);
* **capacity**: the highest rate that meets the SLO with every lower tested rate meeting it too;
  **recommended qpsPerReplica** = capacity x (1 - margin).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Iterable, Sequence

OFFERED_TOLERANCE = 0.95  # offered >= 95 % of the target, or the generator could not sustain the rate


@dataclass(frozen=True)
class Record:
    """One request: when it was due, when it left, and how it ended (``status``: ok | error | timeout)."""

    scheduled: float
    sent: float
    status: str
    latency: float | None = None   # scheduled -> last byte (ok requests)
    ttft: float | None = None      # scheduled -> first token (streamed ok requests)
    kind: str | None = None        # for errors: the HTTP status ("503") or the failure ("connect", "protocol")
    finished: float | None = None  # when it ended, relative to the step's start
    gaps: tuple[float, ...] = ()   # inter-token gaps of a streamed answer (seconds)
    prompt_tokens: int | None = None  # as the server counted them (usage), when it said
    output_tokens: int | None = None  # usage's completion_tokens, else the streamed token events


def _within(r: Record, slo: float | None, slo_ttft: float | None, lag: float = 0.0) -> bool:
    """A request met the per-request SLOs (latency to the last byte, time to first token), ``lag`` taken off."""
    if r.status != "ok" or r.latency is None:
        return False
    if slo is not None and r.latency - lag > slo:
        return False
    return slo_ttft is None or (r.ttft is not None and r.ttft - lag <= slo_ttft)


def arrivals(rate: float, duration: float, rng: random.Random) -> list[float]:
    """Poisson arrivals for one step: ``round(rate * duration)`` times, uniform on [0, duration), sorted.

    Conditioned on its count, a Poisson process's arrival times are the order statistics of that many
    uniform times; fixing the count makes the offered rate exactly the target (the gaps stay
    exponential-like), so a shortfall is the generator's, never the dice's.
    """
    n = max(1, round(rate * duration))
    return sorted(rng.uniform(0.0, duration) for _ in range(n))


def percentile(values: Iterable[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]; None when empty."""
    xs = sorted(values)
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def slo_latency(records: Sequence[Record], q: float) -> float | None:
    """The q-th percentile latency counting failures as infinitely slow (nearest rank); None when it is a failure."""
    if not records:
        return None
    xs = sorted(r.latency if r.status == "ok" and r.latency is not None else math.inf for r in records)
    v = xs[max(0, math.ceil(q / 100.0 * len(xs)) - 1)]
    return None if math.isinf(v) else v


def lag_excused(records: Sequence[Record], slo: float | None, q: float, slo_ttft: float | None = None,
                itl_ok: bool = True) -> bool:
    """Would the step meet the SLO with each request's send lag taken off its latency and its TTFT?"""
    n = len(records)
    good = sum(1 for r in records if _within(r, slo, slo_ttft, max(0.0, r.sent - r.scheduled)))
    return n > 0 and itl_ok and good / n >= q / 100.0


def token_means(records: Sequence[Record]) -> tuple[float | None, float | None]:
    """Mean prompt and answer tokens of the answered requests that reported them (None: none did)."""
    ok = [r for r in records if r.status == "ok"]
    p = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    o = [r.output_tokens for r in ok if r.output_tokens is not None]
    return (sum(p) / len(p) if p else None), (sum(o) / len(o) if o else None)


def summarize(records: Sequence[Record], *, target: float | None, duration: float, slo: float | None, q: float,
              max_lag: float | None = None, mode: str = "open", concurrency: int | None = None,
              slo_ttft: float | None = None, slo_itl: float | None = None) -> dict:
    """The statistics of one step (a JSON-ready dict; see the module docstring for the definitions)."""
    n = len(records)
    ok = [r for r in records if r.status == "ok"]
    lat = [r.latency for r in ok if r.latency is not None]
    ttft = [r.ttft for r in ok if r.ttft is not None]
    gaps = [g for r in ok for g in r.gaps]
    itl_q = percentile(gaps, q)
    itl_ok = slo_itl is None or itl_q is None or itl_q <= slo_itl
    errors = [r for r in records if r.status == "error"]
    kinds: dict[str, int] = {}
    for r in errors:
        kinds[r.kind or "error"] = kinds.get(r.kind or "error", 0) + 1
    sent_in_window = sum(1 for r in records if r.sent < duration)
    offered = sent_in_window / duration if duration > 0 else 0.0
    last = max((r.finished for r in ok if r.finished is not None), default=duration)
    achieved = len(ok) / max(duration, last) if ok else 0.0
    lags = [max(0.0, r.sent - r.scheduled) for r in records]
    lag99 = percentile(lags, 99) or 0.0
    within = sum(1 for r in ok if _within(r, slo, slo_ttft)) / n if n else 0.0
    meets = n > 0 and within >= q / 100.0 and itl_ok
    limited = bool(mode == "open" and target and (
        offered < OFFERED_TOLERANCE * scheduled_rate(target, n, duration)
        or (not meets and lag_excused(records, slo, q, slo_ttft, itl_ok))
        or (max_lag is not None and lag99 > max_lag)))
    prompt_mean, output_mean = token_means(records)
    return {
        "mode": mode, "target_rps": target, "concurrency": concurrency, "duration_s": duration,
        "requests": n, "ok": len(ok), "offered_rps": offered, "achieved_rps": achieved,
        "p50_s": percentile(lat, 50), "p95_s": percentile(lat, 95), "p99_s": percentile(lat, 99),
        "max_s": max(lat) if lat else None,
        "ttft_p50_s": percentile(ttft, 50), "ttft_p95_s": percentile(ttft, 95), "ttft_p99_s": percentile(ttft, 99),
        "itl_p50_s": percentile(gaps, 50), "itl_p95_s": percentile(gaps, 95), "itl_p99_s": percentile(gaps, 99),
        "prompt_tokens_mean": prompt_mean, "output_tokens_mean": output_mean,
        "errors": len(errors), "error_kinds": kinds, "timeouts": sum(1 for r in records if r.status == "timeout"),
        "slo_latency_s": slo_latency(records, q), "itl_slo_s": itl_q, "within_slo": within, "meets_slo": meets,
        "send_lag_p99_s": lag99, "send_lag_max_s": max(lags, default=0.0), "generator_limited": limited,
    }


def scheduled_rate(target: float, n: int, duration: float) -> float:
    """The rate the schedule asked for: ``target``, or the ``n`` arrivals it drew over ``duration`` when fewer (a
    step's count is ``round(rate x duration)``: 4 of 4.5 in a short step is the schedule, not the generator)."""
    return min(target, n / duration) if duration > 0 and n else target


def rate_of(step: dict) -> float:
    """A step's load on the x axis: its target (open loop) or its achieved rate (closed loop)."""
    return step["target_rps"] if step.get("mode") == "open" and step.get("target_rps") else step["achieved_rps"]


def capacity(steps: Sequence[dict]) -> dict | None:
    """The knee: the highest-rate step that meets the SLO with every lower, trusted step meeting it too.

    Steps the generator could not sustain are not evidence either way and are left out. None when
    the lowest trusted step already misses the SLO (or there is none).
    """
    trusted = sorted((s for s in steps if not s["generator_limited"]), key=rate_of)
    best = None
    for s in trusted:
        if not s["meets_slo"]:
            break
        best = s
    return best


def recommend(capacity_rps: float, margin: float) -> float:
    """qpsPerReplica with a safety margin: ``capacity x (1 - margin)``, margin in [0, 1)."""
    if not 0.0 <= margin < 1.0:
        raise ValueError(f"margin {margin!r}: accepted: a fraction in [0, 1)")
    return capacity_rps * (1.0 - margin)


def next_ramp_rate(steps: Sequence[dict], *, start: float, factor: float, refine: int, max_rate: float) -> float | None:
    """The next rate of ``--ramp``: multiply by ``factor`` while the SLO holds, then bisect (geometric mean)
    between the highest passing and the lowest failing rate ``refine`` times; None when done.

    A step the generator could not sustain ends the ramp (higher rates cannot be offered either).
    """
    if not steps:
        return start
    if any(s["generator_limited"] for s in steps):
        return None
    passing = [rate_of(s) for s in steps if s["meets_slo"]]
    failing = [rate_of(s) for s in steps if not s["meets_slo"]]
    if not failing:
        nxt = max(passing) * factor
        return nxt if nxt <= max_rate * (1 + 1e-9) else None
    low_fail = min(failing)
    below = [r for r in passing if r < low_fail]
    if not below:
        return None
    bisections = sum(1 for s in steps if s.get("refinement"))
    if bisections >= refine:
        return None
    return math.sqrt(max(below) * low_fail)


def step_window(records: Sequence[Record], width: float, end: float) -> list[dict]:
    """Per-window figures over time (the step test's picture): arrivals, p95 latency and failures per window.

    Requests are binned by their scheduled time into windows of ``width`` seconds over [0, end).
    """
    out = []
    k = max(1, math.ceil(end / width - 1e-9))
    for i in range(k):
        lo, hi = i * width, min(end, (i + 1) * width)
        rs = [r for r in records if lo <= r.scheduled < hi]
        lat = [r.latency for r in rs if r.status == "ok" and r.latency is not None]
        out.append({"t_s": lo, "arrivals": len(rs), "rate_rps": len(rs) / (hi - lo) if hi > lo else 0.0,
                    "p95_s": percentile(lat, 95), "errors": sum(1 for r in rs if r.status == "error"),
                    "timeouts": sum(1 for r in rs if r.status == "timeout")})
    return out

"""The closed loop on the server's own state: a correction factor on the planned value, one pure rule (``step``).

The forecast plans replicas from a load and a capacity (``qpsPerReplica``, ``tokensPerReplica``); when the
capacity is wrong, or the forecast short, the model server says so itself: requests wait, the time to first
token (TTFT) and the inter-token latency (ITL) grow. The loop reads those signals and raises the answer; it
never lowers it below the forecast plan (``factor >= 1``), and while every signal is well inside its target
nothing changes.

The rule, per observation of the signals (the server: each refresh; the replay: each HPA sync)::

    pressure p = the largest of  observed / target  over the configured signals known now:
        queue  waiting requests per ready replica / queueTarget
        ttft   the TTFT percentile (s) / ttftTarget
        itl    the ITL percentile (s) / itlTarget

    p > 1, settled, not falling:  factor <- min(max_factor, factor x (1 + step x min(p - 1, 1)))   a raise
    p > 1, not settled:           factor held  (the replicas the last raise asked for are still starting)
    p > 1, falling:               factor held  (below the last observation's pressure: the queue drains)
    inside <= p <= 1:             factor held  (the dead zone: near the target, the learned factor stays)
    p < inside, or no signal:     factor <- 1 + (factor - 1) x 2^(-dt / half_life)    decays back to the plan

and ``scaler.policy.decide`` answers ``compensated(base x headroom x factor)``: with a factor of 1 exactly the
answer without the loop. The constants (``Rule``, one set, ``RULE``): step 0.05, max_factor 2, inside 0.5,
half_life 1 day.

* **Proportional, bounded.** A raise is 5 % times the excess, the excess capped at 1 (a signal at twice its target
  or more raises by 5 %); the factor is at most 2 (the loop at most doubles the plan). A capacity overstated by
  30 % needs a factor of 1.3: six raises of 5 %, one per cold start (the HPA rounds each up to whole replicas,
  and its dead-band compensation may add one more, so fewer in practice).
* **No wind-up.** A raise takes effect only when its replicas are ready, one cold start later; raising again
  meanwhile would overshoot. So the loop raises only when *settled*: the ready replicas
  (``readyReplicasQuery``) are at least the replicas the last answer asked for (``ceil(value / qpsPerReplica)``),
  or ``settle_seconds`` (the caller passes the lead, T_cold + T_buffer) have passed since its last raise (without
  a ready count; and where the HPA never made the replicas asked for: its tolerance swallowed the raise, or
  maxReplicaCount).
* **No overshoot to drain.** A queue over its target that falls is being drained by the capacity there: the loop
  holds. Only a queue (or a latency) that grows or stays over its target raises the factor, so the factor ends
  near what the capacity error needs, not at what draining the backlog fastest would take.
* **Memory: it integrates, and decays slowly.** The factor is the state: a raise stays while the signals are near
  or over target (a capacity error is permanent: the factor that cured it must stay). Once every signal is well
  inside (``p < 0.5``) or none is known, it decays to 1 with a half-life of a day. The queue cannot tell a factor
  that is just right from one too high (both leave it empty), so any decay probes: a factor that decays below the
  need lets the queue build again and is raised back, and each such probe costs up to one replica's capacity for
  one cold start. A one-hour half-life probed every few minutes (on WorldCup98 the closed loop then missed 9x
  what the correctly configured run did); a day keeps what one peak learned to the next, at the cost of keeping a
  transient raise (a forecast that fell short once) for hours (docs/llm.md has the figures). A TTFT or ITL target
  whose healthy value sits in the dead zone (between half the target and the target) holds the factor with
  evidence instead of a clock.
* **Unknown is not zero.** A signal that is missing, NaN, infinite or negative (a histogram without buckets makes
  ``histogram_quantile`` return NaN or nothing) is unknown: it counts neither as over nor as inside its target.
  With no signal known the loop raises nothing (the factor decays as when inside) and says so (``LoopState.why``).
  The queue per replica is unknown without a replica count: the ready one (``readyReplicasQuery``), else the
  replicas the last answer asked for (which are at least the ready ones while pods start: the queue per replica
  reads low, the loop raises less, never more).

Pure: no clock (``now`` and ``dt`` are arguments), no I/O. The server (``scaler.serve.refresher``) and the replay
(``scaler.replay.closedloop``) call ``step``; ``scaler.policy.decide_array`` applies ``factor``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

@dataclass(frozen=True)
class Rule:
    """The rule's constants (``RULE``: the ones the server and the replay use; the defaults are declared here)."""

    step: float = 0.05  # a raise at full excess (a signal at twice its target or more): +5 % of the factor
    max_excess: float = 1.0  # the excess (p - 1) counted at most
    max_factor: float = 2.0  # the loop at most doubles the plan
    inside: float = 0.5  # every known signal under half its target: well inside, the factor decays
    half_life_seconds: float = 86400.0  # the decay's half-life: a day (a capacity error learned at one peak holds to the next)


RULE = Rule()


@dataclass(frozen=True)
class Targets:
    """A trigger's targets (None: that signal is not configured). ``queue``: waiting requests per ready replica;
    ``ttft``, ``itl``: seconds."""

    queue: float | None = None
    ttft: float | None = None
    itl: float | None = None

    @property
    def any(self) -> bool:
        return self.queue is not None or self.ttft is not None or self.itl is not None


@dataclass(frozen=True)
class Signals:
    """One observation of the model server's state (NaN: unknown): waiting requests summed over the replicas,
    ready replicas, the TTFT and ITL percentiles in seconds."""

    waiting: float = math.nan
    ready: float = math.nan
    ttft: float = math.nan
    itl: float = math.nan


@dataclass(frozen=True)
class LoopState:
    """The loop's memory: the factor, when it last rose, the last pressure (NaN: none known) and what it did."""

    factor: float = 1.0
    raised_at: float = -math.inf
    pressure: float = math.nan
    why: str = "no observation yet"


def known(x: float) -> bool:
    """A signal value the loop may use: finite and >= 0 (NaN, infinities and negatives are unknown)."""
    return isinstance(x, (int, float)) and math.isfinite(x) and x >= 0


def ratios(signals: Signals, targets: Targets, asked: float) -> dict[str, float]:
    """Each configured signal known now as observed / target. The queue is per ready replica (``signals.ready``
    when known and >= 1, else ``asked``, the replicas the last answer asked for, when >= 1; else unknown)."""
    out: dict[str, float] = {}
    if targets.queue is not None and known(signals.waiting):
        per = signals.ready if known(signals.ready) and signals.ready >= 1 else asked
        if known(per) and per >= 1:
            out["queue"] = signals.waiting / per / targets.queue
    if targets.ttft is not None and known(signals.ttft):
        out["ttft"] = signals.ttft / targets.ttft
    if targets.itl is not None and known(signals.itl):
        out["itl"] = signals.itl / targets.itl
    return out


def step(state: LoopState, signals: Signals, targets: Targets, *, now: float, dt: float, asked: float,
         settle_seconds: float, rule: Rule = RULE) -> LoopState:
    """The loop's state after one observation (the module docstring's rule).

    ``dt``: seconds since the previous observation (the decay's clock; <= 0 or NaN: no decay); ``asked``: the
    replicas the last answer asked for (``ceil(value / qpsPerReplica)``; NaN: unknown); ``settle_seconds``: how
    long a raise waits for its replicas when the ready count is unknown (the lead).
    """
    f = state.factor if math.isfinite(state.factor) and state.factor >= 1.0 else 1.0
    r = ratios(signals, targets, asked)
    missing = [k for k, t in (("queue", targets.queue), ("ttft", targets.ttft), ("itl", targets.itl))
               if t is not None and k not in r]
    gone = f" ({', '.join(missing)} unknown)" if missing else ""
    if not r:
        return LoopState(_decayed(f, dt, rule), state.raised_at, math.nan,
                         f"no signal known{gone}: nothing raised" + (", the factor decays" if f > 1 else ""))
    worst = max(r, key=lambda k: r[k])
    p = r[worst]
    said = f"{worst} at {p:.2f}x its target{gone}"
    if p > 1.0:
        settled = now - state.raised_at >= settle_seconds  # (a raise the HPA never acted on must not block)
        if known(signals.ready) and known(asked):
            settled = settled or signals.ready >= asked
            wait = f"held: {worst} over target, {signals.ready:g} of the {asked:g} replicas asked for ready"
        else:
            wait = f"held: {worst} over target, the last raise {now - state.raised_at:.0f}s ago is still starting"
        if not settled:
            return LoopState(f, state.raised_at, p, wait + gone)
        if p < state.pressure:  # falling since the last observation: the capacity there drains it, no more needed
            return LoopState(f, state.raised_at, p, f"held: {said}, falling from {state.pressure:.2f}x (draining)")
        up = min(rule.max_factor, f * (1.0 + rule.step * min(p - 1.0, rule.max_excess)))
        if up <= f:
            return LoopState(f, state.raised_at, p, f"held at the bound {rule.max_factor:g}: {said}")
        return LoopState(up, now, p, f"raised {f:.3f} -> {up:.3f}: {said}")
    if p >= rule.inside:
        return LoopState(f, state.raised_at, p, f"held (dead zone): {said}")
    return LoopState(_decayed(f, dt, rule), state.raised_at, p, f"inside: {said}" + (", the factor decays" if f > 1 else ""))


def _decayed(f: float, dt: float, rule: Rule) -> float:
    if f <= 1.0 or not (math.isfinite(dt) and dt > 0):
        return f
    return 1.0 + (f - 1.0) * 0.5 ** (dt / rule.half_life_seconds)

"""The server's drift response, replayed: ``scaler.drift`` (one implementation) run poll by poll over a trace.

At each KEDA poll the predictive policy decides as the server does (``decide_array``, the curve in force);
then, as the server's servicer does after each GetMetrics, the decision is recorded in a
``drift.Scorecard``: what came due is scored against the observed rate, and the quantile at the lead is
provisioned. While the scorecard says the forecast drifted, a forecast-driven decision is replaced by the
safe policy (``drift.safe_planned``) with reason ``fallback_forecast_drift``. The emulated HPA then runs on
those values.

One difference from the server, on the cautious side: the server refits at once on an alarm; the replay's
curves are fitted on the refit schedule (``--refit``), so the fallback lasts until the scheduled curves
cover again (at most a refit interval longer than on the server).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..drift import DEFAULT, DriftConfig
from ..policy import REASONS, PolicyParams
from .forecasts import Curve, Packed
from .hpa import Hpa
from .keda import run_hpa
from .policies import polled_decisions
from .prepare import setup
from .scenario import Outcome, Scenario, Timeline, evaluate
from .selfwatch import DRIFT as _DRIFT, drift_response

@dataclass
class DriftReplay:
    values: np.ndarray  # the value sent to KEDA at each poll
    reasons: dict[str, int]
    alarms: int  # drift alarms
    alarm_times: list[float]
    fallback_polls: int  # polls served by the drift fallback
    timeline: Timeline
    outcome: Outcome


def replay_drift(sc: Scenario, hpa: Hpa, params: PolicyParams, curves: Sequence[Curve] | Packed, *,
                 step: float = 60.0, config: DriftConfig = DEFAULT, respond: bool = True) -> DriftReplay:
    """The predictive policy with the drift response (``respond``; False: scored, never acted on)."""
    times, obs, d = polled_decisions(sc, hpa, params, curves)
    planned, reason, alarm_times = drift_response(times, obs, d, params, step=step, config=config, act=respond)
    codes, counts = np.unique(reason, return_counts=True)
    tl = run_hpa(sc, planned, hpa)
    return DriftReplay(planned, {REASONS[int(c)].value: int(k) for c, k in zip(codes, counts)},
                       len(alarm_times), alarm_times, int((reason == _DRIFT).sum()), tl, evaluate(sc, tl))


def drift_summary(result, config: DriftConfig = DEFAULT) -> dict | None:
    """The predictive family's default with and without the drift response, on a backtest's ``Result``
    (``forescale backtest --drift``); None when the run had no predictive policy or no curves."""
    s = result.settings
    run = result.models.get(s.model)
    if "predictive" not in result.policies or run is None or not run.curves:
        return None
    su = setup(result.trace, s)
    params = PolicyParams(mode="forecastAndScale", lead_seconds=su.lead.seconds, quantile=s.quantile,
                          qps_per_replica=su.qps, headroom=s.headroom, hpa_tolerance=s.hpa_tolerance,
                          level_correction_seconds=s.level_correction_seconds)
    step = result.trace.series.step
    off = replay_drift(su.scenario, su.hpa, params, run.curves, step=step, config=config, respond=False)
    on = replay_drift(su.scenario, su.hpa, params, run.curves, step=step, config=config, respond=True)
    if s.world.active:  # through the same world as the table's rows (sampled T_cold, node pools, the queue)
        from .world import live

        for r in (off, on):
            lv = live(s.world, su.scenario, r.timeline, seed=s.seed)
            r.timeline, r.outcome = lv.timeline, lv.outcome
    days = max((su.end - su.start) / 86400.0, 1e-9)
    polls = max(1, sum(on.reasons.values()))
    return {"missed_fraction_without": off.outcome.underprovisioned_fraction,
            "missed_fraction_with": on.outcome.underprovisioned_fraction,
            "replica_hours_without": off.outcome.replica_hours, "replica_hours_with": on.outcome.replica_hours,
            "alarms": on.alarms, "alarms_per_day": on.alarms / days, "fallback_poll_fraction": on.fallback_polls / polls,
            "first_alarms": [float(t) for t in on.alarm_times[:5]]}


def format_summary(d: dict) -> str:
    """``drift_summary`` as the backtest prints it."""
    ratio = d["replica_hours_with"] / d["replica_hours_without"] if d["replica_hours_without"] > 0 else float("nan")
    return (f"drift response (predictive, as the server runs it; scored live, fallback_forecast_drift):\n"
            f"  missed requests {100 * d['missed_fraction_without']:.3f} % -> {100 * d['missed_fraction_with']:.3f} %, "
            f"replica-hours {d['replica_hours_without']:.1f} -> {d['replica_hours_with']:.1f} ({ratio:.3f}x)\n"
            f"  {d['alarms']} drift alarm(s) ({d['alarms_per_day']:.2f} a day), "
            f"{100 * d['fallback_poll_fraction']:.1f} % of polls served by the fallback")

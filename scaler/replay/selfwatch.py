"""The server's self-watch over a sequence of answers: ``drift_response``, the drift response (``scaler.drift``'s
scorecard and safe policy, the one implementation) applied to decisions as the servicer applies it after each
GetMetrics. Pure; used by the manifest replay (``triggers``) and ``backtest --drift`` (``drift``)."""

from __future__ import annotations

import numpy as np

from ..drift import DEFAULT, DriftConfig, Scorecard, safe_planned
from ..policy import REASONS, PolicyParams, Reason

ACTED = (REASONS.index(Reason.FORECAST), REASONS.index(Reason.OBSERVED_FLOOR))
DRIFT = REASONS.index(Reason.FORECAST_DRIFT)


def drift_response(times: np.ndarray, obs: np.ndarray, d, params: PolicyParams, *, step: float = 60.0,
                   config: DriftConfig = DEFAULT, act: bool = True, skip: np.ndarray | None = None):
    """The server's drift response over decisions made at ``times`` (one per GetMetrics): ``(planned, reason,
    alarm times)``. ``act`` False: scored, never acted on. ``skip``: calls the server never answered (it was
    down): neither scored nor changed."""
    provisioned = d.forecast_peak  # what the policy acted on: the corrected quantile's max over [now, now + L]
    planned, reason = d.planned.copy(), d.reason.copy()
    card = Scorecard(step, config)
    alarm_times: list[float] = []
    for i in range(len(times)):
        if skip is not None and skip[i]:
            continue
        t, y = float(times[i]), float(obs[i])
        if act and card.drifting and reason[i] in ACTED:
            planned[i] = safe_planned(planned[i], y, card.window_max(t), params.headroom)
            reason[i] = DRIFT
        if "alarm" in card.observe(t, y):
            alarm_times.append(t)
        if np.isfinite(provisioned[i]) and reason[i] in ACTED + (DRIFT,):
            card.provision(t + params.lead_seconds, float(provisioned[i]), params.quantile, float(planned[i]))
    return planned, reason, alarm_times

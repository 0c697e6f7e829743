"""Live scoring of provisioned forecasts and the drift response: one pure implementation.

The server (``scaler.serve.watch``) and the replay (``scaler.replay.drift``) both run this module, so
what the backtest shows is what the scaler does.

A ``Scorecard`` is kept per trigger. At each decision its caller ``provision``s the minute at now + lead with
the quantile the policy acted on (``Decision.forecast_peak``: the level-corrected quantile's max over
[now, now + lead], what the capacity ready at now + lead was sized for) and the planned value. When an observation
reaches that minute, ``observe`` scores it: covered (observed <= quantile), the pinball loss, an
under-provisioned minute (observed > planned) and the demand above planned. The sums go into two rolling
windows (1 h in 60 one-minute buckets, 24 h in 96 fifteen-minute buckets).

Drift: a one-sided Bernoulli CUSUM (Page's cumulative sum of the log-likelihood ratio, Reynolds & Stoumbos
1999) on the exceedance indicator ``observed > quantile``: in control, exceedances come at rate
``p0 = 1 - quantile``; the chart tests against ``p1 = p0 + shift`` and alarms when the sum reaches ``h``.
A level shift upwards makes every minute an exceedance: at quantile 0.9 the sum grows by ln(0.6/0.1) = 1.79 a
minute and alarms after 5 minutes (h = 8). The 1 h coverage falling ``coverage_gap`` below nominal (with at
least ``min_scored`` minutes) alarms too. On an alarm the caller refits at once and serves the safe policy
(``safe_planned``: the max of the observed rate over ``hold_minutes``, times headroom, never below the
forecast's own answer) with reason ``fallback_forecast_drift`` until the forecast's own quantile covers again:
at most ``recover_misses`` exceedances in the last ``recover_minutes`` scored minutes.

Memory per trigger is fixed: two float arrays (60 + 96 buckets x 7), the observed-max ring (``hold_minutes``
x 2) and at most ``MAX_PENDING`` provisioned minutes (a lead longer than that many steps is scored on the
minutes that fit).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

MAX_PENDING = 256  # provisioned minutes awaiting their observation, per trigger
WINDOWS = (("1h", 60.0, 60), ("24h", 900.0, 96))  # name, bucket width (s), buckets
# bucket columns
_ID, _N, _COV, _PIN, _UNDER, _EXCESS, _DEMAND = range(7)


@dataclass(frozen=True)
class DriftConfig:
    margin: float = 0.2  # the CUSUM counts an exceedance by more than this share of the quantile (not noise)
    shift: float = 0.5  # the CUSUM's alternative: exceedance rate p0 + shift (capped at 0.95)
    h: float = 8.0  # alarm threshold of the CUSUM (log-likelihood units)
    coverage_gap: float = 0.5  # ... or the 1 h coverage below nominal - gap
    min_scored: int = 30  # minutes scored in the 1 h window before its coverage counts
    coverage_cusum: float = 4.0  # ... and the CUSUM at least this (exceedances beyond the margin, not noise)
    recover_minutes: int = 15  # the fallback ends when the last recover_minutes scored minutes ...
    recover_misses: int = 3  # ... hold at most this many exceedances (and at least recover_minutes passed)
    hold_minutes: int = 30  # the safe policy's window max of the observed rate


DEFAULT = DriftConfig()


@dataclass(frozen=True)
class Scores:
    scored: int
    coverage: float | None
    pinball: float | None
    under_minutes: int
    demand_above_planned: float | None  # share of demand above planned capacity

    def as_dict(self) -> dict:
        return {"scored": self.scored, "coverage": self.coverage, "pinball": self.pinball,
                "under_minutes": self.under_minutes, "demand_above_planned": self.demand_above_planned}


def pinball(y: float, q: float, tau: float) -> float:
    """The quantile (pinball) loss of predicting ``q`` for the ``tau`` quantile when ``y`` came."""
    return tau * (y - q) if y >= q else (1.0 - tau) * (q - y)


class Scorecard:
    """One trigger's provisioned minutes, rolling scores and drift state (not thread-safe: the caller locks)."""

    __slots__ = ("step", "config", "pending", "buckets", "obs", "cusum", "recent", "drifting", "since",
                 "alarms", "quiet_until", "scored_total", "covered_total", "under_total", "tau")

    def __init__(self, step: float = 60.0, config: DriftConfig = DEFAULT):
        self.step = step
        self.config = config
        self.pending: dict[int, tuple[float, float, float]] = {}  # minute -> (quantile value, tau, planned)
        self.buckets = tuple(np.full((n, 7), -1.0) for _, _, n in WINDOWS)
        self.obs = np.full((config.hold_minutes, 2), -1.0)  # (minute, max observed in it)
        self.cusum = 0.0
        self.recent: deque[bool] = deque(maxlen=config.recover_minutes)  # exceedances, newest last
        self.drifting = False
        self.since: float | None = None  # when the current fallback began
        self.alarms = 0
        self.quiet_until = -math.inf  # after a recovery the 1 h coverage (still holding the drift) waits an hour
        self.scored_total = 0
        self.covered_total = 0
        self.under_total = 0
        self.tau = 0.9

    # -- recording -------------------------------------------------------------
    def provision(self, when: float, quantile_value: float, tau: float, planned: float) -> None:
        """The minute containing ``when`` (now + lead) was provisioned ``planned`` on the ``tau`` quantile
        ``quantile_value``; the latest decision for a minute stands. Refused when MAX_PENDING are waiting."""
        if not (math.isfinite(when) and math.isfinite(quantile_value) and math.isfinite(planned)):
            return
        m = int(when // self.step)
        if m in self.pending or len(self.pending) < MAX_PENDING:
            self.pending[m] = (quantile_value, tau, planned)

    def observe(self, at: float, observed: float) -> list[str]:
        """An observation at ``at``: scores every provisioned minute up to it. Returns the events:
        ``alarm`` (drift detected: refit now and serve the safe policy) and ``recovered``."""
        if not (math.isfinite(at) and math.isfinite(observed)):
            return []
        now_m = int(at // self.step)
        self._hold(now_m, observed)
        events: list[str] = []
        for m in sorted(k for k in self.pending if k <= now_m):
            q, tau, planned = self.pending.pop(m)
            events += self._score(m, observed, q, tau, planned)
        return events

    def _hold(self, m: int, y: float) -> None:
        row = self.obs[m % len(self.obs)]
        if row[0] != m:
            row[0], row[1] = m, y
        elif y > row[1]:
            row[1] = y

    def window_max(self, at: float) -> float | None:
        """The max observed rate over the last ``hold_minutes``, None when none."""
        m = int(at // self.step)
        ok = self.obs[:, 0] > m - len(self.obs)
        return float(self.obs[ok, 1].max()) if ok.any() else None

    def _score(self, m: int, y: float, q: float, tau: float, planned: float) -> list[str]:
        exceeded = y > q
        values = (1.0, 0.0 if exceeded else 1.0, pinball(y, q, tau), 1.0 if y > planned else 0.0,
                  max(0.0, y - planned), y)
        t = m * self.step
        for (_, width, n), b in zip(WINDOWS, self.buckets):
            bid = int(t // width)
            row = b[bid % n]
            if row[_ID] != bid:
                row[:] = 0.0
                row[_ID] = bid
            row[_N:] += values
        self.tau = tau
        self.scored_total += 1
        self.covered_total += not exceeded
        self.under_total += y > planned
        return self._drift(y > q * (1.0 + self.config.margin), tau, t)

    def _drift(self, exceeded: bool, tau: float, t: float) -> list[str]:
        c = self.config
        p0 = min(max(1.0 - tau, 1e-3), 0.999)
        p1 = min(p0 + c.shift, 0.95)
        if p1 <= p0:
            return []
        self.cusum = max(0.0, self.cusum + (math.log(p1 / p0) if exceeded else math.log((1 - p1) / (1 - p0))))
        self.recent.append(exceeded)
        if not self.drifting:
            s = self.scores(0, t)
            low = (t >= self.quiet_until and self.cusum >= c.coverage_cusum and s.scored >= c.min_scored
                   and s.coverage is not None and s.coverage < tau - c.coverage_gap)
            if self.cusum >= c.h or low:
                self.drifting, self.since, self.cusum = True, t, 0.0
                self.alarms += 1
                self.recent.clear()
                return ["alarm"]
            return []
        if len(self.recent) == self.recent.maxlen and sum(self.recent) <= c.recover_misses:
            self.drifting, self.since, self.cusum = False, None, 0.0
            self.quiet_until = t + WINDOWS[0][1] * WINDOWS[0][2]
            return ["recovered"]
        return []

    # -- reading ---------------------------------------------------------------
    def scores(self, window: int, at: float) -> Scores:
        """The scores of window ``window`` (an index into WINDOWS) ending at ``at``."""
        _, width, n = WINDOWS[window]
        b = self.buckets[window]
        live = b[b[:, _ID] > int(at // width) - n]
        s = live.sum(axis=0) if len(live) else np.zeros(7)
        k = int(s[_N])
        return Scores(k, float(s[_COV] / k) if k else None, float(s[_PIN] / k) if k else None, int(s[_UNDER]),
                      float(s[_EXCESS] / s[_DEMAND]) if s[_DEMAND] > 0 else None)


def safe_planned(planned: float, observed: float, window_max: float | None, headroom: float) -> float:
    """The drift fallback's value: the max observed rate over the hold window times headroom, never below the
    policy's own answer (so never below the observed rate either)."""
    hold = max(observed, window_max if window_max is not None else observed) * headroom
    return max(planned, hold, observed)

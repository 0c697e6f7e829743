"""The decision: one pure function, used by the server and by the replay engine.

    planned(t) = max( observed(t), max over tau in [t, t+L] of forecast_q(tau) )

then ``headroom`` and the HPA tolerance compensation are applied, so that the
value KEDA passes to the HPA produces the replica count we meant rather than
disappearing inside the HPA's +-10 % dead band.

No clock, no I/O: ``now`` and every input are arguments.

The decision is written once, on arrays (``decide_array``: many polls at
once, as the replay asks); ``decide`` (one poll, as the server asks) is a
view of it on arrays of length 1. KEDA's milli-quantities and the HPA's
dead band are ``scaler.deadband``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Mapping

import numpy as np

from forecaster.base import Forecast, blend, window_max_rows
from forecaster.level import corrector, residual_rows

from .deadband import KUBERNETES_TOLERANCE, clear_dead_band_array
from .feedback import Targets


class Reason(str, Enum):
    """Why the planned value is what it is (a metric label: keep the set small)."""

    FORECAST = "forecast"  # the forecast peak in [now, now+L] is above observed
    OBSERVED_FLOOR = "observed_floor"  # observed is at or above the forecast peak
    MODE_REACTIVE = "mode_reactive"  # mode=reactive
    MODE_FORECAST_ONLY = "mode_forecast_only"  # shadow mode: forecast exported, not acted on
    INSUFFICIENT_HISTORY = "fallback_insufficient_history"
    FIT_FAILED = "fallback_fit_failed"
    FORECAST_STALE = "fallback_forecast_stale"  # the curve does not cover [now, now+L]
    FORECAST_ABSURD = "fallback_forecast_absurd"  # NaN, negative or far outside history
    NO_FORECAST_YET = "fallback_no_forecast_yet"  # first fit still running
    PROMETHEUS_STALE = "fallback_prometheus_stale"  # last good observation reused
    EVENT = "event"  # a user event (eventsFile) set the value: its multiplier or floor; its name in Decision.event
    FORECAST_DRIFT = "fallback_forecast_drift"  # live scores show the forecast drifted (scaler.drift)
    MISSING_DATA = "fallback_missing_data"  # the observation is unknown (no series, NaN): held, on the forecast
    BUDGET_CAPPED = "budget_capped"  # a fleet GPU budget granted fewer replicas than the plan asked (scaler.budget)
    FEEDBACK = "feedback"  # the closed loop (scaler.feedback) raised the answer: a queue or latency over its target



@dataclass(frozen=True)
class PolicyParams:
    """The knobs of the decision (from ``ScalerSpec``; the replay engine builds them directly)."""

    mode: str  # forecastAndScale | forecastOnly | reactive
    lead_seconds: float
    quantile: float
    qps_per_replica: float
    headroom: float = 1.0
    hpa_tolerance: float = KUBERNETES_TOLERANCE.up  # 0 = no dead-band compensation
    level_correction_seconds: float = 0.0  # residual half-life; 0 = off
    absurd_factor: float = 10.0  # a forecast above absurd_factor x history max is not trusted
    floor_qps: float = 0.0  # a warm floor (req/s) added to the observed rate and to the forecast before the max
    events: tuple = ()  # forecaster.eventsfile.Event: in force at polls in [start - lead, end] (decide_array)
    loop: Targets | None = None  # the closed loop's targets (scaler.feedback): its factor is decide's ``feedback``


@dataclass(frozen=True)
class Decision:
    planned: float  # the value sent to KEDA (requests/s)
    reason: Reason
    observed: float
    forecast_peak: float | None  # max of the (corrected) quantile over [now, now+L]
    base: float  # max(observed, forecast_peak) before headroom and tolerance
    # max of the (corrected) mean over [now, now+L] when forecast_peak is set; only with decide(with_mean=True)
    forecast_mean_peak: float | None = None
    event: str | None = None  # the name of the user event in force at this poll, if any
    feedback: float = 1.0  # the closed loop's factor applied (scaler.feedback; 1: none)


REASONS: tuple[Reason, ...] = tuple(Reason)  # a reason's code in ``Decisions.reason`` is its index here
_CODE = {r: i for i, r in enumerate(REASONS)}
NO_REASON = -1  # ``unusable`` code: the forecast may be used


@dataclass(frozen=True)
class Curves:
    """Forecast curves of one length stacked as rows (``Forecast`` fields, each (m, h))."""

    t: np.ndarray
    mean: np.ndarray
    quantiles: Mapping[float, np.ndarray]

    @staticmethod
    def of(forecast: Forecast) -> "Curves":
        return Curves(forecast.t[None, :], forecast.mean[None, :],
                      {q: v[None, :] for q, v in forecast.quantiles.items()})

    def rows(self, k: np.ndarray, shift: float = 0.0) -> "Curves":
        """Rows ``k`` (one per poll), every band raised by ``shift`` (a warm floor)."""
        up = (lambda a: a[k] + shift) if shift > 0 else (lambda a: a[k])
        return Curves(self.t[k], up(self.mean), {q: up(v) for q, v in self.quantiles.items()})


@dataclass(frozen=True)
class Decisions:
    """``decide_array``'s answer: one entry per poll (NaN peaks = none; reasons as codes into ``REASONS``)."""

    planned: np.ndarray
    reason: np.ndarray
    observed: np.ndarray
    forecast_peak: np.ndarray
    base: np.ndarray
    forecast_mean_peak: np.ndarray
    event: np.ndarray | None = None  # (n,) index into PolicyParams.events in force, -1 = none
    event_names: tuple[str, ...] = ()
    feedback: np.ndarray | None = None  # (n,) the closed loop's factor applied (None: no loop)

    def at(self, i: int) -> Decision:
        def opt(x: float) -> float | None:
            return None if np.isnan(x) else float(x)

        return Decision(planned=float(self.planned[i]), reason=REASONS[int(self.reason[i])],
                        observed=float(self.observed[i]), forecast_peak=opt(self.forecast_peak[i]),
                        base=float(self.base[i]), forecast_mean_peak=opt(self.forecast_mean_peak[i]),
                        event=None if self.event is None or self.event[i] < 0 else self.event_names[self.event[i]],
                        feedback=1.0 if self.feedback is None else float(self.feedback[i]))

    def reason_counts(self) -> dict[str, int]:
        codes, counts = np.unique(self.reason, return_counts=True)
        return {REASONS[int(c)].value: int(k) for c, k in zip(codes, counts)}


CHUNK = 4096  # polls per block of the window computation (bounds the (polls x curve length) temporaries)


def decide_array(observed: np.ndarray, now: np.ndarray, params: PolicyParams, curves: Curves | None,
                 row: np.ndarray | None = None, *, unusable: np.ndarray | None = None,
                 history_max: np.ndarray | None = None, with_mean: bool = False,
                 missing: np.ndarray | None = None, feedback: np.ndarray | None = None) -> Decisions:
    """The planned request rate at each of n polls.

    ``observed`` (n,): the rate at each poll; ``now`` (n,) its time.
    ``curves``: the forecasts, stacked; ``row`` (n,): the row of ``curves``
    in force at each poll, -1 = none yet. ``unusable`` (n,): a code into
    ``REASONS`` where the caller already knows the forecast must not be used
    (``NO_REASON`` = usable). ``history_max`` (n,): the max of the fitted
    history behind each poll's curve, for the absurdity check (NaN = none).
    ``params.floor_qps``: a warm floor added to the observed rate and to the
    curve (before level correction, which the shift leaves unchanged, and
    the absurdity check, whose history max rises by it too), so that
    ``base = floor + max(observed, forecast peak)``.
    ``with_mean``: also give the max of the mean over the window
    (``forecast_mean_peak``, for the server's metrics).
    ``missing`` (n,) bool: the observation at that poll is unknown (the query
    returned no series, or NaN) and ``observed`` holds the last known one
    (NaN: none, 0). There the level correction is not applied (it never learns
    from a missing point: the plain quantile's window max), the base is what
    the poll's mode and forecast give on the held observation (so in
    forecastAndScale never below the forecast peak), events apply as usual, and
    the reason is ``fallback_missing_data`` whatever else holds.
    ``feedback`` (n,): the closed loop's factor at each poll (``scaler.feedback``; NaN or below 1 counts as 1):
    the answer is the compensated ``base x headroom x factor``, never below the answer without it (the
    compensation is monotone); where it is higher the reason becomes ``feedback``, unless the reason says the
    forecast or the observation was not usable (a ``fallback_*``) or the mode is shadow.
    """
    obs = np.asarray(observed, dtype=np.float64)
    now = np.asarray(now, dtype=np.float64)
    n = len(obs)
    miss = np.zeros(n, dtype=bool) if missing is None else np.asarray(missing, dtype=bool)
    obs = np.where(np.isfinite(obs) & (obs > 0), obs, 0.0)
    floor = params.floor_qps if params.floor_qps > 0 else 0.0
    if floor:
        obs = obs + floor
    peak = np.full(n, np.nan)
    mean_peak = np.full(n, np.nan)
    if params.mode == "reactive":
        reason = np.full(n, _CODE[Reason.MODE_REACTIVE], dtype=np.int64)
    else:
        rows = np.full(n, -1, dtype=np.int64) if curves is None or row is None else np.asarray(row, dtype=np.int64)
        bad = np.full(n, NO_REASON, dtype=np.int64) if unusable is None else np.asarray(unusable, dtype=np.int64)
        reason = np.where(bad != NO_REASON, bad, np.where(rows >= 0, _CODE[Reason.FORECAST_STALE],
                                                          _CODE[Reason.NO_FORECAST_YET]))
        use = np.flatnonzero((bad == NO_REASON) & (rows >= 0))
        hmax = np.full(n, np.nan) if history_max is None else np.asarray(history_max, dtype=np.float64) + floor
        for a in range(0, len(use), CHUNK):
            k = use[a:a + CHUNK]
            pk, ok, mk = _window(curves, rows[k], obs[k], now[k], params, floor, with_mean,  # type: ignore[arg-type]
                                 miss[k])
            q, h = params.qps_per_replica, hmax[k]
            # max(history_max, qps) as Python's max: NaN (no history max) gives NaN, and the comparison False
            absurd = ok & (~np.isfinite(pk) | (pk < 0) | (pk > params.absurd_factor * np.where(q > h, q, h)))
            good = ok & ~absurd
            if params.mode == "forecastOnly":
                code = np.full(len(k), _CODE[Reason.MODE_FORECAST_ONLY])
            else:
                code = np.where(pk > obs[k], _CODE[Reason.FORECAST], _CODE[Reason.OBSERVED_FLOOR])
            bad_code = np.where(absurd, _CODE[Reason.FORECAST_ABSURD], _CODE[Reason.FORECAST_STALE])
            reason[k] = np.where(good, code, bad_code)
            peak[k] = np.where(good, pk, np.nan)
            if with_mean:
                mean_peak[k] = np.where(good, mk, np.nan)
    base = np.where(reason == _CODE[Reason.FORECAST], peak, obs)
    which = None
    if params.events:
        base, reason, which = _events(base, reason, peak, obs, now, params)
    if miss.any():
        reason = np.where(miss, _CODE[Reason.MISSING_DATA], reason)
    planned = clear_dead_band_array(base * params.headroom, params.qps_per_replica, params.hpa_tolerance)
    loop = None
    if feedback is not None:
        loop = np.asarray(feedback, dtype=np.float64)
        loop = np.where(loop >= 1.0, loop, 1.0)  # NaN compares False: 1
        if (loop > 1.0).any():
            raised = clear_dead_band_array(base * params.headroom * loop, params.qps_per_replica,
                                           params.hpa_tolerance)
            up = (raised > planned) & np.isin(reason, _LOOP_REPLACES)
            reason = np.where(up, _CODE[Reason.FEEDBACK], reason)
            planned = np.maximum(raised, planned)
    return Decisions(planned, reason, obs, peak, base, mean_peak, which, tuple(e.name for e in params.events), loop)


# the reasons the closed loop's own replaces where it raised the answer (the fallbacks and shadow mode say more)
_LOOP_REPLACES = np.array([_CODE[r] for r in (Reason.FORECAST, Reason.OBSERVED_FLOOR, Reason.MODE_REACTIVE,
                                               Reason.EVENT)], dtype=np.int64)


def _events(base: np.ndarray, reason: np.ndarray, peak: np.ndarray, obs: np.ndarray, now: np.ndarray,
            params: PolicyParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """User events at polls in ``[start - lead, end]``, so that capacity is ready at ``start``: a multiplier scales
    the forecast peak where the forecast is acted on (reasons forecast / observed_floor), then a floor (req/s) raises
    the base in every mode. Where an event sets the base the reason is ``event``; ``which`` is the event in force."""
    base, reason = base.copy(), reason.copy()
    which = np.full(len(base), -1, dtype=np.int64)
    acted = (reason == _CODE[Reason.FORECAST]) | (reason == _CODE[Reason.OBSERVED_FLOOR])
    for i, e in enumerate(params.events):
        on = (now >= e.start - params.lead_seconds) & (now <= e.end)
        if not on.any():
            continue
        which[on] = i
        if e.multiplier is not None:
            m = on & acted
            scaled = peak[m] * e.multiplier
            up = scaled > obs[m]
            base[m] = np.where(up, scaled, obs[m])
            reason[m] = np.where(up, _CODE[Reason.EVENT], _CODE[Reason.OBSERVED_FLOOR])
        if e.floor_qps is not None:
            f = on & (e.floor_qps > base)
            base[f] = e.floor_qps
            reason[f] = _CODE[Reason.EVENT]
    return base, reason, which


def _window(curves: Curves, rows: np.ndarray, obs: np.ndarray, now: np.ndarray, params: PolicyParams,
            floor: float, with_mean: bool, missing: np.ndarray,
            end: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (level-corrected) quantile's window max over [now, now + L] on each poll's curve (and the mean's);
    polls whose observation is ``missing`` get no correction (a residual of 0 leaves a row as it is). ``end``:
    each window's end instead of now + L."""
    c = curves.rows(rows, floor)
    fix = None
    if params.level_correction_seconds > 0:
        r = np.where(missing, 0.0, residual_rows(c.t, c.mean, now, obs))
        fix = corrector(c.t, r, now, params.level_correction_seconds)
    end = now + params.lead_seconds if end is None else end
    pk, ok = window_max_rows(c.t, blend(c.quantiles, c.mean, params.quantile, fix), now, end)
    mk = window_max_rows(c.t, blend(c.quantiles, c.mean, None, fix), now, end)[0] if with_mean else pk
    return pk, ok, mk


def window_peaks(observed: float, forecast: Forecast, params: PolicyParams, now: float,
                 leads: np.ndarray) -> np.ndarray:
    """The provisioned quantile's window max over ``[now, now + lead]`` for each of ``leads`` (seconds), as
    ``decide`` computes it for its own lead (level correction, warm floor): ``forecast_peak`` at other leads
    (NaN where the curve does not reach the end). ``scaler.leaderror`` measures the lead's forecast error by it."""
    leads = np.asarray(leads, dtype=np.float64)
    k = len(leads)
    obs = np.full(k, observed if math.isfinite(observed) and observed > 0 else 0.0)
    floor = params.floor_qps if params.floor_qps > 0 else 0.0
    t = np.full(k, float(now))
    pk, ok, _ = _window(Curves.of(forecast), np.zeros(k, dtype=np.int64), obs + floor, t, params, floor, False,
                        np.zeros(k, dtype=bool), t + leads)
    return np.where(ok, pk, np.nan)


def decide(observed: float, forecast: Forecast | None, params: PolicyParams, now: float, *,
           unusable: Reason | None = None, history_max: float | None = None, with_mean: bool = False,
           missing: bool = False, feedback: float | None = None) -> Decision:
    """The planned request rate for ``now``: ``decide_array`` on one poll.

    ``observed``: the current rate (NaN, Inf and negative count as 0); with ``missing``, the current rate is
    unknown and ``observed`` is the last one known (``decide_array``: no level correction, reason
    ``fallback_missing_data``).
    ``forecast``: the precomputed curve, or None; ``unusable`` says why when
    the caller already knows the forecast must not be used.
    ``history_max``: the max of the fitted history, for the absurdity check.
    ``with_mean``: also give the max of the mean over the window (``forecast_mean_peak``, for the
    server's metrics; the replay, which decides millions of times, does not ask for it).
    ``feedback``: the closed loop's factor (``scaler.feedback``; None: no loop).
    """
    one = np.zeros(1, dtype=np.int64)
    has = forecast is not None
    d = decide_array(np.array([observed], dtype=np.float64), np.array([now], dtype=np.float64), params,
                     Curves.of(forecast) if has else None, one if has else one - 1,  # type: ignore[arg-type]
                     unusable=np.array([NO_REASON if unusable is None else _CODE[unusable]]),
                     history_max=np.array([np.nan if history_max is None else history_max], dtype=np.float64),
                     with_mean=with_mean, missing=np.array([missing]),
                     feedback=None if feedback is None else np.array([feedback], dtype=np.float64))
    return d.at(0)

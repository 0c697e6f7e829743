"""The decision: one pure function, used by the server and by the replay engine.

    planned(t) = max( observed(t), max over tau in [t, t+L] of forecast_q(tau) )

then ``headroom`` and the HPA tolerance compensation are applied, so that the
value KEDA passes to the HPA produces the replica count we meant rather than
disappearing inside the HPA's +-10 % dead band.

No clock, no I/O: ``now`` and every input are arguments.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from enum import Enum

from forecaster.base import Forecast
from forecaster.level import level_correct


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


@dataclass(frozen=True, slots=True)
class Tolerance:
    """The HPA's dead band around a usage ratio of 1 (Kubernetes' ``tolerances.isWithin``).

    The HPA leaves the replica count alone while ``1 - down <= ratio <= 1 + up``
    (both edges inside). ``up`` is ``behavior.scaleUp.tolerance`` and ``down``
    ``behavior.scaleDown.tolerance`` (Kubernetes >= 1.33); both default to the
    controller's ``--horizontal-pod-autoscaler-tolerance``.
    """

    up: float
    down: float

    @property
    def high(self) -> float:
        """The upper edge: the largest ratio still inside the band."""
        return 1.0 + self.up

    @property
    def low(self) -> float:
        """The lower edge: the smallest ratio still inside the band."""
        return 1.0 - self.down

    def is_within(self, ratio: float) -> bool:
        return 1.0 - self.down <= ratio <= 1.0 + self.up


KUBERNETES_TOLERANCE = Tolerance(up=0.1, down=0.1)  # --horizontal-pod-autoscaler-tolerance default


@functools.lru_cache(maxsize=64)
def _scale_up_band(tolerance: float) -> Tolerance:
    """Kubernetes' band with ``behavior.scaleUp.tolerance`` = ``tolerance`` (cached: ``decide`` runs per poll)."""
    return Tolerance(up=tolerance, down=KUBERNETES_TOLERANCE.down)


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


@dataclass(frozen=True)
class Decision:
    planned: float  # the value sent to KEDA (requests/s)
    reason: Reason
    observed: float
    forecast_peak: float | None  # max of the (corrected) quantile over [now, now+L]
    base: float  # max(observed, forecast_peak) before headroom and tolerance
    # max of the (corrected) mean over [now, now+L] when forecast_peak is set; only with decide(with_mean=True)
    forecast_mean_peak: float | None = None


def to_milli(value: float) -> int:
    """The value as KEDA hands it to the HPA: a milli-quantity of ``"%.3f"`` (NaN/Inf/negative -> 0)."""
    if not math.isfinite(value) or value <= 0:
        return 0
    return int(round(float(f"{value:.3f}") * 1000))


def clear_dead_band(value: float, qps_per_replica: float, tolerance: float) -> float:
    """Push ``value`` past the HPA's tolerance band below the replica count it asks for.

    The HPA (AverageValue) wants ceil(value/target) replicas but does nothing
    while ``1 - tol <= value / (target * current) <= 1 + tol`` (Kubernetes >=
    1.33; KEDA passes value and target as milli-quantities). A value that
    needs r replicas while r-1 run is inside the band whenever value <=
    (1+tol)(r-1) target; the return value is the smallest milli-quantity
    outside it. At r-1 >= 10 (tolerance 0.1) that value itself rounds to more
    than r replicas: a +1 step cannot exist, the HPA jumps by two, which is the
    price of not missing.
    """
    if tolerance <= 0 or value <= 0:
        return value
    band = _scale_up_band(tolerance)
    v_m, t_m = to_milli(value), to_milli(qps_per_replica)
    r = math.ceil(v_m / t_m)
    if r <= 1 or not band.is_within(v_m / (t_m * (r - 1))):  # that ratio is > 1: only the upper edge matters
        return value  # already outside the band, in the HPA's own arithmetic
    edge_m = band.high * t_m * (r - 1)
    return max(value, (math.floor(edge_m + 1e-6) + 1) / 1000.0)


def shifted(forecast: Forecast, qps: float) -> Forecast:
    """The curve (mean and every band) raised by ``qps``: a warm floor under the forecast."""
    return Forecast(forecast.t, forecast.mean + qps, {q: v + qps for q, v in forecast.quantiles.items()},
                    forecast.model)


def decide(observed: float, forecast: Forecast | None, params: PolicyParams, now: float, *,
           unusable: Reason | None = None, history_max: float | None = None, with_mean: bool = False) -> Decision:
    """The planned request rate for ``now``.

    ``observed``: the current rate (already floored at 0 by the caller).
    ``forecast``: the precomputed curve, or None; ``unusable`` says why when
    the caller already knows the forecast must not be used.
    ``history_max``: the max of the fitted history, for the absurdity check.
    ``params.floor_qps``: a warm floor added to the observed rate and to the
    curve (before level correction, which the shift leaves unchanged, and
    the absurdity check, whose history max rises by it too), so that
    ``base = floor + max(observed, forecast peak)``.
    ``with_mean``: also give the max of the mean over the window (``forecast_mean_peak``, for the
    server's metrics; the replay, which decides millions of times, does not ask for it).
    """
    observed = max(0.0, observed) if math.isfinite(observed) else 0.0
    if params.floor_qps > 0:
        observed += params.floor_qps
        if forecast is not None:
            forecast = shifted(forecast, params.floor_qps)
        if history_max is not None:
            history_max += params.floor_qps
    peak: float | None = None
    mean_peak: float | None = None
    reason: Reason
    if params.mode == "reactive":
        reason = Reason.MODE_REACTIVE
    elif unusable is not None:
        reason = unusable
    elif forecast is None:
        reason = Reason.NO_FORECAST_YET
    else:
        curve = forecast
        if params.level_correction_seconds > 0:
            curve = level_correct(forecast, now, observed, params.level_correction_seconds)
        peak = curve.window_max(now, now + params.lead_seconds, params.quantile)
        if peak is None:
            reason = Reason.FORECAST_STALE
        elif not math.isfinite(peak) or peak < 0 or (
                history_max is not None and peak > params.absurd_factor * max(history_max, params.qps_per_replica)):
            reason, peak = Reason.FORECAST_ABSURD, None
        elif params.mode == "forecastOnly":
            reason = Reason.MODE_FORECAST_ONLY
        elif peak > observed:
            reason = Reason.FORECAST
        else:
            reason = Reason.OBSERVED_FLOOR
        if with_mean and peak is not None:
            mean_peak = curve.window_max(now, now + params.lead_seconds, None)
    base = peak if reason is Reason.FORECAST else observed
    planned = clear_dead_band(base * params.headroom, params.qps_per_replica, params.hpa_tolerance)
    return Decision(planned=planned, reason=reason, observed=observed, forecast_peak=peak, base=base,
                    forecast_mean_peak=mean_peak)

"""KEDA + HPA, emulated on the scenario's ticks: the settings and the ticks of polls and syncs. Pure and
deterministic.

The backtest replays a request trace through this emulation and compares
scaling policies on SLO misses and GPU cost. Nothing here reads a clock, a
file or the environment; every input is an argument. The sequential loop that
composes the rules tick by tick is ``hpaloop.run_loop``; KEDA's layer over it
(several triggers, activation, fallback, scalingModifiers, idle replicas) is
``keda``, with ``keda.run_hpa`` the one-metric case every policy family uses.

Time model (tick ``i`` covers ``[t0 + i*tick, t0 + (i+1)*tick)``):

* ``demand[i]``: the request rate arriving during tick ``i`` (the trace is
  piecewise constant within one of its intervals).
* ``observed[i]``: what Prometheus' ``rate(...[2m])`` shows at the start of
  tick ``i``: the mean demand over the preceding ``rate_window`` seconds.
* The HPA syncs every ``sync_seconds`` (every tick at 15 s) and changes the
  replica count at once (the pods exist from that tick on). At each sync it asks
  KEDA's metrics adapter for the value, and KEDA asks the scaler then and there
  (``useCachedMetrics: false``, KEDA's default: ``GetScaledObjectMetrics`` calls
  GetMetrics live on every HPA request). With ``useCachedMetrics: true``
  (``Hpa.cached_metrics``) the HPA reads the value KEDA's loop cached at its last
  poll instead, held until the next one. ``value_ticks`` are the ticks of
  those calls; ``values[k]`` is the value returned at the k-th.
* KEDA's own loop runs every ``polling_seconds`` (ticks 0, 2, 4, ... at 30 s),
  after the HPA's sync of the same tick: IsActive there is ``value > activation_threshold``
  of the latest value asked (activation 0 <-> 1, scale to zero, fallback scaling).
  Both were checked against the real KEDA v2.21 and HPA (Kubernetes 1.35) by the
  drill (``forescale drill``, docs/drill.md).
* A pod created at tick ``c`` is ready from tick ``c + ceil(T_cold / tick)``.
* Capacity during tick ``i`` = ready pods x ``qps_per_replica``.

The HPA's rules, one pure function each (numba-compiled), are ``hparules``.

The oracle is not an HPA: it knows the demand and starts every pod exactly
T_cold before it is needed (the lower bound on cost at zero misses).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import scaledobject as so
from ..deadband import KUBERNETES_TOLERANCE, Tolerance
from .scenario import EPS, TICK_SECONDS


# --------------------------------------------------------------------------- settings

PODS, PERCENT = 0, 1  # HPAScalingPolicy type
SELECT = {"Max": 0, "Min": 1, "Disabled": 2}  # HPAScalingRules selectPolicy
SELECT_MAX, SELECT_MIN, SELECT_DISABLED = 0, 1, 2


@dataclass(frozen=True)
class ScalingPolicy:
    """One ``HPAScalingPolicy``: ``kind`` Pods or Percent, its value, its period."""

    kind: str
    value: float
    period_seconds: float

    def __post_init__(self) -> None:
        if self.kind not in ("Pods", "Percent"):
            raise ValueError(f"scaling policy type {self.kind!r}: accepted are Pods, Percent")
        if not self.value > 0 or not self.period_seconds > 0:
            raise ValueError(f"scaling policy {self.kind} {self.value:g}/{self.period_seconds:g}s: value and "
                             f"periodSeconds must be > 0")


@dataclass(frozen=True)
class ScalingRules:
    """One direction of ``behavior`` (``HPAScalingRules``), all defaults filled in."""

    window_seconds: float
    select: str = so.SELECT_DEFAULT
    policies: tuple[ScalingPolicy, ...] = ()
    tolerance: float = KUBERNETES_TOLERANCE.up

    def __post_init__(self) -> None:
        if self.select not in SELECT:
            raise ValueError(f"selectPolicy {self.select!r}: accepted are {', '.join(SELECT)}")
        if self.window_seconds < 0:
            raise ValueError(f"stabilizationWindowSeconds {self.window_seconds:g}: accepted is >= 0")
        if not self.policies and self.select != "Disabled":
            raise ValueError("a scaling direction needs at least one policy (or selectPolicy: Disabled)")


@dataclass(frozen=True)
class Hpa:
    """KEDA ScaledObject + HPA settings that matter for the emulation (defaults = Kubernetes/KEDA defaults).

    ``scale_up``/``scale_down`` (``ScalingRules``), when given, replace the
    flat ``scale_up_*``/``scale_down_*`` fields (which describe the defaults'
    shape: up Pods + Percent over one period, down one Percent policy).
    """

    target: float  # qps per replica: the AverageValue target
    min_replicas: int = so.MIN_REPLICAS  # KEDA minReplicaCount
    max_replicas: int = so.MAX_REPLICAS  # KEDA maxReplicaCount
    tolerance_up: float = KUBERNETES_TOLERANCE.up  # behavior.scaleUp.tolerance (Kubernetes >= 1.33)
    tolerance_down: float = KUBERNETES_TOLERANCE.down  # behavior.scaleDown.tolerance
    scale_up_pods: int = so.UP_PODS  # scaleUp policy Pods/periodSeconds
    scale_up_percent: float = float(so.UP_PERCENT)  # scaleUp policy Percent/periodSeconds
    scale_up_period_seconds: float = float(so.UP_PERIOD_SECONDS)
    scale_up_window_seconds: float = float(so.UP_WINDOW_SECONDS)  # scaleUp stabilizationWindowSeconds
    scale_down_window_seconds: float = float(so.DOWN_WINDOW_SECONDS)  # scaleDown stabilizationWindowSeconds
    scale_down_percent: float = float(so.DOWN_PERCENT)  # scaleDown policy Percent/periodSeconds
    scale_down_period_seconds: float = float(so.DOWN_PERIOD_SECONDS)
    sync_seconds: float = float(so.SYNC_SECONDS)  # --horizontal-pod-autoscaler-sync-period
    polling_seconds: float = float(so.POLLING_SECONDS)  # KEDA pollingInterval
    activation_threshold: float = 0.0  # IsActive = value > activation_threshold (activationThreshold's default)
    cooldown_seconds: float = float(so.COOLDOWN_SECONDS)  # KEDA cooldownPeriod (scale to zero)
    milli: bool = True  # KEDA's milli-quantity rounding of value and target
    idle_replicas: int | None = None  # KEDA idleReplicaCount (KEDA supports 0 only)
    initial_cooldown_seconds: float = 0.0  # KEDA initialCooldownPeriod: no scale to zero before it
    scale_up: ScalingRules | None = field(default=None)  # behavior.scaleUp in full
    scale_down: ScalingRules | None = field(default=None)  # behavior.scaleDown in full
    legacy: bool = False  # no behavior at all: the controller's legacy path (legacy_stabilize, legacy_limit)
    cached_metrics: bool = False  # useCachedMetrics: the HPA reads what KEDA's last poll cached, not a fresh value

    def __post_init__(self) -> None:
        if not self.target > 0:
            raise ValueError(f"target (qps per replica) must be > 0, got {self.target}")
        if self.min_replicas < 0 or self.max_replicas < max(1, self.min_replicas):
            raise ValueError(f"need 0 <= min_replicas <= max_replicas and max_replicas >= 1, "
                             f"got {self.min_replicas}..{self.max_replicas}")
        if not (0 <= self.tolerance_up and 0 <= self.tolerance_down < 1):
            raise ValueError(f"tolerances must be >= 0 (down < 1), got up={self.tolerance_up} down={self.tolerance_down}")

    @property
    def tolerance(self) -> Tolerance:
        return Tolerance(up=self.tolerance_up, down=self.tolerance_down)

    def up_rules(self) -> ScalingRules:
        if self.scale_up is not None:
            return self.scale_up
        pols = [ScalingPolicy(kind, v, self.scale_up_period_seconds)
                for kind, v in (("Pods", self.scale_up_pods), ("Percent", self.scale_up_percent)) if v > 0]
        return ScalingRules(self.scale_up_window_seconds, "Max" if pols else "Disabled", tuple(pols),
                            self.tolerance_up)

    def down_rules(self) -> ScalingRules:
        if self.scale_down is not None:
            return self.scale_down
        return ScalingRules(self.scale_down_window_seconds, so.SELECT_DEFAULT,
                            (ScalingPolicy("Percent", self.scale_down_percent, self.scale_down_period_seconds),),
                            self.tolerance_down)


# --------------------------------------------------------------------------- KEDA + HPA, one metric


def poll_count(n_ticks: int, hpa: Hpa, tick: float = TICK_SECONDS) -> int:
    """How many KEDA polls happen in ``n_ticks`` ticks (poll ``k`` is at tick ``k * poll_every``)."""
    every = every_ticks(hpa.polling_seconds, tick)
    return (n_ticks + every - 1) // every


def poll_ticks(n_ticks: int, hpa: Hpa, tick: float = TICK_SECONDS) -> np.ndarray:
    return np.arange(0, n_ticks, every_ticks(hpa.polling_seconds, tick))


def sync_ticks(n_ticks: int, hpa: Hpa, tick: float = TICK_SECONDS) -> np.ndarray:
    return np.arange(0, n_ticks, every_ticks(hpa.sync_seconds, tick))


def value_ticks(n_ticks: int, hpa: Hpa, tick: float = TICK_SECONDS) -> np.ndarray:
    """The ticks at which KEDA asks the scaler for the value the HPA then reads: every HPA sync (KEDA's
    default, ``useCachedMetrics: false``: its metrics adapter calls GetMetrics on every HPA request), or every
    poll with ``useCachedMetrics`` (the HPA reads what the polling loop cached)."""
    every = hpa.polling_seconds if hpa.cached_metrics else hpa.sync_seconds
    return np.arange(0, n_ticks, every_ticks(every, tick))


def value_at_polls(n_ticks: int, hpa: Hpa, tick: float = TICK_SECONDS) -> np.ndarray:
    """Per KEDA poll, the index into the values at ``value_ticks`` of the value KEDA's loop acts on then
    (IsActive): the latest one asked at or before the poll."""
    polls = poll_ticks(n_ticks, hpa, tick)
    return np.searchsorted(value_ticks(n_ticks, hpa, tick), polls, side="right") - 1


def every_ticks(seconds: float, tick: float) -> int:
    """A cadence of ``seconds`` in whole ticks (at least 1)."""
    return max(1, int(round(seconds / tick)))


def window_ticks(seconds: float, tick: float = TICK_SECONDS) -> float:
    """A window of ``seconds`` in ticks: a record ``k`` ticks old is inside when ``k < window_ticks``.

    ``seconds / tick - EPS``: at 15 s ticks a 300 s window holds records 0..19
    ticks (0..285 s) old; one exactly 300 s old is out (Kubernetes' ``After(cutoff)``).
    """
    return seconds / tick - EPS

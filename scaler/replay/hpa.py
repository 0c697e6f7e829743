"""KEDA + HPA, emulated on the scenario's ticks. Pure and deterministic.

The backtest replays a request trace through this emulation and compares
scaling policies on SLO misses and GPU cost. Nothing here reads a clock, a
file or the environment; every input is an argument.

Time model (tick ``i`` covers ``[t0 + i*tick, t0 + (i+1)*tick)``):

* ``demand[i]``: the request rate arriving during tick ``i`` (the trace is
  piecewise constant within one of its intervals).
* ``observed[i]``: what Prometheus' ``rate(...[2m])`` shows at the start of
  tick ``i``: the mean demand over the preceding ``rate_window`` seconds.
* KEDA polls the scaler every ``polling_seconds`` (ticks 0, 2, 4, ... at 30 s);
  the value it gets is held until the next poll. ``values[k]`` is the value
  returned at poll ``k``. IsActive at that poll is ``value > activation_threshold``.
* The HPA syncs every ``sync_seconds`` right after the poll of the same tick
  and changes the replica count at once (the pods exist from that tick on).
* A pod created at tick ``c`` is ready from tick ``c + ceil(T_cold / tick)``.
* Capacity during tick ``i`` = ready pods x ``qps_per_replica``.

HPA rules (Kubernetes' replica calculator and behavior defaults, external
metric with an AverageValue target, as KEDA creates it), one pure function
each returning ``(replicas, HpaReason)``; ``run_hpa`` composes them per sync
as Kubernetes does: bounds, then recommendation, stabilisation, rate limit, bounds:

* KEDA hands the value and the target to the HPA as milli-quantities
  (``"%.3f"``); the HPA compares integers of milli-units.
* ratio = value / (target x current replicas); nothing changes while
  ``1 - tol_down <= ratio <= 1 + tol_up`` (``policy.Tolerance``, by default
  ``KUBERNETES_TOLERANCE``: 0.1 each; ``behavior.scaleUp.tolerance`` makes the
  upper one configurable), else the recommendation is ``ceil(value / target)``
  (``replica_recommendation``).
* Stabilisation: scale-down goes to the highest recommendation of the last
  ``scale_down_window`` seconds (300 s); scale-up window 0 (``stabilize``).
* Scale-up rate: at most ``max(start + 4, ceil(start x 2))`` where ``start`` is
  the replica count at the beginning of the ``scale_up_period`` (15 s)
  (``period_start``, ``scale_up_limit``); scale-down rate: at least
  ``int(start x (1 - percent/100))``, 0 at the default 100 % (``scale_down_limit``).
* HPA min replicas = max(minReplicaCount, 1); max = maxReplicaCount (100)
  (``bounds``); outside them the calculator is skipped and the count clamped.
* minReplicaCount 0: at 0 replicas the HPA is disabled; KEDA activates 0 -> 1
  at a poll where IsActive is true and scales to 0 after ``cooldown_seconds``
  (300 s) without activity.
* Scale-down removes the newest pods first, so not-yet-ready pods go first
  (Kubernetes' ReplicaSet deletion ranking).

The oracle is not an HPA: it knows the demand and starts every pod exactly
T_cold before it is needed (the lower bound on cost at zero misses).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

import numpy as np

from ..policy import KUBERNETES_TOLERANCE, Tolerance, to_milli
from .scenario import EPS, TICK_SECONDS, Scenario, Timeline


@dataclass(frozen=True)
class Hpa:
    """KEDA ScaledObject + HPA settings that matter for the emulation (defaults = Kubernetes/KEDA defaults)."""

    target: float  # qps per replica: the AverageValue target
    min_replicas: int = 0  # KEDA minReplicaCount
    max_replicas: int = 100  # KEDA maxReplicaCount
    tolerance_up: float = KUBERNETES_TOLERANCE.up  # behavior.scaleUp.tolerance (Kubernetes >= 1.33)
    tolerance_down: float = KUBERNETES_TOLERANCE.down  # behavior.scaleDown.tolerance
    scale_up_pods: int = 4  # scaleUp policy Pods/periodSeconds
    scale_up_percent: float = 100.0  # scaleUp policy Percent/periodSeconds
    scale_up_period_seconds: float = 15.0
    scale_up_window_seconds: float = 0.0  # scaleUp stabilizationWindowSeconds
    scale_down_window_seconds: float = 300.0  # scaleDown stabilizationWindowSeconds
    scale_down_percent: float = 100.0  # scaleDown policy Percent/periodSeconds
    scale_down_period_seconds: float = 15.0
    sync_seconds: float = 15.0  # --horizontal-pod-autoscaler-sync-period
    polling_seconds: float = 30.0  # KEDA pollingInterval
    activation_threshold: float = 0.0  # IsActive = value > activation_threshold
    cooldown_seconds: float = 300.0  # KEDA cooldownPeriod (scale to zero)
    milli: bool = True  # KEDA's milli-quantity rounding of value and target

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


# --------------------------------------------------------------------------- the HPA's rules, one function each


class HpaReason(str, Enum):
    """Why a rule returned its replica count (Kubernetes' condition reason where it has one)."""

    WITHIN_TOLERANCE = "within tolerance"  # ratio inside the dead band: stay at current
    METRIC = "ceil(value / target)"  # ratio outside the band
    RECOMMENDATION = "recommendation"  # stabilisation leaves the recommendation as it is
    SCALE_UP_STABILIZED = "ScaleUpStabilized"  # held down by the lowest recommendation of the scale-up window
    SCALE_DOWN_STABILIZED = "ScaleDownStabilized"  # held up by the highest recommendation of the scale-down window
    DESIRED_WITHIN_RANGE = "DesiredWithinRange"  # no rate limit or bound binds
    SCALE_UP_LIMIT = "ScaleUpLimit"
    SCALE_DOWN_LIMIT = "ScaleDownLimit"
    TOO_MANY_REPLICAS = "TooManyReplicas"  # above max replicas
    TOO_FEW_REPLICAS = "TooFewReplicas"  # below the HPA's min replicas


def replica_recommendation(value_m: float, target_m: float, current: int, tolerance: Tolerance,
                           milli: bool = True) -> tuple[int, HpaReason]:
    """The replica calculator for an external metric with an AverageValue target.

    ``value_m``, ``target_m``: KEDA's milli-quantities (``to_milli``, integers)
    when ``milli``, else the raw values (then ``ceil`` forgives ``EPS`` of float
    noise). ``current`` >= 1. The usage ratio is ``value / (target x current)``.
    """
    if tolerance.is_within(value_m / (target_m * current)):
        return current, HpaReason.WITHIN_TOLERANCE
    return (math.ceil(value_m / target_m) if milli else math.ceil(value_m / target_m - EPS)), HpaReason.METRIC


def stabilize(recommendation: int, current: int, records: Iterable[tuple[int, int]], now: int,
              up_window: float, down_window: float) -> tuple[int, HpaReason]:
    """Kubernetes' ``stabilizeRecommendationWithBehaviors``.

    ``records``: the ``(tick, recommendation)`` of earlier syncs. A record
    ``now - tick`` ticks old is inside a window when ``now - tick < window``
    (windows in ticks, from ``window_ticks``). The result is ``current`` raised
    to the lowest recommendation of the scale-up window, then lowered to the
    highest of the scale-down window (the new recommendation counts in both).
    """
    up_rec = down_rec = recommendation
    for j, r in records:
        age = now - j
        if age < up_window and r < up_rec:
            up_rec = r
        if age < down_window and r > down_rec:
            down_rec = r
    stab = current
    if stab < up_rec:
        stab = up_rec
    if stab > down_rec:
        stab = down_rec
    if stab == recommendation:
        return stab, HpaReason.RECOMMENDATION
    return stab, HpaReason.SCALE_UP_STABILIZED if recommendation > current else HpaReason.SCALE_DOWN_STABILIZED


def period_start(current: int, ups: Iterable[tuple[int, int]], downs: Iterable[tuple[int, int]], now: int,
                 period: float) -> int:
    """The replica count at the beginning of a rate-limit period: current - added + removed within it.

    ``ups``/``downs``: ``(tick, replicas added/removed)`` events; an event is
    inside the period when ``now - tick < period`` (ticks, from ``window_ticks``).
    """
    return (current - sum(k for j, k in ups if now - j < period)
            + sum(k for j, k in downs if now - j < period))


def scale_up_limit(desired: int, current: int, start: int, pods: int, percent: float) -> tuple[int, HpaReason]:
    """At most ``max(start + pods, ceil(start x (1 + percent/100)))``, never below ``current``."""
    limit = max(start + pods, math.ceil(start * (1.0 + percent / 100.0) - EPS))
    if limit < current:
        limit = current
    if desired > limit:
        return limit, HpaReason.SCALE_UP_LIMIT
    return desired, HpaReason.DESIRED_WITHIN_RANGE


def scale_down_limit(desired: int, current: int, start: int, percent: float) -> tuple[int, HpaReason]:
    """At least ``int(start x (1 - percent/100))`` (Kubernetes truncates), never above ``current``."""
    limit = int(start * (1.0 - percent / 100.0))
    if limit > current:
        limit = current
    if desired < limit:
        return limit, HpaReason.SCALE_DOWN_LIMIT
    return desired, HpaReason.DESIRED_WITHIN_RANGE


def bounds(replicas: int, min_replicas: int, max_replicas: int) -> tuple[int, HpaReason]:
    """Clamp to the HPA's ``[min_replicas, max_replicas]`` (its min is ``max(minReplicaCount, 1)``)."""
    if replicas > max_replicas:
        return max_replicas, HpaReason.TOO_MANY_REPLICAS
    if replicas < min_replicas:
        return min_replicas, HpaReason.TOO_FEW_REPLICAS
    return replicas, HpaReason.DESIRED_WITHIN_RANGE


# --------------------------------------------------------------------------- KEDA + HPA


def poll_count(n_ticks: int, hpa: Hpa, tick: float = TICK_SECONDS) -> int:
    """How many KEDA polls happen in ``n_ticks`` ticks (poll ``k`` is at tick ``k * poll_every``)."""
    every = _every(hpa.polling_seconds, tick)
    return (n_ticks + every - 1) // every


def poll_ticks(n_ticks: int, hpa: Hpa, tick: float = TICK_SECONDS) -> np.ndarray:
    return np.arange(0, n_ticks, _every(hpa.polling_seconds, tick))


def _every(seconds: float, tick: float) -> int:
    return max(1, int(round(seconds / tick)))


def window_ticks(seconds: float, tick: float = TICK_SECONDS) -> float:
    """A window of ``seconds`` in ticks: a record ``k`` ticks old is inside when ``k < window_ticks``.

    ``seconds / tick - EPS``: at 15 s ticks a 300 s window holds records 0..19
    ticks (0..285 s) old; one exactly 300 s old is out (Kubernetes' ``After(cutoff)``).
    """
    return seconds / tick - EPS


def run_hpa(sc: Scenario, values: np.ndarray, hpa: Hpa, *, initial_replicas: int | None = None) -> Timeline:
    """Replay KEDA + HPA over the scenario with the value KEDA gets at each poll.

    ``values[k]`` is the value at poll ``k`` (length ``poll_count``). The
    initial state is steady: ``initial_replicas`` (default: what the first
    value asks for, within the bounds), all ready.
    """
    n, tick = sc.n, sc.tick
    values = np.asarray(values, dtype=np.float64)
    need_polls = poll_count(n, hpa, tick)
    if values.shape[0] < need_polls:
        raise ValueError(f"need {need_polls} poll values for {n} ticks, got {values.shape[0]}")
    poll_every = _every(hpa.polling_seconds, tick)
    sync_every = _every(hpa.sync_seconds, tick)
    cold = sc.cold_ticks
    milli = hpa.milli
    tgt_m = to_milli(hpa.target) if milli else hpa.target
    if tgt_m <= 0:
        raise ValueError(f"target {hpa.target} is 0 as a milli-quantity")
    hpa_min = max(hpa.min_replicas, 1)
    hpa_max = hpa.max_replicas
    tol = hpa.tolerance
    down_w = window_ticks(hpa.scale_down_window_seconds, tick)
    up_w = window_ticks(hpa.scale_up_window_seconds, tick)
    up_period = window_ticks(hpa.scale_up_period_seconds, tick)
    down_period = window_ticks(hpa.scale_down_period_seconds, tick)
    cooldown_ticks = hpa.cooldown_seconds / tick
    act = hpa.activation_threshold
    up_pods, up_percent, down_percent = hpa.scale_up_pods, hpa.scale_up_percent, hpa.scale_down_percent

    v0 = float(values[0])
    if initial_replicas is None:
        if hpa.min_replicas == 0 and not v0 > act:
            initial_replicas = 0
        else:
            m0 = to_milli(v0) if milli else v0
            initial_replicas = min(max(math.ceil(m0 / tgt_m - (0 if milli else EPS)), hpa_min), hpa_max)
    created: list[int] = [-(cold + 1)] * int(initial_replicas)  # creation tick per live pod, oldest first
    born = np.zeros(n + 1, dtype=np.int64)  # pods created at tick i (or alive at 0)
    died = np.zeros(n + 1, dtype=np.int64)  # pods deleted at tick i
    ready_on = np.zeros(n + cold + 2, dtype=np.int64)  # pods becoming ready at tick i
    ready_off = np.zeros(n + 1, dtype=np.int64)  # ready pods deleted at tick i
    born[0] = len(created)
    ready_on[0] = len(created)
    held = np.empty(n, dtype=np.float64)

    recs: deque[tuple[int, int]] = deque()  # (tick, unstabilised recommendation)
    ups: deque[tuple[int, int]] = deque()  # (tick, replicas added by the HPA)
    downs: deque[tuple[int, int]] = deque()  # (tick, replicas removed by the HPA)
    keep = max(down_w, up_w)
    keep_ev = max(up_period, down_period)
    last_active = 0 if v0 > act else -math.inf
    value = v0
    vm = to_milli(v0) if milli else v0

    def add(i: int, k: int) -> None:
        created.extend([i] * k)
        born[i] += k
        ready_on[i + cold] += k

    def remove(i: int, k: int) -> None:
        for _ in range(k):
            c = created.pop()
            died[i] += 1
            if c + cold <= i:
                ready_off[i] += 1
            else:
                ready_on[c + cold] -= 1

    def scale(i: int, cur: int, new: int) -> None:
        if new > cur:
            add(i, new - cur)
            ups.append((i, new - cur))
        elif new < cur:
            remove(i, cur - new)
            downs.append((i, cur - new))

    memo_vm, memo_cur, rec = math.nan, 0, 0  # the last recommendation's inputs (the value is held between polls)
    for i in range(n):
        polled = i % poll_every == 0
        if polled:
            value = float(values[i // poll_every])
            vm = to_milli(value) if milli else value
        held[i] = value
        if created and i % sync_every == 0:  # one HPA reconcile
            cur = len(created)
            if cur > hpa_max or cur < hpa_min:  # outside the bounds the calculator is skipped
                scale(i, cur, bounds(cur, hpa_min, hpa_max)[0])
            else:
                if vm != memo_vm or cur != memo_cur:
                    memo_vm, memo_cur = vm, cur
                    rec = replica_recommendation(vm, tgt_m, cur, tol, milli)[0]
                if not recs:  # maybeInitScaleDownStabilizationWindow
                    recs.append((i, cur))
                while recs and i - recs[0][0] >= keep:
                    recs.popleft()
                if rec == cur:  # fast path: the stabilised value is then always cur
                    recs.append((i, rec))
                else:
                    new = stabilize(rec, cur, recs, i, up_w, down_w)[0]
                    recs.append((i, rec))
                    if new != cur:
                        while ups and i - ups[0][0] >= keep_ev:
                            ups.popleft()
                        while downs and i - downs[0][0] >= keep_ev:
                            downs.popleft()
                        if new > cur:
                            new = scale_up_limit(new, cur, period_start(cur, ups, downs, i, up_period),
                                                 up_pods, up_percent)[0]
                        else:
                            new = scale_down_limit(new, cur, period_start(cur, ups, downs, i, down_period),
                                                   down_percent)[0]
                        scale(i, cur, bounds(new, hpa_min, hpa_max)[0])
        if polled:  # KEDA acts on IsActive after the HPA's sync of the same tick
            if value > act:
                last_active = i
                if not created:
                    add(i, max(hpa.min_replicas, 1))  # activation 0 -> 1
            elif created and hpa.min_replicas == 0 and i - last_active > cooldown_ticks:
                remove(i, len(created))  # scale to zero after cooldownPeriod

    replicas = np.cumsum(born[:n] - died[:n])
    ready = np.cumsum(ready_on[:n] - ready_off[:n])
    return Timeline(replicas=replicas, ready=ready, value=held)

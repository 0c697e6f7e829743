"""The HPA's rules (Kubernetes' replica calculator and ``behavior``, external metrics as KEDA creates them), one
pure function each returning ``(replicas, HpaReason)``, compiled by numba; ``hpaloop`` composes them tick by tick
and ``hpa`` holds the settings (``Hpa``) and the ticks. The loop applies them per sync as Kubernetes does: bounds,
then the largest recommendation over the metrics, stabilisation, rate limit, bounds:

* KEDA hands the value and the target to the HPA as milli-quantities
  (``"%.3f"``); the HPA compares integers of milli-units.
* ``AverageValue``: ratio = value / (target x current); ``Value``: ratio =
  value / target. Nothing changes while ``1 - tol_down <= ratio <= 1 + tol_up``
  (``deadband.Tolerance``, by default ``KUBERNETES_TOLERANCE``: 0.1 each;
  ``behavior.scaleUp/scaleDown.tolerance``), else the recommendation is
  ``ceil(value / target)`` (AverageValue) or ``ceil(ratio x current)`` (Value)
  (``recommend``). Several metrics: the largest recommendation; a metric the
  HPA cannot read makes it skip the sync when all fail or the others would
  scale down (``computeReplicasForMetrics``).
* Stabilisation: the current count raised to the lowest recommendation of the
  scale-up window, then lowered to the highest of the scale-down window
  (``stabilize``; defaults 0 s and 300 s).
* Rate limits (``behavior.scaleUp/scaleDown.policies``): each policy limits from
  the replica count at the start of its own ``periodSeconds``
  (``period_start``: current - added + removed within the period). Scale-up:
  ``Pods`` start + value, ``Percent`` ceil(start x (1 + value/100)); ``selectPolicy``
  Max takes the largest proposal, Min the smallest, Disabled forbids scaling
  up; never below current (``scale_up_rate_limit``). Scale-down: ``Pods``
  start - value, ``Percent`` int(start x (1 - value/100)) (Go truncates); Max
  takes the smallest (the biggest change), Min the largest, Disabled forbids;
  never above current (``scale_down_rate_limit``). Defaults: up Pods 4 / 15 s
  and Percent 100 / 15 s, Max; down Percent 100 / 15 s, Max.
* No ``behavior`` at all (``Hpa.legacy``; KEDA passes none and Kubernetes fills
  none in): the controller's legacy path, the highest recommendation not older
  than 300 s (``legacy_stabilize``) and at most max(2 x current, 4), no
  scale-down rate limit (``legacy_limit``).
* HPA min replicas = max(minReplicaCount, 1); max = maxReplicaCount (100)
  (``bounds``); outside them the calculator is skipped and the count clamped.
* minReplicaCount 0: at 0 replicas the HPA is disabled; KEDA activates 0 -> 1
  at a poll where IsActive is true and scales to 0 after ``cooldown_seconds``
  (300 s) without activity.
* Scale-down removes the newest pods first, so not-yet-ready pods go first
  (Kubernetes' ReplicaSet deletion ranking).

Why compiled (issue 26): the rules are plain functions compiled by numba
(``@njit``) and ``hpaloop.run_loop`` calls them in a compiled loop. Measured
before choosing (cProfile of the old loop on the bundled trace): the time
went to per-tick interpreter overhead (deques of tuples, calls, the
milli-quantity string formatting per poll), which a vectorised window cannot
remove because each sync depends on the count the previous one left. numba
keeps the rules as they are (named, pure, callable from Python and from the
loop) and compiles the loop: 15x end to end on 28 days at 15 s ticks, the loop
itself ~35x (tests/bench/bench_hpa.py; docs/manifest-replay.md), with the
milli-quantities vectorised (``keda.milli_values``) and the result identical tick
for tick to the old loop (tests/replay/test_hpa_equivalence.py).
"""

from __future__ import annotations

import math
from enum import IntEnum

import numpy as np
try:  # the `fast` extra; without it the same functions run as plain Python (identical results, slower)
    from numba import njit
except ImportError:
    njit = None  # type: ignore[assignment]  # the rules run as plain Python (``compiled``)

from ..deadband import Tolerance
from .hpa import PERCENT, PODS, SELECT_MAX
from .scenario import EPS


def compiled(f):
    """``f`` compiled by numba, cached on disk where numba finds a writable place (next to the module, or
    ``NUMBA_CACHE_DIR``); on a read-only image without one, compiled once per process instead of failing.
    Without numba (``pip install forescale`` without the ``fast`` extra) ``f`` itself: the same code, interpreted."""
    if njit is None:
        return f
    try:
        return njit(cache=True)(f)
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        return njit(f)


# --------------------------------------------------------------------------- the HPA's rules, one function each


class HpaReason(IntEnum):
    """Why a rule returned its replica count (Kubernetes' condition reason where it has one)."""

    WITHIN_TOLERANCE = 0  # ratio inside the dead band: stay at current
    METRIC = 1  # ratio outside the band: ceil(value / target)
    RECOMMENDATION = 2  # stabilisation leaves the recommendation as it is
    SCALE_UP_STABILIZED = 3  # held down by the lowest recommendation of the scale-up window
    SCALE_DOWN_STABILIZED = 4  # held up by the highest recommendation of the scale-down window
    DESIRED_WITHIN_RANGE = 5  # no rate limit or bound binds
    SCALE_UP_LIMIT = 6
    SCALE_DOWN_LIMIT = 7
    TOO_MANY_REPLICAS = 8  # above max replicas
    TOO_FEW_REPLICAS = 9  # below the HPA's min replicas


@compiled
def recommend(value_m, target_m, current, tol_up, tol_down, milli, per_pod):
    """The replica calculator for one external metric: ``(replicas, reason code)``.

    ``value_m``, ``target_m``: KEDA's milli-quantities when ``milli`` (whole
    numbers), else the raw values (then ``ceil`` forgives ``EPS`` of float
    noise). ``current`` >= 1. ``per_pod``: an AverageValue target (ratio
    value / (target x current), ceil(value / target)); else a Value target
    (ratio value / target, ceil(ratio x current)).
    """
    if per_pod:
        ratio = value_m / (target_m * current)
    else:
        ratio = value_m / target_m
    if 1.0 - tol_down <= ratio <= 1.0 + tol_up:
        return current, 0
    x = value_m / target_m if per_pod else ratio * current
    return (math.ceil(x) if milli else math.ceil(x - EPS)), 1


def replica_recommendation(value_m: float, target_m: float, current: int, tolerance: Tolerance,
                           milli: bool = True) -> tuple[int, HpaReason]:
    """``recommend`` for an AverageValue target with a ``Tolerance``."""
    r, why = recommend(float(value_m), float(target_m), int(current), tolerance.up, tolerance.down, milli, True)
    return int(r), HpaReason(why)


@compiled
def stabilize_records(recommendation, current, rec_t, rec_v, lo, hi, now, up_window, down_window):
    """Kubernetes' ``stabilizeRecommendationWithBehaviors`` over the records ``rec_t/rec_v[lo:hi]``.

    A record ``now - tick`` ticks old is inside a window when ``now - tick <
    window`` (windows in ticks, from ``window_ticks``). The result is
    ``current`` raised to the lowest recommendation of the scale-up window,
    then lowered to the highest of the scale-down window (the new
    recommendation counts in both).
    """
    up_rec = recommendation
    down_rec = recommendation
    for k in range(lo, hi):
        age = now - rec_t[k]
        r = rec_v[k]
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
        return stab, 2
    return stab, (3 if recommendation > current else 4)


def stabilize(recommendation: int, current: int, records, now: int, up_window: float,
              down_window: float) -> tuple[int, HpaReason]:
    """``stabilize_records`` with the records as ``(tick, recommendation)`` pairs."""
    rs = list(records)
    t = np.array([j for j, _ in rs], dtype=np.int64)
    v = np.array([r for _, r in rs], dtype=np.int64)
    s, why = stabilize_records(int(recommendation), int(current), t, v, 0, len(rs), int(now), float(up_window),
                               float(down_window))
    return int(s), HpaReason(why)


@compiled
def period_start_events(current, ev_t, ev_add, ev_rem, lo, hi, now, period):
    """The replica count at the beginning of a rate-limit period: current - added + removed within it.

    Events ``ev_t/ev_add/ev_rem[lo:hi]`` (tick, replicas added, replicas
    removed); an event is inside the period when ``now - tick < period``
    (ticks, from ``window_ticks``; Kubernetes' ``getReplicasChangePerPeriod``).
    """
    start = current
    for k in range(lo, hi):
        if now - ev_t[k] < period:
            start += ev_rem[k] - ev_add[k]
    return start


def period_start(current: int, ups, downs, now: int, period: float) -> int:
    """``period_start_events`` with the additions and removals as ``(tick, replicas)`` pairs."""
    ev = [(j, k, 0) for j, k in ups] + [(j, 0, k) for j, k in downs]
    t = np.array([e[0] for e in ev], dtype=np.int64)
    return int(period_start_events(int(current), t, np.array([e[1] for e in ev], dtype=np.int64),
                                   np.array([e[2] for e in ev], dtype=np.int64), 0, len(ev), int(now), float(period)))


@compiled
def scale_up_rate_limit(desired, current, starts, kinds, values, select):
    """Kubernetes' ``calculateScaleUpLimitWithScalingRules`` and its cap: ``(replicas, reason code)``.

    ``starts[k]``: the count at the start of policy ``k``'s period. Pods:
    start + value; Percent: ceil(start x (1 + value/100)) in float64, exactly as
    Go computes it (25 x 1.12 = 28.000000000000004 -> 29: the drill saw the real
    HPA give 29). Max: the largest proposal; Min: the smallest; Disabled: no
    scale-up. Never below ``current``.
    """
    if select == 2:
        limit = current
    else:
        limit = -(1 << 62) if select == 0 else (1 << 62)
        for k in range(len(kinds)):
            if kinds[k] == 0:
                p = starts[k] + int(values[k])
            else:
                p = math.ceil(starts[k] * (1.0 + values[k] / 100.0))
            if (select == 0 and p > limit) or (select == 1 and p < limit):
                limit = p
        if limit < current:
            limit = current
    if desired > limit:
        return limit, 6
    return desired, 5


@compiled
def scale_down_rate_limit(desired, current, starts, kinds, values, select):
    """Kubernetes' ``calculateScaleDownLimitWithBehaviors`` and its cap: ``(replicas, reason code)``.

    Pods: start - value; Percent: int(start x (1 - value/100)) (truncated, as
    Go's int32 conversion). Max (the biggest change): the smallest proposal;
    Min: the largest; Disabled: no scale-down. Never above ``current``.
    """
    if select == 2:
        limit = current
    else:
        limit = (1 << 62) if select == 0 else -(1 << 62)
        for k in range(len(kinds)):
            if kinds[k] == 0:
                p = starts[k] - int(values[k])
            else:
                p = int(starts[k] * (1.0 - values[k] / 100.0))
            if (select == 0 and p < limit) or (select == 1 and p > limit):
                limit = p
        if limit > current:
            limit = current
    if desired < limit:
        return limit, 7
    return desired, 5


@compiled
def legacy_stabilize(recommendation, rec_t, rec_v, lo, hi, now, window):
    """Without ``behavior``: Kubernetes' ``stabilizeRecommendation``, the highest recommendation not older
    than the downscale window (``age <= window``: ``!Before(cutoff)``), this one included; it may exceed the
    current count."""
    best = recommendation
    for k in range(lo, hi):
        if now - rec_t[k] <= window and rec_v[k] > best:
            best = rec_v[k]
    return best


@compiled
def legacy_limit(desired, current, min_replicas, max_replicas):
    """Without ``behavior``: ``convertDesiredReplicasWithRules``, up to ``max(2 x current, 4)`` and the bounds;
    no scale-down rate limit: ``(replicas, reason code)``."""
    up = max(2 * current, 4)
    if desired < min_replicas:
        return min_replicas, 9
    if desired > min(up, max_replicas):
        return min(up, max_replicas), (6 if max_replicas > up else 8)
    return desired, 5


def scale_up_limit(desired: int, current: int, start: int, pods: int, percent: float) -> tuple[int, HpaReason]:
    """The default scale-up shape: at most ``max(start + pods, ceil(start x (1 + percent/100)))``."""
    r, why = scale_up_rate_limit(int(desired), int(current), np.array([start, start], dtype=np.int64),
                                 np.array([PODS, PERCENT], dtype=np.int64), np.array([pods, percent], dtype=np.float64),
                                 SELECT_MAX)
    return int(r), HpaReason(why)


def scale_down_limit(desired: int, current: int, start: int, percent: float) -> tuple[int, HpaReason]:
    """The default scale-down shape: at least ``int(start x (1 - percent/100))``."""
    r, why = scale_down_rate_limit(int(desired), int(current), np.array([start], dtype=np.int64),
                                   np.array([PERCENT], dtype=np.int64), np.array([percent], dtype=np.float64),
                                   SELECT_MAX)
    return int(r), HpaReason(why)


@compiled
def clamp(replicas, min_replicas, max_replicas):
    """Clamp to the HPA's ``[min_replicas, max_replicas]``: ``(replicas, reason code)``."""
    if replicas > max_replicas:
        return max_replicas, 8
    if replicas < min_replicas:
        return min_replicas, 9
    return replicas, 5


def bounds(replicas: int, min_replicas: int, max_replicas: int) -> tuple[int, HpaReason]:
    """``clamp`` (the HPA's min is ``max(minReplicaCount, 1)``)."""
    r, why = clamp(int(replicas), int(min_replicas), int(max_replicas))
    return int(r), HpaReason(why)

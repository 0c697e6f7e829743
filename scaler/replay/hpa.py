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
metric with an AverageValue target, as KEDA creates it):

* KEDA hands the value and the target to the HPA as milli-quantities
  (``"%.3f"``); the HPA compares integers of milli-units.
* ratio = value / (target x current replicas); nothing changes while
  ``1 - tol_down <= ratio <= 1 + tol_up`` (tolerance 0.1 each by default,
  ``behavior.scaleUp.tolerance`` makes the upper one configurable), else the
  recommendation is ``ceil(value / target)``.
* Stabilisation: scale-down goes to the highest recommendation of the last
  ``scale_down_window`` seconds (300 s); scale-up window 0.
* Scale-up rate: at most ``max(start + 4, ceil(start x 2))`` where ``start`` is
  the replica count at the beginning of the ``scale_up_period`` (15 s).
* HPA min replicas = max(minReplicaCount, 1); max = maxReplicaCount (100).
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
from dataclasses import dataclass

import numpy as np

from ..policy import to_milli
from .scenario import EPS, TICK_SECONDS, Scenario, Timeline


@dataclass(frozen=True)
class Hpa:
    """KEDA ScaledObject + HPA settings that matter for the emulation (defaults = Kubernetes/KEDA defaults)."""

    target: float  # qps per replica: the AverageValue target
    min_replicas: int = 0  # KEDA minReplicaCount
    max_replicas: int = 100  # KEDA maxReplicaCount
    tolerance_up: float = 0.1  # behavior.scaleUp.tolerance (Kubernetes >= 1.33), else 0.1
    tolerance_down: float = 0.1  # behavior.scaleDown.tolerance
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



# --------------------------------------------------------------------------- KEDA + HPA


def poll_count(n_ticks: int, hpa: Hpa, tick: float = TICK_SECONDS) -> int:
    """How many KEDA polls happen in ``n_ticks`` ticks (poll ``k`` is at tick ``k * poll_every``)."""
    every = _every(hpa.polling_seconds, tick)
    return (n_ticks + every - 1) // every


def poll_ticks(n_ticks: int, hpa: Hpa, tick: float = TICK_SECONDS) -> np.ndarray:
    return np.arange(0, n_ticks, _every(hpa.polling_seconds, tick))


def _every(seconds: float, tick: float) -> int:
    return max(1, int(round(seconds / tick)))


def _window_ticks(seconds: float, tick: float) -> float:
    """A record ``k`` ticks old is inside a window when ``k < seconds / tick`` (Kubernetes' ``After(cutoff)``)."""
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
    tgt_m = to_milli(hpa.target) if hpa.milli else hpa.target
    if tgt_m <= 0:
        raise ValueError(f"target {hpa.target} is 0 as a milli-quantity")
    hpa_min = max(hpa.min_replicas, 1)
    hpa_max = hpa.max_replicas
    lo_band, hi_band = 1.0 - hpa.tolerance_down, 1.0 + hpa.tolerance_up
    down_w = _window_ticks(hpa.scale_down_window_seconds, tick)
    up_w = _window_ticks(hpa.scale_up_window_seconds, tick)
    up_period = _window_ticks(hpa.scale_up_period_seconds, tick)
    down_period = _window_ticks(hpa.scale_down_period_seconds, tick)
    cooldown_ticks = hpa.cooldown_seconds / tick
    act = hpa.activation_threshold
    up_pods, up_factor = hpa.scale_up_pods, 1.0 + hpa.scale_up_percent / 100.0
    down_factor = 1.0 - hpa.scale_down_percent / 100.0
    milli = hpa.milli

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

    def _sync(i: int) -> None:
        """One HPA reconcile (replica calculator, stabilisation, rate limits, bounds)."""
        cur = len(created)
        if cur > hpa_max:
            new = hpa_max
            rec = cur
        elif cur < hpa_min:
            new = hpa_min
            rec = cur
        else:
            ratio = vm / (tgt_m * cur)
            if lo_band <= ratio <= hi_band:
                rec = cur
            else:
                rec = math.ceil(vm / tgt_m) if milli else math.ceil(vm / tgt_m - EPS)
            if not recs:  # maybeInitScaleDownStabilizationWindow
                recs.append((i, cur))
            while recs and i - recs[0][0] >= keep:
                recs.popleft()
            if rec == cur:  # fast path: the stabilised value is then always cur
                recs.append((i, rec))
                return
            up_rec = down_rec = rec
            for j, r in recs:
                age = i - j
                if age < up_w and r < up_rec:
                    up_rec = r
                if age < down_w and r > down_rec:
                    down_rec = r
            stab = cur
            if stab < up_rec:
                stab = up_rec
            if stab > down_rec:
                stab = down_rec
            recs.append((i, rec))
            new = stab
            if stab > cur or stab < cur:
                while ups and i - ups[0][0] >= keep_ev:
                    ups.popleft()
                while downs and i - downs[0][0] >= keep_ev:
                    downs.popleft()
            if stab > cur:
                start = (cur - sum(k for j, k in ups if i - j < up_period)
                         + sum(k for j, k in downs if i - j < up_period))
                limit = max(start + up_pods, math.ceil(start * up_factor - EPS))
                limit = max(limit, cur)
                new = min(stab, limit, hpa_max)
            elif stab < cur:
                start = (cur - sum(k for j, k in ups if i - j < down_period)
                         + sum(k for j, k in downs if i - j < down_period))
                limit = int(start * down_factor)
                new = max(stab, limit, hpa_min)
        if new > cur:
            add(i, new - cur)
            ups.append((i, new - cur))
        elif new < cur:
            remove(i, cur - new)
            downs.append((i, cur - new))

    for i in range(n):
        polled = i % poll_every == 0
        if polled:
            value = float(values[i // poll_every])
            vm = to_milli(value) if milli else value
        held[i] = value
        if created and i % sync_every == 0:
            _sync(i)
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

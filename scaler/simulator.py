"""KEDA + HPA + cold start, emulated on 15 s ticks. Pure and deterministic.

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
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from forecaster.base import Forecast

from .policy import Decision, PolicyParams, Reason, decide, to_milli

TICK_SECONDS = 15.0
_EPS = 1e-9


# --------------------------------------------------------------------------- inputs


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


@dataclass(frozen=True)
class Scenario:
    """Demand and its Prometheus view on the tick grid, with the replica economics."""

    t0: float  # epoch seconds of tick 0
    demand: np.ndarray  # requests/s during each tick
    observed: np.ndarray  # rate() at the start of each tick
    cold_start_seconds: float
    qps_per_replica: float
    tick: float = TICK_SECONDS

    def __post_init__(self) -> None:
        if self.demand.shape != self.observed.shape or self.demand.ndim != 1 or not len(self.demand):
            raise ValueError("demand and observed must be non-empty 1-D arrays of one length")
        if not self.cold_start_seconds >= 0 or not math.isfinite(self.cold_start_seconds):
            raise ValueError(f"cold start must be a finite number of seconds >= 0, got {self.cold_start_seconds}")
        if not self.qps_per_replica > 0:
            raise ValueError(f"qps per replica must be > 0, got {self.qps_per_replica}")

    @property
    def n(self) -> int:
        return int(self.demand.shape[0])

    @property
    def times(self) -> np.ndarray:
        return self.t0 + self.tick * np.arange(self.n, dtype=np.float64)

    @property
    def cold_ticks(self) -> int:
        """T_cold in ticks, rounded up (a pod is ready at the first tick start after T_cold)."""
        return int(math.ceil(self.cold_start_seconds / self.tick - _EPS))

    def need(self) -> np.ndarray:
        """Replicas needed in each tick so that no request waits."""
        return np.ceil(self.demand / self.qps_per_replica - _EPS).clip(min=0).astype(np.int64)


def scenario(t: np.ndarray, y: np.ndarray, step: float, start: float, end: float, *, cold_start_seconds: float,
             qps_per_replica: float, tick: float = TICK_SECONDS, rate_window: float = 120.0) -> Scenario:
    """Put a trace (rates ``y`` over intervals ``[t, t+step)``) on the tick grid ``[start, end)``.

    Demand per tick is the exact mean of the piecewise-constant trace over the
    tick (so 1 s and 10 min traces both work). ``observed`` uses the trace
    before ``start`` too; where the window reaches before the trace it is the
    mean over what exists. NaN (an unfilled gap) counts as 0 requests.
    """
    if end <= start:
        raise ValueError(f"empty simulation span: start {start} >= end {end}")
    t = np.asarray(t, dtype=np.float64)
    rate = np.nan_to_num(np.asarray(y, dtype=np.float64), nan=0.0).clip(min=0)
    knots = np.concatenate([t, [t[-1] + step]])
    cum = np.concatenate([[0.0], np.cumsum(rate * step)])

    def c(x: np.ndarray) -> np.ndarray:  # requests arrived from the trace start until x
        return np.interp(x, knots, cum)

    n = int(math.ceil((end - start) / tick - _EPS))
    edges = start + tick * np.arange(n + 1, dtype=np.float64)
    ce = c(edges)
    demand = np.diff(ce) / tick
    lo = np.maximum(edges[:-1] - rate_window, knots[0])
    width = edges[:-1] - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        observed = np.where(width > 0, (ce[:-1] - c(lo)) / np.where(width > 0, width, 1.0), demand)
    return Scenario(float(start), demand, observed, float(cold_start_seconds), float(qps_per_replica), float(tick))


# --------------------------------------------------------------------------- outputs


@dataclass(frozen=True)
class Timeline:
    """Replica counts per tick (after the tick's scaling decision)."""

    replicas: np.ndarray  # starting + ready (what costs money)
    ready: np.ndarray  # serving
    value: np.ndarray | None = None  # the metric value KEDA held during the tick (None for non-HPA policies)


@dataclass(frozen=True)
class Outcome:
    """SLO and cost of one policy over a scenario (DESIGN.md section 5)."""

    underprovisioned_fraction: float
    violation_minutes: int
    replica_hours: float
    scale_ups: int
    peak_replicas: int
    missed_requests: float  # sum of max(0, demand - capacity) x tick
    cold_start_requests: float  # requests that arrived while at least one replica was starting
    requests: float

    def as_dict(self) -> dict:
        return {
            "underprovisioned_fraction": self.underprovisioned_fraction,
            "violation_minutes": self.violation_minutes,
            "replica_hours": self.replica_hours,
            "scale_ups": self.scale_ups,
            "peak_replicas": self.peak_replicas,
            "missed_requests": self.missed_requests,
            "cold_start_requests": self.cold_start_requests,
        }


def evaluate(sc: Scenario, tl: Timeline) -> Outcome:
    """Metrics of a timeline against the scenario's demand."""
    cap = tl.ready.astype(np.float64) * sc.qps_per_replica
    deficit = np.maximum(sc.demand - cap, 0.0)
    total = float(sc.demand.sum())
    violating = sc.demand > cap * (1 + 1e-12) + 1e-12
    minutes = np.floor(sc.times[violating] / 60.0 + 1e-9)
    rep = tl.replicas.astype(np.int64)
    ups = int(np.count_nonzero(np.diff(rep) > 0))
    starting = rep > tl.ready
    return Outcome(
        underprovisioned_fraction=float(deficit.sum() / total) if total > 0 else 0.0,
        violation_minutes=int(np.unique(minutes).size),
        replica_hours=float(rep.sum() * sc.tick / 3600.0),
        scale_ups=ups,
        peak_replicas=int(rep.max()) if rep.size else 0,
        missed_requests=float(deficit.sum() * sc.tick),
        cold_start_requests=float(sc.demand[starting].sum() * sc.tick),
        requests=total * sc.tick,
    )


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
    return seconds / tick - _EPS


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
            initial_replicas = min(max(math.ceil(m0 / tgt_m - (0 if milli else _EPS)), hpa_min), hpa_max)
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
                rec = math.ceil(vm / tgt_m) if milli else math.ceil(vm / tgt_m - _EPS)
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
                limit = max(start + up_pods, math.ceil(start * up_factor - _EPS))
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


# --------------------------------------------------------------------------- non-HPA policies


def fixed_pool(sc: Scenario, replicas: int) -> Timeline:
    """A constant, always-ready pool (keep_alive)."""
    r = np.full(sc.n, int(replicas), dtype=np.int64)
    return Timeline(replicas=r, ready=r.copy())


def oracle(sc: Scenario) -> Timeline:
    """Perfect foresight, no HPA limits: every pod starts exactly T_cold before it is needed.

    Replicas are interchangeable, so the cheapest plan with zero misses is
    found level by level: the k-th replica is needed on the ticks where
    ``need >= k``; it is kept through a gap of at most T_cold (cheaper than a
    new cold start) and otherwise deleted and created again T_cold before the
    next run. Pods needed at tick 0 are ready at tick 0 (as for every policy);
    a cold start that would begin before tick 0 is counted from tick 0.
    """
    need = sc.need()
    n, cold = sc.n, sc.cold_ticks
    ready = np.zeros(n + 1, dtype=np.int64)
    total = np.zeros(n + 1, dtype=np.int64)
    top = int(need.max()) if n else 0
    for k in range(1, top + 1):
        on = np.concatenate([[False], need >= k, [False]])
        d = np.diff(on.astype(np.int8))
        starts = np.flatnonzero(d == 1)
        ends = np.flatnonzero(d == -1)  # exclusive
        if len(starts) > 1:
            gaps = starts[1:] - ends[:-1]
            join = gaps <= cold
            keep_start = np.concatenate([[True], ~join])
            keep_end = np.concatenate([~join, [True]])
            starts, ends = starts[keep_start], ends[keep_end]
        np.add.at(ready, starts, 1)
        np.add.at(ready, ends, -1)
        born = np.where(starts > 0, np.maximum(starts - cold, 0), 0)
        np.add.at(total, born, 1)
        np.add.at(total, ends, -1)
    return Timeline(replicas=np.cumsum(total[:n]), ready=np.cumsum(ready[:n]))


# --------------------------------------------------------------------------- the decision, replayed


@dataclass(frozen=True)
class Curve:
    """A forecast curve as the server would hold it: usable from ``since`` (the fit's cutoff)."""

    since: float
    forecast: Forecast | None
    history_max: float | None = None
    unusable: Reason | None = None  # why there is no usable forecast (passed to decide)


@dataclass
class Planned:
    """The values a forecast-driven policy returns at each poll, with the reasons counted."""

    values: np.ndarray
    reasons: dict[str, int] = field(default_factory=dict)


def planned_values(sc: Scenario, hpa: Hpa, params: PolicyParams, curves: Sequence[Curve], *,
                   observed_offset: float = 0.0) -> Planned:
    """Call the server's ``decide`` at every KEDA poll with the curve in force then.

    ``curves`` sorted by ``since``; at a poll at time t the latest curve with
    ``since <= t`` is used (none yet: ``decide`` falls back to observed).
    ``observed_offset`` is added to the observed rate (hybrid's warm floor,
    whose curves carry the same offset).
    """
    idx = poll_ticks(sc.n, hpa, sc.tick)
    times = sc.t0 + sc.tick * idx
    obs = sc.observed[idx] + observed_offset
    since = np.array([c.since for c in curves], dtype=np.float64)
    which = np.searchsorted(since, times + _EPS, side="right") - 1
    out = np.empty(len(idx), dtype=np.float64)
    reasons: dict[str, int] = {}
    for k in range(len(idx)):
        w = int(which[k])
        cur = curves[w] if w >= 0 else None
        d: Decision = decide(float(obs[k]), cur.forecast if cur else None, params, float(times[k]),
                             unusable=cur.unusable if cur else None, history_max=cur.history_max if cur else None)
        out[k] = d.planned
        reasons[d.reason.value] = reasons.get(d.reason.value, 0) + 1
    return Planned(out, reasons)


def reactive_values(sc: Scenario, hpa: Hpa, qps_per_replica: float) -> Planned:
    """KEDA's Prometheus scaler: the observed rate as is (``decide`` in reactive mode, no dead-band compensation)."""
    params = PolicyParams(mode="reactive", lead_seconds=0.0, quantile=0.5, qps_per_replica=qps_per_replica,
                          hpa_tolerance=0.0)
    return planned_values(sc, hpa, params, ())


__all__ = [
    "TICK_SECONDS", "Hpa", "Scenario", "scenario", "Timeline", "Outcome", "evaluate", "to_milli", "poll_count",
    "poll_ticks", "run_hpa", "fixed_pool", "oracle", "Curve", "Planned", "planned_values", "reactive_values",
    "Reason",
]

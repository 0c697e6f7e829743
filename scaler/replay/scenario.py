"""The replay's world on 15 s ticks: demand, its Prometheus view, and what a timeline of replicas scored.

Nothing here reads a clock, a file or the environment; every input is an argument.

Time model (tick ``i`` covers ``[t0 + i*tick, t0 + (i+1)*tick)``):

* ``demand[i]``: the request rate arriving during tick ``i`` (the trace is
  piecewise constant within one of its intervals).
* ``observed[i]``: what Prometheus' ``rate(...[2m])`` shows at the start of
  tick ``i``: the mean demand over the preceding ``rate_window`` seconds.
* A pod created at tick ``c`` is ready from tick ``c + ceil(T_cold / tick)``.
* Capacity during tick ``i`` = ready pods x ``qps_per_replica``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

TICK_SECONDS = 15.0
DAY = 86400.0
EPS = 1e-9
RATE_WINDOW = 120.0  # the window of the query's rate(): observed, and the server's view of the history
# The replay counts requests cumulatively (float64, 16 digits): a value this many times the trace's median rate
# would leave the smaller ones fewer than 7 digits (1e300 in a history of 100s left them none: every later rate
# read 0), so a trace spanning more is refused (scaler.cli.traces.check_values), never replayed wrong.
MAX_RATE_RANGE = 1e9


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
        return int(math.ceil(self.cold_start_seconds / self.tick - EPS))

    def need(self) -> np.ndarray:
        """Replicas needed in each tick so that no request waits."""
        return np.ceil(self.demand / self.qps_per_replica - EPS).clip(min=0).astype(np.int64)


def scenario(t: np.ndarray, y: np.ndarray, step: float, start: float, end: float, *, cold_start_seconds: float,
             qps_per_replica: float, tick: float = TICK_SECONDS, rate_window: float = RATE_WINDOW) -> Scenario:
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

    n = int(math.ceil((end - start) / tick - EPS))
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
    """SLO and cost of one policy over a scenario (the metrics of the JSON contract, README)."""

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


def rate_view(t: np.ndarray, y: np.ndarray, step: float, window: float = RATE_WINDOW) -> np.ndarray:
    """The trace as the server's query reads it: at each point ``t_k`` the mean rate over ``[t_k - window, t_k]``
    (Prometheus' ``rate(x[2m])`` of a counter of these requests), the intervals being ``[t_i, t_i + step)``;
    NaN where that window holds a gap (the server sees no data); the first point, with nothing before it,
    keeps its own rate.

    A trace of requests per interval is what happened; forescale never sees it so: it fits and predicts from
    its query's range results. The replay's forecasts are made from this view (``engine``), as ``observed`` is.
    """
    t = np.asarray(t, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(t) == 0:
        return y.copy()
    gap = ~np.isfinite(y)
    knots = np.concatenate([t, [t[-1] + step]])
    cum = np.concatenate([[0.0], np.cumsum(np.where(gap, 0.0, y) * step)])
    holes = np.concatenate([[0.0], np.cumsum(gap * step)])
    lo = np.maximum(t - window, knots[0])
    width = t - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (np.interp(t, knots, cum) - np.interp(lo, knots, cum)) / np.where(width > 0, width, 1.0)
    missing = (np.interp(t, knots, holes) - np.interp(lo, knots, holes)) > EPS
    return np.where(width > 0, np.where(missing, np.nan, mean), y)

"""Capacity learned on a replay: the server's estimator (``scaler.learned``) fed what its queries would show of a
replayed policy's replicas, so that what it learns is measured against what the replicas really sustain.

The world (stated): each ready replica serves at most ``true_capacity`` requests/s (``qps_per_replica /
capacity_factor`` when the trigger's figure is off by that factor; ``Settings.capacity_factor``); requests
beyond the ready capacity wait in one fluid FIFO queue (``b' = max(0, b + (d - c) h)`` per tick of ``h``
seconds), and a tick serves what arrived and waited up to its capacity. What the server's queries read, every
``cadence`` seconds: the served rate over the last ``window`` seconds (``rate(vllm:request_success_total[2m])``),
the waiting requests and the ready replicas at that instant (gauges). The learner's defaults are the server's.

``replay_learner`` runs the learner beside a finished replay (what it would learn of those replicas);
``Online`` runs it inside one (``closedloop``: ``capacity: learned`` replayed), call by call: at each KEDA call it
is fed what the server's queries showed one scrape before it, and the call's answer is planned in replicas of
the figure in force then (the headroom x configured / in force, ``params.policy_params``' ``capacity_factor``), so
the figure a call uses is what the learner knew before it.

Pure: arrays in, the learner's state out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..learned import CapacityLearner, Learned


@dataclass(frozen=True)
class Replayed:
    learned: Learned
    saturated_share: float  # of the samples fed, those with a non-empty queue
    samples: int  # samples fed
    served: np.ndarray  # requests/s served per tick


def served_and_queue(demand: np.ndarray, capacity: np.ndarray, tick: float) -> tuple[np.ndarray, np.ndarray]:
    """Per tick: the requests/s served and the requests waiting at its end (the fluid FIFO queue)."""
    d = np.asarray(demand, dtype=np.float64)
    c = np.asarray(capacity, dtype=np.float64)
    served, queue = np.zeros(len(d)), np.zeros(len(d))
    b = 0.0
    for i in range(len(d)):
        want = b + max(d[i], 0.0) * tick
        out = min(want, max(c[i], 0.0) * tick)
        b = want - out
        served[i], queue[i] = out / tick, b
    return served, queue


def replay_learner(demand: np.ndarray, ready: np.ndarray, tick: float, *, true_capacity: float, configured: float,
                   cadence: float = 30.0, window: float = 120.0, noise: float = 0.0, seed: int = 0,
                   **learner) -> Replayed:
    """Feed a ``CapacityLearner(configured)`` the queries' view of ``demand`` (requests/s per tick) served by
    ``ready`` replicas of ``true_capacity`` each; ``learner``: the estimator's knobs (default: the server's).
    ``noise``: the arrivals drawn (Poisson counts per tick, ``seed``) and each tick's service rate off by a
    relative normal error of that standard deviation (batches of other lengths, preemptions), so that no sample
    is the capacity exactly."""
    ready = np.asarray(ready, dtype=np.float64)
    d = np.asarray(demand, dtype=np.float64)
    c = ready * true_capacity
    if noise > 0:
        rng = np.random.default_rng(seed)
        d = rng.poisson(np.maximum(d, 0.0) * tick) / tick
        c = c * np.maximum(0.0, 1.0 + noise * rng.standard_normal(len(c)))
    served, queue = served_and_queue(d, c, tick)
    cum = np.concatenate([[0.0], np.cumsum(served * tick)])
    lr = CapacityLearner(configured, **learner)
    every = max(1, int(round(cadence / tick)))
    w = max(1, int(round(window / tick)))
    fed = saturated = 0
    for i in range(w, len(served) + 1, every):
        rate = (cum[i] - cum[i - w]) / (w * tick)  # over the window ending at the end of tick i - 1
        q, r = float(queue[i - 1]), float(ready[i - 1])
        lr.observe(i * tick, rate, q, r)
        fed += 1
        saturated += q >= lr.min_queue and r >= 1
    return Replayed(lr.state(), saturated / fed if fed else math.nan, fed, served)


class Online:
    """The server's learner inside a replay, call by call. ``configured``: qpsPerReplica; ``scale``: what the server's
    load query counts per unit of the judged load (1 / ``Settings.capacity_factor``); ``learner``: the estimator's
    knobs (default: the server's)."""

    def __init__(self, configured: float, tick: float, *, scale: float = 1.0, window: float = 120.0, **learner):
        self.learner = CapacityLearner(configured, **learner)
        self.tick, self.scale, self.w = tick, scale, max(1, int(round(window / tick)))

    def observe(self, j: int, t: float, served: np.ndarray, backlog: np.ndarray, ready: np.ndarray) -> None:
        """What the queries show at the start of tick ``j`` (time ``t``): the served rate over the window before it
        (``served``: cumulative requests served by the end of each tick, ``served[0] = 0``), the requests waiting
        then (``backlog[j]``) and the ready replicas (``ready[j - 1]``); the judged units scaled to the query's."""
        a = max(0, j - self.w)
        rate = (served[j] - served[a]) / ((j - a) * self.tick)
        self.learner.observe(t, rate * self.scale, float(backlog[j]) * self.scale, float(ready[j - 1]))

    def factor(self) -> float:
        """configured / the figure in force: what the headroom is multiplied by (1 until an estimate moves it)."""
        return self.learner.state().factor

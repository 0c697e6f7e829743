"""Capacity learned online: what one ready replica really serves, from what the server observes at saturation.

While requests wait (the queue is non-empty), the replicas serve all they can: the served rate per ready replica
is then their capacity. ``CapacityLearner`` is fed one sample per observation -- the served load (the trigger's
load: req/s, or the binding load of requests and tokens in req/s-equivalents; its query must count *served*
requests, as vLLM's ``vllm:request_success_total`` does), the waiting requests summed over the replicas, and the
ready replicas -- and keeps:

* a **saturated run**: consecutive samples with ``queue >= min_queue`` and the same number of ready replicas
  (a replica joining or leaving starts a new run). A sample of the run counts once the run is ``settle``
  seconds old (default 120 s: the ``rate()`` window behind the served load must hold only saturated time, and
  only the replicas counted). A sample with a missing value ends the run;
* the **estimate**: the median of the counted per-replica rates (``served / ready``) of the last ``window``
  seconds (default 1 day, at most ``MAX_SAMPLES``), from ``min_samples`` (default 10) on; before that, none;
* the **ratio** estimate / configured (``qpsPerReplica``), exported: a mis-set figure shows as a ratio far from 1;
* the **figure in force** (``capacity: learned``): the configured one until an estimate exists, then the
  estimate **bounded** to ``[0.5, 2] x configured`` and moved only when the bounded estimate differs from the
  figure in force by more than the **hysteresis**, 10 % (``|bounded / in_force - 1| > 0.1``), so that a
  noisy estimate does not move the replicas back and forth.

What survives a restart (``snapshot`` / ``resume``, stored by ``scaler.serve.keeper``): the counted samples and
the figure in force. The saturated run in progress does not: a restart ends it (the time the server was down is
not known to have been saturated).

Pure: no clock (times are the caller's), no I/O.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

SETTLE_SECONDS = 120.0
WINDOW_SECONDS = 86400.0
MIN_SAMPLES = 10
MIN_QUEUE = 1.0  # waiting requests (summed over the replicas): at least one is "non-empty"
BOUNDS = (0.5, 2.0)  # the figure in force stays within these multiples of the configured one
HYSTERESIS = 0.10
MAX_SAMPLES = 4096  # per workload: ~34 h of saturation at a 30 s cadence


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


@dataclass(frozen=True)
class Learned:
    """What the learner holds now (for metrics and the status page)."""

    configured: float
    estimate: float | None  # req/s per ready replica, None before min_samples
    in_force: float
    samples: int  # counted samples in the window
    saturated: bool  # the latest sample was saturated

    @property
    def ratio(self) -> float | None:
        return None if self.estimate is None else self.estimate / self.configured

    @property
    def factor(self) -> float:
        """configured / in force: how much more (> 1) or less load a configured replica's share really is."""
        return self.configured / self.in_force


class CapacityLearner:
    def __init__(self, configured: float, *, settle: float = SETTLE_SECONDS, window: float = WINDOW_SECONDS,
                 min_samples: int = MIN_SAMPLES, min_queue: float = MIN_QUEUE, bounds: tuple[float, float] = BOUNDS,
                 hysteresis: float = HYSTERESIS, max_samples: int = MAX_SAMPLES) -> None:
        if not (_finite(configured) and configured > 0):
            raise ValueError(f"configured capacity {configured!r}: accepted is a finite number > 0")
        self.configured = float(configured)
        self.settle, self.window, self.min_samples = settle, window, min_samples
        self.min_queue, self.bounds, self.hysteresis = min_queue, bounds, hysteresis
        self._samples: deque[tuple[float, float]] = deque(maxlen=max_samples)  # (t, per-replica rate), counted
        self._run: tuple[float, float] | None = None  # (since, ready) of the current saturated run
        self._in_force = self.configured
        self._saturated = False
        self._estimate: float | None = None

    def observe(self, t: float, served: float | None, queue: float | None, ready: float | None) -> None:
        """One observation at time ``t`` (seconds, non-decreasing)."""
        if _finite(t):
            while self._samples and self._samples[0][0] < t - self.window:
                self._samples.popleft()
        if served is None or queue is None or ready is None or not (_finite(t) and _finite(served) and
                                                                    _finite(queue) and _finite(ready)):
            self._saturated = False
        else:
            self._saturated = served >= 0 and ready >= 1 and queue >= self.min_queue
        if not self._saturated:
            self._run = None  # idle, or a missing value: the run ends
        else:
            assert served is not None and ready is not None
            if self._run is None or self._run[1] != ready:
                self._run = (t, float(ready))
            if t - self._run[0] >= self.settle:
                self._samples.append((t, served / ready))
        self._update()

    def _update(self) -> None:
        if len(self._samples) < self.min_samples:
            self._estimate = None  # the figure in force stays what it was
            return
        xs = sorted(v for _, v in self._samples)
        n = len(xs)
        self._estimate = xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
        lo, hi = self.bounds
        bounded = min(max(self._estimate, lo * self.configured), hi * self.configured)
        if abs(bounded / self._in_force - 1.0) > self.hysteresis:
            self._in_force = bounded

    def snapshot(self) -> tuple[list[tuple[float, float]], float]:
        """The counted samples ``(t, per-replica rate)``, oldest first, and the figure in force."""
        return list(self._samples), self._in_force

    def resume(self, samples: list[tuple[float, float]], in_force: float, now: float) -> None:
        """A ``snapshot`` taken before a restart, its times on this learner's clock: the samples older than the
        window at ``now`` are dropped, the figure in force is kept (and moves only as ``observe`` would move it).
        ValueError (nothing changed) for a sample that is not finite, negative, later than ``now`` or out of order,
        more samples than the learner holds, or a figure in force outside the bounds."""
        lo, hi = self.bounds
        if not (_finite(in_force) and lo * self.configured * (1 - 1e-9) <= in_force <= hi * self.configured * (1 + 1e-9)):
            raise ValueError(f"capacity in force {in_force!r}: accepted is a number within {lo:g} .. {hi:g} x the "
                             f"configured {self.configured:g}")
        if len(samples) > (self._samples.maxlen or 0):
            raise ValueError(f"{len(samples)} samples: accepted at most {self._samples.maxlen}")
        last = -math.inf
        for t, v in samples:
            if not (_finite(t) and _finite(v) and v >= 0 and last <= t <= now):
                raise ValueError(f"sample ({t!r}, {v!r}): accepted finite times in order up to now, rates >= 0")
            last = t
        self._samples.clear()
        self._samples.extend((float(t), float(v)) for t, v in samples if t >= now - self.window)
        self._in_force, self._run, self._saturated = float(in_force), None, False
        self._update()

    def state(self) -> Learned:
        return Learned(self.configured, self._estimate, self._in_force, len(self._samples), self._saturated)

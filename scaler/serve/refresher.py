"""Observation refreshes: the instant queries behind every decision, on an I/O pool, bounded per target.

Split out of the registry (issue 22, item 7): the ``Registry`` keeps lookup
and the decision; this part runs the refreshes it schedules. Each refresh
evaluates the trigger's query (and its ``coldStartQuery`` when due) and writes
the result into the ``Workload`` under the registry's lock, waking the
workload's streams. At most ``per_target_refreshes`` run per Prometheus
address; more wait in a queue of their own target, so a hung target holds no
one else's I/O thread.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from ..limits import MAX_LEAD_SECONDS, MAX_RATE
from ..prom import PromError, PromErrorKind
from .identity import cut
from .load import observed_load
from .metrics import ScalerMetrics
from .opsmetrics import ops_metrics
from .ratelimit import LogLimiter
from .registryconfig import RegistryConfig
from .workload import Clock, Workload

log = logging.getLogger("scaler.serve.registry")


class Refresher:
    """Runs observation refreshes. ``changed``: the registry's condition (its lock guards every ``Workload``);
    ``tracked(wl)``: the workload is still the registry's; ``query_at``: instant queries' ``time=`` (None:
    Prometheus' own now)."""

    def __init__(self, changed: threading.Condition, clock: Clock, metrics: ScalerMetrics, config: RegistryConfig,
                 limiter: LogLimiter, tracked: Callable[[Workload], bool], query_at: Clock | None = None):
        self.changed = changed
        self.clock = clock
        self.metrics = metrics
        self.config = config
        self.limiter = limiter
        self.tracked = tracked
        self.query_at = query_at
        self.ops = ops_metrics(metrics)
        self._inflight: Counter[str] = Counter()  # refreshes in flight per Prometheus address
        self._waiting: dict[str, deque[Workload]] = {}  # refreshes due, queued behind their target's limit
        self._io = ThreadPoolExecutor(max_workers=config.io_workers, thread_name_prefix="prom")

    def stop(self) -> None:
        self._io.shutdown(wait=False, cancel_futures=True)

    def in_flight(self) -> int:
        """Caller holds the lock."""
        return sum(self._inflight.values())

    def submit(self, wl: Workload, now: float) -> bool:
        """Caller holds the lock. False, and the refresh stays due, while its target has
        ``per_target_refreshes`` in flight (a hung target holds no one else's I/O thread)."""
        target = wl.spec.prometheus.server_address
        if self._inflight[target] >= self.config.per_target_refreshes:
            if not wl.queued:  # started as soon as one of its target's refreshes ends
                wl.queued = True
                self._waiting.setdefault(target, deque()).append(wl)
            return False
        wl.refreshing = True
        wl.attempted_at = now
        try:
            self._io.submit(self._refresh, wl, target)
        except RuntimeError:  # pool shut down
            wl.refreshing = False
            return False
        self._inflight[target] += 1
        return True

    def _start_waiting(self, target: str, now: float) -> None:
        """Caller holds the lock: refreshes queued behind ``target``'s limit, as slots free up."""
        waiting = self._waiting.get(target)
        while waiting and self._inflight[target] < self.config.per_target_refreshes:
            w = waiting.popleft()
            w.queued = False
            if not w.refreshing and self.tracked(w):
                self.submit(w, now)
        if not waiting:
            self._waiting.pop(target, None)

    def _refresh(self, wl: Workload, target: str) -> None:
        spec = wl.spec
        observed: float | None = None
        error: PromError | None = None
        self.ops.queries.labels("observe").inc()
        try:  # evaluated at Prometheus' own now (no time=, as KEDA's Prometheus scaler): a skewed clock here moves nothing
            observed = min(MAX_RATE, max(0.0, observed_load(wl.client, spec, self._at())))
        except PromError as e:
            error = e
        except Exception as e:  # never let a refresher thread die silently
            error = PromError(PromErrorKind.UNREACHABLE, f"query failed: {type(e).__name__}")
            self.limiter.log(log, logging.ERROR, (*wl.labels, "crash"), "ScaledObject %s/%s: refresh failed: %s",
                             wl.namespace, wl.name, cut(repr(e), 300))
        now = self.clock()
        if spec.cold_start_query and (wl.cold_start_at is None or now - wl.cold_start_at >= self.config.cold_start_refresh_seconds):
            self._refresh_cold_start(wl, now)
        with self.changed:
            self._inflight[target] -= 1
            if self._inflight[target] <= 0:
                del self._inflight[target]
            wl.refreshing = False
            self._start_waiting(target, now)
            if error is None:
                wl.observed, wl.observed_at, wl.error = observed, now, None
            else:
                wl.error, wl.error_at = error, now
            wl.first_done.set()
            if wl.changed is not None:
                wl.changed.notify_all()  # this workload's streams only: 1,000 streams must not all wake per refresh
        if error is not None:
            self.metrics.prom_errors.labels(*wl.labels, error.kind.value).inc()
            self.limiter.log(log, logging.WARNING, (*wl.labels, error.kind.value), "ScaledObject %s/%s: %s",
                             wl.namespace, wl.name, error)

    def _at(self) -> float | None:
        return None if self.query_at is None else self.query_at()

    def _refresh_cold_start(self, wl: Workload, now: float) -> None:
        self.ops.queries.labels("cold_start").inc()
        try:
            v = wl.client.scalar(wl.spec.cold_start_query, self._at(), ignore_null=False)
            if v < 0:
                raise PromError(PromErrorKind.BAD_VALUE, f"coldStartQuery returned a negative value {v}")
            lead = wl.spec.lead.with_cold_start(v).seconds
            if lead > MAX_LEAD_SECONDS:
                wl.cold_start_error = PromError(
                    PromErrorKind.BAD_VALUE, f"coldStartQuery returned {v:g}s: the lead time would be {lead:g}s, above "
                                             f"the maximum {MAX_LEAD_SECONDS:g}s (MAX_LEAD_SECONDS)")
                wl.cold_start_at = now
                return
            wl.cold_start, wl.cold_start_at, wl.cold_start_error = v, now, None
        except PromError as e:
            # keep the last good T_cold, else coldStartSeconds stands in; say so once per attempt
            self.metrics.prom_errors.labels(*wl.labels, "cold_start_" + e.kind.value).inc()
            self.limiter.log(log, logging.WARNING, (*wl.labels, "cold_start"),
                             "ScaledObject %s/%s: coldStartQuery failed, using %s: %s", wl.namespace, wl.name,
                        f"last value {wl.cold_start:g}s" if wl.cold_start is not None
                        else f"coldStartSeconds={wl.spec.lead.cold_start_seconds:g}", e)

"""Observation refreshes: the instant queries behind every decision, on an I/O pool, in fair shares.

Split out of the registry (issue 22, item 7): the ``Registry`` keeps lookup
and the decision; this part runs the refreshes it schedules. Each refresh
evaluates the trigger's query (and its ``coldStartQuery`` when due) and writes
the result into the ``Workload`` under the registry's lock, waking the
workload's streams. A refresh starts only when its ``Gate`` lets it: at most
``per_target_refreshes`` in flight per Prometheus host:port, ``per_namespace_refreshes``
per namespace, and ``per_target_qps`` started per second per host:port. One that
cannot start stays due and holds no thread; the scheduler offers it again on its
next tick, oldest first. Whatever a refresh meets (an exception of any type at
any step), its slot is given back and its workload is marked done (issue 40, item 1).
"""

from __future__ import annotations

import logging
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from ..limits import MAX_LEAD_SECONDS, MAX_RATE
from ..prom import PromError, PromErrorKind
from .gate import Gate
from .identity import cut
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
        self.gate = Gate(config.per_target_refreshes, config.per_namespace_refreshes, config.per_target_qps)
        self._io = ThreadPoolExecutor(max_workers=config.io_workers, thread_name_prefix="prom")

    def stop(self) -> None:
        self._io.shutdown(wait=False, cancel_futures=True)

    def in_flight(self) -> int:
        return self.gate.in_flight()

    def submit(self, wl: Workload, now: float) -> bool:
        """Caller holds the lock. False, and the refresh stays due, while its host:port or its namespace is at
        its limit (a hung target holds no one else's I/O thread)."""
        url = wl.spec.prometheus.server_address
        if not self.gate.enter(url, wl.namespace, now):
            return False
        wl.refreshing = True
        wl.attempted_at = now
        try:
            self._io.submit(self._refresh, wl, url)
        except RuntimeError:  # pool shut down
            wl.refreshing = False
            self.gate.leave(url, wl.namespace)
            return False
        return True

    def _refresh(self, wl: Workload, url: str) -> None:
        observed: float | None = None
        error: PromError | None = None
        now = math.nan
        try:
            observed, error = self._observe(wl)
            now = self.clock()
            if wl.spec.cold_start_query and (wl.cold_start_at is None
                                             or now - wl.cold_start_at >= self.config.cold_start_refresh_seconds):
                self._refresh_cold_start(wl, now)
        except Exception as e:  # never let a refresher thread die silently, nor keep its slot
            error = error or PromError(PromErrorKind.UNREACHABLE, f"refresh failed: {type(e).__name__}")
            self._crash(wl, e)
        finally:
            self._done(wl, url, observed, error, now)

    def _observe(self, wl: Workload) -> tuple[float | None, PromError | None]:
        spec = wl.spec
        self.ops.queries.labels("observe").inc()
        try:  # evaluated at Prometheus' own now (no time=, as KEDA's Prometheus scaler): a skewed clock here moves nothing
            v = wl.client.scalar(spec.query, self._at(), ignore_null=spec.ignore_null_values)
            return min(MAX_RATE, max(0.0, v)), None
        except PromError as e:
            return None, e
        except Exception as e:
            self._crash(wl, e)
            return None, PromError(PromErrorKind.UNREACHABLE, f"query failed: {type(e).__name__}")

    def _crash(self, wl: Workload, e: Exception) -> None:
        try:
            self.limiter.log(log, logging.ERROR, (*wl.labels, "crash"), "ScaledObject %s/%s: refresh failed: %s",
                             wl.namespace, wl.name, cut(repr(e), 300))
        except Exception:  # noqa: BLE001 - the log itself must not keep the slot
            pass

    def _done(self, wl: Workload, url: str, observed: float | None, error: PromError | None, now: float) -> None:
        """The refresh's slot back, its result written and its workload woken, whatever happened before."""
        if now != now:
            now = self.clock()
        self.gate.leave(url, wl.namespace)
        with self.changed:
            wl.refreshing = False
            if error is None and observed is not None:
                wl.observed, wl.observed_at, wl.error = observed, now, None
            else:
                wl.error, wl.error_at = error, now
            wl.first_done.set()
            if wl.changed is not None:
                wl.changed.notify_all()  # this workload's streams only: 1,000 streams must not all wake per refresh
        if error is not None:
            try:
                self.metrics.prom_errors.labels(*wl.labels, error.kind.value).inc()
                self.limiter.log(log, logging.WARNING, (*wl.labels, error.kind.value), "ScaledObject %s/%s: %s",
                                 wl.namespace, wl.name, error)
            except Exception:  # noqa: BLE001 - the result is written; a failing export must not escape the pool
                pass

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
        except Exception as e:  # any failure: keep the last good T_cold, else coldStartSeconds stands in
            err = e if isinstance(e, PromError) else PromError(PromErrorKind.UNREACHABLE, type(e).__name__)
            self.metrics.prom_errors.labels(*wl.labels, "cold_start_" + err.kind.value).inc()
            self.limiter.log(log, logging.WARNING, (*wl.labels, "cold_start"),
                             "ScaledObject %s/%s: coldStartQuery failed, using %s: %s", wl.namespace, wl.name,
                             f"last value {wl.cold_start:g}s" if wl.cold_start is not None
                             else f"coldStartSeconds={wl.spec.lead.cold_start_seconds:g}", err)

"""Observation refreshes: the instant queries behind every decision, on an I/O pool, in fair shares.

Split out of the registry (issue 22, item 7): the ``Registry`` keeps lookup
and the decision; this part runs the refreshes it schedules. Each refresh
evaluates the trigger's query (and its ``coldStartQuery`` when due) and writes
the result into the ``Workload`` under the registry's lock, waking the
workload's streams. A refresh starts only when its ``Gate`` lets it: at most
``per_target_refreshes`` in flight per Prometheus host:port, ``per_namespace_refreshes``
per namespace, and ``per_target_qps`` started per second per host:port (a
trigger's first refresh aside). One that cannot start waits in its host's queue,
holding no thread, and starts as soon as a slot frees (or the scheduler's next
tick finds tokens), oldest first. Whatever a refresh meets (an exception of any type at
any step), its slot is given back and its workload is marked done (issue 40, item 1).

No usable value (no series, NaN) with ``ignoreNullValues: true`` (issue 36, item 1): a real zero when the trigger
had no series before or its last one was idle (at or below ``activationThreshold``: the workload scaled to zero
and its series went with its pods); otherwise the observation is *missing* (``missing_since``): the last good one
is held and the registry decides on it with reason ``fallback_missing_data`` until it is too old
(``cadence.stale_after``), then UNAVAILABLE. With ``ignoreNullValues: false`` it is the error NO_DATA.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from .. import feedback
from ..limits import MAX_LEAD_SECONDS, MAX_RATE
from ..params import loop_targets
from ..prom import PromError, PromErrorKind
from .gate import Gate, host_port
from .identity import cut
from . import llmstate
from .load import Observed, observe, observed_signals
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
                 limiter: LogLimiter, tracked: Callable[[Workload], bool], query_at: Clock | None = None,
                 wall: Clock | None = None, keeper=None):
        self.changed = changed
        self.clock = clock
        self.metrics = metrics
        self.config = config
        self.limiter = limiter
        self.tracked = tracked
        self.query_at = query_at
        self.wall = wall or clock  # the LLM history's rows are on the wall clock (the status page's time axis)
        self.keeper = keeper  # what the trigger learned, kept across a restart (scaler.serve.keeper); None: not kept
        self.ops = ops_metrics(metrics)
        self.gate = Gate(config.per_target_refreshes, config.per_namespace_refreshes, config.per_target_qps)
        self._waiting: dict[str, deque[Workload]] = {}  # per host:port: refreshes due, waiting for a slot
        self._io = ThreadPoolExecutor(max_workers=config.io_workers, thread_name_prefix="prom")

    def stop(self) -> None:
        self._io.shutdown(wait=False, cancel_futures=True)

    def in_flight(self) -> int:
        return self.gate.in_flight()

    def submit(self, wl: Workload, now: float) -> bool:
        """Caller holds the lock. False when its host:port, its namespace or the host's rate is at its limit: then
        it waits in its host's queue, holding no thread, and starts as soon as a slot frees (``drain``)."""
        if wl.queued or wl.refreshing:
            return False
        why = self._start(wl, now)
        if why is None:
            return True
        wl.queued = True
        waiting = self._waiting.setdefault(host_port(wl.spec.prometheus.server_address), deque())
        if wl.attempted_at is None:  # a new trigger's first refresh (its first call waits for it): at the front
            waiting.appendleft(wl)
        else:
            waiting.append(wl)
        return False

    def _start(self, wl: Workload, now: float) -> str | None:
        """Caller holds the lock: the refresh started (None), or the limit that refused it."""
        url = wl.spec.prometheus.server_address
        why = self.gate.admit(url, wl.namespace, now, rated=wl.attempted_at is not None)  # a first one: no rate
        if why is not None:
            return why
        wl.refreshing = True
        wl.attempted_at = now
        try:
            self._io.submit(self._refresh, wl, url)
        except RuntimeError:  # pool shut down
            wl.refreshing = False
            self.gate.leave(url, wl.namespace)
            return "stopped"
        return None

    def drain(self, now: float, host: str | None = None) -> None:
        """Caller holds the lock: start what waits (for ``host``, or every host), oldest first, while the limits
        let it; one refused by its namespace goes to the back, one refused by the host or its rate stops the host."""
        for h in [host] if host is not None else list(self._waiting):
            waiting = self._waiting.get(h)
            if waiting is None:
                continue
            for _ in range(len(waiting)):
                w = waiting.popleft()
                if not self.tracked(w) or w.refreshing:
                    w.queued = False
                    continue
                why = self._start(w, now)
                if why is None:
                    w.queued = False
                    continue
                waiting.append(w)
                if why != "namespace":
                    break
            if not waiting:
                self._waiting.pop(h, None)

    def waiting(self) -> int:
        """Caller holds the lock: refreshes waiting for a slot."""
        return sum(len(q) for q in self._waiting.values())

    def _refresh(self, wl: Workload, url: str) -> None:
        observed: float | None = None
        error: PromError | None = None
        now = math.nan
        try:
            if self.keeper is not None and not wl.restored:  # before the loop steps or the learner observes
                self.keeper.restore(wl)
            observed, error, parts = self._observe(wl)
            signals = None
            if wl.spec.loop.queries():  # the model server's state, next to the rate (never on an RPC)
                self.ops.queries.labels("signals").inc()
                signals = observed_signals(wl.client, wl.spec, self._at())
                with self.changed:
                    self._loop_step(wl, *signals, self.clock())
            now = self.clock()
            if llmstate.applies(wl.spec):  # the capacity learned online, the token mix's history
                with self.changed:
                    llmstate.note(wl.llm, wl.spec, wl.labels, parts, None if signals is None else signals[0], now,
                                  self.wall(), self.metrics, settle=self.config.capacity_settle_seconds,
                                  min_samples=self.config.capacity_min_samples)
            if self.keeper is not None:
                self.keeper.maybe_save(wl)
            if wl.spec.cold_start_query and (wl.cold_start_at is None
                                             or now - wl.cold_start_at >= self.config.cold_start_refresh_seconds):
                self._refresh_cold_start(wl, now)
        except Exception as e:  # never let a refresher thread die silently, nor keep its slot
            error = error or PromError(PromErrorKind.UNREACHABLE, f"refresh failed: {type(e).__name__}")
            self._crash(wl, e)
        finally:
            self._done(wl, url, observed, error, now)

    def _observe(self, wl: Workload) -> tuple[float | None, PromError | None, Observed | None]:
        """The observed rate, None for no usable value (no series, NaN), or the error: ``ignoreNullValues`` is
        applied by ``_done``, which knows what the trigger saw before; and the observation's parts (None: none)."""
        spec = wl.spec
        self.ops.queries.labels("observe").inc()
        try:  # evaluated at Prometheus' own now (no time=, as KEDA's Prometheus scaler): a skewed clock here moves nothing
            parts = observe(wl.client, spec, self._at(), ignore_null=False)
            return min(MAX_RATE, max(0.0, parts.load)), None, parts
        except PromError as e:
            if e.kind is PromErrorKind.NO_DATA and spec.ignore_null_values:
                return None, None, None
            return None, e, None
        except Exception as e:
            self._crash(wl, e)
            return None, PromError(PromErrorKind.UNREACHABLE, f"query failed: {type(e).__name__}"), None

    def _loop_step(self, wl: Workload, signals: feedback.Signals, why: dict[str, str], now: float) -> None:
        """Caller holds the lock: the signals kept (and exported), and the closed loop's state stepped on them
        (``scaler.feedback``; ``dt`` since the previous signals, the replicas asked for from the last value served)."""
        dt = math.nan if wl.signals_at is None else now - wl.signals_at
        wl.signals, wl.signals_at, wl.signals_why = signals, now, why
        for name, query in wl.spec.loop.queries():
            v = getattr(signals, name)
            if v == v:
                self.metrics.signal.labels(*wl.labels, name).set(v)
            else:  # unknown: no series rather than a stale or a zero one
                self.metrics.drop_signal(wl.labels, name)
        targets = loop_targets(wl.spec)
        if targets is None:
            return
        asked = math.nan if wl.answered is None else float(math.ceil(wl.answered / wl.spec.qps_per_replica - 1e-9))
        wl.loop = feedback.step(wl.loop, signals, targets, now=now, dt=dt, asked=asked,
                                settle_seconds=wl.lead().seconds)

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
            self.drain(now, host_port(url))
            if error is not None:
                wl.error, wl.error_at = error, now
            elif observed is not None:
                wl.observed, wl.observed_at, wl.error, wl.missing_since = observed, now, None, None
            elif wl.observed is None or wl.observed <= wl.spec.activation_threshold:
                # no series, and none (or an idle one) before: a real zero (the workload is gone, or not yet there)
                wl.observed, wl.observed_at, wl.error, wl.missing_since = 0.0, now, None, None
            else:  # no series where one was active: missing, not zero (the last good observation is held)
                wl.error, wl.missing_at = None, now
                if wl.missing_since is None:
                    wl.missing_since = now
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

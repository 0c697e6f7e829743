"""``coldStartFrom: cluster`` in the server: one kube-state-metrics instant query per ScaledObject per refit.

``ColdStartService.maybe_refresh`` is called by the registry's scheduler tick
for every workload. For a trigger with ``coldStartFrom: cluster`` it starts
a query (on its own small I/O pool, never an RPC thread) when none was made
yet, every ``refitInterval`` after a success, and ``RETRY_SECONDS`` (at most the
refit interval) after a failure. The result (``ClusterReading``) goes to the
registry's ``adopt`` callback, which keeps it if the keys did not change.

A failing query keeps the last estimate (the error is logged and counted);
once the estimate is older than ``stale_after`` (2 x refitInterval, at least
10 minutes) it is marked stale and the fallback (the probe's metric, else
coldStartSeconds) stands in: the lead never stays frozen on an old figure.
Staleness is judged on every tick, so a query that hangs changes nothing.

Exported (on the scaler's registry, one set per ScaledObject):

    forescale_cold_start_seconds{namespace,scaledobject,source,phase}
        source=cluster: phase total (T_cold) and its phases; source=probe: the
        coldStartQuery value (phase total); source=in_force: the T_cold the lead
        uses (phase total)
    forescale_cold_start_in_force{namespace,scaledobject,source}   1 for cluster | probe | config
    forescale_cold_start_samples{namespace,scaledobject,outcome}   counted, or a skip reason
    forescale_cold_start_probe_ratio{namespace,scaledobject}       probe / cluster, both present
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable

from prometheus_client import Gauge

from ..coldstart import ClusterReading, ColdStartEstimate, cross_check, estimate
from ..coldstart_ksm import KsmShapeError, ksm_versions_note, pods_from_vector, pods_instant_query, step_for
from ..limits import MAX_LEAD_SECONDS, MAX_RANGE_BODY_BYTES
from ..prom import PromError, PromErrorKind
from .gate import Gate
from .metrics import ScalerMetrics, drop_series
from .opsmetrics import attached, ops_metrics

if TYPE_CHECKING:
    from .workload import Workload

log = logging.getLogger(__name__)

RETRY_SECONDS = 60.0
MIN_STALE_SECONDS = 600.0
IN_FORCE = ("cluster", "probe", "config")
SO = ("namespace", "scaledobject", "trigger")  # per trigger, as every per-trigger series (serve.metrics)

AdoptReading = Callable[["Workload", ClusterReading], bool]


class ColdStartMetrics:
    def __init__(self, metrics: ScalerMetrics):
        r = metrics.registry
        self.seconds = Gauge("forescale_cold_start_seconds", "T_cold and its phases, by source (cluster: measured from "
                             "the pods' start-ups; probe: coldStartQuery; in_force: what the lead uses)",
                             SO + ("source", "phase"), registry=r)
        self.in_force = Gauge("forescale_cold_start_in_force", "1 for where the T_cold in force comes from",
                              SO + ("source",), registry=r)
        self.samples = Gauge("forescale_cold_start_samples", "Pod start-ups in the window: counted, or skipped by reason",
                             SO + ("outcome",), registry=r)
        self.ratio = Gauge("forescale_cold_start_probe_ratio", "The probe's T_cold / the cluster's (both present)", SO,
                           registry=r)


def cold_start_metrics(metrics: ScalerMetrics) -> ColdStartMetrics:
    """The one set of cold-start gauges on a ``ScalerMetrics``' registry (made on first use)."""
    return attached(metrics, ColdStartMetrics)


class ColdStartService:
    def __init__(self, clock: Callable[[], float], metrics: ScalerMetrics, workers: int = 4):
        self.clock = clock
        self.ops = ops_metrics(metrics)
        self.prom_errors = metrics.prom_errors
        m = cold_start_metrics(metrics)
        self.seconds, self.in_force, self.samples, self.ratio = m.seconds, m.in_force, m.samples, m.ratio
        self._lock = threading.Lock()
        self._busy: set[tuple] = set()
        self._attempt: dict[tuple, tuple[float, bool]] = {}  # key -> (when, succeeded)
        self._warned: dict[tuple, str] = {}
        self._exported: dict[tuple, tuple] = {}  # key -> what its gauges show (T_cold, source, probe; the reading)
        self._io = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="coldstart")
        self.gate = Gate(max(1, workers // 2), max(1, workers // 2))  # a hung host or namespace: half the threads

    # -- scheduling (the registry's tick) ------------------------------------------------------------------------
    def maybe_refresh(self, wl: "Workload", now: float, adopt: AdoptReading) -> None:
        source = wl.spec.cold_start_cluster
        if source is not None:
            reading = wl.cluster_cold
            if reading is not None and reading.source == source and not reading.stale and reading.at is not None \
                    and now - reading.at > self.stale_after(wl):
                adopt(wl, ClusterReading(source, reading.estimate, reading.at, reading.error or "not renewed", True))
            with self._lock:
                last = self._attempt.get(wl.key)
                due = last is None or now - last[0] >= (wl.spec.refit_interval_seconds if last[1]
                                                        else min(RETRY_SECONDS, wl.spec.refit_interval_seconds))
                if reading is None or reading.source != source:
                    due = True
                due = due and wl.key not in self._busy
                url = wl.spec.prometheus.server_address
                # its host:port or namespace at its share of the threads: stays due, holding none (issue 40, item 4)
                due = due and self.gate.enter(url, wl.namespace, now)
                if due:
                    self._busy.add(wl.key)
                    self._attempt[wl.key] = (now, False)
            if due:
                try:
                    self._io.submit(self._refresh, wl, source, now, adopt, url)
                except RuntimeError:  # shut down
                    self.gate.leave(url, wl.namespace)
                    with self._lock:
                        self._busy.discard(wl.key)
            self._log(wl)
        self.export(wl)

    @staticmethod
    def stale_after(wl: "Workload") -> float:
        return max(MIN_STALE_SECONDS, 2 * wl.spec.refit_interval_seconds)

    def _refresh(self, wl: "Workload", source, at: float, adopt: AdoptReading, url: str) -> None:
        prior = wl.cluster_cold if wl.cluster_cold is not None and wl.cluster_cold.source == source else None
        ok = False
        try:
            self.ops.queries.labels("cold_start_cluster").inc()
            step = step_for(source.window_seconds)
            try:  # one point per pod and term (issue 40, item 10): ~1.2 MB for 1,000 pods, under the 8 MiB cap
                result = wl.client.instant(pods_instant_query(wl.namespace, source, step), at,
                                           max_bytes=MAX_RANGE_BODY_BYTES)
            except PromError as e:
                if e.kind is not PromErrorKind.TOO_LARGE:
                    raise
                raise PromError(e.kind, f"the kube-state-metrics answer for {source.describe()} is over "
                                        f"{MAX_RANGE_BODY_BYTES >> 20} MiB (about 50,000 pods in the window): a "
                                        "shorter coldStartWindow or a narrower coldStartSelector") from None
            pods = pods_from_vector(result, source)
            est = estimate(pods, source, at)
            if est.seconds is None and est.reason:
                est = ColdStartEstimate(None, est.quantile, est.samples, est.phases, est.skipped,
                                        est.reason + ksm_versions_note(pods), est.durations)
            elif est.seconds is not None and wl.spec.lead.with_cold_start(est.seconds).seconds > MAX_LEAD_SECONDS:
                est = ColdStartEstimate(None, est.quantile, est.samples, (), est.skipped,
                                        f"the cluster's T_cold {est.seconds:g}s makes the lead exceed the maximum "
                                        f"{MAX_LEAD_SECONDS:g}s (MAX_LEAD_SECONDS)", est.durations)
            reading = ClusterReading(source, est, at, "", False)
            ok = True
        except (PromError, KsmShapeError) as e:
            kind = e.kind.value if isinstance(e, PromError) else "bad_value"
            self.prom_errors.labels(*wl.labels, "cold_start_cluster_" + kind).inc()
            why = f"kube-state-metrics query failed: {e}"
            reading = ClusterReading(source, prior.estimate if prior else None, prior.at if prior else None, why,
                                     prior.stale if prior else False)
        except Exception as e:  # never let the thread die silently
            reading = ClusterReading(source, prior.estimate if prior else None, prior.at if prior else None,
                                     f"kube-state-metrics query failed: {type(e).__name__}",
                                     prior.stale if prior else False)
            log.exception("ScaledObject %s/%s: cold-start query crashed", wl.namespace, wl.name)
        finally:
            self.gate.leave(url, wl.namespace)
            with self._lock:
                self._busy.discard(wl.key)
                tracked = wl.key in self._attempt  # forgotten meanwhile: leave no series behind
                if ok and tracked:
                    self._attempt[wl.key] = (at, True)
        if tracked and adopt(wl, reading):
            self._log(wl)
            self.export(wl)

    def _log(self, wl: "Workload") -> None:
        """Say once what changed: where T_cold comes from and why, or the probe's warning."""
        t = wl.t_cold()
        r = wl.cluster_cold
        ratio, warning = cross_check(wl.cold_start, r.estimate.seconds if r and r.estimate else None)
        msg = f"T_cold {t.seconds:g}s from {t.source}" + (f": {t.reason}" if t.reason else "") + \
            (f"; {warning}" if warning else "")
        if self._warned.get(wl.key) != msg:
            self._warned[wl.key] = msg
            log.log(logging.INFO if t.source == "cluster" and not warning else logging.WARNING,
                    "ScaledObject %s/%s: %s", wl.namespace, wl.name, msg)

    # -- metrics -------------------------------------------------------------------------------------------------
    def export(self, wl: "Workload") -> None:
        lb = wl.labels
        t = wl.t_cold()
        shown, reading = (t.seconds, t.source, wl.cold_start), wl.cluster_cold
        with self._lock:  # every tick asks for every trigger: the gauges are set only when what they show changed
            prev = self._exported.get(wl.key)
            if prev is not None and prev[0] == shown and prev[1] is reading:  # a new reading is a new object
                return
            self._exported[wl.key] = (shown, reading)
        self.seconds.labels(*lb, "in_force", "total").set(t.seconds)
        for s in IN_FORCE:
            self.in_force.labels(*lb, s).set(1.0 if s == t.source else 0.0)
        if wl.cold_start is not None:
            self.seconds.labels(*lb, "probe", "total").set(wl.cold_start)
        r = wl.cluster_cold
        est = r.estimate if r is not None else None
        if est is None:
            return
        self.samples.labels(*lb, "counted").set(est.samples)
        for reason, count in est.skipped:
            self.samples.labels(*lb, reason).set(count)
        if est.seconds is None:
            drop_series(self.seconds, lambda k: k[:3] == lb and k[3] == "cluster")
            return
        self.seconds.labels(*lb, "cluster", "total").set(est.seconds)
        for phase, v in est.phases:
            self.seconds.labels(*lb, "cluster", phase).set(v)
        ratio, _ = cross_check(wl.cold_start, est.seconds)
        if ratio is not None:
            self.ratio.labels(*lb).set(ratio)

    def forget(self, wl: "Workload") -> None:
        for metric in (self.seconds, self.in_force, self.samples, self.ratio):
            drop_series(metric, lambda k: k[:3] == wl.labels)
        with self._lock:
            self._attempt.pop(wl.key, None)
            self._warned.pop(wl.key, None)
            self._exported.pop(wl.key, None)

    def stop(self) -> None:
        self._io.shutdown(wait=False, cancel_futures=True)


__all__ = ["ColdStartService", "ColdStartMetrics", "cold_start_metrics"]

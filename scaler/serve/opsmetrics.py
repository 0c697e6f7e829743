"""Metrics of the scaler's own operation (query budget, connections, worker supervision), next to ``ScalerMetrics``.

``ops_metrics(metrics)`` gives the one ``OpsMetrics`` registered on a
``ScalerMetrics``' registry (made on first use); no label names a ScaledObject,
so nothing here grows with their number.
"""

from __future__ import annotations

import threading
import weakref

from prometheus_client import Counter, Gauge

from .metrics import ScalerMetrics


class OpsMetrics:
    def __init__(self, metrics: ScalerMetrics):
        r = metrics.registry
        self.queries = Counter("forescale_prometheus_queries_total",
                               "Queries sent to Prometheus, by purpose (observe, cold_start, history; signals: one per refresh of the closed loop's queries)", ("purpose",),
                               registry=r)
        self.late = Counter("forescale_refresh_late_total",
                            "Refreshes started later than their ScaledObject's refresh interval plus one tick", registry=r)
        self.connections = Gauge("forescale_prometheus_connections", "TCP connections to Prometheus held now", registry=r)
        self.in_flight = Gauge("forescale_prometheus_in_flight", "Prometheus requests in flight now", registry=r)
        self.worker_restarts = Counter("forescale_fit_worker_restarts_total",
                                       "Fit worker pools replaced after a worker died", registry=r)
        self.fit_retries = Counter("forescale_fit_retries_total", "Fits retried once after a worker died", registry=r)
        self.streams = Gauge("forescale_open_streams", "StreamIsActive/StreamMetricSpec streams open now", registry=r)
        self.streams_refused = Counter("forescale_streams_refused_total",
                                       "Streams refused with RESOURCE_EXHAUSTED (the stream limit was reached)",
                                       registry=r)
        self.state_errors = Counter("forescale_state_errors_total",
                                    "State files not written (write: the state dir is full, gone or read-only; "
                                    "write_too_large: over MAX_STATE_FILE_BYTES) or refused on read", ("op",),
                                    registry=r)
        self.state_writable = Gauge("forescale_state_writable",
                                    "1 when the last state write succeeded, 0 when it failed", registry=r)
        self.grpc_tls = Gauge("forescale_grpc_tls_enabled",
                              "1 when the gRPC port serves TLS (2: mutual TLS), 0 when it is plaintext", registry=r)


_BY_METRICS: "weakref.WeakKeyDictionary[ScalerMetrics, dict[type, object]]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def attached(metrics: ScalerMetrics, kind: type):
    """The one ``kind(metrics)`` (a set of series on ``metrics``' registry) per ``ScalerMetrics``, made on first use."""
    with _LOCK:
        per = _BY_METRICS.setdefault(metrics, {})
        got = per.get(kind)
        if got is None:
            got = per[kind] = kind(metrics)
        return got


def ops_metrics(metrics: ScalerMetrics) -> OpsMetrics:
    return attached(metrics, OpsMetrics)

"""The KEDA ExternalScaler servicer: translation between proto and domain only.

Every RPC reads the ``Registry`` (memory); errors become gRPC status codes in
one place (``_fail``). Values follow KEDA's rules: the float field is set and
the deprecated int field carries its ceiling; exactly one MetricValue.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections import Counter
from typing import Iterator

import grpc

from .._proto import externalscaler_pb2 as pb
from .._proto import externalscaler_pb2_grpc as pb_grpc
from .opsmetrics import ops_metrics
from .identity import cut
from .registry import Registry
from .workload import ScalerError, Workload

log = logging.getLogger(__name__)

_CODES = {name: getattr(grpc.StatusCode, name) for name in
          ("INVALID_ARGUMENT", "UNAVAILABLE", "FAILED_PRECONDITION", "NOT_FOUND", "INTERNAL", "RESOURCE_EXHAUSTED")}
STREAM_RECHECK_SECONDS = 1.0


def _ceil_int(x: float) -> int:
    if not math.isfinite(x) or x <= 0:
        return 0
    return int(math.ceil(x - 1e-9))


class ExternalScalerServicer(pb_grpc.ExternalScalerServicer):
    def __init__(self, registry: Registry, max_streams: int = 1000, max_streams_per_namespace: int = 100):
        self.registry = registry
        self.max_streams = max_streams  # each open stream holds a gRPC worker thread: bounded
        self.max_streams_per_namespace = max_streams_per_namespace  # one caller's share (issue 40, item 8)
        self._streams = 0
        self._by_namespace: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.ops = ops_metrics(registry.metrics)

    @contextlib.contextmanager
    def _stream_slot(self, namespace: str):
        with self._lock:
            if self._streams >= self.max_streams:
                self.ops.streams_refused.inc()
                raise ScalerError("RESOURCE_EXHAUSTED",
                                  f"{self.max_streams} streams are open, the most this scaler serves (max_streams); "
                                  "use polling (external) or raise the limit")
            if self._by_namespace[namespace] >= self.max_streams_per_namespace:
                self.ops.streams_refused.inc()
                raise ScalerError("RESOURCE_EXHAUSTED",
                                  f"{self.max_streams_per_namespace} streams are open for namespace {cut(namespace)}, "
                                  "the most one namespace holds (max_streams_per_namespace); use polling (external)")
            self._streams += 1
            self._by_namespace[namespace] += 1
            self.ops.streams.set(self._streams)
        try:
            yield
        finally:
            with self._lock:
                self._streams -= 1
                self._by_namespace[namespace] -= 1
                if self._by_namespace[namespace] <= 0:
                    del self._by_namespace[namespace]
                self.ops.streams.set(self._streams)

    # -- error mapping: the one place ------------------------------------------
    def _fail(self, context: grpc.ServicerContext, method: str, err: Exception):
        if isinstance(err, ScalerError):
            code, msg = _CODES.get(err.code, grpc.StatusCode.INTERNAL), str(err)
        else:
            log.exception("%s failed", method)
            code, msg = grpc.StatusCode.INTERNAL, f"internal error: {type(err).__name__}"
        self.registry.metrics.rpc_errors.labels(method, code.name).inc()
        context.abort(code, msg)

    def _workload(self, ref: pb.ScaledObjectRef) -> Workload:
        return self.registry.workload(ref.namespace, ref.name, dict(ref.scalerMetadata))

    def _active(self, wl: Workload) -> bool:
        d = self.registry.decision(wl)
        active = d.planned > wl.spec.activation_threshold
        self.registry.note_active(wl, d, active)  # its metrics (at zero replicas KEDA asks IsActive only), the log
        return active

    def _spec(self, wl: Workload) -> pb.GetMetricSpecResponse:
        target = wl.spec.qps_per_replica
        return pb.GetMetricSpecResponse(metricSpecs=[
            pb.MetricSpec(metricName=wl.spec.metric_name, targetSize=_ceil_int(target), targetSizeFloat=target)])

    # -- RPCs ------------------------------------------------------------------
    def IsActive(self, request, context):
        try:
            return pb.IsActiveResponse(result=self._active(self._workload(request)))
        except Exception as e:
            self._fail(context, "IsActive", e)

    def GetMetricSpec(self, request, context):
        try:
            # the spec is static (KEDA rebuilds the HPA target only on spec changes): no wait for data
            wl = self.registry.workload(request.namespace, request.name, dict(request.scalerMetadata), wait=False)
            return self._spec(wl)
        except Exception as e:
            self._fail(context, "GetMetricSpec", e)

    def GetMetrics(self, request, context):
        try:
            wl = self._workload(request.scaledObjectRef)
            self.registry.match_metric(wl, request.metricName)
            d = self.registry.decision(wl)
            self.registry.record(wl, d)  # metrics, live scoring and the decision log (decision() changes nothing)
            value = d.planned
            if not math.isfinite(value) or value < 0:  # never sent; the spec's ranges keep the math finite
                raise ScalerError("INTERNAL", f"ScaledObject {wl.namespace}/{wl.name}: the planned value is not a "
                                              "finite number >= 0")
            return pb.GetMetricsResponse(metricValues=[
                pb.MetricValue(metricName=wl.spec.metric_name, metricValue=_ceil_int(value), metricValueFloat=value)])
        except Exception as e:
            self._fail(context, "GetMetrics", e)

    def StreamIsActive(self, request, context) -> Iterator[pb.IsActiveResponse]:
        """The current state at once, then every change. Errors end the stream with their status."""
        last: bool | None = None
        try:
            with self._stream_slot(request.namespace):
                wl = self._workload(request)
                while context.is_active() and not self.registry.stopping:
                    now_active = self._active(wl)
                    if now_active != last:
                        last = now_active
                        yield pb.IsActiveResponse(result=now_active)
                    self.registry.wait_changed(wl, STREAM_RECHECK_SECONDS)
                    # keep the workload alive while KEDA holds the stream open (not a poll: no cadence learned)
                    wl = self.registry.workload(request.namespace, request.name, dict(request.scalerMetadata),
                                                poll=False)
        except Exception as e:
            self._fail(context, "StreamIsActive", e)

    def StreamMetricSpec(self, request, context) -> Iterator[pb.GetMetricSpecResponse]:
        """The current spec at once; then again only if it changes (it is static per metadata)."""
        try:
            with self._stream_slot(request.namespace):
                wl = self.registry.workload(request.namespace, request.name, dict(request.scalerMetadata), wait=False)
                sent = self._spec(wl)
                yield sent
                while context.is_active() and not self.registry.stopping:
                    self.registry.wait_stopping(STREAM_RECHECK_SECONDS)
                    spec = self._spec(wl)
                    if spec != sent:
                        sent = spec
                        yield spec
        except Exception as e:
            self._fail(context, "StreamMetricSpec", e)

"""A real forescale server in this process (fake clock), driven over real gRPC on loopback."""

from __future__ import annotations

import math
import time
import urllib.request

import grpc
from prometheus_client.parser import text_string_to_metric_families

from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.serve.registry import RegistryConfig
from scaler.serve.server import Server, ServerConfig

from .clock import FakeClock


class Scaler:
    def __init__(self, clock: FakeClock, state_dir=None, server: dict | None = None, **registry):
        """``server``: more ``ServerConfig`` fields (``events_dirs``, ...); the rest are ``RegistryConfig``'s."""
        # the fake clock jumps when a test advances it: that is not a frozen process (stall_seconds off)
        registry = {"stall_seconds": math.inf, **registry}
        cfg = ServerConfig(host="127.0.0.1", grpc_port=0, http_port=0, grace_seconds=1.0, state_dir=state_dir,
                           registry=RegistryConfig(**registry), **(server or {}))
        self.clock = clock
        self.server = Server(cfg, clock=clock).start()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.server.grpc_port}")
        self.stub = pb_grpc.ExternalScalerStub(self.channel)

    def ref(self, md: dict, name: str = "llm", namespace: str = "serving") -> pb.ScaledObjectRef:
        return pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=md)

    def value(self, md: dict, **kw) -> pb.MetricValue:
        ref = self.ref(md, **kw)
        resp = self.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref, metricName=""), timeout=5)
        assert len(resp.metricValues) == 1
        return resp.metricValues[0]

    def metrics(self) -> dict:
        body = urllib.request.urlopen(f"http://127.0.0.1:{self.server.http_port}/metrics", timeout=5).read().decode()
        out = {}
        for fam in text_string_to_metric_families(body):
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def close(self) -> None:
        self.channel.close()
        self.server.stop(grace=1.0)


def wait_for_fit(s: Scaler, name: str, timeout: float = 240.0):
    """The workload ``name`` once its first fit is adopted and no fit runs (AssertionError: unusable, or none in
    ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for wl in s.server.registry.workloads():
            fitting = s.server.forecasts.fitting(wl)
            if wl.name == name and wl.forecast.forecast is not None and not fitting:
                return wl
            if wl.name == name and wl.forecast.unusable is not None and not fitting:
                raise AssertionError(f"fit unusable: {wl.forecast.unusable} {wl.forecast.detail}")
        time.sleep(0.2)
    raise AssertionError("no forecast in time")

"""``python -m scaler.drill.scaler``: the real forescale server, on a compressed clock, that records each answer.

The drill runs the trace k times faster than it happened. forescale's own clock is then the trace's clock:
``clock() = origin + k x (time.time() - wall_origin)`` (forecast times, KEDA's answers, Prometheus' query
times, pinned with ``time=``), and its ages and intervals run k times faster too (``monotonic``). Prometheus
holds the trace at the trace's own timestamps, so every PromQL window (``rate(x[2m])``, the 5 min lookback)
keeps its meaning. Everything else is ``forescale serve``: the same ``Server``, the same decision.

Every unary answer (GetMetricSpec, GetMetrics, IsActive) is written as one JSON line to ``--record``: the wall
and the drill time it was made at, the method, the ScaledObject, the value (or the gRPC status of an error).
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from pathlib import Path
from typing import Callable

import grpc

from ..serve.registryconfig import RegistryConfig
from ..serve.logs import setup_logging
from ..serve.server import Server, ServerConfig


def warp(origin: float, k: float, wall_origin: float, base: Callable[[], float]) -> Callable[[], float]:
    """A clock that reads ``origin`` at ``base() == wall_origin`` and runs ``k`` times as fast."""
    return lambda: origin + k * (base() - wall_origin)


class Recorder(grpc.ServerInterceptor):
    """Writes every unary answer of the ExternalScaler service as a JSON line (thread-safe, flushed per line)."""

    def __init__(self, path: Path, clock: Callable[[], float]):
        self.clock = clock
        self.lock = threading.Lock()
        self.out = open(path, "a", buffering=1, encoding="utf-8")

    def close(self) -> None:
        with self.lock:
            self.out.close()

    def write(self, doc: dict) -> None:
        with self.lock:
            if not self.out.closed:
                self.out.write(json.dumps(doc, separators=(",", ":")) + "\n")

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        method = details.method.rsplit("/", 1)[-1]
        if handler is None or handler.unary_unary is None or "ExternalScaler" not in details.method:
            return handler
        inner = handler.unary_unary

        def behaviour(request, context):
            wall, now = time.time(), self.clock()
            ref = request.scaledObjectRef if method == "GetMetrics" else request
            doc = {"wall": wall, "t": now, "method": method, "namespace": ref.namespace, "name": ref.name,
                   "peer": context.peer()}
            try:
                response = inner(request, context)
            except Exception:
                doc["code"] = str(context.code() or "UNKNOWN")
                self.write(doc)
                raise
            code = context.code()
            if code is not None and code != grpc.StatusCode.OK:
                doc["code"] = code.name
            elif method == "GetMetrics":
                doc["value"] = [v.metricValueFloat for v in response.metricValues]
            elif method == "IsActive":
                doc["value"] = response.result
            elif method == "GetMetricSpec":
                doc["value"] = [s.targetSizeFloat for s in response.metricSpecs]
            doc["done"] = time.time()
            self.write(doc)
            return response

        return grpc.unary_unary_rpc_method_handler(behaviour, request_deserializer=handler.request_deserializer,
                                                   response_serializer=handler.response_serializer)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m scaler.drill.scaler")
    ap.add_argument("--grpc-port", type=int, required=True)
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--record", required=True)
    ap.add_argument("--origin", type=float, required=True, help="the drill time at --wall-origin (epoch s)")
    ap.add_argument("--wall-origin", type=float, required=True)
    ap.add_argument("--k", type=float, required=True)
    a = ap.parse_args(argv)
    setup_logging("info", "text")
    clock = warp(a.origin, a.k, a.wall_origin, time.time)
    mono0 = time.monotonic() - (time.time() - a.wall_origin)
    monotonic = warp(0.0, a.k, mono0, time.monotonic)
    rec = Recorder(Path(a.record), clock)
    config = ServerConfig(host="127.0.0.1", grpc_port=a.grpc_port, http_port=a.http_port, state_dir=a.state_dir,
                          registry=RegistryConfig(), scheduler_tick_seconds=1.0 / a.k)
    server = Server(config, clock=clock, monotonic=monotonic, pin_queries=True, interceptors=[rec]).start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    server.stop(grace=2.0)
    rec.close()


if __name__ == "__main__":
    main()

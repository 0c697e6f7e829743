"""Helpers shared by the gRPC benchmarks (``tests/bench/bench_grpc.py``, ``bench_serve_forecast.py``):
a no-op baseline handler, a round-robin GetMetrics call, a timing loop and its p50/p99."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import grpc


def noop_handler() -> grpc.GenericRpcHandler:
    """``/bench.Noop/Ping``: an empty unary method, the baseline registered on the same server."""
    ping = grpc.unary_unary_rpc_method_handler(lambda req, ctx: b"", request_deserializer=None, response_serializer=None)
    return grpc.method_handlers_generic_handler("bench.Noop", {"Ping": ping})


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p99) of ``samples``."""
    qs = statistics.quantiles(samples, n=100, method="inclusive")
    return qs[49], qs[98]


def round_robin(stub, requests) -> Callable[[], None]:
    """A GetMetrics call over ``requests`` in turn (every ScaledObject polled alike)."""
    calls = iter(range(1 << 62))

    def get_metrics() -> None:
        stub.GetMetrics(requests[next(calls) % len(requests)], timeout=5)
    return get_metrics


def measure(call, n: int) -> list[float]:
    """Latencies of ``n`` calls in milliseconds, after up to 200 warm-up calls."""
    for _ in range(min(200, n)):  # warm-up
        call()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        out.append((time.perf_counter() - t0) * 1000)
    return out

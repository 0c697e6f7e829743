"""GetMetrics latency with N ScaledObjects registered, next to an empty handler on the same server.

    python tests/bench/bench_grpc.py [--objects 100] [--calls 2000]

A real Prometheus (flat series) feeds the refreshers; the server runs
in-process with real gRPC over loopback. The baseline is a no-op unary method
registered on the same gRPC server, called over the same channel, so the
ratio shows what forescale adds to a bare round trip.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: promfixture, grpc_bench
from support import promfixture as pf  # noqa: E402
from support.grpc_bench import measure, noop_handler, percentiles, round_robin  # noqa: E402

from scaler._proto import externalscaler_pb2 as pb  # noqa: E402
from scaler._proto import externalscaler_pb2_grpc as pb_grpc  # noqa: E402
from scaler.serve.server import Server, ServerConfig  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=100)
    ap.add_argument("--calls", type=int, default=2000)
    a = ap.parse_args()
    now = time.time()
    t = pf.sample_times(now - 3600, now + 3600)  # extends past now: the series stays live during the run
    with pf.PrometheusServer([pf.SeriesSpec("bench_requests_total", {"job": "bench"}, "counter", t,
                                            pf.counter_from_rate(t, 40.0))]) as prom:
        server = Server(ServerConfig(host="127.0.0.1", grpc_port=0, http_port=0),
                        extra_handlers=[noop_handler()]).start()
        try:
            ch = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
            stub = pb_grpc.ExternalScalerStub(ch)
            ping = ch.unary_unary("/bench.Noop/Ping")
            refs = []
            for i in range(a.objects):
                md = {"serverAddress": prom.url, "query": "sum(rate(bench_requests_total[2m]))",
                      "qpsPerReplica": "10", "mode": "reactive"}
                refs.append(pb.GetMetricsRequest(scaledObjectRef=pb.ScaledObjectRef(
                    name=f"so-{i}", namespace="bench", scalerMetadata=md)))
            for r in refs:  # register all and wait for their first observation
                stub.GetMetrics(r, timeout=10)
            base = measure(lambda: ping(b"", timeout=5), a.calls)
            gm = measure(round_robin(stub, refs), a.calls)
            b50, b99 = percentiles(base)
            g50, g99 = percentiles(gm)
            print(f"ScaledObjects registered: {len(server.registry.workloads())}, calls: {a.calls}")
            print(f"empty handler  p50 {b50:.3f} ms  p99 {b99:.3f} ms")
            print(f"GetMetrics     p50 {g50:.3f} ms  p99 {g99:.3f} ms")
            print(f"ratio          p50 {g50 / b50:.2f}x  p99 {g99 / b99:.2f}x  (goal <= 2)")
            ch.close()
        finally:
            server.stop(grace=1.0)


if __name__ == "__main__":
    main()

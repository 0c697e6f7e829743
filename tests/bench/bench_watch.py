"""Self-watch cost: memory per ScaledObject (live scores + decision log) at 1,000 ScaledObjects, and GetMetrics
latency with them on vs off, in one run.

    PYTHONPATH=$PWD python tests/bench/bench_watch.py [--objects 1000] [--calls 3000]

Memory: ``tracemalloc`` around 1,000 workloads' ``Watch`` entries after each recorded a full decision ring
(``DECISIONS_KEPT`` decisions with a forecast, so pending minutes, buckets and rings are all filled).
Latency: two servers in this process against one real Prometheus (flat series), one with ``self_watch``
on, one off; the same ScaledObjects registered on both; calls alternate in blocks, p50/p99 of each and the
ratio on/off.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support import promfixture as pf  # noqa: E402
from support.grpc_bench import measure, percentiles, round_robin  # noqa: E402

from scaler._proto import externalscaler_pb2 as pb  # noqa: E402
from scaler._proto import externalscaler_pb2_grpc as pb_grpc  # noqa: E402
from scaler.serve.server import Server, ServerConfig  # noqa: E402


def memory_per_object(n: int) -> float:
    from scaler.serve.watch import Watch
    from support.watchfill import fill, workloads  # the same filler the memory test uses

    wls, watch = workloads(n), Watch()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    fill(watch, wls)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    assert len(watch) == n
    return sum(s.size_diff for s in after.compare_to(before, "filename")) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=3000)
    a = ap.parse_args()
    per = memory_per_object(a.objects)
    print(f"memory: {per / 1024:.1f} KiB per ScaledObject with live scores and the decision log "
          f"({a.objects} ScaledObjects: {per * a.objects / 2**20:.1f} MiB)")
    now = time.time()
    t = pf.sample_times(now - 3600, now + 3600)
    with pf.PrometheusServer([pf.SeriesSpec("bench_requests_total", {"job": "bench"}, "counter", t,
                                            pf.counter_from_rate(t, 40.0))]) as prom:
        servers = [Server(ServerConfig(host="127.0.0.1", grpc_port=0, http_port=0, self_watch=on)).start()
                   for on in (True, False)]
        try:
            chans = [grpc.insecure_channel(f"127.0.0.1:{s.grpc_port}") for s in servers]
            stubs = [pb_grpc.ExternalScalerStub(c) for c in chans]
            objects = min(a.objects, 200)  # registered per server (refreshers: 2 x 200 against one Prometheus)
            refs = [pb.GetMetricsRequest(scaledObjectRef=pb.ScaledObjectRef(
                name=f"so-{i}", namespace="bench", scalerMetadata={
                    "serverAddress": prom.url, "query": "sum(rate(bench_requests_total[2m]))",
                    "qpsPerReplica": "10", "mode": "reactive"})) for i in range(objects)]
            for stub in stubs:
                for r in refs:
                    stub.GetMetrics(r, timeout=10)
            on, off = [], []
            for _ in range(6):  # alternate blocks: drift of the machine's load hits both alike
                on += measure(round_robin(stubs[0], refs), a.calls // 6)
                off += measure(round_robin(stubs[1], refs), a.calls // 6)
            p50n, p99n = percentiles(on)
            p50f, p99f = percentiles(off)
            print(f"GetMetrics, {objects} ScaledObjects, {len(on)} calls each")
            print(f"self-watch on   p50 {p50n:.3f} ms  p99 {p99n:.3f} ms")
            print(f"self-watch off  p50 {p50f:.3f} ms  p99 {p99f:.3f} ms")
            print(f"ratio on/off    p50 {p50n / p50f:.2f}x  p99 {p99n / p99f:.2f}x")
            for c in chans:
                c.close()
        finally:
            for s in servers:
                s.stop(grace=1.0)


if __name__ == "__main__":
    main()

"""1,000 ScaledObjects polled at KEDA's 30 s cadence against one real Prometheus (default connection limit).

    python tests/bench/bench_scale.py [--objects 1000] [--interval 30] [--measure 60]

Prints, for the measuring window (after 2.5 polling intervals: the cadence is learned at the second poll, and refreshes scheduled at the 5 s floor before then have run out): Prometheus queries per
second (the scaler's counter, and the KEDA poll rate it is compared with), TCP connections held (the
scaler's pool, and Prometheus' own accepted-minus-closed count), GetMetrics p50/p99 next to the gRPC
health check's in the same run, and the server's resident memory per ScaledObject.
The server runs in-process (real gRPC on loopback); polls are spread evenly over the interval.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import requests
from grpc_health.v1 import health_pb2, health_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: support
from support import promfixture as pf  # noqa: E402
from support.grpc_bench import percentiles  # noqa: E402
from support.live import LiveScaler, metadata, rss_bytes  # noqa: E402

from scaler._proto import externalscaler_pb2 as pb  # noqa: E402


def prom_connections(url: str) -> float:
    text = requests.get(f"{url}/metrics", timeout=5).text
    acc = clo = 0.0
    for line in text.splitlines():
        if line.startswith('net_conntrack_listener_conn_accepted_total{listener_name="http"}'):
            acc = float(line.split()[-1])
        if line.startswith('net_conntrack_listener_conn_closed_total{listener_name="http"}'):
            clo = float(line.split()[-1])
    return acc - clo


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=1000)
    ap.add_argument("--interval", type=float, default=30.0)
    ap.add_argument("--measure", type=float, default=60.0)
    ap.add_argument("--streams", type=int, default=1000, help="then: this many StreamIsActive open (push mode)")
    a = ap.parse_args()
    now = time.time()
    t = pf.sample_times(now - 7200, now + 3600)
    with pf.PrometheusServer([pf.SeriesSpec("chaos_requests", {"job": "flat"}, "counter", t,
                                            pf.counter_from_rate(t, 5.0))]) as prom:
        rss0 = rss_bytes()
        s = LiveScaler()
        health = health_pb2_grpc.HealthStub(s.channel)
        md = metadata(prom.url)
        lat_get: list[float] = []
        lat_health: list[float] = []
        errors = [0]
        measuring = threading.Event()

        def poll(i: int) -> None:
            ref = s.ref(md, f"so-{i}")
            try:
                s.stub.IsActive(ref, timeout=10)
                t0 = time.perf_counter()
                s.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref), timeout=10)
                t1 = time.perf_counter()
                health.Check(health_pb2.HealthCheckRequest(), timeout=10)
                t2 = time.perf_counter()
                if measuring.is_set():
                    lat_get.append(t1 - t0)
                    lat_health.append(t2 - t1)
            except grpc.RpcError:
                errors[0] += 1

        gap = a.interval / a.objects
        start = time.monotonic()
        end = start + a.interval * 2.5 + a.measure
        ops = s.server.ops
        q0 = t_measure = None
        with ThreadPoolExecutor(16) as ex:
            k = 0
            while time.monotonic() < end:
                if t_measure is None and time.monotonic() - start >= a.interval * 2.5:
                    measuring.set()
                    t_measure = time.monotonic()
                    q0 = sum(ops.queries.labels(p)._value.get() for p in ("observe", "cold_start", "history"))
                    polls0 = k
                ex.submit(poll, k % a.objects)
                k += 1
                time.sleep(max(0.0, start + k * gap - time.monotonic()))
        elapsed = time.monotonic() - t_measure
        q1 = sum(ops.queries.labels(p)._value.get() for p in ("observe", "cold_start", "history"))
        rss1 = rss_bytes()
        p50g, p99g = percentiles(lat_get)
        p50h, p99h = percentiles(lat_health)
        print(f"ScaledObjects: {a.objects}, KEDA poll every {a.interval:g}s, measured {elapsed:.0f}s")
        print(f"KEDA polls/s: {(k - polls0) / elapsed:.1f}; Prometheus queries/s: {(q1 - q0) / elapsed:.1f} "
              f"(ratio {(q1 - q0) / max(1, k - polls0):.2f})")
        print(f"connections held: scaler pool {s.server.pool.connections()}, Prometheus side {prom_connections(prom.url):.0f}")
        print(f"GetMetrics p50 {p50g * 1e3:.2f} ms p99 {p99g * 1e3:.2f} ms; health check p50 {p50h * 1e3:.2f} ms "
              f"p99 {p99h * 1e3:.2f} ms; p99 ratio {p99g / p99h:.2f}")
        print(f"errors: {errors[0]}; server RSS {rss1 / 2**20:.0f} MiB, "
              f"{(rss1 - rss0) / a.objects / 1024:.1f} KiB per ScaledObject (process, client included)")
        if a.streams:
            streams(s, md, health, a.streams)
        s.close()


def streams(s: LiveScaler, md: dict, health, n: int) -> None:
    """``n`` StreamIsActive open at once (KEDA's external-push, one per ScaledObject): the health check and
    GetMetrics latency while they are open, and the first state each stream delivered."""
    calls = [s.stub.StreamIsActive(s.ref(md, f"push-{i}"), timeout=600) for i in range(n)]
    try:
        t0 = time.perf_counter()
        firsts = sum(1 for c in calls if next(c).result)
        opened = time.perf_counter() - t0
        lat_h, lat_g = [], []
        ref = s.ref(md, "so-0")
        for _ in range(300):
            t1 = time.perf_counter()
            health.Check(health_pb2.HealthCheckRequest(), timeout=10)
            t2 = time.perf_counter()
            s.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref), timeout=10)
            lat_h.append(t2 - t1)
            lat_g.append(time.perf_counter() - t2)
            time.sleep(0.01)
        (h50, h99), (g50, g99) = percentiles(lat_h), percentiles(lat_g)
        print(f"{n} streams open ({firsts} active, first states in {opened:.1f}s): health check p50 {h50 * 1e3:.2f} ms "
              f"p99 {h99 * 1e3:.2f} ms; GetMetrics p50 {g50 * 1e3:.2f} ms p99 {g99 * 1e3:.2f} ms; "
              f"server RSS {rss_bytes() / 2**20:.0f} MiB")
    finally:
        for c in calls:
            c.cancel()


if __name__ == "__main__":
    main()

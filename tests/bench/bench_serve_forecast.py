"""GetMetrics latency while N ScaledObjects are being refitted in the background; server memory.

    python tests/bench/bench_serve_forecast.py [--objects 200] [--calls 2000] [--fit-workers 1]

A real Prometheus holds 14 days of WorldCup98 (1-min) traffic; every
ScaledObject asks for a Prophet forecast of it, with a short refitInterval so
fits run continuously during the measurement. The baseline is a no-op unary
method on the same gRPC server. Memory: peak RSS of the server process and of
its fit workers (ru_maxrss).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # support: promfixture, grpc_bench
from support import promfixture as pf  # noqa: E402
from support.grpc_bench import measure, noop_handler, percentiles, round_robin  # noqa: E402

from scaler._proto import externalscaler_pb2 as pb  # noqa: E402
from scaler._proto import externalscaler_pb2_grpc as pb_grpc  # noqa: E402
from scaler.serve.server import Server, ServerConfig  # noqa: E402

TRACE = ROOT.parent / "shared/data/traces/worldcup98/per_minute.csv"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=200)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--fit-workers", type=int, default=1)
    a = ap.parse_args()
    now = time.time()
    # the data runs an hour past now, so the series is live at the wall clock during the run
    trace = pf.trace_to_samples(TRACE, end_at=now + 3600, days=15)
    with pf.PrometheusServer([trace.series("bench_requests_total", {"job": "bench"})]) as prom:
        server = Server(ServerConfig(host="127.0.0.1", grpc_port=0, http_port=0, fit_workers=a.fit_workers),
                        extra_handlers=[noop_handler()]).start()
        try:
            ch = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
            stub = pb_grpc.ExternalScalerStub(ch)
            ping = ch.unary_unary("/bench.Noop/Ping")
            md = {"serverAddress": prom.url, "query": "sum(rate(bench_requests_total[2m]))", "qpsPerReplica": "20",
                  "model": "prophet", "history": "14d", "refitInterval": "60s"}
            refs = [pb.GetMetricsRequest(scaledObjectRef=pb.ScaledObjectRef(name=f"so-{i}", namespace="bench",
                                                                            scalerMetadata=md))
                    for i in range(a.objects)]
            for r in refs:
                stub.GetMetrics(r, timeout=10)
            t_start = time.monotonic()
            fits_before = _fits(server)
            base = measure(lambda: ping(b"", timeout=5), a.calls)
            gm = measure(round_robin(stub, refs), a.calls)
            # keep the fits going a while longer to measure throughput under the server's own scheduling
            while time.monotonic() - t_start < 90:
                time.sleep(1)
                for r in refs[:: max(1, len(refs) // 20)]:
                    stub.GetMetrics(r, timeout=5)
            elapsed = time.monotonic() - t_start
            fits = _fits(server) - fits_before
            b50, b99 = percentiles(base)
            g50, g99 = percentiles(gm)
            with_fc = sum(1 for w in server.registry.workloads() if w.forecast.forecast is not None)
            print(f"ScaledObjects: {a.objects} (with a forecast at the end: {with_fc}), fit workers: {a.fit_workers}")
            print(f"empty handler  p50 {b50:.3f} ms  p99 {b99:.3f} ms")
            print(f"GetMetrics     p50 {g50:.3f} ms  p99 {g99:.3f} ms   (fits running in the background)")
            print(f"ratio          p50 {g50 / b50:.2f}x  p99 {g99 / b99:.2f}x  (goal <= 2)")
            print(f"refits completed: {fits} in {elapsed:.0f} s = {fits / elapsed * 60:.0f} per minute "
                  "(14 days of 1-min history each, warm-started after the first)")
            ch.close()
            workers = [_hwm_mib(pid) for pid in (server.forecasts.worker.pool._processes or {})]
        finally:
            server.stop(grace=1.0)
    self_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: server process {self_mb:.0f} MiB (gRPC, registry, {a.objects} curves; includes this benchmark's "
          f"client), fit workers {', '.join(f'{w:.0f}' for w in workers)} MiB")


def _hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _fits(server: Server) -> int:
    for fam in server.metrics.registry.collect():
        if fam.name == "forescale_fit_duration_seconds":
            for s in fam.samples:
                if s.name.endswith("_count"):
                    return int(s.value)
    return 0


if __name__ == "__main__":
    main()

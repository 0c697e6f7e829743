"""Issue 40's sustained run: 1,000 ScaledObjects at KEDA's cadence for 10 minutes against the real ``forescale serve``
process, while 50 hostile callers run attacks 1, 2, 4 and 7 of the issue at once and Prometheus is restarted.

    PYTHONPATH=.:tests .venv/bin/python tests/bench/bench_sustained.py [--objects 1000] [--minutes 10]

Not part of the test suite (it takes ~12 minutes). KEDA's cadence per ScaledObject: GetMetrics every 15 s (the HPA's
sync) and IsActive every 30 s (pollingInterval), spread evenly; the victims are in 20 namespaces, reactive (no fits:
1,000 Prophet fits are another benchmark). Hostile callers (namespace ``attacker``), each at 2 calls/s:
attack 1, control characters in customHeaders with a coldStartQuery; attack 2, eventsFile a FIFO in the allowed
directory, /proc/self/fd/1 or /dev/stdout; attack 4, triggers on a never-answering host:port under 32 path spellings,
timeout 60s; attack 7, one-shot triggers under new names (filling the cap) on a target that counts its queries.
Every 60 s a new victim ScaledObject and an edit of an existing one must be served. Prometheus is stopped at 5 min
and started again on the same port (its backfill redone).

Prints: victims' calls and errors; GetMetrics p50/p99 next to the gRPC health check's in the same run: one health
check right after each GetMetrics on the same client thread (the baseline under the same load, as
tests/bench/bench_scale.py measures it), and the one sampled every 0.5 s by its own thread; health never NOT_SERVING (samples); the server's RSS, threads and sockets at the start
of the measurement, the worst and the end; the attacker's target's queries per second.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: support
from support import promfixture as pf  # noqa: E402
from support.grpc_bench import percentiles  # noqa: E402
from support.live import Switchable, metadata, rss_bytes, sockets, threads  # noqa: E402
from support.serveproc import Serve  # noqa: E402

from scaler._proto import externalscaler_pb2 as pb  # noqa: E402


class Counting(Switchable):
    """A Prometheus stand-in that answers 3.0 and counts the queries it got."""

    def __init__(self):
        super().__init__(3.0)
        self.queries = 0

    def _answer(self) -> bytes:
        self.queries += 1
        return super()._answer()


def hostile_loop(kind: str, i: int, s: Serve, stop: threading.Event, urls: dict, counts: dict) -> None:
    k = 0
    while not stop.wait(0.5):
        k += 1
        if kind == "control":
            md = metadata(urls["prom"], customHeaders=f"X-Tenant=a\nb{k % 7}", coldStartQuery="vector(30)")
        elif kind == "events":
            md = metadata(urls["prom"], eventsFile=(urls["fifo"], "/proc/self/fd/1", "/dev/stdout")[k % 3])
        elif kind == "tarpit":
            host = urls["tarpit"] if k % 2 else urls["tarpit"].replace("127.0.0.1", "localhost")
            md = metadata(f"{host}/p{k % 32}", timeout="60s", qpsPerReplica=str(1 + (k // 32) % 8))
        else:  # cap: one-shot triggers under new names
            md = metadata(urls["count"])
        name = f"{kind}-{i}-{k % 500 if kind != 'cap' else k}"
        try:
            s.stub.GetMetricSpec(pb.ScaledObjectRef(name=name, namespace="attacker", scalerMetadata=md), timeout=5)
            counts[kind + "_ok"] = counts.get(kind + "_ok", 0) + 1
        except grpc.RpcError as e:
            counts[f"{kind}_{e.code().name}"] = counts.get(f"{kind}_{e.code().name}", 0) + 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=1000)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--hostile", type=int, default=50)
    ap.add_argument("--warmup", type=float, default=90.0)
    a = ap.parse_args()
    now = time.time()
    t = pf.sample_times(now - 7200, now + 3600 + 60 * (a.minutes + 5))
    series = [pf.SeriesSpec("chaos_requests", {"job": "flat"}, "counter", t, pf.counter_from_rate(t, 5.0))]
    tmp = Path(tempfile.mkdtemp(prefix="sustained-"))
    events = tmp / "events"
    events.mkdir()
    os.mkfifo(events / "fifo.csv")
    prom = pf.PrometheusServer(series, port=pf.find_free_port()).start()
    tarpit, count = Switchable(1.0), Counting()
    tarpit.mode = "tarpit"
    s = Serve(tmp, "--events-dir", str(events)).ready()
    health = health_pb2_grpc.HealthStub(s.channel)
    urls = {"prom": prom.url, "fifo": str(events / "fifo.csv"), "tarpit": tarpit.url, "count": count.url}
    lat_get, lat_paired, lat_health, statuses = [], [], [], {}
    errors: dict[str, int] = {}
    calls = [0]
    measuring, stop = threading.Event(), threading.Event()
    vitals: list[tuple[float, int, int, int]] = []

    def victim(i: int, active: bool) -> None:
        md = metadata(prom.url, qpsPerReplica="1")
        ref = pb.ScaledObjectRef(name=f"so-{i}", namespace=f"team-{i % 20}", scalerMetadata=md)
        try:
            if active:
                s.stub.IsActive(ref, timeout=10)
            t0 = time.perf_counter()
            s.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref), timeout=10)
            t1 = time.perf_counter()
            health.Check(health_pb2.HealthCheckRequest(), timeout=10)  # the baseline, under the same conditions
            t2 = time.perf_counter()
            if measuring.is_set():
                lat_get.append(t1 - t0)
                lat_paired.append(t2 - t1)
                calls[0] += 1
        except grpc.RpcError as e:
            if measuring.is_set():
                errors[e.code().name] = errors.get(e.code().name, 0) + 1

    def watch() -> None:
        while not stop.wait(0.5):
            t0 = time.perf_counter()
            try:
                st = health.Check(health_pb2.HealthCheckRequest(), timeout=10).status
                name = health_pb2.HealthCheckResponse.ServingStatus.Name(st)
            except grpc.RpcError as e:
                name = e.code().name
            if measuring.is_set():
                lat_health.append(time.perf_counter() - t0)
                statuses[name] = statuses.get(name, 0) + 1
                pid = str(s.proc.pid)
                vitals.append((time.monotonic(), rss_bytes(pid), threads(pid), sockets(pid)))

    counts: dict = {}
    kinds = ("control", "events", "tarpit", "cap")
    hostile = [threading.Thread(target=hostile_loop, args=(kinds[i % 4], i, s, stop, urls, counts), daemon=True)
               for i in range(a.hostile)]
    threading.Thread(target=watch, daemon=True).start()
    for h in hostile:
        h.start()
    start = time.monotonic()
    end = start + a.warmup + 60 * a.minutes
    down, refused = [0.0], []
    restart_at, restarted, news, q0 = start + a.warmup + 60 * a.minutes / 2, None, [], 0
    gap = 15.0 / a.objects  # every ScaledObject's GetMetrics every 15 s, its IsActive every other one
    with ThreadPoolExecutor(64) as ex:
        k = 0
        while time.monotonic() < end:
            if not measuring.is_set() and time.monotonic() - start >= a.warmup:
                measuring.set()
                t_measure, q0 = time.monotonic(), count.queries
            if restarted is None and time.monotonic() >= restart_at:
                restarted = time.monotonic()
                def restart() -> None:  # the same port, its data backfilled again
                    prom.stop()
                    t0 = time.monotonic()
                    prom.start()
                    down[0] = time.monotonic() - t0
                ex.submit(restart)
            if measuring.is_set() and k % (a.objects * 4) == 0:  # once a minute: a new ScaledObject and an edit
                j = len(news)
                for md, name in ((metadata(prom.url), f"new-{j}"), (metadata(prom.url, qpsPerReplica="2"), "so-0")):
                    try:
                        news.append(s.get(md, name))
                    except grpc.RpcError as e:
                        errors[f"new/edit {e.code().name}"] = errors.get(f"new/edit {e.code().name}", 0) + 1
                        refused.append(f"{name} at {time.monotonic() - t_measure:.0f}s: {e.code().name} "
                                       f"{(e.details() or '')[:160]}")
            ex.submit(victim, k % a.objects, (k // a.objects) % 2 == 0)
            k += 1
            time.sleep(max(0.0, start + k * gap - time.monotonic()))
    elapsed = time.monotonic() - t_measure
    stop.set()
    target_qps = (count.queries - q0) / elapsed
    (g50, g99), (p50, p99), (h50, h99) = percentiles(lat_get), percentiles(lat_paired), percentiles(lat_health)
    r0, r_end = vitals[0], vitals[-1]
    worst = tuple(max(v[i] for v in vitals) for i in range(1, 4))
    print(f"victims: {a.objects} ScaledObjects, {calls[0]} GetMetrics in {elapsed:.0f}s measured; errors: "
          f"{errors or 0}; new ScaledObjects and edits served: {len(news)}")
    print(f"GetMetrics p50 {g50 * 1e3:.2f} ms p99 {g99 * 1e3:.2f} ms; health check right after each (same thread) "
          f"p50 {p50 * 1e3:.2f} ms p99 {p99 * 1e3:.2f} ms; p99 ratio {g99 / p99:.2f}")
    print(f"health check sampled every 0.5 s by its own thread ({len(lat_health)}): p50 {h50 * 1e3:.2f} ms "
          f"p99 {h99 * 1e3:.2f} ms; GetMetrics p99 / this p99 {g99 / h99:.2f}")
    print(f"health samples: {statuses}")
    print(f"server RSS {r0[1] >> 20} -> worst {worst[0] >> 20} -> end {r_end[1] >> 20} MiB; threads {r0[2]} -> "
          f"{worst[1]} -> {r_end[2]}; sockets {r0[3]} -> {worst[2]} -> {r_end[3]}")
    for line in refused:
        print(f"new/edit refused: {line}")
    per_minute = [v[1] >> 20 for v in vitals if v[0] >= vitals[0][0]][:: max(1, len(vitals) // int(max(1, a.minutes)))]
    print(f"server RSS per minute of the measurement (MiB): {per_minute}")
    print(f"Prometheus restarted at {restarted - start:.0f}s (down {down[0]:.1f}s: stopped, its data backfilled "
          f"and started again); the attacker's target got {target_qps:.1f} queries/s")
    print(f"hostile calls: {dict(sorted(counts.items()))}")
    out = s.close()
    lines = out.splitlines()
    print(f"server log: {len(lines)} lines, {len(out) >> 10} KiB; warnings {sum(' WARNING ' in x for x in lines)}, "
          f"errors {sum(' ERROR ' in x for x in lines)}")
    prom.stop()
    tarpit.close()
    count.close()


if __name__ == "__main__":
    main()

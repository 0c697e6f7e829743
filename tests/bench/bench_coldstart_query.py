"""The cost of coldStartFrom: cluster's one query per refit (docs/cold-start.md, "The query").

A real Prometheus backfilled with kube-state-metrics-shaped series: 300 pods of one Deployment over the
last 7 days (one created every ~34 min, each living 6 h, scraped every 60 s), plus 300 pods of another
Deployment in the same namespace. Timed, in this process (best of 3):

* the scaler's query (``scaler.coldstart_ksm.pods_query``: last_over_time per 35-min step, only the
  target's pods), and the parse + estimate;
* the naive alternative it replaces: the raw series of the namespace at the scrape step (60 s).

Prints seconds, series and points returned, and the ratios. Run:
``PYTHONPATH=.:tests .venv/bin/python tests/bench/bench_coldstart_query.py``
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support import promfixture as pf  # noqa: E402
from support.ksm import FakePod, pod_series, replicaset_series  # noqa: E402

from scaler.coldstart import estimate  # noqa: E402
from scaler.coldstartkeys import ClusterSource  # noqa: E402
from scaler.coldstart_ksm import pods_from_matrix, pods_query, step_for  # noqa: E402
from scaler.prom import PrometheusClient  # noqa: E402
from scaler.spec import PrometheusTarget  # noqa: E402

NS = "serving"
WEEK = 7 * 86400.0


def series(now: float):
    out = []
    for dep in ("vllm", "other"):
        rs = f"{dep}-5f6d7"
        for i in range(300):
            c = now - WEEK + 60 + i * 2000.0
            out += pod_series(FakePod(f"{rs}-{i}", rs, c, 3, 1, 90 + i % 40, min(c + 6 * 3600, now - 10)), NS)
        out.append(replicaset_series(rs, dep, NS, now - WEEK, now - 10))
    return out


def best(f, n=3):
    times, out = [], None
    for _ in range(n):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    now = float(int(time.time()) // 60 * 60)
    with pf.PrometheusServer(series(now)) as prom:
        client = PrometheusClient(PrometheusTarget(prom.url, timeout_seconds=120.0))
        src = ClusterSource("Deployment", "vllm", window_seconds=WEEK)
        step = step_for(WEEK)
        q = pods_query(NS, src, step)
        ours_s, result = best(lambda: client.range(q, now - WEEK, now, step))
        parse_s, est = best(lambda: estimate(pods_from_matrix(result, src), src, now))
        naive_q = ('{__name__=~"kube_pod_created|kube_pod_status_scheduled_time|kube_pod_start_time|'
                   'kube_pod_status_ready_time|kube_pod_container_status_restarts_total|kube_pod_owner|'
                   f'kube_replicaset_owner",namespace="{NS}"}}')
        naive_s, naive = best(lambda: client.range(naive_q, now - WEEK, now, 60.0))
    pts = sum(len(s["values"]) for s in result)
    naive_pts = sum(len(s["values"]) for s in naive)
    print(f"T_cold {est.seconds:.1f} s from {est.samples} starts (skipped {dict(est.skipped)})")
    print(f"scaler's query: {ours_s:.3f} s, {len(result)} series, {pts} points (step {step:g} s); "
          f"parse + estimate {parse_s * 1000:.1f} ms")
    print(f"naive raw range at 60 s: {naive_s:.3f} s, {len(naive)} series, {naive_pts} points")
    print(f"ratio naive / scaler's: time x{naive_s / ours_s:.1f}, points x{naive_pts / pts:.1f}")


if __name__ == "__main__":
    main()

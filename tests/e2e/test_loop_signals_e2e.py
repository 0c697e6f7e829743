"""The closed loop's signals read from a real Prometheus (backfilled with promtool) by the server's one reader
(``scaler.serve.load.observed_signals``): vLLM's queue gauge, kube-state-metrics' ready replicas and the TTFT
histogram's p95; a histogram without buckets (only ``+Inf``: ``histogram_quantile`` gives NaN), a metric that is
not there and a negative gauge are unknown with their reason, never a zero."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from scaler.prom import PrometheusClient
from scaler.serve.load import observed_signals
from scaler.spec import PrometheusTarget, parse_metadata
from support import promfixture as pf

BUCKETS = {"0.5": 5.0, "1": 10.0, "2": 20.0, "+Inf": 20.0}  # cumulative observations added per 15 s scrape
TTFT = 'histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{job="good"}[2m])))'


@pytest.fixture(scope="module")
def prom():
    end = float(int(time.time()) // 60 * 60)
    t = pf.sample_times(end - 3600, end)
    k = np.arange(len(t), dtype=float)
    series = [pf.SeriesSpec("vllm:num_requests_waiting", {"job": "good"}, "gauge", t, np.full(len(t), 30.0)),
              pf.SeriesSpec("kube_deployment_status_replicas_ready", {"deployment": "vllm"}, "gauge", t,
                            np.full(len(t), 5.0)),
              pf.SeriesSpec("vllm:num_requests_waiting", {"job": "broken"}, "gauge", t, np.full(len(t), -3.0))]
    # the bucket series' values are counters; as gauges the fixture keeps their names (rate() reads them alike)
    series += [pf.SeriesSpec("vllm:time_to_first_token_seconds_bucket", {"job": "good", "le": le}, "gauge", t, n * k)
               for le, n in BUCKETS.items()]
    series += [pf.SeriesSpec("vllm:time_to_first_token_seconds_bucket", {"job": "nobuckets", "le": "+Inf"}, "gauge",
                             t, 20.0 * k)]
    server = pf.PrometheusServer(series).start()
    yield server, end
    server.stop()


def spec(url: str, **queries):
    return parse_metadata({"serverAddress": url, "query": "vector(1)", "qpsPerReplica": "10", **queries})[0]


def test_the_signals_read_from_prometheus_and_the_bad_ones_unknown(prom):
    server, end = prom
    client = PrometheusClient(PrometheusTarget(server.url))
    good = spec(server.url, queueQuery='sum(vllm:num_requests_waiting{job="good"})', queueTarget="2",
                readyReplicasQuery='sum(kube_deployment_status_replicas_ready{deployment="vllm"})',
                ttftQuery=TTFT, ttftTarget="2")
    sig, why = observed_signals(client, good, end)
    # p95 of 20 observations per scrape: rank 19 falls in (1, 2] holding 10 of them from rank 10:
    # 1 + (19 - 10) / 10 x (2 - 1) = 1.9 s
    assert (sig.waiting, sig.ready) == (30.0, 5.0) and sig.ttft == pytest.approx(1.9) and why == {}
    bad = spec(server.url, queueQuery='sum(vllm:num_requests_waiting{job="broken"})', queueTarget="2",
               readyReplicasQuery='sum(kube_deployment_status_replicas_ready{deployment="gone"})',
               ttftQuery=TTFT.replace('job="good"', 'job="nobuckets"'), ttftTarget="2",
               itlQuery='histogram_quantile(0.95, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket[2m])))',
               itlTarget="0.1")
    sig, why = observed_signals(client, bad, end)
    assert all(math.isnan(v) for v in (sig.waiting, sig.ready, sig.ttft, sig.itl))
    assert why["waiting"] == "a negative value -3: not a count or a time"
    assert why["ttft"].startswith("no usable value") and why["itl"].startswith("no usable value")
    assert why["ready"].startswith("no usable value")  # sum() of nothing: no series

"""Issue 27, H1, against a real server over real gRPC and a real Prometheus: another caller that sends the
victim's names with its own metadata cannot steer the victim, and two forescale triggers in one ScaledObject are
two workloads, both served, with no refit storm."""

from __future__ import annotations

import threading
import time

from scaler._proto import externalscaler_pb2 as pb
from scaler.serve.registry import metadata_digest
from support.live import FLAT_QPS, metadata


def test_a_steering_caller_cannot_change_the_victims_value(live_prom, live_scaler):
    s = live_scaler()
    victim = metadata(live_prom.url)
    hostile = metadata(live_prom.url, query="vector(0)")
    assert abs(s.get(victim, "victim") - FLAT_QPS) < 0.5  # 5 req/s, 1 per replica
    stop = threading.Event()
    sent = [0]

    def attack() -> None:  # the victim's names, its own metadata, 50 calls/s
        while not stop.is_set() and sent[0] < 500:
            s.get(hostile, "victim")
            sent[0] += 1
            time.sleep(0.02)
    t = threading.Thread(target=attack)
    t.start()
    try:
        got, active = [], []
        for _ in range(10):  # KEDA's own polls meanwhile
            got.append(s.get(victim, "victim"))
            active.append(s.stub.IsActive(s.ref(victim, "victim"), timeout=5).result)
            time.sleep(0.2)
    finally:
        stop.set()
        t.join()
    assert sent[0] >= 10
    # before issue 27: 0 and IsActive false on 10 of 10 polls; now the victim never sees the hostile value
    assert all(abs(v - FLAT_QPS) < 0.5 for v in got), got
    assert all(active)
    # the hostile map is a workload of its own, with its own series label
    labels = {w.trigger for w in s.server.registry.workloads() if w.name == "victim"}
    assert labels == {metadata_digest(victim)[:8], metadata_digest(hostile)[:8]}
    assert s.server.metrics.registry.get_sample_value(
        "forescale_planned_qps", {"namespace": "chaos", "scaledobject": "victim",
                                  "trigger": metadata_digest(victim)[:8]}) == got[-1]


def test_two_forescale_triggers_in_one_scaledobject_are_both_served_without_refits(live_prom, live_scaler):
    s = live_scaler()
    # KEDA sends each trigger's own map; metricName tells them apart in the HPA (s0-..., s1-...)
    first = metadata(live_prom.url, metricName="fast", mode="forecastAndScale", model="naive", history="1h",
                     minHistory="30m", refitInterval="1h")
    second = metadata(live_prom.url, metricName="slow", qpsPerReplica="2.5", mode="forecastAndScale",
                      model="naive", history="1h", minHistory="30m", refitInterval="1h")
    values = {"fast": [], "slow": []}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and min(len(v) for v in values.values()) < 10:
        for md, metric in ((first, "s0-fast"), (second, "s1-slow")):
            req = pb.GetMetricsRequest(scaledObjectRef=s.ref(md, "pair"), metricName=metric)
            try:
                r = s.stub.GetMetrics(req, timeout=5)
            except Exception:  # noqa: BLE001 - no forecast yet: retried below
                continue
            assert r.metricValues[0].metricName == metric.split("-", 1)[1]
            values[metric.split("-", 1)[1]].append(r.metricValues[0].metricValueFloat)
        time.sleep(0.3)
    assert min(len(v) for v in values.values()) >= 10, values
    # each its own value for the same series: 5 req/s (a flat naive forecast of 5; 1 and 2.5 per replica are
    # the HPA's targets, not part of the value)
    assert all(abs(v - FLAT_QPS) < 0.5 for v in values["fast"] + values["slow"]), values
    wls = [w for w in s.server.registry.workloads() if w.name == "pair"]
    assert len(wls) == 2 and {w.spec.metric_name for w in wls} == {"fast", "slow"}
    # the answers above may be the observed rate while the fits run (a loaded machine): wait for both fits
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not all(w.forecast.forecast is not None for w in wls):
        time.sleep(0.3)
    # no refit storm: one fit each (before issue 27: 56 refits in 60 s, no forecast ever served)
    fits = sum(s.server.metrics.registry.get_sample_value("forescale_fit_duration_seconds_count") or 0
               for _ in (0,))
    assert fits <= 2, fits
    assert all(w.forecast.forecast is not None for w in wls)

"""The five production failures of issue 15, each against a real Prometheus or real misbehaving targets and a real
server over real gRPC on loopback, each bounded in time."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
import requests
from grpc_health.v1 import health_pb2, health_pb2_grpc

from support.fakes import sample_value
from support.live import FLAT_QPS, metadata, rss_bytes


def test_a_thousand_scaledobjects_share_a_few_connections_at_prometheus_default_limit(live_prom, live_scaler):
    """Prometheus keeps its default --web.max-connections=512; 1,000 ScaledObjects poll it: no error."""
    s = live_scaler()
    md = metadata(live_prom.url)
    errors: list[str] = []

    def poll(i: int) -> float | None:
        try:
            return s.get(md, f"so-{i}", timeout=10)
        except grpc.RpcError as e:
            errors.append(f"{e.code().name}: {e.details()}")
            return None

    with ThreadPoolExecutor(32) as ex:
        for _ in range(2):  # two polls of each: the first creates and waits for the first refresh
            values = list(ex.map(poll, range(1000)))
    assert errors == []
    assert all(v == pytest.approx(FLAT_QPS, rel=1e-6) for v in values)
    assert s.server.pool.connections() <= 8  # prom_connections_per_target
    assert requests.get(f"{live_prom.url}/-/ready", timeout=2).status_code == 200


@pytest.mark.parametrize("mode", ["drip", "tarpit"])
def test_a_healthy_scaledobject_stays_current_next_to_dripping_or_silent_targets(live_prom, live_scaler, switchable,
                                                                               mode):
    # refresh floor 1 s, timeout 0.5 s: late after 2 x 1 + 0.5 + 2 = 4.5 s; UNAVAILABLE after stale_seconds = 8 s
    s = live_scaler(registry={"refresh_seconds": 1.0, "stale_seconds": 8.0})
    bad = switchable(value=7.0)
    bad_md = metadata(bad.url, timeout="500")
    n_bad = 8 if mode == "drip" else 100
    for i in range(n_bad):
        assert s.get(bad_md, f"bad-{i}") == 7.0
    bad.mode = mode
    good_md = metadata(live_prom.url)
    s.get(good_md, "good")
    t_switch = time.monotonic()
    seen: dict[str, list] = {"good": [], "bad": []}
    # No wall-clock bound (a loaded 2-core machine delays every poll): poll until the bad one has answered
    # UNAVAILABLE three times, within a loop bound of 4 x stale_seconds, and assert the order of outcomes.
    while time.monotonic() - t_switch < 32.0 and sum(v == "UNAVAILABLE" for _, v in seen["bad"]) < 3:
        seen["good"].append(s.get(good_md, "good"))
        try:
            seen["bad"].append((time.monotonic() - t_switch, s.get(bad_md, "bad-0")))
        except grpc.RpcError as e:
            seen["bad"].append((time.monotonic() - t_switch, e.code().name))
        time.sleep(0.25)
    # the healthy one answered the true rate every time
    assert seen["good"] and all(v == pytest.approx(FLAT_QPS, rel=1e-6) for v in seen["good"])
    # the bad one: its last value while current or stale, then UNAVAILABLE, never its value again
    outcomes = [v for _, v in seen["bad"]]
    assert all(v in (7.0, "UNAVAILABLE") for v in outcomes), outcomes
    first = outcomes.index("UNAVAILABLE")
    assert first > 0 and all(v == "UNAVAILABLE" for v in outcomes[first:]), outcomes
    served_stale = sample_value(s.server.metrics.registry, "forescale_decisions_total",
                                {"namespace": "chaos", "scaledobject": "bad-0", "reason": "fallback_prometheus_stale"})
    assert served_stale and served_stale >= 1  # served as stale (reason said so), not as current, before UNAVAILABLE


def test_five_hundred_one_megabyte_invalid_maps_leave_memory_bounded(live_scaler):
    s = live_scaler()
    before = rss_bytes()
    big = "x" * (1 << 20)
    for i in range(500):
        with pytest.raises(grpc.RpcError) as e:
            s.get({"serverAddress": "http://127.0.0.1:1", "query": big + str(i), "qpsPerReplica": "1"}, f"big-{i}")
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "MAX_VALUE_BYTES" in e.value.details()
        assert len(e.value.details()) < 500
    grown = rss_bytes() - before
    # 500 MB went through; what stays is the bounded spec cache (16 MB) plus allocator slack
    assert grown < 150 << 20, f"RSS grew by {grown / 2**20:.0f} MiB"


def test_a_hundred_open_streams_leave_the_health_check_fast(live_prom, live_scaler):
    s = live_scaler(max_streams=100, grpc_workers=164)
    md = metadata(live_prom.url)
    calls = [s.stub.StreamIsActive(s.ref(md, f"push-{i}"), timeout=30) for i in range(100)]
    try:
        firsts = [next(c) for c in calls]  # each stream is open and has sent its first state
        assert all(f.result for f in firsts)
        health = health_pb2_grpc.HealthStub(s.channel)
        worst = 0.0
        for _ in range(20):
            t0 = time.monotonic()
            assert health.Check(health_pb2.HealthCheckRequest(), timeout=1).status == health_pb2.HealthCheckResponse.SERVING
            worst = max(worst, time.monotonic() - t0)
        assert worst < 0.1, worst
        assert s.get(md, "unary") == pytest.approx(FLAT_QPS, rel=1e-6)
        with pytest.raises(grpc.RpcError) as e:  # the 101st stream
            next(s.stub.StreamIsActive(s.ref(md, "one-too-many"), timeout=5))
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_streams" in e.value.details()
    finally:
        for c in calls:
            c.cancel()

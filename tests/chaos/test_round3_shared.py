"""Issue 40 (hardening round 3), the shared resources one trigger or one caller could exhaust, reproduced from outside
against a real server over real gRPC, with the real Prometheus of the chaos suite and fake slow servers on 127.0.0.1.
Each asserts the victims stay served (the true rate), health stays SERVING, and prints threads, sockets and memory.
Every loop is bounded."""

from __future__ import annotations

import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from support.fakes import sample_value
from support.live import FLAT_QPS, Vitals, health, metadata

VICTIMS = 5


def victims_served(s, url: str, rounds: int, pause: float, vitals: Vitals, name: str = "victim") -> list[float]:
    """``VICTIMS`` ScaledObjects on ``url`` polled ``rounds`` times: their values, health checked at each round."""
    got = []
    for _ in range(rounds):
        for i in range(VICTIMS):
            got.append(s.get(metadata(url), f"{name}-{i}", timeout=5))
        assert health(s.channel) == "SERVING"
        vitals.sample()
        time.sleep(pause)
    return got


def test_control_characters_in_any_key_are_refused_and_the_shared_prometheus_stays_served(live_prom, live_scaler):
    """Item 1: customHeaders "X-Tenant=a\\nb" with a coldStartQuery on a shared serverAddress leaked a refresh slot
    per trigger (aiohttp's ValueError escaped the cold-start refresh): 8 of them and the shared Prometheus got no
    request for 200 s, every victim UNAVAILABLE from 120 s. Now refused at parse time, naming the key."""
    s = live_scaler(registry={"refresh_seconds": 1.0})
    vitals = Vitals()
    for i in range(8):
        md = metadata(live_prom.url, customHeaders="X-Tenant=a\nb", coldStartQuery="vector(30)")
        with pytest.raises(grpc.RpcError) as e:
            s.get(md, f"bad-{i}")
        assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "customHeaders" in e.value.details() and "U+000A" in e.value.details() and "\n" not in e.value.details()
    before = s.server.pool.requests
    got = victims_served(s, live_prom.url, rounds=6, pause=1.0, vitals=vitals)
    assert all(v == pytest.approx(FLAT_QPS, rel=1e-6) for v in got)
    assert s.server.pool.requests - before >= VICTIMS * 3  # refreshed all along (refresh floor 1 s)
    assert s.server.registry.refresher.in_flight() <= VICTIMS
    print(f"control characters: 8 refused; victims {len(got)} of {len(got)} served; {vitals.figures()}")


def test_a_trigger_whose_fits_cannot_succeed_leaves_the_server_serving(live_prom, live_scaler):
    """Item 3: seasonal_naive on too short a history with refitInterval 10s turned the whole server NOT_SERVING
    after 15 s (and with the defaults, a trigger on < 2 days after ~30 min). Now its reason is
    fallback_insufficient_history, no fit failure is counted, and health stays SERVING for 25 s of refits."""
    s = live_scaler(registry={"refresh_seconds": 1.0})
    vitals = Vitals()
    short = metadata(live_prom.url, mode="forecastAndScale", model="seasonal_naive", history="2h", minHistory="1h",
                     refitInterval="10s", tuning="off")
    assert s.get(short, "short-history") == pytest.approx(FLAT_QPS, rel=1e-6)
    seen = []
    url = f"http://127.0.0.1:{s.server.http_port}/healthz"
    for _ in range(25):
        seen.append((health(s.channel), urllib.request.urlopen(url, timeout=5).status))
        s.get(short, "short-history")
        vitals.sample()
        time.sleep(1.0)
    assert set(seen) == {("SERVING", 200)}
    wl = next(w for w in s.server.registry.workloads() if w.name == "short-history")
    assert s.server.registry.decision(wl).reason.value == "fallback_insufficient_history"
    assert "seasonal_naive" in wl.forecast.detail
    assert sample_value(s.server.metrics.registry, "forescale_fit_failures_total",
                        {"namespace": "chaos", "scaledobject": "short-history"}) is None
    assert victims_served(s, live_prom.url, rounds=1, pause=0, vitals=vitals) == [pytest.approx(FLAT_QPS)] * VICTIMS
    print(f"failing fits: 25 of 25 health checks SERVING, /healthz 200; {vitals.figures()}")


def test_tarpit_targets_hold_only_their_share(live_prom, live_scaler, switchable):
    """Item 4: 256 triggers from one caller on one never-answering host:port (32 paths x 8, a long timeout) held
    every refresh thread: 0 victim queries in 200 s. And 6 tarpit triggers with coldStartFrom: cluster stopped every
    other trigger's refits. Now the host:port holds its share (8 refreshes, 2 fits, 2 cold-start queries), the
    victims are refreshed and refitted."""
    s = live_scaler(registry={"refresh_seconds": 1.0})
    vitals = Vitals()
    tarpit = switchable(value=1.0)
    tarpit.mode = "tarpit"
    host = tarpit.url.replace("127.0.0.1", "localhost")
    fit = {"mode": "forecastAndScale", "model": "naive", "history": "1h", "minHistory": "30m", "refitInterval": "10s",
           "tuning": "off"}

    def hostile(i: int) -> None:
        md = metadata(f"{host}/p{i % 32}" if i % 2 else f"{tarpit.url}/P{i % 32}", timeout="60s", **fit,
                      **({"coldStartFrom": "cluster", "coldStartWorkload": "Deployment/x"} if i < 6 else {}))
        try:
            s.stub.GetMetricSpec(s.ref(md, f"tarpit-{i}", namespace="attacker"), timeout=5)
        except grpc.RpcError:
            pass
    with ThreadPoolExecutor(16, thread_name_prefix="Thread-attacker") as ex:
        list(ex.map(hostile, range(256)))
    victim = metadata(live_prom.url, **fit)
    assert s.get(victim, "fitted-victim") == pytest.approx(FLAT_QPS, rel=1e-6)
    first_fit = None
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:  # the victim is fitted, then refitted (every 10 s), while the tarpit holds
        wl = next(w for w in s.server.registry.workloads() if w.name == "fitted-victim")
        if wl.forecast.completed_at is not None:
            first_fit = first_fit or wl.forecast.completed_at
            if wl.forecast.completed_at > first_fit:
                break
        victims_served(s, live_prom.url, rounds=1, pause=0.5, vitals=vitals)
    else:
        raise AssertionError("the victim was not refitted within 40 s next to the tarpit")
    gate = s.server.registry.refresher.gate
    assert gate.in_flight(tarpit.url) <= 8 and s.server.forecasts.gate.in_flight(tarpit.url) <= 2
    assert s.server.registry.coldstarts.gate.in_flight(tarpit.url) <= 2
    assert vitals.worst[0] - vitals.base[0] <= 80  # no thread per waiting tarpit refresh (before: all 256 held)
    print(f"tarpit: 256 triggers on one host:port hold {gate.in_flight(tarpit.url)} refreshes, "
          f"{s.server.forecasts.gate.in_flight(tarpit.url)} fits; the victim refitted; {vitals.figures()}")


def test_a_sibling_polled_by_another_caller_does_not_retire_the_victim(live_prom, live_scaler):
    """Item 6: a victim polled only by IsActive (here every 4 s) and an attacker's GetMetricSpec every 0.2 s for the
    same namespace/name with another map: the victim was 'edited' and forgotten between KEDA's polls (its forecast
    and pre-warm lost). Now it is the same workload on every poll (retire_seconds 2 s in this test: only its own
    silence, 3 of its own polls, retires it)."""
    s = live_scaler(registry={"retire_seconds": 2.0, "refresh_seconds": 1.0})
    victim, attacker = metadata(live_prom.url), metadata(live_prom.url, query="vector(0)")
    stop = threading.Event()

    def attack() -> None:
        for _ in range(200):
            if stop.wait(0.2):
                return
            s.stub.GetMetricSpec(s.ref(attacker, "victim"), timeout=5)
    t = threading.Thread(target=attack)
    t.start()
    try:
        answers, workloads = [], set()
        for _ in range(5):
            answers.append(s.stub.IsActive(s.ref(victim, "victim"), timeout=5).result)
            workloads |= {id(w) for w in s.server.registry.workloads() if w.name == "victim" and w.spec.query != "vector(0)"}
            time.sleep(4.0)
    finally:
        stop.set()
        t.join()
    assert answers == [True] * 5 and len(workloads) == 1
    print("retirement: the victim kept one workload over 5 IsActive polls 4 s apart next to ~100 sibling calls")


def test_one_caller_filling_the_cap_does_not_lock_out_new_scaledobjects(live_prom, live_scaler, switchable):
    """Item 7: one caller filled the 2,000-trigger cap in 2.7 s; then every new ScaledObject and every edit was
    RESOURCE_EXHAUSTED, and the scaler sent 168 queries/s to the caller's address. Here (cap 200, 20 queries/s per
    host:port) a caller's 300 one-shot triggers: a new ScaledObject and an edit are served (the caller's unproven
    triggers evicted), and the caller's address gets at most the rate."""
    target = switchable(value=3.0)
    s = live_scaler(registry={"max_tracked": 200, "per_target_qps": 20.0, "refresh_seconds": 1.0})
    vitals = Vitals()
    for i in range(300):  # one call each: never polled as KEDA polls
        try:
            s.get(metadata(target.url), f"fill-{i}", timeout=5)
        except grpc.RpcError as e:
            assert e.code() is grpc.StatusCode.UNAVAILABLE  # a first refresh not done within the first wait
    assert len(s.server.registry.workloads()) == 200
    assert s.get(metadata(live_prom.url), "new-victim") == pytest.approx(FLAT_QPS, rel=1e-6)
    assert s.get(metadata(live_prom.url, qpsPerReplica="2"), "new-victim") == pytest.approx(FLAT_QPS, rel=1e-6)
    before, t0 = s.server.pool.requests, time.monotonic()
    time.sleep(5.0)
    per_s = (s.server.pool.requests - before) / (time.monotonic() - t0)
    assert per_s <= 20.0 * 1.5 + 2  # the caller's target at its rate (the victims' few on another host)
    vitals.sample()
    print(f"cap: 300 one-shot triggers, cap 200: a new ScaledObject and an edit served; {per_s:.1f} queries/s; "
          f"{vitals.figures()}")


def test_one_caller_cannot_take_every_stream_and_its_threads_go_back(live_prom, live_scaler):
    """Item 8: 1,000 StreamIsActive from one caller took every stream slot (KEDA's own external-push stream was
    refused) and the pool kept 1,019 threads after they were cancelled. Now one namespace holds at most 100 (here 50)
    streams, KEDA's is accepted, and the threads are given back once idle (here after 2 s)."""
    s = live_scaler(max_streams_per_namespace=50, rpc_idle_seconds=2.0)
    vitals = Vitals()
    md = metadata(live_prom.url)
    calls, refused = [], 0
    for i in range(300):
        c = s.stub.StreamIsActive(s.ref(md, f"stream-{i}", namespace="attacker"), timeout=60)
        try:
            next(c)
            calls.append(c)
        except grpc.RpcError as e:
            assert e.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and "max_streams_per_namespace" in e.details()
            refused += 1
    vitals.sample()
    keda = s.stub.StreamIsActive(s.ref(md, "victim", namespace="victims"), timeout=30)
    assert next(keda).result is True
    held = s.server.rpc_pool.threads
    for c in calls + [keda]:
        c.cancel()
    deadline = time.monotonic() + 20
    while s.server.rpc_pool.threads > 10 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert (len(calls), refused) == (50, 250) and s.server.rpc_pool.threads <= 10, s.server.rpc_pool.threads
    assert health(s.channel) == "SERVING"
    print(f"streams: 50 of 300 accepted for the caller, KEDA's accepted; RPC threads {held} -> "
          f"{s.server.rpc_pool.threads} after cancel; {vitals.figures()}")

"""Hypothesis over the trigger metadata vocabulary against the real server and a real Prometheus: whatever KEDA
sends, no INTERNAL, no call that hangs or costs more than a bounded CPU time (KEDA's 3 s deadline is met by
design: below), IsActive never false for an error, no secret and no megabyte echo in any answer or log line, and
the server's memory bounded after the run."""

from __future__ import annotations

import itertools
import logging
import time

import grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scaler._proto import externalscaler_pb2 as pb
from scaler.spec import KEYS

from support.live import RATE, metadata, rss_bytes

SECRET = "hunter2"
NUMBERS = ["0", "-1", "1", "0.5", "1e308", "-1e308", "1e-300", "0.0004", "1e18", "nan", "NaN", "inf", "-inf", "abc",
           "", " ", "10", "0.999999", "100", "101", "1e9", "86400", "86401"]
DURATIONS = ["0", "0s", "1s", "0.5s", "10s", "1m", "30m", "1h", "1d", "2d", "90d", "91d", "99999d", "1h30m", "x",
             "-5s", "1e308", "1w", "3600"]
SERVERS = ["http://127.0.0.1:1", f"http://admin:{SECRET}@127.0.0.1:9", f"http://127.0.0.1:1/?token={SECRET}",
           "ftp://127.0.0.1", "127.0.0.1:9090", "", "http://"]
QUERIES = [RATE, "sum(rate(x[2m]", "vector(1)", "vector(NaN)", "vector(-5)", "vector(1e308)",
           'sum by (job) (rate(chaos_requests_total[2m]))', "absent(nothing)", "1/0"]


def value_for(key: str) -> st.SearchStrategy[str]:
    if key in VALID:
        return st.one_of(st.sampled_from(VALID[key]), any_value(key))
    return any_value(key)


def any_value(key: str) -> st.SearchStrategy[str]:
    if key == "serverAddress":
        return st.sampled_from(SERVERS)  # the live Prometheus is the base map's: 127.0.0.1 only
    if key in ("query", "coldStartQuery"):
        return st.sampled_from(QUERIES)
    if key in ("customHeaders", "queryParameters"):
        return st.sampled_from([f"Authorization=Bearer {SECRET}", "a=1,b=2", "nokv", "x=" + "y" * 10_000, ""])
    if key in ("history", "step", "refitInterval", "minHistory", "levelCorrection", "tuningInterval",
               "refreshInterval", "timeout"):
        return st.sampled_from(DURATIONS + NUMBERS)
    if key in ("mode", "model", "tuning", "ignoreNullValues", "unsafeSsl", "metricName", "credentials"):
        return st.sampled_from(["reactive", "forecastOnly", "naive", "auto", "off", "true", "false", "maybe",
                                "Bad Name!", "../etc", "x" * 300, ""])
    return st.sampled_from(NUMBERS)


KEY_NAMES = [k.name for k in KEYS]
# values each key accepts: half the draws take one of them, so the value path is reached, not only INVALID_ARGUMENT
VALID = {"qpsPerReplica": ["0.001", "2", "1e9"], "threshold": ["2"], "activationThreshold": ["0", "4.9", "1e12"],
         "coldStartSeconds": ["0", "86000"], "bufferSeconds": ["0", "300"], "headroom": ["1", "100"],
         "quantile": ["0.5", "0.999"], "hpaTolerance": ["0", "0.5"], "timeout": ["1", "2s"],
         "refreshInterval": ["1s", "10m"], "mode": ["reactive", "forecastOnly"], "ignoreNullValues": ["false"],
         "query": ["vector(1e308)", "vector(-5)", "vector(NaN)", RATE], "coldStartQuery": ["vector(1e9)", "vector(30)"],
         "serverAddress": ["http://127.0.0.1:1"], "metricName": ["m-1"]}
changes = st.lists(st.sampled_from(KEY_NAMES + ["unknownKey", "x" * 300]), max_size=4, unique=True).flatmap(
    lambda keys: st.tuples(*[value_for(k) for k in keys]).map(lambda vals: dict(zip(keys, vals))))
huge = st.sampled_from([None, None, None, None, None, "query", "qpsPerReplica", "unknownKey"])
_names = itertools.count()
SEEN: list = []
CPU: list = []  # each example's CPU seconds (this process: the server's handlers and the client)
# KEDA calls with a 3 s deadline. What an RPC does in that time is CPU work, and at most one wait: a trigger's
# first call waits for its first refresh, at most first_wait_seconds (2.5 s by default; the bound is tests/serve/
# test_registry.py's). A wall-clock bound on the call would measure the machine as well (a loaded 2-core machine
# stretched one past 3 s), so the work is measured in CPU seconds, which a busy machine delays but does not add
# to, and the deadline only catches a call that hangs. Here the first wait is long enough for any first refresh
# to end (every target here answers or refuses at once; only the machine can make it slow): each example's
# GetMetrics and IsActive then read the state that refresh left, whatever the load (with a 1 s wait, a loaded
# machine finished it between the two: GetMetrics UNAVAILABLE "refresh pending", IsActive a value)
HANG_S = 90.0
FIRST_WAIT_S = 30.0
CPU_LIMIT_S = 1.0  # per example (three RPCs, megabyte values included): measured at most 0.12-0.22, median 0.01


def test_fuzzed_metadata_never_breaks_the_server(live_prom, live_scaler, caplog):
    s = live_scaler(registry={"first_wait_seconds": FIRST_WAIT_S})
    rss0 = rss_bytes()

    @settings(max_examples=60, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(changes, huge)
    def one(over: dict, huge_key: str | None) -> None:
        md = {**metadata(live_prom.url), **over}
        if huge_key is not None:
            md[huge_key] = "z" * (1 << 20)
        ref = s.ref(md, f"fuzz-{next(_names)}")
        outcomes = {}
        cpu0 = time.process_time()
        for method, call in (
                ("GetMetricSpec", lambda: s.stub.GetMetricSpec(ref, timeout=HANG_S)),
                ("GetMetrics", lambda: s.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref), timeout=HANG_S)),
                ("IsActive", lambda: s.stub.IsActive(ref, timeout=HANG_S))):
            try:
                outcomes[method] = call()
            except grpc.RpcError as e:
                assert e.code() != grpc.StatusCode.DEADLINE_EXCEEDED, (method, md.keys())
                assert e.code() != grpc.StatusCode.INTERNAL, (method, e.details())
                details = e.details() or ""
                assert len(details) < 2000 and SECRET not in details and "zzzz" * 100 not in details
                outcomes[method] = e.code()
        CPU.append(time.process_time() - cpu0)
        assert CPU[-1] < CPU_LIMIT_S, (CPU[-1], md.keys())
        got, active = outcomes["GetMetrics"], outcomes["IsActive"]
        SEEN.append(got if isinstance(got, grpc.StatusCode) else "value")
        # an error is an error for both (never IsActive=false for it); a value is finite and agrees with IsActive
        assert isinstance(got, grpc.StatusCode) == isinstance(active, grpc.StatusCode), (got, active)
        if not isinstance(got, grpc.StatusCode):
            v = got.metricValues[0].metricValueFloat
            assert v == v and 0 <= v < float("inf")
            threshold = float(md.get("activationThreshold") or 0)
            assert active.result == (v > threshold)

    with caplog.at_level(logging.DEBUG):
        one()
    for r in caplog.records:
        text = r.getMessage()
        assert SECRET not in text and len(text) < 2000, text[:200]
    grown = rss_bytes() - rss0
    assert grown < 200 << 20, f"RSS grew by {grown / 2**20:.0f} MiB over the fuzz run"
    # the run reached the value path and each error class, not only metadata errors
    kinds = {k if isinstance(k, str) else k.name for k in SEEN}
    print(f"CPU per example: max {max(CPU):.3f} s, median {sorted(CPU)[len(CPU) // 2]:.3f} s")
    print("fuzz outcomes:", {k: sum(1 for x in SEEN if (x if isinstance(x, str) else x.name) == k) for k in kinds})
    assert {"value", "INVALID_ARGUMENT", "UNAVAILABLE"} <= kinds, kinds

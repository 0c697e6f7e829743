"""End to end over gRPC on loopback against a real Prometheus (reactive path).

The server runs in-process with a fake clock set to the fixture's reference
time: the scaler evaluates its queries at its clock, so the value KEDA gets
can be compared with a direct query to the same Prometheus at the same time.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import urllib.error
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from support import promfixture as pf
from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.serve.registry import metadata_digest
from support.clock import FakeClock
from support.fakes import sample_value
from support.scaler import Scaler

RATE = "sum(rate(forescale_requests_total[2m]))"


@pytest.fixture
def scaler(prometheus):
    s = Scaler(FakeClock(prometheus.now))
    yield s
    s.close()


def md(prometheus, **over) -> dict:
    base = {"scalerAddress": "forescale:9090", "serverAddress": prometheus.url, "query": RATE,
            "qpsPerReplica": "50", "mode": "reactive", "hpaTolerance": "0"}
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def test_get_metrics_is_the_rate_prometheus_computes(scaler, prometheus):
    direct = prometheus.query_value(RATE, time=prometheus.now)
    assert direct is not None and direct > 1.0
    # and the fixture's own model of rate() agrees: the data is the real trace
    assert direct == pytest.approx(prometheus.trace.expected_rate(prometheus.now), rel=1e-6)
    v = scaler.value(md(prometheus))
    assert v.metricValueFloat == pytest.approx(direct, rel=1e-9)
    assert v.metricValue == math.ceil(direct)
    assert v.metricName == "forescale-serving-llm"


def test_metric_spec_is_static_target_with_both_fields(scaler, prometheus):
    resp = scaler.stub.GetMetricSpec(scaler.ref(md(prometheus, qpsPerReplica="2.5", metricName="LLM-QPS")), timeout=5)
    assert len(resp.metricSpecs) == 1
    spec = resp.metricSpecs[0]
    assert (spec.metricName, spec.targetSizeFloat, spec.targetSize) == ("llm-qps", 2.5, 3)
    # KEDA may send the name lower-cased and without its s0- prefix, or with it
    ref = scaler.ref(md(prometheus, qpsPerReplica="2.5", metricName="LLM-QPS"))
    for name in ("llm-qps", "LLM-QPS", "s0-llm-qps"):
        r = scaler.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref, metricName=name), timeout=5)
        assert r.metricValues[0].metricName == "llm-qps"
    with pytest.raises(grpc.RpcError) as e:
        scaler.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref, metricName="other"), timeout=5)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_is_active_compares_strictly_with_activation_threshold(scaler, prometheus):
    flat = "sum(rate(forescale_flat_requests_total[2m]))"
    assert prometheus.query_value(flat, time=prometheus.now) == pytest.approx(5.0)
    assert scaler.stub.IsActive(scaler.ref(md(prometheus, query=flat, activationThreshold="4.9")), timeout=5).result
    assert not scaler.stub.IsActive(scaler.ref(md(prometheus, query=flat, activationThreshold="5"), name="b"),
                                    timeout=5).result


def test_dead_band_compensation_in_the_value(scaler, prometheus):
    flat = "sum(rate(forescale_flat_requests_total[2m]))"  # 5 req/s
    v = scaler.value(md(prometheus, query=flat, qpsPerReplica="1.2", hpaTolerance="0.1"))
    # 5 req/s needs 5 replicas of 1.2; from 4 the HPA sees 5/4.8 = 1.04: inside the band. Pushed past 1.1 * 4.8.
    assert v.metricValueFloat > 1.1 * 4 * 1.2
    assert math.ceil(v.metricValueFloat / 1.2) == 5


@pytest.mark.parametrize("over,code,fragments", [
    ({"serverAddress": None}, "INVALID_ARGUMENT", ["'serverAddress'", "missing", "http:// or https://"]),
    ({"qpsPerReplica": "0"}, "INVALID_ARGUMENT", ["'qpsPerReplica'", "'0'", "[0.001, 1e9]"]),
    ({"qpsPerReplica": "-1"}, "INVALID_ARGUMENT", ["'qpsPerReplica'", "'-1'", "[0.001, 1e9]"]),
    ({"qpsPerReplica": "abc"}, "INVALID_ARGUMENT", ["'qpsPerReplica'", "'abc'", "[0.001, 1e9]"]),
    ({"qpsPerReplica": "NaN"}, "INVALID_ARGUMENT", ["'qpsPerReplica'", "'NaN'", "[0.001, 1e9]"]),
    ({"serverAddress": "http://127.0.0.1:1"}, "UNAVAILABLE", ["unreachable", "127.0.0.1:1"]),
    ({"query": "sum(rate(nothing_here_total[2m]))", "ignoreNullValues": "false"}, "FAILED_PRECONDITION",
     ["no series", "ignoreNullValues=false"]),
    ({"query": "rate(forescale_multi_requests_total[2m])"}, "FAILED_PRECONDITION", ["more than one series", "sum("]),
    ({"query": "sum(rate(forescale_requests_total[2m]"}, "FAILED_PRECONDITION", ["400", "(bad_data)"]),
    ({"headroom": "1e308"}, "INVALID_ARGUMENT", ["'headroom'", "[1, 100]"]),
    ({"query": "x" * (1 << 20)}, "INVALID_ARGUMENT", ["'query'", "MAX_VALUE_BYTES", "a value of 1048576 bytes"]),
])
def test_bad_inputs_get_documented_status(scaler, prometheus, over, code, fragments):
    ref = scaler.ref(md(prometheus, **over))
    for call in (lambda: scaler.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref), timeout=10),
                 lambda: scaler.stub.IsActive(ref, timeout=10)):
        with pytest.raises(grpc.RpcError) as e:
            call()
        assert e.value.code() == getattr(grpc.StatusCode, code), e.value.details()
        for f in fragments:
            assert f in e.value.details()
        assert len(e.value.details()) < 1000  # no megabyte echo


def test_empty_result_with_ignore_null_values_is_zero(scaler, prometheus):
    m = md(prometheus, query="sum(rate(nothing_here_total[2m]))")
    assert scaler.value(m).metricValueFloat == 0.0
    assert scaler.stub.IsActive(scaler.ref(m), timeout=5).result is False


def test_stream_is_active_delivers_a_change(prometheus):
    s = Scaler(FakeClock(prometheus.now), refresh_seconds=1.0)
    try:
        # the rate until now + 30 s, a real 0 after (an empty result after an active series would be missing data,
        # held, not a zero: issue 36)
        flat = f"sum(rate(forescale_flat_requests_total[2m])) * (time() < bool {prometheus.now + 30:.0f})"
        stream = s.stub.StreamIsActive(s.ref(md(prometheus, query=flat, activationThreshold="1")), timeout=30)
        first = next(stream)
        assert first.result is True
        s.clock.advance(60)  # 0 req/s -> inactive
        second = next(stream)
        assert second.result is False
        stream.cancel()
        spec_stream = s.stub.StreamMetricSpec(s.ref(md(prometheus)), timeout=30)
        assert next(spec_stream).metricSpecs[0].targetSizeFloat == 50.0
        spec_stream.cancel()
    finally:
        s.close()


def test_unreachable_prometheus_uses_last_good_value_then_unavailable(prometheus_factory, prometheus):
    t = pf.sample_times(prometheus.now - 3600, prometheus.now - pf.END_OFFSET_S)
    own = prometheus_factory([pf.SeriesSpec("own_requests_total", {"job": "own"}, "counter", t,
                                            pf.counter_from_rate(t, 12.0))])
    s = Scaler(FakeClock(prometheus.now), refresh_seconds=1.0, stale_seconds=120.0)
    try:
        m = {"serverAddress": own.url, "query": "sum(rate(own_requests_total[2m]))", "qpsPerReplica": "5",
             "mode": "reactive", "hpaTolerance": "0"}
        assert s.value(m).metricValueFloat == pytest.approx(12.0)
        own.stop()
        s.clock.advance(30)
        _wait_for(lambda: s.server.registry.workloads()[0].error is not None)
        assert s.value(m).metricValueFloat == pytest.approx(12.0)  # last good observation
        reasons = {dict(k[1]).get("reason"): v for k, v in s.metrics().items() if k[0] == "forescale_decision_reason"}
        assert reasons["fallback_prometheus_stale"] == 1.0
        s.clock.advance(120)
        _wait_for(lambda: (s.server.registry.workloads()[0].error_at or 0) >= s.clock())
        with pytest.raises(grpc.RpcError) as e:
            s.value(m)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "last good observation" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:  # never IsActive=false because of an error
            s.stub.IsActive(s.ref(m), timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        s.close()


def test_forgotten_when_not_polled(prometheus):
    s = Scaler(FakeClock(prometheus.now), forget_seconds=60.0)
    try:
        s.value(md(prometheus))
        assert len(s.server.registry.workloads()) == 1
        assert any(k[0] == "forescale_planned_qps" for k in s.metrics())
        s.clock.advance(61)
        _wait_for(lambda: not s.server.registry.workloads())
        assert not any(k[0] == "forescale_planned_qps" for k in s.metrics())
    finally:
        s.close()


def test_metrics_health_and_graceful_stop(prometheus):
    s = Scaler(FakeClock(prometheus.now))
    s.value(md(prometheus))
    m = s.metrics()
    trigger = ("trigger", metadata_digest(md(prometheus))[:8])  # the metadata digest's label (issue 27)
    key = ("forescale_observed_qps", (("namespace", "serving"), ("scaledobject", "llm"), trigger))
    assert m[key] == pytest.approx(prometheus.query_value(RATE, time=prometheus.now))
    assert m[("forescale_decision_reason", (("namespace", "serving"), ("reason", "mode_reactive"),
                                            ("scaledobject", "llm"), trigger))] == 1.0
    assert urllib.request.urlopen(f"http://127.0.0.1:{s.server.http_port}/healthz", timeout=5).status == 200
    health = health_pb2_grpc.HealthStub(s.channel)
    assert health.Check(health_pb2.HealthCheckRequest(service="externalscaler.ExternalScaler"),
                        timeout=5).status == health_pb2.HealthCheckResponse.SERVING
    t = threading.Thread(target=s.server.stop, kwargs={"grace": 2.0})
    t.start()
    t.join(10)
    assert not t.is_alive()
    s.channel.close()


def test_unknown_keys_logged_once(scaler, prometheus, caplog):
    m = md(prometheus, qpsPerReplicas="3", customHeaders="X-Token=s3cr3t-value")
    with caplog.at_level(logging.WARNING, logger="scaler.serve.registry"):
        for _ in range(3):
            scaler.value(m)
    warnings = [r.getMessage() for r in caplog.records if "unknown metadata" in r.getMessage()]
    assert len(warnings) == 1 and "qpsPerReplicas" in warnings[0]
    assert all("s3cr3t" not in r.getMessage() for r in caplog.records)


def _wait_for(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def test_cold_start_query_sets_the_lead(scaler, prometheus):
    m = md(prometheus, coldStartQuery='max(forescale_cold_start_seconds{phase="total",model="m1"})',
           coldStartSeconds="60", mode="forecastAndScale")
    scaler.value(m)
    lead = {dict(k[1])["part"]: v for k, v in scaler.metrics().items() if k[0] == "forescale_lead_seconds"}
    assert lead["cold_start"] == prometheus.cold_start_seconds == 240.0  # the probe's measured T_cold, not 60
    assert lead["total"] == 240.0 + 105.0


def test_forescale_serve_process_answers_and_stops_on_sigterm(prometheus_factory, free_port, tmp_path):
    """The real command line: a client built from the project's proto, health, reflection, SIGTERM."""
    import os
    import signal
    import subprocess
    import sys

    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    now = time.time()
    t = pf.sample_times(now - 3600, now + 3600)  # live at the wall clock: the process reads the real time
    prom = prometheus_factory([pf.SeriesSpec("live_requests_total", {"job": "live"}, "counter", t,
                                             pf.counter_from_rate(t, 8.0))])
    http_port = pf.find_free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "forescale")
    proc = subprocess.Popen([exe, "serve", "--host", "127.0.0.1", "--port", str(free_port), "--http-port",
                             str(http_port), "--state-dir", str(tmp_path / "state")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        ch = grpc.insecure_channel(f"127.0.0.1:{free_port}")
        grpc.channel_ready_future(ch).result(timeout=30)
        stub = pb_grpc.ExternalScalerStub(ch)
        m = {"serverAddress": prom.url, "query": "sum(rate(live_requests_total[2m]))", "qpsPerReplica": "4",
             "mode": "reactive", "hpaTolerance": "0"}
        ref = pb.ScaledObjectRef(name="live", namespace="serving", scalerMetadata=m)
        v = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref, metricName="forescale-serving-live"), timeout=10)
        direct = prom.query_value("sum(rate(live_requests_total[2m]))")
        assert v.metricValues[0].metricValueFloat == pytest.approx(direct, rel=1e-6) == pytest.approx(8.0)
        assert stub.IsActive(ref, timeout=5).result is True
        health = health_pb2_grpc.HealthStub(ch)
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING
        refl = reflection_pb2_grpc.ServerReflectionStub(ch)
        answer = next(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                                timeout=5))
        services = {s.name for s in answer.list_services_response.service}
        assert {"externalscaler.ExternalScaler", "grpc.health.v1.Health"} <= services
        body = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=5).read().decode()
        assert 'forescale_planned_qps{namespace="serving",scaledobject="live",trigger="' in body
        ch.close()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out
        assert "received SIGTERM" in out and "forescale stopped" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_reports_a_port_in_use(free_port):
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        exe = os.path.join(os.path.dirname(sys.executable), "forescale")
        r = subprocess.run([exe, "serve", "--host", "127.0.0.1", "--port", str(free_port), "--http-port", str(busy)],
                           capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert f"127.0.0.1:{busy}" in r.stderr and "HTTP" in r.stderr


def test_health_is_the_process_not_a_workload(prometheus):
    """A trigger whose every fit fails leaves the server SERVING (issue 40, item 3); a scheduler that stops ticking
    (the refreshes behind every answer) is NOT_SERVING (gRPC) and 503 (/healthz) after liveness_seconds, and
    SERVING again once it ticks."""
    s = Scaler(FakeClock(prometheus.now), server={"liveness_seconds": 3})
    try:
        health = health_pb2_grpc.HealthStub(s.channel)
        url = f"http://127.0.0.1:{s.server.http_port}/healthz"

        def states():
            grpc_state = health.Check(health_pb2.HealthCheckRequest(), timeout=2).status
            try:
                code = urllib.request.urlopen(url, timeout=2).status
            except urllib.error.HTTPError as e:
                code = e.code
            return grpc_state, code

        def within(want, seconds):
            deadline = time.monotonic() + seconds
            while states() != want and time.monotonic() < deadline:
                time.sleep(0.1)
            return states()

        fits = s.server.forecasts
        fits.worker.run = lambda fn, job: (_ for _ in ()).throw(RuntimeError("model crashed"))  # every fit fails
        s.value(md(prometheus, mode="forecastAndScale", model="naive", refitInterval="10s", minHistory="1h"))
        serving = (health_pb2.HealthCheckResponse.SERVING, 200)
        deadline = time.monotonic() + 30
        while (sample_value(s.server.metrics.registry, "forescale_fit_failures_total",
                            {"namespace": "serving", "scaledobject": "llm"}) or 0) < 1:
            assert time.monotonic() < deadline, "no fit failed within 30 s"
            time.sleep(0.1)
        s.clock.advance(7200)  # two hours of failing fits (ages count on the fake clock)
        time.sleep(1.5)
        assert states() == serving
        gate = threading.Event()
        real_tick = s.server.registry.tick
        s.server.registry.tick = lambda: gate.wait(30)  # the scheduler hangs
        assert within((health_pb2.HealthCheckResponse.NOT_SERVING, 503), 10) == (
            health_pb2.HealthCheckResponse.NOT_SERVING, 503)
        s.server.registry.tick = real_tick
        gate.set()
        assert within(serving, 5) == serving
    finally:
        s.close()


def test_the_value_sent_to_keda_is_finite_and_agrees_with_is_active(scaler, prometheus):
    """A 1e308 series times headroom 100 overflowed to +inf (INTERNAL before the ranges, 0 with IsActive true
    before that): it is served as MAX_RATE, 1e15 requests/s, and IsActive agrees."""
    m = md(prometheus, query="vector(1e308)", qpsPerReplica="0.001", headroom="100", activationThreshold="1e12")
    assert scaler.value(m).metricValueFloat == 1e15
    assert scaler.stub.IsActive(scaler.ref(m), timeout=5).result is True  # 1e15 > 1e12

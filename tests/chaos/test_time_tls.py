"""Issue 27, clocks and TLS, against the real server: a scaler clock ahead of Prometheus still reads the true
rate (no time= on the observed query); the gRPC certificate is reloaded after rotation; plaintext is announced."""

from __future__ import annotations

import logging
import shutil
import time

import grpc
import pytest

from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.serve.registry import RegistryConfig
from scaler.serve.server import Server, ServerConfig
from support.live import FLAT_QPS, metadata
from support.recorder import Recorder
from support.tls import ca_and_server


def serve(clock=time.time, **config) -> Server:
    """A real server; ``clock`` stands for the machine's wall clock (skewed or not), wired as in production."""
    cfg = ServerConfig(host="127.0.0.1", grpc_port=0, http_port=0, grace_seconds=1.0, registry=RegistryConfig(),
                       **config)
    return Server(cfg, clock=clock, monotonic=time.monotonic, pin_queries=False).start()


def get(port: int, md: dict, name: str, creds=None) -> tuple[float, bool]:
    ch = grpc.secure_channel(f"localhost:{port}", creds) if creds else grpc.insecure_channel(f"127.0.0.1:{port}")
    with ch:
        stub = pb_grpc.ExternalScalerStub(ch)
        ref = pb.ScaledObjectRef(name=name, namespace="chaos", scalerMetadata=md)
        value = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref), timeout=10).metricValues[0].metricValueFloat
        return value, stub.IsActive(ref, timeout=10).result


def test_a_scaler_clock_ahead_of_prometheus_still_reads_the_true_rate(live_prom):
    # the chaos Prometheus holds samples up to 1 h ahead of now: a scaler clock 2 h ahead is past all of them
    s = serve(clock=lambda: time.time() + 2 * 3600)
    rec = Recorder(value=FLAT_QPS)
    try:
        value, active = get(s.grpc_port, metadata(live_prom.url), "ahead")
        # before issue 27: time=<scaler clock> read an empty future: 0 and IsActive false
        assert value == pytest.approx(FLAT_QPS, rel=1e-6) and active
        get(s.grpc_port, metadata(rec.url), "ahead-recorded")
        assert rec.requests and all("time" not in r["query"] for r in rec.requests)
        assert rec.requests[0]["query"]["query"] == [metadata(rec.url)["query"]]
    finally:
        rec.close()
        s.stop(grace=1.0)


def test_plaintext_grpc_is_announced_in_the_log_and_a_gauge(caplog):
    with caplog.at_level(logging.WARNING, logger="forescale"):
        s = serve()
    try:
        assert s.metrics.registry.get_sample_value("forescale_grpc_tls_enabled") == 0
        assert any("gRPC is plaintext" in r.getMessage() for r in caplog.records)
    finally:
        s.stop(grace=1.0)


def test_the_grpc_certificate_is_reloaded_after_rotation(tmp_path, live_prom):
    ca_and_server(tmp_path, "old")
    ca_and_server(tmp_path, "new")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(tmp_path / "old-server.crt", cert)
    shutil.copy(tmp_path / "old-server.key", key)
    s = serve(tls_cert=str(cert), tls_key=str(key))
    trust_old = grpc.ssl_channel_credentials((tmp_path / "old.crt").read_bytes())
    trust_new = grpc.ssl_channel_credentials((tmp_path / "new.crt").read_bytes())
    md = metadata(live_prom.url)
    try:
        assert s.metrics.registry.get_sample_value("forescale_grpc_tls_enabled") == 1
        assert get(s.grpc_port, md, "tls", trust_old)[0] == pytest.approx(FLAT_QPS, rel=1e-6)
        # cert-manager renews the Secret: the kubelet swaps the files
        time.sleep(0.01)
        shutil.copy(tmp_path / "new-server.crt", cert)
        shutil.copy(tmp_path / "new-server.key", key)
        # the next handshake serves the new certificate (before: the old one until a restart)
        assert get(s.grpc_port, md, "tls", trust_new)[0] == pytest.approx(FLAT_QPS, rel=1e-6)
        with pytest.raises(grpc.RpcError) as err:
            get(s.grpc_port, md, "tls", trust_old)
        assert err.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        s.stop(grace=1.0)

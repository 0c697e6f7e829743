"""Credentials held by the scaler, against a real Prometheus that demands them; gRPC over (m)TLS.

Prometheus' own web config (``--web.config.file``) enforces basic auth, or
TLS with a required client certificate. Certificates are made here with the
``openssl`` command line (a test-only CA).
"""

from __future__ import annotations

import crypt
import logging
import subprocess
import time
from pathlib import Path

import grpc
import pytest

from support import promfixture as pf
from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.serve.server import Server, ServerConfig
from support.clock import FakeClock

PASSWORD = "pr0m-s3cret-pw"
QUERY = "sum(rate(auth_requests_total[2m]))"


def _series(now: float):
    t = pf.sample_times(now - 3600, now - pf.END_OFFSET_S)
    return [pf.SeriesSpec("auth_requests_total", {"job": "auth"}, "counter", t, pf.counter_from_rate(t, 7.0))]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=forescale-test-ca", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={name}", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", "2", "-extfile", "san.ext", cwd=d)
    return d


class _TlsPrometheus(pf.PrometheusServer):
    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}"


def _client(now: float, creds_dir: Path) -> tuple[Server, pb_grpc.ExternalScalerStub, grpc.Channel]:
    server = Server(ServerConfig(host="127.0.0.1", grpc_port=0, http_port=0, credentials_dir=str(creds_dir),
                                 grace_seconds=1.0), clock=FakeClock(now)).start()
    ch = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    return server, pb_grpc.ExternalScalerStub(ch), ch


# a first call waits at most first_wait_seconds (2.5 s) for its first refresh, then answers UNAVAILABLE "refresh
# pending" and KEDA asks again at its next poll; on a loaded machine a refresh can take longer than that, so the
# test asks again as KEDA does, until the refresh has answered (this limit only catches a refresh that hangs)
REFRESH_HANG_S = 300.0


def _get(stub, md: dict, name: str = "auth") -> float:
    ref = pb.ScaledObjectRef(name=name, namespace="serving", scalerMetadata=md)
    deadline = time.monotonic() + REFRESH_HANG_S
    while True:
        try:
            return stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref),
                                   timeout=10).metricValues[0].metricValueFloat
        except grpc.RpcError as e:
            pending = e.code() == grpc.StatusCode.UNAVAILABLE and "refresh pending" in (e.details() or "")
            if not pending or time.monotonic() > deadline:
                raise


def test_basic_auth_from_the_credential_store(tmp_path, caplog):
    now = float(int(time.time()))
    web = tmp_path / "web.yml"
    # bcrypt at its lowest cost (2^4 rounds): Prometheus checks the hash on every request, and at the default cost
    # (2^12) each check is a quarter of a CPU-second, which a loaded machine turns into seconds per query
    salt = crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16)
    web.write_text(f"basic_auth_users:\n  scaler: '{crypt.crypt(PASSWORD, salt)}'\n")
    prom = pf.PrometheusServer(_series(now), extra_args=[f"--web.config.file={web}"])
    prom._session.auth = ("scaler", PASSWORD)  # the fixture's own readiness checks and queries
    prom.start()
    creds = tmp_path / "creds"
    (creds / "prom-basic").mkdir(parents=True)
    (creds / "prom-basic" / "username").write_text("scaler\n")
    (creds / "prom-basic" / "password").write_text(PASSWORD + "\n")
    (creds / "wrong").mkdir()
    (creds / "wrong" / "username").write_text("scaler")
    (creds / "wrong" / "password").write_text("not-it")
    (creds / "elsewhere").mkdir()  # a good password, bound to another Prometheus
    (creds / "elsewhere" / "username").write_text("scaler")
    (creds / "elsewhere" / "password").write_text(PASSWORD)
    (creds / "elsewhere" / "allowed-urls").write_text("http://prometheus.other:9090\n")
    (creds / "unbound").mkdir()  # no allowed-urls: usable nowhere
    (creds / "unbound" / "username").write_text("scaler")
    (creds / "unbound" / "password").write_text(PASSWORD)
    for name in ("prom-basic", "wrong"):
        (creds / name / "allowed-urls").write_text(f"# the test Prometheus\n{prom.url}/\n")
    server, stub, ch = _client(now, creds)
    try:
        md = {"serverAddress": prom.url, "query": QUERY, "qpsPerReplica": "5", "mode": "reactive", "hpaTolerance": "0"}
        with caplog.at_level(logging.DEBUG):
            assert _get(stub, {**md, "credentials": "prom-basic"}) == pytest.approx(7.0)
            for name, extra, fragment in (("none", {}, "401"), ("wrong", {"credentials": "wrong"}, "401"),
                                          ("absent", {"credentials": "nosuch"}, "no such set"),
                                          ("bound", {"credentials": "elsewhere"}, "may not be sent to"),
                                          ("unbound", {"credentials": "unbound"}, "no allowed-urls file")):
                with pytest.raises(grpc.RpcError) as e:
                    _get(stub, {**md, **extra}, name=name)
                assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert fragment in e.value.details()
                assert PASSWORD not in e.value.details()
        # the refused sets sent nothing: Prometheus saw no request with their (valid) password
        assert server.registry.metrics.registry.get_sample_value(
            "forescale_prometheus_errors_total", {"namespace": "serving", "scaledobject": "bound", "kind": "rejected"}) is None
        assert all(PASSWORD not in r.getMessage() for r in caplog.records)
    finally:
        ch.close()
        server.stop(grace=1.0)
        prom.stop()


def test_tls_client_certificate_and_ca(tmp_path, pki):
    now = float(int(time.time()))
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {pki / 'server.crt'}\n  key_file: {pki / 'server.key'}\n"
                   f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki / 'ca.crt'}\n")
    prom = _TlsPrometheus(_series(now), extra_args=[f"--web.config.file={web}"])
    prom._session.trust_env = False  # else REQUESTS_CA_BUNDLE/CURL_CA_BUNDLE override session.verify
    prom._session.verify = str(pki / "ca.crt")
    prom._session.cert = (str(pki / "client.crt"), str(pki / "client.key"))
    prom.start()
    creds = tmp_path / "creds"
    (creds / "mtls").mkdir(parents=True)
    for src, dst in (("ca.crt", "ca.crt"), ("client.crt", "tls.crt"), ("client.key", "tls.key")):
        (creds / "mtls" / dst).write_bytes((pki / src).read_bytes())
    (creds / "ca-only").mkdir()
    (creds / "ca-only" / "ca.crt").write_bytes((pki / "ca.crt").read_bytes())
    for name in ("mtls", "ca-only"):
        (creds / name / "allowed-urls").write_text(prom.url)
    server, stub, ch = _client(now, creds)
    try:
        md = {"serverAddress": prom.url, "query": QUERY, "qpsPerReplica": "5", "mode": "reactive", "hpaTolerance": "0"}
        assert _get(stub, {**md, "credentials": "mtls"}) == pytest.approx(7.0)
        with pytest.raises(grpc.RpcError) as e:  # no CA: the server's certificate is not trusted
            _get(stub, md, name="noca")
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE and "TLS verification failed" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:  # CA but no client certificate: Prometheus refuses the handshake
            _get(stub, {**md, "credentials": "ca-only"}, name="nocert")
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        ch.close()
        server.stop(grace=1.0)
        prom.stop()


def test_grpc_mutual_tls(pki, prometheus):
    cfg = ServerConfig(host="127.0.0.1", grpc_port=0, http_port=0, tls_cert=str(pki / "server.crt"),
                       tls_key=str(pki / "server.key"), tls_client_ca=str(pki / "ca.crt"), grace_seconds=1.0)
    server = Server(cfg, clock=FakeClock(prometheus.now)).start()
    md = {"serverAddress": prometheus.url, "query": "sum(rate(forescale_flat_requests_total[2m]))",
          "qpsPerReplica": "5", "mode": "reactive", "hpaTolerance": "0"}
    try:
        # KEDA's side: caCert, tlsClientCert, tlsClientKey
        good = grpc.ssl_channel_credentials((pki / "ca.crt").read_bytes(), (pki / "client.key").read_bytes(),
                                            (pki / "client.crt").read_bytes())
        with grpc.secure_channel(f"localhost:{server.grpc_port}", good) as ch:
            assert _get(pb_grpc.ExternalScalerStub(ch), md) == pytest.approx(5.0)
        no_cert = grpc.ssl_channel_credentials((pki / "ca.crt").read_bytes())
        with grpc.secure_channel(f"localhost:{server.grpc_port}", no_cert) as ch:
            with pytest.raises(grpc.RpcError) as e:
                _get(pb_grpc.ExternalScalerStub(ch), md)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
            with pytest.raises(grpc.RpcError):
                _get(pb_grpc.ExternalScalerStub(ch), md)
    finally:
        server.stop(grace=1.0)

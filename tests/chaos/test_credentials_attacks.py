"""Issue 27, credentials, against the real server over gRPC and a real HTTP(S) Prometheus stand-in: a Host header,
dot segments, unsafeSsl and a cookie cannot carry a credential set anywhere else or to anyone else."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from support.recorder import Recorder
from support.live import metadata
from support.tls import ca_and_server

TOKEN = "s3cr3t-token-a"


def credential_set(root: Path, name: str, allowed: str, ca: Path | None = None) -> None:
    d = root / name
    d.mkdir(parents=True)
    (d / "allowed-urls").write_text(allowed + "\n")
    (d / "token").write_text(TOKEN)
    if ca is not None:
        (d / "ca.crt").write_bytes(ca.read_bytes())


@pytest.fixture
def recorder():
    made = []

    def make(**kw) -> Recorder:
        r = Recorder(**kw)
        made.append(r)
        return r
    yield make
    for r in made:
        r.close()


def refused(s, md: dict, name: str) -> str:
    with pytest.raises(grpc.RpcError) as err:
        s.get(md, name, timeout=10)
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION, err.value.details()
    return err.value.details()


@pytest.mark.parametrize("header", ["Host=evil.example.com", "host=evil.example.com", "Transfer-Encoding=chunked",
                                    "Connection=close", "Cookie=session=x", "Authorization=Bearer other"])
def test_a_host_or_hop_by_hop_header_is_refused_with_credentials(tmp_path, live_scaler, recorder, header):
    prom = recorder()
    credential_set(tmp_path / "creds", "team-a", prom.url)
    s = live_scaler(credentials_dir=str(tmp_path / "creds"))
    msg = refused(s, metadata(prom.url, credentials="team-a", customHeaders=header), "hosted")
    assert "customHeaders" in msg and "team-a" in msg
    assert prom.requests == []  # the token went nowhere
    # without the header the same trigger is served, with the token
    assert s.get(metadata(prom.url, credentials="team-a"), "hosted") == pytest.approx(5.0)
    assert prom.requests[-1]["headers"]["Authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize("path", ["/prom/../admin", "/prom/%2e%2e/admin", "/prom/%2E%2E/admin", "/prom/./x/../../admin",
                                  "/prom/%252e%252e/admin"])
def test_dot_segments_never_escape_the_allowed_path(tmp_path, live_scaler, recorder, path):
    prom = recorder()
    credential_set(tmp_path / "creds", "team-a", prom.url + "/prom")
    s = live_scaler(credentials_dir=str(tmp_path / "creds"))
    msg = refused(s, metadata(prom.url + path, credentials="team-a"), "dots")
    # the set and the refused URL only: not the allowed URLs, not where the credentials live
    assert "team-a" in msg and str(tmp_path) not in msg and "/prom\n" not in msg and "allows:" not in msg
    assert prom.requests == []
    assert s.get(metadata(prom.url + "/prom", credentials="team-a"), "dots") == pytest.approx(5.0)
    assert prom.requests[-1]["path"] == "/prom/api/v1/query"


def test_a_cookie_earned_with_one_set_never_goes_out_again(tmp_path, live_scaler, recorder):
    prom = recorder()
    credential_set(tmp_path / "creds", "team-a", prom.url)
    s = live_scaler(credentials_dir=str(tmp_path / "creds"))
    assert s.get(metadata(prom.url, credentials="team-a"), "tenant-a") == pytest.approx(5.0)
    assert s.get(metadata(prom.url), "no-creds") == pytest.approx(5.0)  # same host, no credentials
    assert len(prom.requests) >= 2
    # the answer set a cookie each time; no request carried one back (before: 401 -> 200 with tenant A's cookie)
    assert all("Cookie" not in r["headers"] for r in prom.requests)
    anonymous = [r for r in prom.requests if "Authorization" not in r["headers"]]
    assert anonymous and all("Cookie" not in r["headers"] for r in anonymous)


def test_unsafe_ssl_does_not_lift_the_sets_ca(tmp_path, live_scaler, recorder):
    pki = tmp_path / "pki"
    pki.mkdir()
    ca_and_server(pki, "team-ca")
    ca_and_server(pki, "other-ca")
    impostor = recorder(tls=(str(pki / "other-ca-server.crt"), str(pki / "other-ca-server.key")))
    credential_set(tmp_path / "creds", "team-a", impostor.url, ca=pki / "team-ca.crt")
    s = live_scaler(credentials_dir=str(tmp_path / "creds"))
    with pytest.raises(grpc.RpcError) as err:  # before: unsafeSsl turned the set's CA check off
        s.get(metadata(impostor.url, credentials="team-a", unsafeSsl="true"), "impostor", timeout=10)
    assert err.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "TLS verification failed" in err.value.details() and "unsafeSsl" not in err.value.details()
    assert impostor.requests == []  # the handshake failed: no request, no token

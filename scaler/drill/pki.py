"""The drill's certificates: one cluster CA, a front-proxy CA, KEDA's metrics-service CA, and the leaves.

Everything is made with the ``cryptography`` package (ECDSA P-256, valid for two days) into one directory per run;
nothing is reused across runs. Identities are distinct so that the apiserver's audit log says who did what:
``system:kube-controller-manager`` (the HPA), ``keda-operator``, ``keda-metrics-apiserver``, ``kwok`` and
``drill-admin``, each in the group ``system:masters`` (the drill needs no RBAC of its own).
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID = _dt.timedelta(days=2)
LOOPBACK = ("127.0.0.1", "::1")

# the clients of the apiserver, by file stem -> (user, groups)
CLIENTS = {
    "admin": ("drill-admin", ("system:masters",)),
    "controller-manager": ("system:kube-controller-manager", ("system:masters",)),
    "keda-operator": ("keda-operator", ("system:masters",)),
    "keda-adapter": ("keda-metrics-apiserver", ("system:masters",)),
    "kwok": ("kwok", ("system:masters",)),
}
# the DNS name the aggregator checks on the adapter's serving certificate: <service>.<namespace>.svc
ADAPTER_SERVICE = ("keda-metrics-apiserver", "keda")


@dataclass(frozen=True)
class Pair:
    """A certificate and its key on disk (PEM)."""

    cert: Path
    key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    return x509.Name([*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class Authority:
    """A CA that signs leaves into ``directory``."""

    def __init__(self, directory: Path, stem: str, cn: str, now: _dt.datetime):
        self.directory, self.now = directory, now
        self.key = _key()
        name = _name(cn)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - _dt.timedelta(minutes=5)).not_valid_after(now + VALID)
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                  content_commitment=False, key_encipherment=False,
                                                  data_encipherment=False, key_agreement=False,
                                                  encipher_only=False, decipher_only=False), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.pair = Pair(_write(directory / f"{stem}.crt", self.cert.public_bytes(serialization.Encoding.PEM)),
                         _write(directory / f"{stem}.key", _pem_key(self.key)))

    def leaf(self, stem: str, cn: str, *, orgs: tuple[str, ...] = (), server: bool = False, client: bool = False,
             dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()) -> Pair:
        key = _key()
        usages = [u for u, on in ((ExtendedKeyUsageOID.SERVER_AUTH, server), (ExtendedKeyUsageOID.CLIENT_AUTH, client))
                  if on]
        b = (x509.CertificateBuilder().subject_name(_name(cn, orgs)).issuer_name(self.cert.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(self.now - _dt.timedelta(minutes=5)).not_valid_after(self.now + VALID)
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
        alt = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if alt:
            b = b.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = b.sign(self.key, hashes.SHA256())
        return Pair(_write(self.directory / f"{stem}.crt", cert.public_bytes(serialization.Encoding.PEM)),
                    _write(self.directory / f"{stem}.key", _pem_key(key)))


@dataclass(frozen=True)
class Pki:
    """Every file the control plane needs, by role."""

    ca: Pair
    apiserver: Pair
    front_proxy_ca: Pair
    front_proxy_client: Pair
    service_account: Pair  # the key signs service-account tokens, its public half verifies them
    clients: dict[str, Pair]
    adapter_serving: Pair
    keda_grpc_dir: Path  # ca.crt, tls.crt, tls.key: KEDA's operator <-> adapter mTLS (both load the same dir)


def make_pki(directory: Path, now: _dt.datetime | None = None) -> Pki:
    """Write a fresh PKI for one drill into ``directory``."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    directory.mkdir(parents=True, exist_ok=True)
    ca = Authority(directory, "ca", "forescale-drill-ca", now)
    apiserver = ca.leaf("apiserver", "kube-apiserver", server=True,
                        dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
                        ips=(*LOOPBACK, "10.96.0.1"))
    clients = {stem: ca.leaf(f"client-{stem}", user, orgs=groups, client=True) for stem, (user, groups) in CLIENTS.items()}
    svc, ns = ADAPTER_SERVICE
    adapter = ca.leaf("adapter-serving", svc, server=True, dns=("localhost", f"{svc}.{ns}.svc", f"{svc}.{ns}"),
                      ips=LOOPBACK)
    fp = Authority(directory, "front-proxy-ca", "forescale-drill-front-proxy-ca", now)
    fp_client = fp.leaf("front-proxy-client", "front-proxy-client", client=True)
    sa_key = _key()
    sa = Pair(_write(directory / "sa.pub", sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)),
        _write(directory / "sa.key", _pem_key(sa_key)))
    grpc_dir = directory / "keda-grpc"
    grpc_dir.mkdir(exist_ok=True)
    keda_ca = Authority(grpc_dir, "ca", "forescale-drill-keda-ca", now)
    pair = keda_ca.leaf("tls", "keda-operator", server=True, client=True,
                        dns=("localhost", "keda-operator", "keda-operator.keda.svc"), ips=LOOPBACK)
    assert pair.cert.name == "tls.crt" and keda_ca.pair.cert.name == "ca.crt"
    return Pki(ca=ca.pair, apiserver=apiserver, front_proxy_ca=fp.pair, front_proxy_client=fp_client,
               service_account=sa, clients=clients, adapter_serving=adapter, keda_grpc_dir=grpc_dir)

"""gRPC's TLS credentials (``--tls-cert``, ``--tls-key``, ``--tls-client-ca``), re-read after they change on disk.

cert-manager rotates the certificate in place: the files are checked at each new handshake (modification time,
size, inode) and loaded again when they changed; a rotated pair that does not load keeps the last good one
(logged). The PEM files are read and checked with the ``ssl`` module first, so a bad key, a key that does not
match the certificate or a CA file that does not load raise ``OSError``/``ValueError`` naming the flag and the
cause (the server does not start; the CLI exits 2).
"""

from __future__ import annotations

import logging
import os
import ssl

import grpc

log = logging.getLogger("forescale")  # the server's logger: its lines read as they did from server.py


def server_credentials(cert: str, key: str | None, client_ca: str | None) -> grpc.ServerCredentials:
    """Credentials that re-read the files after they change on disk (checked at each new handshake, by
    modification time and size); a rotated pair that does not load keeps the last good one (logged)."""
    first = certificate_configuration(cert, key, client_ca)
    files = [p for p in (cert, key, client_ca) if p]
    seen = {"stamp": stamps(files)}

    def fetch():
        stamp = stamps(files)
        if stamp == seen["stamp"]:
            return None
        seen["stamp"] = stamp
        try:
            fresh = certificate_configuration(cert, key, client_ca)
        except (OSError, ValueError) as e:
            log.error("TLS files changed but do not load (keeping the previous certificate): %s", e)
            return None
        log.info("TLS certificate reloaded from %s", cert)
        return fresh

    return grpc.dynamic_ssl_server_credentials(first, fetch, require_client_authentication=bool(client_ca))


def stamps(files: list[str]) -> tuple[tuple[int, int, int] | None, ...]:
    """Each file's (modification time, size, inode); None for one that cannot be read."""
    out: list[tuple[int, int, int] | None] = []
    for p in files:
        try:
            st = os.stat(p)
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append(None)
    return tuple(out)


def certificate_configuration(cert: str, key: str | None, client_ca: str | None):
    """PEM files read and checked with the ssl module first, so a bad key or a mismatch is named."""
    def read(path: str, what: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            raise OSError(f"--{what}: cannot read {path}: {e.strerror}") from None

    if not key:
        raise ValueError("--tls-cert needs --tls-key")
    key_pem, cert_pem = read(key, "tls-key"), read(cert, "tls-cert")
    if b"-----BEGIN CERTIFICATE-----" not in cert_pem:
        raise ValueError(f"--tls-cert {cert}: no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)")
    if b"PRIVATE KEY-----" not in key_pem:
        raise ValueError(f"--tls-key {key}: no PEM private key in it (expected -----BEGIN ... PRIVATE KEY-----)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(cert, key)
    except ssl.SSLError as e:
        cause = "the key does not match the certificate" if "KEY_VALUES_MISMATCH" in str(e) else (e.reason or str(e))
        raise ValueError(f"--tls-cert {cert} / --tls-key {key}: {cause} "
                         f"(expected a PEM certificate and its unencrypted PEM private key)") from None
    pair = [(key_pem, cert_pem)]
    if client_ca:
        ca = read(client_ca, "tls-client-ca")
        try:
            ctx.load_verify_locations(cafile=client_ca)
        except ssl.SSLError as e:
            raise ValueError(f"--tls-client-ca {client_ca}: {e.reason or e} "
                             f"(expected PEM CA certificates)") from None
        return grpc.ssl_server_certificate_configuration(pair, root_certificates=ca)
    return grpc.ssl_server_certificate_configuration(pair)

"""Throw-away certificates for TLS tests, made with the openssl command line (a CA and a server certificate for
localhost signed by it)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def ca_and_server(d: Path, ca: str) -> None:
    """``ca``.crt/.key and a server certificate for localhost and 127.0.0.1 signed by it
    (``ca``-server.crt/.key), valid 2 days, in ``d``."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.crt", "-days",
            "2", "-subj", f"/CN={ca}", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}-server.key", "-out", f"{ca}-server.csr",
            "-subj", "/CN=localhost", cwd=d)
    openssl("x509", "-req", "-in", f"{ca}-server.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", f"{ca}-server.crt", "-days", "2", "-extfile", "san.ext", cwd=d)

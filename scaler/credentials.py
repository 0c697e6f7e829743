"""Credential sets for Prometheus, held by the scaler and bound to the URLs each set allows.

``CredentialStore`` reads a set from files (a mounted Secret), ``Credentials``
checks where it may go: the URL exactly as it will be sent must be at or below
one of its ``allowed-urls`` (dot segments refused), and a trigger's
``customHeaders`` may not re-route or re-frame it (``Host``, hop-by-hop,
``Authorization``, ``Cookie``). Errors name the set and the refused URL only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from .promerror import PromError, PromErrorKind, redact_url, short

# headers a trigger may not set next to a credential set: they would re-route it (Host) or change the hop
REFUSED_WITH_CREDENTIALS = frozenset({"host", "connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                                      "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
                                      "authorization", "cookie", ":authority"})


def _origin(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path) of ``url`` as aiohttp will send it; ValueError for a path with dot segments
    (``..`` or ``.``, also percent-encoded: a server or proxy may resolve them after the check)."""
    u = urlparse(url.strip())
    port = u.port or (443 if u.scheme == "https" else 80)
    segments = unquote(unquote(u.path)).replace("\\", "/").split("/")
    if any(seg in (".", "..") for seg in segments):
        raise ValueError("dot segments in the path")
    path = re.sub(r"/{2,}", "/", u.path).rstrip("/")
    return (u.scheme.lower(), (u.hostname or "").lower().rstrip("."), port, path)


def url_allowed(url: str, allowed: tuple[str, ...]) -> bool:
    """Same scheme, host and port as one allowed base URL, and a path at or below its path (no dot segments)."""
    try:
        s, h, p, path = _origin(url)
        for a in allowed:
            sa, ha, pa, pathA = _origin(a)
            if (s, h, p) == (sa, ha, pa) and (path == pathA or path.startswith(pathA + "/")):
                return True
    except ValueError:
        return False
    return False


@dataclass(frozen=True)
class Credentials:
    """One credential set. ``repr`` shows which parts exist, never their values.

    ``allowed_urls``: the Prometheus base URLs the set may be sent to (None: any;
    only sets built in code, such as tests', have None -- the store always reads them).
    """

    name: str
    bearer_token: str | None = field(default=None, repr=False)
    basic: tuple[str, str] | None = field(default=None, repr=False)
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    allowed_urls: tuple[str, ...] | None = None

    def describe(self) -> str:
        parts = [p for p, v in (("bearer", self.bearer_token), ("basic", self.basic),
                                ("ca", self.ca_file), ("client-cert", self.cert_file)) if v]
        return f"{self.name}({', '.join(parts) or 'empty'})"

    def check_target(self, server_address: str) -> None:
        """PromError CREDENTIALS unless this set may be sent to ``server_address``."""
        if self.allowed_urls is not None and not url_allowed(server_address, self.allowed_urls):
            raise PromError(PromErrorKind.CREDENTIALS,
                            f"credentials '{self.name}' may not be sent to {redact_url(server_address)}: not at or "
                            "below a URL of the set's allowed-urls (paths with '.' or '..' segments never are)")

    def check_headers(self, headers) -> None:
        """PromError CREDENTIALS for a customHeaders name that would re-route or re-frame the credential."""
        for k, _ in headers:
            if k.strip().lower() in REFUSED_WITH_CREDENTIALS:
                raise PromError(PromErrorKind.CREDENTIALS,
                                f"credentials '{self.name}': customHeaders may not set {short(k.strip(), 40)!r} "
                                "with a credential set (Host, Authorization, Cookie and hop-by-hop headers are refused)")


class CredentialStore:
    """Credential sets as files: ``<root>/<name>/{allowed-urls, token | username,password | ca.crt | tls.crt,tls.key}``.

    This is how a Kubernetes Secret mounted as a volume looks. Files are read
    each time a client is built, so rotated secrets are picked up.
    ``allowed-urls`` (required): the Prometheus base URLs the set may be sent
    to, one per line; a trigger with another ``serverAddress`` is refused.
    """

    def __init__(self, root: str | os.PathLike | None):
        self.root = Path(root) if root else None

    def get(self, name: str) -> Credentials | None:
        if not name:
            return None
        if self.root is None:
            raise PromError(PromErrorKind.CREDENTIALS,
                            f"credentials '{name}' requested but the scaler has no credentials directory "
                            "(--credentials-dir or FORESCALE_CREDENTIALS_DIR)")
        d = self.root / name
        if not d.is_dir():
            raise PromError(PromErrorKind.CREDENTIALS,
                            f"credentials '{short(name, 60)}': no such set in the scaler's credentials directory; "
                            "a set is a directory of files allowed-urls, and token, or username+password, and/or "
                            "ca.crt, tls.crt+tls.key")

        def read(fname: str) -> str | None:
            p = d / fname
            try:
                return p.read_text().strip() if p.is_file() else None
            except OSError as e:
                raise PromError(PromErrorKind.CREDENTIALS, f"credentials '{name}': cannot read its {fname} file: "
                                                           f"{e.strerror}") from None

        allowed_text = read("allowed-urls")
        if allowed_text is None:
            raise PromError(PromErrorKind.CREDENTIALS,
                            f"credentials '{name}': no allowed-urls file; list the Prometheus base URLs this set "
                            "may be sent to, one per line (e.g. https://prometheus.monitoring:9090)")
        allowed = tuple(line.strip() for line in allowed_text.splitlines() if line.strip() and not line.startswith("#"))
        token = read("token")
        user, password = read("username"), read("password")
        if (user is None) != (password is None):
            raise PromError(PromErrorKind.CREDENTIALS, f"credentials '{name}': basic auth needs both username and password files")
        cert, key = d / "tls.crt", d / "tls.key"
        if cert.is_file() != key.is_file():
            raise PromError(PromErrorKind.CREDENTIALS, f"credentials '{name}': a client certificate needs both tls.crt and tls.key")
        if token and user:
            raise PromError(PromErrorKind.CREDENTIALS, f"credentials '{name}': give either token or username+password, not both")
        ca = d / "ca.crt"
        return Credentials(
            name=name,
            bearer_token=token,
            basic=(user, password) if user is not None and password is not None else None,  # both or neither
            ca_file=str(ca) if ca.is_file() else None,
            cert_file=str(cert) if cert.is_file() else None,
            key_file=str(key) if key.is_file() else None,
            allowed_urls=allowed,
        )



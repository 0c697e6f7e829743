"""The serverAddress a printed ScaledObject carries (tune, the fleet, ``backtest --advise``): the ``--prometheus`` URL
without its user:password, which the scaler refuses in metadata (``specvalues.parse_server_address``), and the
note that says where credentials go instead (docs/serving.md, Credentials)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

CREDENTIALS_NOTE = ("the user:password of --prometheus is left out (the scaler refuses credentials in metadata): "
                    "give them to the scaler as a credential set and name it with `credentials:` (docs/serving.md, "
                    "Credentials)")


def without_credentials(url: str) -> str:
    """``url`` as a printed serverAddress: without its user:password (the scaler refuses them there)."""
    u = urlsplit(url)
    if u.username is None and u.password is None:
        return url
    return urlunsplit((u.scheme, u.netloc.rpartition("@")[2], u.path, u.query, u.fragment))


def server_notes(url: str | None) -> dict[str, str]:
    """The printed trigger's note on serverAddress: where the credentials of ``url`` went, if it had any."""
    return {"serverAddress": CREDENTIALS_NOTE} if url and without_credentials(url) != url else {}

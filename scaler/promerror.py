"""Prometheus errors by kind, and text fit for a message (no secret, no megabyte echo)."""

from __future__ import annotations

from enum import Enum
from urllib.parse import urlparse


class PromErrorKind(str, Enum):
    UNREACHABLE = "unreachable"  # connection refused, DNS, timeout, TLS failure, HTTP 5xx
    REJECTED = "rejected"  # HTTP 4xx: bad PromQL, auth refused
    NO_DATA = "no_data"  # empty result (or NaN/Inf) where a value is needed (ignoreNullValues=false)
    MULTIPLE_SERIES = "multiple_series"
    TOO_LARGE = "too_large"  # the answer is over its size cap (MAX_INSTANT_BODY_BYTES / MAX_RANGE_BODY_BYTES)
    BAD_VALUE = "bad_value"  # a value that is not a number, or one the key cannot use (a negative T_cold)
    CREDENTIALS = "credentials"  # the named credential set is missing, unreadable or not for this target


class PromError(Exception):
    """``detail``: Prometheus' own ``error`` text of a 4xx answer (cut, control characters escaped), for the CLI's
    messages about the user's own query; the server does not show it (it may quote the PromQL: --http-hide-queries)."""

    def __init__(self, kind: PromErrorKind, message: str, detail: str | None = None):
        self.kind = kind
        self.detail = detail
        super().__init__(message)


def redact_url(url: str) -> str:
    """``url`` fit for a message: scheme, host, port and path only (no user:password, query or fragment)."""
    try:
        u = urlparse(url)
        host = u.hostname or ""
        port = f":{u.port}" if u.port else ""
    except ValueError:
        return "<unparseable URL>"
    if ":" in host:
        host = f"[{host}]"
    return f"{u.scheme}://{host}{port}{u.path}"


def short(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters for a message or log line (never a megabyte echo)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"



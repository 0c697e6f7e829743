"""The forms of single metadata values: each converter takes the string KEDA passed and returns the value, or raises
``ValueError``; ``scaler.spec`` reads each key through one (``Reader.get``), which turns the error into a
``MetadataError`` naming the key and the accepted form. Where a key means the same as in KEDA's Prometheus scaler
(``queryParameters``, ``customHeaders``, ``timeout``, ``metricName``) its form is the same; ``redacted_url`` is
serverAddress as an error may show it.
"""

from __future__ import annotations

import math
import re
from urllib.parse import urlparse

from forecaster.calendar import parse_holidays_spec

from .durations import parse_duration
from .limits import MAX_TIMEOUT_SECONDS
from .reader import cut

def parse_pairs(text: str) -> tuple[tuple[str, str], ...]:
    """'a=1,b=2' -> (('a','1'), ('b','2')), as KEDA's Prometheus scaler reads them."""
    out = []
    for item in text.split(","):
        if not item.strip():
            continue
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise ValueError(item)
        out.append((k.strip(), v.strip()))
    return tuple(out)


def default_metric_name(namespace: str, name: str) -> str:
    base = f"forescale-{namespace or 'default'}-{name or 'scaledobject'}"
    return re.sub(r"[^a-z0-9-]", "-", base.lower())


def parse_timeout(v: str) -> float:
    """KEDA's Prometheus scaler reads ``timeout`` as milliseconds; a duration with a unit also works."""
    try:
        ms = float(v)
    except ValueError:
        secs = parse_duration(v)
    else:
        if not math.isfinite(ms):
            raise ValueError(v)
        secs = ms / 1000.0
    if not 0 < secs <= MAX_TIMEOUT_SECONDS:
        raise ValueError(v)
    return secs


def parse_server_address(v: str) -> str:
    u = urlparse(v)
    if u.scheme not in ("http", "https") or not u.netloc:
        raise ValueError(v)
    if u.username or u.password:
        raise ValueError(v)  # credentials belong in the scaler's credential store
    return v.rstrip("/")


def parse_budget_name(v: str) -> str:
    if v and not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", v):
        raise ValueError(v)
    return v


def redacted_url(v: str) -> str:
    """serverAddress as an error shows it: no user:password, query or fragment."""
    try:
        u = urlparse(v)
        if not (u.username or u.password or u.query or u.fragment or "@" in v):
            return cut(repr(v))
        host = (u.hostname or "") + (f":{u.port}" if u.port else "")
    except ValueError:
        return "an unparseable URL"
    return cut(repr(f"{u.scheme}://<user:password hidden>@{host}{u.path}"))


def parse_holidays(v: str) -> str:
    if not v:
        return ""
    country, subdiv = parse_holidays_spec(v)
    return country if subdiv is None else f"{country}-{subdiv}"


def parse_holiday_window(v: str) -> int:
    n = int(v)
    if not 0 <= n <= 7:
        raise ValueError(v)
    return n


def parse_events_path(v: str) -> str:
    if v and (not v.startswith("/") or len(v) > 1024 or not v.isprintable()):
        raise ValueError(v)
    return v


def parse_replicas(v: str) -> int:
    x = float(v)
    if not (math.isfinite(x) and x == int(x) and 0 <= x <= 10000):
        raise ValueError(v)
    return int(x)


def parse_credential_name(v: str) -> str:
    if v == "":
        return v
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,63}", v) or v in (".", ".."):
        raise ValueError(v)
    return v


def parse_metric_name(v: str) -> str:
    low = v.lower()
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,199}", low):
        raise ValueError(v)
    return low

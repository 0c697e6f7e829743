"""Prometheus access: a shared, bounded connection pool per target, queries on top of it.

``PromPool`` is the one way out to Prometheus: one ``aiohttp`` session per
target (scheme, host, port and TLS identity) with at most ``per_target``
connections, shared by every ScaledObject that queries that target; a global
limit on requests in flight; a total deadline per request (queueing, connect,
headers and body together, so a target that drips bytes cannot hold a caller
longer than its ``timeout``). Callers stay synchronous: the pool runs its own
event loop thread. ``PrometheusClient`` is one (target, credentials) view on a
pool: instant queries for the observed rate and T_cold, range queries (split to
respect Prometheus' 11,000 points per series) and ``range_series`` (the one
place where a range answer becomes one ``Series``).

Credentials are held by the scaler (``CredentialStore``), selected by name from
the metadata, and bound to the base URLs their set allows (``allowed-urls``).
No secret is ever logged or put in an error message: URLs in messages lose
their user, query and fragment; error bodies are never echoed.

Bounds (issue 27): an answer is read as a stream, decompressed here with a cap
(``MAX_INSTANT_BODY_BYTES`` for an instant query, ``MAX_RANGE_BODY_BYTES`` per
range chunk), and refused as soon as it holds a second series (the series are
counted as the bytes arrive, before anything is parsed); range samples outside
the asked window are dropped before a grid is built; no cookie jar; sessions
unused for ``SESSION_IDLE_SECONDS`` are closed. A credential set is bound:
``customHeaders`` may not carry ``Host`` or hop-by-hop headers with it, the
URL is matched against ``allowed-urls`` exactly as it will be sent (dot
segments refused), and ``unsafeSsl`` does not lift its ``ca.crt``.
"""

from __future__ import annotations

import json
import logging
import math
import ssl
from typing import Any

import aiohttp

from forecaster.base import Series
from forecaster.series import HygieneReport, from_prometheus_matrix

from .credentials import CredentialStore, Credentials, url_allowed  # noqa: F401 - re-exported
from .limits import MAX_INSTANT_BODY_BYTES, MAX_RANGE_BODY_BYTES
from .promerror import PromError, PromErrorKind, redact_url, short  # noqa: F401 - re-exported
from .prompool import PromPool, default_pool  # noqa: F401 - re-exported
from .spec import PrometheusTarget

log = logging.getLogger(__name__)

MAX_POINTS = 11_000  # Prometheus refuses range queries above this many points per series
MAX_BODY_BYTES = MAX_RANGE_BODY_BYTES  # the default cap of one answer (decompressed)
# Prometheus' API errorType vocabulary: shown in messages (bodies never are)
ERROR_TYPES = ("bad_data", "execution", "timeout", "canceled", "internal", "unavailable", "not_found")


class PrometheusClient:
    """Queries one Prometheus with the target's headers, parameters, TLS and credentials, through a ``PromPool``."""

    def __init__(self, target: PrometheusTarget, credentials: Credentials | None = None, *,
                 pool: PromPool | None = None):
        self.target = target
        self.pool = pool or default_pool()
        self.where = redact_url(target.server_address)
        headers = dict(target.custom_headers)
        ca = cert = key = None
        if credentials is not None:
            credentials.check_target(target.server_address)
            credentials.check_headers(target.custom_headers)
            if credentials.bearer_token:
                headers["Authorization"] = f"Bearer {credentials.bearer_token}"
            if credentials.basic:
                headers["Authorization"] = aiohttp.encode_basic_auth(*credentials.basic)
            ca, cert, key = credentials.ca_file, credentials.cert_file, credentials.key_file
        self._headers = headers
        self._tls = (target.unsafe_ssl, ca, cert, key)
        self._params = dict(target.query_parameters)

    def _api(self, path: str, params: dict[str, str], *, want: str, max_bytes: int = MAX_BODY_BYTES,
             one_series: bool = False) -> Any:
        where, timeout = self.where, self.target.timeout_seconds
        url = self.target.server_address.rstrip("/") + path
        try:
            status, body = self.pool.get(url, {**self._params, **params}, headers=self._headers, tls=self._tls,
                                         deadline=timeout, max_bytes=max_bytes, one_series=one_series)
        except PromError as e:
            if e.kind in (PromErrorKind.TOO_LARGE, PromErrorKind.MULTIPLE_SERIES):
                raise PromError(e.kind, f"Prometheus at {where}: {e}") from None
            raise
        except TimeoutError:
            raise PromError(PromErrorKind.UNREACHABLE, f"Prometheus at {where} did not answer within {timeout:g}s") from None
        except (aiohttp.ClientSSLError, ssl.SSLError):
            raise PromError(PromErrorKind.UNREACHABLE, f"Prometheus at {where}: TLS verification failed "
                            "(the server's certificate is not signed by a trusted CA or the credential set's ca.crt)") from None
        except aiohttp.InvalidURL:
            raise PromError(PromErrorKind.REJECTED, f"Prometheus at {where}: not a usable URL") from None
        except (aiohttp.ClientError, OSError) as e:
            raise PromError(PromErrorKind.UNREACHABLE, f"Prometheus at {where} is unreachable: {type(e).__name__}") from None
        if status != 200:
            kind = PromErrorKind.UNREACHABLE if status >= 500 or status < 400 else PromErrorKind.REJECTED
            raise PromError(kind, f"Prometheus at {where} answered HTTP Status Code {status}{_error_type(body)}",
                            _error_text(body) if 400 <= status < 500 else None)
        try:
            doc = json.loads(body)
            if doc["status"] != "success":
                raise KeyError("status")
            kind, result = doc["data"].get("resultType"), doc["data"]["result"]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise PromError(PromErrorKind.UNREACHABLE, f"Prometheus at {where} sent an unreadable answer: "
                            f"{type(e).__name__}") from None
        if kind != want or not isinstance(result, list) or not all(isinstance(x, dict) for x in result):
            raise PromError(PromErrorKind.BAD_VALUE, f"the query's result is a {short(str(kind), 20)}, not an "
                            f"{'instant vector' if want == 'vector' else 'range vector'}; accepted: a query whose "
                            f"result is one series, e.g. sum(rate(x[2m])) (drop scalar() or wrap it: vector(...))")
        return result

    def instant(self, query: str, at: float | None = None, *, one_series: bool = False,
                max_bytes: int = MAX_INSTANT_BODY_BYTES) -> list[dict]:
        """An instant query (at Prometheus' now unless ``at``); the answer capped at ``max_bytes``."""
        params = {"query": query}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self._api("/api/v1/query", params, want="vector", max_bytes=max_bytes, one_series=one_series)

    def scalar(self, query: str, at: float | None = None, *, ignore_null: bool = True) -> float:
        """The single value of an instant query, with KEDA's Prometheus-scaler semantics.

        Empty result: 0 with ``ignore_null`` else NO_DATA. Several series:
        MULTIPLE_SERIES. NaN/Inf: 0 with ``ignore_null`` else NO_DATA (no usable value, like no series).
        Negative values are returned as they are (the caller floors rates).
        """
        try:
            result = self.instant(query, at, one_series=True)
        except PromError as e:
            if e.kind is PromErrorKind.MULTIPLE_SERIES:
                raise PromError(e.kind, f"{e}: {short(query)}") from None
            raise
        if not result:
            if ignore_null:
                return 0.0
            raise PromError(PromErrorKind.NO_DATA, f"query returned no series (ignoreNullValues=false): {short(query)}")
        if len(result) > 1:
            raise PromError(PromErrorKind.MULTIPLE_SERIES,
                            f"query returned {len(result)} series; expected exactly one "
                            f"(aggregate it, e.g. sum(...)): {short(query)}")
        item = result[0]
        raw: Any = item.get("value", [None, None])[1] if "value" in item else None  # JSON: float() judges it
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise PromError(PromErrorKind.BAD_VALUE, f"query returned a non-numeric value {short(repr(raw), 40)}: {short(query)}") from None
        if not math.isfinite(value):  # NaN (0/0), Inf: no usable value, like no series
            if ignore_null:
                return 0.0
            raise PromError(PromErrorKind.NO_DATA, f"query returned {raw}, not a usable value: {short(query)}")
        return value

    def range(self, query: str, start: float, end: float, step: float, *, one_series: bool = False) -> list[dict]:
        """A range query split into chunks of at most ``MAX_POINTS`` points, merged per series; samples outside
        [start, end] (a broken or hostile answer) are dropped here, before any grid is built from them."""
        if step <= 0 or end < start:
            raise ValueError(f"bad range: start={start} end={end} step={step}")
        chunk = step * (MAX_POINTS - 1)
        merged: dict[tuple, dict] = {}
        t0 = start
        while t0 <= end:
            t1 = min(end, t0 + chunk)
            part = self._api("/api/v1/query_range", {"query": query, "start": f"{round(t0)}", "end": f"{round(t1)}",
                                                     "step": f"{step:g}s"}, want="matrix", one_series=one_series)
            lo, hi = round(t0) - step, round(t1) + step
            for s in part:
                key = tuple(sorted(s.get("metric", {}).items()))
                merged.setdefault(key, {"metric": s.get("metric", {}), "values": []})["values"].extend(
                    v for v in s.get("values", []) if _within(v, lo, hi))
            t0 = t1 + step
        return list(merged.values())

    def range_series(self, query: str, start: float, end: float, step: float) -> tuple[Series, HygieneReport]:
        """``range`` as one regular ``Series`` at ``step`` (hygiene applied), with what hygiene found.

        No series: NO_DATA; several: MULTIPLE_SERIES (a rate for forecasting
        must aggregate to one); malformed samples: ValueError.
        """
        try:
            result = self.range(query, start, end, step, one_series=True)
        except PromError as e:
            if e.kind is PromErrorKind.MULTIPLE_SERIES:
                raise PromError(e.kind, f"range {e}: {short(query)}") from None
            raise
        if not result:
            raise PromError(PromErrorKind.NO_DATA, f"range query returned no series: {short(query)}")
        if len(result) > 1:
            raise PromError(PromErrorKind.MULTIPLE_SERIES,
                            f"range query returned {len(result)} series; expected exactly one "
                            f"(aggregate it, e.g. sum(...)): {short(query)}")
        return from_prometheus_matrix(result, step)



def _within(sample, lo: float, hi: float) -> bool:
    """A [t, value] sample whose time is a number in [lo, hi]; malformed ones are kept for hygiene to name."""
    try:
        return lo <= float(sample[0]) <= hi
    except (TypeError, ValueError, IndexError, KeyError):
        return True


def _error_text(body: bytes) -> str | None:
    """Prometheus' own ``error`` of an answer (e.g. its PromQL "parse error ..."), cut to 300 characters with
    control characters escaped; None when the body is not Prometheus' JSON error."""
    try:
        text = json.loads(body).get("error") if len(body) <= (1 << 20) else None
    except (ValueError, AttributeError):
        return None
    if not isinstance(text, str) or not text:
        return None
    return short("".join(c if c.isprintable() else repr(c)[1:-1] for c in text), 300)


def _error_type(body: bytes) -> str:
    """Prometheus' errorType when it is one of its fixed vocabulary; never the body itself."""
    try:
        kind = json.loads(body).get("errorType") if len(body) <= (1 << 20) else None
    except (ValueError, AttributeError):
        return ""
    return f" ({kind})" if kind in ERROR_TYPES else ""

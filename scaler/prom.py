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
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import json
import logging
import math
import os
import ssl
import threading
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import getproxies_environment, proxy_bypass_environment

import aiohttp

from forecaster.base import Series
from forecaster.series import HygieneReport, from_prometheus_matrix

from .spec import PrometheusTarget

log = logging.getLogger(__name__)

MAX_POINTS = 11_000  # Prometheus refuses range queries above this many points per series
MAX_BODY_BYTES = 64 << 20  # a larger answer is refused (a 14-day range at 60 s is ~1 MB)
RETRY_STATUS = (502, 503, 504)  # one quick retry, within the same deadline
# Prometheus' API errorType vocabulary: shown in messages (bodies never are)
ERROR_TYPES = ("bad_data", "execution", "timeout", "canceled", "internal", "unavailable", "not_found")


class PromErrorKind(str, Enum):
    UNREACHABLE = "unreachable"  # connection refused, DNS, timeout, TLS failure, HTTP 5xx
    REJECTED = "rejected"  # HTTP 4xx: bad PromQL, auth refused
    NO_DATA = "no_data"  # empty result with ignoreNullValues=false
    MULTIPLE_SERIES = "multiple_series"
    BAD_VALUE = "bad_value"  # NaN/Inf with ignoreNullValues=false
    CREDENTIALS = "credentials"  # the named credential set is missing, unreadable or not for this target


class PromError(Exception):
    def __init__(self, kind: PromErrorKind, message: str):
        self.kind = kind
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


def _origin(url: str) -> tuple[str, str, int, str]:
    u = urlparse(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    return (u.scheme, (u.hostname or "").lower(), port, u.path.rstrip("/"))


def url_allowed(url: str, allowed: tuple[str, ...]) -> bool:
    """Same scheme, host and port as one allowed base URL, and a path at or below its path."""
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
                            f"credentials '{self.name}' may not be sent to {redact_url(server_address)}; "
                            f"the set allows: {', '.join(redact_url(u) for u in self.allowed_urls) or 'nothing'} "
                            "(its allowed-urls file)")


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
                            f"credentials '{name}': no directory {d}; expected files allowed-urls, and token, or "
                            "username+password, and/or ca.crt, tls.crt+tls.key")

        def read(fname: str) -> str | None:
            p = d / fname
            try:
                return p.read_text().strip() if p.is_file() else None
            except OSError as e:
                raise PromError(PromErrorKind.CREDENTIALS, f"credentials '{name}': cannot read {p}: {e.strerror}") from None

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
            basic=(user, password) if user is not None else None,
            ca_file=str(ca) if ca.is_file() else None,
            cert_file=str(cert) if cert.is_file() else None,
            key_file=str(key) if key.is_file() else None,
            allowed_urls=allowed,
        )


class PromPool:
    """Shared Prometheus connections: per target at most ``per_target`` connections (and requests in flight),
    at most ``max_in_flight`` requests in all, each bounded by a total deadline. Thread-safe; ``close`` ends it.
    """

    def __init__(self, per_target: int = 8, max_in_flight: int = 256):
        self.per_target = per_target
        self.max_in_flight = max_in_flight
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._sessions: dict[tuple, tuple[aiohttp.ClientSession, asyncio.Semaphore, tuple]] = {}
        self._global: asyncio.Semaphore | None = None
        self._closed = False
        self.requests = 0  # HTTP requests sent (retries included)
        self.in_flight = 0

    # -- the loop thread -------------------------------------------------------
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise PromError(PromErrorKind.UNREACHABLE, "the scaler is stopping")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._global = asyncio.Semaphore(self.max_in_flight)
                self._thread = threading.Thread(target=loop.run_forever, name="prom-loop", daemon=True)
                self._thread.start()
                self._loop = loop
            return self._loop

    def connections(self) -> int:
        """TCP connections held now (open, idle or busy), over every target."""
        total = 0
        for session, _, _ in list(self._sessions.values()):
            conn = session.connector
            if conn is not None and not conn.closed:
                total += sum(len(v) for v in getattr(conn, "_conns", {}).values()) + len(getattr(conn, "_acquired", ()))
        return total

    def get(self, url: str, params: dict[str, str], *, headers: dict[str, str], tls: tuple,
            deadline: float) -> tuple[int, bytes]:
        """GET ``url``; (status, body). ``tls``: (unsafe, ca_file, cert_file, key_file).
        Raises TimeoutError past ``deadline`` seconds, aiohttp.ClientError, or PromError when stopping."""
        loop = self._ensure_loop()
        fut = asyncio.run_coroutine_threadsafe(self._get(url, params, headers, tls, deadline), loop)
        try:
            return fut.result(deadline + 1.0)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError from None
        except concurrent.futures.CancelledError:
            raise PromError(PromErrorKind.UNREACHABLE, "the scaler is stopping") from None

    def _session(self, url: str, tls: tuple) -> tuple[aiohttp.ClientSession, asyncio.Semaphore]:
        """On the loop thread."""
        u = urlparse(url)
        key, mtimes = (u.scheme, u.netloc.rsplit("@", 1)[-1].lower(), tls), _mtimes(tls)
        got = self._sessions.get(key)
        if got is not None and got[2] != mtimes:  # rotated CA or client certificate: a new session
            asyncio.get_running_loop().create_task(got[0].close())
            got = None
        if got is None:
            ctx: Any = None
            if u.scheme == "https":
                unsafe, ca, cert, keyfile = tls
                ctx = ssl.create_default_context(cafile=ca if ca and not unsafe else None)
                if unsafe:
                    ctx.check_hostname = False
                    ctx.verify_mode = ssl.CERT_NONE
                if cert:
                    ctx.load_cert_chain(cert, keyfile)
            connector = aiohttp.TCPConnector(limit=self.per_target, limit_per_host=0, ssl=ctx if ctx else False,
                                             keepalive_timeout=60.0)
            got = (aiohttp.ClientSession(connector=connector, trust_env=False), asyncio.Semaphore(self.per_target),
                   mtimes)
            self._sessions[key] = got
        return got[0], got[1]

    async def _get(self, url, params, headers, tls, deadline) -> tuple[int, bytes]:
        session, per_target = self._session(url, tls)
        async with asyncio.timeout(deadline):
            async with per_target, self._global:
                self.in_flight += 1
                try:
                    for attempt in (0, 1):
                        self.requests += 1
                        async with session.get(url, params=params, headers=headers, proxy=_proxy_for(url),
                                               allow_redirects=False) as r:
                            if r.status in RETRY_STATUS and attempt == 0:
                                await asyncio.sleep(0.05)
                                continue
                            body = bytearray()
                            async for chunk in r.content.iter_chunked(1 << 16):
                                body += chunk
                                if len(body) > MAX_BODY_BYTES:  # no Prometheus answer we can use: unreadable
                                    return r.status, b""
                            return r.status, bytes(body)
                finally:
                    self.in_flight -= 1
        raise AssertionError("unreachable")  # the loop returns on its second attempt

    def close(self, timeout: float = 2.0) -> None:
        """Cancel what is in flight and close every connection (bounded by ``timeout``)."""
        with self._lock:
            self._closed = True
            loop, self._loop = self._loop, None
        if loop is None:
            return

        async def shutdown() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for session, _, _ in self._sessions.values():
                await session.close()
            self._sessions.clear()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout)
        except Exception:  # noqa: BLE001 - closing is best effort, bounded
            pass
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)


def _proxy_for(url: str) -> str | None:
    """HTTP(S)_PROXY / NO_PROXY from the environment, as requests honoured them (never ~/.netrc credentials)."""
    u = urlparse(url)
    if proxy_bypass_environment(u.hostname or ""):
        return None
    return getproxies_environment().get(u.scheme)


def _mtimes(tls: tuple) -> tuple:
    """Rotated CA or client-certificate files make a new session."""
    out = []
    for p in tls[1:]:
        try:
            out.append(os.stat(p).st_mtime_ns if p else None)
        except OSError:
            out.append(None)
    return tuple(out)


_DEFAULT_POOL: PromPool | None = None
_DEFAULT_LOCK = threading.Lock()


def default_pool() -> PromPool:
    """The process-wide pool for clients built without one (the CLI, tests)."""
    global _DEFAULT_POOL
    with _DEFAULT_LOCK:
        if _DEFAULT_POOL is None:
            _DEFAULT_POOL = PromPool()
            atexit.register(_DEFAULT_POOL.close)
        return _DEFAULT_POOL


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
            if credentials.bearer_token:
                headers["Authorization"] = f"Bearer {credentials.bearer_token}"
            if credentials.basic:
                headers["Authorization"] = aiohttp.encode_basic_auth(*credentials.basic)
            ca, cert, key = credentials.ca_file, credentials.cert_file, credentials.key_file
        self._headers = headers
        self._tls = (target.unsafe_ssl, ca, cert, key)
        self._params = dict(target.query_parameters)

    def _api(self, path: str, params: dict[str, str]) -> Any:
        where, timeout = self.where, self.target.timeout_seconds
        url = self.target.server_address.rstrip("/") + path
        try:
            status, body = self.pool.get(url, {**self._params, **params}, headers=self._headers, tls=self._tls, deadline=timeout)
        except TimeoutError:
            raise PromError(PromErrorKind.UNREACHABLE, f"Prometheus at {where} did not answer within {timeout:g}s") from None
        except (aiohttp.ClientSSLError, ssl.SSLError):
            raise PromError(PromErrorKind.UNREACHABLE, f"Prometheus at {where}: TLS verification failed "
                            "(set a CA in the credentials, or unsafeSsl=true)") from None
        except aiohttp.InvalidURL:
            raise PromError(PromErrorKind.REJECTED, f"Prometheus at {where}: not a usable URL") from None
        except (aiohttp.ClientError, OSError) as e:
            raise PromError(PromErrorKind.UNREACHABLE, f"Prometheus at {where} is unreachable: {type(e).__name__}") from None
        if status != 200:
            kind = PromErrorKind.UNREACHABLE if status >= 500 or status < 400 else PromErrorKind.REJECTED
            raise PromError(kind, f"Prometheus at {where} answered HTTP Status Code {status}{_error_type(body)}")
        try:
            doc = json.loads(body)
            if doc["status"] != "success":
                raise KeyError("status")
            return doc["data"]["result"]
        except (ValueError, KeyError, TypeError) as e:
            raise PromError(PromErrorKind.UNREACHABLE, f"Prometheus at {where} sent an unreadable answer: "
                            f"{type(e).__name__}") from None

    def instant(self, query: str, at: float | None = None) -> list[dict]:
        params = {"query": query}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self._api("/api/v1/query", params)
    def scalar(self, query: str, at: float | None = None, *, ignore_null: bool = True) -> float:
        """The single value of an instant query, with KEDA's Prometheus-scaler semantics.

        Empty result: 0 with ``ignore_null`` else NO_DATA. Several series:
        MULTIPLE_SERIES. NaN/Inf: 0 with ``ignore_null`` else BAD_VALUE.
        Negative values are returned as they are (the caller floors rates).
        """
        result = self.instant(query, at)
        if not result:
            if ignore_null:
                return 0.0
            raise PromError(PromErrorKind.NO_DATA, f"query returned no series (ignoreNullValues=false): {short(query)}")
        if len(result) > 1:
            raise PromError(PromErrorKind.MULTIPLE_SERIES,
                            f"query returned {len(result)} series; expected exactly one "
                            f"(aggregate it, e.g. sum(...)): {short(query)}")
        item = result[0]
        raw = item.get("value", [None, None])[1] if "value" in item else None
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise PromError(PromErrorKind.BAD_VALUE, f"query returned a non-numeric value {short(repr(raw), 40)}: {short(query)}") from None
        if not math.isfinite(value):
            if ignore_null:
                return 0.0
            raise PromError(PromErrorKind.BAD_VALUE, f"query returned {raw} (ignoreNullValues=false): {short(query)}")
        return value

    def range(self, query: str, start: float, end: float, step: float) -> list[dict]:
        """A range query split into chunks of at most ``MAX_POINTS`` points, merged per series."""
        if step <= 0 or end < start:
            raise ValueError(f"bad range: start={start} end={end} step={step}")
        chunk = step * (MAX_POINTS - 1)
        merged: dict[tuple, dict] = {}
        t0 = start
        while t0 <= end:
            t1 = min(end, t0 + chunk)
            part = self._api("/api/v1/query_range", {"query": query, "start": f"{round(t0)}", "end": f"{round(t1)}",
                                                     "step": f"{step:g}s"})
            for s in part:
                key = tuple(sorted(s.get("metric", {}).items()))
                merged.setdefault(key, {"metric": s.get("metric", {}), "values": []})["values"].extend(s.get("values", []))
            t0 = t1 + step
        return list(merged.values())

    def range_series(self, query: str, start: float, end: float, step: float) -> tuple[Series, HygieneReport]:
        """``range`` as one regular ``Series`` at ``step`` (hygiene applied), with what hygiene found.

        No series: NO_DATA; several: MULTIPLE_SERIES (a rate for forecasting
        must aggregate to one); malformed samples: ValueError.
        """
        result = self.range(query, start, end, step)
        if not result:
            raise PromError(PromErrorKind.NO_DATA, f"range query returned no series: {short(query)}")
        if len(result) > 1:
            raise PromError(PromErrorKind.MULTIPLE_SERIES,
                            f"range query returned {len(result)} series; expected exactly one "
                            f"(aggregate it, e.g. sum(...)): {short(query)}")
        return from_prometheus_matrix(result, step)



def short(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters for a message or log line (never a megabyte echo)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _error_type(body: bytes) -> str:
    """Prometheus' errorType when it is one of its fixed vocabulary; never the body itself."""
    try:
        kind = json.loads(body).get("errorType") if len(body) <= (1 << 20) else None
    except (ValueError, AttributeError):
        return ""
    return f" ({kind})" if kind in ERROR_TYPES else ""

"""The one way out to Prometheus: ``PromPool``, a shared, bounded connection pool per target.

One ``aiohttp`` session per target (scheme, host, port and TLS identity) with at most ``per_target`` connections,
shared by every ScaledObject that queries that target; a global limit on requests in flight; a total deadline per
request (queueing, connect, headers and body together, so a target that drips bytes cannot hold a caller longer than
its ``timeout``). Callers stay synchronous: the pool runs its own event loop thread. An answer is read as a stream,
decompressed here with a cap, and refused as soon as it holds a second series; no cookie jar; sessions unused for
``SESSION_IDLE_SECONDS`` are closed. ``scaler.prom.PrometheusClient`` queries through it.
"""

from __future__ import annotations

import asyncio
import atexit
import re
import zlib
import concurrent.futures
import logging
import os
import ssl
import threading
from typing import Any
from urllib.parse import urlparse
from urllib.request import getproxies_environment, proxy_bypass_environment  # type: ignore[attr-defined]

import aiohttp


from .limits import MAX_RANGE_BODY_BYTES
from .promerror import PromError, PromErrorKind, short

log = logging.getLogger("scaler.prom")

MAX_BODY_BYTES = MAX_RANGE_BODY_BYTES  # the default cap of one answer (decompressed)
SESSION_IDLE_SECONDS = 600.0  # a target's session unused this long is closed (forgotten targets free theirs)
_SERIES = re.compile(rb'"metric"\s*:\s*\{')
RETRY_STATUS = (502, 503, 504)  # one quick retry, within the same deadline


class PromPool:
    """Shared Prometheus connections: per target at most ``per_target`` connections (and requests in flight),
    at most ``max_in_flight`` requests in all, each bounded by a total deadline. Thread-safe; ``close`` ends it.
    """

    def __init__(self, per_target: int = 8, max_in_flight: int = 256, clock=None):
        """``clock`` (monotonic, injected by the server wiring): sessions unused for ``SESSION_IDLE_SECONDS``
        by it are closed; without one (the CLI's short-lived pool) none are."""
        self.clock = clock
        self.per_target = per_target
        self.max_in_flight = max_in_flight
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._sessions: dict[tuple, tuple[aiohttp.ClientSession, asyncio.Semaphore, tuple]] = {}
        self._used: dict[tuple, float] = {}  # session key -> last use (monotonic), for pruning
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

    def sessions(self) -> int:
        return len(self._sessions)

    def get(self, url: str, params: dict[str, str], *, headers: dict[str, str], tls: tuple,
            deadline: float, max_bytes: int = MAX_BODY_BYTES, one_series: bool = False) -> tuple[int, bytes]:
        """GET ``url``; (status, body). ``tls``: (unsafe, ca_file, cert_file, key_file). The body, decompressed,
        is at most ``max_bytes`` (PromError TOO_LARGE past it) and, with ``one_series``, holds at most one series
        (PromError MULTIPLE_SERIES at the second, before it is read further).
        Raises TimeoutError past ``deadline`` seconds, aiohttp.ClientError, or PromError when stopping."""
        loop = self._ensure_loop()
        fut = asyncio.run_coroutine_threadsafe(self._get(url, params, headers, tls, deadline, max_bytes, one_series),
                                               loop)
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
        now = self.clock() if self.clock is not None else 0.0
        for k in [k for k, at in self._used.items() if now - at > SESSION_IDLE_SECONDS and k != key]:
            self._used.pop(k, None)
            old = self._sessions.pop(k, None)
            if old is not None:
                asyncio.get_running_loop().create_task(old[0].close())
        self._used[key] = now
        got = self._sessions.get(key)
        if got is not None and got[2] != mtimes:  # rotated CA or client certificate: a new session
            asyncio.get_running_loop().create_task(got[0].close())
            got = None
        if got is None:
            ctx: Any = None
            if u.scheme == "https":
                unsafe, ca, cert, keyfile = tls
                ctx = ssl.create_default_context(cafile=ca if ca else None)
                if unsafe and not ca:  # a credential set's ca.crt is never lifted by unsafeSsl
                    ctx.check_hostname = False
                    ctx.verify_mode = ssl.CERT_NONE
                if cert:
                    ctx.load_cert_chain(cert, keyfile)
            connector = aiohttp.TCPConnector(limit=self.per_target, limit_per_host=0, ssl=ctx if ctx else False,
                                             keepalive_timeout=60.0)
            # no cookie jar (a cookie earned with one credential set must never go out with another's requests);
            # bodies decompressed by _read, with a cap
            got = (aiohttp.ClientSession(connector=connector, trust_env=False, cookie_jar=aiohttp.DummyCookieJar(),
                                         auto_decompress=False), asyncio.Semaphore(self.per_target), mtimes)
            self._sessions[key] = got
        return got[0], got[1]

    async def _get(self, url, params, headers, tls, deadline, max_bytes, one_series) -> tuple[int, bytes]:
        session, per_target = self._session(url, tls)
        assert self._global is not None  # made with the loop (_ensure_loop), before any request runs on it
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
                            return r.status, await _read(r, max_bytes, one_series and r.status == 200)
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
            self._used.clear()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout)
        except Exception:  # noqa: BLE001 - closing is best effort, bounded
            pass
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)


async def _read(r: aiohttp.ClientResponse, max_bytes: int, one_series: bool) -> bytes:
    """The body, decompressed (gzip, deflate or none) with ``max_bytes`` as the cap of the decompressed size;
    with ``one_series``, PromError MULTIPLE_SERIES as soon as a second series starts."""
    enc = r.headers.get("Content-Encoding", "identity").strip().lower()
    if enc in ("gzip", "x-gzip", "deflate"):
        z = zlib.decompressobj(wbits=47 if enc != "deflate" else 15)  # 47: gzip or zlib header, detected
    elif enc not in ("", "identity"):
        raise PromError(PromErrorKind.UNREACHABLE, f"the answer has an unsupported Content-Encoding "
                                                   f"{short(enc, 20)!r} (expected gzip, deflate or none)")
    else:
        z = None
    body, series, tail = bytearray(), 0, b""

    def add(data: bytes) -> None:
        nonlocal series, tail
        body.extend(data)
        if one_series:  # counted first: a many-series answer is named as such, not as a large one
            window = tail + data
            series += len(_SERIES.findall(window)) - len(_SERIES.findall(tail))
            tail = window[-32:]
            if series > 1:
                raise PromError(PromErrorKind.MULTIPLE_SERIES, "the query returned more than one series; expected "
                                                               "exactly one (aggregate it, e.g. sum(...))")
        if len(body) > max_bytes:
            raise PromError(PromErrorKind.TOO_LARGE, f"the answer is over {max_bytes >> 10} KiB (decompressed): "
                                                     "more than one series? aggregate the query, e.g. sum(...)")

    async for chunk in r.content.iter_chunked(1 << 16):
        if z is None:
            add(chunk)
            continue
        data = z.decompress(chunk, min(1 << 16, max_bytes + 1 - len(body)))
        add(data)
        while z.unconsumed_tail:  # more output pending from this chunk: bounded pieces, each checked
            add(z.decompress(z.unconsumed_tail, min(1 << 16, max_bytes + 1 - len(body))))
    if z is not None:
        add(z.flush())
    return bytes(body)


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

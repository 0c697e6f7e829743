"""The load generator: aiohttp on one asyncio loop, open loop (Poisson) or closed loop (N workers).

Open loop: each step's arrival times are drawn first (:func:`scaler.loadtest.stats.arrivals`) and a
scheduler starts each request at its time, whatever the server is doing; a slow server makes requests
pile up in flight, never makes the generator wait. Latency counts from the scheduled time, so time
lost in the generator counts too, and the send lag (actual - scheduled) is recorded to detect a
generator that cannot keep up.

Why aiohttp: its client costs less CPU per request than httpx's async client (the figure that sets
the generator's ceiling on a small machine; see tests/bench/bench_loadtest.py), it streams a response
line by line (server-sent events for TTFT), and it is already a dependency. Why not a framework
(locust, k6, ghz): each is a separate runtime (gevent workers, a Go or JS binary) with its own
closed-loop user model and report; an open-loop schedule, TTFT over SSE and a JSON result the
scaler reads are a few hundred lines on a plain client.
"""

from __future__ import annotations

import asyncio
import json
import random
import urllib.parse
from dataclasses import dataclass
from typing import Callable, Sequence

import aiohttp

from .stats import Record, arrivals
from .workload import Workload

SETTLE_SLACK = 0.05  # a lone request within 2 x the idle latency + this is "the server has drained"


class LoadtestError(Exception):
    """Bad input or an unusable target: one clear line, exit code 2."""


def completions_url(url: str) -> str:
    """``http(s)://host:port[/path]``; a bare host (or ``/``) gets ``/v1/completions`` appended."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LoadtestError(f"URL {url[:200]!r}: accepted: http(s)://HOST:PORT (the server's base URL) or its "
                            "full /v1/completions URL")
    if parts.path in ("", "/"):
        parts = parts._replace(path="/v1/completions")
    return urllib.parse.urlunsplit(parts)


def _count(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 10**9 else None


def _usage_of(doc) -> tuple[int | None, int | None, bool] | None:
    """(prompt_tokens, completion_tokens, no tokens in this chunk) of an OpenAI answer's ``usage``; None if none."""
    if not isinstance(doc, dict) or not isinstance(doc.get("usage"), dict):
        return None
    u = doc["usage"]
    choices = doc.get("choices")
    return _count(u.get("prompt_tokens")), _count(u.get("completion_tokens")), not choices


def _usage(payload: bytes) -> tuple[int | None, int | None, bool] | None:
    try:
        return _usage_of(json.loads(payload))
    except ValueError:
        return None


@dataclass(frozen=True)
class Target:
    url: str
    workload: Workload
    stream: bool = True
    model: str | None = None
    timeout: float = 30.0
    max_connections: int = 1000


Progress = Callable[[float], None]  # seconds of the current step elapsed


class Generator:
    """One client session; ``async with Generator(target) as g``."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._session: aiohttp.ClientSession | None = None
        self._n = 0
        self.inflight = 0
        self.inflight_max = 0

    async def __aenter__(self) -> "Generator":
        connector = aiohttp.TCPConnector(limit=self.target.max_connections, limit_per_host=0, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(connector=connector,
                                              timeout=aiohttp.ClientTimeout(total=self.target.timeout))
        return self

    async def __aexit__(self, *exc) -> None:
        if self._session is not None:
            await self._session.close()

    # ------------------------------------------------------------ one request

    async def one(self, scheduled: float, t0: float) -> Record:
        """Send one request now; times relative to ``t0`` (loop time of the step's start)."""
        loop = asyncio.get_running_loop()
        n, self._n = self._n, self._n + 1
        body = self.target.workload.body(n, stream=self.target.stream, model=self.target.model)
        self.inflight += 1
        self.inflight_max = max(self.inflight_max, self.inflight)
        sent = loop.time() - t0
        first = None
        try:
            assert self._session is not None
            async with self._session.post(self.target.url, json=body) as resp:
                if not 200 <= resp.status < 300:
                    await resp.read()
                    return Record(scheduled, sent, "error", kind=str(resp.status), finished=loop.time() - t0)
                if self.target.stream:
                    events, gaps, usage, last = 0, [], None, None
                    async for line in resp.content:
                        if not line.startswith(b"data:"):
                            continue
                        payload = line[5:].strip()
                        if payload == b"[DONE]":
                            break
                        now = loop.time()
                        if b'"usage"' in payload and b'"usage":null' not in payload.replace(b" ", b""):
                            usage = _usage(payload)  # the last chunk (stream_options.include_usage) has no token
                            if usage is not None and usage[2]:
                                continue
                        events += 1
                        if first is None:
                            first = now - t0 - scheduled
                        else:
                            assert last is not None  # set with first
                            gaps.append(now - last)
                        last = now
                    if not events:
                        return Record(scheduled, sent, "error", kind="protocol", finished=loop.time() - t0)
                    end = loop.time() - t0
                    return Record(scheduled, sent, "ok", latency=end - scheduled, ttft=first, finished=end,
                                  gaps=tuple(gaps), prompt_tokens=usage[0] if usage else None,
                                  output_tokens=usage[1] if usage and usage[1] is not None else events)
                data = await resp.json(content_type=None)
                if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
                    return Record(scheduled, sent, "error", kind="protocol", finished=loop.time() - t0)
                u = _usage_of(data)
            end = loop.time() - t0
            return Record(scheduled, sent, "ok", latency=end - scheduled, ttft=first, finished=end,
                          prompt_tokens=u[0] if u else None, output_tokens=u[1] if u else None)
        except asyncio.TimeoutError:
            return Record(scheduled, sent, "timeout", finished=loop.time() - t0)
        except aiohttp.ClientConnectorError:
            return Record(scheduled, sent, "error", kind="connect", finished=loop.time() - t0)
        except (aiohttp.ClientError, ValueError):
            return Record(scheduled, sent, "error", kind="protocol", finished=loop.time() - t0)
        finally:
            self.inflight -= 1

    # ------------------------------------------------------------ steps

    async def _ticker(self, t0: float, progress: Progress | None) -> None:
        loop = asyncio.get_running_loop()
        while progress is not None:
            progress(loop.time() - t0)
            await asyncio.sleep(0.5)

    async def open_loop(self, segments: Sequence[tuple[float, float]], rng: random.Random,
                        progress: Progress | None = None) -> list[Record]:
        """Poisson arrivals at ``rate`` for ``duration`` per segment, back to back; times from the first's start."""
        times, offset = [], 0.0
        for rate, duration in segments:
            times += [offset + t for t in arrivals(rate, duration, rng)]
            offset += duration
        loop = asyncio.get_running_loop()
        self.inflight_max = self.inflight
        t0 = loop.time() + 0.005
        ticker = loop.create_task(self._ticker(t0, progress))
        tasks = []
        try:
            for s in times:
                delay = t0 + s - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(loop.create_task(self.one(s, t0)))
            return list(await asyncio.gather(*tasks))
        finally:
            ticker.cancel()

    async def closed_loop(self, concurrency: int, duration: float, progress: Progress | None = None) -> list[Record]:
        """``concurrency`` workers, each sending its next request when the last one ends, for ``duration``."""
        loop = asyncio.get_running_loop()
        self.inflight_max = self.inflight
        t0 = loop.time()
        out: list[Record] = []

        async def worker() -> None:
            while (now := loop.time() - t0) < duration:
                out.append(await self.one(now, t0))

        ticker = loop.create_task(self._ticker(t0, progress))
        try:
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        finally:
            ticker.cancel()
        return out

    # ------------------------------------------------------------ before and between steps

    async def preflight(self, n: int = 3) -> float:
        """``n`` lone requests; the fastest latency (the idle baseline). LoadtestError when the target is unusable."""
        loop = asyncio.get_running_loop()
        best = None
        for _ in range(n):
            t0 = loop.time()
            r = await self.one(0.0, t0)
            url = self.target.url
            if r.status == "timeout":
                raise LoadtestError(f"{url}: no answer within --timeout {self.target.timeout:g} s to a lone "
                                    "request; accepted: a server that answers; raise --timeout for a slow model")
            if r.kind == "connect":
                raise LoadtestError(f"{url}: cannot connect (nothing listening, or the host is unreachable); "
                                    "accepted: the URL of a running OpenAI-compatible server, e.g. "
                                    "http://127.0.0.1:8000 (`forescale probe --serve 8000`)")
            if r.kind == "protocol":
                raise LoadtestError(f"{url}: the answer is not an OpenAI completion ("
                                    + ("no server-sent events" if self.target.stream else "no JSON with choices")
                                    + "); accepted: a server of POST /v1/completions" +
                                    ("; try --no-stream" if self.target.stream else ""))
            if r.status == "error":
                raise LoadtestError(f"{url}: answered HTTP {r.kind} to a lone completion request; accepted: a "
                                    "server that answers 2xx (check the URL, the prompt and --max-tokens)")
            assert r.latency is not None  # an ok answer's
            best = r.latency if best is None else min(best, r.latency)
        assert best is not None
        return best

    async def settle(self, baseline: float, limit: float) -> float:
        """After an overloaded step: lone requests until one is served in ~idle time (a drained server), at most
        ``limit`` seconds; returns the seconds waited."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        while loop.time() - start < limit:
            t0 = loop.time()
            r = await self.one(0.0, t0)
            if r.status == "ok" and r.latency is not None and r.latency <= 2 * baseline + SETTLE_SLACK:
                break
            await asyncio.sleep(0.1)
        return loop.time() - start

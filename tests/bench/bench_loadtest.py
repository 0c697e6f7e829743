"""Benchmark: the load generator's own ceiling on this machine, against a no-op server.

    PYTHONPATH=. python tests/bench/bench_loadtest.py [--duration 3] [--rates 250,500,1000,...]

A no-op OpenAI-style server (aiohttp.web, its own process, 127.0.0.1) answers every POST at once with
one server-sent event. The generator (scaler.loadtest, open loop, streaming) offers each rate for
--duration seconds; a rate counts as sustained when the offered rate is >= 95 % of the target and the
send lag p99 is <= 10 ms (requests left on time). The ceiling is the highest sustained rate.

Baseline in the same process: the same Poisson schedule sent through httpx.AsyncClient (the other
async client the project has), so the ratio says what choosing aiohttp buys on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import subprocess
import sys
import time

from scaler.loadtest import stats
from scaler.loadtest.generator import Generator, Target
from scaler.loadtest.workload import template

SERVER = r"""
import sys
from aiohttp import web
EVENT = b'data: {"choices": [{"text": "x", "index": 0}]}\n\ndata: [DONE]\n\n'
async def handle(request):
    await request.read()
    return web.Response(body=EVENT, content_type="text/event-stream")
app = web.Application()
app.router.add_post("/v1/completions", handle)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""
MAX_LAG = 0.010


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port)])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"http://127.0.0.1:{port}/v1/completions"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the no-op server did not start")


async def with_aiohttp(url: str, rate: float, duration: float) -> dict:
    async with Generator(Target(url, template("x", 1), stream=True, timeout=10.0, max_connections=2000)) as g:
        recs = await g.open_loop([(rate, duration)], random.Random(0))
    return stats.summarize(recs, target=rate, duration=duration, slo=1.0, q=95, max_lag=MAX_LAG)


async def with_httpx(url: str, rate: float, duration: float) -> dict:
    import httpx

    loop = asyncio.get_running_loop()
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=2000)
    async with httpx.AsyncClient(limits=limits, timeout=10.0) as client:
        t0 = loop.time() + 0.005

        async def one(s: float) -> stats.Record:
            sent = loop.time() - t0
            try:
                async with client.stream("POST", url, json={"prompt": "x", "max_tokens": 1, "stream": True}) as r:
                    async for _ in r.aiter_lines():
                        pass
                end = loop.time() - t0
                return stats.Record(s, sent, "ok" if r.status_code == 200 else "error", latency=end - s, finished=end)
            except httpx.HTTPError:
                return stats.Record(s, sent, "error", kind="protocol", finished=loop.time() - t0)

        tasks = []
        for s in stats.arrivals(rate, duration, random.Random(0)):
            delay = t0 + s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(loop.create_task(one(s)))
        recs = await asyncio.gather(*tasks)
    return stats.summarize(recs, target=rate, duration=duration, slo=1.0, q=95, max_lag=MAX_LAG)


def sweep(name: str, fn, url: str, rates: list[float], duration: float) -> tuple[float, float]:
    """(ceiling: the highest rate sustained, the most it offered at any rate)"""
    print(f"\n{name}: {'target':>8}{'offered':>9}{'lag p99 ms':>11}{'ok':>7}{'errors':>7}  sustained")
    ceiling, most = 0.0, 0.0
    for rate in rates:
        s = asyncio.run(fn(url, rate, duration))
        ok = not s["generator_limited"] and s["errors"] == 0
        print(f"{'':>{len(name) + 2}}{rate:>8.0f}{s['offered_rps']:>9.1f}{s['send_lag_p99_s'] * 1e3:>11.1f}"
              f"{s['ok']:>7}{s['errors']:>7}  {'yes' if ok else 'no'}")
        most = max(most, s["offered_rps"])
        if ok:
            ceiling = rate  # the highest sustained (a busy machine can spoil one lower rate with a hiccup)
        if s["offered_rps"] < 0.8 * rate or s["errors"]:
            break  # far past the ceiling
        time.sleep(0.5)
    return ceiling, most


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--rates", default="100,200,300,400,500,700,1000,1400,2000,3000")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    proc, url = start_server()
    try:
        print(f"load average before: {os.getloadavg()[0]:.1f}; generator ceiling: {os.cpu_count()} cores "
              f"({len(os.sched_getaffinity(0))} usable), Python "
              f"{sys.version.split()[0]}, no-op server in its own process; sustained = offered >= 95 % of the "
              f"target and send lag p99 <= {MAX_LAG * 1e3:.0f} ms, no errors; {args.duration:g} s per rate")
        a = sweep("aiohttp (scaler.loadtest)", with_aiohttp, url, rates, args.duration)
        h = sweep("httpx (baseline)", with_httpx, url, rates, args.duration)
        print(f"\nceiling (sustained with correct timing): aiohttp {a[0]:.0f} req/s, httpx {h[0]:.0f} req/s")
        print(f"most offered at any rate: aiohttp {a[1]:.0f} req/s, httpx {h[1]:.0f} req/s, ratio {a[1] / h[1]:.2f}")
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()

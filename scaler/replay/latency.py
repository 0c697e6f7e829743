"""What users feel: a fluid FIFO queue per tick in front of the ready replicas, latency percentiles, timeouts.

Within tick ``i`` (``h`` seconds from ``T``) requests arrive at ``demand[i]``
req/s and the ready replicas serve ``capacity[i]`` req/s. Demand above
capacity waits, first in first out: with ``b`` requests queued at ``T``, a
request arriving at ``T + u`` has ``b + d u`` requests ahead of it and leaves
the queue at ``T + (b + d u) / c`` (when that is inside the tick; the rest
stays queued), so its wait is ``(b + (d - c) u) / c``, floored at 0 once the
queue is empty. The queue is kept as chunks of arrivals, each spread evenly
over its arrival interval, so every wait is a linear piece and the waits of a
tick are a few uniform segments.

Latency = wait + ``service_seconds``. A request that would wait longer than
``timeout`` has failed (``timed_out_fraction``) and its latency is the
timeout; queued requests older than the timeout leave the queue at each tick
start (so they hold no capacity; one served within the tick past its timeout
still counts as timed out). Requests still queued at the end of the replay
count with the wait they had so far. Pure: arrays in, numbers out.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

EPS = 1e-9


@dataclass(frozen=True)
class Latency:
    p50_seconds: float
    p95_seconds: float
    p99_seconds: float
    timed_out_fraction: float
    requests: float

    def as_dict(self) -> dict:
        return {"p50_latency_seconds": self.p50_seconds, "p95_latency_seconds": self.p95_seconds,
                "p99_latency_seconds": self.p99_seconds, "timed_out_fraction": self.timed_out_fraction}


@dataclass(frozen=True)
class Waits:
    """The waits as uniform segments ``[lo, hi]`` holding ``mass`` requests each (``lo`` may exceed ``hi``).

    Timed-out requests are segments at ``+inf`` (their latency is the timeout).
    """

    lo: np.ndarray
    hi: np.ndarray
    mass: np.ndarray
    zero: float  # requests that did not wait
    timed_out: float
    tick_of: np.ndarray  # the tick each segment's requests arrived in

    def latency(self, service: float = 0.0, timeout: float | None = None) -> Latency:
        total = self.zero + float(self.mass.sum())
        p50, p95, p99 = self.quantiles((0.5, 0.95, 0.99), service, timeout)
        return Latency(p50, p95, p99, self.timed_out / total if total > 0 else 0.0, total)

    def quantile(self, q: float, service: float = 0.0, timeout: float | None = None,
                 ticks: tuple[int, int] | None = None) -> float:
        """Latency quantile ``q`` (wait capped at ``timeout``, plus ``service``), optionally of arrival ticks [a, b)."""
        return self.quantiles((q,), service, timeout, ticks)[0]

    def quantiles(self, qs: tuple[float, ...], service: float = 0.0, timeout: float | None = None,
                  ticks: tuple[int, int] | None = None) -> list[float]:
        """Exact quantiles of the piecewise-linear CDF: one sort of the segments' ends for all of ``qs``."""
        lo, hi, m = np.minimum(self.lo, self.hi), np.maximum(self.lo, self.hi), self.mass
        zero = self.zero
        if ticks is not None:
            sel = (self.tick_of >= ticks[0]) & (self.tick_of < ticks[1])
            lo, hi, m = lo[sel], hi[sel], m[sel]
            zero = 0.0
        if timeout is not None:  # (without one there is no segment at +inf)
            lo, hi = np.minimum(lo, timeout), np.minimum(hi, timeout)
        total = zero + float(m.sum())
        if total <= 0 or not m.size:
            return [service for _ in qs]
        width = hi - lo
        point = width <= EPS
        dens = np.where(point, 0.0, m / np.where(point, 1.0, width))
        x = np.concatenate([lo[~point], hi[~point], lo[point]])
        dslope = np.concatenate([dens[~point], -dens[~point], np.zeros(int(point.sum()))])
        jump = np.concatenate([np.zeros(2 * int((~point).sum())), m[point]])
        order = np.argsort(x, kind="stable")
        x, dslope, jump = x[order], dslope[order], jump[order]
        slope = np.cumsum(dslope)  # the CDF's slope right of each end
        cont = np.concatenate([[0.0], np.cumsum(slope[:-1] * np.diff(x))])
        cdf = zero + cont + np.cumsum(jump)  # right-continuous, at each end
        out = []
        for q in qs:
            want = q * total
            if zero >= want - EPS * total:
                out.append(service)
                continue
            k = int(np.searchsorted(cdf, want - EPS * total, side="left"))
            k = min(k, len(x) - 1)
            if k == 0:
                out.append(float(x[0]) + service)
                continue
            before = cdf[k - 1] + slope[k - 1] * (x[k] - x[k - 1])  # just left of x[k]
            if before >= want - EPS * total and slope[k - 1] > 0:
                out.append(float(x[k - 1] + (want - cdf[k - 1]) / slope[k - 1]) + service)
            else:
                out.append(float(x[k]) + service)
        return out


def waits(demand: np.ndarray, capacity: np.ndarray, tick: float, timeout: float | None = None) -> Waits:
    """Replay the FIFO queue; ``demand``, ``capacity`` in req/s per tick."""
    d_all = np.asarray(demand, dtype=np.float64)
    c_all = np.asarray(capacity, dtype=np.float64)
    n = int(d_all.shape[0])
    zero = 0.0
    queue: deque[list] = deque()  # [a0, a1, density, tick]: arrivals spread over [a0, a1)
    tau = math.inf if timeout is None else float(timeout)
    seg = _Segments(tau)
    fail, add = seg.fail, seg.add

    ds, cs = d_all.tolist(), c_all.tolist()  # (plain floats: the loop below is the replay's hot path)
    short = np.flatnonzero(c_all < d_all)  # the ticks where a queue can start
    arrived = np.concatenate([[0.0], np.cumsum(d_all)])
    i = 0
    while i < n:
        if not queue:  # nothing waits until the next tick short of capacity: skip there at once
            j = int(short[np.searchsorted(short, i)]) if short.size and short[-1] >= i else n
            zero += float(arrived[j] - arrived[i]) * tick
            i = j
            if i >= n:
                break
        k = i  # this tick (the queue's chunks carry their arrival tick)
        d, c = ds[k], cs[k]
        i += 1
        if not queue and c >= d:
            zero += d * tick
            continue
        t0, t1 = k * tick, (k + 1) * tick
        if tau < math.inf:  # the queued requests that have waited past the timeout leave
            while queue and queue[0][0] < t0 - tau - EPS:
                a0, a1, dens, kk = queue[0]
                cut = min(a1, t0 - tau)
                fail((cut - a0) * dens, kk)
                if cut >= a1 - EPS:
                    queue.popleft()
                else:
                    queue[0][0] = cut
        s = t0  # the server's position in time
        budget = c * tick  # what it can serve in this tick
        while queue and budget > EPS:  # the old chunks: all there at t0
            a0, a1, dens, kk = queue[0]
            m = (a1 - a0) * dens
            take = min(m, budget)
            span = take / c
            x1 = a0 + take / dens
            add(s - a0, s + span - x1, take, kk)
            s += span
            budget -= take
            if take >= m - EPS:
                queue.popleft()
            else:
                queue[0][0] = x1
        if d <= 0:
            continue
        if budget <= EPS:  # the server is busy until t1: the whole tick's arrivals wait
            queue.append([t0, t1, d, k])
            continue
        # the new arrivals from s on: a request at x leaves at s + d (x - t0) / c, or on arrival once caught up
        if c > d:
            x_star = t0 + (s - t0) * c / (c - d)  # wait 0 from here
            if x_star >= t1 - EPS:
                add(s - t0, s + d * tick / c - t1, d * tick, k)
            else:
                add(s - t0, 0.0, d * (x_star - t0), k)
                zero += d * (t1 - x_star)
        else:
            x_end = t0 + (t1 - s) * c / d  # the last arrival served in this tick
            add(s - t0, t1 - x_end, d * (x_end - t0), k)
            if x_end < t1 - EPS:
                queue.append([x_end, t1, d, k])
    end = n * tick
    for a0, a1, dens, k in queue:  # still queued at the end: the wait so far
        add(end - a0, end - a1, (a1 - a0) * dens, k)
    return Waits(np.array(seg.lo), np.array(seg.hi), np.array(seg.mass), zero, seg.timed_out,
                 np.array(seg.tk, dtype=np.int64))


class _Segments:
    """``waits``' output as it grows: each served or timed-out mass with its wait going linearly from ``lo`` to ``hi``
    over it and its arrival tick; the part of a segment past the timeout ``tau`` fails (its wait at +inf)."""

    def __init__(self, tau: float):
        self.tau = tau
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.mass: list[float] = []
        self.tk: list[int] = []
        self.timed_out = 0.0

    def fail(self, m: float, k: int) -> None:  # timed out: latency = the timeout (the segment at +inf, capped)
        self.timed_out += m
        self.lo.append(math.inf)
        self.hi.append(math.inf)
        self.mass.append(m)
        self.tk.append(k)

    def add(self, w0: float, w1: float, m: float, k: int) -> None:
        if m <= 0:
            return
        tau = self.tau
        if w0 > tau or w1 > tau:  # the part past the timeout failed
            if w0 >= tau and w1 >= tau:
                self.fail(m, k)
                return
            cut = (tau - w0) / (w1 - w0)  # where the linear wait crosses tau
            ok_m = m * (cut if w1 > w0 else 1 - cut)
            self.fail(m - ok_m, k)
            m, w0, w1 = ok_m, min(w0, w1), tau
        self.lo.append(w0)
        self.hi.append(w1)
        self.mass.append(m)
        self.tk.append(k)


def latency(demand: np.ndarray, capacity: np.ndarray, tick: float, service_seconds: float = 0.0,
            timeout: float | None = None) -> Latency:
    w = waits(demand, capacity, tick, timeout)
    return w.latency(service_seconds, timeout)

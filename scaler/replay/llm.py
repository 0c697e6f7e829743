"""TTFT and ITL in the replay: what an LLM server's users feel, from the FIFO queue and the load per replica.

The model (stated, one extra knob: ``Serving.itl_seconds``, a lone request's inter-token latency):

* A replica's decode step takes ``t0 + t1 x B`` seconds with ``B`` requests in its batch (memory-bound
  decoding: each step reads the weights once, ``t0``, and each request's KV cache, ``t1``). A replica then
  produces at most ``1 / t1`` tokens/s, its capacity, and by Little's law ``B = rate x tokens x ITL``, so at a
  utilisation ``u`` (the load served / the ready capacity) the inter-token latency is::

      ITL(u) = itl_seconds / (1 - min(u, MAX_UTILISATION))          (t0 = itl_seconds)

  (20 x itl_seconds at saturation: past it the batch is full and requests wait in the queue instead).
* The time to first token is the request's wait in the fluid FIFO queue (``latency.waits`` on the ready
  capacity) plus one step plus its prompt's prefill::

      TTFT = wait + ITL(u) + prefill,   prefill = input_weight x prompt tokens per request / tokens_per_replica

  (the prompt at the replica's whole weighted token budget, ``scaler.tokens``; 0 for a trace without tokens).
* Percentiles are over requests: each tick's arrivals count by their number (the ITL of a tick is the one of its
  utilisation). ``settings.capacity_factor`` (a replica really sustains 1/f of what it is configured for) is in
  the demand already (``prepare.setup``: the judged load is f x the trace's) and stretches the prefill by f.

The closed loop (``closedloop``) reads the same quantities as the server's queries would show them
(``window_p95``): TTFT as a histogram observes it, when the first token comes (``arrival + TTFT``), over a
``rate()`` window.

Pure: arrays in, numbers out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..feedback import RULE, Rule, Targets
from .latency import Waits, waits

ITL_SECONDS = 0.02  # a lone request's inter-token latency (a 7-8B model on one current GPU: 10-30 ms)
MAX_UTILISATION = 0.75  # the ITL stretch stops here (4 x, a full batch): past it requests queue instead
QUANTILE = 0.95  # the percentile reported (ttft_p95_s, itl_p95_s) and read by the replayed loop


@dataclass(frozen=True)
class Serving:
    """The latency model's inputs beyond the queue: ``itl_seconds`` and, with tokens, the prefill per tick."""

    itl_seconds: float = ITL_SECONDS
    prefill: np.ndarray | None = None  # seconds per request per tick (input_weight x prompt tokens / budget)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.itl_seconds) and self.itl_seconds > 0):
            raise ValueError(f"inter-token latency {self.itl_seconds!r}: accepted is a finite number of seconds > 0")


@dataclass(frozen=True)
class LoopSettings:
    """The replayed closed loop (``closedloop``): the trigger's targets (none: ``capacity: learned`` alone) and the
    latency model its signals come from."""

    targets: Targets
    serving: Serving = Serving()
    rule: Rule = RULE  # the server's (a benchmark may try others)
    capacity_learned: bool = False  # capacity: learned (saturation.Online): the plan in the figure learned so far
    load_scale: float = 1.0  # what the server's load query counts per unit of the judged load (1 / capacity_factor)


def utilisation(demand: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """The load served / the ready capacity per tick, in [0, 1] (no capacity with demand: 1)."""
    d = np.asarray(demand, dtype=np.float64)
    c = np.asarray(capacity, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.where(c > 0, d / np.where(c > 0, c, 1.0), np.where(d > 0, 1.0, 0.0))
    return np.clip(u, 0.0, 1.0)


def itl(demand: np.ndarray, capacity: np.ndarray, serving: Serving) -> np.ndarray:
    """ITL per tick: ``itl_seconds / (1 - min(u, MAX_UTILISATION))``."""
    return serving.itl_seconds / (1.0 - np.minimum(utilisation(demand, capacity), MAX_UTILISATION))


def first_token(demand: np.ndarray, capacity: np.ndarray, serving: Serving) -> np.ndarray:
    """What a request of each tick spends after its wait until its first token: one step plus its prefill."""
    s = itl(demand, capacity, serving)
    return s if serving.prefill is None else s + np.asarray(serving.prefill, dtype=np.float64)[:len(s)]


def weighted_quantile(x: np.ndarray, w: np.ndarray, q: float) -> float:
    """The ``q`` quantile of values ``x`` counted ``w`` times each (NaN when nothing counts)."""
    x, w = np.asarray(x, dtype=np.float64), np.asarray(w, dtype=np.float64)
    ok = w > 0
    if not ok.any():
        return math.nan
    order = np.argsort(x[ok], kind="stable")
    xs, cw = x[ok][order], np.cumsum(w[ok][order])
    return float(xs[min(int(np.searchsorted(cw, q * cw[-1] - 1e-12 * cw[-1])), len(xs) - 1)])


def percentiles(demand: np.ndarray, capacity: np.ndarray, tick: float, serving: Serving,
                timeout: float | None = None, q: float = QUANTILE,
                ticks: tuple[int, int] | None = None) -> tuple[float, float]:
    """``(TTFT, ITL)`` percentile ``q`` over every request of the replay (a request past ``timeout`` counts
    with the timeout as its TTFT: it failed); with ``ticks`` ``(a, b)``, over the requests that arrived in ticks
    ``a .. b - 1`` (the queue replayed from the start: a backlog built before ``a`` is waited out in them)."""
    d = np.asarray(demand, dtype=np.float64)
    c = np.asarray(capacity, dtype=np.float64)
    w = waits(d, c, tick, timeout)
    s = first_token(d, c, serving)
    n = len(d)
    served = np.bincount(w.tick_of, weights=w.mass, minlength=n)[:n] if w.mass.size else np.zeros(n)
    zero = np.maximum(d * tick - served, 0.0)  # each tick's arrivals that did not wait
    lo = np.concatenate([w.lo + s[w.tick_of], s])
    hi = np.concatenate([w.hi + s[w.tick_of], s])
    mass = np.concatenate([w.mass, zero])
    arrived = np.concatenate([w.tick_of, np.arange(n)])
    cap = None if timeout is None else timeout + float(s.max(initial=0.0))
    ttft = Waits(lo, hi, mass, 0.0, w.timed_out, arrived).quantile(q, 0.0, cap, ticks)
    sel = slice(None) if ticks is None else slice(*ticks)
    return ttft, weighted_quantile(itl(d, c, serving)[sel], d[sel], q)


def window_p95(arrive: np.ndarray, lo: np.ndarray, hi: np.ndarray, mass: np.ndarray, tick: float, a: float,
               b: float, q: float = QUANTILE) -> float:
    """The ``q`` quantile of the TTFTs a histogram records in ``[a, b)``: of each tick's arrivals (``arrive``:
    the tick's start, its TTFT going linearly from ``lo`` to ``hi`` over its ``mass`` requests), those whose
    first token comes then (``arrival + TTFT``, non-decreasing in FIFO). NaN when none does (no observation:
    the histogram's quantile is NaN)."""
    t0 = np.asarray(arrive, dtype=np.float64)
    lo, hi, m = (np.asarray(v, dtype=np.float64) for v in (lo, hi, mass))
    done0, done1 = t0 + lo, t0 + tick + hi  # the first and the last of the tick's first tokens
    span = np.where(done1 - done0 > 1e-12, done1 - done0, 1.0)
    f0 = np.clip((a - done0) / span, 0.0, 1.0)  # the share of the tick's arrivals done before a
    f1 = np.clip((b - done0) / span, 0.0, 1.0)
    point = done1 - done0 <= 1e-12
    f0 = np.where(point, (done0 < a).astype(float), f0)
    f1 = np.where(point, (done0 < b).astype(float), f1)
    mm = m * (f1 - f0)
    ok = mm > 0
    if not ok.any():
        return math.nan
    seg = Waits(lo[ok] + (hi[ok] - lo[ok]) * f0[ok], lo[ok] + (hi[ok] - lo[ok]) * f1[ok], mm[ok], 0.0, 0.0,
                np.zeros(int(ok.sum()), dtype=np.int64))
    return seg.quantile(q)


def figures(sc, tl, serving: Serving, timeout: float | None = None) -> dict:
    """``ttft_p95_s`` and ``itl_p95_s`` of a policy's timeline (``Timeline``) over the scenario's demand."""
    ttft, itl_p = percentiles(sc.demand, tl.ready.astype(np.float64) * sc.qps_per_replica, sc.tick, serving, timeout)
    return {"ttft_p95_s": ttft, "itl_p95_s": itl_p}

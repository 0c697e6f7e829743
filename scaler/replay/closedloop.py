"""The closed loop replayed: the server's feedback rule (``scaler.feedback.step``) against the replay's queue.

With ``Settings.loop`` every HPA-driven family's answer at each KEDA call is ``decide``'s with the loop's factor
(``policy.decide_array(..., feedback=)``, the server's one decision), and the factor is stepped on what the
server's queries would show at that call. That makes the replay sequential: each call's factor depends on the
queue, which depends on the replicas the earlier answers made ready. So the HPA loop runs one call at a time
(``keda.Loop.span``: the same compiled loop as the open replay, run in pieces) and the queue is kept alongside.

What the replayed server sees at the call at tick ``i`` (causal, lagged by ``LAG_TICKS``: one 15 s scrape):

* ``waiting``: the fluid FIFO backlog at the start of tick ``i - 1`` (``b[t+1] = max(0, b[t] + (d - c) x tick)``
  with the demand ``d`` and the ready capacity ``c`` of tick ``t``); ``ready``: the ready replicas then;
* ``ttft``: the p95 of the TTFTs whose first token came in the ``rate()`` window (2 min) before the start of tick
  ``i - 1`` (``llm.window_p95``: a request's TTFT is its wait, ``b / c`` going linearly over its tick, plus its
  first step and prefill; observed at ``arrival + TTFT``, as a histogram records it); ``itl``: the p95 of the
  window's ticks' ITL, counted by their requests.

The factor's settle rule reads the ready replicas against ``ceil(last value / qps)``, as the server does with
``readyReplicasQuery``. Pure: arrays in, a ``Timeline`` out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import feedback
from ..policy import REASONS, PolicyParams, Reason, decide_array, to_milli
from . import llm
from .llm import LoopSettings
from .policies import finishing
from .hpa import Hpa, value_at_polls, value_ticks
from .keda import Metric, inputs
from .scenario import EPS, RATE_WINDOW, Scenario, Timeline

LAG_TICKS = 1  # the server reads the model server's state one scrape (15 s) late
LOOKBACK_TICKS = 40  # TTFTs observed in the window may come from arrivals up to 10 min before it
_FEEDBACK = REASONS.index(Reason.FEEDBACK)


@dataclass
class ClosedRun:
    timeline: Timeline
    factors: np.ndarray  # the loop's factor at each call (value_ticks)
    raised: int  # calls whose answer the loop raised (reason feedback)


def run(sc: Scenario, base: np.ndarray, hpa: Hpa, *, qps: float, headroom: float, tolerance: float,
        loop: LoopSettings, settle_seconds: float) -> ClosedRun:
    """KEDA + HPA over ``sc`` with the loop: ``base`` is stage 1's value at each call (``Decision.base``)."""
    n, tick = sc.n, sc.tick
    vt = value_ticks(n, hpa, tick)
    p = finishing(qps, headroom, tolerance)
    base = np.asarray(base, dtype=np.float64)[:len(vt)]
    values = decide_array(base, np.zeros(len(vt)), p, None).planned  # the open loop's answers (factor 1)
    lp = inputs(sc, hpa, [Metric(values, hpa.target, live=not hpa.cached_metrics)],
                values[value_at_polls(n, hpa, tick)] > hpa.activation_threshold)
    state = lp.state()
    ready_on, ready_off = state[3], state[4]
    ready = np.zeros(n, dtype=np.int64)
    backlog = np.zeros(n + 1)
    lo, hi = np.zeros(n), np.zeros(n)  # each tick's TTFT, first and last arrival
    itls = np.zeros(n)
    factors = np.ones(len(vt))
    st = feedback.LoopState()
    now_ready, raised = 0, 0
    w = int(round(RATE_WINDOW / tick))
    for k, i in enumerate(vt):
        i = int(i)
        j = i - LAG_TICKS  # the server's view: the state at the start of tick j
        sig = _signals(j, w, tick, backlog, ready, lo, hi, itls, sc.demand) if j >= 1 else feedback.Signals()
        st, v, up = respond(st, sig, float(base[k]), p, loop, now=sc.t0 + i * tick,
                            dt=float((i - vt[k - 1]) * tick) if k else math.nan,
                            last=float(values[k - 1]) if k else math.nan, settle_seconds=settle_seconds)
        factors[k] = st.factor
        if st.factor > 1.0:
            values[k] = v
            raised += up
            lp.raw[0, k] = values[k]
            lp.vals[0, k] = to_milli(values[k]) if hpa.milli else values[k]
            if i % lp.poll_every == 0:
                lp.active[i // lp.poll_every] = values[k] > hpa.activation_threshold
        end = int(vt[k + 1]) if k + 1 < len(vt) else n
        lp.span(i, end, state)
        for t in range(i, end):  # the ticks just run: their ready replicas, the queue and the latency
            now_ready += int(ready_on[t] - ready_off[t])
            ready[t] = now_ready
            cap = now_ready * qps
            backlog[t + 1] = max(0.0, backlog[t] + (sc.demand[t] - cap) * tick)
            first = llm.first_token(sc.demand[t:t + 1], np.array([cap]), _at(loop.serving, t))[0]
            itls[t] = llm.itl(sc.demand[t:t + 1], np.array([cap]), loop.serving)[0]
            lo[t] = (backlog[t] / cap if cap > 0 else math.inf) + first
            hi[t] = (backlog[t + 1] / cap if cap > 0 else math.inf) + first
    tl = lp.timeline(state[1], state[2], ready_on, ready_off)
    return ClosedRun(tl, factors, raised)


def respond(st: feedback.LoopState, sig: feedback.Signals, base: float, p: PolicyParams, loop: LoopSettings, *,
            now: float, dt: float, last: float, settle_seconds: float) -> tuple[feedback.LoopState, float, bool]:
    """One call as the server answers it: the loop stepped on the signals (the replicas asked for from the
    ``last`` answer), then ``decide`` with its factor. ``(state, value, raised: the reason is feedback)``."""
    asked = float(math.ceil(last / p.qps_per_replica - EPS)) if math.isfinite(last) else math.nan
    st = feedback.step(st, sig, loop.targets, now=now, dt=dt, asked=asked, settle_seconds=settle_seconds,
                       rule=loop.rule)
    d = decide_array(np.array([base]), np.array([now]), p, None, feedback=np.array([st.factor]))
    return st, float(d.planned[0]), bool(d.reason[0] == _FEEDBACK)


def _at(serving: llm.Serving, t: int) -> llm.Serving:
    """``serving`` for tick ``t`` alone (its prefill)."""
    if serving.prefill is None:
        return serving
    return llm.Serving(serving.itl_seconds, np.asarray(serving.prefill[t:t + 1]))


def _signals(j: int, w: int, tick: float, backlog: np.ndarray, ready: np.ndarray, lo: np.ndarray, hi: np.ndarray,
             itls: np.ndarray, demand: np.ndarray) -> feedback.Signals:
    """What the server's queries show at the start of tick ``j``: the queue, the ready replicas, and the TTFT and
    ITL p95 of the ``w`` ticks' window before it (NaN where nothing was observed: no first token, no request)."""
    a = max(0, j - w - LOOKBACK_TICKS)
    mass = demand[a:j] * tick
    fin = np.isfinite(lo[a:j]) & np.isfinite(hi[a:j])
    ttft = llm.window_p95((a + np.arange(j - a))[fin] * tick, lo[a:j][fin], hi[a:j][fin], mass[fin], tick,
                          (j - w) * tick, j * tick)
    b = max(0, j - w)
    itl = llm.weighted_quantile(itls[b:j], demand[b:j], llm.QUANTILE)
    return feedback.Signals(waiting=float(backlog[j]), ready=float(ready[j - 1]), ttft=ttft, itl=itl)

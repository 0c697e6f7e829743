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
``readyReplicasQuery``.

With ``LoopSettings.capacity_learned`` (``capacity: learned``) the server's capacity learner runs here too
(``saturation.Online``): fed at each call the served rate over the window, the queue and the ready replicas one
scrape before it, and the call's answer planned with the headroom x configured / the figure in force then (as
``params.policy_params`` does with ``capacity_factor``). The loop's factor and the learned figure multiply, as in
the server. Pure: arrays in, a ``Timeline`` out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .. import feedback
from ..deadband import to_milli
from ..learned import Learned
from ..policy import REASONS, PolicyParams, Reason, decide_array
from . import llm
from .llm import LoopSettings
from .policies import finishing
from .hpa import Hpa, value_at_polls, value_ticks
from .keda import Metric, inputs
from .saturation import Online
from .scenario import EPS, RATE_WINDOW, Scenario, Timeline

LAG_TICKS = 1  # the server reads the model server's state one scrape (15 s) late
LOOKBACK_TICKS = 40  # TTFTs observed in the window may come from arrivals up to 10 min before it
_FEEDBACK = REASONS.index(Reason.FEEDBACK)


@dataclass
class ClosedRun:
    timeline: Timeline
    factors: np.ndarray  # the loop's factor at each call (value_ticks)
    raised: int  # calls whose answer the loop raised (reason feedback)
    learned: Learned | None = None  # capacity: learned, at the end (None: not replayed)
    in_force: np.ndarray | None = None  # ... the figure in force at each call


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
    factors = np.ones(len(vt))
    st = feedback.LoopState()
    now_ready, raised = 0, 0
    online = Online(qps, tick, scale=loop.load_scale) if loop.capacity_learned else None
    served = np.zeros(n + 1)  # requests served by the end of each tick, cumulative (the learner's rate)
    in_force = np.full(len(vt), qps)
    for k, i in enumerate(vt):
        i = int(i)
        j = i - LAG_TICKS  # the server's view: the state at the start of tick j
        sig = _signals(sc, j, backlog, ready, qps, loop) if j >= 1 else feedback.Signals()
        pk = p
        if online is not None:  # capacity: learned, on what was known before this call
            if j >= 1:
                online.observe(j, sc.t0 + j * tick, served, backlog, ready)
            in_force[k] = qps / online.factor()
            pk = p if online.factor() == 1.0 else replace(p, headroom=headroom * online.factor())
        st, v, up = respond(st, sig, float(base[k]), pk, loop, now=sc.t0 + i * tick,
                            dt=float((i - vt[k - 1]) * tick) if k else math.nan,
                            last=float(values[k - 1]) if k else math.nan, settle_seconds=settle_seconds,
                            planned=float(values[k]) if pk is p else None)
        factors[k] = st.factor
        if st.factor > 1.0 or pk is not p:
            values[k] = v
            raised += up
            lp.raw[0, k] = values[k]
            lp.vals[0, k] = to_milli(values[k]) if hpa.milli else values[k]
            if i % lp.poll_every == 0:
                lp.active[i // lp.poll_every] = values[k] > hpa.activation_threshold
        end = int(vt[k + 1]) if k + 1 < len(vt) else n
        lp.span(i, end, state)
        for t in range(i, end):  # the ticks just run: their ready replicas and the queue
            now_ready += int(ready_on[t] - ready_off[t])
            ready[t] = now_ready
            backlog[t + 1] = max(0.0, backlog[t] + (sc.demand[t] - now_ready * qps) * tick)
            served[t + 1] = served[t] + backlog[t] + sc.demand[t] * tick - backlog[t + 1]
    tl = lp.timeline(state[1], state[2], ready_on, ready_off)
    if online is None:
        return ClosedRun(tl, factors, raised)
    return ClosedRun(tl, factors, raised, online.learner.state(), in_force)


def respond(st: feedback.LoopState, sig: feedback.Signals, base: float, p: PolicyParams, loop: LoopSettings, *,
            now: float, dt: float, last: float, settle_seconds: float,
            planned: float | None = None) -> tuple[feedback.LoopState, float, bool]:
    """One call as the server answers it: the loop stepped on the signals (the replicas asked for from the
    ``last`` answer), then ``decide`` with its factor. ``(state, value, raised: the reason is feedback)``.
    ``planned``: the answer without the loop when the caller has it (a factor of 1 gives exactly that)."""
    asked = float(math.ceil(last / p.qps_per_replica - EPS)) if math.isfinite(last) else math.nan
    st = feedback.step(st, sig, loop.targets, now=now, dt=dt, asked=asked, settle_seconds=settle_seconds,
                       rule=loop.rule)
    if st.factor == 1.0 and planned is not None:
        return st, planned, False
    d = decide_array(np.array([base]), np.array([now]), p, None, feedback=np.array([st.factor]))
    return st, float(d.planned[0]), bool(d.reason[0] == _FEEDBACK)


def _signals(sc: Scenario, j: int, backlog: np.ndarray, ready: np.ndarray, qps: float,
             loop: LoopSettings) -> feedback.Signals:
    """What the server's queries show at the start of tick ``j``: the queue and the ready replicas then, and (when
    a target reads them) the TTFT and ITL p95 of the 2-minute window before it (NaN where nothing was observed:
    no first token, no request). A tick's TTFT goes from ``b[t] / c`` to ``b[t+1] / c`` plus its first step and
    prefill (``llm.first_token``); a TTFT observed in the window may come from an arrival up to
    ``LOOKBACK_TICKS`` before it."""
    tick, t = sc.tick, loop.targets
    w = int(round(RATE_WINDOW / tick))
    ttft = itl = math.nan
    if t.ttft is not None or t.itl is not None:
        a = max(0, j - w - (LOOKBACK_TICKS if t.ttft is not None else 0))
        d, cap = sc.demand[a:j], ready[a:j] * qps
        serving = loop.serving if loop.serving.prefill is None else \
            llm.Serving(loop.serving.itl_seconds, loop.serving.prefill[a:j])
        if t.ttft is not None:
            first = llm.first_token(d, cap, serving)
            with np.errstate(divide="ignore", invalid="ignore"):
                lo = np.where(cap > 0, backlog[a:j] / np.where(cap > 0, cap, 1.0), np.inf) + first
                hi = np.where(cap > 0, backlog[a + 1:j + 1] / np.where(cap > 0, cap, 1.0), np.inf) + first
            fin = np.isfinite(lo) & np.isfinite(hi)  # no capacity: no first token, nothing observed
            ttft = llm.window_p95((a + np.arange(j - a))[fin] * tick, lo[fin], hi[fin], d[fin] * tick, tick,
                                  (j - w) * tick, j * tick)
        if t.itl is not None:
            b = max(a, j - w) - a
            itl = llm.weighted_quantile(llm.itl(d[b:], cap[b:], serving), d[b:], llm.QUANTILE)
    return feedback.Signals(waiting=float(backlog[j]), ready=float(ready[j - 1]), ttft=ttft, itl=itl)

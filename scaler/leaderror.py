"""The forecast-error part of the lead, measured from live scores: ``forecastErrorSeconds`` end to end.

The lead is ``L = T_cold + T_buffer`` and ``T_buffer = forecastErrorSeconds + schedulingSeconds +
readinessSeconds``. The forecast-error part is slack for a forecast that is *late*: demand that comes earlier
than the curve says is met only if the window the plan looks at, ``[now, now + L]``, reaches far enough. A
typed constant (30 s by default) is a guess; the scored forecasts measure it.

The derivation, per trigger (the server's ``serve.watch`` runs it at each decision acted on a forecast):

* At a decision at ``t``, the capacity asked for is ready at ``t + L0`` with ``L0 = L - forecastErrorSeconds``
  in force (T_cold + scheduling + readiness). For each shift ``d`` in ``SHIFTS`` (0 .. 600 s) the provisioned
  quantile's window max over ``[t, t + L0 + d]`` is kept (``policy.window_peaks``: as ``decide`` computes it).
* When the observation ``y`` of the minute ``t + L0`` comes, its timing error is the smallest shift whose window
  covered it: ``d* = min{d : max over [t, t + L0 + d] >= y}`` (``MAX_SECONDS`` when none did). A forecast on time
  covers with ``d* = 0``; one whose ramp comes ``D`` seconds early needs ``d* ~ D``.
* ``measured`` = the ``tau``-quantile of ``d*`` over the scored minutes of the last 24 h (``tau``: the trigger's
  ``quantile``): the slack the provisioned quantile needed to cover its nominal share. A calibrated forecast
  leaves ``1 - tau`` of the minutes above it by design, so ``measured`` is 0 unless the misses are more than that.
* ``derived = (PRIOR_MINUTES x prior + n x measured) / (PRIOR_MINUTES + n)`` with ``n`` the minutes scored in
  the window, bounded to ``[0, MAX_SECONDS]``: the typed constant (``prior``) is the estimate with no score, and
  60 scored minutes weigh as much as it.

``forecastErrorSeconds: auto`` makes the server's lead use ``derived``; with a number it stays that number, and
``derived`` is exported all the same (``forescale_forecast_error_seconds``) and shown on the status page.

Memory per trigger is fixed: at most ``MAX_PENDING`` provisioned minutes of ``len(SHIFTS)`` floats (a few in
practice: the lead's minutes) and 24 hourly buckets of ``len(SHIFTS)`` counts (about 1 KiB). Pure: no clock, no I/O (the caller passes the times).

What survives a restart (``resume``, stored by ``scaler.serve.keeper``): the buckets, and the provisioned minutes
still ahead (a minute that came due while the server was down was never observed: it is dropped, not scored on a
later observation).
"""

from __future__ import annotations

import math

import numpy as np

SHIFTS = (0.0, 15.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0)  # seconds past L0 the window is extended by
MAX_SECONDS = SHIFTS[-1]  # the derived value's bound (and d* when no shift covered the minute)
PRIOR_MINUTES = 60  # scored minutes the typed constant weighs as
MAX_PENDING = 256  # provisioned minutes awaiting their observation
BUCKET_SECONDS, BUCKETS = 3600.0, 24  # the rolling 24 h window, hour by hour


class LeadError:
    """One trigger's timing errors (not thread-safe: the caller locks)."""

    __slots__ = ("step", "pending", "counts", "ids")

    def __init__(self, step: float = 60.0):
        self.step = step
        self.pending: dict[int, np.ndarray] = {}  # minute -> window max per shift
        # per bucket: d* per shift (the last: none covered), and the bucket's hour; made at the first score
        self.counts: np.ndarray | None = None
        self.ids: np.ndarray | None = None

    @classmethod
    def resume(cls, step: float, pending: dict[int, np.ndarray], counts: np.ndarray | None,
               ids: np.ndarray | None, now: float) -> "LeadError":
        """One trigger's scoring as it was before a restart, at ``now``: the provisioned minutes after ``now``'s
        (at most ``MAX_PENDING``) and the buckets. ValueError for a shape or a value these never hold."""
        if not (math.isfinite(step) and step > 0):
            raise ValueError(f"step {step!r}: accepted a number of seconds > 0")
        out = cls(step)
        now_m = now // step if math.isfinite(now) else -math.inf  # -inf: a copy, every minute kept
        for m, peaks in sorted(pending.items())[-MAX_PENDING:]:
            p = np.asarray(peaks, dtype=np.float64)
            if p.shape != (len(SHIFTS),):
                raise ValueError(f"a provisioned minute holds {p.shape} peaks; accepted {len(SHIFTS)}")
            if m > now_m:
                out.pending[int(m)] = p
        if (counts is None) != (ids is None):
            raise ValueError("buckets: counts and their hours go together")
        if counts is not None and ids is not None:
            c, i = np.asarray(counts), np.asarray(ids)
            if c.shape != (BUCKETS, len(SHIFTS)) or i.shape != (BUCKETS,) or (c < 0).any() or (c > 2 ** 31 - 1).any():
                raise ValueError(f"buckets of shape {c.shape} and {i.shape}; accepted ({BUCKETS}, {len(SHIFTS)}) "
                                 f"counts >= 0 and {BUCKETS} hours")
            out.counts, out.ids = c.astype(np.int32), i.astype(np.int64)
        return out

    def wants(self, when: float) -> bool:
        """Whether the minute containing ``when`` still needs provisioning (the first decision for it counts)."""
        return math.isfinite(when) and int(when // self.step) not in self.pending and len(self.pending) < MAX_PENDING

    def provision(self, when: float, peaks: np.ndarray) -> None:
        """The minute containing ``when`` (t + L0), with the window max at each of ``SHIFTS``."""
        if self.wants(when):
            self.pending[int(when // self.step)] = np.asarray(peaks, dtype=np.float64)

    def observe(self, at: float, observed: float) -> None:
        """An observation at ``at``: each provisioned minute up to it gets its ``d*``."""
        if not (math.isfinite(at) and math.isfinite(observed)):
            return
        now_m = int(at // self.step)
        for m in sorted(k for k in self.pending if k <= now_m):
            peaks = self.pending.pop(m)
            covered = np.flatnonzero(peaks >= observed)  # NaN (the curve ends before) covers nothing
            j = int(covered[0]) if covered.size else len(SHIFTS) - 1
            if self.counts is None or self.ids is None:
                self.counts = np.zeros((BUCKETS, len(SHIFTS)), dtype=np.int32)
                self.ids = np.full(BUCKETS, -1, dtype=np.int64)
            bid = int(m * self.step // BUCKET_SECONDS)
            if self.ids[bid % BUCKETS] != bid:
                self.ids[bid % BUCKETS] = bid
                self.counts[bid % BUCKETS] = 0
            self.counts[bid % BUCKETS, j] += 1

    def measured(self, at: float, tau: float) -> tuple[float | None, int]:
        """``(the tau-quantile of d* over the last 24 h, the minutes scored)``; None when none was."""
        if self.counts is None or self.ids is None:
            return None, 0
        live = self.ids > int(at // BUCKET_SECONDS) - BUCKETS
        c = self.counts[live].sum(axis=0)
        n = int(c.sum())
        if n == 0:
            return None, 0
        j = int(np.searchsorted(np.cumsum(c), tau * n - 1e-9))
        return SHIFTS[min(j, len(SHIFTS) - 1)], n

    def derived(self, at: float, tau: float, prior: float) -> float:
        """The forecast-error seconds the scores support: the prior shrunk toward ``measured``, in [0, 600]."""
        m, n = self.measured(at, tau)
        value = prior if m is None else (PRIOR_MINUTES * prior + n * m) / (PRIOR_MINUTES + n)
        return min(MAX_SECONDS, max(0.0, value))

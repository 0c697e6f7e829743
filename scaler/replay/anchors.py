"""The anchor families: published predictive autoscalers, re-implemented from their descriptions.

Each returns the value KEDA would get at every poll, before headroom (the
family's margin) and dead-band compensation, which ``policies.finish``
applies as for every HPA-driven family. Each sees only the trace before the
poll (no peeking) and takes the max with the observed rate, as the
published systems combine their prediction with a reactive target.

* ``envelope``    Crane EHPA's DSP predictor idea: margin x the max, over the previous periods of one week
                  (period: a day or a week, detected on the history), of the rate in ``[tau - w, tau + w]``,
                  for every tau in ``[t, t + L]``. The same computation as the servable model
                  ``model: envelope`` (``forecaster.models.envelope``), which the server would evaluate.
* ``aws_like``    AWS EC2 Auto Scaling predictive scaling: the forecast of an hour is the mean of the same
                  clock hour over the previous 7 days; capacity for an hour is in place a scheduling buffer
                  (300 s) before it starts; the result is the max with the dynamic (target tracking) target.
* ``mimir_like``  Grafana Mimir's predictive HPA trigger: last week's rate, max over a 30 min window
                  (``max_over_time(rate[30m] offset 6d23h30m)``: the coming half hour of one week ago),
                  max with the current rate.

The envelope family's window and every family's margin are its knobs
(``Variant.window_seconds``, ``Variant.headroom``).
"""

from __future__ import annotations

import math

import numpy as np

from forecaster.models.envelope import detect_period, envelope_at, periods_in_week

from .hpa import value_ticks

WEEK = 7 * 86400.0
AWS_BUFFER_SECONDS = 300.0  # AWS predictive scaling's default SchedulingBufferTime
AWS_DAYS = 7
MIMIR_WINDOW_SECONDS = 1800.0


def _polls(ctx) -> tuple[np.ndarray, np.ndarray]:
    sc = ctx.scenario
    idx = value_ticks(sc.n, ctx.hpa, sc.tick)
    return sc.t0 + sc.tick * idx, sc.observed[idx]


def _index(ctx, t: np.ndarray) -> np.ndarray:
    """The trace interval holding each time (may be outside the trace)."""
    return np.floor((np.asarray(t, dtype=float) - ctx.trace_t[0]) / ctx.trace_step + 1e-9).astype(np.int64)


def _range_max(y: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """max of ``y[a_k .. b_k]`` (inclusive, clipped to ``y``; NaN ignored; NaN when nothing finite).

    All ranges at once: each one's values as a row of a strided view (NaN as -inf), the columns past its
    end masked; a max is exact, so this is ``np.nanmax`` of each slice. In blocks of ranges (bounded memory).
    """
    y = np.asarray(y, dtype=float)
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    out = np.full(len(a), np.nan)
    n = len(y)
    lo, hi = np.maximum(a, 0), np.minimum(b + 1, n)  # [lo, hi) within y
    width = int((hi - lo).max(initial=0))
    if width <= 0:
        return out
    vals = np.concatenate([np.where(np.isnan(y), -np.inf, y), np.full(width, -np.inf)])
    fin = np.concatenate([np.isfinite(y), np.zeros(width, dtype=bool)])
    rows_v = np.lib.stride_tricks.sliding_window_view(vals, width)
    rows_f = np.lib.stride_tricks.sliding_window_view(fin, width)
    block = max(1, 4_000_000 // width)
    for s in range(0, len(a), block):
        sl = slice(s, s + block)
        start = np.clip(lo[sl], 0, n)
        inside = np.arange(width)[None, :] < (hi[sl] - lo[sl])[:, None]
        m = np.where(inside, rows_v[start], -np.inf).max(axis=1)
        ok = (inside & rows_f[start]).any(axis=1)
        out[sl] = np.where(ok, m, np.nan)
    return out


def envelope_values(ctx, window_seconds: float) -> tuple[np.ndarray, str]:
    """Stage-1 value per poll of ``envelope``: max(observed, max over [t, t+L] of the periodic envelope)."""
    times, obs = _polls(ctx)
    step = ctx.trace_step
    hist = ctx.trace_y[(ctx.trace_t >= ctx.scenario.t0 - ctx.train_seconds) & (ctx.trace_t < ctx.scenario.t0)]
    period = detect_period(hist, step)
    if period is None:
        return obs.astype(float), "envelope: no period in the history (less than 2 days): observed only"
    lag = int(round(period / step))
    half = max(0, int(round(window_seconds / step)))
    if (half + 1) * step + ctx.lead_seconds >= period:
        raise ValueError(f"envelope window {window_seconds:g} s + lead {ctx.lead_seconds:g} s must be shorter than "
                         f"the period {period:g} s")
    k = periods_in_week(period)
    a, b = _index(ctx, times), _index(ctx, times + ctx.lead_seconds)
    lo, hi = int(a.min()), int(b.max())
    env = envelope_at(ctx.trace_y, np.arange(lo, hi + 1), lag, half, k)  # each reads y at most (i - lag + half) < a
    fwd = _range_max(env, a - lo, b - lo)
    vals = np.where(np.isfinite(fwd), np.maximum(obs, fwd), obs)
    note = (f"Crane EHPA-style envelope: max of [tau-{_dur(window_seconds)}, tau+{_dur(window_seconds)}] over the "
            f"previous {k} {'day' if period < WEEK else 'week'}(s), over [t, t+L], max with observed")
    return vals, note


def aws_values(ctx) -> tuple[np.ndarray, str]:
    """Stage-1 value per poll of ``aws_like``: max(observed, forecast of the hour starting within the buffer)."""
    times, obs = _polls(ctx)
    t, y = ctx.trace_t, ctx.trace_y
    hour = np.floor(t / 3600.0).astype(np.int64)
    ok = np.isfinite(y)
    h0 = int(hour[0])
    nh = int(hour[-1]) - h0 + 1
    s = np.bincount(hour[ok] - h0, weights=y[ok], minlength=nh)
    c = np.bincount(hour[ok] - h0, minlength=nh)
    hourly = np.where(c > 0, s / np.maximum(c, 1), np.nan)
    target = np.floor((times + AWS_BUFFER_SECONDS) / 3600.0).astype(np.int64) - h0
    past = np.full((AWS_DAYS, len(times)), np.nan)
    for d in range(1, AWS_DAYS + 1):
        src = target - 24 * d
        inside = (src >= 0) & (src < nh)
        past[d - 1, inside] = hourly[src[inside]]
    with np.errstate(invalid="ignore"), _quiet():
        fc = np.nanmean(past, axis=0)
    vals = np.where(np.isfinite(fc), np.maximum(obs, fc), obs)
    return vals, (f"AWS-style predictive scaling: mean of the same clock hour over the previous {AWS_DAYS} days, "
                  f"in place {AWS_BUFFER_SECONDS:g} s before the hour, max with the dynamic target")


def mimir_values(ctx) -> tuple[np.ndarray, str]:
    """Stage-1 value per poll of ``mimir_like``: max(observed, max of [t - 1w, t - 1w + 30 min])."""
    times, obs = _polls(ctx)
    a = _index(ctx, times - WEEK)
    b = _index(ctx, times - WEEK + MIMIR_WINDOW_SECONDS - 1e-6)
    past = _range_max(ctx.trace_y, a, b)
    vals = np.where(np.isfinite(past), np.maximum(obs, past), obs)
    return vals, (f"Mimir-style: max of last week's rate over the coming {_dur(MIMIR_WINDOW_SECONDS)} of one week ago, "
                  f"max with observed")


def _dur(seconds: float) -> str:
    return f"{seconds / 3600:g}h" if seconds >= 3600 and math.isclose(seconds % 3600, 0) else f"{seconds / 60:g}min"


class _quiet:
    """numpy's 'Mean of empty slice' warning off (an hour with no past is NaN, handled)."""

    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", category=RuntimeWarning)

    def __exit__(self, *a):
        return self._w.__exit__(*a)

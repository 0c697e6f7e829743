"""Series hygiene: raw samples in, a regular ``Series`` and a ``HygieneReport`` out.

Every correction is explicit and counted, never silent:

* the grid is anchored at the first sample and advances by ``step``; a sample
  goes to the nearest grid slot (``off_grid`` counts those more than 1 % of a
  step away); several samples in one slot keep the last one (``duplicates``);
* NaN and +-Inf values are dropped (``non_finite``), negative rates are dropped
  (``negative``: a request rate cannot be negative, so it is a broken sample);
* a counter (``is_counter=True``) becomes a rate: the increase between two
  samples divided by the time between them; a drop is a reset
  (``counter_resets``) and, as in Prometheus' ``rate()``, the post-reset value
  is the increase since the reset;
* holes are then filled or kept by :func:`fill_gaps`: runs of at most
  ``max_gap`` missing points between two known points are linearly
  interpolated, longer runs (and holes at either end) stay NaN.

Time is epoch seconds (float64), rates are requests per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .base import Series

DEFAULT_MAX_GAP = 5  # steps interpolated at most; longer gaps stay NaN
MIN_POINTS = 2


@dataclass(frozen=True)
class HygieneReport:
    """What hygiene found and did. All counts are exact.

    ``points``        grid points in the returned series
    ``step``          grid step in seconds
    ``missing``       grid points that had no usable value (absent sample, NaN,
                      Inf, negative, or a counter rate that could not be formed)
    ``interpolated``  of those, filled by linear interpolation (short gaps)
    ``unfilled``      of those, left NaN (long gaps, leading/trailing holes)
    ``long_gaps``     number of runs left NaN
    ``non_finite``    input values that were NaN or +-Inf (empty CSV cells included)
    ``negative``      input values < 0, dropped
    ``counter_resets`` drops of a counter input, each read as a reset
    ``duplicates``    input samples that fell in an already occupied grid slot
    ``off_grid``      input samples more than 1 % of a step away from a grid slot
    ``too_short``     fewer than 2 finite points: nothing can be fitted
    ``message``       one human line summarising the above
    """

    points: int
    step: float
    missing: int = 0
    interpolated: int = 0
    unfilled: int = 0
    long_gaps: int = 0
    non_finite: int = 0
    negative: int = 0
    counter_resets: int = 0
    duplicates: int = 0
    off_grid: int = 0
    too_short: bool = False
    message: str = ""

    @property
    def clean(self) -> bool:
        """True when the input needed no correction at all."""
        return not (self.missing or self.non_finite or self.negative or self.counter_resets
                    or self.duplicates or self.off_grid or self.too_short)


def fill_gaps(y: np.ndarray, max_gap: int = DEFAULT_MAX_GAP) -> tuple[np.ndarray, int, int, int]:
    """Fill short holes in a regular grid; keep long ones.

    Policy: a run of at most ``max_gap`` consecutive NaN points with a finite
    point on both sides is replaced by the straight line between those two
    points (a short scrape or export hiccup: the rate did not stop). A longer
    run, or a run touching either end of the series, stays NaN: we do not know
    what traffic did there, and the models skip NaN points rather than learn
    an invented shape. ``max_gap=0`` fills nothing.

    Returns ``(filled_copy, n_interpolated, n_unfilled, n_long_runs)``.
    """
    y = np.array(y, dtype=float, copy=True)
    nan = ~np.isfinite(y)
    y[nan] = np.nan
    if not nan.any():
        return y, 0, 0, 0
    # runs of NaN: starts and ends (exclusive)
    d = np.diff(np.concatenate(([0], nan.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
    filled = unfilled = long_runs = 0
    n = len(y)
    for s, e in zip(starts, ends):
        length = e - s
        if s > 0 and e < n and length <= max_gap:
            left, right = y[s - 1], y[e]
            frac = np.arange(1, length + 1) / (length + 1)
            y[s:e] = left + (right - left) * frac
            filled += int(length)
        else:
            unfilled += int(length)
            long_runs += 1
    return y, filled, unfilled, long_runs


def regularize(t: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, step: float, *,
               is_counter: bool = False, max_gap: int = DEFAULT_MAX_GAP) -> tuple[Series, HygieneReport]:
    """Raw samples -> a regular grid at ``step`` seconds and a report of every correction.

    ``t``: sample times (epoch seconds, any order); ``y``: rates in requests/s,
    or a cumulative counter when ``is_counter`` (converted to a rate, resets
    handled: see the module docstring). Never raises on bad values, only on
    arrays of different lengths or a non-positive step; an input with fewer
    than 2 finite points comes back with ``report.too_short``.
    """
    t = np.asarray(t, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if t.shape != y.shape:
        raise ValueError(f"t and y must have one length, got {t.size} and {y.size}")
    if not (step > 0 and math.isfinite(step)):
        raise ValueError(f"step must be a finite number of seconds > 0, got {step}")
    step = float(step)
    keep = np.flatnonzero(np.isfinite(t))
    order = keep[np.argsort(t[keep], kind="stable")]  # the finite times, sorted
    t, y = t[order], y[order]

    non_finite = int(np.count_nonzero(~np.isfinite(y)))
    negative = int(np.count_nonzero(np.isfinite(y) & (y < 0)))
    good = np.isfinite(y) & (y >= 0)

    if t.size == 0:
        return _empty(step, non_finite, negative)

    t0 = t[0]
    pos = (t - t0) / step
    slot = np.rint(pos).astype(np.int64)
    off_grid = int(np.count_nonzero(np.abs(pos - slot) > 0.01))
    n = int(slot[-1]) + 1
    grid_t = t0 + step * np.arange(n, dtype=float)

    # duplicates: samples whose slot is already taken by an earlier sample (the last one wins)
    duplicates = int(slot.size - np.unique(slot).size)

    values = np.full(n, np.nan)
    resets = 0
    if is_counter:
        ts, cs, ss = t[good], y[good], slot[good]
        # one counter sample per slot: the last
        last_in_slot = np.ones(ss.size, dtype=bool)
        last_in_slot[:-1] = ss[1:] != ss[:-1]
        ts, cs, ss = ts[last_in_slot], cs[last_in_slot], ss[last_in_slot]
        if cs.size >= 2:
            inc = np.diff(cs)
            drop = inc < 0
            resets = int(np.count_nonzero(drop))
            inc[drop] = cs[1:][drop]  # after a reset the counter counts from 0
            dt = np.diff(ts)
            rate = inc / dt
            for i in range(rate.size):
                a, b = int(ss[i]), int(ss[i + 1])
                if b - a <= max_gap + 1:  # spread the known total over the slots it covers
                    values[a + 1:b + 1] = rate[i]
                # over a longer gap the increase is known but not its shape: those slots stay NaN
        # a rate needs two samples: the grid starts one slot after the first usable counter sample
        cut = int(ss[0]) + 1 if ss.size else n
        grid_t, values, n = grid_t[cut:], values[cut:], n - cut
    else:
        values[slot[good]] = y[good]  # fancy assignment: the last sample of a slot wins

    missing = int(np.count_nonzero(np.isnan(values)))
    filled, n_filled, n_unfilled, long_gaps = fill_gaps(values, max_gap)
    finite = int(np.count_nonzero(np.isfinite(filled)))
    too_short = finite < MIN_POINTS
    series = Series(grid_t, filled, step)
    report = HygieneReport(points=n, step=step, missing=missing, interpolated=n_filled, unfilled=n_unfilled,
                           long_gaps=long_gaps, non_finite=non_finite, negative=negative, counter_resets=resets,
                           duplicates=duplicates, off_grid=off_grid, too_short=too_short,
                           message=_message(n, step, missing, n_filled, n_unfilled, long_gaps, non_finite, negative,
                                            resets, duplicates, off_grid, too_short, finite))
    return series, report


def resample(series: Series, step: float, *, min_fraction: float = 0.5) -> Series:
    """Mean-aggregate ``series`` to a coarser ``step`` (an integer multiple of its own).

    Buckets are anchored at the series' first point; a bucket with fewer than
    ``min_fraction`` of its points finite is NaN; the last, partial bucket is
    kept if it meets that bar. The result's timestamp is the bucket's start.
    """
    k = step / series.step
    if abs(k - round(k)) > 1e-6 or round(k) < 1:
        raise ValueError(f"cannot resample step {series.step:g}s to {step:g}s: not an integer multiple")
    k = int(round(k))
    if k == 1 or not len(series):
        return series
    n = len(series)
    m = -(-n // k)
    y = np.full(m * k, np.nan)
    y[:n] = series.y
    rows = y.reshape(m, k)
    fin = np.isfinite(rows)
    cnt = fin.sum(axis=1)
    tot = np.where(fin, rows, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = tot / cnt
    mean[cnt < max(1, min_fraction * k)] = np.nan
    return Series(series.t[0] + step * np.arange(m, dtype=float), mean, float(step))


# --- the Prometheus reader (a trace CSV's is forecaster.tracecsv) -------------------------------

def from_prometheus_matrix(result: list[dict], step: float, *, is_counter: bool = False,
                           max_gap: int = DEFAULT_MAX_GAP) -> tuple[Series, HygieneReport]:
    """The ``data.result`` of a Prometheus range query -> ``Series`` at ``step``.

    Exactly one series is expected (the query must aggregate to one rate);
    values are strings as Prometheus writes them ("NaN", "+Inf" included).
    """
    if not isinstance(result, list):
        raise ValueError(f"expected the list data.result of a range query, got {type(result).__name__}")
    if len(result) != 1:
        raise ValueError(f"the range query returned {len(result)} series, exactly 1 expected "
                         "(aggregate it, e.g. sum(rate(...[2m])))")
    item = result[0]
    values = item.get("values") if isinstance(item, dict) else None
    if values is None:
        raise ValueError("the series has no 'values' (an instant-query 'value' is not a range)")
    try:
        t = np.array([float(v[0]) for v in values], dtype=float)
        y = np.array([float(v[1]) for v in values], dtype=float)
    except (TypeError, ValueError, IndexError) as e:
        raise ValueError(f"malformed sample in 'values' (expected [timestamp, \"value\"]): {e}") from None
    return regularize(t, y, step, is_counter=is_counter, max_gap=max_gap)


# --- helpers -----------------------------------------------------------------------------------

def _empty(step: float, non_finite: int, negative: int) -> tuple[Series, HygieneReport]:
    s = Series(np.array([], dtype=float), np.array([], dtype=float), step)
    msg = f"no samples (non-finite {non_finite}, negative {negative}): too short to forecast"
    return s, HygieneReport(points=0, step=step, non_finite=non_finite, negative=negative, too_short=True, message=msg)


def _message(n, step, missing, filled, unfilled, long_gaps, non_finite, negative, resets, duplicates, off_grid,
             too_short, finite) -> str:
    parts = [f"{n} points at {step:g}s"]
    if missing:
        parts.append(f"{missing} missing ({filled} interpolated, {unfilled} left NaN in {long_gaps} gap(s))")
    for count, what in ((non_finite, "non-finite"), (negative, "negative"), (resets, "counter reset(s)"),
                        (duplicates, "duplicate(s)"), (off_grid, "off-grid sample(s)")):
        if count:
            parts.append(f"{count} {what}")
    if too_short:
        parts.append(f"too short: {finite} finite point(s), {MIN_POINTS} needed")
    return "; ".join(parts)

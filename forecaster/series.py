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

import csv
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Sequence

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
    keep_t = np.isfinite(t)
    t, y = t[keep_t], y[keep_t]
    order = np.argsort(t, kind="stable")
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
    y = y.reshape(m, k)
    fin = np.isfinite(y)
    cnt = fin.sum(axis=1)
    tot = np.where(fin, y, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = tot / cnt
    mean[cnt < max(1, min_fraction * k)] = np.nan
    return Series(series.t[0] + step * np.arange(m, dtype=float), mean, float(step))


# --- readers -----------------------------------------------------------------------------------

CSV_FORM = ("a header 'timestamp,count' (requests in each interval) or 'timestamp,qps' (requests/s), "
            "then one row per interval; timestamps ISO-8601 (naive = UTC) or epoch seconds; "
            "an empty value is a gap")


def from_csv(path: str | Path, *, step: float | None = None, max_gap: int = DEFAULT_MAX_GAP,
             column: str | None = None) -> tuple[Series, HygieneReport]:
    """Read a trace CSV: ``timestamp,count`` or ``timestamp,qps`` (extra columns are ignored).

    ``column``: read that column instead, as an amount per interval like ``count`` (``input_tokens``: tokens/s
    on the same grid as the requests of the same file).

    ``count`` is requests per interval, converted to requests/s by dividing by
    the file's own interval (the median spacing of its timestamps). ``step``
    is the grid wanted: None keeps the file's interval; a multiple of it
    averages buckets (see :func:`resample`). Raises ``ValueError`` naming the
    file, the line or column and the accepted form on bad input.
    """
    path = Path(path)
    where = str(path)
    try:
        fh = open(path, newline="", encoding="utf-8-sig")
    except OSError as e:
        raise ValueError(f"{where}: cannot read ({e.strerror}); expected {CSV_FORM}") from None
    with fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or not any(h.strip() for h in header):
            raise ValueError(f"{where}: empty file, no header; expected {CSV_FORM}")
        cols = [h.strip().lower() for h in header]
        if "timestamp" not in cols:
            hint = " (the first line looks like data: add a header)" if _looks_like_data(header) else ""
            raise ValueError(f"{where}: line 1: no 'timestamp' column in header {header!r}{hint}; expected {CSV_FORM}")
        has_count, has_qps = "count" in cols, "qps" in cols
        if column is not None:
            if column.lower() not in cols:
                raise ValueError(f"{where}: line 1: no {column!r} column in header {header!r}")
            has_count, has_qps, cols = True, False, [("count" if c == column.lower() else
                                                      ("" if c == "count" else c)) for c in cols]
        if has_count == has_qps:
            what = "both 'count' and 'qps'" if has_count else "neither 'count' nor 'qps'"
            raise ValueError(f"{where}: line 1: header {header!r} has {what}; expected {CSV_FORM}")
        it, iv = cols.index("timestamp"), cols.index("count" if has_count else "qps")
        value_name = cols[iv] if column is None else column
        ts_raw: list[str] = []
        vals: list[float] = []
        for lineno, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) <= max(it, iv):
                raise ValueError(f"{where}: line {lineno}: {len(row)} field(s), header has {len(cols)}; expected {CSV_FORM}")
            ts_raw.append(row[it].strip())
            v = row[iv].strip()
            if v == "":
                vals.append(math.nan)
            else:
                try:
                    vals.append(float(v))
                except ValueError:
                    raise ValueError(f"{where}: line {lineno}: column '{value_name}': {v!r} is not a number "
                                     f"(leave it empty for a gap); expected {CSV_FORM}") from None
    if len(ts_raw) < 2:
        raise ValueError(f"{where}: {len(ts_raw)} data row(s), at least 2 needed; expected {CSV_FORM}")
    t = _parse_timestamps(ts_raw, where)
    y = np.asarray(vals, dtype=float)
    diffs = np.diff(np.sort(t))
    diffs = diffs[diffs > 0]
    if diffs.size == 0:
        raise ValueError(f"{where}: every row has the same timestamp; expected {CSV_FORM}")
    native = float(np.median(diffs))
    check_span(t, native, where)
    if value_name == "count" or column is not None:
        y = y / native
    series, report = regularize(t, y, native, max_gap=max_gap)
    if step is not None and abs(step - native) > 1e-9:
        if step < native:
            raise ValueError(f"{where}: step {step:g}s is finer than the file's interval {native:g}s; "
                             f"use a multiple of {native:g}s")
        series = resample(series, step)
    return series, report


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

MAX_EPOCH_SECONDS = 1e11  # year 5138: a larger epoch is milliseconds (or microseconds), not seconds
MAX_GRID_POINTS = 5_000_000  # a file's span at its own interval (9.5 years at 60 s, 58 days at 1 s)


def check_span(t: np.ndarray, native: float, where: str) -> None:
    """ValueError naming the row before a grid is built: epoch milliseconds, or a row so far from the others
    that the file's span at its own interval ``native`` would be more than ``MAX_GRID_POINTS`` points."""
    big = np.flatnonzero(np.abs(t) >= MAX_EPOCH_SECONDS)
    if big.size:
        i = int(big[0])
        raise ValueError(f"{where}: line {i + 2}: column 'timestamp': {t[i]:.0f} is not epoch seconds (it would be "
                         f"after the year 5000: milliseconds? divide by 1000); expected {CSV_FORM}")
    points = (float(t.max()) - float(t.min())) / native
    if points <= MAX_GRID_POINTS:
        return
    order = np.argsort(t, kind="stable")
    gaps = np.diff(t[order])
    k = int(np.argmax(gaps))
    # the row on the far side of the largest gap, from the bulk of the rows
    i = int(order[k + 1]) if k + 1 >= len(t) - 1 - k else int(order[k])
    when = datetime.fromtimestamp(float(t[i]), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    raise ValueError(f"{where}: line {i + 2}: column 'timestamp': {t[i]:.0f} ({when}) is {gaps[k] / 86400:.0f} days "
                     f"from the other rows; the file would span {points:,.0f} points at its interval {native:g}s "
                     f"(at most {MAX_GRID_POINTS:,}); accepted: rows of one period, without outliers")


def _parse_timestamps(raw: list[str], where: str) -> np.ndarray:
    try:
        return np.array([float(s) for s in raw], dtype=float)  # epoch seconds
    except ValueError:
        pass
    out = np.empty(len(raw))
    for i, s in enumerate(raw):
        try:
            d = datetime.fromisoformat(s)
        except ValueError:
            try:
                float(s)
                msg = "mixes epoch seconds with ISO-8601"
            except ValueError:
                msg = f"{s!r} is not an ISO-8601 timestamp or epoch seconds"
            raise ValueError(f"{where}: line {i + 2}: column 'timestamp': {msg}; expected {CSV_FORM}") from None
        if d.tzinfo is None:
            d = d.replace(tzinfo=timezone.utc)
        out[i] = d.timestamp()
    return out


def _looks_like_data(header: Iterable[str]) -> bool:
    for h in header:
        try:
            float(h)
            return True
        except ValueError:
            try:
                datetime.fromisoformat(h.strip())
                return True
            except ValueError:
                pass
    return False


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

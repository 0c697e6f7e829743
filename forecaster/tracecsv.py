"""A trace CSV -> a regular ``Series``: ``from_csv`` reads ``timestamp,count`` or ``timestamp,qps`` (``CSV_FORM``),
parses its timestamps (ISO-8601 or epoch seconds), refuses a span no grid can hold (``check_span``), and hands the
samples to ``forecaster.series.regularize`` (the hygiene, counted in its ``HygieneReport``).

Every error is a ``ValueError`` naming the file, the line or column, and the accepted form.
"""

from __future__ import annotations

import csv
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

import numpy as np

from .base import Series
from .series import DEFAULT_MAX_GAP, HygieneReport, regularize, resample


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

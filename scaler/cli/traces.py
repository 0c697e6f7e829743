"""Where traffic comes from: a trace CSV, the bundled real trace, or a Prometheus range query."""

from __future__ import annotations

import gzip
import os
import re
import tempfile
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ..replay.engine import ReplayError, Trace
from ..spec import parse_duration

BUNDLED_DIR = Path(__file__).resolve().parent.parent / "data" / "worldcup98"
BUNDLED_TRACE = BUNDLED_DIR / "per_minute.csv.gz"


MIN_HISTORY_POINTS = 30  # the newest-points models re-predict from the last 30 points, as the server does
MIN_SPAN_SECONDS = 3600.0  # the shortest simulated span worth a table


def load_csv(path: str | os.PathLike, *, name: str | None = None, step: float | None = None) -> Trace:
    """A trace CSV (``timestamp,count`` or ``timestamp,qps``; ``.gz`` too) via ``forecaster.series.from_csv``,
    mean-resampled to ``step`` (the server's resolution) when the file is finer; a coarser file keeps its own."""
    from forecaster.series import from_csv

    p = Path(path)
    if not p.is_file():
        raise ReplayError(f"trace file {str(p)!r} does not exist; expected a CSV with a header 'timestamp,count' "
                            f"or 'timestamp,qps' (optionally gzip'd, .csv.gz)")
    label = name or re.sub(r"\.csv$", "", p.name[:-3] if p.name.endswith(".gz") else p.name)
    try:
        if p.suffix == ".gz":
            with tempfile.TemporaryDirectory(prefix="forescale-") as d:
                tmp = Path(d) / "trace.csv"
                try:
                    with gzip.open(p, "rb") as src, open(tmp, "wb") as dst:
                        _copy_capped(src, dst, p)
                except (OSError, EOFError) as e:
                    raise ReplayError(f"{p}: not a readable gzip file ({e}); expected a gzip'd trace CSV") from None
                try:
                    refuse_several_series(tmp, p)
                    series, rep = from_csv(tmp)
                except ValueError as e:
                    raise ReplayError(str(e).replace(str(tmp), str(p))) from None
        else:
            refuse_several_series(p, p)
            series, rep = from_csv(p)
    except ReplayError:
        raise
    except ValueError as e:
        raise ReplayError(str(e)) from None
    if len(series) < 2 or not np.isfinite(series.y).any():
        raise ReplayError(f"{p}: no usable rows ({rep.message})")
    hygiene = rep.message
    if step is not None and series.step < step - 1e-9:
        from forecaster.series import resample

        k = step / series.step
        if abs(k - round(k)) > 1e-6:
            raise ReplayError(f"{p}: the file's interval {series.step:g} s does not divide --step {step:g} s; "
                              f"accepted: a --step that is a multiple of {series.step:g} s")
        native = series.step
        series = resample(series, step)
        hygiene = f"{hygiene}; resampled from {native:g} s to {step:g} s (mean)"
    return Trace(label, series, hygiene, str(p), counts=True)


def refuse_several_series(path: Path, shown: Path) -> None:
    """A CSV with one row per (timestamp, series) holds a fleet: refuse it rather than collapse it into one
    series. Checked by repeated timestamps; the message names the other columns, which tune's --series-column
    takes."""
    import csv

    with open(path, newline="", encoding="utf-8-sig", errors="replace") as fh:
        reader = csv.reader(fh)
        header = next(reader, None) or []
        cols = [h.strip().lower() for h in header]
        if "timestamp" not in cols:
            return  # from_csv names what is wrong with the header
        it = cols.index("timestamp")
        first_line: dict[str, int] = {}
        for lineno, row in enumerate(reader, start=2):
            if len(row) <= it or not row[it].strip():
                continue
            ts = row[it].strip()
            if ts in first_line:
                others = [h.strip() for h in header if h.strip().lower() not in ("timestamp", "count", "qps")]
                which = (f"columns {', '.join(map(repr, others))} look like series labels" if others
                         else "no column tells the series apart")
                raise ReplayError(
                    f"{shown}: line {lineno} repeats the timestamp of line {first_line[ts]} ({ts[:40]!r}): the file "
                    f"holds several series ({which}); accepted: one row per timestamp (one series), or "
                    "`forescale tune TRACE --series-column COLUMN` to tune each series of a fleet")
            first_line[ts] = lineno


MAX_CSV_BYTES = 256 << 20  # a trace CSV decompressed (a 1-s trace of 58 days is ~100 MB)


def _copy_capped(src, dst, p: Path) -> None:
    """Decompress ``src`` into ``dst``; ReplayError past ``MAX_CSV_BYTES`` (a gzip bomb stops at the cap)."""
    total = 0
    while chunk := src.read(1 << 20):
        total += len(chunk)
        if total > MAX_CSV_BYTES:
            raise ReplayError(f"{p}: decompresses to more than {MAX_CSV_BYTES >> 20} MiB; accepted: a trace CSV of "
                              f"at most {MAX_CSV_BYTES >> 20} MiB uncompressed (resample it, e.g. per minute)")
        dst.write(chunk)


def check_length(trace: Trace, *, lead_seconds: float, span_seconds: float, history_seconds: float) -> None:
    """Refuse a trace too short for a meaningful replay, naming what it covers and what is needed."""
    step = trace.series.step
    n = len(trace.series)
    covered = n * step
    hist = MIN_HISTORY_POINTS * step
    span = min(span_seconds, MIN_SPAN_SECONDS)
    need = hist + lead_seconds + span
    if covered < need:
        raise ReplayError(
            f"the trace covers {covered:g} s ({n} points at {step:g} s); a replay needs at least {need:g} s: "
            f"{MIN_HISTORY_POINTS} points of history ({hist:g} s) + the lead L ({lead_seconds:g} s) + {span:g} s "
            f"simulated (asked: --span {span_seconds:g} s after --history {history_seconds:g} s; a shorter history "
            f"is used when the trace has less). Give a longer trace")


def bundled_trace() -> Trace:
    """The packaged real trace (WorldCup98, 28 days at 1 min) with its attribution."""
    t = load_csv(BUNDLED_TRACE, name="worldcup98 (bundled: 1998-06-03 .. 1998-06-30, 1 min)")
    return replace(t, attribution=('M. Arlitt and T. Jin, "1998 World Cup Web Site Access Logs", August 1998 '
                                   f'(notice: {BUNDLED_DIR / "ATTRIBUTION.txt"})'))


def load_prometheus(url: str, query: str, start: float, end: float, step: float) -> Trace:
    """A range query through the server's own client (split under 11,000 points per request)."""
    from ..prom import PrometheusClient
    from ..spec import PrometheusTarget

    if end <= start:
        raise ReplayError(f"--end must be after --start (got {start:g} .. {end:g} epoch s)")
    client = PrometheusClient(PrometheusTarget(url.rstrip("/"), timeout_seconds=60.0))
    try:
        series, rep = client.range_series(query, start, end, step)
    except ValueError as e:  # malformed samples
        raise ReplayError(f"Prometheus query {query!r}: {e}") from None
    except Exception as e:  # network, HTTP, PromQL errors, no or several series: one clear line
        raise ReplayError(f"Prometheus range query failed at {url}: {type(e).__name__}: {e}") from None
    return Trace(f"prometheus: {query}", series, rep.message, url)


def parse_time(text: str, *, now: float) -> float:
    """ISO-8601 (naive = UTC), epoch seconds, ``now`` or ``now-14d``."""
    s = text.strip()
    m = re.fullmatch(r"now(?:\s*-\s*(.+))?", s)
    if m:
        return now - (parse_duration(m.group(1)) if m.group(1) else 0.0)
    try:
        return float(s)
    except ValueError:
        pass
    dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()

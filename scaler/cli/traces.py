"""Where traffic comes from: a trace CSV, the bundled real trace, or a Prometheus range query."""

from __future__ import annotations

import gzip
import os
import re
import tempfile
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import numpy as np

from ..deadband import MILLI_MAX
from ..replay.engine import ReplayError, Trace
from ..replay.scenario import MAX_RATE_RANGE
from ..spec import parse_duration
from ..tokens import unit_refusal

BUNDLED_DIR = Path(__file__).resolve().parent.parent / "data" / "worldcup98"
BUNDLED_TRACE = BUNDLED_DIR / "per_minute.csv.gz"


MAX_RATE = MILLI_MAX / 1000.0  # req/s: KEDA's milli-quantities (deadband.to_milli) are exact below it (~1.1e12)


def check_values(series, where: str) -> None:
    """Refuse a series the replay cannot replay right, naming what it holds and what is accepted: no finite,
    non-negative value (all NaN, Inf or negative: a table of zeros said nothing), a rate at or above
    ``MAX_RATE`` req/s, or one more than ``MAX_RATE_RANGE`` times the median (a unit error or a corrupt sample).
    The answer then never depends on the unit: within these bounds, a trace and its qpsPerReplica scaled
    together replay the same."""
    y = np.asarray(series.y, dtype=np.float64)
    ok = np.isfinite(y) & (y >= 0)
    if not ok.any():
        nan, inf = int(np.isnan(y).sum()), int(np.isinf(y).sum())
        raise ReplayError(f"{where}: no usable value in {len(y)} points ({nan} NaN, {inf} infinite, "
                          f"{int((y < 0).sum())} negative); accepted: request rates >= 0 (req/s) or counts per "
                          "interval, a gap left empty")
    top = int(np.argmax(np.where(ok, y, -1.0)))
    when = datetime.fromtimestamp(float(series.t[top]), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if y[top] >= MAX_RATE:
        raise ReplayError(f"{where}: {y[top]:.3g} req/s at {when}: at or above {MAX_RATE:.3g} req/s KEDA's "
                          "milli-quantities are not exact; accepted: rates below it (a trace in another unit, "
                          "e.g. per minute instead of per millisecond, or without the bad sample)")
    positive = y[ok & (y > 0)]
    median = float(np.median(positive)) if len(positive) else 0.0
    if median > 0 and y[top] > MAX_RATE_RANGE * median:
        raise ReplayError(f"{where}: {y[top]:.3g} req/s at {when} is {y[top] / median:.2g} times the median rate "
                          f"{median:.3g}: a corrupt sample or a unit error; accepted: values within "
                          f"{MAX_RATE_RANGE:.0e} times the median (remove or fix that sample)")


MIN_HISTORY_POINTS = 30  # the newest-points models re-predict from the last 30 points, as the server does
MIN_SPAN_SECONDS = 3600.0  # the shortest simulated span worth a table


def load_csv(path: str | os.PathLike, *, name: str | None = None, step: float | None = None) -> Trace:
    """A trace CSV (``timestamp,count`` or ``timestamp,qps``; ``.gz`` too) via ``forecaster.tracecsv.from_csv``,
    mean-resampled to ``step`` (the server's resolution) when the file is finer; a coarser file keeps its own."""
    from forecaster.tracecsv import from_csv

    p = Path(path)
    label = name or re.sub(r"\.csv$", "", p.name[:-3] if p.name.endswith(".gz") else p.name)
    with text_file(p, TRACE_FORM, "trace file") as src:
        try:
            refuse_several_series(src, p)
            series, rep = from_csv(src)
            tokens = token_columns(src, series)
        except ReplayError:
            raise
        except ValueError as e:
            raise ReplayError(str(e).replace(str(src), str(p))) from None
    if len(series) >= 2 and series.step < 1.0 and SERIAL_DAYS[0] <= series.t[0] and series.t[-1] <= SERIAL_DAYS[1]:
        day = datetime.fromtimestamp((series.t[0] - EXCEL_EPOCH_SERIAL) * 86400.0, tz=timezone.utc)
        raise ReplayError(f"{p}: the timestamps ({series.t[0]:.6f} .. {series.t[-1]:.6f}, {series.step:g} apart) "
                          f"look like spreadsheet serial days ({series.t[0]:.0f} = {day:%Y-%m-%d}), not epoch "
                          "seconds of 1970; accepted: epoch seconds, epoch milliseconds or ISO-8601 times; convert "
                          f"a serial day with (serial - {EXCEL_EPOCH_SERIAL}) x 86400, or format the column as "
                          "ISO-8601 before saving the CSV")
    if len(series) < 2 or not np.isfinite(series.y).any():
        raise ReplayError(f"{p}: no usable rows ({rep.message})")
    check_values(series, str(p))
    hygiene = rep.message
    if step is not None and series.step < step - 1e-9:
        from forecaster.series import resample

        k = step / series.step
        if abs(k - round(k)) > 1e-6:
            raise ReplayError(f"{p}: the file's interval {series.step:g} s does not divide --step {step:g} s; "
                              f"accepted: a --step that is a multiple of {series.step:g} s")
        native = series.step
        series = resample(series, step)
        tokens = tokens if tokens is None else tuple(resample(k, step) for k in tokens)
        hygiene = f"{hygiene}; resampled from {native:g} s to {step:g} s (mean)"
    if tokens is None:
        return Trace(label, series, hygiene, str(p), counts=True)
    if why := unit_refusal(series.y, tokens[1].y, f"{p}: column 'output_tokens'"):
        raise ReplayError(why)
    return Trace(label, series, hygiene, str(p), counts=True, input_tokens=tokens[0].y, output_tokens=tokens[1].y)


TOKEN_COLUMNS = ("input_tokens", "output_tokens")  # sums per interval, next to count (a trace with shape)


def token_columns(path: Path, series) -> tuple | None:
    """The CSV's ``input_tokens`` and ``output_tokens`` as tokens/s on ``series``' grid, None without them.

    Both or neither (one alone is refused); an empty cell is a gap, as in ``count``; a negative one is dropped
    (the hygiene of ``forecaster.series``), never read as 0.
    """
    import csv

    from forecaster.tracecsv import from_csv

    with open(path, newline="", encoding="utf-8-sig", errors="replace") as fh:
        header = [h.strip().lower() for h in next(csv.reader(fh), None) or []]
    have = [c for c in TOKEN_COLUMNS if c in header]
    if not have:
        return None
    if len(have) == 1:
        raise ValueError(f"{path}: line 1: a {have[0]!r} column without {(set(TOKEN_COLUMNS) - set(have)).pop()!r};"
                         f" accepted: both token columns ({', '.join(TOKEN_COLUMNS)}, sums per interval) or neither")
    out = tuple(from_csv(path, column=c)[0] for c in TOKEN_COLUMNS)
    if any(len(k) != len(series) or not np.array_equal(k.t, series.t) for k in out):
        raise ValueError(f"{path}: the token columns and 'count' do not give the same time grid; accepted: one "
                         "value in each of count, input_tokens and output_tokens per row (empty for a gap)")
    return out


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


EXCEL_EPOCH_SERIAL = 25569  # 1970-01-01 as a spreadsheet serial day (Excel, LibreOffice, Google Sheets)
SERIAL_DAYS = (1.0, 2958466.0)  # serial days 1900-01-01 .. 9999-12-31: as epoch seconds, the first 34 days of 1970
GZIP_MAGIC = b"\x1f\x8b"
BOMS = ((b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))  # UTF-16 LE and BE; a UTF-8 BOM is read as is
TEXT_FORM = "UTF-8 text (or UTF-16 with a byte-order mark), gzip'd or not"


TRACE_FORM = "a CSV with a header 'timestamp,count' or 'timestamp,qps' and one row per interval (optionally gzip'd)"


@contextmanager
def text_file(p: Path, expected: str, what: str = "file") -> Iterator[Path]:
    """The one way the CLI opens a CSV it is given (a trace, a fleet's ``--series-column`` CSV, ``--trigger-series``,
    ``--cold-starts``): refused naming the file (``what``) and ``expected`` when it is missing, not a regular file
    (a directory, ``/dev/null``, a FIFO) or empty; gzip and UTF-16 read by their bytes whatever the name, a byte
    that is not UTF-8 named with its line (``plain_text``). Yields a plain UTF-8 file to read (a temporary copy
    when converted). ReplayError."""
    if not p.exists():
        raise ReplayError(f"{what} {str(p)!r} does not exist; expected {expected}")
    if not p.is_file():
        raise ReplayError(f"{what} {str(p)!r} is not a regular file (a directory, device or FIFO); expected {expected}")
    if p.stat().st_size == 0:
        raise ReplayError(f"{what} {str(p)!r} is empty; expected {expected}")
    with tempfile.TemporaryDirectory(prefix="forescale-") as d:
        yield plain_text(p, Path(d))


def plain_text(p: Path, d: Path) -> Path:
    """``p`` as a UTF-8 file to read: gunzipped into ``d`` when it is gzip (its magic bytes, whatever its name),
    UTF-16 with a byte-order mark re-encoded; ReplayError naming the first line that is not UTF-8."""
    src = p
    with open(p, "rb") as fh:
        head = fh.read(4)
    if head.startswith(GZIP_MAGIC) or p.suffix == ".gz":
        src = d / "trace.csv"
        try:
            with gzip.open(p, "rb") as fh, open(src, "wb") as dst:
                _copy_capped(fh, dst, p)
        except (OSError, EOFError) as e:
            raise ReplayError(f"{p}: not a readable gzip file ({e}); expected a gzip'd trace CSV") from None
        with open(src, "rb") as fh:
            head = fh.read(4)
    for bom, enc in BOMS:
        if head.startswith(bom):
            if src.stat().st_size > MAX_CSV_BYTES:
                raise ReplayError(f"{p}: larger than {MAX_CSV_BYTES >> 20} MiB of UTF-16; accepted: at most that")
            try:
                text = src.read_bytes().decode(enc)
            except UnicodeDecodeError as e:
                raise ReplayError(f"{p}: starts with a UTF-16 byte-order mark but byte {e.start} is not UTF-16; "
                                  f"accepted: {TEXT_FORM}") from None
            out = d / "trace-utf8.csv"
            out.write_text(text, encoding="utf-8")
            return out
    _check_utf8(src, p)
    return src


def _check_utf8(src: Path, p: Path) -> None:
    """ReplayError naming the first line of ``src`` (shown as ``p``) that is not UTF-8, and how to convert it."""
    import codecs

    dec, line, offset = codecs.getincrementaldecoder("utf-8")(), 1, 0
    with open(src, "rb") as fh:
        while chunk := fh.read(1 << 20):
            try:
                dec.decode(chunk)
            except UnicodeDecodeError as e:
                bad = e.start  # within what the decoder held: its buffered tail and this chunk
                held = len(e.object) - len(chunk)
                at = max(bad - held, 0)
                line += chunk.count(b"\n", 0, at)
                raise ReplayError(f"{p}: line {line} is not UTF-8 (byte 0x{e.object[bad]:02x} at byte "
                                  f"{offset + at}); accepted: {TEXT_FORM}; convert it, e.g. `iconv -f latin1 -t "
                                  "utf-8 FILE`") from None
            line += chunk.count(b"\n")
            offset += len(chunk)


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
    from ..promerror import PromError, redact_url, short
    from ..spec import PrometheusTarget

    if end <= start:
        raise ReplayError(f"--end must be after --start (got {start:g} .. {end:g} epoch s)")
    client = PrometheusClient(PrometheusTarget(url.rstrip("/"), timeout_seconds=60.0))
    try:
        series, rep = client.range_series(query, start, end, step)
    except ValueError as e:  # malformed samples
        raise ReplayError(f"Prometheus query {short(query)!r}: {short(str(e))}") from None
    except Exception as e:  # network, HTTP, PromQL errors, no or several series: one clear line, no secret
        said = f"; Prometheus said: {e.detail}" if isinstance(e, PromError) and e.detail else ""
        raise ReplayError(f"Prometheus range query failed at {redact_url(url)}: {type(e).__name__}: "
                          f"{short(str(e), 500)}{said}") from None
    check_values(series, f"Prometheus query {short(query)!r}")
    return Trace(f"prometheus: {query}", series, rep.message, redact_url(url))


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

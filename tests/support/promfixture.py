"""A real Prometheus for tests: backfill synthetic or real-trace series, start
``prometheus`` on 127.0.0.1, query it, stop it.

Nothing here is mocked: series are written as OpenMetrics text, turned into
TSDB blocks by ``promtool tsdb create-blocks-from openmetrics``, and served by
the real ``prometheus`` binary (Debian package 2.42; ``tests/system-deps.sh``
installs it).

Typical use::

    trace = trace_to_samples(CSV, end_at=now - 10, days=14)
    flat_t = sample_times(now - 2 * 86400, now - 10)
    series = [
        trace.series("forescale_requests_total", {"job": "llm"}),
        SeriesSpec("forescale_flat_requests_total", {"job": "flat"}, "counter",
                   flat_t, counter_from_rate(flat_t, 5.0)),
    ]
    with PrometheusServer(series) as prom:
        prom.query_value("rate(forescale_requests_total[2m])", time=now)
        trace.expected_rate(now, 120)        # what that query must return

Facts established against promtool/prometheus 2.42 (and what follows)
---------------------------------------------------------------------

promtool's OpenMetrics import is *lenient*, so the writer is strict:

* The file must end with ``# EOF`` (else: "data does not end with # EOF"),
  every sample needs a timestamp, in **seconds** (float allowed; ms are only
  kept to the millisecond). A timestamp written in milliseconds is silently
  read as seconds (a date ~50 000 years ahead).
* Samples of one series that are out of order or duplicate (also after
  rounding to ms) are **silently dropped**, exit code 0. ``write_openmetrics``
  therefore rejects anything not strictly increasing.
* The ``_total`` suffix is not enforced by 2.42 (a counter sample named
  ``foo`` is stored as ``foo``); we write proper OpenMetrics anyway:
  ``# TYPE foo counter`` then ``foo_total{...} v ts``. A counter's PromQL name
  is therefore always ``<family>_total``.
* ``--max-block-duration`` takes a Go duration (``720h``; ``30d`` is
  refused). Default 2h would give one block per 2 h (168 blocks for 14 days,
  and promtool re-reads the whole input file once per block range); we use
  720h: one or two blocks, backfill of ~130k samples in about a second.

Prometheus:

* Retention must be long (``--storage.tsdb.retention.time=100y``), else
  blocks older than 15 days (relative to the newest block) are deleted.
* Recent and even future samples are accepted by promtool and served by
  Prometheus: the head is empty because the config scrapes nothing
  (``scrape_configs: []``), so nothing conflicts with the head range. (Were it
  scraping, head appends older than the newest block's max time would be
  rejected as out of bounds; that is why nothing is scraped.)
* Overlapping blocks (two backfills over the same time) load fine in 2.42
  (overlap support is on by default since 2.39); a warning is logged and
  queries merge them. One backfill per server is what this module does.
* Instant selectors see the last sample within the lookback delta (5 min):
  after the data ends, ``x`` keeps its last value for 5 min, then vanishes
  (no staleness markers are backfilled).
* ``rate(x[w])`` at time t uses the samples with ts in ``[t-w, t]`` (both
  ends inclusive in 2.42) and extrapolates to the window edges only when the
  first/last sample is within 1.1 x the mean sample spacing of the edge;
  otherwise by half a spacing. Consequences with 15 s samples ending at E:
  exact for t in [E, E + 16.5 s); biased low from there (e.g. x0.81 at
  E + 30 s with w=2m); empty once t > E + w - 15 s (fewer than 2 samples
  in the window).
  ``prom_rate`` reproduces this computation exactly, and the fixtures end the
  data ``END_OFFSET_S`` (10 s) before their reference time ``now`` so that a
  query at ``time=now`` behaves like a live Prometheus whose last scrape was
  10 s ago. **Query at an explicit ``time=``** (``fixture.now``): the wall
  clock moves on, and 2 minutes after the session started ``rate()`` at the
  wall-clock time is empty. For code that insists on the wall clock, backfill
  data that extends into the future (``end_at = now + 3600``): future
  samples are invisible to queries at earlier times, so the series looks
  live for an hour.
"""

from __future__ import annotations

import atexit
import csv
import ctypes
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time as _time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import requests

__all__ = [
    "END_OFFSET_S",
    "PrometheusNotInstalled",
    "PrometheusQueryError",
    "PrometheusServer",
    "PrometheusStartError",
    "SeriesSpec",
    "TraceSamples",
    "counter_from_rate",
    "find_binaries",
    "find_free_port",
    "prom_rate",
    "sample_times",
    "trace_to_samples",
    "write_openmetrics",
]

#: The fixtures' data ends this many seconds before their reference time
#: ``now``: less than 1.1 x the 15 s scrape interval, so ``rate()`` at ``now``
#: is not biased by Prometheus' extrapolation rule (see module docstring).
END_OFFSET_S = 10

SYSTEM_DEPS_HINT = (
    "the real-Prometheus tests need the `prometheus` and `promtool` binaries "
    "(Debian package `prometheus`); run `bash tests/system-deps.sh` (as CI does "
    "before pytest, or `make test`)"
)

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class PrometheusNotInstalled(RuntimeError):
    """prometheus or promtool is not on PATH."""


class PrometheusStartError(RuntimeError):
    """Backfill or start-up failed; the message carries the tool's output."""


class PrometheusQueryError(RuntimeError):
    """The HTTP API answered with an error."""


# --------------------------------------------------------------------------
# series


def _ms_round(ts) -> np.ndarray:
    """Seconds -> seconds rounded to the millisecond Prometheus keeps."""
    return np.round(np.asarray(ts, dtype=float) * 1000.0) / 1000.0


@dataclass
class SeriesSpec:
    """One series to backfill.

    ``name`` is the PromQL name. For counters ``foo_total`` and ``foo`` both
    mean the family ``foo`` whose samples are ``foo_total`` (query it as
    ``foo_total``). ``timestamps`` are epoch seconds (rounded to ms here, as
    Prometheus stores them), strictly increasing; ``values`` the sample values.
    """

    name: str
    labels: Mapping[str, str]
    type: str  # "counter" | "gauge"
    timestamps: Sequence[float]
    values: Sequence[float]
    help: str = ""

    def __post_init__(self) -> None:
        if self.type not in ("counter", "gauge"):
            raise ValueError(f"series type must be 'counter' or 'gauge', got {self.type!r}")
        if not _METRIC_NAME.match(self.name):
            raise ValueError(f"invalid metric name {self.name!r}")
        self.labels = dict(self.labels)
        for k, v in self.labels.items():
            if not _LABEL_NAME.match(k) or k.startswith("__"):
                raise ValueError(f"invalid label name {k!r} in series {self.name!r}")
            if not isinstance(v, str):
                raise ValueError(f"label {k}={v!r} of series {self.name!r} is not a string")
        self.timestamps = _ms_round(self.timestamps)
        self.values = np.asarray(self.values, dtype=float)
        if self.timestamps.ndim != 1 or self.timestamps.shape != self.values.shape:
            raise ValueError(
                f"series {self.name!r}: timestamps and values must be 1-d arrays of one length, "
                f"got {self.timestamps.shape} and {self.values.shape}"
            )
        if len(self.timestamps) == 0:
            raise ValueError(f"series {self.name!r} has no samples")
        if not np.all(np.isfinite(self.timestamps)):
            raise ValueError(f"series {self.name!r}: non-finite timestamp")
        bad = np.nonzero(np.diff(self.timestamps) <= 0)[0]
        if len(bad):
            i = int(bad[0])
            raise ValueError(
                f"series {self.name!r}: timestamps must be strictly increasing (after rounding "
                f"to ms; promtool silently drops the others): sample {i + 1} at "
                f"{self.timestamps[i + 1]!r} follows {self.timestamps[i]!r}"
            )

    @property
    def family(self) -> str:
        if self.type == "counter" and self.name.endswith("_total"):
            return self.name[: -len("_total")]
        return self.name

    @property
    def sample_name(self) -> str:
        """The name PromQL knows it by."""
        return self.family + "_total" if self.type == "counter" else self.name

    @property
    def selector(self) -> str:
        """A PromQL selector for exactly this series, e.g. ``foo_total{job="x"}``."""
        inner = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(self.labels.items()))
        return f"{self.sample_name}{{{inner}}}"

    @property
    def start(self) -> float:
        return float(self.timestamps[0])

    @property
    def end(self) -> float:
        return float(self.timestamps[-1])

    def rate(self, t: float, window: float = 120.0) -> float | None:
        """What Prometheus' ``rate(<this>[window])`` returns at time ``t``."""
        return prom_rate(self.timestamps, self.values, t, window)

    def value_at(self, t: float, lookback: float = 300.0) -> float | None:
        """What the instant selector returns at ``t`` (lookback delta 5 min)."""
        t = float(_ms_round(t))
        i = int(np.searchsorted(self.timestamps, t, side="right")) - 1
        if i < 0 or self.timestamps[i] <= t - lookback:
            return None
        return float(self.values[i])


def sample_times(start: float, end: float, step: float = 15.0) -> np.ndarray:
    """Scrape times ``end, end-step, ...`` down to ``>= start``, ascending
    (aligned on ``end``, so the last sample is exactly ``end``)."""
    if step <= 0:
        raise ValueError("step must be > 0")
    n = int(math.floor((end - start) / step + 1e-9))
    return _ms_round(end - step * np.arange(n, -1, -1))


def counter_from_rate(t, qps, start: float = 0.0) -> np.ndarray:
    """Cumulative counter values at sample times ``t`` for a request rate.

    ``qps`` is a number, an array as long as ``t`` or a callable of ``t``;
    ``qps[i]`` is the rate during ``(t[i-1], t[i]]`` (``qps[0]`` is unused:
    the counter starts at ``start``). Then ``rate(x[w])`` at a sample time
    ``t[i]`` with the window's first sample at ``t[j]`` is the time-weighted
    mean of ``qps[j+1..i]`` — for a constant qps, the qps itself.
    """
    t = np.asarray(t, dtype=float)
    if callable(qps):
        qps = qps(t)
    q = np.broadcast_to(np.asarray(qps, dtype=float), t.shape)
    if np.any(q[1:] < 0) or not np.all(np.isfinite(q[1:])):
        raise ValueError("qps must be finite and >= 0 (a counter only goes up)")
    inc = np.concatenate([[0.0], np.diff(t) * q[1:]])
    return start + np.cumsum(inc)


# --------------------------------------------------------------------------
# Prometheus' rate(), reproduced


def prom_rate(timestamps, values, t: float, window: float = 120.0) -> float | None:
    """Prometheus 2.42 ``rate(x[window])`` at time ``t`` over these samples
    (``extrapolatedRate`` in promql/functions.go: inclusive window
    ``[t-window, t]``, counter resets, extrapolation to the window edges when
    the first/last sample is within 1.1 x the mean spacing, never below a zero
    counter). ``None`` where Prometheus returns no sample."""
    ts = np.asarray(timestamps, dtype=float)
    vs = np.asarray(values, dtype=float)
    t_ms = round(float(t) * 1000)
    w_ms = round(float(window) * 1000)
    ts_ms = np.round(ts * 1000).astype(np.int64)
    lo = int(np.searchsorted(ts_ms, t_ms - w_ms, side="left"))
    hi = int(np.searchsorted(ts_ms, t_ms, side="right"))
    if hi - lo < 2:
        return None
    s_t, s_v = ts_ms[lo:hi], vs[lo:hi]
    result = float(s_v[-1] - s_v[0])
    drops = s_v[1:] < s_v[:-1]
    result += float(np.sum(s_v[:-1][drops]))
    to_start = (s_t[0] - (t_ms - w_ms)) / 1000.0
    to_end = (t_ms - s_t[-1]) / 1000.0
    sampled = (s_t[-1] - s_t[0]) / 1000.0
    avg = sampled / (len(s_t) - 1)
    if result > 0 and s_v[0] >= 0:
        to_zero = sampled * (s_v[0] / result)
        if to_zero < to_start:
            to_start = to_zero
    threshold = avg * 1.1
    extrapolate_to = sampled
    extrapolate_to += to_start if to_start < threshold else avg / 2
    extrapolate_to += to_end if to_end < threshold else avg / 2
    return result * (extrapolate_to / sampled) / (w_ms / 1000.0)


# --------------------------------------------------------------------------
# real traces


@dataclass
class TraceSamples:
    """A request trace shifted in time, and the scrape-like counter samples
    made from it.

    The trace is a sequence of intervals ``[interval_starts[i],
    interval_starts[i] + interval)`` each with ``counts[i]`` requests (NaN:
    a gap, no data); the counter grows linearly inside each interval, so its
    slope is the interval's qps. Samples are taken every ``scrape_interval``
    seconds, the last one exactly at ``end_at`` (= end of the last interval).

    Expected values for tests:

    * ``qps_at(t)``: the trace's qps in the interval holding ``t``.
    * ``mean_qps(t0, t1)``: the exact mean qps over ``[t0, t1]``.
    * ``expected_rate(t, window)``: exactly what Prometheus' ``rate(x[window])``
      returns at ``t`` (= ``mean_qps`` over the span of the samples in the
      window when the window is fully covered; at a sample time t with
      ``window`` a multiple of the scrape interval, ``mean_qps(t - window, t)``).
    """

    interval_starts: np.ndarray
    counts: np.ndarray
    interval: float
    scrape_interval: float
    timestamps: np.ndarray
    values: np.ndarray
    source: str = ""
    _bounds: np.ndarray = field(init=False, repr=False)
    _cum: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._bounds = np.concatenate([self.interval_starts, [self.interval_starts[-1] + self.interval]])
        self._cum = np.concatenate([[0.0], np.cumsum(np.nan_to_num(self.counts, nan=0.0))])

    @property
    def qps(self) -> np.ndarray:
        """Per-interval qps (NaN in gaps)."""
        return self.counts / self.interval

    @property
    def start(self) -> float:
        return float(self._bounds[0])

    @property
    def end_at(self) -> float:
        return float(self._bounds[-1])

    def counter_at(self, t):
        """The cumulative request count at ``t`` (clamped to the trace's span)."""
        return np.interp(t, self._bounds, self._cum)

    def qps_at(self, t: float) -> float:
        i = int(np.searchsorted(self._bounds, t, side="right")) - 1
        if i < 0 or i >= len(self.counts):
            return float("nan")
        return float(self.counts[i] / self.interval)

    def mean_qps(self, t0: float, t1: float) -> float:
        if not t1 > t0:
            raise ValueError("need t1 > t0")
        return float((self.counter_at(t1) - self.counter_at(t0)) / (t1 - t0))

    def expected_rate(self, t: float, window: float = 120.0) -> float | None:
        return prom_rate(self.timestamps, self.values, t, window)

    def series(self, name: str, labels: Mapping[str, str], help: str = "") -> SeriesSpec:
        """The counter series to backfill."""
        return SeriesSpec(
            name, labels, "counter", self.timestamps, self.values,
            help=help or f"requests, replayed from {self.source or 'a trace'}",
        )


def _parse_ts(s: str) -> float:
    d = datetime.fromisoformat(s.strip().replace("Z", "+00:00"))
    if d.tzinfo is None:
        d = d.replace(tzinfo=timezone.utc)
    return d.timestamp()


def trace_to_samples(
    csv_path: str | os.PathLike,
    *,
    end_at: float,
    scrape_interval: float = 15.0,
    days: float | None = None,
    interval: float | None = None,
) -> TraceSamples:
    """Read a ``timestamp,count`` trace (count = requests in the interval that
    starts at timestamp; empty count or missing rows = gap), keep its last
    ``days`` days, shift it so that its last interval ends at ``end_at``, and
    sample a counter of it every ``scrape_interval`` s (last sample at
    ``end_at``). ``interval`` defaults to the trace's most common step. No
    samples are emitted inside gaps; the counter does not grow across them."""
    rows: list[tuple[float, float]] = []
    with open(csv_path, newline="") as f:
        for r in csv.DictReader(f):
            c = (r.get("count") or "").strip()
            rows.append((_parse_ts(r["timestamp"]), float(c) if c else math.nan))
    if len(rows) < 2:
        raise ValueError(f"{csv_path}: need at least 2 rows")
    ts = np.array([r[0] for r in rows])
    cnt = np.array([r[1] for r in rows])
    order = np.argsort(ts, kind="stable")
    ts, cnt = ts[order], cnt[order]
    if interval is None:
        d, n = np.unique(np.diff(ts), return_counts=True)
        interval = float(d[np.argmax(n)])
    if interval <= 0:
        raise ValueError(f"{csv_path}: duplicate timestamps")
    idx = np.round((ts - ts[0]) / interval)
    if np.any(np.abs((ts - ts[0]) / interval - idx) > 1e-6) or len(np.unique(idx)) != len(idx):
        raise ValueError(f"{csv_path}: timestamps are not on a regular {interval:g} s grid")
    grid = np.full(int(idx[-1]) + 1, np.nan)
    grid[idx.astype(np.int64)] = cnt
    if days is not None:
        keep = int(round(days * 86400 / interval))
        if keep < 1:
            raise ValueError(f"days={days} is shorter than one {interval:g} s interval")
        grid = grid[-keep:]
    end_at = float(_ms_round(end_at))
    starts = end_at - interval * np.arange(len(grid), 0, -1)
    bounds = np.concatenate([starts, [end_at]])
    cum = np.concatenate([[0.0], np.cumsum(np.nan_to_num(grid, nan=0.0))])
    t = sample_times(starts[0], end_at, scrape_interval)
    # a sample is kept when it lies in (or on the edge of) a known interval
    i_right = np.clip(np.searchsorted(bounds, t, side="right") - 1, 0, len(grid) - 1)
    i_left = np.clip(np.searchsorted(bounds, t, side="left") - 1, 0, len(grid) - 1)
    known = ~np.isnan(grid)
    ok = known[i_right] | known[i_left]
    t = t[ok]
    values = np.interp(t, bounds, cum)
    return TraceSamples(
        interval_starts=starts, counts=grid, interval=float(interval),
        scrape_interval=float(scrape_interval), timestamps=t, values=values,
        source=str(csv_path),
    )


# --------------------------------------------------------------------------
# OpenMetrics


def _escape_label(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")


def _fmt_value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


def _fmt_ts(ts: float) -> str:
    ms = round(ts * 1000)
    sec, frac = divmod(ms, 1000)
    return f"{sec}.{frac:03d}" if frac else str(sec)


def write_openmetrics(path: str | os.PathLike, series: Iterable[SeriesSpec]) -> Path:
    """Write the series as OpenMetrics text for ``promtool tsdb
    create-blocks-from openmetrics``: one ``# HELP``/``# TYPE`` block per
    family (series of one family grouped together), counter samples named
    ``<family>_total``, each series' samples in time order, timestamps in
    seconds, ``# EOF`` last."""
    families: dict[str, list[SeriesSpec]] = {}
    for s in series:
        fam = families.setdefault(s.family, [])
        if fam and fam[0].type != s.type:
            raise ValueError(f"family {s.family!r} given as both {fam[0].type} and {s.type}")
        if any(o.labels == s.labels for o in fam):
            raise ValueError(f"series {s.selector} given twice")
        fam.append(s)
    if not families:
        raise ValueError("no series to write")
    path = Path(path)
    with open(path, "w", encoding="utf-8") as f:
        for fam_name, members in families.items():
            help_text = next((m.help for m in members if m.help), fam_name)
            f.write(f"# HELP {fam_name} {_escape_help(help_text)}\n")
            f.write(f"# TYPE {fam_name} {members[0].type}\n")
            for s in members:
                if s.labels:
                    lab = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(s.labels.items()))
                    prefix = f"{s.sample_name}{{{lab}}} "
                else:
                    prefix = f"{s.sample_name} "
                f.writelines(
                    f"{prefix}{_fmt_value(v)} {_fmt_ts(t)}\n"
                    for t, v in zip(s.timestamps.tolist(), s.values.tolist())
                )
        f.write("# EOF\n")
    return path


# --------------------------------------------------------------------------
# the server


def find_binaries() -> tuple[str, str]:
    """Paths of ``prometheus`` and ``promtool``; PrometheusNotInstalled otherwise."""
    prom, tool = shutil.which("prometheus"), shutil.which("promtool")
    missing = [n for n, p in (("prometheus", prom), ("promtool", tool)) if p is None]
    if missing:
        raise PrometheusNotInstalled(f"{' and '.join(missing)} not found on PATH: {SYSTEM_DEPS_HINT}")
    return prom, tool  # type: ignore[return-value]


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Child side of Popen: get SIGTERM when the test process dies, so a
    crashed or killed pytest leaves no prometheus behind."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


_CONFIG = """\
# forescale test Prometheus: serves backfilled blocks only, scrapes nothing
global:
  scrape_interval: 15s
  evaluation_interval: 15s
scrape_configs: []
"""


class PrometheusServer:
    """A real Prometheus serving backfilled series on 127.0.0.1.

    ``PrometheusServer(series).start()`` (or ``with PrometheusServer(series)
    as prom:``) writes the series as OpenMetrics, backfills them with promtool
    into a fresh temporary directory, starts ``prometheus`` on a free port and
    waits for ``/-/ready``. ``stop()`` terminates it and removes the directory.
    Several servers with different data can run at once.

    Attributes after start: ``url``, ``port``, ``pid``, ``process``,
    ``workdir``, ``series``, ``session``, ``timings`` (``write_s``,
    ``backfill_s``, ``start_s``, ``total_s``). ``extra_args`` go to prometheus
    (e.g. ``--web.config.file=...``; override ``url`` in a subclass for https).
    """

    def __init__(
        self,
        series: Iterable[SeriesSpec],
        *,
        port: int | None = None,
        base_dir: str | os.PathLike | None = None,
        ready_timeout: float = 60.0,
        max_block_duration: str = "720h",
        extra_args: Sequence[str] = (),
        keep_workdir: bool = False,
    ) -> None:
        self.series = list(series)
        self.host = "127.0.0.1"
        self.port = port
        self._fixed_port = port is not None
        self.base_dir = base_dir
        self.ready_timeout = ready_timeout
        self.max_block_duration = max_block_duration
        self.extra_args = list(extra_args)
        self.keep_workdir = keep_workdir
        self.process: subprocess.Popen | None = None
        self.workdir: Path | None = None
        self.timings: dict[str, float] = {}
        self.stopped_pid: int | None = None
        self._log = None
        self._session = requests.Session()
        self._lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("server not started")
        return f"http://{self.host}:{self.port}"

    @property
    def session(self) -> requests.Session:
        """The requests session used for readiness and queries: set ``auth``,
        ``verify``, ``cert`` on it before ``start()`` for a Prometheus started
        with ``--web.config.file`` (basic auth, TLS)."""
        return self._session

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> PrometheusServer:
        if self.process is not None:
            raise RuntimeError("already started")
        prom, tool = find_binaries()
        t0 = _time.monotonic()
        atexit.register(self.stop)
        self.workdir = Path(tempfile.mkdtemp(prefix="forescale-prom-", dir=self.base_dir))
        try:
            data = self.workdir / "data"
            om = write_openmetrics(self.workdir / "series.om", self.series)
            t1 = _time.monotonic()
            r = subprocess.run(
                [tool, "tsdb", "create-blocks-from", "openmetrics", "--quiet",
                 f"--max-block-duration={self.max_block_duration}", str(om), str(data)],
                capture_output=True, text=True, cwd=self.workdir, timeout=300,
            )
            if r.returncode != 0:
                raise PrometheusStartError(
                    f"promtool backfill failed (exit {r.returncode}):\n{r.stdout}{r.stderr}"
                )
            om.unlink()
            t2 = _time.monotonic()
            (self.workdir / "prometheus.yml").write_text(_CONFIG)
            for attempt in range(5):
                if not self._fixed_port:
                    self.port = find_free_port(self.host)
                if self._spawn(prom, data):
                    break
                if self._fixed_port or attempt == 4:
                    raise PrometheusStartError(
                        f"prometheus could not bind {self.host}:{self.port}:\n{self.log_tail()}"
                    )
            t3 = _time.monotonic()
        except BaseException:
            self.stop()
            raise
        self.timings = {
            "write_s": t1 - t0, "backfill_s": t2 - t1, "start_s": t3 - t2, "total_s": t3 - t0,
        }
        return self

    def _spawn(self, prom: str, data: Path) -> bool:
        """Start prometheus and wait until ready. False: the port was taken."""
        assert self.workdir is not None
        log_path = self.workdir / "prometheus.log"
        self._log = open(log_path, "ab")
        args = [
            prom,
            f"--config.file={self.workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={data}",
            "--storage.tsdb.retention.time=100y",
            f"--web.listen-address={self.host}:{self.port}",
            *self.extra_args,
        ]
        single_threaded = threading.active_count() == 1
        self.process = subprocess.Popen(
            args, cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, close_fds=True,
            # preexec_fn is only safe while no other thread runs
            preexec_fn=_die_with_parent if single_threaded else None,
        )
        deadline = _time.monotonic() + self.ready_timeout
        while True:
            rc = self.process.poll()
            if rc is not None:
                tail = self.log_tail()
                self._reap()
                if "address already in use" in tail:
                    return False
                raise PrometheusStartError(f"prometheus exited with {rc} before ready:\n{tail}")
            try:
                # short timeout: a foreign listener on a raced port never answers
                if self._session.get(f"{self.url}/-/ready", timeout=0.5).status_code == 200:
                    return True
            except requests.RequestException:
                pass
            if _time.monotonic() > deadline:
                tail = self.log_tail()
                raise PrometheusStartError(
                    f"prometheus not ready on {self.url} after {self.ready_timeout:g} s:\n{tail}"
                )
            _time.sleep(0.05)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of prometheus' log (stdout + stderr)."""
        if self.workdir is None:
            return ""
        p = self.workdir / "prometheus.log"
        try:
            return "\n".join(p.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _reap(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        self.process = None

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait, SIGKILL if needed; remove the temporary directory.
        Idempotent. Returns prometheus' exit status (None if never started)."""
        with self._lock:
            rc = None
            p = self.process
            if p is not None:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(timeout)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait(timeout)
                rc = p.returncode
                self.stopped_pid = p.pid
            self._reap()
            self._session.close()
            atexit.unregister(self.stop)
            if self.workdir is not None and not self.keep_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
            return rc

    # -- queries -------------------------------------------------------------

    def _api(self, path: str, params: dict) -> dict:
        try:
            r = self._session.get(f"{self.url}{path}", params=params, timeout=30)
        except requests.RequestException as e:
            raise PrometheusQueryError(f"GET {path} {params}: {e}") from e
        try:
            body = r.json()
        except ValueError:
            raise PrometheusQueryError(f"GET {path} {params}: HTTP {r.status_code}: {r.text[:500]}")
        if r.status_code != 200 or body.get("status") != "success":
            raise PrometheusQueryError(
                f"GET {path} {params}: HTTP {r.status_code}: "
                f"{body.get('errorType')}: {body.get('error')}"
            )
        return body["data"]

    def query(self, promql: str, time: float | None = None) -> list[dict]:
        """Instant query; the raw result list (``[{"metric": {...}, "value": [ts, "v"]}]``
        for a vector). ``time`` in epoch seconds; default: Prometheus' now."""
        params = {"query": promql}
        if time is not None:
            params["time"] = _fmt_ts(time)
        data = self._api("/api/v1/query", params)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def query_value(self, promql: str, time: float | None = None) -> float | None:
        """Instant query expected to give at most one series: its value as a
        float, None for an empty result; ValueError for several series."""
        res = self.query(promql, time)
        if not res:
            return None
        if len(res) > 1:
            raise ValueError(f"{promql!r} returned {len(res)} series, expected one")
        return float(res[0]["value"][1])

    def query_range(self, promql: str, start: float, end: float, step: float | str = 60) -> list[dict]:
        """Range query; the raw result matrix (``[{"metric": ..., "values": [[ts, "v"], ...]}]``)."""
        params = {
            "query": promql, "start": _fmt_ts(start), "end": _fmt_ts(end),
            "step": step if isinstance(step, str) else f"{step:g}",
        }
        return self._api("/api/v1/query_range", params)["result"]

    def flags(self) -> dict:
        """The server's command-line flags (``/api/v1/status/flags``)."""
        return self._api("/api/v1/status/flags", {})

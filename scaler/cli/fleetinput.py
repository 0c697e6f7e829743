"""The workloads of a fleet (``forescale tune --by``/``--series-column``), read: one Prometheus range query split by
its labels, fetched in windows under Prometheus' limits (``scaler.fleet.workloads.fetch``), or a CSV of
``timestamp,<columns...>,count|qps`` rows (``read_fleet_csv``, through the trace reader's byte sniffing). Every
refusal exits 2 with what was wrong and what is accepted.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from .clitypes import fail


def fleet_workloads(settings, trace, series_column, prometheus_url, query, by, prom_start, prom_end, prom_step,
                    progress):
    """The settings checked, and the fleet's workloads read: (workloads, source, range requests)."""
    from ..fleet.workloads import FleetError
    from ..replay import engine

    try:
        settings.validate()
        if by:
            workloads, source, n_requests = _from_prometheus(prometheus_url, query, by, prom_start, prom_end,
                                                             prom_step, progress)
        else:
            workloads, source, n_requests = read_fleet_csv(trace, series_column), str(trace), 0
    except (FleetError, engine.ReplayError) as e:
        fail(str(e))
    if not workloads:
        fail(f"no workload in {source}: the query returned no series")
    return workloads, source, n_requests


def _from_prometheus(url, query, by, start, end, step, progress):
    """The fleet query's range, in windows under Prometheus' limits, split into workloads."""
    from ..fleet.workloads import FleetError, fetch, parse_by
    from ..prom import PromError, PrometheusClient
    from ..spec import PrometheusTarget
    from . import render, traces

    labels = parse_by(by)
    now = time.time()
    try:
        s, e = traces.parse_time(start, now=now), traces.parse_time(end, now=now)
    except ValueError:
        fail(f"--start/--end {start!r}/{end!r}: accepted are ISO-8601 times (naive = UTC), epoch seconds, now or "
             f"now-DURATION")
    if e <= s:
        raise FleetError(f"--end must be after --start (got {s:g} .. {e:g} epoch s)")
    s = e - np.floor((e - s) / step) * step  # on the grid that ends at --end
    client = PrometheusClient(PrometheusTarget(url.rstrip("/"), timeout_seconds=60.0))
    tick, close = render.progress_bar("fetch", progress, unit="range")
    try:
        workloads, n = fetch(client, query, labels, s, e, step, tick=tick)
    except FleetError:
        raise
    except (PromError, ValueError) as err:  # unreachable, rejected, malformed samples
        raise FleetError(f"Prometheus query {query!r} at {url}: {err}") from None
    finally:
        close()
    return workloads, url, n


def read_fleet_csv(path: Path, columns: str):
    """``timestamp,<columns...>,count|qps`` rows -> workloads (``count``: requests per the file's interval)."""
    from ..fleet.workloads import FleetError, from_columns, parse_by

    from ..replay.engine import ReplayError
    from .traces import text_file

    cols = parse_by(columns, "--series-column")
    form = f"a header timestamp,{','.join(cols)},count (or qps)"
    try:  # the trace reader's byte sniffing: gzip, UTF-16, a byte that is not UTF-8 named with its line
        with text_file(Path(path), f"a CSV with {form}, one row per timestamp and workload (optionally gzip'd)",
                       "--series-column CSV") as src, open(src, newline="", encoding="utf-8-sig") as fh:
            ts, ys, keys, value = _rows(fh, path, cols, form)
    except ReplayError as e:
        raise FleetError(str(e)) from None
    if len(ts) < 2:
        raise FleetError(f"{path}: {len(ts)} data row(s); expected {form}")
    t = np.asarray(ts)
    steps = []
    for k in set(keys):
        tk = np.sort(t[[i for i, kk in enumerate(keys) if kk == k]])
        d = np.diff(tk)
        d = d[d > 0]
        if d.size:
            steps.append(float(np.median(d)))
    if not steps:
        raise FleetError(f"{path}: every workload has a single timestamp; expected {form}")
    step = min(steps)
    y = np.asarray(ys, dtype=float)
    if value == "count":
        y = y / step
    return from_columns(t, y, keys, step)


def _rows(fh, path, cols: Sequence[str], form: str) -> tuple[list, list, list, str]:
    """(timestamps, values, workload keys, "count" or "qps") of a fleet CSV's rows; FleetError naming the line."""
    from ..fleet.workloads import FleetError

    reader = csv.DictReader(fh)
    head = [h.strip().lower() for h in (reader.fieldnames or [])]
    missing = [c for c in ("timestamp", *[c.lower() for c in cols]) if c not in head]
    value = "count" if "count" in head else "qps" if "qps" in head else None
    if missing or value is None:
        raise FleetError(f"{path}: header {reader.fieldnames!r} lacks {', '.join(missing or ['count or qps'])}; "
                         f"expected {form}")
    real = {h.strip().lower(): h for h in reader.fieldnames or []}
    ts, ys, keys = [], [], []
    for lineno, rowd in enumerate(reader, start=2):
        raw_t, raw_v = (rowd.get(real["timestamp"]) or "").strip(), (rowd.get(real[value]) or "").strip()
        try:
            ts.append(_epoch(raw_t))
            ys.append(float(raw_v) if raw_v else float("nan"))
        except ValueError:
            raise FleetError(f"{path}: line {lineno}: timestamp {raw_t!r} or {value} {raw_v!r} is not readable; "
                             f"expected {form} (ISO-8601 or epoch seconds; a number or empty)") from None
        keys.append(tuple((c, (rowd.get(real[c.lower()]) or "").strip()) for c in cols))
    return ts, ys, keys, value


def _epoch(text: str) -> float:
    from datetime import datetime, timezone

    try:
        return float(text)
    except ValueError:
        d = datetime.fromisoformat(text.replace("Z", "+00:00"))
        return (d if d.tzinfo else d.replace(tzinfo=timezone.utc)).timestamp()

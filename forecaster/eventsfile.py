"""A user's events file (``eventsFile``, ``--events``): CSV with the header ``name,start,end,multiplier,floor_qps``
(ISO-8601 times; a time without a zone is UTC; either of the last two may be empty, not both) or YAML (a list of
mappings with the same fields), read into ``Event``s (``parse_events``; ``load_events``: one bounded file read).
Errors are ``forecaster.calendar.CalendarError``s naming the line and what is accepted.

* ``check_floors(events, max_qps)``: a floor above what ``maxReplicaCount`` replicas can serve.
* ``apply_events(t, rate, events, lead)``: the planned rate with each event applied over
  ``[start - lead, end]`` (multiplier first, then the floor), and the name of the event in force.
"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Sequence

import numpy as np

from .calendar import CalendarError


MAX_EVENTS_BYTES = 256 * 1024  # an events file larger than this is refused (a ConfigMap holds 1 MiB)
MAX_EVENTS = 2000
EVENT_FIELDS = ("name", "start", "end", "multiplier", "floor_qps")


@dataclass(frozen=True)
class Event:
    name: str
    start: float  # epoch seconds
    end: float
    multiplier: float | None
    floor_qps: float | None
    line: int  # where it was read (1-based), for messages


def _time(value: object, what: str, where: str) -> float:
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, date):
        dt = datetime(value.year, value.month, value.day)
    else:
        s = str(value).strip()
        try:
            dt = datetime.fromisoformat(s.replace("Z", "+00:00") if s.endswith("Z") else s)
        except ValueError:
            raise CalendarError(f"{where}: {what} {s[:40]!r} is not an ISO-8601 time; accepted e.g. "
                                "2026-11-26T00:00:00Z or 2026-11-26") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def _number(value: object, what: str, where: str, lo: float, hi: float) -> float | None:
    if value is None or str(value).strip() == "":
        return None
    try:
        x = float(str(value).strip())
    except ValueError:
        raise CalendarError(f"{where}: {what} {str(value)[:40]!r} is not a number") from None
    if not (math.isfinite(x) and lo <= x <= hi):
        raise CalendarError(f"{where}: {what} {x:g} is out of range; accepted [{lo:g}, {hi:g}]")
    return x


def _event(row: dict, line: int, source: str) -> Event:
    where = f"{source} line {line}"
    name = str(row.get("name") or "").strip()
    if not name or len(name) > 63 or any(c.isspace() for c in name) or not name.isprintable():
        raise CalendarError(f"{where}: name {name[:40]!r}: accepted 1-63 printable characters without spaces")
    if row.get("start") in (None, "") or row.get("end") in (None, ""):
        raise CalendarError(f"{where}: event {name!r} needs both start and end (ISO-8601)")
    start = _time(row["start"], "start", where)
    end = _time(row["end"], "end", where)
    if end <= start:
        raise CalendarError(f"{where}: event {name!r} ends before (or when) it starts; end must be after start")
    mult = _number(row.get("multiplier"), "multiplier", where, 0.01, 1000.0)
    floor = _number(row.get("floor_qps"), "floor_qps", where, 0.0, 1e12)
    if mult is None and floor is None:
        raise CalendarError(f"{where}: event {name!r} has neither a multiplier nor a floor_qps; give one or both")
    return Event(name, start, end, mult, floor, line)


def parse_events(text: str, fmt: str = "csv", source: str = "events file") -> tuple[Event, ...]:
    """Events from CSV or YAML text, sorted by start; overlapping events with different floors are refused."""
    if len(text.encode("utf-8", "replace")) > MAX_EVENTS_BYTES:
        raise CalendarError(f"{source}: larger than {MAX_EVENTS_BYTES // 1024} KiB; accepted up to that size")
    if fmt == "csv":
        rows = _csv_rows(text, source)
    elif fmt == "yaml":
        rows = _yaml_rows(text, source)
    else:
        raise CalendarError(f"{source}: format {fmt!r}; accepted csv or yaml")
    if len(rows) > MAX_EVENTS:
        raise CalendarError(f"{source}: {len(rows)} events; accepted at most {MAX_EVENTS}")
    events = sorted((_event(r, line, source) for line, r in rows), key=lambda e: (e.start, e.line))
    for i, a in enumerate(events):
        for b in events[i + 1:]:
            if b.start >= a.end:
                break
            if a.floor_qps is not None and b.floor_qps is not None and a.floor_qps != b.floor_qps:
                raise CalendarError(f"{source} line {b.line}: event {b.name!r} overlaps {a.name!r} (line {a.line}) "
                                    f"with a different floor_qps ({b.floor_qps:g} vs {a.floor_qps:g}); give "
                                    "overlapping events one floor, or make them not overlap")
    return tuple(events)


def _csv_rows(text: str, source: str) -> list[tuple[int, dict]]:
    lines = text.splitlines()
    if not lines or [c.strip().lower() for c in next(csv.reader([lines[0]]))] != list(EVENT_FIELDS):
        got = lines[0][:80] if lines else ""
        raise CalendarError(f"{source} line 1: header {got!r}; accepted exactly {','.join(EVENT_FIELDS)}")
    out = []
    for line, cells in enumerate(csv.reader(io.StringIO(text)), start=1):
        if line == 1 or not any(c.strip() for c in cells) or cells[0].lstrip().startswith("#"):
            continue
        if len(cells) != len(EVENT_FIELDS):
            raise CalendarError(f"{source} line {line}: {len(cells)} field(s); accepted {len(EVENT_FIELDS)} "
                                f"({','.join(EVENT_FIELDS)}; leave multiplier or floor_qps empty)")
        out.append((line, dict(zip(EVENT_FIELDS, cells))))
    return out


def _yaml_rows(text: str, source: str) -> list[tuple[int, dict]]:
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" line {mark.line + 1}" if mark is not None else ""
        raise CalendarError(f"{source}{at}: not valid YAML ({getattr(e, 'problem', None) or 'syntax'})") from None
    if data is None:
        return []
    if isinstance(data, dict) and "events" in data:
        data = data["events"]
        node = next(v for k, v in node.value if k.value == "events")
    if not isinstance(data, list):
        raise CalendarError(f"{source}: accepted a list of events (or a mapping with an 'events' list), "
                            f"each with {', '.join(EVENT_FIELDS)}")
    out = []
    for item, n in zip(data, node.value):
        line = n.start_mark.line + 1
        if not isinstance(item, dict):
            raise CalendarError(f"{source} line {line}: an event must be a mapping with {', '.join(EVENT_FIELDS)}")
        unknown = sorted(set(map(str, item)) - set(EVENT_FIELDS))
        if unknown:
            raise CalendarError(f"{source} line {line}: unknown field(s) {', '.join(unknown)}; accepted "
                                f"{', '.join(EVENT_FIELDS)}")
        out.append((line, item))
    return out


def load_events(path: str) -> tuple[Event, ...]:
    """Read and parse an events file (``.yaml``/``.yml`` as YAML, else CSV), at most ``MAX_EVENTS_BYTES``."""
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        raise CalendarError(f"events file {path!r} does not exist; accepted a readable CSV or YAML file") from None
    except OSError as e:
        raise CalendarError(f"events file {path!r}: cannot be read ({e.strerror})") from None
    if size > MAX_EVENTS_BYTES:
        raise CalendarError(f"events file {path!r}: {size} bytes; accepted up to {MAX_EVENTS_BYTES // 1024} KiB")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_EVENTS_BYTES + 1)
    except OSError as e:
        raise CalendarError(f"events file {path!r}: cannot be read ({e.strerror})") from None
    if len(raw) > MAX_EVENTS_BYTES:
        raise CalendarError(f"events file {path!r}: accepted up to {MAX_EVENTS_BYTES // 1024} KiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CalendarError(f"events file {path!r}: not UTF-8 text") from None
    fmt = "yaml" if path.lower().endswith((".yaml", ".yml")) else "csv"
    return parse_events(text, fmt, source=os.path.basename(path) or path)


def check_floors(events: Sequence[Event], max_qps: float, source: str = "events file") -> None:
    """Refuse a floor the workload cannot reach: above ``maxReplicaCount x qpsPerReplica``."""
    for e in events:
        if e.floor_qps is not None and e.floor_qps > max_qps:
            raise CalendarError(f"{source} line {e.line}: event {e.name!r} floor_qps {e.floor_qps:g} is above "
                                f"maxReplicaCount x qpsPerReplica = {max_qps:g}; accepted at most that")


def apply_events(t: np.ndarray, rate: np.ndarray, events: Sequence[Event], lead: float
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``rate`` (planned at times ``t``) with each event in force over ``[start - lead, end]``: multiplied
    by its multiplier, then raised to its floor. Returns the new rate and, per point, the index into
    ``events`` of the (last) event in force, -1 where none. NaN stays NaN."""
    t = np.asarray(t, dtype=float)
    out = np.array(rate, dtype=float, copy=True)
    which = np.full(t.shape, -1, dtype=np.int64)
    for i, e in enumerate(events):
        on = (t >= e.start - lead) & (t <= e.end)
        if not on.any():
            continue
        if e.multiplier is not None:
            out[on] = out[on] * e.multiplier
        if e.floor_qps is not None:
            out[on] = np.maximum(out[on], e.floor_qps)  # NaN (no forecast) stays NaN
        which[on] = i
    return out, which


__all__ = ["EVENT_FIELDS", "Event", "MAX_EVENTS", "MAX_EVENTS_BYTES", "apply_events", "check_floors", "load_events",
           "parse_events"]

"""Workloads of a fleet (pure): one range answer split by labels, names, per-workload queries, screening, chunks.

A fleet query such as ``sum by (namespace, service) (rate(requests_total[2m]))``
returns one series per workload; ``--by namespace,service`` names the labels
that identify a workload. Long or fine ranges are fetched in windows
(``chunk_windows``) that keep each request under Prometheus' 11,000 points
per series and under a total sample budget for the whole answer; the windows'
answers are merged per workload (``merge``) and each becomes one regular
``Series`` (``split``), with the same hygiene as a single-series tune.

Every workload is screened (``screen``) before it is tuned: too short a
history or too flat a rate is a reason, reported, never a silent drop.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from forecaster.base import Series
from forecaster.series import regularize

from ..prom import MAX_POINTS

DAY = 86400.0
# samples per range request over all series: a fiftieth of Prometheus' default --query.max-samples (50 million),
# and a bound on the driver's memory while a window's JSON is parsed (~150 bytes a sample as Python objects)
MAX_SAMPLES = 1_000_000
FLAT_RANGE = 0.02  # a rate whose 1st..99th percentiles lie within 2 % of its mean is flat: every policy gives the same
NAME_LIMIT = 63  # a Kubernetes name label (DNS-1123): 63 characters of [a-z0-9-]

Key = tuple[tuple[str, str], ...]  # the --by labels and their values, in --by order


class FleetError(ValueError):
    """Bad fleet input: the message names what was wrong and what is accepted."""


@dataclass(frozen=True)
class Workload:
    """One workload of the fleet: its labels, its traffic and what hygiene did to it."""

    key: Key
    series: Series
    hygiene: str
    counts: bool = False  # requests as they arrived (a CSV), not a query's answers (engine.Trace.counts)

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.key)

    @property
    def title(self) -> str:
        """``namespace=serving,service=llm``: how tables and messages name it."""
        return ",".join(f"{k}={v}" for k, v in self.key) or "(no labels)"


def parse_by(text: str, what: str = "--by") -> tuple[str, ...]:
    """``namespace,service`` -> the label names (Prometheus' label-name syntax, no duplicates)."""
    names = tuple(dict.fromkeys(p.strip() for p in (text or "").split(",") if p.strip()))
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)]
    if not names or bad:
        raise FleetError(f"{what} {text!r}: accepted is a comma-separated list of label names "
                         f"([A-Za-z_][A-Za-z0-9_]*), e.g. namespace,service")
    return names


def chunk_windows(start: float, end: float, step: float, n_series: int = 1, *, max_points: int = MAX_POINTS,
                  max_samples: int = MAX_SAMPLES) -> list[tuple[float, float]]:
    """Windows ``[t0, t1]`` on the ``start + k step`` grid covering ``[start, end]``: each at most ``max_points``
    points per series and ``max_samples`` points over ``n_series`` series."""
    if not (step > 0 and end >= start):
        raise FleetError(f"bad range: start={start:g} end={end:g} step={step:g}; accepted: end >= start, step > 0")
    per = max(2, min(int(max_points), int(max_samples) // max(1, int(n_series))))
    out: list[tuple[float, float]] = []
    t0 = float(start)
    while t0 <= end + 1e-9:
        t1 = min(float(end), t0 + step * (per - 1))
        out.append((t0, t1))
        t0 = t1 + step
    return out


def merge(parts: Iterable[list[dict]], by: Sequence[str]) -> dict[Key, tuple[np.ndarray, np.ndarray]]:
    """Range answers (``data.result`` of each window) merged per workload key: sample times and values as
    float arrays (16 bytes a sample, not a Python list's ~150), in window order.

    Two series of one answer with the same ``by`` values: FleetError (the query must aggregate to
    exactly the ``by`` labels); a malformed sample: ValueError.
    """
    chunks: dict[Key, list[np.ndarray]] = {}
    for part in parts:
        seen: set[Key] = set()
        for s in part:
            metric = s.get("metric", {}) or {}
            key = tuple((b, str(metric.get(b, ""))) for b in by)
            if key in seen:
                raise FleetError(f"the query returned several series for {_title(key)}: aggregate it by exactly "
                                 f"the --by labels, e.g. sum by ({', '.join(by)}) (rate(...[2m]))")
            seen.add(key)
            try:
                pairs = np.array(s.get("values", []) or [], dtype=float).reshape(-1, 2)
            except (TypeError, ValueError) as e:
                raise ValueError(f"malformed sample for {_title(key)} (expected [timestamp, \"value\"]): {e}") from None
            chunks.setdefault(key, []).append(pairs)
    return {k: (np.concatenate([c[:, 0] for c in v]), np.concatenate([c[:, 1] for c in v])) for k, v in chunks.items()}


def fetch(client, query: str, by: Sequence[str], start: float, end: float, step: float, *,
          max_samples: int = MAX_SAMPLES, tick=None) -> tuple[list[Workload], int]:
    """The fleet query's range through a ``PrometheusClient``: an instant query at ``end`` counts the series,
    then windows under the limits (``chunk_windows``), merged and split per workload. Returns the workloads
    and the number of requests made. ``tick(1, total)`` after each window."""
    n = max(1, len(client.instant(query, end)))
    windows = chunk_windows(start, end, step, n, max_samples=max_samples)
    parts = []
    for t0, t1 in windows:
        parts.append(client.range(query, t0, t1, step))
        if tick is not None:
            tick(1, len(windows))
    return split(merge(parts, by), step), len(windows) + 1


def split(merged: Mapping[Key, tuple[np.ndarray, np.ndarray]], step: float) -> list[Workload]:
    """One regular ``Series`` per workload (the hygiene of a single-series range answer), sorted by key."""
    out = []
    for key in sorted(merged):
        series, rep = regularize(*merged[key], step)
        out.append(Workload(key, series, rep.message))
    return out


def from_columns(t: np.ndarray, y: np.ndarray, keys: Sequence[Key], step: float) -> list[Workload]:
    """Rows of a long table (time, rate in req/s, workload key) -> one ``Workload`` per key, sorted by key."""
    t = np.asarray(t, dtype=float)
    y = np.asarray(y, dtype=float)
    index: dict[Key, list[int]] = {}
    for i, k in enumerate(keys):
        index.setdefault(k, []).append(i)
    out = []
    for key in sorted(index):
        rows = np.asarray(index[key])
        series, rep = regularize(t[rows], y[rows], step)
        out.append(Workload(key, series, rep.message, counts=True))
    return out


def screen(w: Workload, min_history: float) -> str | None:
    """Why ``w`` cannot be tuned (too short, too flat, no traffic), or None.

    Too short: less than ``2 x min_history`` of data (``min_history`` before the simulated span, as the
    scaler needs before it trusts a forecast, and as much to simulate).
    """
    y = w.series.y
    ok = np.isfinite(y)
    if ok.sum() < 2:
        return "no data: fewer than 2 finite points"
    t = w.series.t[ok]
    span = float(t[-1] - t[0] + w.series.step)
    if span < 2 * min_history:
        return (f"too short: {span / DAY:.2f} d of history, {2 * min_history / DAY:g} d needed "
                f"({min_history / DAY:g} d before the simulated span and as much to simulate)")
    if float(np.max(y[ok])) <= 0:
        return "no traffic: the rate is 0 throughout"
    lo, hi = (float(v) for v in np.percentile(y[ok], [1, 99]))  # edges of a range answer are often partial
    if hi - lo <= FLAT_RANGE * float(np.mean(y[ok])):
        return (f"too flat: 98 % of the time the rate stays within {lo:.4g}..{hi:.4g} req/s (under "
                f"{100 * FLAT_RANGE:g} % of its mean): every policy needs the same replicas; mode reactive suffices")
    return None


def _title(key: Key) -> str:
    return ",".join(f"{k}={v}" for k, v in key) or "(no labels)"


def dns_label(text: str) -> str:
    """A Kubernetes name (DNS-1123 label): lower case, ``[a-z0-9-]``, alphanumeric at both ends; may be empty."""
    s = re.sub(r"[^a-z0-9-]+", "-", text.lower())
    return re.sub(r"-{2,}", "-", s).strip("-")


def names(workloads: Sequence[Workload]) -> list[tuple[str, str, str]]:
    """``(file id, ScaledObject namespace or "", ScaledObject name)`` per workload, unique file ids.

    A ``namespace`` label becomes the ScaledObject's namespace and the other labels its name (the
    namespace's value when there is no other). Names longer than 63 characters, empty, or equal to
    another workload's after cleaning get a short hash of the full key.
    """
    raw = []
    for w in workloads:
        labels = w.labels
        ns = dns_label(labels.get("namespace", ""))
        rest = dns_label("-".join(v for k, v in w.key if k != "namespace"))
        raw.append((dns_label("-".join(v for _, v in w.key)), ns, rest or ns))
    count: dict[str, int] = {}
    for fid, _, _ in raw:
        count[fid] = count.get(fid, 0) + 1
    out = []
    for w, (fid, ns, name) in zip(workloads, raw):
        if count[fid] > 1 or not fid or len(fid) > NAME_LIMIT or not name or len(name) > NAME_LIMIT:
            h = hashlib.sha256(repr(w.key).encode()).hexdigest()[:6]
            fid = (fid[:NAME_LIMIT - 7].strip("-") or "workload") + "-" + h
            name = (name[:NAME_LIMIT - 7].strip("-") or "workload") + "-" + h
        out.append((fid, ns, name))
    return out


def shard(namespace: str, name: str, shards: int) -> int:
    """The scaler shard of a ScaledObject: a stable hash of ``namespace/name`` modulo ``shards``."""
    return int(hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:8], 16) % max(1, int(shards))


def workload_query(query: str, key: Key) -> str:
    """The fleet query narrowed to one workload, as a single series (what the workload's trigger runs).

    PromQL cannot put a label matcher on an expression, so the series is kept by ``and on(<labels>)``
    against a one-sample vector carrying the workload's label values (``label_replace`` of ``vector(1)``).
    """
    if not key:
        return f"sum({query})"
    one = "vector(1)"
    for k, v in key:
        one = f"label_replace({one}, {json.dumps(k)}, {json.dumps(v.replace('$', '$$'))}, \"\", \"\")"
    return f"sum(({query}) and on({', '.join(k for k, _ in key)}) {one})"


def placeholder_query(key: Key) -> str:
    """A request-rate query for a CSV workload (to replace with the real metric)."""
    sel = ",".join(f"{k}={json.dumps(v)}" for k, v in key)
    return f"sum(rate(http_requests_total{{{sel}}}[2m]))"

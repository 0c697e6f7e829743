"""One workload's tuning job, its input hash, the result cache and the fleet totals (pure but for the cache files).

A job is exactly what ``forescale tune`` does for one series: ``replay.tune.tune``
(the sweep over ``variants.variants(Grid)``, the headroom search, ``frontier.select`` at the
target miss), in one process (``jobs=1``: the fleet
parallelises over workloads). It crosses a process (or Ray) boundary as plain
data, and comes back as a ``Tuned``: the ``engine.Result`` without its bulky
parts (timelines, curves, the trace's points) and the ``Selection``, with what the fleet's joint replay under a GPU
budget needs of the selection (``drive``: its answers at each of KEDA's calls, its HPA, the demand).

``input_hash`` is a digest of everything the result depends on (the points,
the settings, the grid, the target, this module's version and forescale's), so
``Cache`` can hand back a finished workload on a rerun: a fleet run that
crashed redoes only what is missing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import resource
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from forecaster.base import Series

from ..misstarget import MissTarget
from ..replay import engine, frontier, variants
from ..replay.families import TABLE, Family as F
from ..replay.fleetmember import Member
from ..replay.tune import answers, tune
from ..replay.scenario import DAY
from .workloads import Key, Workload

log = logging.getLogger(__name__)

CACHE_VERSION = 7  # bump when the engine's results or ``Tuned`` change (a cached result must equal a fresh one)


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("forescale")
    except Exception:  # not installed (a source checkout on PYTHONPATH)
        return "source"


@dataclass(frozen=True)
class Job:
    """Everything one workload's tuning needs (plain data)."""

    key: Key
    t: np.ndarray
    y: np.ndarray
    step: float
    hygiene: str
    settings: engine.Settings
    grid: variants.Grid
    target_miss: MissTarget
    max_cost_ratio: float | None = None
    counts: bool = False  # the workload's series is requests as they arrived (engine.Trace.counts)

    @property
    def title(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.key) or "(no labels)"


def make_job(w: Workload, settings: engine.Settings, grid: variants.Grid, target_miss: MissTarget,
             max_cost_ratio: float | None) -> Job:
    return Job(w.key, w.series.t, w.series.y, w.series.step, w.hygiene, settings, grid, target_miss, max_cost_ratio,
               counts=w.counts)


def input_hash(job: Job) -> str:
    """A digest of every input of the job's result (sha256, 32 hex digits)."""
    h = hashlib.sha256()
    h.update(repr((CACHE_VERSION, _package_version(), job.key, job.step, job.counts, job.settings, job.grid,
                   job.target_miss, job.max_cost_ratio)).encode())
    h.update(np.ascontiguousarray(job.t, dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(job.y, dtype=np.float64).tobytes())
    return h.hexdigest()[:32]


@dataclass
class Tuned:
    """A job's outcome: the slim ``Result`` and the ``Selection``, or the error that stopped it."""

    key: Key
    result: engine.Result | None
    selection: frontier.Selection | None
    error: str | None = None
    seconds: float = 0.0
    peak_rss_mib: float = 0.0  # of the process that ran it (a pool or Ray worker: its peak so far)
    cached: bool = False
    timing: dict = field(default_factory=dict)
    drive: Member | None = None  # the selection replayable in the fleet's joint loop (``replay.fleetloop``)


def tune_one(job: Job) -> Tuned:
    """``forescale tune`` on one workload, in this process. A bad input comes back as ``error``, not raised
    (it would fail again on a retry); anything else raises (and Ray retries it)."""
    t0 = time.perf_counter()
    trace = engine.Trace(job.title, Series(job.t, job.y, job.step), job.hygiene, "fleet", counts=job.counts)
    try:
        tuning = tune(trace, job.settings, job.target_miss, job.max_cost_ratio, grid=job.grid, jobs=1)
    except engine.ReplayError as e:
        return Tuned(job.key, None, None, str(e), time.perf_counter() - t0, _rss_mib())
    r, sel = tuning.result, tuning.selection
    drive = None
    if sel.point is not None and TABLE[sel.point.policy].hpa:  # every selectable family is
        values, hpa = answers(r, sel.point.variant)
        drive = Member(job.title, r.scenario, hpa, values)
    slim = replace(r, trace=replace(trace, series=Series(np.empty(0), np.empty(0), job.step)),
                   scenario=None,  # type: ignore[arg-type]  # dropped on purpose: the cached, pickled result kept small
                   models={}, policies={})
    return Tuned(job.key, slim, sel, None, time.perf_counter() - t0, _rss_mib(), timing=dict(r.timing), drive=drive)


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Cache:
    """``Tuned`` results on disk, one file per input hash (written atomically; unreadable = missing)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def path(self, h: str) -> Path:
        return self.root / f"{h}.pickle"

    def get(self, h: str) -> Tuned | None:
        p = self.path(h)
        try:
            with open(p, "rb") as f:
                t = pickle.load(f)  # files this class wrote, under the user's own --out directory
        except FileNotFoundError:
            return None
        except Exception as e:  # truncated, from another version: recompute
            log.warning("fleet cache %s unreadable (%s): recomputing", p, type(e).__name__)
            return None
        if not isinstance(t, Tuned):
            return None
        return replace(t, cached=True)

    def put(self, h: str, t: Tuned) -> None:
        if t.error is not None:
            return  # a failure is not a result: a rerun tries again
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.path(h).with_suffix(f".tmp{os.getpid()}")
        with open(tmp, "wb") as f:
            pickle.dump(replace(t, cached=False), f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, self.path(h))


# --------------------------------------------------------------------------- per workload and fleet figures


@dataclass(frozen=True)
class Row:
    """One tuned workload's figures (replica-hours over its simulated span)."""

    key: Key
    family: str
    label: str
    met: bool
    miss: float
    cost_ratio: float | None
    hours: float
    reactive_same_miss: float | None  # the cheapest reactive configuration missing no more; None: none does
    reactive_label: str
    keep_alive: float | None
    keda_miss: float | None  # KEDA's own Prometheus scaler (reactive x1, dead band kept)
    keda_hours: float | None
    days: float
    missed_requests: float
    requests: float


def row(t: Tuned) -> Row:
    r, sel = t.result, t.selection
    assert r is not None and sel is not None and sel.point is not None  # only a tuned workload with a selection
    p = sel.point
    reactive = [q for q in r.points if q.policy == F.REACTIVE]
    same = [q for q in reactive if q.miss <= p.miss + 1e-12]
    best = min(same, key=lambda q: (q.cost, q.miss)) if same else None
    keda = next((q for q in reactive if q.variant.headroom == 1.0 and not q.variant.compensation), None)
    keep = next((q for q in r.points if q.policy == F.KEEP_ALIVE), None)
    return Row(t.key, p.policy, p.label, sel.met, p.miss, p.cost_ratio, p.cost,
               None if best is None else best.cost, "" if best is None else best.label,
               None if keep is None else keep.cost, None if keda is None else keda.miss,
               None if keda is None else keda.cost, (r.sim_end - r.sim_start) / DAY,
               p.outcome.missed_requests, p.outcome.requests)


def totals(rows: Sequence[Row], *, gpus_per_replica: float = 1.0) -> dict:
    """Fleet totals in GPU-hours (replica-hours x GPUs per replica) over each workload's simulated span.

    ``saved_vs_reactive``: against the cheapest reactive configuration that misses no more than the
    chosen one, summed over the workloads where reactive reaches that miss (``reactive_unreachable``
    counts the others); ``saved_vs_keep_alive``: against a fixed pool for each workload's peak.
    """
    g = float(gpus_per_replica)
    chosen = sum(x.hours for x in rows)
    comp = [(x.reactive_same_miss, x.hours) for x in rows if x.reactive_same_miss is not None]
    keep = [(x.keep_alive, x.hours) for x in rows if x.keep_alive is not None]
    req = sum(x.requests for x in rows)
    return {
        "workloads_tuned": len(rows),
        "target_met": sum(x.met for x in rows),
        "gpus_per_replica": g,
        "simulated_days": sum(x.days for x in rows),
        "gpu_hours": g * chosen,
        "missed_fraction": (sum(x.missed_requests for x in rows) / req) if req > 0 else 0.0,
        "reactive_same_miss_gpu_hours": g * sum(same for same, _ in comp),
        "saved_vs_reactive_gpu_hours": g * sum(same - hours for same, hours in comp),
        "compared_with_reactive": len(comp),
        "reactive_unreachable": len(rows) - len(comp),
        "keep_alive_gpu_hours": g * sum(pool for pool, _ in keep),
        "saved_vs_keep_alive_gpu_hours": g * sum(pool - hours for pool, hours in keep),
    }

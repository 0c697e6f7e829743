"""What the server learns online, kept across a restart: the capacity learned at saturation, the closed loop's
factor and the forecast-error scoring behind ``forecastErrorSeconds: auto``.

One document per trigger under ``<state-dir>/learned/``, named, signed and bounded as the forecasts are
(``state.JsonStore``: ``<namespace>__<name>__<metric>.<metadata digest>.json``, HMAC-SHA256 with the state key,
written atomically through the directory's descriptor without following links, at most ``MAX_STATE_FILE_BYTES``).
It holds up to three parts, each with a key of its own (a one-way digest, never the inputs in clear) that starts
with what the forecasts' key starts with (``forecastdoc.load_material``: the Prometheus target, its headers and
credentials' name, the load's identity: the query, the token queries, the capacity model read):

=========  ======================================================  ============================================
part        what                                                    its key adds (an edit of these drops it)
=========  ======================================================  ============================================
capacity    the learner's counted samples and the figure in force  queueQuery, readyReplicasQuery, qpsPerReplica
            (``scaler.learned``; the run in progress is not kept)
loop        the factor, its last raise and pressure (settle and    every loop query and target, qpsPerReplica
            drain memory), the value last served (``feedback``)
lead        the scored minutes' buckets and the provisioned        the forecast's key (model, history, step,
            minutes ahead (``scaler.leaderror``)                    levelCorrection), quantile, the lead's parts
=========  ======================================================  ============================================

A part is kept for a trigger that uses it: capacity with ``queueQuery`` and ``readyReplicasQuery`` (the learner
runs), loop with a target, lead with ``forecastErrorSeconds: auto`` (and a mode that forecasts, and the self-watch).

**Restored** at the trigger's first refresh (its first poll's; on the refresh's I/O thread, before the loop steps
or the learner observes): its own file; without one, the newest file of another trigger of the same ScaledObject
and metric name (an edit of the metadata is another trigger: it takes each part whose key its inputs still give;
at most ``SIBLINGS`` files read). A part whose key differs, a document older than ``MAX_AGE_SECONDS`` (a day:
the learner's window, the scoring's, the loop's half-life) or saved more than ``FUTURE_SLACK`` in the future, a
file not signed with this scaler's key (tampered, forged) or written for another trigger (a copied file) is not
restored: logged, and the trigger starts fresh. Times are stored on the wall clock (the learner and the loop run
on the monotonic one: converted by the offset between the two, at the save and at the restore).

**Saved** every ``SAVE_SECONDS`` of a trigger's refreshes (on the refresh's thread, off the registry's lock), and
for every restored trigger when the server stops (``flush``): a crash loses at most a minute.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from typing import Callable, Iterable

import numpy as np

from ..feedback import RULE, LoopState
from ..learned import CapacityLearner
from ..leaderror import LeadError
from ..params import loop_targets
from ..spec import ScalerSpec
from . import llmstate
from .forecastdoc import forecast_key_hash, load_material
from .state import MAX_FILE_NAME, JsonStore, digest, file_name, finite_or_none, float_array, json_floats
from .workload import Clock, Workload

log = logging.getLogger(__name__)

VERSION = 1
MAX_AGE_SECONDS = 86400.0  # a document saved longer ago than this is not restored
FUTURE_SLACK = 300.0  # ... nor one saved further than this in the future (a clock stepped back)
SAVE_SECONDS = 60.0  # a trigger's document is written at most this often (and at a graceful stop)
SIBLINGS = 3  # files of the same ScaledObject's other triggers read at most, newest first


def part_keys(spec: ScalerSpec) -> dict[str, str]:
    """The parts a trigger keeps, each with its key (the table in the module's docstring)."""
    load, out = load_material(spec), {}
    if llmstate.learns(spec):
        out["capacity"] = digest(("capacity", *load, spec.loop.queue_query, spec.loop.ready_query,
                                  spec.qps_per_replica))
    if loop_targets(spec) is not None:
        out["loop"] = digest(("loop", *load, spec.loop, spec.qps_per_replica))
    lt = spec.lead
    if lt.forecast_error_auto and spec.mode != "reactive":
        out["lead"] = digest(("lead", forecast_key_hash(spec), spec.quantile, lt.cold_start_seconds,
                              spec.cold_start_query, spec.cold_start_cluster, lt.scheduling_seconds,
                              lt.readiness_seconds))
    return out


def encode(wl: Workload, lead: LeadError | None, keys: dict[str, str], wall: float, offset: float) -> dict:
    """The document of ``wl``'s parts (caller holds the registry's lock); ``offset``: wall - monotonic."""
    doc: dict = {"saved_at": wall}
    learner = wl.llm.learner
    if "capacity" in keys and learner is not None:
        samples, in_force = learner.snapshot()
        doc["capacity"] = {"key": keys["capacity"], "in_force": in_force,
                           "samples": [[t + offset, v] for t, v in samples]}
    if "loop" in keys:
        s = wl.loop
        doc["loop"] = {"key": keys["loop"], "factor": s.factor, "pressure": finite_or_none(s.pressure),
                       "raised_at": finite_or_none(s.raised_at + offset), "answered": finite_or_none(wl.answered)}
    if "lead" in keys and lead is not None:
        doc["lead"] = {"key": keys["lead"], "step": lead.step,
                       "pending": [[m, json_floats(p)] for m, p in sorted(lead.pending.items())],
                       "counts": None if lead.counts is None else lead.counts.tolist(),
                       "ids": None if lead.ids is None else lead.ids.tolist()}
    return doc


def decode_loop(part: dict, offset: float) -> tuple[LoopState, float | None]:
    """The loop's part read back (ValueError/TypeError/KeyError when malformed): its state and the value served."""
    factor, pressure, raised, answered = (part["factor"], part.get("pressure"), part.get("raised_at"),
                                          part.get("answered"))
    if not (isinstance(factor, (int, float)) and 1.0 <= factor <= RULE.max_factor):
        raise ValueError(f"factor {factor!r}: accepted 1 .. {RULE.max_factor:g}")
    for what, x in (("pressure", pressure), ("raised_at", raised), ("answered", answered)):
        if x is not None and not (isinstance(x, (int, float)) and math.isfinite(x) and (x >= 0 or what == "raised_at")):
            raise ValueError(f"{what} {x!r}: accepted a finite number >= 0 or null")
    state = LoopState(float(factor), -math.inf if raised is None else float(raised) - offset,
                      math.nan if pressure is None else float(pressure),
                      f"restored after a restart: factor {factor:.3f}")
    return state, None if answered is None else float(answered)


def decode_lead(part: dict, wall: float) -> LeadError:
    counts, ids = part.get("counts"), part.get("ids")
    return LeadError.resume(float(part["step"]), {int(m): float_array(p) for m, p in part["pending"]},
                            None if counts is None else np.asarray(counts, dtype=np.int64),
                            None if ids is None else np.asarray(ids, dtype=np.int64), wall)


class Keeper:
    """Saves and restores the parts of every trigger. ``lock``: the registry's (it guards every ``Workload``);
    ``wall``/``clock``: the wall and monotonic clocks; ``watch``: the self-watch (the lead part; None: none kept);
    ``learner``: a new ``CapacityLearner`` for a configured figure, with the server's knobs."""

    def __init__(self, store: JsonStore, lock: threading.Condition, wall: Clock, clock: Clock,
                 learner: Callable[[float], CapacityLearner], watch=None):
        self.store, self.lock, self.wall, self.clock = store, lock, wall, clock
        self.learner, self.watch = learner, watch
        self._io = threading.Lock()  # one writer at a time (a refresh's save and the stop's flush)

    def keys(self, wl: Workload) -> dict[str, str]:
        keys = part_keys(wl.declared or wl.spec)
        if self.watch is None:
            keys.pop("lead", None)
        return keys

    # -- restore (the trigger's first refresh, on its I/O thread) --------------------------------------------
    def restore(self, wl: Workload) -> None:
        keys = self.keys(wl)
        try:
            if keys:
                self._restore(wl, keys)
        except Exception as e:  # noqa: BLE001 - a state file must never fail the refresh: the trigger starts fresh
            log.warning("ScaledObject %s/%s: its learned state was not restored: %s", wl.namespace, wl.name,
                        f"{type(e).__name__}: {str(e)[:200]}")
        finally:
            with self.lock:
                wl.restored, wl.saved_at = True, self.clock()

    def _restore(self, wl: Workload, keys: dict[str, str]) -> None:
        doc, fname = self._find(wl)
        if doc is None:
            return
        where = f"ScaledObject {wl.namespace}/{wl.name} trigger {wl.trigger}"
        wall = self.wall()
        saved = doc.get("saved_at")
        age = wall - saved if isinstance(saved, (int, float)) else math.nan
        if not -FUTURE_SLACK <= age <= MAX_AGE_SECONDS:
            log.warning("%s: its learned state (%s) was saved %s: older than the %.0f s a state is kept "
                        "(MAX_AGE_SECONDS) or in the future; not restored, starts fresh", where, fname,
                        f"{age:.0f} s ago" if age == age else "at no time", MAX_AGE_SECONDS)
            return
        offset = wall - self.clock()
        done = []
        for part in ("capacity", "loop", "lead"):
            got = doc.get(part)
            if part not in keys or not isinstance(got, dict):
                continue
            if got.get("key") != keys[part]:
                log.warning("%s: the %s state in %s was made for other inputs (its queries, targets, qpsPerReplica "
                            "or load changed); not restored, starts fresh", where, part, fname)
                continue
            try:
                done.append(self._install(wl, part, got, wall, offset))
            except (KeyError, TypeError, ValueError, IndexError) as e:
                log.warning("%s: ignoring the malformed %s state in %s: %s", where, part, fname, str(e)[:200])
        if done:
            log.info("%s: restored from %s, saved %.0f s ago: %s", where, fname, age, "; ".join(done))

    def _install(self, wl: Workload, part: str, got: dict, wall: float, offset: float) -> str:
        now = wall - offset
        if part == "capacity":
            learner = self.learner((wl.declared or wl.spec).qps_per_replica)
            learner.resume([(float(t) - offset, float(v)) for t, v in got["samples"]], got["in_force"], now)
            s = learner.state()
            with self.lock:
                wl.llm.learner = learner
            return f"capacity learned ({s.samples} samples, in force {s.in_force:g} req/s per replica)"
        if part == "loop":
            state, answered = decode_loop(got, offset)
            with self.lock:
                wl.loop = state
                if wl.answered is None:
                    wl.answered = answered
            return f"closed-loop factor {state.factor:.3f}"
        lead = decode_lead(got, wall)
        self.watch.resume_lead(wl, lead)
        fe = self.watch.forecast_error(wl, wall)
        with self.lock:
            wl.forecast_error = fe["derived_seconds"]
        return f"forecast error {fe['derived_seconds']:.1f} s ({fe['scored_minutes']} minutes scored)"

    def _find(self, wl: Workload) -> tuple[dict | None, str]:
        """Its own document, else the newest of another trigger of its ScaledObject and metric name."""
        own = file_name(*wl.key)
        doc, present = self.store.verified(own)
        if present:
            ok = doc is not None and self.store.written_for(doc, *wl.key) and doc.get("version") == VERSION
            return (doc if ok else None), own
        metric = (wl.declared or wl.spec).metric_name
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{wl.namespace}__{wl.name}__{metric}.")
        if len(base) + 32 > MAX_FILE_NAME:  # names cut to fit: no sibling is found by its name
            return None, own
        try:
            names = [n for n in self.store.dir.names() if n.startswith(base) and n.endswith(".json") and n != own]
            names.sort(key=self.store.dir.mtime, reverse=True)
        except OSError:
            return None, own
        for n in names[:SIBLINGS]:
            doc, _ = self.store.verified(n)
            if (doc is not None and doc.get("version") == VERSION and doc.get("namespace") == wl.namespace
                    and doc.get("name") == wl.name and str(doc.get("metric", "")).rsplit(".", 1)[0] == metric):
                return doc, n
        return None, own

    # -- save ------------------------------------------------------------------------------------------------
    def maybe_save(self, wl: Workload) -> None:
        """After a refresh: the document written when ``SAVE_SECONDS`` passed since the last (or the restore)."""
        if wl.restored and wl.saved_at is not None and self.clock() - wl.saved_at >= SAVE_SECONDS:
            self.save(wl)

    def save(self, wl: Workload) -> None:
        keys = self.keys(wl)
        if not keys or not wl.restored:  # before its restore, a save would overwrite what it is to restore
            return
        lead = self.watch.lead_snapshot(wl) if "lead" in keys else None
        wall = self.wall()
        with self.lock:
            now = self.clock()
            wl.saved_at = now
            doc = encode(wl, lead, keys, wall, wall - now)
        with self._io:
            try:
                self.store.save(*wl.key, doc, version=VERSION, key=digest(tuple(sorted(keys.items()))))
            except (OSError, ValueError) as e:
                log.warning("cannot write the learned state of %s/%s: %s", wl.namespace, wl.name,
                            getattr(e, "strerror", None) or e)

    def flush(self, workloads: Iterable[Workload]) -> None:
        """Every restored trigger's document written now (a graceful stop)."""
        for wl in workloads:
            self.save(wl)

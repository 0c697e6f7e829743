"""The scaler watching itself: live scores, drift state and a decision log per trigger.

``Watch`` keeps, per workload, a ``drift.Scorecard`` (the one implementation the replay runs too), a ring of
the last ``DECISIONS_KEPT`` decisions, and rings of the last ``EVENTS_KEPT`` fits and tuning choices. The
registry's ``decision`` only reads it (``drifting``, ``window_max``); the caller of a decision records it
(``record``: the gRPC servicer after GetMetrics). Scores are exported by a collector at scrape time
(no per-label children kept), and read by ``/status.json`` and ``/api/scaledobjects/{ns}/{name}/decisions``.

Memory per trigger is fixed: the scorecard (two 7-column bucket arrays of 60 and 96 rows, the 30-minute
observed-max ring, at most ``drift.MAX_PENDING`` provisioned minutes; 2 to 3 in practice), a float array of
``DECISIONS_KEPT`` x 8 and two deques of ``EVENTS_KEPT`` small tuples. Strings in it are the spec's own
(model, the tuned label) or cut to ``MAX_TEXT`` characters with control characters removed.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections import deque
from typing import Callable

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..policy import REASONS, Decision, Reason, window_peaks
from ..drift import WINDOWS, DriftConfig, Scorecard
from ..leaderror import SHIFTS, LeadError
from .decisionlog import HEARTBEAT_SECONDS
from .workload import ForecastState, Tuned, Workload

log = logging.getLogger(__name__)

DECISIONS_KEPT = 120  # the decision log's ring, per trigger (KEDA polls every 15-30 s: the last 30-60 minutes)
EVENTS_KEPT = 10  # fits and tuning choices kept, per trigger
MAX_TEXT = 300  # an error or detail message is cut to this many characters
_CTRL = re.compile(r"[\x00-\x1f\x7f]+")
_REASON = {r: i for i, r in enumerate(REASONS)}
# decision ring columns
_T, _OBS, _PEAK, _PLANNED, _REPLICAS, _REASON_C, _TUNED_AT, _LEAD = range(8)


def clean(text: str, limit: int = MAX_TEXT) -> str:
    """A message safe to show: control characters folded to a space, at most ``limit`` characters."""
    text = _CTRL.sub(" ", str(text))
    return text if len(text) <= limit else text[:limit] + "..."


class _Entry:
    __slots__ = ("card", "ring", "n", "labels", "fits", "tunings", "seen_fit", "files", "seen_file", "logged",
                 "active", "lead")

    def __init__(self, step: float, config: DriftConfig):
        self.card = Scorecard(step, config)
        self.lead = LeadError(step)  # the forecast-error part of the lead, measured (scaler.leaderror)
        self.ring = np.full((DECISIONS_KEPT, 8), np.nan)
        self.n = 0  # decisions recorded (the ring's write position is n % DECISIONS_KEPT)
        self.labels: list = [None] * DECISIONS_KEPT  # (model, tuned label): shared tuples, not copies
        self.fits: deque[tuple] = deque(maxlen=EVENTS_KEPT)
        self.tunings: deque[tuple] = deque(maxlen=EVENTS_KEPT)
        self.seen_fit: float | None = None
        self.files: deque[tuple] = deque(maxlen=EVENTS_KEPT)  # eventsFile: each change of its state
        self.seen_file: tuple | None = None
        self.logged: tuple | None = None  # (time, what it said) of the last decision in the durable log
        self.active: bool | None = None  # the last IsActive answer (its changes go to the durable log)


def _num(x: float) -> float | None:
    return None if x != x else float(x)


def _row_doc(r: np.ndarray, lab: tuple) -> dict:
    """A decision ring row as the log shows it."""
    return {"time": _num(r[_T]), "observed": _num(r[_OBS]), "forecast_window_max": _num(r[_PEAK]),
            "planned": _num(r[_PLANNED]), "replicas": None if r[_REPLICAS] != r[_REPLICAS] else int(r[_REPLICAS]),
            "reason": REASONS[int(r[_REASON_C])].value, "lead_seconds": _num(r[_LEAD]),
            "model": lab[0] or None, "tuned": lab[1] or None, "tuned_at": _num(r[_TUNED_AT])}


class Watch:
    def __init__(self, config: DriftConfig = DriftConfig(), on_alarm: Callable[[Workload], None] | None = None,
                 journal=None):
        """``journal``: a ``decisionlog.DecisionLog`` (``--state-dir``): the durable log, read after a restart."""
        self.config = config
        self.on_alarm = on_alarm  # the forecast service's refit-now
        self.journal = journal
        self._lock = threading.Lock()
        self._entries: dict[tuple, _Entry] = {}
        self._workloads: dict[tuple, Workload] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _entry(self, wl: Workload) -> _Entry:
        e = self._entries.get(wl.key)
        if e is None:
            e = self._entries[wl.key] = _Entry(wl.spec.step_seconds, self.config)
            self._workloads[wl.key] = wl
        return e

    # -- read by the registry's decision (no side effects) --------------------------
    def drifting(self, wl: Workload) -> bool:
        e = self._entries.get(wl.key)
        return e is not None and e.card.drifting

    def forecast_error(self, wl: Workload, now: float) -> dict:
        """The lead's forecast-error part measured (``scaler.leaderror``): ``measured`` (None before a score),
        ``scored`` minutes, ``derived`` (the prior, forecastErrorSeconds, shrunk toward it) and ``in_force``."""
        with self._lock:
            e = self._entries.get(wl.key)
            m, n = (None, 0) if e is None else e.lead.measured(now, wl.spec.quantile)
            prior = wl.spec.lead.forecast_error_seconds
            derived = prior if e is None else e.lead.derived(now, wl.spec.quantile, prior)
        lt = wl.lead()
        return {"measured_seconds": m, "scored_minutes": n, "derived_seconds": derived,
                "in_force_seconds": None if lt.buffer_override is not None else lt.forecast_error_seconds,
                "auto": lt.forecast_error_auto}

    def lead_snapshot(self, wl: Workload) -> LeadError | None:
        """A copy of the trigger's forecast-error scoring (``scaler.serve.keeper`` stores it); None before any."""
        with self._lock:
            e = self._entries.get(wl.key)
            if e is None:
                return None
            lead = e.lead
            return LeadError.resume(lead.step, dict(lead.pending), lead.counts, lead.ids, -math.inf)

    def resume_lead(self, wl: Workload, lead: LeadError) -> None:
        """The scoring kept before a restart, in place of the trigger's (``scaler.serve.keeper``)."""
        with self._lock:
            self._entry(wl).lead = lead

    def window_max(self, wl: Workload, now: float) -> float | None:
        with self._lock:
            e = self._entries.get(wl.key)
            return None if e is None else e.card.window_max(now)

    # -- written by the decision's caller --------------------------------------------
    def record(self, wl: Workload, d: Decision, now: float, lead_seconds: float) -> None:
        """Score what came due with this decision's observation, provision now + lead, log the decision."""
        spec, fs = wl.spec, wl.forecast
        q = d.forecast_peak  # what the policy acted on: the corrected quantile's max over [now, now + lead]
        alarm = False
        with self._lock:
            e = self._entry(wl)
            if d.reason not in (Reason.PROMETHEUS_STALE, Reason.MISSING_DATA):  # a held observation scores nothing
                e.lead.observe(now, d.observed)
                events = e.card.observe(now, d.observed)
                alarm = "alarm" in events
                for ev in events:
                    log.warning("ScaledObject %s/%s trigger %s: forecast drift %s", wl.namespace, wl.name,
                                wl.trigger, "detected: refitting, serving the safe policy" if ev == "alarm"
                                else "over: the forecast covers again")
            if q is not None:
                e.card.provision(now + lead_seconds, q, spec.quantile, d.planned)
                ready_at = now + wl.lead().ready_seconds
                if fs.forecast is not None and wl.observed is not None and e.lead.wants(ready_at):
                    e.lead.provision(ready_at, window_peaks(wl.observed, fs.forecast, wl.params(), now,
                                                            wl.lead().ready_seconds + np.array(SHIFTS)))
            row = e.ring[e.n % DECISIONS_KEPT]
            tuned = wl.tuned
            row[:] = (now, d.observed, np.nan if d.forecast_peak is None else d.forecast_peak, d.planned,
                      math.ceil(d.planned / spec.qps_per_replica - 1e-9) if spec.qps_per_replica > 0 else np.nan,
                      _REASON[d.reason], np.nan if tuned is None else tuned.chosen_at, lead_seconds)
            label = (fs.model or spec.model if spec.mode != "reactive" else "", tuned.label if tuned is not None else "")
            last = e.labels[(e.n - 1) % DECISIONS_KEPT]
            e.labels[e.n % DECISIONS_KEPT] = last if last == label else label  # one shared tuple while it holds
            e.n += 1
            said = (row[_REPLICAS], row[_REASON_C], d.event, label)
            journal = self.journal is not None and (e.logged is None or e.logged[1] != said
                                                     or now - e.logged[0] >= HEARTBEAT_SECONDS)
            if journal:
                e.logged = (now, said)
                entry = {"kind": "decision", **_row_doc(row, label), "event": d.event}
        if journal:
            self.journal.append(wl.key, entry)
        if alarm and self.on_alarm is not None:
            self.on_alarm(wl)

    def note_fit(self, wl: Workload, fs: ForecastState) -> None:
        """A forecast the registry adopted: logged when it is a new fit (not a re-prediction)."""
        if fs.fitted_at is None and fs.unusable is None:
            return
        with self._lock:
            e = self._entry(wl)
            stamp = fs.completed_at or fs.fitted_at
            if stamp == e.seen_fit and fs.unusable is None:
                return
            e.seen_fit = stamp
            e.fits.append((stamp, fs.model or wl.spec.model, fs.fit_seconds,
                           fs.unusable.value if fs.unusable is not None else "fitted", clean(fs.detail, 200)))
            t, m, sec, o, dt = e.fits[-1]
        self._journal(wl, {"kind": "fit", "time": t, "model": m, "seconds": sec, "outcome": o, "detail": dt or None})

    def note_active(self, wl: Workload, d: Decision, active: bool, now: float) -> None:
        """An IsActive answer (KEDA's activation, 0 <-> 1): each change goes to the durable log."""
        with self._lock:
            e = self._entry(wl)
            if e.active is active:
                return
            e.active = active
        self._journal(wl, {"kind": "is_active", "time": now, "active": active, "planned": d.planned,
                           "activation_threshold": wl.spec.activation_threshold, "reason": d.reason.value})

    def note_events(self, wl: Workload, reading, now: float) -> None:
        """The trigger's eventsFile (an ``events.EventsReading``): logged when its state changes (read, or why not)."""
        if not reading.read:
            return
        state = (reading.error, len(reading.events))
        with self._lock:
            e = self._entry(wl)
            if e.seen_file == state:
                return
            e.seen_file = state
            e.files.append((now, "error" if reading.error else "read", len(reading.events),
                            clean(reading.error, 200) if reading.error else None))
            t, o, n, err = e.files[-1]
        self._journal(wl, {"kind": "events_file", "time": t, "outcome": o, "events": n, "error": err})

    def _journal(self, wl: Workload, entry: dict) -> None:
        if self.journal is not None:
            self.journal.append(wl.key, entry)

    def history(self, key3: tuple, since: float | None = None) -> list[dict]:
        """The durable log of a trigger (tracked or not), oldest first; [] without one."""
        return [] if self.journal is None else self.journal.read(key3, since=since)

    def note_tuned(self, wl: Workload, tuned: Tuned) -> None:
        with self._lock:
            e = self._entry(wl)
            if e.tunings and e.tunings[-1][0] == tuned.chosen_at:
                return
            e.tunings.append((tuned.chosen_at, tuned.label, tuned.policy, tuned.met, tuned.miss, tuned.cost_ratio,
                              clean(tuned.summary, 200) or None, "chosen"))
            doc = _tuning_doc(e.tunings[-1])
        self._journal(wl, doc)

    def note_tuning_run(self, wl: Workload, at: float, outcome: str, detail: str) -> None:
        """A tuning run that chose nothing (``waiting`` for history, ``failed``, ``discarded``): logged with why."""
        with self._lock:
            e = self._entry(wl)
            e.tunings.append((at, None, None, None, None, None, clean(detail, 200) or None, outcome))
            doc = _tuning_doc(e.tunings[-1])
        self._journal(wl, doc)

    def forget(self, wl: Workload) -> None:
        with self._lock:
            self._entries.pop(wl.key, None)
            self._workloads.pop(wl.key, None)

    # -- read by the HTTP port ---------------------------------------------------------
    def summary(self, wl: Workload, now: float) -> dict:
        with self._lock:
            e = self._entries.get(wl.key)
            if e is None:
                return {"scores": {}, "drift": {"active": False, "alarms": 0, "since": None}}
            c = e.card
            return {"scores": {name: c.scores(i, now).as_dict() for i, (name, _, _) in enumerate(WINDOWS)},
                    "drift": {"active": c.drifting, "alarms": c.alarms, "since": c.since,
                              "cusum": round(c.cusum, 3)}}

    def log(self, wl: Workload) -> dict:
        """The decision log of one trigger: decisions (oldest first), fits, tuning runs (choices, waits, failures)."""
        with self._lock:
            e = self._entries.get(wl.key)
            if e is None:
                return {"decisions": [], "fits": [], "tuning": [], "events_file": []}
            k = min(e.n, DECISIONS_KEPT)
            order = [(e.n - k + i) % DECISIONS_KEPT for i in range(k)]
            rows = e.ring[order].copy()
            labels = [e.labels[i] for i in order]
            fits, tunings, files = list(e.fits), list(e.tunings), list(e.files)

        decisions = [_row_doc(r, lab) for r, lab in zip(rows, labels)]
        return {"decisions": decisions,
                "fits": [{"time": t, "model": m, "seconds": s, "outcome": o, "detail": dt or None}
                         for t, m, s, o, dt in fits],
                "tuning": [{k: v for k, v in _tuning_doc(x).items() if k != "kind"} for x in tunings],
                "events_file": [{"time": t, "outcome": o, "events": n, "error": err} for t, o, n, err in files]}

    def collect(self, now: float):
        """Metric families for the scrape (a collector: no per-label children are kept)."""
        cov = GaugeMetricFamily("forescale_forecast_coverage", "Share of scored minutes whose observed rate was "
                                "at or below the provisioned quantile, per rolling window",
                                labels=("namespace", "scaledobject", "trigger", "window"))
        pin = GaugeMetricFamily("forescale_forecast_pinball_loss", "Mean pinball loss of the provisioned quantile "
                                "(req/s), per rolling window", labels=("namespace", "scaledobject", "trigger", "window"))
        under = GaugeMetricFamily("forescale_underprovisioned_minutes", "Minutes whose observed rate exceeded the "
                                  "planned capacity, per rolling window",
                                  labels=("namespace", "scaledobject", "trigger", "window"))
        above = GaugeMetricFamily("forescale_demand_above_planned_ratio", "Share of demand above the planned "
                                  "capacity, per rolling window", labels=("namespace", "scaledobject", "trigger", "window"))
        drift = GaugeMetricFamily("forescale_forecast_drift", "1 while the drift fallback is served",
                                  labels=("namespace", "scaledobject", "trigger"))
        scored = CounterMetricFamily("forescale_forecast_scored_minutes", "Provisioned minutes scored",
                                     labels=("namespace", "scaledobject", "trigger"))
        covered = CounterMetricFamily("forescale_forecast_covered_minutes", "Scored minutes the provisioned "
                                      "quantile covered", labels=("namespace", "scaledobject", "trigger"))
        alarms = CounterMetricFamily("forescale_forecast_drift_alarms", "Drift alarms (each refits at once)",
                                     labels=("namespace", "scaledobject", "trigger"))
        error = GaugeMetricFamily("forescale_forecast_error_seconds", "The lead's forecast-error part: measured (the "
                                  "quantile's lead slack needed over 24 h of scored minutes), derived (the prior "
                                  "forecastErrorSeconds shrunk toward it, what forecastErrorSeconds: auto uses)",
                                  labels=("namespace", "scaledobject", "trigger", "kind"))
        with self._lock:
            for key, e in self._entries.items():
                wl = self._workloads[key]
                labels = list(wl.labels)
                c = e.card
                for i, (name, _, _) in enumerate(WINDOWS):
                    s = c.scores(i, now)
                    if s.scored:
                        assert s.coverage is not None and s.pinball is not None  # set whenever a minute was scored
                        cov.add_metric(labels + [name], s.coverage)
                        pin.add_metric(labels + [name], s.pinball)
                        under.add_metric(labels + [name], s.under_minutes)
                        if s.demand_above_planned is not None:
                            above.add_metric(labels + [name], s.demand_above_planned)
                m, n = e.lead.measured(now, wl.spec.quantile)
                if m is not None:
                    error.add_metric(labels + ["measured"], m)
                    error.add_metric(labels + ["derived"], e.lead.derived(now, wl.spec.quantile,
                                                                          wl.spec.lead.forecast_error_seconds))
                drift.add_metric(labels, 1.0 if c.drifting else 0.0)
                scored.add_metric(labels, c.scored_total)
                covered.add_metric(labels, c.covered_total)
                alarms.add_metric(labels, c.alarms)
        return [cov, pin, under, above, drift, scored, covered, alarms, error]


def _tuning_doc(x: tuple) -> dict:
    t, lab, p, met, miss, cost, why, out = x
    return {"kind": "tuning", "time": t, "outcome": out, "chosen": lab, "policy": p, "target_met": met,
            "expected_miss": miss, "expected_cost_ratio": cost, "why": why}


class WatchCollector:
    """Registers ``Watch.collect`` with a prometheus_client registry."""

    def __init__(self, watch: Watch, clock: Callable[[], float]):
        self.watch, self.clock = watch, clock

    def collect(self):
        return self.watch.collect(self.clock())

    def describe(self):
        return []

"""The answer for one trigger now, read from memory (RPC threads), and what is recorded of an answer served.

``Answers.decision`` turns a ``Workload``'s state into ``policy.decide``'s answer or a ``ScalerError``: a
configuration error (FAILED_PRECONDITION), no observation or one too old (UNAVAILABLE, ``cadence.stale_after``),
one not renewed on time (reason ``prometheus_stale``, ``cadence.late_after``), missing data held, a forecast the
live scores say drifted (the safe policy, ``scaler.drift``), a value beyond ``limits.MAX_RATE`` made finite, and
a fleet GPU budget member's claim (``ledger``; ``budget_known``: a trigger's budget is one this scaler holds,
checked when it is first looked up). It changes nothing in the workload; the registry, the only writer
of a ``Workload``, keeps what its callers served (``Registry.record``). ``export``, ``scored`` and ``note_active``
are what is recorded of an answer: its metrics, its live scores and the decision log (``scaler.serve.watch``).
"""

from __future__ import annotations

import dataclasses
import re

from ..drift import safe_planned
from ..events import FILES
from ..limits import MAX_RATE
from ..params import loop_targets
from ..policy import Decision, Reason, decide
from . import llmstate
from .cadence import late_after, stale_after
from .identity import cut
from .metrics import ScalerMetrics
from .registryconfig import PRECONDITION, RegistryConfig
from .watch import Watch
from .workload import Clock, ScalerError, Workload


def missing_why(seconds: float) -> str:
    """The missing-data reason as a message (the decision, UNAVAILABLE and the status page say it)."""
    return (f"the query has returned no usable value (no series, or NaN) for {seconds:.0f}s where the last one was "
            "above activationThreshold: missing data (a scrape gap?), not zero")


def match_metric(wl: Workload, metric_name: str) -> None:
    """KEDA may lower-case names and strips its ``s<index>-`` prefix; accept both forms."""
    asked = re.sub(r"^s\d+-", "", metric_name.strip().lower())
    if metric_name and asked != wl.spec.metric_name and metric_name.strip().lower() != wl.spec.metric_name:
        raise ScalerError("NOT_FOUND", f"ScaledObject {wl.namespace}/{wl.name}: unknown metric "
                                       f"'{cut(metric_name)}'; "
                                       f"this trigger serves '{wl.spec.metric_name}'")


class Answers:
    """The registry's answers. ``clock``: the monotonic clock of ages; ``wall``: the policy's now."""

    def __init__(self, clock: Clock, wall: Clock, config: RegistryConfig, metrics: ScalerMetrics,
                 watch: Watch | None, ledger=None):
        self.clock, self.wall, self.config, self.metrics = clock, wall, config, metrics
        self.watch = watch  # live scores, drift state, the decision log (scaler.serve.watch)
        self.ledger = ledger  # the fleet GPU budgets (scaler.serve.ledger.Ledger), None without --budget-file

    def decision(self, wl: Workload) -> Decision:
        """The answer for ``wl`` now, read from memory; changes nothing but a fleet GPU budget member's claim
        (``ledger``: the answer is capped within its budget), its caller records what it served (``record``, or
        ``export`` for IsActive). Staleness is judged here, by the age of the last good observation, whatever kept
        it from being renewed."""
        now = self.clock()
        err, observed, stale = wl.error, wl.observed, False
        failing = err is not None and (wl.observed_at is None or (wl.error_at or 0) >= wl.observed_at)
        if err is not None and failing and err.kind in PRECONDITION:
            raise ScalerError("FAILED_PRECONDITION", f"ScaledObject {wl.namespace}/{wl.name}: {err}")
        if wl.cold_start_error is not None:
            raise ScalerError("FAILED_PRECONDITION", f"ScaledObject {wl.namespace}/{wl.name}: {wl.cold_start_error}")
        missing_since = None if failing else wl.missing_since  # no usable value: unknown, not zero (refresher)
        missing = missing_since is not None
        why = str(err) if failing else (missing_why(now - missing_since) if missing_since is not None
                                        else "no observation from Prometheus yet (refresh pending)")
        if observed is None or wl.observed_at is None:
            raise ScalerError("UNAVAILABLE", f"ScaledObject {wl.namespace}/{wl.name}: {why}")
        age = now - wl.observed_at
        if age > stale_after(wl, self.config):
            raise ScalerError("UNAVAILABLE", f"ScaledObject {wl.namespace}/{wl.name}: {why}; "
                                             f"last good observation {age:.0f}s ago")
        if failing or (age > late_after(wl, self.config) and not missing):
            stale = True
        fs, params = wl.forecast, wl.params()
        d = decide(observed, fs.forecast, params, self.wall(), unusable=fs.unusable, history_max=fs.history_max,
                   with_mean=True, missing=missing, feedback=wl.loop.factor if params.loop is not None else None)
        if stale:
            d = dataclasses.replace(d, reason=Reason.PROMETHEUS_STALE)
        elif self.watch is not None and d.reason in (Reason.FORECAST, Reason.OBSERVED_FLOOR) and self.watch.drifting(wl):
            # live scores say the forecast drifted: the safe policy until it covers again (scaler.drift)
            d = dataclasses.replace(d, reason=Reason.FORECAST_DRIFT, planned=safe_planned(
                d.planned, d.observed, self.watch.window_max(wl, self.wall()), wl.spec.headroom))
        if not d.planned <= MAX_RATE:  # +inf or beyond (a 1e308 series times headroom): KEDA gets a finite value
            if d.planned != d.planned:
                raise ScalerError("UNAVAILABLE", f"ScaledObject {wl.namespace}/{wl.name}: the planned rate is not a "
                                                 "number (the forecast or the observation is not usable)")
            d = dataclasses.replace(d, planned=MAX_RATE)
        if wl.spec.gpu_budget and self.ledger is not None:  # within its fleet GPU budget (memory only)
            d = self.ledger.cap(wl, d)
        return d

    def budget_known(self, name: str) -> None:
        """A trigger's ``gpuBudget`` is one this scaler holds (``--budget-file``); INVALID_ARGUMENT otherwise."""
        if self.ledger is None:
            raise ScalerError("INVALID_ARGUMENT", f"gpuBudget {name[:63]!r}: this scaler holds no GPU budget (start "
                                                  "it with --budget-file); remove gpuBudget or point scalerAddress at "
                                                  "a scaler that holds it")
        self.ledger.check(name)

    def scored(self, wl: Workload, d: Decision) -> float | None:
        """A served answer (GetMetrics) scored and logged (``scaler.serve.watch``); with ``forecastErrorSeconds:
        auto``, the lead's forecast-error part as the scores measure it (for the registry to keep), else None."""
        if self.watch is None:
            return None
        now = self.wall()
        self.watch.record(wl, d, now, wl.lead().seconds)
        if not wl.spec.lead.forecast_error_auto:
            return None
        return self.watch.forecast_error(wl, now)["derived_seconds"]

    def note_active(self, wl: Workload, d: Decision, active: bool) -> None:
        """An IsActive answer (its metrics, and its changes in the decision log)."""
        self.export(wl, d)
        if self.watch is not None:
            self.watch.note_active(wl, d, active, self.wall())

    def export(self, wl: Workload, d: Decision) -> None:
        """A decision as metrics (IsActive's too): read from the Decision and the spec only (no clock, no curve);
        with an eventsFile, whether it is in force as written (its error noted once in the decision log)."""
        self.metrics.export_decision(wl.labels, d, wl.lead(), wl.spec.quantile)
        llmstate.export(wl.spec, wl.labels, self.metrics)
        if loop_targets(wl.spec) is not None:
            self.metrics.feedback.labels(*wl.labels).set(d.feedback)
        if wl.spec.events_file:
            reading = FILES.get(wl.spec.events_file)
            self.metrics.events_file_ok.labels(*wl.labels).set(0.0 if reading.error else 1.0)
            if self.watch is not None:
                self.watch.note_events(wl, reading, self.wall())

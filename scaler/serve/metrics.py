"""The scaler's own Prometheus metrics (why it decided what it decided).

Label sets are bounded: one series per live trigger (removed when it is
forgotten; at most ``limits.MAX_TRACKED``) and a fixed set of reasons, parts
and quantiles. A trigger's series carry ``trigger``: the first 8 hex
characters of its metadata digest (two forescale triggers of one ScaledObject,
or an edit, give two series; the status page and alerts group by the first two).
The tuning series (written by ``scaler.serve.tuning``) keep (namespace, scaledobject).
"""

from __future__ import annotations

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..policy import Reason

SO = ("namespace", "scaledobject")
TRIGGER = SO + ("trigger",)
LEAD_PARTS = ("total", "cold_start", "buffer")  # forescale_lead_seconds' part label
SIGNALS = ("waiting", "ready", "ttft", "itl")  # forescale_server_signal's signal label (scaler.feedback.Signals)



def drop_series(metric, match: Callable[[tuple[str, ...]], bool]) -> None:
    """Remove ``metric``'s series whose label values ``match`` (prometheus_client removes one label set at a time;
    one removed meanwhile by another thread is no error)."""
    for k in [k for k in list(metric._metrics) if match(k)]:
        try:
            metric.remove(*k)
        except KeyError:
            pass


class ScalerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.observed = Gauge("forescale_observed_qps", "Observed request rate (the trigger's query)", TRIGGER, registry=r)
        self.forecast = Gauge("forescale_forecast_qps",
                              "Forecast request rate: max over [now, now+lead] of the mean and of the provisioned quantile",
                              TRIGGER + ("quantile",), registry=r)
        self.planned = Gauge("forescale_planned_qps", "Value sent to KEDA (planned request rate)", TRIGGER, registry=r)
        self.target = Gauge("forescale_target_qps_per_replica", "HPA target: qpsPerReplica", TRIGGER, registry=r)
        self.lead = Gauge("forescale_lead_seconds", "Lead time L and its parts", TRIGGER + ("part",), registry=r)
        self.reason = Gauge("forescale_decision_reason", "1 for the reason of the current decision", TRIGGER + ("reason",), registry=r)
        self.decisions = Counter("forescale_decisions_total", "Decisions served to KEDA, by reason", TRIGGER + ("reason",), registry=r)
        self.event = Gauge("forescale_event_active", "1 while a user event of eventsFile is in force (its name)",
                           TRIGGER + ("event",), registry=r)
        self.events_file_ok = Gauge("forescale_events_file_ok", "1 when the trigger's eventsFile is read and in force as "
                                    "written; 0 when it is missing, refused or bad (its last good events stay)",
                                    TRIGGER, registry=r)
        self.signal = Gauge("forescale_server_signal", "The model server's state the closed loop reads (queueQuery: "
                             "waiting, readyReplicasQuery: ready, ttftQuery: ttft s, itlQuery: itl s); no series while "
                             "unknown", TRIGGER + ("signal",), registry=r)
        self.feedback = Gauge("forescale_feedback_factor", "The closed loop's factor on the planned value (1: the "
                              "forecast plan as it is; only with queueTarget, ttftTarget or itlTarget)", TRIGGER,
                              registry=r)
        # LLM triggers (scaler.serve.llmstate): the token mix, the capacity model file, the capacity learned online
        self.tokens = Gauge("forescale_tokens_per_second", "Prompt (kind=input) and generated (kind=output) tokens/s "
                            "of a capacityModel trigger (inputTokenQuery, outputTokenQuery)", TRIGGER + ("kind",),
                            registry=r)
        self.capacity_model_ok = Gauge("forescale_capacity_model_ok", "1 when the trigger's capacityModel file is "
                                       "read and in force as written; 0 when it is missing, refused, bad or another "
                                       "model's (the last good model stays; none: the request rate alone)", TRIGGER,
                                       registry=r)
        self.capacity_clamped = Gauge("forescale_capacity_clamped", "1 while the mix (weighted tokens per request) is "
                                      "outside the lengths the capacity model was measured on: held to them",
                                      TRIGGER, registry=r)
        self.capacity_learned = Gauge("forescale_capacity_learned_qps_per_replica", "The load one ready replica "
                                      "serves at saturation (queue non-empty), learned online: the median of a "
                                      "day's settled samples; no series before 10", TRIGGER, registry=r)
        self.capacity_ratio = Gauge("forescale_capacity_learned_ratio", "Learned capacity / the configured "
                                    "qpsPerReplica (1: as configured; 0.7: a replica serves 30 % less)", TRIGGER,
                                    registry=r)
        self.capacity_in_force = Gauge("forescale_capacity_in_force_ratio", "The per-replica capacity the plan is on "
                                       "/ qpsPerReplica: the learned one, bounded and with hysteresis, with capacity: "
                                       "learned; 1 otherwise", TRIGGER, registry=r)
        self.capacity_samples = Gauge("forescale_capacity_saturated_samples", "Settled saturated samples the learned "
                                      "capacity is the median of (the last day's)", TRIGGER, registry=r)
        self.model_info = Gauge("forescale_model_info", "The forecast model in use (1)", TRIGGER + ("model",), registry=r)
        self.last_fit = Gauge("forescale_last_fit_timestamp_seconds", "When the current forecast was fitted", TRIGGER, registry=r)
        self.refit_interval = Gauge("forescale_refit_interval_seconds", "The trigger's refitInterval (alerts compare "
                                    "the forecast's age with it)", TRIGGER, registry=r)
        self.fit_duration = Histogram("forescale_fit_duration_seconds", "Forecast fit duration",
                                      buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60), registry=r)
        self.fit_failures = Counter("forescale_fit_failures_total", "Forecast fits that failed", TRIGGER, registry=r)
        self.prom_errors = Counter("forescale_prometheus_errors_total", "Failed Prometheus queries, by kind",
                                   TRIGGER + ("kind",), registry=r)
        self.rpc_errors = Counter("forescale_rpc_errors_total", "RPCs answered with an error, by gRPC code",
                                  ("method", "code"), registry=r)
        self.workloads = Gauge("forescale_scaledobjects", "ScaledObjects currently tracked", registry=r)
        # tuning: auto (scaler.serve.tuning); the knob labels take values from the swept grid only
        self.tuning_info = Gauge("forescale_tuning_info",
                                 "The configuration tuning: auto chose (1), with its knobs; applied=false in shadow mode",
                                 SO + ("policy", "mode", "model", "quantile", "level_correction", "headroom",
                                       "hpa_tolerance", "target_met", "applied"), registry=r)
        self.tuning_miss = Gauge("forescale_tuning_expected_miss_ratio",
                                 "Missed-request fraction the chosen configuration had on the workload's history", SO,
                                 registry=r)
        self.tuning_cost = Gauge("forescale_tuning_expected_cost_ratio",
                                 "Replica-hours of the chosen configuration / a perfect-foresight oracle's, on the history",
                                 SO, registry=r)
        self.tuning_last = Gauge("forescale_tuning_last_run_timestamp_seconds", "The cutoff of the current choice (its history's end)", SO,
                                 registry=r)
        # a fleet GPU budget (scaler.serve.ledger): per member GPUs asked (its own plan) and granted; per budget
        self.budget_gpus = Gauge("forescale_budget_gpus", "GPUs of a fleet budget's member: asked by its own plan and "
                                 "granted by the budget's arbitration (kind)", TRIGGER + ("budget", "kind"), registry=r)
        self.budget_limit = Gauge("forescale_budget_limit_gpus", "A fleet GPU budget's size (--budget-file)",
                                  ("budget",), registry=r)
        self.budget_members = Gauge("forescale_budget_members", "Members of a fleet GPU budget with a fresh claim "
                                    "(this replica's and its peers')", ("budget",), registry=r)
        self.tuning_runs = Counter("forescale_tuning_runs_total", "Tuning runs, by outcome (chosen, failed, waiting: not enough history yet, gave_up: past its time or memory bound)",
                                   SO + ("outcome",), registry=r)

    def export_decision(self, labels: tuple[str, str, str], d, lead, quantile: float) -> None:
        """One decision (``policy.Decision``) of the trigger ``labels`` and its lead (``spec.Lead``): no clock."""
        self.observed.labels(*labels).set(d.observed)
        self.planned.labels(*labels).set(d.planned)
        self.decisions.labels(*labels, d.reason.value).inc()
        for r in type(d.reason):
            self.reason.labels(*labels, r.value).set(1.0 if r is d.reason else 0.0)
        drop_series(self.event, lambda k: k[:3] == labels and k[3] != d.event)  # at most the event in force
        if d.event is not None:
            self.event.labels(*labels, d.event).set(1.0)
        for part, v in zip(LEAD_PARTS, (lead.seconds, lead.cold_start_seconds, lead.buffer_seconds)):
            self.lead.labels(*labels, part).set(v)
        if d.forecast_peak is None:  # no forecast acted on (reactive, a fallback): no stale forecast series
            self.clear_forecast(labels, model=d.reason.value == "mode_reactive")
        else:
            keep = {f"{quantile:g}", "mean"}  # a quantile no longer provisioned (a tuned choice) leaves no series
            drop_series(self.forecast, lambda k: k[:3] == labels and k[3] not in keep)
            self.forecast.labels(*labels, f"{quantile:g}").set(d.forecast_peak)
            if d.forecast_mean_peak is not None:
                self.forecast.labels(*labels, "mean").set(d.forecast_mean_peak)

    def drop_tokens(self, labels: tuple[str, str, str], kind: str) -> None:
        try:
            self.tokens.remove(*labels, kind)
        except KeyError:
            pass

    def drop_signal(self, labels: tuple[str, str, str], name: str) -> None:
        try:
            self.signal.remove(*labels, name)
        except KeyError:
            pass

    def clear_forecast(self, labels: tuple[str, str, str], *, model: bool) -> None:
        """Drop the trigger's forecast series (and with ``model``, its model: mode reactive fits none)."""
        for metric in (self.forecast, self.model_info) if model else (self.forecast,):
            drop_series(metric, lambda k: k[:3] == labels)

    def forget(self, namespace: str, name: str, trigger: str | None = None, *, whole: bool = True) -> None:
        """Drop one trigger's series (``trigger``; all of the ScaledObject's when None), and with ``whole`` (its
        last trigger) the ScaledObject's tuning series too (bounded memory). A trigger's series whose extra
        label takes known values are removed by key (a forget costs the same at 2,000 triggers as at 10); the
        others are looked for."""
        per_trigger = (self.observed, self.forecast, self.planned, self.target, self.lead, self.reason, self.decisions, self.event,
                       self.events_file_ok, self.model_info, self.last_fit, self.refit_interval, self.fit_failures, self.prom_errors,
                       self.budget_gpus, self.signal, self.feedback, self.tokens, self.capacity_model_ok, self.capacity_clamped,
                       self.capacity_learned, self.capacity_ratio, self.capacity_in_force, self.capacity_samples)
        tuning = (self.tuning_info, self.tuning_miss, self.tuning_cost, self.tuning_last, self.tuning_runs)
        reasons = [(r.value,) for r in Reason]
        known = {self.reason: reasons, self.decisions: reasons, self.lead: [(p,) for p in LEAD_PARTS],
                 self.signal: [(s,) for s in SIGNALS], self.tokens: [("input",), ("output",)]}
        for metric in per_trigger + (tuning if whole else ()):
            if trigger is not None and metric in per_trigger and (metric._labelnames == TRIGGER or metric in known):
                for extra in known.get(metric, ((),)):
                    try:
                        metric.remove(namespace, name, trigger, *extra)
                    except KeyError:
                        pass
                continue
            drop_series(metric, lambda k: k[:2] == (namespace, name)
                        and (trigger is None or metric not in per_trigger or k[2] == trigger))

"""What the scaler holds per ScaledObject (``Workload``) and the two background services' protocols.

A ``Workload`` is plain state: its validated spec (the declared one and the
one in force, with a tuned choice applied), its Prometheus client, the last
observation, the cold-start value and the forecast. The ``Registry``
(``scaler.serve.registry``) owns it and is its only writer; the forecast and
tuning services implement the protocols below: they read a workload, and hand
what they computed back to the registry (``Adopt``, ``Apply``), which writes it
under its lock only if it still applies. Whether a service is busy with a
workload is the service's own state (``fitting``, ``busy``), not the workload's.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from forecaster.base import Forecast

from ..coldstart import ClusterReading, InForce, in_force
from ..events import FILES
from ..feedback import LoopState, Signals
from ..leaderror import MAX_SECONDS as LEAD_ERROR_MAX
from ..params import policy_params
from .llmstate import LlmState
from ..policy import PolicyParams, Reason
from ..prom import PrometheusClient, PromError
from ..spec import LeadTime, ScalerSpec

Clock = Callable[[], float]


class ScalerError(Exception):
    """An RPC must fail with this gRPC status code name and message."""

    def __init__(self, code: str, message: str):
        self.code = code
        super().__init__(message)


@dataclass
class ForecastState:
    """The current forecast of one workload, as the fitter left it."""

    forecast: Forecast | None = None
    fitted_at: float | None = None  # when the fit was started (its history ends then; refits are due from it)
    completed_at: float | None = None  # when the fit finished (forescale_last_fit_timestamp_seconds)
    predicted_at: float | None = None  # when the curve was last computed (re-predicted from then, between fits)
    history_max: float | None = None
    model: str = ""
    unusable: Reason | None = None  # why it must not be used, when known
    detail: str = ""  # human detail for logs
    fit_seconds: float | None = None
    key: tuple | None = None  # spec.forecast_key() it was fitted for


# What ``tuning: auto`` may change: the value's knobs, never the metric (qpsPerReplica, metricName) nor the series.
TUNABLE = ("mode", "model", "quantile", "level_correction_seconds", "headroom", "hpa_tolerance", "floor_replicas",
           "holidays")  # holidays: only ever cleared (tune found the holiday handling does not pay off)


@dataclass(frozen=True)
class Tuned:
    """A configuration the auto-tuner (``scaler.serve.tuning``) chose for one workload."""

    key: str  # digest of the declared inputs it was chosen for (``tuningdoc.tuning_key``)
    settings: tuple[tuple[str, object], ...]  # ScalerSpec field -> value, fields of TUNABLE only
    label: str  # e.g. "predictive prophet q0.9 lc 30m x1.1"
    policy: str  # the family
    chosen_at: float
    met: bool  # the target miss (and cost cap) was met on the history
    miss: float  # expected underprovisioned fraction
    cost_ratio: float | None  # expected replica-hours / oracle's
    summary: str = field(default="", compare=False)  # what was tried and why this won (the decision log; not stored)

    def apply(self, declared: ScalerSpec) -> ScalerSpec:
        """The spec the scaler runs: the declared one with the chosen knobs (shadow mode stays shadow)."""
        if declared.tuning != "auto" or declared.mode == "forecastOnly":
            return declared
        chosen: dict[str, Any] = {k: v for k, v in self.settings if k in TUNABLE}  # values as the fields take them
        return dataclasses.replace(declared, **chosen)


class Adopt(Protocol):
    """``Registry.adopt_forecast``: sets ``wl.forecast = state`` if the spec's forecast key is still ``for_key``
    (and, given ``replaces``, the forecast is still that one); False, changing nothing, otherwise."""

    def __call__(self, wl: "Workload", state: ForecastState, for_key: tuple,
                 replaces: ForecastState | None = None) -> bool: ...


# ``Registry.apply_tuned(wl, tuned) -> bool``: the registry runs the choice if the declared spec still matches it.
Apply = Callable[["Workload", Tuned], bool]


class TuningService(Protocol):
    """Runs ``tuning: auto`` in the background (``scaler.serve.tuning.TuningService``)."""

    def applies(self, tuned: Tuned, declared: ScalerSpec) -> bool: ...

    def restore(self, wl: "Workload") -> Tuned | None:
        """The stored choice for the declared spec (restart); the registry applies it."""

    def maybe_tune(self, wl: "Workload", now: float, apply: Apply) -> None:
        """Start a tuning run if one is due; its choice goes to ``apply``."""

    def busy(self, wl: "Workload") -> bool:
        """A tuning run for this workload is queued or running."""

    def forget(self, wl: "Workload") -> None: ...


@dataclass
class Workload:
    namespace: str
    name: str
    spec: ScalerSpec
    client: PrometheusClient
    created: float
    last_polled: float
    observed: float | None = None  # last good observation (req/s, floored at 0)
    observed_at: float | None = None
    error: PromError | None = None  # set when the latest attempt failed
    error_at: float | None = None
    missing_since: float | None = None  # the query has returned no usable value since then (refresher): held
    missing_at: float | None = None  # the latest attempt that returned none
    attempted_at: float | None = None
    refreshing: bool = False
    queued: bool = False  # a refresh waits for a slot of its Prometheus host:port (refresher)
    cold_start: float | None = None  # T_cold from coldStartQuery, when set
    cold_start_at: float | None = None
    cold_start_error: PromError | None = None  # coldStartQuery gave a lead above the maximum
    cluster_cold: ClusterReading | None = None  # coldStartFrom: cluster (scaler.serve.coldstart), adopted by the registry
    poll_interval: float | None = None  # KEDA's polling cadence, learned from its calls (seconds)
    polls: int = 0  # calls that were polls (the registry's eviction keeps those polled PROVEN_POLLS times)
    forecast: ForecastState = field(default_factory=ForecastState)
    first_done: threading.Event = field(default_factory=threading.Event)
    changed: threading.Condition | None = field(default=None, repr=False)  # notified after each refresh (registry)
    declared: ScalerSpec | None = None  # the spec as the metadata says; ``spec`` is it with ``tuned`` applied
    tuned: Tuned | None = None
    # sha256 of the trigger's metadata map (``registry.metadata_digest``): part of the identity, so another map
    # for the same names (a second trigger, another caller, an edit) is another workload and never replaces this one
    digest: str = ""
    # the model server's state at the last refresh (``spec.loop``'s queries; NaN: unknown): the closed loop's
    # signals, kept here for every reader (the loop, the status page, capacity learned online)
    signals: Signals | None = None
    signals_at: float | None = None  # when (the registry's monotonic clock)
    signals_why: dict[str, str] = field(default_factory=dict)  # per unknown signal, why
    loop: LoopState = field(default_factory=LoopState)  # the closed loop's memory (scaler.feedback)
    answered: float | None = None  # the last value served to KEDA (GetMetrics): the replicas asked for
    forecast_error: float | None = None  # forecastErrorSeconds: auto: the derived value in force (scaler.leaderror)
    llm: LlmState = field(default_factory=LlmState)  # capacity learned online, the token mix's history (llmstate)
    restored: bool = False  # what it learned before a restart was looked for (scaler.serve.keeper), at its first refresh
    saved_at: float | None = None  # when that was last saved (the monotonic clock)

    def __post_init__(self) -> None:
        if self.declared is None:
            self.declared = self.spec

    def learn_poll(self, now: float) -> None:
        """One more KEDA call: the gap since the last one updates the learned cadence (calls closer than
        half a second, such as IsActive and GetMetrics of one poll, count as one)."""
        gap = now - self.last_polled
        if gap >= 0.5:
            self.poll_interval = gap if self.poll_interval is None else 0.7 * self.poll_interval + 0.3 * gap

    @property
    def key(self) -> tuple[str, str, str]:
        """(namespace, name, metric name + metadata digest): the identity, and the state files' name."""
        assert self.declared is not None  # set by __post_init__
        return (self.namespace, self.name, f"{self.declared.metric_name}.{self.digest[:32]}" if self.digest
                else self.declared.metric_name)

    @property
    def trigger(self) -> str:
        """The short ``trigger`` label of its metric series: the digest's first 8 hex characters."""
        return self.digest[:8]

    @property
    def labels(self) -> tuple[str, str, str]:
        """Label values of its per-trigger metric series: namespace, scaledobject, trigger."""
        return (self.namespace, self.name, self.trigger)

    def t_cold(self) -> InForce:
        """The T_cold in force: the cluster's (coldStartFrom: cluster), the probe's, or coldStartSeconds."""
        return in_force(self.spec.cold_start_cluster, self.cluster_cold, self.cold_start, self.spec.lead.cold_start_seconds)

    def lead(self) -> LeadTime:
        """The lead in force: the T_cold in force, and with ``forecastErrorSeconds: auto`` the forecast-error part
        measured from the live scores (``scaler.leaderror``; its prior until the first decision is scored)."""
        lt = self.spec.lead.with_cold_start(self.t_cold().seconds)
        if lt.forecast_error_auto and self.forecast_error is not None:
            lt = lt.with_forecast_error(self.forecast_error)
        return lt

    def horizon_lead(self) -> LeadTime:
        """The longest lead this trigger may use before the next fit (auto: the forecast-error part at its bound):
        what a forecast's horizon must cover."""
        lt = self.lead()
        return lt.with_forecast_error(max(lt.forecast_error_seconds, LEAD_ERROR_MAX)) if lt.forecast_error_auto else lt

    def params(self) -> PolicyParams:
        """The decision's knobs (``scaler.params.policy_params``, as the replay has them) with the lead of the T_cold
        in force, the events of ``eventsFile`` (re-read when it changes) and, with ``capacity: learned``, the
        learned capacity's factor (``llmstate``)."""
        return policy_params(self.spec, lead_seconds=self.lead().seconds, events=FILES.get(self.spec.events_file).events,
                             capacity_factor=self.llm.factor(self.spec))


class ForecastService(Protocol):
    """Keeps a workload's ``ForecastState`` fresh, off the RPC threads; the registry adopts what it computes."""

    def maybe_refit(self, wl: Workload, now: float, adopt: Adopt) -> None:
        """Start a fit (or a re-prediction) if one is due; its ``ForecastState`` goes to ``adopt``."""

    def restore(self, wl: Workload) -> ForecastState | None:
        """The stored forecast fitted for the current spec (restart); the registry adopts it."""

    def fitting(self, wl: Workload) -> bool:
        """A fit or re-prediction for this workload is queued or running."""

    def forget(self, wl: Workload) -> None: ...

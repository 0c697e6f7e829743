"""Trigger metadata -> a frozen, validated ``ScalerSpec``.

KEDA passes every key of the trigger's ``metadata`` to the external scaler as
strings (``...FromEnv`` keys arrive resolved). Where a key means the same as in
KEDA's Prometheus scaler it has the same name and form. Every error names the
key, the value received and the accepted form; unknown keys are returned so the
caller can log them once, they are never fatal.

The vocabulary itself (``KEYS``, each key's default and meaning) is ``scaler.keys``, re-exported here; the form
of each single value (serverAddress, timeout, names, ...) is ``scaler.specvalues``; the way back, a spec as
metadata, is ``scaler.specwrite.to_metadata``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping

from forecaster.calendar import DEFAULT_HOLIDAY_AS_CODE, check_timezone, parse_weekday
from .capacitykeys import CapacityKeys, parse as parse_capacity
from .coldstartkeys import ClusterSource, ColdStartKeyError, parse_source
from .durations import DURATION_FORM, format_duration, parse_duration  # noqa: F401 (the metadata's durations)
from .leaderror import MAX_SECONDS as LEAD_ERROR_MAX
from .limits import MAX_HISTORY_STEPS, MAX_HORIZON_STEPS, MAX_LEAD_SECONDS, MAX_TIMEOUT_SECONDS
# typed reading of one map, its error (scaler.reader), re-exported: callers import them from here
from .reader import SECRET_HINT, MetadataError, Reader as _Reader, check_size  # noqa: F401
from .misstarget import ACCEPTED as TARGET_FORM, COST_CAP_FORM, MissTarget, parse_cost_cap, parse_miss_target
from .deadband import KUBERNETES_TOLERANCE, MIN_TARGET
from .specvalues import (default_metric_name, parse_budget_name, parse_credential_name, parse_events_path,
                         parse_holiday_window, parse_holidays, parse_metric_name, parse_pairs, parse_replicas,
                         parse_server_address, parse_timeout, redacted_url)
# the vocabulary (scaler.keys), re-exported: callers import it from here
from .keys import DEFAULTS, GRPC_PORT, KEYS, KNOWN, MODELS, MODES, TUNED_KEYS, TUNING, Key  # noqa: F401


@dataclass(frozen=True)
class LeadTime:
    """L = T_cold + T_buffer, with its parts kept for the metrics."""

    cold_start_seconds: float
    forecast_error_seconds: float
    scheduling_seconds: float
    readiness_seconds: float
    buffer_override: float | None = None
    forecast_error_auto: bool = False  # forecastErrorSeconds: auto (scaler.leaderror; forecast_error_seconds: the prior)

    @property
    def buffer_seconds(self) -> float:
        if self.buffer_override is not None:
            return self.buffer_override
        return self.forecast_error_seconds + self.scheduling_seconds + self.readiness_seconds

    @property
    def ready_seconds(self) -> float:
        """When capacity asked for now is ready: the lead without its forecast-error part (all of it with
        bufferSeconds, which has no parts)."""
        return self.seconds - (0.0 if self.buffer_override is not None else self.forecast_error_seconds)

    def with_cold_start(self, seconds: float) -> "LeadTime":
        return dataclasses.replace(self, cold_start_seconds=seconds)

    def with_forecast_error(self, seconds: float) -> "LeadTime":
        return dataclasses.replace(self, forecast_error_seconds=seconds)

    @property
    def seconds(self) -> float:
        return self.cold_start_seconds + self.buffer_seconds


@dataclass(frozen=True)
class PrometheusTarget:
    """Everything needed to query one Prometheus (no secret: ``credentials`` is a name)."""

    server_address: str
    query_parameters: tuple[tuple[str, str], ...] = ()
    custom_headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    unsafe_ssl: bool = False
    timeout_seconds: float = 5.0
    credentials: str = ""


@dataclass(frozen=True)
class LoopKeys:
    """The closed loop's queries (observed in the background; "" = none) and targets (None = no loop on that
    signal): ``queueQuery``, ``readyReplicasQuery``, ``queueTarget``, ``ttftQuery``/``ttftTarget``,
    ``itlQuery``/``itlTarget``."""

    queue_query: str = ""
    ready_query: str = ""
    queue_target: float | None = None
    ttft_query: str = ""
    ttft_target: float | None = None
    itl_query: str = ""
    itl_target: float | None = None

    def queries(self) -> tuple[tuple[str, str], ...]:
        """(signal, PromQL) of each query given, in a fixed order."""
        return tuple((k, q) for k, q in (("waiting", self.queue_query), ("ready", self.ready_query),
                                         ("ttft", self.ttft_query), ("itl", self.itl_query)) if q)


@dataclass(frozen=True)
class ScalerSpec:
    """One trigger's validated configuration."""

    prometheus: PrometheusTarget
    query: str
    qps_per_replica: float
    activation_threshold: float
    ignore_null_values: bool
    metric_name: str
    lead: LeadTime
    cold_start_query: str
    mode: str
    model: str
    quantile: float
    history_seconds: float
    step_seconds: float
    refit_interval_seconds: float
    min_history_seconds: float
    level_correction_seconds: float
    headroom: float
    hpa_tolerance: float
    tuning: str
    target_miss: MissTarget
    max_cost_ratio: float | None
    tuning_interval_seconds: float
    tuning_min_history_seconds: float
    refresh_seconds: float | None = None  # refreshInterval; None: KEDA's learned cadence
    cold_start_cluster: ClusterSource | None = None  # coldStartFrom: cluster (scaler.coldstartkeys)
    floor_replicas: int = 0  # floorReplicas: always-warm replicas added under the forecast (hybrid)
    holidays: str = ""  # holidays: "US", "US-CA"; "" = off (forecaster.calendar)
    holiday_window: int = 0  # holidayWindow, days
    holiday_as: int = DEFAULT_HOLIDAY_AS_CODE  # holidayAs: weekday (Monday = 0), LEARNED or ORDINARY
    timezone: str = DEFAULTS["timezone"]  # timezone: the IANA zone of the holiday days
    events_file: str = ""  # eventsFile: a path read by the server (scaler.events)
    token_query: str = ""  # tokenQuery: weighted tokens/s; "" = requests alone (scaler.tokens)
    tokens_per_replica: float = 0.0  # tokensPerReplica: with token_query
    gpu_budget: str = ""  # gpuBudget: a budget of the server's --budget-file; "" = none (scaler.serve.ledger)
    gpus_per_replica: float = 0.0  # gpusPerReplica: with gpu_budget
    value_per_request: float = 1.0  # valuePerRequest: with gpu_budget
    min_replica_count: int = 0  # minReplicaCount: with gpu_budget (the ScaledObject's, which the scaler cannot see)
    loop: LoopKeys = LoopKeys()  # the closed loop's queries and targets (scaler.feedback); none by default
    capacity: CapacityKeys = CapacityKeys()  # capacityModel (its file's model, once read) and capacity: learned

    def load_identity(self) -> str | tuple:
        """What the observed load depends on: the query; with tokenQuery also it, tokensPerReplica and qpsPerReplica
        (the binding load, ``scaler.tokens``); with capacityModel the token queries, the file and the model read from
        it. Just the query without tokens, so that no digest of one moves."""
        c = self.capacity
        if c.model_file:
            return (self.query, c.input_query, c.output_query, c.model_file, c.model, self.qps_per_replica)
        if not self.token_query:
            return self.query
        return (self.query, self.token_query, self.tokens_per_replica, self.qps_per_replica)

    def forecast_key(self) -> tuple:
        """What a fitted forecast depends on: a change here means refit."""
        return (self.prometheus, self.load_identity(), self.model, self.history_seconds, self.step_seconds,
                self.level_correction_seconds, self.quantile if self.model == "auto" else None,  # auto scores on it
                self.holidays, self.holiday_window, self.holiday_as, self.timezone)


def parse_metadata(md: Mapping[str, str], *, name: str = "", namespace: str = "") -> tuple[ScalerSpec, tuple[str, ...]]:
    """Validate ``scalerMetadata``. Returns the spec and the unknown keys (sorted)."""
    check_size(md)
    r = _Reader(md)
    for key in sorted(k for k in md if k in KNOWN):  # a control character is refused in any key, read or not
        r.raw(key)
    fields = _target_fields(r, name, namespace)
    fields.update(_lead_fields(r))
    fields.update(_forecast_fields(r))
    fields.update(_tuning_fields(r, fields["history_seconds"]))
    fields.update(_calendar_fields(r))
    fields.update(_budget_fields(r))
    fields["loop"] = _loop_fields(r)
    fields["capacity"] = parse_capacity(r, token_query=fields["token_query"], loop_queries=fields["loop"].queries())
    _check_horizon(r, fields["lead"], fields["refit_interval_seconds"], fields["step_seconds"])
    spec = ScalerSpec(**fields)
    unknown = tuple(sorted(k for k in md if k not in KNOWN))
    return spec, unknown


def _target_fields(r: "_Reader", name: str, namespace: str) -> dict:
    """The Prometheus target, the query, the HPA target and activation, the metric name."""
    server = r.get("serverAddress", parse_server_address,
                   "an http:// or https:// URL of Prometheus without user:password, e.g. http://prometheus.monitoring:9090",
                   show=redacted_url)
    query = r.get("query", str, "a PromQL expression whose single result is requests/s")

    qps_form = "a number in [0.001, 1e9] (requests/s one ready replica sustains), e.g. \"10\""
    qps_raw, thr_raw = r.raw("qpsPerReplica"), r.raw("threshold")
    if qps_raw is None and thr_raw is None:
        raise MetadataError("qpsPerReplica", None, qps_form + " (or its alias 'threshold')")
    qps = thr = None
    if qps_raw is not None:
        qps = r.number("qpsPerReplica", lo=MIN_TARGET, hi=1e9, accepted=qps_form)
    if thr_raw is not None:
        thr = r.number("threshold", lo=MIN_TARGET, hi=1e9, accepted=qps_form)
    if qps is not None and thr is not None and qps != thr:
        raise MetadataError("threshold", thr_raw, f"the same value as qpsPerReplica ({qps_raw}) or absent")
    qps_per_replica = qps if qps is not None else thr

    activation = r.number("activationThreshold", lo=0, hi=1e12, accepted="a number in [0, 1e12] (requests/s)")
    ignore_null = r.boolean("ignoreNullValues")
    qparams = r.get("queryParameters", parse_pairs, "key1=value1,key2=value2")
    headers = r.get("customHeaders", parse_pairs, "key1=value1,key2=value2", secret=True)
    unsafe = r.boolean("unsafeSsl")
    timeout = r.get("timeout", parse_timeout, f"milliseconds in (0, {MAX_TIMEOUT_SECONDS * 1000:.0f}], e.g. 5000, or a duration such as 5s (MAX_TIMEOUT_SECONDS)")
    creds = r.get("credentials", parse_credential_name,
                   "the name of a credential set held by the scaler: letters, digits, '-', '_', '.' (no secret here)")
    metric_name = r.get("metricName", parse_metric_name,
                        "lower-case letters, digits and '-', '.', '_' (a Kubernetes metric name)",
                        default=default_metric_name(namespace, name))

    token_query = r.raw("tokenQuery") or ""
    tokens_per_replica = 0.0
    if token_query or r.raw("tokensPerReplica") is not None:
        if not token_query:
            raise MetadataError("tokenQuery", None, "a PromQL expression whose single result is tokens/s, "
                                "with tokensPerReplica (or neither key)")
        form = ("a number in [0.001, 1e12] (weighted tokens/s one ready replica sustains), required with "
                "tokenQuery, e.g. \"2000\"")
        if r.raw("tokensPerReplica") is None:
            raise MetadataError("tokensPerReplica", None, form)
        tokens_per_replica = r.number("tokensPerReplica", lo=MIN_TARGET, hi=1e12, accepted=form)
    return dict(prometheus=PrometheusTarget(server, qparams, headers, unsafe, timeout, creds), query=query,
                token_query=token_query, tokens_per_replica=tokens_per_replica, qps_per_replica=qps_per_replica, activation_threshold=activation, ignore_null_values=ignore_null,
                metric_name=metric_name)


def _lead_fields(r: "_Reader") -> dict:
    """The lead L = T_cold + T_buffer (its parts), coldStartQuery and coldStartFrom."""
    secs = "a number of seconds in [0, 86400]"
    cold = r.number("coldStartSeconds", lo=0, hi=86400, accepted=secs + ", e.g. \"180\"")
    cold_query = r.raw("coldStartQuery") or ""
    try:
        cluster = parse_source(r.raw, DEFAULTS)
    except ColdStartKeyError as e:
        raise MetadataError(e.key, e.value, e.accepted) from None
    buffer_override = None
    if r.raw("bufferSeconds") is not None:
        buffer_override = r.number("bufferSeconds", lo=0, hi=86400, accepted=secs)
    auto = (r.raw("forecastErrorSeconds") or "").strip().lower() == "auto"
    fe = float(DEFAULTS["forecastErrorSeconds"]) if auto else r.number(
        "forecastErrorSeconds", lo=0, hi=86400, accepted=secs + ", or auto (measured from the live scores)")
    sched = r.number("schedulingSeconds", lo=0, hi=86400, accepted=secs)
    ready = r.number("readinessSeconds", lo=0, hi=86400, accepted=secs)

    return dict(lead=LeadTime(cold, fe, sched, ready, buffer_override, auto), cold_start_query=cold_query,
                cold_start_cluster=cluster)


def _forecast_fields(r: "_Reader") -> dict:
    """The decision's and the forecast's knobs: mode, model, quantile, the series' window, the corrections."""
    mode = r.choice("mode", MODES)
    refused = model_refusal(r.raw("model"))
    if refused is not None:
        raise MetadataError("model", r.raw("model"), f"{' | '.join(MODELS)}; this model plugin was refused: {refused}")
    model = r.choice("model", MODELS)
    if model in ("mstl", "ets"):  # statsforecast's models: the forescale[models] extra may not be installed
        from forecaster.models.statsf import missing_models_message, statsforecast_available

        if not statsforecast_available():
            raise MetadataError("model", model, missing_models_message(model))
    quantile = r.number("quantile", lo=0, lo_open=True, hi=1, hi_open=True,
                        accepted="a number strictly between 0 and 1, e.g. 0.9")
    step = r.duration("step", minimum=1, maximum=3600)
    history = r.duration("history", minimum=step, maximum=90 * 86400.0)
    if history / step > MAX_HISTORY_STEPS:
        raise MetadataError("history", r.raw("history"), f"at most {MAX_HISTORY_STEPS} steps of {step:g}s "
                                                          "(MAX_HISTORY_STEPS): a shorter history or a longer step")
    refit = r.duration("refitInterval", minimum=10, maximum=86400)
    min_history = r.duration("minHistory")
    if min_history > history:
        raise MetadataError("minHistory", r.raw("minHistory"), f"a duration no longer than history ({history:g}s)")
    level = r.duration("levelCorrection", maximum=30 * 86400.0)
    headroom = r.number("headroom", lo=1, hi=100, accepted="a number in [1, 100], e.g. 1.1")
    floor = r.get("floorReplicas", parse_replicas, "a whole number of replicas in [0, 10000], e.g. \"2\"")
    tol = r.number("hpaTolerance", lo=0, hi=1, hi_open=True,
                   accepted=f"the HPA tolerance as a fraction in [0, 1), e.g. {KUBERNETES_TOLERANCE.up:g} (Kubernetes' default)")
    return dict(mode=mode, model=model, quantile=quantile, history_seconds=history, step_seconds=step,
                refit_interval_seconds=refit, min_history_seconds=min_history, level_correction_seconds=level,
                headroom=headroom, floor_replicas=floor, hpa_tolerance=tol)


def _tuning_fields(r: "_Reader", history: float) -> dict:
    """``tuning: auto`` and its target, cost cap and schedule (``history``: its limit)."""
    explicit = any(r.raw(k) is not None for k in TUNED_KEYS)  # a user's own policy is not tuned unless asked
    tuning = r.choice("tuning", TUNING) if r.raw("tuning") is not None or not explicit else "off"
    target_miss = r.get("targetMiss", parse_miss_target, TARGET_FORM)
    max_cost = r.get("maxCostRatio", parse_cost_cap, COST_CAP_FORM)
    tuning_interval = r.duration("tuningInterval", minimum=600, maximum=30 * 86400.0)
    tuning_history = r.duration("tuningMinHistory", minimum=4 * 3600.0)
    if tuning_history > history and r.raw("tuningMinHistory") is None:
        tuning_history = history  # the default shrinks to a shorter history
    elif tuning_history > history:
        raise MetadataError("tuningMinHistory", r.raw("tuningMinHistory"),
                            f"a duration of at least 4h and no longer than history ({history:g}s)")
    return dict(tuning=tuning, target_miss=target_miss, max_cost_ratio=max_cost, tuning_interval_seconds=tuning_interval,
                tuning_min_history_seconds=tuning_history)


def _calendar_fields(r: "_Reader") -> dict:
    """The holidays, the timezone, the events file and the refresh cadence."""
    holidays = r.get("holidays", parse_holidays, "a country code with an optional subdivision, e.g. US or US-CA, or empty")
    hwindow = r.get("holidayWindow", parse_holiday_window, "a whole number of days in [0, 7], e.g. \"1\"")
    holiday_as = r.get("holidayAs", parse_weekday, "a weekday name (monday ... sunday), learned or ordinary")
    tz = r.get("timezone", check_timezone, "an IANA time zone name such as UTC, America/New_York, Europe/Berlin")
    events_file = r.get("eventsFile", parse_events_path, "an absolute path of a mounted file, e.g. /etc/forescale/events.csv")
    refresh = None
    if r.raw("refreshInterval") is not None:
        refresh = r.duration("refreshInterval", minimum=1, maximum=600)
    return dict(holidays=holidays, holiday_window=hwindow, holiday_as=holiday_as, timezone=tz, events_file=events_file,
                refresh_seconds=refresh)


def _budget_fields(r: "_Reader") -> dict:
    """A fleet GPU budget's membership: its name, GPUs per replica (required with it), a lost request's value and the
    ScaledObject's minReplicaCount."""
    name = r.get("gpuBudget", parse_budget_name, "the name of a budget of the scaler's --budget-file: lower-case letters, "
                                            "digits and '-' (a DNS label), or empty")
    gpus_form = "a number in (0, 1024] (GPUs one replica holds), e.g. \"1\""
    gpus = None if r.raw("gpusPerReplica") is None else r.number("gpusPerReplica", lo=0, lo_open=True, hi=1024,
                                                                  accepted=gpus_form)
    value = r.number("valuePerRequest", lo=0, hi=1e9, accepted="a number in [0, 1e9] ($ one lost request costs)")
    lo = r.get("minReplicaCount", parse_replicas, "a whole number of replicas in [0, 10000]: the ScaledObject's "
                                             "minReplicaCount")
    if not name:
        return {}
    if gpus is None:
        raise MetadataError("gpusPerReplica", None, "required with gpuBudget: " + gpus_form)
    return dict(gpu_budget=name, gpus_per_replica=gpus, value_per_request=value, min_replica_count=lo)


def _loop_fields(r: "_Reader") -> LoopKeys:
    """The closed loop's keys: each target needs its query (a query alone is observed, not acted on)."""
    queries = {k: r.raw(k) or "" for k in ("queueQuery", "readyReplicasQuery", "ttftQuery", "itlQuery")}
    targets: dict[str, float | None] = {}
    for key, query, hi, unit in (("queueTarget", "queueQuery", 1e6, "waiting requests per ready replica"),
                                 ("ttftTarget", "ttftQuery", 3600, "seconds"), ("itlTarget", "itlQuery", 3600, "seconds")):
        targets[key] = None
        if r.raw(key) is None:
            continue
        if not queries[query]:
            raise MetadataError(query, None, f"a PromQL expression, required with {key} (or neither key)")
        targets[key] = r.number(key, lo=0.001, hi=hi, accepted=f"a number in [0.001, {hi:g}] ({unit})")
    return LoopKeys(queries["queueQuery"], queries["readyReplicasQuery"], targets["queueTarget"],
                    queries["ttftQuery"], targets["ttftTarget"], queries["itlQuery"], targets["itlTarget"])


def _check_horizon(r: "_Reader", lead: LeadTime, refit: float, step: float) -> None:
    """The lead and the forecast horizon (2 x refitInterval + the lead) within their limits (forecastErrorSeconds:
    auto at its bound, ``leaderror.MAX_SECONDS``)."""
    if lead.forecast_error_auto:
        lead = lead.with_forecast_error(max(lead.forecast_error_seconds, LEAD_ERROR_MAX))
    if lead.seconds > MAX_LEAD_SECONDS:
        raise MetadataError("coldStartSeconds", r.raw("coldStartSeconds"),
                            f"a lead time L = T_cold + T_buffer of at most {MAX_LEAD_SECONDS:g}s (MAX_LEAD_SECONDS); "
                            f"these keys give {lead.seconds:g}s")
    if (2 * refit + lead.seconds) / step > MAX_HORIZON_STEPS:
        raise MetadataError("refitInterval", r.raw("refitInterval"),
                            f"a forecast horizon (2 x refitInterval + lead) of at most {MAX_HORIZON_STEPS} steps of "
                            f"{step:g}s (MAX_HORIZON_STEPS): a shorter refitInterval or a longer step")


def model_refusal(name: str | None) -> str | None:
    """Why the model plugin ``name`` was refused (``forecaster.models.refused``), None when it was not."""
    from forecaster.models import refused

    return None if name is None else refused().get(name.strip().lower())

"""A ``ScalerSpec`` back as trigger metadata (``to_metadata``): the inverse of ``scaler.spec.parse_metadata``, which
reads every map it writes back as the same spec (tests/test_spec.py, the round-trip contract).
"""

from __future__ import annotations

from forecaster.calendar import holiday_as_name

from .capacitykeys import to_metadata as capacity_metadata
from .coldstartkeys import to_metadata as cold_metadata
from .durations import format_duration, parse_duration
from .spec import MetadataError, ScalerSpec, parse_metadata


def _number(x: float) -> str:
    """A float as metadata: the short form when it reads back exactly, else every digit."""
    short = f"{x:g}"
    return short if float(short) == x else repr(float(x))


def _seconds(x: float) -> str:
    short = format_duration(x)
    return short if parse_duration(short) == x else _number(x)


def _loop_metadata(spec: ScalerSpec) -> dict[str, str]:
    """The closed loop's keys (``ScalerSpec.loop``): its queries, and each target given."""
    lp = spec.loop

    def target(x: float | None) -> str:
        return "" if x is None else _number(x)

    return {
        "queueQuery": lp.queue_query,
        "readyReplicasQuery": lp.ready_query,
        "queueTarget": target(lp.queue_target),
        "ttftQuery": lp.ttft_query,
        "ttftTarget": target(lp.ttft_target),
        "itlQuery": lp.itl_query,
        "itlTarget": target(lp.itl_target),
    }


def to_metadata(spec: ScalerSpec, *, name: str = "", namespace: str = "", defaults: bool = False) -> dict[str, str]:
    """Trigger metadata (all strings) that ``parse_metadata`` reads back as ``spec``.

    Keys at their default are left out unless ``defaults`` (a key is left out
    only when parsing without it gives the same spec, so a documented default
    is never assumed). ``customHeaders`` are included: they are part of the
    trigger; print the result only where the trigger itself could be shown.
    """
    p, lead = spec.prometheus, spec.lead
    md = {
        "serverAddress": p.server_address,
        "query": spec.query,
        "qpsPerReplica": _number(spec.qps_per_replica),
        "tokenQuery": spec.token_query,
        "tokensPerReplica": _number(spec.tokens_per_replica) if spec.token_query else "",
        **_loop_metadata(spec),
        **capacity_metadata(spec.capacity),
        "activationThreshold": _number(spec.activation_threshold),
        "ignoreNullValues": "true" if spec.ignore_null_values else "false",
        "queryParameters": ",".join(f"{k}={v}" for k, v in p.query_parameters),
        "customHeaders": ",".join(f"{k}={v}" for k, v in p.custom_headers),
        "unsafeSsl": "true" if p.unsafe_ssl else "false",
        "timeout": _number(p.timeout_seconds * 1000.0),
        "credentials": p.credentials,
        "metricName": spec.metric_name,
        "coldStartSeconds": _number(lead.cold_start_seconds),
        "coldStartQuery": spec.cold_start_query,
        "bufferSeconds": "" if lead.buffer_override is None else _number(lead.buffer_override),
        "forecastErrorSeconds": "auto" if lead.forecast_error_auto else _number(lead.forecast_error_seconds),
        "schedulingSeconds": _number(lead.scheduling_seconds),
        "readinessSeconds": _number(lead.readiness_seconds),
        "mode": spec.mode,
        "model": spec.model,
        "levelCorrection": _seconds(spec.level_correction_seconds),
        "quantile": _number(spec.quantile),
        "history": _seconds(spec.history_seconds),
        "step": _seconds(spec.step_seconds),
        "refitInterval": _seconds(spec.refit_interval_seconds),
        "minHistory": _seconds(spec.min_history_seconds),
        "headroom": _number(spec.headroom),
        "floorReplicas": str(int(spec.floor_replicas)),
        "holidays": spec.holidays,
        "holidayWindow": str(spec.holiday_window),
        "holidayAs": holiday_as_name(spec.holiday_as),
        "timezone": spec.timezone,
        "eventsFile": spec.events_file,
        "hpaTolerance": _number(spec.hpa_tolerance),
        "tuning": spec.tuning,
        "targetMiss": str(spec.target_miss),
        "maxCostRatio": "none" if spec.max_cost_ratio is None else _number(spec.max_cost_ratio),
        "tuningInterval": _seconds(spec.tuning_interval_seconds),
        "tuningMinHistory": _seconds(spec.tuning_min_history_seconds),
        "refreshInterval": "" if spec.refresh_seconds is None else _seconds(spec.refresh_seconds),
        **(
            {
                "gpuBudget": spec.gpu_budget,
                "gpusPerReplica": _number(spec.gpus_per_replica),
                "valuePerRequest": _number(spec.value_per_request),
                "minReplicaCount": str(spec.min_replica_count),
            }
            if spec.gpu_budget
            else {}
        ),
        **cold_metadata(spec.cold_start_cluster),
    }
    md = {k: v for k, v in md.items() if v != ""}
    if defaults:
        return md
    for key in [k for k in md if k not in ("serverAddress", "query", "qpsPerReplica")]:
        trial = {k: v for k, v in md.items() if k != key}
        try:  # a key another one needs (coldStartWorkload with coldStartFrom: cluster) cannot go
            md = trial if parse_metadata(trial, name=name, namespace=namespace)[0] == spec else md
        except MetadataError:
            pass
    return md

"""A trigger's ``ScalerSpec`` -> the decision's ``PolicyParams``: the one translation, used by the server
(``scaler.serve.workload.Workload.params``) and by the replay of a ScaledObject (``scaler.replay.triggers``).

Trigger metadata becomes a ``ScalerSpec`` in one place (``scaler.spec.parse_metadata``) and the spec becomes the
knobs of ``scaler.policy.decide`` here, so a key the server acts on is a key the replay acts on, with the same
meaning. What differs between the two is only where the inputs come from, and those are arguments: the lead
(the server's T_cold in force may be the probe's or the cluster's; the replay's is coldStartSeconds) and the
user's events (the server re-reads ``eventsFile``; the replay reads the file it was given for it).
"""

from __future__ import annotations

from .feedback import Targets
from .policy import PolicyParams
from .spec import ScalerSpec


def policy_params(
    spec: ScalerSpec, *, lead_seconds: float | None = None, events: tuple = (), capacity_factor: float = 1.0
) -> PolicyParams:
    """The decision's knobs for ``spec``: its mode, quantile, qps per replica, headroom, HPA tolerance, level
    correction and floor (``floorReplicas`` x ``qpsPerReplica``, the hybrid as replayed), the closed loop's targets;
    ``lead_seconds`` (default: the spec's own lead, coldStartSeconds + the buffer) and ``events``
    (``forecaster.eventsfile.Event``) as given. ``capacity_factor``: the configured per-replica capacity / the one in
    force (``capacity: learned``, ``scaler.learned``), a multiplier on the headroom: the plan in the units of
    replicas that really serve less (> 1) or more (< 1) than qpsPerReplica says."""
    return PolicyParams(
        mode=spec.mode,
        lead_seconds=spec.lead.seconds if lead_seconds is None else float(lead_seconds),
        quantile=spec.quantile,
        qps_per_replica=spec.qps_per_replica,
        headroom=spec.headroom * capacity_factor,
        hpa_tolerance=spec.hpa_tolerance,
        level_correction_seconds=spec.level_correction_seconds,
        floor_qps=spec.floor_replicas * spec.qps_per_replica,
        events=tuple(events),
        loop=loop_targets(spec),
    )


def loop_targets(spec: ScalerSpec) -> Targets | None:
    """The closed loop's targets (``queueTarget``, ``ttftTarget``, ``itlTarget``; ``scaler.feedback``); None when
    the trigger sets none (no loop: the answer is the plan's)."""
    lp = spec.loop
    t = Targets(queue=lp.queue_target, ttft=lp.ttft_target, itl=lp.itl_target)
    return t if t.any else None

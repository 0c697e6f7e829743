"""What the world options add to the output, only when one was given (without a cluster, queue or scenario option
nothing here is printed or written): per policy the GPU-node-hours, the latency and the timeouts, the settings of the
world and the scenario checks (``add_world_json``, ``format_world``), and ``backtest --advise``'s ranking with the
ScaledObject of its pick and runner-up (``format_advice``, ``advice_json``, ``advice_manifest``).
"""

from __future__ import annotations

import math

from ..replay import families
from ..replay.advice import DOLLARS
from ..replay.engine import Result
from ..scaledobject import (DEFAULT_SCALER_ADDRESS, PLACEHOLDER_NAME, PLACEHOLDER_QUERY, PLACEHOLDER_SERVER,
                            scaled_object)
from .pools import format_pools, pools_settings
from .render import PLACEHOLDER_NOTES, base_spec, column, json_float, manifest_yaml, with_mtls
from .replayflags import world_flags


def add_world_json(r: Result, doc: dict) -> None:
    """Per policy: gpu_node_hours, p95_latency_seconds, timed_out_fraction...; settings.world; scenario_checks."""
    W = r.settings.world
    if not W.active:
        return
    for name, p in r.policies.items():
        doc["policies"][name].update({k: json_float(v) if isinstance(v, float) else v for k, v in p.world.items()})
    ph = W.phases
    doc["settings"]["world"] = {
        "phases_seconds": None if ph is None else {"scheduling": ph.scheduling, "image_pull": ph.image_pull,
                                                   "container_start": ph.container_start, "pod": ph.pod},
        "prepull": W.prepull,
        "pool": None if W.pool is None else {"gpus_per_node": W.pool.gpus_per_node, "max_nodes": W.pool.max_nodes,
                                             "node_provision_seconds": W.pool.provision_seconds,
                                             "node_idle_seconds": W.pool.idle_seconds},
        "pools": pools_settings(W),
        "overprovision_gpus": W.overprovision_gpus,
        "service_seconds": W.service_seconds,
        "timeout_seconds": W.timeout_seconds,
        "p95_target_seconds": W.p95_target_seconds,
        "scenarios": list(W.scenarios),
    }
    if W.scenarios:
        doc["scenario_checks"] = [dict(c) for c in r.checks]


def format_world(r: Result) -> str:
    """The cluster and latency per policy, and the scenario checks ("" when no world option was given)."""
    W = r.settings.world
    if not W.active:
        return ""
    ph = W.phases
    lines = []
    if ph is not None:
        lines.append(f"cold start  scheduling {ph.scheduling:g}s + image pull {ph.image_pull:g}s"
                     f"{' (pre-pulled: skipped)' if W.prepull else ' (only on nodes without the image)'} + container "
                     f"{ph.container_start:g}s + load and warm-up {ph.pod:g}s")
    if W.pool is not None:
        lines.append(f"node pool   {W.pool.gpus_per_node} GPUs per node, <= {W.pool.max_nodes} nodes, new node up "
                     f"{W.pool.provision_seconds:g}s after a Pending pod, removed after {W.pool.idle_seconds:g}s empty"
                     + (f", {W.overprovision_gpus} placeholder GPUs" if W.overprovision_gpus else ""))
    if W.latency_on:
        lines.append(f"latency     FIFO queue, service {W.service_seconds or 0:g}s per request"
                     + (f", timeout {W.timeout_seconds:g}s" if W.timeout_seconds is not None else ", no timeout"))
    head = f"{'policy':<13}{'missed %':>9}{'replica-h':>11}{'gpu-node-h':>11}{'peak nodes':>11}" \
           f"{'p50 s':>8}{'p95 s':>8}{'p99 s':>8}{'timed out %':>13}"
    lines += ["", head, "-" * len(head)]
    for name, p in r.policies.items():
        w = p.world
        lines.append(f"{name:<13}{100 * p.outcome.underprovisioned_fraction:>9.3f}{p.outcome.replica_hours:>11.1f}"
                     f"{column(w.get('gpu_node_hours', math.nan), 11, 1)}{w.get('peak_nodes', '-'):>11}"
                     f"{column(w.get('p50_latency_seconds', math.nan), 8, 2)}"
                     f"{column(w.get('p95_latency_seconds', math.nan), 8, 2)}"
                     f"{column(w.get('p99_latency_seconds', math.nan), 8, 2)}"
                     f"{column(100 * w.get('timed_out_fraction', math.nan), 13, 3)}")
    lines += format_pools(r)
    if r.checks:
        lines += ["", f"{'policy':<13}{'check':<58}{'value s':>9}{'limit s':>9}  passed", "-" * 96]
        for c in r.checks:
            v = "never" if c["value_seconds"] is None else f"{c['value_seconds']:g}"
            lines.append(f"{c['policy']:<13}{c['check'][:57]:<58}{v:>9}{c['limit_seconds']:>9g}  "
                         f"{'yes' if c['passed'] else 'NO'}")
        lines.append("(scale-out: from the load change until ready capacity covers it for 5 min, negative = ready "
                     "before it; recovery: from a kill until demand is covered again)")
    return "\n".join(lines)


def advice_manifest(o, r: Result, *, server_address: str | None = None, query: str | None = None,
                    name: str | None = None) -> dict | None:
    """The ScaledObject that runs an advice option as it was replayed (``advice.Deploy``): a forescale trigger
    through the family table, or KEDA cron windows; None for an option without one."""
    d = o.deploy
    if d is None:
        return None
    name = name or PLACEHOLDER_NAME
    if d.variant is not None:
        md = families.metadata(d.variant, base_spec(r, server_address=server_address or PLACEHOLDER_SERVER,
                                                    query=query or PLACEHOLDER_QUERY),
                               tolerance=r.tolerance, extra=dict(d.extra))
        md = {"scalerAddress": DEFAULT_SCALER_ADDRESS, **md}
        return with_mtls(scaled_object(md, name=name, min_replicas=d.min_replicas,
                                                max_replicas=d.max_replicas, tolerance=r.tolerance,
                                                replay=world_flags(r)))
    doc = scaled_object({}, name=name, min_replicas=d.min_replicas, max_replicas=d.max_replicas,
                                 tolerance=r.tolerance, replay=world_flags(r))
    doc["spec"]["triggers"] = [{"type": "cron", "metadata": {"timezone": "Etc/UTC", "start": a, "end": b,
                                                             "desiredReplicas": str(n)}} for a, b, n in d.cron]
    return doc


def format_advice(adv, r: Result | None = None, *, server_address: str | None = None,
                  query: str | None = None) -> str:
    """``backtest --advise``: the ranking (each option at its searched knobs), the paragraph, and the YAML of
    the pick and of the runner-up (with ``r``)."""
    from .serveraddr import server_notes

    usd = adv.unit == DOLLARS
    head = (f"{'':2}{'option':<24}{'$':>12}{'GPU-hours':>12}" if usd else f"{'':2}{'option':<24}{adv.unit:>16}") + \
        f"{'missed %':>10}{'p95 s':>8}  {'meets':<6}searched knobs"
    lines = ["", f"cost advice (SLO: {adv.slo})", head, "-" * len(head)]
    for o in adv.options:
        mark = ">" if o is adv.pick else " "
        p95 = "-" if o.p95 is None else f"{o.p95:.2f}"
        cost = f"{o.cost:>12,.0f}{o.gpu_hours or 0.0:>12.1f}" if usd else f"{o.cost:>16.1f}"
        lines.append(f"{mark:<2}{o.policy:<24}{cost}{100 * o.miss:>10.3f}{p95:>8}  "
                     f"{'yes' if o.meets else 'no':<6}{o.detail}")
    lines += ["", adv.paragraph]
    if r is not None:
        ru = adv.runner_up if adv.pick is not None else None
        for what, o in (("pick", adv.pick), ("runner-up", ru)):
            doc = None if o is None else advice_manifest(o, r, server_address=server_address, query=query)
            if o is None or doc is None:
                continue
            notes = server_notes(server_address) if server_address else dict(PLACEHOLDER_NOTES)
            lines += ["", manifest_yaml(doc, [f"--advise {what}: {o.policy} ({o.detail}): {adv.amount(o.cost)}, "
                                              f"missed {100 * o.miss:.3f} %" +
                                              ("" if o.p95 is None else f", P95 {o.p95:.3g} s"),
                                              "replace my-model with your Deployment's name"],
                                        notes=notes).rstrip("\n")]
    return "\n".join(lines)


def advice_json(adv, r: Result | None = None, *, server_address: str | None = None, query: str | None = None) -> dict:
    def manifest(o):
        return None if (o is None or r is None) else advice_manifest(o, r, server_address=server_address, query=query)

    return {"unit": adv.unit, "slo": adv.slo, "pick": adv.pick.policy if adv.pick else None,
            "runner_up": adv.runner_up.policy if adv.runner_up else None,
            "options": [{"policy": o.policy, "cost": o.cost, "gpu_hours": o.gpu_hours, "underprovisioned_fraction": o.miss,
                         "p95_latency_seconds": o.p95, "timed_out_fraction": o.timed_out, "meets_slo": o.meets,
                         "detail": o.detail, "configurations_tried": o.tried, "manifest": manifest(o)}
                        for o in adv.options],
            "paragraph": adv.paragraph}

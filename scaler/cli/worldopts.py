"""The world a replay ranks in, from the command line: the cold-start phases, a GPU node pool (or ``--pools``), the
queue and its latency, scenarios and ``--advise`` (``world_options``, ``cluster_options`` for ``tune``), read into a
``World`` (``world_from_options``); and the ``Settings`` that ``tune`` and its fleet build from them
(``replay_settings``). Bad input exits 2 naming the options."""

from __future__ import annotations

from pathlib import Path

import click

from ..replay.engine import Settings
from .clitypes import FiniteRange, fail
from .options import cold_start_value, compose, target_miss_option


def _cluster_option_list() -> list:
    from ..replay.cluster import Pool
    from .pools import pool_option_list

    pool = Pool()
    return [
        *pool_option_list(),
        click.option("--scheduling-seconds", type=FiniteRange(min=0), default=None, metavar="SECONDS",
                     help="Cold-start phase: scheduling (part of T_cold). [default: the probe's with "
                          "--cold-start-from, else 0]"),
        click.option("--image-pull-seconds", type=FiniteRange(min=0), default=None, metavar="SECONDS",
                     help="Cold-start phase: image pull, paid only on a node without the image (part of T_cold). "
                          "[default: the probe's with --cold-start-from, else 0]"),
        click.option("--container-start-seconds", type=FiniteRange(min=0), default=None, metavar="SECONDS",
                     help="Cold-start phase: container start (part of T_cold). [default: 0]"),
        click.option("--prepull", is_flag=True, help="The image is on every node (the pre-puller DaemonSet): no pull."),
        click.option("--gpus-per-node", type=click.IntRange(min=1), default=None,
                     help="Replay a GPU node pool with this many GPUs per node (one per pod); pods stay Pending "
                          "until a GPU is free. [default: no pool, unlimited GPUs]"),
        click.option("--max-nodes", type=click.IntRange(min=1), default=None,
                     help=f"With --gpus-per-node: the pool's maximum. [default: {pool.max_nodes}]"),
        click.option("--node-provision-seconds", type=FiniteRange(min=0), default=None, metavar="SECONDS",
                     help="With --gpus-per-node: Pending noticed + node boot (GPU nodes: 3-10 min). "
                          f"[default: {pool.provision_seconds:g}]"),
        click.option("--node-idle-seconds", type=FiniteRange(min=0), default=None, metavar="SECONDS",
                     help="With --gpus-per-node: an empty node is removed after this (cluster autoscaler's "
                          f"scale-down-unneeded-time). [default: {pool.idle_seconds:g}]"),
        click.option("--overprovision-gpus", type=click.IntRange(min=0), default=0, show_default=True,
                     help="With --gpus-per-node: placeholder pods of a low PriorityClass always holding this "
                          "many GPUs (real pods preempt them)."),
        click.option("--service-seconds", type=FiniteRange(min=0), default=None, metavar="SECONDS",
                     help="Latency of one request on a free replica; turns on the latency columns. [default: the "
                          "probe's steady p50 with --cold-start-from, else 0 (queueing delay only)]"),
        click.option("--timeout", "timeout_seconds", type=FiniteRange(min=0, min_open=True), default=None,
                     metavar="SECONDS", help="Client timeout: a request waiting longer has failed (timed_out_fraction)."),
        click.option("--p95-target", type=FiniteRange(min=0, min_open=True), default=None, metavar="SECONDS",
                     help="P95 latency target: the scenarios' P95 check, the SLO of --advise, and what tune may pick."),
    ]


CLUSTER_DEFAULTS = {"placeholder_policy": False, "scenario_specs": (), "flat_load": None, "advise": False}


def cluster_options(f):
    """The cluster and queue options of ``world_options`` (for ``tune``: it ranks in that world; without them
    the plain replay). ``world_from_options`` takes them with ``CLUSTER_DEFAULTS`` for the others."""
    return compose(*_cluster_option_list())(f)


def world_options(f):
    """--scheduling-seconds ... --advise: the options of ``world_from_options`` (defaults: off)."""
    from ..replay.scenarios import FORM

    cluster = _cluster_option_list()
    return compose(
        *cluster[:-3],
        click.option("--placeholder-policy", is_flag=True,
                     help="With --gpus-per-node: add the `placeholder` row: predictive plus a placeholder "
                          "Deployment driven by the forecast at lead T_node + T_cold + T_buffer."),
        *cluster[-3:],
        click.option("--scenario", "scenario_specs", multiple=True, metavar="SPEC",
                     help=f"A test before going live (repeatable): {FORM}."),
        click.option("--flat-load", type=FiniteRange(min=0, min_open=True), default=None, metavar="REQ/S",
                     help="Replay a flat synthetic load of this rate (history + span) instead of a trace."),
        click.option("--advise", is_flag=True,
                     help="Rank keep-alive, scheduled, hybrid, reactive and predictive by GPU-node-hours at the "
                          "SLO (--p95-target, else --target-miss) and say which to pick."),
        target_miss_option("With --advise (without --p95-target): the SLO as missed requests"),
    )(f)


def world_from_options(cold: float, cold_start_from: Path | None, o: dict):
    """(T_cold, World) from the options of ``world_options``; exits 2 on bad input."""
    from ..replay.cluster import Phases, Pool
    from ..replay.world import World

    sched, pull, start = o["scheduling_seconds"], o["image_pull_seconds"], o["container_start_seconds"]
    pool_knobs = {"--max-nodes": o["max_nodes"], "--node-provision-seconds": o["node_provision_seconds"],
                  "--node-idle-seconds": o["node_idle_seconds"]}
    needs_pool = [k for k, v in pool_knobs.items() if v is not None]
    if o["overprovision_gpus"]:
        needs_pool.append("--overprovision-gpus")
    if o["placeholder_policy"]:
        needs_pool.append("--placeholder-policy")
    # a node loss without nodes would pass trivially (no pool: nothing to lose)
    needs_pool += [f"--scenario {s}" for s in o["scenario_specs"] if s.strip().lower().startswith("node-loss")]
    has_pool = o["gpus_per_node"] is not None or o.get("pools_file") is not None
    if not has_pool and needs_pool:
        fail(f"{', '.join(needs_pool)} need(s) a node pool: add --gpus-per-node N (or --pools FILE)")
    service = o["service_seconds"]
    latency_on = service is not None or o["timeout_seconds"] is not None or o["p95_target"] is not None \
        or bool(o["scenario_specs"]) or o["advise"]
    wants_phases = any(v is not None for v in (sched, pull, start)) or o["prepull"] or has_pool
    report = None
    if cold_start_from is not None and (wants_phases or (latency_on and service is None)):
        from ..probe.report import load_report

        try:
            report = load_report(cold_start_from)
        except (OSError, ValueError) as e:
            fail(f"--cold-start-from {cold_start_from}: {e}")
    phases = None
    if wants_phases:
        if report is not None:
            pod = float(sum(float(v) for v in report["phases"].values()))
            phases = Phases(float(report["extras"]["scheduling_seconds"]) if sched is None else sched,
                            float(report["extras"]["image_pull_seconds"]) if pull is None else pull,
                            start or 0.0, pod)
            cold = phases.total
        else:
            given = (sched or 0.0) + (pull or 0.0) + (start or 0.0)
            if given > cold + 1e-9:
                fail(f"--scheduling-seconds + --image-pull-seconds + --container-start-seconds = {given:g} s "
                     f"exceed T_cold {cold:g} s (--cold-start is the whole start, the phases are parts of it)")
            phases = Phases(sched or 0.0, pull or 0.0, start or 0.0, cold - given)
    pool = None
    if o["gpus_per_node"] is not None:
        d = Pool()
        pool = Pool(o["gpus_per_node"], o["max_nodes"] or d.max_nodes,
                    d.provision_seconds if o["node_provision_seconds"] is None else o["node_provision_seconds"],
                    d.idle_seconds if o["node_idle_seconds"] is None else o["node_idle_seconds"])
    if service is None and latency_on and report is not None:
        service = float(report["inference"]["steady"]["p50_seconds"])
    if service is None and latency_on:
        service = 0.0
    try:
        from ..replay.scenarios import parse

        for s in o["scenario_specs"]:
            parse(s)
    except ValueError as e:
        fail(f"--scenario: {e}")
    return cold, World(phases=phases, pool=pool, prepull=o["prepull"], overprovision_gpus=o["overprovision_gpus"],
                       placeholder_policy=o["placeholder_policy"], service_seconds=service,
                       timeout_seconds=o["timeout_seconds"], p95_target_seconds=o["p95_target"],
                       scenarios=tuple(o["scenario_specs"]))


def replay_settings(*, cold_start: float | None, cold_start_from: Path | None, cluster: dict, calendar: dict | None,
                    **knobs) -> Settings:
    """The replay's ``Settings`` from the options ``tune`` and its fleet share: T_cold from --cold-start or the
    cluster's start-ups (--cold-start-from), the world of the cluster options, the calendar, and ``knobs``."""
    from .pools import PoolOptionError, with_pools

    cold = cold_start_value(cold_start, cold_start_from)
    cold, world = world_from_options(cold, cold_start_from, {**CLUSTER_DEFAULTS, **cluster})
    try:
        world, cold, knobs["qps_per_replica"] = with_pools(world, cold, knobs["qps_per_replica"], cluster)
    except PoolOptionError as e:
        fail(str(e))
    return Settings(cold_start_seconds=cold, world=world, **knobs, **(calendar or {}))

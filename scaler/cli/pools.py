"""``--pools FILE``, ``--placement`` and ``--lost-request-value``: GPU node pools of types, MIG slices and prices in
the replay's world (``backtest``, ``tune``); the file's format is ``scaler.gpus``'s, the replay ``replay.pools``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from .clitypes import FiniteRange

POOL_DEFAULTS = {"pools_file": None, "placement": None, "lost_request_value": None}


class PoolOptionError(ValueError):
    """A bad pool file or pool option: the caller prints it as the option's error (``options.fail``)."""


def pool_option_list() -> list:
    return [
        click.option("--pools", "pools_file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
                     default=None, metavar="FILE",
                     help="Replay GPU node pools of several types (MIG slices, warm pools, $/GPU-hour) from a pool "
                          "file (docs/gpus.md): replicas placed by its placement rule, GPU-hours and dollars per pool. "
                          "Instead of --gpus-per-node."),
        click.option("--placement", default=None, metavar="POOL[,POOL...]",
                     help="With --pools: where replicas go, preferred first (a pool, or POOL/MIG-PROFILE for a "
                          "slice). [default: the file's placement, else its pools in order]"),
        click.option("--lost-request-value", type=FiniteRange(min=0), default=None, metavar="DOLLARS",
                     help="With --pools: what one missed request costs; adds lost_dollars and total_dollars "
                          "(GPUs + lost requests), and tune ranks by total_dollars."),
    ]


def read_pool_file(path: Path, *, money: bool = False, placement: str | None = None):
    """The pool file at ``path`` and its placement (``replay.pools.Placement``); ``PoolOptionError`` naming what
    is wrong."""
    from ..gpus import PoolError, parse_pool_file
    from ..manifest_yaml import MAX_MANIFEST_BYTES, YamlError, load_all
    from ..replay.pools import from_file

    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(MAX_MANIFEST_BYTES + 1)
        docs = [d for d in load_all(text) if d is not None]
    except (OSError, UnicodeDecodeError) as e:
        raise PoolOptionError(f"--pools {path}: cannot read ({getattr(e, 'strerror', None) or e})")
    except YamlError as e:
        raise PoolOptionError(f"--pools {path}: {e}")
    if len(docs) != 1:
        raise PoolOptionError(f"--pools {path}: {len(docs)} YAML documents; accepted is one (pools, replica, "
                              "placement)")
    keys = tuple(k.strip() for k in placement.split(",") if k.strip()) if placement else ()
    try:
        pf = parse_pool_file(docs[0])
        return pf, from_file(pf, keys, money=money)
    except PoolError as e:
        raise PoolOptionError(f"--pools {path}: {e}")


def with_pools(world, cold: float, qps: float | None, o: dict):
    """(world, T_cold, qps per replica) with the pool file of ``o`` (unchanged without one): the placement in the
    world, T_cold and the HPA's target per replica those of the first pool's replica (its capacity x ``qps``);
    ``PoolOptionError`` on bad input."""
    from ..replay.pools import replica_qps

    path = o.get("pools_file")
    if path is None:
        for k in ("placement", "lost_request_value"):
            if o.get(k) is not None:
                raise PoolOptionError(f"--{k.replace('_', '-')} needs a pool file: add --pools FILE")
        return world, cold, qps
    if o.get("gpus_per_node") is not None:
        raise PoolOptionError("--gpus-per-node and --pools: give one of them (a pool file describes its pools' GPUs "
                              "per node)")
    _, placement = read_pool_file(path, money=o.get("lost_request_value") is not None, placement=o.get("placement"))
    first = placement.first
    if first.cold_start_seconds is not None:
        shared = 0.0 if world.phases is None else world.phases.total - world.phases.pod
        if first.cold_start_seconds < shared - 1e-9:
            raise PoolOptionError(f"--pools {path}: T_cold {first.cold_start_seconds:g} s on {first.name} is shorter "
                                  f"than the scheduling + pull + container phases ({shared:g} s)")
        cold = first.cold_start_seconds
        if world.phases is not None:
            world = replace(world, phases=replace(world.phases, pod=cold - shared))
    # without --qps-per-replica the engine derives a capacity-1 replica's from the peak and scales it alike
    return replace(world, placement=placement, lost_request_value=o.get("lost_request_value")), cold, \
        None if qps is None else replica_qps(qps, placement)


def pools_settings(W) -> dict | None:
    """settings.world.pools of the JSON: each pool of the placement as replayed (None without a pool file)."""
    pl = W.placement
    if pl is None:
        return None
    return {"rule": pl.rule, "qps_scale": pl.qps_scale, "lost_request_value": W.lost_request_value,
            "pools": [{"name": p.name, "replicas_per_node": p.pool.gpus_per_node, "gpus_per_node": p.node_gpus,
                       "max_nodes": p.pool.max_nodes, "node_boot_seconds": p.pool.provision_seconds,
                       "node_idle_seconds": p.pool.idle_seconds, "capacity": p.capacity,
                       "cold_start_seconds": p.cold_start_seconds, "gpu_fraction": p.gpu_fraction,
                       "dollars_per_gpu_hour": None if p.billing is None else p.billing.per_gpu_hour,
                       "warm_nodes": p.pool.warm_nodes, "warm_boot_seconds": p.pool.warm_boot_seconds,
                       "stopped_cost_fraction": None if p.billing is None else p.billing.stopped_fraction,
                       "spot_interruptions_per_node_hour": p.interruptions_per_node_hour} for p in pl.pools]}


def format_pools(r) -> list[str]:
    """The placement and, per policy, GPU-hours and dollars per pool, lost and total dollars ([] without one)."""
    W = r.settings.world
    pl = W.placement
    if pl is None:
        return []
    lines = [f"placement   {pl.rule}: " + " > ".join(
        f"{p.name} ({p.pool.gpus_per_node} replicas/node, <= {p.pool.max_nodes} nodes, boot "
        f"{p.pool.provision_seconds:g}s" + (f", {p.pool.warm_nodes} warm {p.pool.warm_boot_seconds:g}s"
                                            if p.pool.warm_nodes else "")
        + ("" if p.billing is None else f", ${p.billing.per_gpu_hour:g}/GPU-h") + f", x{p.capacity:g})"
        for p in pl.pools)]
    names = [p.name for p in pl.pools]
    lost = W.lost_request_value is not None
    head = f"{'policy':<13}{'missed %':>9}" + "".join(f"{n[:14] + ' gpu-h':>21}{'$':>10}" for n in names) + \
        f"{'gpu-h':>10}{'$ gpus':>11}" + (f"{'$ lost':>11}{'$ total':>11}" if lost else "") + f"{'unplaced h':>11}"
    lines += ["", head, "-" * len(head)]
    for name, p in r.policies.items():
        w = p.world
        row = f"{name:<13}{100 * p.outcome.underprovisioned_fraction:>9.3f}"
        for n in names:
            f = w.get("pools", {}).get(n, {})
            row += f"{f.get('gpu_hours', float('nan')):>21.1f}{_usd(f.get('dollars')):>10}"
        row += f"{w.get('gpu_hours', float('nan')):>10.1f}{_usd(w.get('dollars')):>11}"
        if lost:
            row += f"{_usd(w.get('lost_dollars')):>11}{_usd(w.get('total_dollars')):>11}"
        lines.append(row + f"{w.get('unplaced_replica_hours', 0.0):>11.2f}")
    be = break_even_line(r)
    if be:
        lines.append(be)
    worst = max((p.world.get("unplaced_replica_hours", 0.0), n) for n, p in r.policies.items())
    if worst[0] > 0:
        lines.append(f"(unplaced: replica-hours Pending with every pool at its maxNodes, {worst[0]:.2f} h at most "
                     f"({worst[1]}): raise maxNodes or add a pool)")
    return lines


def break_even_line(r) -> str:
    """The request rate below which waking a replica per request (scale to zero) is cheaper than one kept warm on
    the first pool (``money.break_even``: T_cold, KEDA's cooldownPeriod, the lost request's value); "" unpriced."""
    from ..money import break_even
    from ..scaledobject import COOLDOWN_SECONDS

    W = r.settings.world
    first = W.placement.first
    if first.billing is None:
        return ""
    per_h = first.billing.per_gpu_hour * first.gpu_fraction  # one replica's share of its node
    be = break_even(per_h, r.lead.cold_start_seconds, COOLDOWN_SECONDS, W.lost_request_value)
    return (f"break-even  one warm replica on {first.name} costs ${per_h:.4g}/h; a wake from zero "
            f"(T_cold {r.lead.cold_start_seconds:g}s + cooldownPeriod {COOLDOWN_SECONDS}s"
            + ("" if W.lost_request_value is None else f" + the late request ${W.lost_request_value:g}")
            + f") ${be.wake_dollars:.4g}: below {be.requests_per_hour:.3g} requests per hour scale to zero "
            f"(minReplicaCount 0), above it keep one warm")


def _usd(v) -> str:
    return "-" if v is None else f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"


def deployment_patch(placement, name: str) -> tuple[dict, list[str]]:
    """The Deployment patch that lands replicas where the replay placed them, and its comment lines.

    One pool: its ``nodeSelector``, tolerations and the GPU (or MIG slice) resource. A priority list: a required
    node affinity of any of the pools' labels, preferred in the list's order (weights 100, 50, ...); the cluster
    autoscaler's priority expander (or Karpenter NodePool weights) decides which pool grows. Pools whose replicas
    request different resources cannot share one Deployment: the comment says so, the first pool's is written.
    """
    pools = placement.pools
    first = pools[0]
    spec: dict = {}
    if len(pools) == 1:
        spec["nodeSelector"] = dict(first.node_selector)
    else:
        terms = [{"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in p.node_selector]}
                 for p in pools]
        spec["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": max(1, 100 // (k + 1)), "preference": t} for k, t in enumerate(terms)]}}
    tol: list = []
    for p in pools:
        tol += [dict(t) for t in p.tolerations if dict(t) not in tol]
    if tol:
        spec["tolerations"] = tol
    spec["containers"] = [{"name": "model", "resources": {"limits": {first.resource: str(first.resource_count)}}}]
    comments = [f"Deployment patch: run {name}'s replicas where the replay placed them ({placement.rule}: "
                f"{' > '.join(p.name for p in pools)}); kubectl patch deployment {name} --patch-file THIS",
                "replace model with your container's name; backtest --scaledobject skips this document"]
    kinds = {(p.resource, p.resource_count) for p in pools}
    if len(kinds) > 1:
        comments.append("the pools' replicas request different resources ("
                        + ", ".join(f"{n} {r}" for r, n in sorted(kinds)) + "): one Deployment per pool, each "
                        "with its own ScaledObject; this one is the first pool's")
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"template": {"spec": spec}}}, comments


def pool_keys(path: Path) -> list[str]:
    """Every place a replica can run in the pool file: each pool's whole GPUs, then its MIG slices."""
    from ..gpus import PoolError, choices

    pf, _ = read_pool_file(path)
    try:
        return [c.key for c in choices(pf)]
    except PoolError as e:
        raise PoolOptionError(f"--pools {path}: {e}") from None


def choose_pool(keys: list[str], tune_on) -> tuple[str, object, list[str]]:
    """``tune --choose-pool``: ``tune_on(key)`` (a ``Tuning`` on that one pool or slice) for each key; the pick is
    the cheapest in dollars of those meeting the target (else the lowest miss); returns it and the table."""
    rows = []
    for k in keys:
        t = tune_on(k)
        rows.append((k, t))

    def rank(row):
        p = row[1].selection.point
        if p is None:
            return (2, 0.0, 0.0)
        return (0 if row[1].selection.met else 1, (p.dollars or 0.0) if row[1].selection.met else p.miss,
                p.miss)

    best = min(rows, key=rank)
    head = f"{'':2}{'pool':<18}{'configuration':<44}{'missed %':>10}{'$':>12}  meets"
    lines = ["by pool (tune on each pool or slice alone, the cheapest in dollars meeting the target)", head,
             "-" * len(head)]
    for k, t in rows:
        p = t.selection.point
        mark = ">" if k == best[0] else " "
        if p is None:
            lines.append(f"{mark:<2}{k:<18}{t.selection.message}")
            continue
        lines.append(f"{mark:<2}{k:<18}{p.label[:43]:<44}{100 * p.miss:>10.3f}{_usd(p.dollars):>12}  "
                     f"{'yes' if t.selection.met else 'no'}")
    return best[0], best[1], lines

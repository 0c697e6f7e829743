"""The world a printed ScaledObject was ranked in, carried by the manifest as the annotation ``forescale.io/replay``.

``forescale tune`` (the fleet too, and ``backtest --advise``) ranks a configuration in a world the trigger does not
hold: the simulated span, the replica capacity (requests/s one ready pod serves), T_cold, the traffic's step, the
cold-start phases, the node pool, the queue, the pool file and the cluster's HPA tolerance (``FLAGS``), and ranks the
policy families with a refit cadence, history and model (``TABLE``). ``world_flags`` writes them as the
``forescale backtest`` flags that set them (``--span 7d --qps-per-replica 200 --cold-start 180 --refit 2h``); ``apply``, run by
``backtest --scaledobject`` before anything else, reads them back through the very click options of the command line
(the same types, the same messages), so that the manifest replays to the figures it was ranked with.

The rules (docs/manifest-replay.md, "The world a manifest was tuned in"):

* a flag the command line leaves at its default takes the annotation's value (said on stderr);
* a world flag given that disagrees with an annotation is a loud warning naming both values; the flag wins (a
  what-if); a ``TABLE`` flag given changes only the families' rows: no warning;
* two ScaledObjects whose annotations disagree on a world flag not given are refused (one run replays one world);
* without an annotation's ``--qps-per-replica`` (and without the flag), the replica capacity is the forescale
  triggers' ``qpsPerReplica`` when they all agree (the sustainable rate of one ready replica), said on stderr;
  a trigger whose ``qpsPerReplica`` differs from the capacity replayed is a warning naming both (``capacity_notes``).
"""

from __future__ import annotations

import shlex
from typing import Callable, Mapping

import click
from click.core import ParameterSource

from ..scaledobject import REPLAY_ANNOTATION
from ..spec import DEFAULTS, parse_duration
from ..durations import format_duration
from .clitypes import fail

# annotation flag -> the backtest parameter it sets (the same options as the command line)
FLAGS = {"--span": "span", "--qps-per-replica": "qps_per_replica", "--cold-start": "cold_start", "--step": "prom_step",
         "--scheduling-seconds": "scheduling_seconds", "--image-pull-seconds": "image_pull_seconds",
         "--container-start-seconds": "container_start_seconds", "--prepull": "prepull",
         "--gpus-per-node": "gpus_per_node", "--max-nodes": "max_nodes",
         "--node-provision-seconds": "node_provision_seconds", "--node-idle-seconds": "node_idle_seconds",
         "--overprovision-gpus": "overprovision_gpus", "--service-seconds": "service_seconds",
         "--timeout": "timeout_seconds", "--p95-target": "p95_target", "--pools": "pools_file",
         "--placement": "placement", "--lost-request-value": "lost_request_value", "--hpa-tolerance": "hpa_tolerance"}
# what the policy families of the same table were ranked with (the ScaledObject's row carries its own in the trigger):
# taken when not given, never warned about
TABLE = {"--refit": "refit", "--history": "history", "--model": "model"}
MAX_CHARS = 2000  # an annotation longer than this is not one forescale wrote


def _num(x: float) -> str:
    """The shortest text that reads back as the same double (200.0 -> '200')."""
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


def _duration(seconds: float) -> str:
    text = format_duration(seconds)
    return text if parse_duration(text) == float(seconds) else f"{_num(seconds)}s"


def world_flags(r, pools: Mapping[str, object] | None = None) -> str:
    """The world of result ``r`` as backtest flags: span, replica capacity (of a capacity-1 replica with --pools),
    T_cold, the step when not the default, and the cluster and queue options in force; ``pools``: tune's
    ``pools_file``/``placement``/``lost_request_value`` as given (a pool file is a path: it must be there too)."""
    s, w = r.settings, r.settings.world
    scale = 1.0 if w.placement is None else float(w.placement.qps_scale)
    out = [("--span", _duration(s.span_seconds)), ("--qps-per-replica", _num(r.qps_per_replica / scale)),
           ("--cold-start", _num(s.cold_start_seconds))]
    if float(r.trace.series.step) != parse_duration(DEFAULTS["step"]):
        out.append(("--step", _duration(r.trace.series.step)))
    if s.hpa_tolerance != float(DEFAULTS["hpaTolerance"]):
        out.append(("--hpa-tolerance", _num(s.hpa_tolerance)))
    if w.phases is not None and w.placement is None:
        out += [("--scheduling-seconds", _num(w.phases.scheduling)), ("--image-pull-seconds", _num(w.phases.image_pull)),
                ("--container-start-seconds", _num(w.phases.container_start))]
    if w.prepull:
        out.append(("--prepull", ""))
    if w.pool is not None:
        out += [("--gpus-per-node", str(w.pool.gpus_per_node)), ("--max-nodes", str(w.pool.max_nodes)),
                ("--node-provision-seconds", _num(w.pool.provision_seconds)),
                ("--node-idle-seconds", _num(w.pool.idle_seconds))]
    if w.overprovision_gpus:
        out.append(("--overprovision-gpus", str(w.overprovision_gpus)))
    for flag, v in (("--service-seconds", w.service_seconds), ("--timeout", w.timeout_seconds),
                    ("--p95-target", w.p95_target_seconds)):
        if v is not None:
            out.append((flag, _num(v)))
    for flag, key in (("--pools", "pools_file"), ("--placement", "placement"),
                      ("--lost-request-value", "lost_request_value")):
        v = (pools or {}).get(key)
        if v is not None:
            out.append((flag, _num(v) if isinstance(v, float) else str(v)))
    out.append(("--refit", _duration(s.refit_seconds)))
    if s.history_seconds != parse_duration(DEFAULTS["history"]):
        out.append(("--history", _duration(s.history_seconds)))
    if s.model != DEFAULTS["model"]:
        out.append(("--model", s.model))
    return " ".join(f if v == "" else f"{f} {shlex.quote(v)}" for f, v in out)


def pool_flags(r, cluster: Mapping[str, object]) -> dict:
    """The pool options of the world ``r`` was ranked in, as given (the placement as chosen: --choose-pool's pick),
    for ``world_flags``."""
    w = r.settings.world
    return {"pools_file": cluster.get("pools_file"), "lost_request_value": cluster.get("lost_request_value"),
            "placement": None if w.placement is None else ",".join(q.name for q in w.placement.pools)}


def _parse(text: str, at: str, ctx: click.Context) -> dict[str, tuple[object, str]]:
    """``{flag: (value, as written)}`` of one annotation, each through its backtest option; exit 2 naming it."""
    where = f"{at}: metadata.annotations.{REPLAY_ANNOTATION}"
    if len(text) > MAX_CHARS:
        fail(f"{where}: {len(text)} characters; accepted: the flags forescale writes (under {MAX_CHARS})")
    try:
        words = shlex.split(text)
    except ValueError as e:
        fail(f"{where} {text[:80]!r}: {e}; accepted: backtest flags such as --span 7d --qps-per-replica 200")
    params: dict[str, click.Option] = {o: p for p in ctx.command.params if isinstance(p, click.Option) for o in p.opts}
    out: dict[str, tuple[object, str]] = {}
    i = 0
    while i < len(words):
        flag = words[i]
        p = params.get(flag)
        if flag not in FLAGS and flag not in TABLE or p is None:
            fail(f"{where}: {flag[:40]!r} is not a flag it may carry; accepted: {', '.join([*FLAGS, *TABLE])}")
        raw = ""
        if not p.is_flag:
            if i + 1 >= len(words):
                fail(f"{where}: {flag} without a value")
            raw, i = words[i + 1], i + 1
        try:
            value = True if p.is_flag else p.type_cast_value(ctx, raw)
        except click.BadParameter as e:
            fail(f"{where}: {flag} {raw[:40]!r}: {e.message}")
        out[flag] = (value, raw)
        i += 1
    return out


def _given(ctx: click.Context, name: str, kw: Mapping) -> bool:
    """Whether the command line set ``name`` (or, for T_cold and the capacity, another option that sets it)."""
    if name == "cold_start" and (kw.get("cold_start_from") is not None or kw.get("cold_starts_csv") is not None):
        return True
    if name in ("qps_per_replica", "cold_start"):
        return kw.get(name) is not None  # None by default; --qps-per-replica-from sets qps_per_replica
    return ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def _shown(kw: Mapping, name: str, flag: str) -> str:
    if name == "cold_start" and kw.get(name) is None:
        src = kw.get("cold_start_from") or kw.get("cold_starts_csv")
        return f"T_cold from {src}"
    v = kw.get(name)
    if isinstance(v, float):
        return f"{flag} {_duration(v) if name in ('span', 'prom_step') else _num(v)}"
    return f"{flag} {v}"


def apply(ctx: click.Context, plans: list, kw: dict, say: Callable[[str], None] = lambda m: click.echo(m, err=True)
          ) -> None:
    """``kw`` (the backtest's arguments) with the world of the ScaledObjects' annotations where the command line
    left it at its default, and the capacity from agreeing qpsPerReplica; warnings and refusals as the module says."""
    worlds: dict[str, dict[str, tuple[object, str]]] = {}
    for p in plans:
        if p.replay:
            worlds[p.name] = _parse(p.replay, f"{p.where} (ScaledObject {p.name!r})", ctx)
    took: list[str] = []
    for flag, name in {**FLAGS, **TABLE}.items():
        said = {n: w[flag] for n, w in worlds.items() if flag in w}
        if not said:
            continue
        values = {repr(v) for v, _ in said.values()}
        if _given(ctx, name, kw) and flag in TABLE:
            continue  # the families': the ScaledObject's row does not change
        if _given(ctx, name, kw):
            for so, (v, raw) in said.items():
                if kw.get(name) != v:
                    say(f"warning: ScaledObject {so!r} was ranked with {flag} {raw} ({REPLAY_ANNOTATION}), this run "
                        f"replays {_shown(kw, name, flag)}: its row is not the figures it was ranked with")
            continue
        if len(values) > 1 and flag in TABLE:
            continue  # the families keep the command line's default
        if len(values) > 1:
            fail("the --scaledobject manifests were ranked in different worlds: " + ", ".join(
                f"{so!r} {flag} {raw}" for so, (_, raw) in said.items()) + f"; one run replays one world: give {flag} "
                f"(each ScaledObject's row then replays that)")
        v, raw = next(iter(said.values()))
        kw[name] = v
        took.append(f"{flag} {raw}".rstrip())
    if took:
        say(f"world     {' '.join(took)}: from {REPLAY_ANNOTATION} of ScaledObject "
            f"{', '.join(repr(n) for n in worlds)} (the world it was ranked in; a flag given wins)")
    _capacity(plans, kw, say)


def _targets(plans: list) -> dict[str, float]:
    """``{"SO/trigger": qpsPerReplica}`` of every forescale trigger."""
    return {f"{p.name}/{t.name}": float(t.spec.qps_per_replica) for p in plans for t in p.triggers
            if t.kind == "forescale" and t.spec is not None}


def _capacity(plans: list, kw: dict, say: Callable[[str], None]) -> None:
    """The replica capacity: agreeing qpsPerReplica when nothing set it; a warning for each trigger that disagrees
    with a capacity set (--pools scales the capacity per pool: not compared)."""
    targets = _targets(plans)
    if not targets or kw.get("pools_file") is not None:
        return
    if kw.get("qps_per_replica") is None:
        if len(set(targets.values())) == 1:
            kw["qps_per_replica"] = next(iter(targets.values()))
            say(f"replica   {_num(kw['qps_per_replica'])} req/s per replica: the qpsPerReplica of "
                f"{', '.join(targets)} (--qps-per-replica to replay pods of another capacity)")
        return  # they disagree: derived from the peak, compared after the run (capacity_notes)
    for where, q in targets.items():
        if q != kw["qps_per_replica"]:
            say(f"warning: {where} has qpsPerReplica {_num(q)} (its HPA target), but the replicas replayed serve "
                f"{_num(kw['qps_per_replica'])} req/s each (--qps-per-replica or {REPLAY_ANNOTATION})")


def capacity_notes(plans: list, qps: float) -> list[str]:
    """After a run whose capacity was derived: a warning for each forescale trigger whose qpsPerReplica differs."""
    return [f"warning: {where} has qpsPerReplica {_num(q)} (its HPA target), but the replicas replayed serve "
            f"{_num(qps)} req/s each (derived from the peak: the triggers disagree; --qps-per-replica to set it)"
            for where, q in _targets(plans).items() if q != qps]

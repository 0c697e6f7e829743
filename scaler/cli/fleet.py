"""``forescale tune --by ... --out DIR``: tune every workload of a fleet from one query (or one CSV).

``fleet_options`` adds ``--by``, ``--series-column``, ``--out``, ``--ray`` and
``--gpus-per-replica`` to ``forescale tune`` and sends the call here when any
fleet option is given; a plain ``tune`` is untouched. Each workload is tuned
exactly as ``forescale tune`` tunes one series (``scaler.fleet.jobs``), in a
local process pool or as Ray tasks (``scaler.fleet.executor``), and the
output is one ScaledObject per workload, a kustomization listing them, and
``fleet.json`` with every workload's selection or the reason it has none (the workloads are read by
``scaler.cli.fleetinput``). With ``--gpu-budget``
(``scaler.cli.fleetbudget``) the tuned fleet is then replayed jointly within the budget by both rules
(``scaler.fleet.budgeted``): a section of the table, ``fleet.json``'s ``budget`` and ``DIR/budget.md``.
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path

import click
import numpy as np

from .clitypes import FiniteRange
from .fleetbudget import BUDGET_KEYS, budget_options
from .fleetinput import fleet_workloads
from ..spec import DEFAULTS, parse_duration
from .options import fail, write_json
from .worldopts import replay_settings
from .replayflags import pool_flags

FLEET_KEYS = ("by", "series_column", "out_dir", "ray_address", "gpus_per_replica", "shards") + BUDGET_KEYS
SCALED_OBJECT_NOTE = "replace: your Deployment"


def fleet_options(command):
    """Decorate ``tune_command`` (below ``@click.command``): the fleet options and the dispatch to ``run_fleet``."""

    @functools.wraps(command)
    def dispatch(**kw):
        fleet = {k: kw.pop(k) for k in FLEET_KEYS}
        if fleet["by"] or fleet["series_column"] or fleet["out_dir"] is not None:
            if kw.pop("manifest_path", None) is not None:
                fail("--output writes the one ScaledObject of a single tune; a fleet writes one per workload into "
                     "--out DIR")
            if kw.pop("capacity_model_path", None) is not None or kw.pop("served_model", None) is not None:
                fail("--capacity-model is one model's capacity: accepted with the tune of one workload, not a fleet "
                     "(--by, --series-column)")
            return run_fleet(**kw, **fleet)
        if fleet["ray_address"]:
            fail("--ray runs a fleet: give --by LABELS (with --prometheus) or --series-column COLUMN (with a CSV), "
                 "and --out DIR")
        from .fleetbudget import check

        check(fleet["gpu_budget"], fleet["budget_rule"], fleet["value_per_request"], fleet=False, pools_file=None)
        return command(**kw)

    for opt in reversed([
        click.option("--by", metavar="LABELS", default=None,
                     help="Fleet: with --prometheus, the labels that tell workloads apart (namespace,service); "
                          "the query returns one series per workload, e.g. sum by (namespace, service) (rate(...)).")
        ,
        click.option("--series-column", metavar="COLUMN", default=None,
                     help="Fleet: the CSV's column(s) that tell workloads apart (timestamp,COLUMN,count|qps rows)."),
        click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                     metavar="DIR", help="Fleet: write DIR/<workload>.yaml, DIR/kustomization.yaml, DIR/fleet.json "
                                         "(and the result cache DIR/.cache)."),
        click.option("--ray", "ray_address", metavar="local|auto|ADDRESS", default=None,
                     help="Fleet: run the workloads as Ray tasks: local (a Ray cluster here, --jobs CPUs), auto "
                          "(the cluster `ray start` runs) or its address. Default: a local process pool."),
        click.option("--gpus-per-replica", type=FiniteRange(min=0, min_open=True), default=1.0,
                     show_default=True, help="Fleet: GPUs one replica holds (the totals are in GPU-hours)."),
        click.option("--shards", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Fleet: scaler shards; each ScaledObject's scalerAddress is --scaler-address with {shard} "
                          "replaced by a stable hash of namespace/name modulo this (e.g. forescale-{shard}.forescale"
                          ".svc:6000)."),
        *budget_options(),
    ]):
        dispatch = opt(dispatch)
    return dispatch


def _check_arguments(trace, prometheus_url, report_dir, out_dir, by, series_column, shards, scaler_address) -> None:
    """What a fleet needs of the options (a message naming the accepted ones), and an --out it can write."""
    if out_dir is None:
        fail("a fleet needs --out DIR (one ScaledObject per workload, kustomization.yaml and fleet.json go there)")
    if report_dir is not None:
        fail("--report is for one series; a fleet writes --out DIR (fleet.json holds every workload's figures)")
    if by and series_column:
        fail("give either --by (with --prometheus) or --series-column (with a CSV), not both")
    if by and not prometheus_url:
        fail("--by needs --prometheus URL --query Q (a CSV fleet takes --series-column)")
    if series_column and trace is None:
        fail("--series-column needs a CSV TRACE with columns timestamp, the series column(s) and count or qps")
    if not by and not series_column:
        fail("a fleet needs --by LABELS (with --prometheus) or --series-column COLUMN (with a CSV)")
    if (shards > 1) != ("{shard}" in scaler_address):
        fail(f"--shards {shards} and --scaler-address {scaler_address!r}: several shards need {{shard}} in the "
             f"address (e.g. forescale-{{shard}}.forescale.svc:6000), one shard none")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / ".write-test").touch()
        (out_dir / ".write-test").unlink()
    except OSError as e:
        fail(f"--out {out_dir}: cannot write there ({e.strerror})")


def run_fleet(*, trace, prometheus_url, query, prom_start, prom_end, prom_step, target_miss, max_cost_ratio,
              qps_per_replica, cold_start, cold_start_from, buffer_seconds, model, span, history, refit,
              hpa_tolerance, min_replicas, max_replicas, scaler_address, jobs, json_path, report_dir, progress,
              by, series_column, out_dir, ray_address, gpus_per_replica, shards, gpu_budget=None, budget_rule=None,
              value_per_request=None, calendar=None, **cluster) -> None:
    from ..fleet import executor
    from ..fleet.jobs import Cache, make_job, row, totals
    from ..fleet.workloads import FleetError, names, placeholder_query, screen, shard, workload_query
    from ..replay import variants
    from . import fleetbudget, render

    t0 = time.perf_counter()
    bargs = fleetbudget.check(gpu_budget, budget_rule, value_per_request, fleet=bool(by or series_column),
                              pools_file=cluster.get("pools_file"))
    _check_arguments(trace, prometheus_url, report_dir, out_dir, by, series_column, shards, scaler_address)
    # the same settings as `forescale tune` (worldopts.replay_settings), ranked in the same world
    settings = replay_settings(cold_start=cold_start, cold_start_from=cold_start_from, cluster=cluster,
                               calendar=calendar, qps_per_replica=qps_per_replica, buffer_seconds=buffer_seconds,
                               model=model, history_seconds=history, refit_seconds=refit, span_seconds=span,
                               hpa_tolerance=hpa_tolerance, min_replicas=min_replicas, max_replicas=max_replicas)
    cold = settings.cold_start_seconds
    workloads, source, n_requests = fleet_workloads(settings, trace, series_column, prometheus_url, query, by,
                                                    prom_start, prom_end, prom_step, progress)
    min_history = parse_duration(DEFAULTS["minHistory"])
    grid = variants.Grid()
    ids = names(workloads)
    plan = None if bargs is None else fleetbudget.planned(bargs, [fid for fid, _, _ in ids], settings, gpus_per_replica,
                                                          min_replicas)
    reasons = {w.key: screen(w, min_history) for w in workloads}
    todo = [make_job(w, settings, grid, target_miss, max_cost_ratio) for w in workloads if reasons[w.key] is None]
    tick, close = render.progress_bar("fleet", progress, unit="workload")
    try:
        done = executor.run(todo, cache=Cache(out_dir / ".cache"), ray_address=ray_address, workers=jobs,
                            progress=(lambda t: tick(1, len(todo))) if tick else None)
    except FleetError as err:
        fail(str(err))
    finally:
        close()
    tuned = {t.key: t for t in done}
    entries, rows, files = [], [], []
    for w, (fid, ns, name) in zip(workloads, ids):
        e: dict = {"workload": fid, "labels": w.labels, "hygiene": w.hygiene,
                   "points": int(np.isfinite(w.series.y).sum()), "step_seconds": w.series.step}
        t = tuned.get(w.key)
        if reasons[w.key] is not None:
            e.update(status="not_tuned", reason=reasons[w.key])
        elif t is None or t.error is not None or t.selection is None or t.selection.point is None:
            why = (t.error if t is not None and t.error else
                   t.selection.message if t is not None and t.selection is not None else "not run")
            e.update(status="failed", reason=why)
        else:
            assert t.result is not None  # a selection is made of a result
            md = render.metadata_for(t.selection.point, t.result, server_address=prometheus_url or _placeholder_server(),
                                     query=workload_query(query, w.key) if by else placeholder_query(w.key),
                                     scaler_address=scaler_address.replace("{shard}", str(shard(ns, name, shards))))
            if plan is not None:  # the trigger joins the budget the server holds (DIR/budgets.yaml)
                md.update(fleetbudget.trigger_keys(plan, fid, int(t.selection.point.extra.get("minReplicaCount",
                                                                                               min_replicas))))
            path = out_dir / f"{fid}.yaml"
            text, manifest = scaled_object(t, md, ns, name, min_replicas, max_replicas, placeholders=not by,
                                           server=prometheus_url, pools=pool_flags(t.result, cluster))
            path.write_text(text, encoding="utf-8")
            files.append(path.name)
            r = row(t)
            rows.append((fid, r))
            e.update(status="tuned", file=path.name, cached=t.cached, seconds=round(t.seconds, 3),
                     configurations=len(t.result.points),  # swept and searched, as `tune` counts them
                     selection=render.selection_json(t.selection, t.result, md, manifest),
                     figures=_figures(r, gpus_per_replica), notes=list(t.result.notes))
        entries.append(e)
    (out_dir / "kustomization.yaml").write_text(kustomization(files), encoding="utf-8")
    tot = totals([r for _, r in rows], gpus_per_replica=gpus_per_replica)
    doc = {
        "fleet": {"source": source, "query": query, "by": by, "series_column": series_column,
                  "workloads": len(workloads), "tuned": len(rows),
                  "not_tuned": sum(e["status"] == "not_tuned" for e in entries),
                  "failed": sum(e["status"] == "failed" for e in entries),
                  "backend": f"ray {ray_address}" if ray_address else "local process pool",
                  "range_requests": n_requests,
                  "settings": {"target_miss": str(target_miss), "max_cost_ratio": max_cost_ratio, "model": model,
                               "span_seconds": span, "history_seconds": history, "refit_seconds": refit,
                               "cold_start_seconds": cold, "min_history_seconds": min_history,
                               "hpa_tolerance": hpa_tolerance, "shards": shards},
                  "cached": sum(1 for t in done if t.cached),
                  "timing": {"wall_seconds": round(time.perf_counter() - t0, 3),
                             "task_seconds": round(sum(t.seconds for t in done if not t.cached), 3)}},
        "totals": tot,
        "workloads": entries,
    }
    if plan is not None:
        doc["budget"] = fleetbudget.run(plan, [(fid, tuned[w.key].drive) for w, (fid, _, _) in zip(workloads, ids)
                                               if w.key in tuned and tuned[w.key].drive is not None], out_dir)
    _finish(doc, out_dir, json_path, rows, entries, tot, files)


def _finish(doc: dict, out_dir: Path, json_path, rows, entries, tot: dict, files: list) -> None:
    """fleet.json (and --json), the table (and the budget's), what was written; exit 1 when a workload failed."""
    from . import fleetbudget

    write_json(out_dir / "fleet.json", doc)
    if json_path is not None:
        write_json(json_path, doc)
    click.echo(format_fleet(rows, entries, tot, doc["fleet"]))
    if "budget" in doc:
        click.echo("\n".join(fleetbudget.lines(doc["budget"])))
    click.echo(f"wrote {out_dir}/ ({len(files)} ScaledObjects, kustomization.yaml, fleet.json"
               + (", budget.md, budgets.yaml for forescale serve --budget-file)"
                  if "budget" in doc and "skipped" not in doc["budget"] else ")"))
    failed = [e for e in entries if e["status"] == "failed"]
    if failed:
        click.echo(f"warning: {len(failed)} workload(s) failed; rerun the same command to retry only those "
                   f"(the others come from {out_dir / '.cache'})", err=True)
        raise SystemExit(1)


def _placeholder_server() -> str:
    from ..scaledobject import PLACEHOLDER_SERVER

    return PLACEHOLDER_SERVER


def scaled_object(t, md: dict, namespace: str, name: str, min_replicas: int, max_replicas: int, *,
                  placeholders: bool, server: str | None = None, pools: dict | None = None) -> tuple[str, dict]:
    """One ScaledObject running the workload's selection: its YAML (every metadata value quoted as KEDA wants)
    and the document."""
    from . import render
    from ..scaledobject import AUTHENTICATION_NOTE, PASTE_NOTE
    from .serveraddr import server_notes

    p, sel, r = t.selection.point, t.selection, t.result
    days = (r.sim_end - r.sim_start) / 86400
    comments = [f"forescale tune (fleet) for {t.result.trace.name}: {p.label}",
                f"{sel.message}" + ("" if sel.met else " -- TARGET NOT MET"),
                f"expected: missed {100 * p.miss:.3f} % of requests, {p.outcome.violation_minutes} violation min in "
                f"{days:.2f} d, {p.cost_ratio or float('nan'):.3f}x the oracle's replica-hours "
                f"(T_cold {r.lead.cold_start_seconds:g} s)", f"scaleTargetRef: {SCALED_OBJECT_NOTE}", PASTE_NOTE,
                AUTHENTICATION_NOTE]
    notes = dict(render.PLACEHOLDER_NOTES) if placeholders else server_notes(server)
    doc = render.manifest_for(p, r, md, name=name, namespace=namespace, pools=pools)
    lo = int(p.extra.get("minReplicaCount", min_replicas))
    doc["spec"].update(minReplicaCount=lo, maxReplicaCount=max(int(max_replicas), lo))
    return render.manifest_yaml(doc, comments, notes=notes), doc


def kustomization(files: list[str]) -> str:
    lines = ["# forescale tune (fleet): every tuned workload's ScaledObject", "apiVersion: kustomize.config.k8s.io/v1beta1",
             "kind: Kustomization", "resources:" + ("" if files else " []")]
    lines += [f"  - {json.dumps(f)}" for f in sorted(files)]
    return "\n".join(lines) + "\n"


def _figures(r, g: float) -> dict:
    return {"family": r.family, "label": r.label, "met": r.met, "underprovisioned_fraction": r.miss,
            "cost_ratio": r.cost_ratio, "gpu_hours": g * r.hours, "simulated_days": r.days,
            "reactive_same_miss_gpu_hours": None if r.reactive_same_miss is None else g * r.reactive_same_miss,
            "reactive_same_miss_label": r.reactive_label or None,
            "keep_alive_gpu_hours": None if r.keep_alive is None else g * r.keep_alive,
            "keda_reactive_underprovisioned_fraction": r.keda_miss,
            "keda_reactive_gpu_hours": None if r.keda_hours is None else g * r.keda_hours}


def format_fleet(rows, entries, tot: dict, fleet: dict) -> str:
    """The fleet table (one line per tuned workload), the totals, and the workloads without a selection."""
    w = min(40, max([8] + [len(fid) for fid, _ in rows]))
    head = (f"{'workload':<{w}}  {'chosen':<44}{'missed %':>9}{'x oracle':>9}{'replica-h':>11}"
            f"{'reactive@miss':>14}{'saved':>8}{'keep-alive':>11}")
    lines = [f"fleet     {fleet['workloads']} workloads from {fleet['source']}: {fleet['tuned']} tuned, "
             f"{fleet['not_tuned']} not tuned, {fleet['failed']} failed ({fleet['backend']}, {fleet['cached']} from "
             f"the cache)", "", head, "-" * len(head)]
    for fid, r in rows:
        rh = "-" if r.reactive_same_miss is None else f"{r.reactive_same_miss:.1f}"
        saved = "-" if r.reactive_same_miss is None else f"{r.reactive_same_miss - r.hours:.1f}"
        keep = "-" if r.keep_alive is None else f"{r.keep_alive:.1f}"
        ratio = "-" if r.cost_ratio is None else f"{r.cost_ratio:.3f}"
        mark = "" if r.met else " !"
        lines.append(f"{fid[:w]:<{w}}  {(r.label + mark)[:43]:<44}{100 * r.miss:>9.3f}{ratio:>9}{r.hours:>11.1f}"
                     f"{rh:>14}{saved:>8}{keep:>11}")
    lines.append("(replica-h over each workload's simulated span; reactive@miss: the cheapest reactive configuration "
                 "missing no more; ! = target not met)")
    g = tot["gpus_per_replica"]
    lines += ["",
              f"totals    {tot['gpu_hours']:.1f} GPU-hours ({g:g} GPU/replica) over {tot['simulated_days']:.1f} "
              f"workload-days, {100 * tot['missed_fraction']:.3f} % of requests missed; target met by "
              f"{tot['target_met']} of {tot['workloads_tuned']}",
              f"          vs reactive at the same miss: {tot['saved_vs_reactive_gpu_hours']:.1f} GPU-hours saved "
              f"({tot['reactive_same_miss_gpu_hours']:.1f} -> "
              f"{tot['reactive_same_miss_gpu_hours'] - tot['saved_vs_reactive_gpu_hours']:.1f}, "
              f"{tot['compared_with_reactive']} workloads; reactive cannot reach the miss of "
              f"{tot['reactive_unreachable']})",
              f"          vs keep-alive (a pool for the peak): {tot['saved_vs_keep_alive_gpu_hours']:.1f} GPU-hours "
              f"saved of {tot['keep_alive_gpu_hours']:.1f}"]
    skipped = [e for e in entries if e["status"] != "tuned"]
    if skipped:
        lines.append("")
        for e in skipped:
            lines.append(f"{e['status'].replace('_', ' '):<10}{e['workload']}: {e['reason']}")
    return "\n".join(lines)

"""``forescale tune``: the cheapest configuration that meets a miss target, as trigger metadata.

Runs the frontier sweep (``scaler.replay.engine`` over every family's knobs) on a trace or a Prometheus range
query, searches every family's headroom for the cheapest value meeting the target (``scaler.replay.search``:
those points join the grid's on the frontier, marked "searched"), picks the cheapest configuration whose missed-request fraction is at
most ``--target-miss`` (a fraction, or a multiple of reactive KEDA's miss on
the same replay) within ``--max-cost-ratio`` (else the lowest miss within the cap, said clearly), and prints it as a block to paste
under ``spec.triggers`` of a ScaledObject, with the figures it expects.
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

import click

from ..scaledobject import (AUTHENTICATION_NOTE, DEFAULT_SCALER_ADDRESS, PASTE_NOTE, PLACEHOLDER_NAME, PLACEHOLDER_QUERY,
                           PLACEHOLDER_SERVER, REPLAY_NOTE)
from ..spec import DEFAULTS, MODELS
from .fleet import fleet_options
from .tokenopts import capacity_options, capacity_trigger_keys
from .options import (Duration, calendar_options, check_outputs, fail, hpa_options, load_trace, model_option,
                      replica_options, require_length, source_options, target_options, to_stdout, write_json,
                      write_text)
from .worldopts import cluster_options, replay_settings
from .replayflags import pool_flags



def summary(r, sel, *, server_address: str, query: str, scaler_address: str, placeholders: bool,
            pools: dict | None = None, capacity_file: Path | None = None) -> tuple[str, str]:
    """The human lines and the metadata block (text) for a selection (``capacity_file``: the capacity model
    replayed, which the trigger reads too; ``pools``: the pool options as given, for the world annotation)."""
    from ..replay.families import Family as F
    from ..replay.variants import ANCHORS
    from . import render
    from .serveraddr import server_notes

    days = (r.sim_end - r.sim_start) / 86400
    lines = []
    p = sel.point
    if p is None:
        return sel.message, ""
    verdict = "target met" if sel.met else "TARGET NOT MET"
    if r.reactive_miss is not None:
        lines.append(f"target    missed requests <= {100 * r.target_miss:.3f} %: the asked multiple of reactive KEDA's "
                     f"{100 * r.reactive_miss:.3f} % on this span")
    lines.append(f"chosen    {p.label}: {sel.message} ({verdict})")
    lines.append(f"expected  missed {100 * p.miss:.3f} % of requests, {p.outcome.violation_minutes} violation minutes "
                 f"in {days:.2f} d, {p.cost:.1f} replica-h = {p.cost_ratio:.3f}x oracle, peak {p.outcome.peak_replicas} "
                 f"replicas" + ("" if p.dollars is None else f", ${p.dollars:,.0f} on the pools' GPUs"
                                + (" and lost requests" if r.settings.world.lost_request_value is not None else "")))
    refs = []
    for pt in r.points:
        if pt.policy == F.REACTIVE and pt.variant.headroom == 1.0 and not pt.variant.compensation:
            refs.append(("KEDA's Prometheus scaler", pt))
        elif pt.policy == F.PREDICTIVE and pt.default:
            refs.append(("forescale's default", pt))
    for what, pt in refs:
        if pt is not p:
            lines.append(f"compare   {what} ({pt.label}): missed {100 * pt.miss:.3f} %, "
                         f"{pt.cost_ratio:.3f}x oracle")
    beats = [q for q in r.points if not q.selectable and q.policy in ANCHORS and q.miss <= p.miss and q.cost <= p.cost
             and (q.miss < p.miss or q.cost < p.cost)]
    if beats:
        q = min(beats, key=lambda q: (q.cost, q.miss))
        lines.append(f"beaten    by a published autoscaler's policy forescale cannot run: {q.label} misses "
                     f"{100 * q.miss:.3f} % at {q.cost_ratio:.3f}x oracle")
    hol = holidays_line(r, sel)
    if hol:
        lines.append(hol)
    if not sel.met:
        lines.append("          no swept configuration reaches the target on this traffic: raise --target-miss, "
                     "allow more cost (--max-cost-ratio), or shorten T_cold (forescale probe)")
    md = render.metadata_for(p, r, server_address=server_address, query=query, scaler_address=scaler_address)
    notes = dict(render.PLACEHOLDER_NOTES) if placeholders else server_notes(server_address)
    if capacity_file is not None:
        keys, key_notes = capacity_trigger_keys(capacity_file)
        md.update(keys)
        notes.update(key_notes)
    comments = [f"forescale tune on {r.trace.name}: {sel.message}" + ("" if sel.met else " -- TARGET NOT MET"),
                f"expected: missed {100 * p.miss:.3f} % of requests, {p.outcome.violation_minutes} violation min in "
                f"{days:.2f} d, {p.cost_ratio:.3f}x the oracle's replica-hours (T_cold {r.lead.cold_start_seconds:g} s)",
                f"{p.label}; replace {PLACEHOLDER_NAME} with your Deployment's name; {PASTE_NOTE}",
                AUTHENTICATION_NOTE, REPLAY_NOTE]
    if hol:
        comments.append(hol.split(None, 1)[1])
    if p.extra.get("floorReplicas"):
        comments.append(f"hybrid: floorReplicas and minReplicaCount {p.extra['floorReplicas']} keep that many replicas "
                        f"warm under the forecast, as replayed")
    block = render.manifest_yaml(render.manifest_for(p, r, md, name=PLACEHOLDER_NAME, pools=pools), comments,
                                 notes=notes)
    if r.settings.world.placement is not None:  # where the replicas go, as replayed (a second document)
        from .pools import deployment_patch

        patch, why = deployment_patch(r.settings.world.placement, PLACEHOLDER_NAME)
        block += "---\n" + render.manifest_yaml(patch, why + [
            "replayed by backtest --scaledobject with the same --pools (and --placement)"])
    return "\n".join(lines), block


def _by_pool(cluster: dict, settings_for, tune_on, echo):
    """--choose-pool: ``tune_on`` each pool and slice of --pools alone; the table; the cheapest meeting the target."""
    from .pools import PoolOptionError, choose_pool, pool_keys

    if cluster.get("pools_file") is None:
        fail("--choose-pool needs a pool file: add --pools FILE")
    try:
        keys = pool_keys(cluster["pools_file"])
    except PoolOptionError as e:
        fail(str(e))
    key, tuning, lines = choose_pool(keys, lambda k: tune_on(settings_for({**cluster, "placement": k})))
    echo("\n".join(lines) + f"\n\nthe pick: {key}\n")
    return tuning


def _write_manifest(path: Path | None, block: str, sel, echo) -> None:
    """--output: the printed ScaledObject, comments and all (exit 2 when nothing was chosen); None: not asked."""
    if path is None:
        return
    if not block:
        fail(f"--output {path}: nothing to write: {sel.message}")
    write_text(path, block)
    if not to_stdout(path):
        echo(f"wrote {path}")


def holidays_line(r, sel) -> str:
    """With --holidays: whether the chosen configuration keeps the holiday handling, against the best without it
    (or with it); "" without --holidays or for a choice without a forecast."""
    from ..replay.frontier import select

    p = sel.point
    if not r.settings.holidays or p is None or p.variant.calendar is None:
        return ""
    kept = p.variant.calendar
    other = select([q for q in r.points if q.variant.calendar is (not kept)], sel.target_miss, sel.max_cost_ratio)
    vs = "" if other.point is None else (
        f"; the best {'without' if kept else 'with'} them: {other.point.label}, missed "
        f"{100 * other.point.miss:.3f} % at {other.point.cost_ratio:.3f}x oracle"
        + ("" if other.met else " (target not met)"))
    return (f"holidays  {r.settings.holidays} {'kept: the holiday handling pays off' if kept else 'dropped: the forecast without the holiday handling is as good or better'}"
            f" on this traffic{vs}")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@calendar_options  # --holidays/--holiday-window/--holiday-as/--events: one ``calendar`` dict (fleet too)
@fleet_options  # --by/--series-column/--out/--ray: a whole fleet (scaler/cli/fleet.py)
@source_options(default_start="now-21d")
@target_options
@replica_options
@click.option("--model", callback=model_option, type=click.Choice([m for m in MODELS if m != "auto"]), default=DEFAULTS["model"],
              show_default=True,
              help="Forecast model of the predictive family (linear_trend and seasonal_naive are swept too).")
@click.option("--span", type=Duration(), default="7d", show_default=True,
              help="Simulated span: the last part of the traffic (the time before it is history).")
@click.option("--refit", type=Duration(), default="2h", show_default=True,
              help=f"Refit cadence in simulated time (the server refits every refitInterval, {DEFAULTS['refitInterval']} by "
                   "default; level correction carries the current residual in between, so a slower cadence here "
                   "costs little accuracy and saves time).")
@hpa_options("Your HPA's scale-up tolerance (behavior.scaleUp.tolerance, Kubernetes >= 1.33).")
@click.option("--scaler-address", default=DEFAULT_SCALER_ADDRESS, show_default=True,
              help="scalerAddress to print (the forescale Service).")
@click.option("--jobs", type=click.IntRange(min=1), default=None, help="Worker processes. [default: usable cores, <= 4]")
@click.option("--all", "show_all", is_flag=True, help="Print every swept configuration, not only the Pareto-optimal ones.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path), default=None,
              metavar="PATH", help="Write the frontier, the selection and its metadata as JSON; - for stdout.")
@click.option("-o", "--output", "manifest_path", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
              default=None, metavar="FILE.yaml",
              help="Write the chosen ScaledObject (the YAML printed, with its comments) to this file, for "
                   "`forescale backtest TRACE --scaledobject FILE.yaml` and `kubectl apply -f`; - for stdout (the "
                   "rest then goes to stderr).")
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="Write the report here: index.html (the chosen YAML, the frontier, the family defaults; interactive) "
                   "and PNG plots.")
@click.option("--timeseries", "timeseries_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="CSV", help="Write the per-tick series (demand, observed, and per policy planned, ready, starting, "
                                  "missed) as CSV.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: only on a terminal).")
@click.option("--choose-pool", is_flag=True,
              help="With --pools: tune on each pool and MIG slice of the file alone and pick the cheapest in dollars "
                   "meeting the target (its table, then the pick as usual).")
@cluster_options  # a node pool, cold-start phases, a queue: rank in that world, as backtest --advise does
@capacity_options  # --capacity-model: qpsPerReplica and the token budget from a loadtest grid (scaler.capacity)
def tune_command(trace, prometheus_url, query, prom_start, prom_end, prom_step, target_miss, max_cost_ratio,
                 qps_per_replica, cold_start, cold_start_from, buffer_seconds, model, span, history, refit,
                 hpa_tolerance, min_replicas, max_replicas, scaler_address, jobs, show_all, json_path, report_dir,
                 timeseries_path, progress, choose_pool=False, calendar=None, tokens=None, capacity_file=None,
                 manifest_path=None, **cluster) -> None:
    """Sweep every policy family over its knobs on your traffic and print the cheapest configuration
    that keeps missed requests at or below --target-miss, as ScaledObject trigger metadata.

    TRACE is a CSV `timestamp,count` or `timestamp,qps` (gzip'd is fine); or
    --prometheus URL --query Q [--start --end]; without either, the bundled
    WorldCup98 trace. The figures are those of the same KEDA/HPA emulation
    as `forescale backtest`, on the last --span of the traffic.
    """
    from ..replay import engine
    from ..replay.tune import tune
    from . import render

    t0 = time.perf_counter()
    on_stdout = check_outputs((json_path, "--json"), (timeseries_path, "--timeseries"), (manifest_path, "--output"),
                              (report_dir, "--report", "dir"))
    echo = functools.partial(click.echo, err=on_stdout)  # --json - or --timeseries -: stdout is that document alone
    def settings_for(c: dict):
        return replay_settings(cold_start=cold_start, cold_start_from=cold_start_from, cluster=c,
                               calendar=calendar, qps_per_replica=qps_per_replica, buffer_seconds=buffer_seconds,
                               model=model, history_seconds=history, refit_seconds=refit, span_seconds=span,
                               hpa_tolerance=hpa_tolerance, min_replicas=min_replicas, max_replicas=max_replicas,
                               tokens=tokens)

    settings = settings_for(cluster)
    tr = load_trace(trace, prometheus_url, query, prom_start, prom_end, prom_step, now=time.time())
    require_length(tr, settings)

    from ..replay.fitcache import FitCache

    fits = FitCache() if choose_pool else None  # --choose-pool: the pools' runs share the forecasts' fits

    def tune_on(s):
        tick, close = render.progress_bar("sweep", progress)
        try:
            return tune(tr, s, target_miss, max_cost_ratio, jobs=jobs, progress=tick, fits=fits)
        except engine.ReplayError as e:
            fail(str(e))
        finally:
            close()

    if choose_pool:
        tuning = _by_pool(cluster, settings_for, tune_on, echo)
    else:
        tuning = tune_on(settings)
    r, sel = tuning.result, tuning.selection
    n_pareto = sum(p.pareto for p in r.points)
    echo("\n".join(render.format_table(r).splitlines()[:5]))
    n_searched = sum(p.variant.searched for p in r.points)
    echo(f"swept     {len(r.points) - n_searched} configurations of {len({p.policy for p in r.points})} families "
         f"and searched {n_searched} headroom values for the target in "
         f"{time.perf_counter() - t0:.0f} s; {n_pareto} Pareto-optimal" + ("" if show_all else " (--all for every one)"))
    echo("")
    echo(render.format_frontier(r, only_pareto=not show_all))
    echo("")
    text, block = summary(r, sel, server_address=prometheus_url or PLACEHOLDER_SERVER,
                          query=query or PLACEHOLDER_QUERY, scaler_address=scaler_address, placeholders=not prometheus_url,
                          pools=pool_flags(r, cluster), capacity_file=capacity_file)
    echo(text)
    if block:
        echo("")
        echo(block, nl=False)
    _write_manifest(manifest_path, block, sel, echo)
    if not sel.met:
        click.echo(f"warning: {sel.message}", err=True)
    if tr.attribution:
        echo(f"\ndata: {tr.attribution}")
    if json_path is not None:
        doc = render.to_json(r)
        md = manifest = None
        if sel.point is not None:
            md = render.metadata_for(sel.point, r, server_address=prometheus_url or PLACEHOLDER_SERVER,
                                     query=query or PLACEHOLDER_QUERY, scaler_address=scaler_address)
            manifest = render.manifest_for(sel.point, r, md, name=PLACEHOLDER_NAME, pools=pool_flags(r, cluster))
        doc["frontier"] = render.frontier_json(r)
        doc["selection"] = render.selection_json(sel, r, md, manifest)
        if r.settings.world.placement is not None and sel.point is not None:
            from .pools import deployment_patch

            doc["selection"]["deployment_patch"] = deployment_patch(r.settings.world.placement, PLACEHOLDER_NAME)[0]
            doc["selection"]["placement"] = [q.name for q in r.settings.world.placement.pools]
        doc["timing"]["wall_seconds"] = round(time.perf_counter() - t0, 3)
        write_json(json_path, doc)
        if not to_stdout(json_path):
            echo(f"wrote {json_path}")
    if report_dir is not None:
        from .report import write_report

        echo(f"wrote {write_report(r, report_dir, frontier=True, selection=sel, verb='tune', metadata_yaml=block)}")
    if timeseries_path is not None:
        from .report_html import write_timeseries

        write_timeseries(r, timeseries_path)
        if not to_stdout(timeseries_path):
            echo(f"wrote {timeseries_path}")


if __name__ == "__main__":  # pragma: no cover
    tune_command(sys.argv[1:])

"""``forescale backtest``: the click command (the work is in ``scaler.replay``)."""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

import click

from .clitypes import FiniteRange
from ..replay.engine import Settings
from ..replay.variants import POLICIES as POLICY_NAMES
from ..spec import DEFAULTS, MODELS, format_duration
from .coldstarts import cluster_cold_starts, cold_start_options, sampled_world, wanted
from .replayflags import capacity_notes
from .pools import PoolOptionError, with_pools
from .options import (Duration, calendar_options, check_outputs, cold_start_value, fail, hpa_options, load_trace,
                      model_option, policies_option, replica_options, require_length, source_options, to_stdout,
                      write_json)
from .worldopts import world_from_options, world_options
from .tokenopts import loop_options, token_options
from .scaledobjects import check_series, fetch_missing, load_series, resolve_events, scaledobject_options


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@source_options(default_start="now-16d")
@replica_options
@click.option("--policies", callback=policies_option, default=None, metavar="a,b,...",
              help=f"Policies to compare. [default: all = {','.join(POLICY_NAMES)}]")
@click.option("--model", callback=model_option, type=click.Choice(MODELS), default=DEFAULTS["model"], show_default=True,
              help="Forecast model of the predictive and hybrid policies.")
@click.option("--quantile", type=FiniteRange(0, 1, min_open=True, max_open=True), default=float(DEFAULTS["quantile"]),
              show_default=True,
              help="Forecast quantile to provision for.")
@click.option("--span", type=Duration(), default=format_duration(Settings.span_seconds), show_default=True,
              help="Simulated span: the last part of the trace (the time before it is history).")
@click.option("--sim-start", metavar="TIME", default=None, help="Start the simulated span here instead (ISO-8601 or epoch s).")
@click.option("--refit", type=Duration(), default=DEFAULTS["refitInterval"], show_default=True,
              help="Refit cadence in simulated time (between refits: forecasts from each cutoff with the last fit).")
@hpa_options("The HPA's scale-up tolerance (behavior.scaleUp.tolerance, Kubernetes >= 1.33); the forecast "
             "policies compensate for the same value.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path), default=None,
              metavar="PATH", help="Write the results as JSON (the contract: docs/backtest.md, The JSON contract); - for stdout.")
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="Write the report here: an interactive index.html (plotly, offline, one file) and PNG plots.")
@click.option("--timeseries", "timeseries_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="CSV", help="Write the per-tick series (demand, observed, and per policy planned, ready, starting, "
                                  "missed) as CSV.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: only on a terminal).")
@click.option("--sweep", "do_sweep", is_flag=True,
              help="Sweep every policy family over its knob values (headroom, quantile, level correction, dead-band "
                   "compensation...) and report the miss-vs-cost frontier (JSON `frontier`, frontier_sweep.png); "
                   "every family is swept, --policies does not apply.")
@click.option("--drift", "drift", is_flag=True,
              help="Also replay the server's drift response on the predictive policy (live scores, "
                   "fallback_forecast_drift) and print what it changes.")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="With --sweep: worker processes. [default: usable cores, <= 4]")
@calendar_options
@world_options
@scaledobject_options
@cold_start_options
@token_options
@loop_options
def backtest_command(trace, prometheus_url, query, prom_start, prom_end, prom_step, qps_per_replica, cold_start,
                     cold_start_from, buffer_seconds, policies, model, quantile, span, sim_start, history, refit,
                     hpa_tolerance, min_replicas, max_replicas, json_path, report_dir, timeseries_path, progress,
                     do_sweep, drift, jobs, plans, trigger_series, events_map, calendar=None,
                     tokens=None, token_aware=True, llm_settings=None, **world_opts) -> None:
    """Replay a request trace through KEDA + HPA with cold starts and compare scaling policies.

    TRACE is a CSV with a header `timestamp,count` (requests per interval) or
    `timestamp,qps` (gzip'd is fine); without it (and without --prometheus)
    the bundled WorldCup98 trace is used. Prints SLO misses and replica-hours
    per policy and forecast accuracy; --json and --report write them out.
    """
    from ..replay import engine, variants
    from . import render, render_world

    t0 = time.perf_counter()
    on_stdout = check_outputs((json_path, "--json"), (timeseries_path, "--timeseries"), (report_dir, "--report", "dir"))
    echo = functools.partial(click.echo, err=on_stdout)  # --json - or --timeseries -: stdout is that document alone
    sampled = wanted(cold_start_from, world_opts["cold_starts_csv"])  # --cold-starts, --cold-start-from cluster
    cold = cold_start_value(cold_start, None if sampled else cold_start_from)
    cold, world = world_from_options(cold, None if sampled else cold_start_from, world_opts)
    world, cold, qps_per_replica = _pooled(world, cold, qps_per_replica, world_opts)
    now = time.time()  # the verb's one clock read: now-14d, --sim-start
    sample = starts = None
    if sampled:
        cold, world, sample, starts = sampled_world(cold_start, cold_start_from, world_opts, world, prometheus_url,
                                                    now=now, echo=echo)
    tr = _traffic(trace, prometheus_url, query, prom_start, prom_end, prom_step, world_opts["flat_load"],
                  history + span, now)
    start_at = _sim_start(sim_start, now)
    try:
        settings = engine.Settings(cold_start_seconds=cold, qps_per_replica=qps_per_replica, buffer_seconds=buffer_seconds,
                               model=model, quantile=quantile, history_seconds=history, refit_seconds=refit,
                               span_seconds=span, sim_start=start_at, hpa_tolerance=hpa_tolerance,
                               min_replicas=min_replicas, max_replicas=max_replicas, policies=policies,
                               world=world, tokens=tokens, token_aware=token_aware, **(llm_settings or {}),
                               **(calendar or {}))
    except engine.ReplayError as e:
        fail(str(e))
    require_length(tr, settings)
    plans = resolve_events(plans, events_map, (calendar or {}).get("events"))
    plans = plans if starts is None else cluster_cold_starts(plans, starts)  # coldStartFrom: cluster, as served
    series_by_trigger = fetch_missing(plans, load_series(trigger_series), prometheus_url, tr)
    check_series(plans, series_by_trigger)
    try:  # a scenario after the simulated span would be dropped silently
        from ..replay.scenarios import check_within

        check_within(world.specs(), settings.span_seconds)
    except ValueError as e:
        fail(f"--scenario: {e}")
    tick, close = render.progress_bar("sweep" if do_sweep else "fits", progress)
    try:
        if do_sweep:
            grid = variants.Grid()
            result = engine.run(tr, settings, variants.variants(grid, settings),
                                score=variants.accuracy_models(settings, grid.families), jobs=jobs, progress=tick,
                                scaled_objects=plans, trigger_series=series_by_trigger)
        else:
            result = engine.run(tr, settings, variants.defaults(settings), score=variants.accuracy_models(settings),
                                progress=tick, scaled_objects=plans, trigger_series=series_by_trigger)
    except engine.ReplayError as e:
        fail(str(e))
    finally:
        close()
    _tables(result, echo)
    for line in capacity_notes(plans, result.qps_per_replica) if settings.qps_per_replica is None else ():
        click.echo(line, err=True)  # derived: the triggers' qpsPerReplica disagreed (replayflags)
    adv = _advice(result, world, world_opts["target_miss"], prometheus_url, query, echo) if world_opts["advise"] \
        else None
    drifted = None
    if drift:
        from ..replay.drift import drift_summary, format_summary

        drifted = drift_summary(result)
        echo("\n" + (format_summary(drifted) if drifted is not None else
                     "drift response: not replayed (it needs the predictive policy in --policies)"))
    if do_sweep:
        echo(f"\nfrontier: {len(result.points)} configurations (the table above: each family's default)")
        echo(render.format_frontier(result))
    if tr.attribution:
        echo(f"\ndata: {tr.attribution}")
    if json_path is not None:
        extra = {"frontier": render.frontier_json(result) if do_sweep else None,
                 "cold_starts": sample.summary() if sample is not None else None, "drift": drifted,
                 "advice": None if adv is None else render_world.advice_json(adv, result,
                                                                             server_address=prometheus_url,
                                                                             query=query)}
        _write_json(json_path, result, round(time.perf_counter() - t0, 3), extra, echo)
    if report_dir is not None:
        _write_report(report_dir, result, adv, do_sweep, sample, prometheus_url, query, echo)
    if timeseries_path is not None:
        from .report_html import write_timeseries

        write_timeseries(result, timeseries_path)
        if not to_stdout(timeseries_path):
            echo(f"wrote {timeseries_path}")


def _sim_start(sim_start: str | None, now: float) -> float | None:
    """--sim-start as epoch seconds (None: the span's default start); exits 2 on a bad time."""
    from .traces import parse_time

    if sim_start is None:
        return None
    try:
        return parse_time(sim_start, now=now)
    except ValueError:
        fail(f"--sim-start {sim_start!r}: accepted is an ISO-8601 time (naive = UTC) or epoch seconds")


def _tables(result, echo) -> None:
    """The terminal's tables: the policies, the world's (cluster, queue) and the LLM's (TTFT, ITL, the loop)."""
    from . import render, render_llm, render_world

    echo(render.format_table(result))
    if result.settings.world.active:
        echo("\n" + render_world.format_world(result))
    if result.settings.llm_figures:
        echo("\n" + render_llm.format_llm(result))


def _pooled(world, cold: float, qps: float | None, o: dict):
    """``pools.with_pools``; exits 2 on a bad pool file or option."""
    try:
        return with_pools(world, cold, qps, o)
    except PoolOptionError as e:
        fail(str(e))


def _traffic(trace, prometheus_url, query, prom_start, prom_end, prom_step, flat_load, needed: float, now: float):
    """The traffic replayed: --flat-load's constant rate (history + span + an hour of it), or the trace read."""
    from ..replay import engine

    if flat_load is None:
        return load_trace(trace, prometheus_url, query, prom_start, prom_end, prom_step, now=now)
    if trace is not None or prometheus_url:
        fail("give either TRACE, --prometheus or --flat-load, not more than one")
    from ..replay.scenarios import flat

    return engine.Trace(f"flat {flat_load:g} req/s", flat(flat_load, needed + 3600.0), "synthetic, no gaps",
                        "--flat-load", counts=True)


def _advice(result, world, target, prometheus_url, query, echo):
    """--advise: each option's knobs searched on this trace for --target-miss, printed (``replay.plan``)."""
    from ..replay.plan import plan
    from . import render_world

    reactive = result.policies.get("reactive")
    if target.relative and reactive is None:
        fail(f"--target-miss {target} is relative to reactive's miss: add reactive to --policies, or give a "
             f"fraction such as 0.005")
    miss = target.absolute(reactive.outcome.underprovisioned_fraction if target.relative else 0.0)
    adv = plan(result, world, target_miss=miss)
    echo(render_world.format_advice(adv, result, server_address=prometheus_url, query=query))
    return adv


def _write_json(json_path, result, wall: float, extra: dict, echo) -> None:
    """--json: the contract, the wall time, the world's figures and what the options added (None: left out)."""
    from . import render, render_llm, render_world

    doc = render.to_json(result)
    doc["timing"]["wall_seconds"] = wall
    if extra.get("frontier") is not None:
        doc["frontier"] = extra["frontier"]
    render_world.add_world_json(result, doc)  # after the frontier, before the rest: the keys in the documented order
    render_llm.add_llm_json(result, doc)
    doc.update({k: v for k, v in extra.items() if v is not None and k != "frontier"})
    write_json(json_path, doc)
    if not to_stdout(json_path):
        echo(f"wrote {json_path}")


def _write_report(report_dir, result, adv, do_sweep: bool, sample, prometheus_url, query, echo) -> None:
    """--report: the page and the plots, with the advice's pick as it deploys."""
    from . import render, render_world
    from .report import write_report

    pick = None
    if adv is not None and adv.pick is not None:
        doc = render_world.advice_manifest(adv.pick, result, server_address=prometheus_url, query=query)
        pick = None if doc is None else render.manifest_yaml(doc, [f"--advise pick: {adv.pick.policy} "
                                                                    f"({adv.pick.detail})"])
    echo(f"wrote {write_report(result, report_dir, frontier=do_sweep, metadata_yaml=pick, cold_starts=sample)}")


if __name__ == "__main__":  # pragma: no cover
    backtest_command(sys.argv[1:])

"""``forescale backtest``: the click command (the work is in ``scaler.backtest``)."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import click

from .backtest import POLICIES as POLICY_NAMES
from .spec import DURATION_FORM, MODELS, parse_duration


class Duration(click.ParamType):
    name = "duration"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            return float(value)
        try:
            v = parse_duration(str(value))
        except ValueError:
            self.fail(f"{value!r} is not a duration; accepted: {DURATION_FORM}", param, ctx)
        if v <= 0:
            self.fail(f"{value!r}: accepted is a duration > 0 ({DURATION_FORM})", param, ctx)
        return v


def _policies(ctx, param, value: str | None) -> tuple[str, ...]:
    if value is None or value.strip().lower() == "all":
        return POLICY_NAMES
    names = tuple(dict.fromkeys(p.strip() for p in value.split(",") if p.strip()))
    bad = [p for p in names if p not in POLICY_NAMES]
    if bad or not names:
        raise click.BadParameter(f"unknown policy {', '.join(map(repr, bad)) or '(empty list)'}; accepted: "
                                 f"{', '.join(POLICY_NAMES)} or all, comma-separated", ctx, param)
    return names


def _fail(msg: str) -> None:
    """A bad input: one clear line on stderr and exit code 2 (click's usage-error code)."""
    click.echo(f"Error: {msg}", err=True)
    raise SystemExit(2)


def load_trace(trace: Path | None, prometheus_url: str | None, query: str | None, start: str, end: str,
               step: float):
    """The trace from a CSV, Prometheus or the bundled one (``backtest``'s rules). Exits 2 on bad input."""
    from . import backtest as bt

    if trace is not None and prometheus_url:
        _fail("give either TRACE or --prometheus, not both")
    if prometheus_url and not query:
        _fail("--prometheus needs --query (PromQL returning the request rate in req/s)")
    if query and not prometheus_url:
        _fail("--query needs --prometheus URL")
    try:
        if prometheus_url:
            now = time.time()
            try:
                s, e = bt.parse_time(start, now=now), bt.parse_time(end, now=now)
            except ValueError:
                _fail(f"--start/--end {start!r}/{end!r}: accepted are ISO-8601 times (naive = UTC), "
                      f"epoch seconds, now or now-DURATION")
            return bt.load_prometheus(prometheus_url, query, s, e, step)
        if trace is not None:
            return bt.load_csv(trace)
        return bt.bundled_trace()
    except bt.BacktestError as e:
        _fail(str(e))


def cold_start_value(cold_start: float | None, cold_start_from: Path | None) -> float:
    from . import backtest as bt

    if cold_start is not None and cold_start_from is not None:
        _fail("give either --cold-start or --cold-start-from, not both")
    cold = bt.DEFAULT_COLD_START if cold_start is None else float(cold_start)
    if cold_start_from is not None:
        from .probe.report import read_cold_start

        try:
            cold = float(read_cold_start(cold_start_from))
        except (OSError, ValueError) as e:
            _fail(f"--cold-start-from {cold_start_from}: {e}")
        if not (math.isfinite(cold) and cold >= 0):
            _fail(f"--cold-start-from {cold_start_from}: T_cold {cold!r} is not a number of seconds >= 0")
    return cold


def _compose(*decorators):
    def apply(f):
        for d in reversed(decorators):
            f = d(f)
        return f
    return apply


def source_options(default_start: str):
    """TRACE or --prometheus/--query/--start/--end/--step: the traffic, for backtest and tune."""
    return _compose(
        click.argument("trace", required=False, type=click.Path(dir_okay=False, path_type=Path)),
        click.option("--prometheus", "prometheus_url", metavar="URL",
                     help="Read the traffic from Prometheus (base URL) instead of a file."),
        click.option("--query", metavar="PROMQL",
                     help="With --prometheus: PromQL whose single result is the request rate (req/s)."),
        click.option("--start", "prom_start", metavar="TIME", default=default_start, show_default=True,
                     help="With --prometheus: range start (ISO-8601, epoch seconds, now-DURATION)."),
        click.option("--end", "prom_end", metavar="TIME", default="now", show_default=True,
                     help="With --prometheus: range end."),
        click.option("--step", "prom_step", type=Duration(), default="60s", show_default=True,
                     help="With --prometheus: resolution."),
    )


replica_options = _compose(
    click.option("--qps-per-replica", type=click.FloatRange(min=0, min_open=True), default=None,
                 help="Sustainable req/s of one ready replica (the HPA target). Default: derived so that the "
                      "simulated peak needs about 20 replicas (printed)."),
    click.option("--cold-start", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
                 help="T_cold: seconds from pod creation to ready. [default: 180]"),
    click.option("--cold-start-from", type=click.Path(dir_okay=False, path_type=Path), default=None,
                 metavar="PROBE.json", help="Take T_cold from a `forescale probe --json` report."),
    click.option("--buffer", "buffer_seconds", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
                 help="T_buffer (lead = T_cold + T_buffer). [default: 30 + 60 + 15 = 105, the scaler's defaults]"),
)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@source_options(default_start="now-16d")
@replica_options
@click.option("--policies", callback=_policies, default=None, metavar="a,b,...",
              help=f"Policies to compare. [default: all = {','.join(POLICY_NAMES)}]")
@click.option("--model", type=click.Choice(MODELS), default="prophet", show_default=True,
              help="Forecast model of the predictive and hybrid policies.")
@click.option("--quantile", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.9, show_default=True,
              help="Forecast quantile to provision for.")
@click.option("--span", type=Duration(), default="2d", show_default=True,
              help="Simulated span: the last part of the trace (the time before it is history).")
@click.option("--sim-start", metavar="TIME", default=None, help="Start the simulated span here instead (ISO-8601 or epoch s).")
@click.option("--history", type=Duration(), default="14d", show_default=True, help="Training window before each cutoff.")
@click.option("--refit", type=Duration(), default="30m", show_default=True,
              help="Refit cadence in simulated time (between refits: forecasts from each cutoff with the last fit).")
@click.option("--hpa-tolerance", type=click.FloatRange(0, 1, max_open=True), default=0.1, show_default=True,
              help="The HPA's scale-up tolerance (behavior.scaleUp.tolerance, Kubernetes >= 1.33); the "
                   "forecast policies compensate for the same value.")
@click.option("--min-replicas", type=click.IntRange(min=0), default=0, show_default=True, help="KEDA minReplicaCount.")
@click.option("--max-replicas", type=click.IntRange(min=1), default=100, show_default=True, help="KEDA maxReplicaCount.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="PATH",
              help="Write the results as JSON (DESIGN.md section 5 contract).")
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="Write PNG plots and index.html here.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: only on a terminal).")
@click.option("--sweep", "do_sweep", is_flag=True,
              help="Sweep every policy family over its knob values (headroom, quantile, level correction, dead-band "
                   "compensation...) and report the miss-vs-cost frontier (JSON `frontier`, frontier_sweep.png); "
                   "every family is swept, --policies does not apply.")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="With --sweep: worker processes. [default: usable cores, <= 4]")
def backtest_command(trace, prometheus_url, query, prom_start, prom_end, prom_step, qps_per_replica, cold_start,
                     cold_start_from, buffer_seconds, policies, model, quantile, span, sim_start, history, refit,
                     hpa_tolerance, min_replicas, max_replicas, json_path, report_dir, progress, do_sweep, jobs) -> None:
    """Replay a request trace through KEDA + HPA with cold starts and compare scaling policies.

    TRACE is a CSV with a header `timestamp,count` (requests per interval) or
    `timestamp,qps` (gzip'd is fine); without it (and without --prometheus)
    the bundled WorldCup98 trace is used. Prints SLO misses and replica-hours
    per policy and forecast accuracy; --json and --report write them out.
    """
    from . import backtest as bt

    t0 = time.perf_counter()
    cold = cold_start_value(cold_start, cold_start_from)
    tr = load_trace(trace, prometheus_url, query, prom_start, prom_end, prom_step)
    try:
        start_at = None
        if sim_start is not None:
            try:
                start_at = bt.parse_time(sim_start, now=time.time())
            except ValueError:
                _fail(f"--sim-start {sim_start!r}: accepted is an ISO-8601 time (naive = UTC) or epoch seconds")
        settings = bt.Settings(cold_start_seconds=cold, qps_per_replica=qps_per_replica, buffer_seconds=buffer_seconds,
                               model=model, quantile=quantile, history_seconds=history, refit_seconds=refit,
                               span_seconds=span, sim_start=start_at, hpa_tolerance=hpa_tolerance,
                               min_replicas=min_replicas, max_replicas=max_replicas, policies=policies)
        sweep_result = None
        if do_sweep:
            from . import sweep

            sweep_result = sweep.run(tr, settings, jobs=jobs, progress=progress)
            result = sweep_result.result
        else:
            result = bt.run(tr, settings, progress=progress)
    except bt.BacktestError as e:
        _fail(str(e))
    click.echo(bt.format_table(result))
    if sweep_result is not None:
        click.echo(f"\nfrontier: {len(sweep_result.points)} configurations (the table above: each family's default)")
        click.echo(sweep.format_frontier(sweep_result))
    if tr.attribution:
        click.echo(f"\ndata: {tr.attribution}")
    if json_path is not None:
        doc = bt.to_json(result)
        doc["timing"]["wall_seconds"] = round(time.perf_counter() - t0, 3)
        if sweep_result is not None:
            doc["frontier"] = sweep.frontier_json(sweep_result)
        _write_json(json_path, doc)
        click.echo(f"wrote {json_path}")
    if report_dir is not None:
        from .report import write_report

        index = write_report(result, report_dir, sweep=sweep_result)
        click.echo(f"wrote {index}")


def _write_json(path: Path, doc: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        _fail(f"--json {path}: cannot write ({e.strerror})")


if __name__ == "__main__":  # pragma: no cover
    backtest_command(sys.argv[1:])

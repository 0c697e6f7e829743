"""Options and helpers shared by the verbs: durations, traffic source, replica economics, errors, files."""

from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path

import click

from ..replay.engine import TARGET_PEAK_REPLICAS, ReplayError, Settings
from ..replay.variants import POLICIES as POLICY_NAMES
from ..spec import DEFAULTS, DURATION_FORM, parse_duration
from . import traces


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


def policies_option(ctx, param, value: str | None) -> tuple[str, ...]:
    if value is None or value.strip().lower() == "all":
        return POLICY_NAMES
    names = tuple(dict.fromkeys(p.strip() for p in value.split(",") if p.strip()))
    bad = [p for p in names if p not in POLICY_NAMES]
    if bad or not names:
        raise click.BadParameter(f"unknown policy {', '.join(map(repr, bad)) or '(empty list)'}; accepted: "
                                 f"{', '.join(POLICY_NAMES)} or all, comma-separated", ctx, param)
    return names


def fail(msg: str) -> None:
    """A bad input: one clear line on stderr and exit code 2 (click's usage-error code)."""
    click.echo(f"Error: {msg}", err=True)
    raise SystemExit(2)


def load_trace(trace: Path | None, prometheus_url: str | None, query: str | None, start: str, end: str,
               step: float, *, now: float):
    """The trace from a CSV, Prometheus or the bundled one; ``now`` for ``now-14d``. Exits 2 on bad input."""
    if trace is not None and prometheus_url:
        fail("give either TRACE or --prometheus, not both")
    if prometheus_url and not query:
        fail("--prometheus needs --query (PromQL returning the request rate in req/s)")
    if query and not prometheus_url:
        fail("--query needs --prometheus URL")
    try:
        if prometheus_url:
            try:
                s, e = traces.parse_time(start, now=now), traces.parse_time(end, now=now)
            except ValueError:
                fail(f"--start/--end {start!r}/{end!r}: accepted are ISO-8601 times (naive = UTC), "
                      f"epoch seconds, now or now-DURATION")
            return traces.load_prometheus(prometheus_url, query, s, e, step)
        if trace is not None:
            return traces.load_csv(trace)
        return traces.bundled_trace()
    except ReplayError as e:
        fail(str(e))


def cold_start_value(cold_start: float | None, cold_start_from: Path | None) -> float:
    if cold_start is not None and cold_start_from is not None:
        fail("give either --cold-start or --cold-start-from, not both")
    cold = float(DEFAULTS["coldStartSeconds"]) if cold_start is None else float(cold_start)
    if cold_start_from is not None:
        from ..probe.report import read_cold_start

        try:
            cold = float(read_cold_start(cold_start_from))
        except (OSError, ValueError) as e:
            fail(f"--cold-start-from {cold_start_from}: {e}")
        if not (math.isfinite(cold) and cold >= 0):
            fail(f"--cold-start-from {cold_start_from}: T_cold {cold!r} is not a number of seconds >= 0")
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
        click.option("--step", "prom_step", type=Duration(), default=DEFAULTS["step"], show_default=True,
                     help="With --prometheus: resolution."),
    )


def qps_per_replica_from(f):
    """``--qps-per-replica-from LOADTEST.json``: the recommended qpsPerReplica of a ``forescale loadtest --json``
    result, handed to the command as ``qps_per_replica`` (so the command itself needs no change)."""

    @functools.wraps(f)
    def wrapper(*args, qps_per_replica_from: Path | None = None, **kwargs):
        if qps_per_replica_from is not None:
            if kwargs.get("qps_per_replica") is not None:
                fail("give either --qps-per-replica or --qps-per-replica-from, not both")
            from ..loadtest.report import LoadtestReportError, read_qps_per_replica

            try:
                kwargs["qps_per_replica"] = read_qps_per_replica(qps_per_replica_from)
            except LoadtestReportError as e:
                fail(str(e))
            click.echo(f"qpsPerReplica {kwargs['qps_per_replica']:.4g} from {qps_per_replica_from}", err=True)
        return f(*args, **kwargs)

    return click.option("--qps-per-replica-from", type=click.Path(dir_okay=False, path_type=Path), default=None,
                        metavar="LOADTEST.json",
                        help="Take qpsPerReplica from a `forescale loadtest --json` result (its recommended "
                             "value).")(wrapper)


replica_options = _compose(
    qps_per_replica_from,
    click.option("--qps-per-replica", type=click.FloatRange(min=0, min_open=True), default=None,
                 help="Sustainable req/s of one ready replica (the HPA target). Default: derived so that the "
                      f"simulated peak needs about {TARGET_PEAK_REPLICAS} replicas (printed)."),
    click.option("--cold-start", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
                 help=f"T_cold: seconds from pod creation to ready. [default: {DEFAULTS['coldStartSeconds']}]"),
    click.option("--cold-start-from", type=click.Path(dir_okay=False, path_type=Path), default=None,
                 metavar="PROBE.json", help="Take T_cold from a `forescale probe --json` report."),
    click.option("--buffer", "buffer_seconds", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
                 help="T_buffer (lead = T_cold + T_buffer). [default: the scaler's forecastErrorSeconds + "
                      "schedulingSeconds + readinessSeconds = "
                      f"{Settings().lead().buffer_seconds:g}]"),
)


def hpa_options(tolerance_help: str):
    """--history, --hpa-tolerance, --min-replicas, --max-replicas (defaults: the scaler's and KEDA's)."""
    return _compose(
        click.option("--history", type=Duration(), default=DEFAULTS["history"], show_default=True,
                     help="Training window before each cutoff."),
        click.option("--hpa-tolerance", type=click.FloatRange(0, 1, max_open=True),
                     default=float(DEFAULTS["hpaTolerance"]), show_default=True, help=tolerance_help),
        click.option("--min-replicas", type=click.IntRange(min=0), default=Settings.min_replicas, show_default=True,
                     help="KEDA minReplicaCount."),
        click.option("--max-replicas", type=click.IntRange(min=1), default=Settings.max_replicas, show_default=True,
                     help="KEDA maxReplicaCount."),
    )


def write_json(path: Path, doc: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        fail(f"--json {path}: cannot write ({e.strerror})")

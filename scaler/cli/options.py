"""Options and helpers shared by the verbs: durations, traffic source, replica economics, errors, files."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import click

from ..replay.engine import ReplayError, Settings
from ..replay.prepare import TARGET_PEAK_REPLICAS
from ..replay.variants import POLICIES as POLICY_NAMES
from ..misstarget import COST_CAP_FORM, parse_cost_cap, parse_miss_target
from ..spec import DEFAULTS, DURATION_FORM, parse_duration
from . import traces
from .clitypes import FiniteRange, fail, prometheus_url
from .outputs import check_output, check_outputs, to_stdout, write_json, write_text  # noqa: F401 - the verbs' one import


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


class TargetMiss(click.ParamType):
    """``0.005`` (a fraction of requests) or ``0.5x`` (a multiple of reactive KEDA's miss on the same replay)."""

    name = "target"

    def convert(self, value, param, ctx):
        try:
            return parse_miss_target(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


class CostCap(click.ParamType):
    """A cost ratio in (0, 1000], or ``none``."""

    name = "ratio"

    def convert(self, value, param, ctx):
        if value is None:
            return None
        try:
            return parse_cost_cap(str(value))
        except ValueError:
            self.fail(f"{str(value)[:40]!r}: accepted is {COST_CAP_FORM}", param, ctx)


def target_miss_option(text: str):
    """--target-miss with the metadata's default (targetMiss); ``text`` opens its help."""
    return click.option("--target-miss", type=TargetMiss(), default=DEFAULTS["targetMiss"], show_default=True,
                        help=text + ": a fraction of requests (0.005 = 0.5 %) or a multiple of what reactive KEDA "
                                    "misses on the same traffic (0.5x = half).")


def target_options(f):
    """--target-miss and --max-cost-ratio, with the metadata's defaults (targetMiss, maxCostRatio)."""
    return compose(
        target_miss_option("Largest acceptable missed-request fraction"),
        click.option("--max-cost-ratio", type=CostCap(), default=DEFAULTS["maxCostRatio"], show_default=True,
                     help="Largest acceptable cost, in replica-hours / the oracle's; none: no cap. Nothing meets "
                          "target and cap: the lowest miss within the cap, marked as not meeting the target."),
    )(f)


def policies_option(ctx, param, value: str | None) -> tuple[str, ...]:
    if value is None or value.strip().lower() == "all":
        return POLICY_NAMES
    names = tuple(dict.fromkeys(p.strip() for p in value.split(",") if p.strip()))
    bad = [p for p in names if p not in POLICY_NAMES]
    if bad or not names:
        raise click.BadParameter(f"unknown policy {', '.join(map(repr, bad)) or '(empty list)'}; accepted: "
                                 f"{', '.join(POLICY_NAMES)} or all, comma-separated", ctx, param)
    return names


def model_option(ctx, param, value: str) -> str:
    """--model: mstl and ets need the forescale[models] extra (statsforecast); say so before the run."""
    if value in ("mstl", "ets"):
        from forecaster.models.statsf import missing_models_message, statsforecast_available

        if not statsforecast_available():
            raise click.BadParameter(missing_models_message(value), ctx, param)
    return value


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
            assert query is not None  # --prometheus without --query exited above
            return traces.load_prometheus(prometheus_url, query, s, e, step)
        if trace is not None:
            return traces.load_csv(trace, step=step)
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


def compose(*decorators):
    """The click decorators as one, applied in the order given (the first is the outermost)."""

    def apply(f):
        for d in reversed(decorators):
            f = d(f)
        return f
    return apply


def source_options(default_start: str):
    """TRACE or --prometheus/--query/--start/--end/--step: the traffic, for backtest and tune."""
    return compose(
        click.argument("trace", required=False, type=click.Path(dir_okay=False, path_type=Path)),
        click.option("--prometheus", "prometheus_url", metavar="URL", callback=prometheus_url,
                     help="Read the traffic from Prometheus (base URL) instead of a file."),
        click.option("--query", metavar="PROMQL",
                     help="With --prometheus: PromQL whose single result is the request rate (req/s)."),
        click.option("--start", "prom_start", metavar="TIME", default=default_start, show_default=True,
                     help="With --prometheus: range start (ISO-8601, epoch seconds, now-DURATION)."),
        click.option("--end", "prom_end", metavar="TIME", default="now", show_default=True,
                     help="With --prometheus: range end."),
        click.option("--step", "prom_step", type=Duration(), default=DEFAULTS["step"], show_default=True,
                     help="Resolution of the traffic, as the server's `step`: the Prometheus query's step; a finer "
                          "CSV is averaged to it."),
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


def _holidays(parsed: tuple[str, str | None]) -> str:
    return parsed[0] if parsed[1] is None else f"{parsed[0]}-{parsed[1]}"


def calendar_options(f):
    """``--holidays``, ``--holiday-window``, ``--holiday-as``, ``--timezone``, ``--events``: checked here (exit 2 on
    bad input) and handed to the command as one ``calendar`` dict of ``Settings`` fields (holidays, holiday_window,
    holiday_as, timezone, events)."""

    @functools.wraps(f)
    def wrapper(*args, holidays: str | None = None, holiday_window: int = 0, holiday_as: str = DEFAULTS["holidayAs"],
                timezone: str = DEFAULTS["timezone"], events_path: Path | None = None, **kwargs):
        from forecaster.calendar import CalendarError, check_timezone, parse_holidays_spec, parse_weekday
        from forecaster.eventsfile import check_floors, load_events

        cal: dict = {"holiday_window": int(holiday_window)}
        for flag, key, read in (("--holidays", "holidays", lambda: _holidays(parse_holidays_spec(holidays or ""))),
                                ("--holiday-as", "holiday_as", lambda: parse_weekday(holiday_as)),
                                ("--timezone", "timezone", lambda: check_timezone(timezone)),
                                ("--events", "events", lambda: load_events(str(events_path)))):
            if key == "holidays" and not holidays or key == "events" and events_path is None:
                continue
            try:
                cal[key] = read()
            except CalendarError as e:
                fail(f"{flag}: {e}")
        qps, top = kwargs.get("qps_per_replica"), kwargs.get("max_replicas")
        if cal.get("events") and qps and top:  # a floor the workload cannot reach (given --qps-per-replica)
            try:
                check_floors(cal["events"], top * qps, source=str(events_path))
            except CalendarError as e:
                fail(f"--events: {e} (--max-replicas {top} x --qps-per-replica {qps:g})")
        return f(*args, calendar=cal, **kwargs)

    return compose(
        click.option("--holidays", metavar="CC[-SUB]", default=None,
                     help="Public holidays of a country (US, US-CA, GB, DE-BY), days of --timezone: substituted in the "
                          "history "
                          "(not copied into the next week), forecast by --holiday-as; the accuracy is split into "
                          "ordinary and holiday/event days."),
        click.option("--holiday-window", type=click.IntRange(0, 7), default=int(DEFAULTS["holidayWindow"]),
                     show_default=True, help="Days before and after each holiday treated as holidays too."),
        click.option("--holiday-as", metavar="RULE", default=DEFAULTS["holidayAs"], show_default=True,
                     help="How a holiday ahead is forecast: learned (the effect of the past holidays in the history), "
                          "ordinary, or a weekday (monday ... sunday)."),
        click.option("--timezone", metavar="ZONE", default=DEFAULTS["timezone"], show_default=True,
                     help="IANA time zone whose calendar days the holidays are (America/New_York, Europe/Berlin): "
                          "local midnight to local midnight."),
        click.option("--events", "events_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     metavar="FILE", help="Events file (CSV name,start,end,multiplier,floor_qps or YAML): a multiplier "
                                          "or a floor on the planned rate over [start - L, end]."),
    )(wrapper)


replica_options = compose(
    qps_per_replica_from,
    click.option("--qps-per-replica", type=FiniteRange(min=0, min_open=True), default=None,
                 help="Sustainable req/s of one ready replica (the HPA target). Default: derived so that the "
                      f"simulated peak needs about {TARGET_PEAK_REPLICAS} replicas (printed)."),
    click.option("--cold-start", type=FiniteRange(min=0), default=None, metavar="SECONDS",
                 help=f"T_cold: seconds from pod creation to ready. [default: {DEFAULTS['coldStartSeconds']}]"),
    click.option("--cold-start-from", type=click.Path(dir_okay=False, path_type=Path), default=None,
                 metavar="PROBE.json|cluster", help="Take T_cold from a `forescale probe --json` report, or (backtest) "
                 "`cluster`: sample the start-ups kube-state-metrics recorded in --prometheus (--cold-start-workload)."),
    click.option("--buffer", "buffer_seconds", type=FiniteRange(min=0), default=None, metavar="SECONDS",
                 help="T_buffer (lead = T_cold + T_buffer). [default: the scaler's forecastErrorSeconds + "
                      "schedulingSeconds + readinessSeconds = "
                      f"{Settings().lead().buffer_seconds:g}]"),
)


def hpa_options(tolerance_help: str):
    """--history, --hpa-tolerance, --min-replicas, --max-replicas (defaults: the scaler's and KEDA's)."""
    return compose(
        click.option("--history", type=Duration(), default=DEFAULTS["history"], show_default=True,
                     help="Training window before each cutoff."),
        click.option("--hpa-tolerance", type=FiniteRange(0, 1, max_open=True),
                     default=float(DEFAULTS["hpaTolerance"]), show_default=True, help=tolerance_help),
        click.option("--min-replicas", type=click.IntRange(min=0), default=Settings.min_replicas, show_default=True,
                     help="KEDA minReplicaCount."),
        click.option("--max-replicas", type=click.IntRange(min=1), default=Settings.max_replicas, show_default=True,
                     help="KEDA maxReplicaCount."),
    )


def require_length(tr, settings: Settings) -> None:
    """Exit 2 when the trace is too short for the replay (``traces.check_length`` names the numbers)."""
    try:
        traces.check_length(tr, lead_seconds=settings.lead().seconds, span_seconds=settings.span_seconds,
                            history_seconds=settings.history_seconds)
    except ReplayError as e:
        fail(str(e))

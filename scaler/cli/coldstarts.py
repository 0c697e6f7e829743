"""``backtest --cold-starts FILE.csv`` / ``--cold-start-from cluster``: the replay draws real start-ups.

The past start-ups come from a CSV (one row per pod: ``created,scheduled,started,ready``, epoch
seconds or ISO-8601; a ``pod`` column is optional) or from kube-state-metrics in Prometheus (the
scaler's own query, ``scaler.coldstart_ksm``). They are filtered as the scaler filters them
(``scaler.coldstart.classify``), become a ``StartSample`` each simulated pod draws from (seeded),
and set T_cold -- the lead -- to what the scaler would pick: their ``coldStartQuantile``.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import click

from ..coldstart import PodStart, StartSample, classify
from ..coldstartkeys import ClusterSource, parse_source
from ..spec import DEFAULTS
from .options import fail

COLUMNS = ("created", "scheduled", "started", "ready")
MAX_ROWS = 1_000_000


def cold_start_options(f):
    for opt in reversed((
        click.option("--cold-starts", "cold_starts_csv", type=click.Path(dir_okay=False, path_type=Path),
                     default=None, metavar="FILE.csv",
                     help="Past pod start-ups, one row per pod: created,scheduled,started,ready (epoch s or "
                          "ISO-8601); each simulated pod draws its start from them and T_cold is their "
                          "coldStartQuantile (p90)."),
        click.option("--cold-start-workload", default=None, metavar="KIND/NAME",
                     help="With --cold-start-from cluster: Deployment/NAME or StatefulSet/NAME whose start-ups "
                          "kube-state-metrics recorded."),
        click.option("--cold-start-namespace", default="default", show_default=True, metavar="NS",
                     help="With --cold-start-from cluster: the workload's namespace."),
    )):
        f = opt(f)
    return f


def wanted(cold_start_from: Path | None, cold_starts_csv: Path | None) -> bool:
    return cold_starts_csv is not None or (cold_start_from is not None and str(cold_start_from) == "cluster")


@dataclass(frozen=True)
class Starts:
    """The start-ups read (every pod, before classifying), as of when, and from where: what a ScaledObject's
    ``coldStartFrom: cluster`` is replayed from (``cluster_cold_starts``)."""

    pods: tuple[PodStart, ...]
    as_of: float  # the server's now: the last start-up in a file, the query's end for the cluster
    where: str


def load_sample(cold_start_from, cold_starts_csv, workload, namespace, prometheus_url, *, now: float,
                echo=click.echo) -> tuple[StartSample, Starts]:
    """The start-ups asked for; exits 2 on bad input, naming it."""
    q = float(DEFAULTS["coldStartQuantile"])
    if cold_starts_csv is not None and cold_start_from is not None:
        fail("give either --cold-starts FILE.csv or --cold-start-from, not both")
    if cold_starts_csv is not None:
        pods = read_csv(cold_starts_csv)
        counted, skipped = classify(pods, -math.inf, kind="")
        where = str(cold_starts_csv)
        marks = [m for p in pods for m in (p.created, p.ready) if m is not None]
        as_of = max(marks) if marks else now
    else:
        if not prometheus_url:
            fail("--cold-start-from cluster needs --prometheus URL (the Prometheus that scrapes kube-state-metrics)")
        if workload is None:
            fail("--cold-start-from cluster needs --cold-start-workload Deployment/NAME or StatefulSet/NAME")
        try:
            source = parse_source(lambda k: {"coldStartFrom": "cluster", "coldStartWorkload": workload}.get(k),
                                  DEFAULTS)
        except ValueError as e:
            fail(f"--cold-start-workload {workload!r}: accepted: {getattr(e, 'accepted', e)}")
        assert source is not None  # coldStartFrom cluster
        pods, counted, skipped = read_cluster(source, namespace, prometheus_url, now)
        where, as_of = f"{source.describe()} in {namespace}", now
    try:
        sample = StartSample.from_pods(counted, q)
    except ValueError as e:
        parts = ", ".join(f"{n} {r}" for r, n in skipped.items() if n) or "none at all"
        fail(f"{where}: {e} (skipped: {parts})")
    echo(describe(sample, skipped, where))
    return sample, Starts(tuple(pods), float(as_of), where)


def read_cluster(source: ClusterSource, namespace: str, url: str, now: float):
    from ..coldstart_ksm import KsmShapeError, pods_from_matrix, pods_query, step_for
    from ..prom import PrometheusClient, PromError
    from ..spec import PrometheusTarget

    step = step_for(source.window_seconds)
    try:
        result = PrometheusClient(PrometheusTarget(url.rstrip("/"), timeout_seconds=60.0)).range(
            pods_query(namespace, source, step), now - source.window_seconds, now, step)
        pods = pods_from_matrix(result, source)
    except (PromError, KsmShapeError) as e:
        fail(f"--cold-start-from cluster: {e}")
    return (pods, *classify(pods, now - source.window_seconds, source.kind))


def read_csv(path: Path) -> list[PodStart]:
    from ..replay.engine import ReplayError
    from .traces import parse_time, text_file

    pods = []
    try:  # the trace reader's byte sniffing: gzip, UTF-16, a byte that is not UTF-8 named with its line
        with text_file(Path(path), "a CSV with a header created,scheduled,started,ready (and optionally pod)",
                       "--cold-starts") as plain, open(plain, encoding="utf-8-sig", newline="") as f:
            rows = csv.DictReader(f)
            missing = [c for c in COLUMNS if c not in (rows.fieldnames or [])]
            if missing:
                fail(f"--cold-starts {path}: no column {', '.join(missing)}; accepted: a header "
                     "created,scheduled,started,ready (and optionally pod)")
            for i, row in enumerate(rows, start=2):
                if i > MAX_ROWS:
                    fail(f"--cold-starts {path}: more than {MAX_ROWS} rows")
                marks: list[float | None] = []
                for c in COLUMNS:
                    v = (row.get(c) or "").strip()
                    if not v:
                        marks.append(None)
                        continue
                    try:
                        t = parse_time(v, now=0.0)
                    except ValueError:
                        fail(f"--cold-starts {path} line {i}: {c} {v[:40]!r} is not a time; accepted: epoch seconds "
                             "or ISO-8601")
                    marks.append(t if math.isfinite(t) else None)
                created, scheduled, started, ready = marks  # one per COLUMNS
                pods.append(PodStart(row.get("pod") or f"row{i}", created, scheduled, started, ready))
    except ReplayError as e:
        fail(str(e))
    except (OSError, UnicodeDecodeError, EOFError, csv.Error) as e:
        fail(f"--cold-starts {path}: cannot read ({getattr(e, 'strerror', None) or e})")
    return pods


def describe(sample: StartSample, skipped: dict, where: str) -> str:
    s = sample.summary()
    skip = ", ".join(f"{n} {r}" for r, n in skipped.items() if n)
    return (f"cold starts from {where}: {s['starts']} starts ({s['new_node_starts']} waited for a new node"
            f"{'; skipped: ' + skip if skip else ''}); created->ready p50 {s['p50_seconds']:.0f} s, "
            f"p90 {s['p90_seconds']:.0f} s, p99 {s['p99_seconds']:.0f} s, max {s['max_seconds']:.0f} s; "
            f"T_cold the scaler would pick (p{sample.quantile * 100:g}): {sample.t_cold:.0f} s; each simulated pod "
            "draws its own start")


def sampled_world(cold_start, cold_start_from, o: dict, world, prometheus_url, *, now: float, echo=click.echo):
    """(T_cold, World with the sample, the sample) for backtest; exits 2 on a conflicting option."""
    import dataclasses

    if cold_start is not None:
        fail("give either --cold-start or sampled start-ups (--cold-starts, --cold-start-from cluster), not both")
    fixed = [flag for flag, key in (("--scheduling-seconds", "scheduling_seconds"),
                                    ("--image-pull-seconds", "image_pull_seconds"),
                                    ("--container-start-seconds", "container_start_seconds"), ("--prepull", "prepull"))
             if o.get(key)]
    if fixed:
        fail(f"{', '.join(fixed)}: fixed cold-start phases do not apply to sampled start-ups (each pod draws its whole "
             "start, pull included); drop them or the sampled start-ups")
    sample, starts = load_sample(cold_start_from, o["cold_starts_csv"], o["cold_start_workload"],
                                 o["cold_start_namespace"], prometheus_url, now=now, echo=echo)
    return sample.t_cold, dataclasses.replace(world, phases=None, starts=sample), sample, starts


def cluster_cold_starts(plans: list, starts: Starts) -> list:
    """Each ScaledObject's forescale trigger with ``coldStartFrom: cluster`` leads with the T_cold the server would
    put in force from these start-ups: ``scaler.coldstart.estimate`` over the trigger's own coldStartWindow,
    coldStartQuantile and coldStartMinSamples as of ``starts.as_of``, then ``resolve`` (too few: coldStartSeconds,
    as the server falls back; the replay reads no coldStartQuery): the server's one rule, not a second."""
    from ..coldstart import estimate, resolve
    from ..replay.manifest import with_cold_starts

    def decide(plan, trig) -> tuple[float, str]:
        src, configured = trig.spec.cold_start_cluster, trig.spec.lead.cold_start_seconds
        est = estimate(starts.pods, src, starts.as_of)
        got = resolve(est, "", None, configured)
        if got.source == "cluster":
            return got.seconds, (f"coldStartFrom cluster replayed from {starts.where}: T_cold {got.seconds:.0f}s, the "
                                 f"p{100 * src.quantile:g} of {est.samples} start-ups in its coldStartWindow, as the "
                                 "server computes it")
        return got.seconds, (f"coldStartFrom cluster replayed from {starts.where}: {got.reason}, as the server "
                             f"falls back (T_cold {got.seconds:g}s)")

    return with_cold_starts(plans, decide)

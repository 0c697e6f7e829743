"""``forescale drill``: the real KEDA, HPA, kube-apiserver and KWOK drive forescale and judge the replay."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .clitypes import FiniteRange
from .options import Duration, fail


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--scenarios", default="all", show_default=True, metavar="a,b,...",
              help="Built-in scenarios to run (step, zero, pod-kill, scaler-down, percent, behavior; all), each in "
                   "both of KEDA's cache modes.")
@click.option("--short", is_flag=True, help="The CI's shorter step scenario (16 min of trace time).")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Your own trace (timestamp,count or timestamp,qps), with --scaledobject: drilled instead.")
@click.option("--scaledobject", "manifest_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Your own ScaledObject (one; external forescale and prometheus triggers), with --trace.")
@click.option("--span", type=Duration(), default="1h", show_default=True,
              help="With --trace: the last part of the trace to drill (the time before it is history).")
@click.option("--k", "k", type=FiniteRange(min=1.0), default=5.0, show_default=True,
              help="Time compression: every period (HPA sync, pollingInterval, cooldown, windows, T_cold, "
                   "forescale's clock) divided by k.")
@click.option("--bin-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("build/drill/bin"),
              show_default=True, help="The binaries `make drill-build` made.")
@click.option("--drill-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("drill"),
              show_default=True, help="The wrapper Go modules (where KEDA's CRDs are looked up).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("build/drill"),
              show_default=True, help="report.json and every run's logs, audit log and record go here.")
@click.option("--port-base", type=click.IntRange(1024, 65000), default=16000, show_default=True,
              help="The drill's 14 ports on 127.0.0.1 start here.")
@click.option("--isolate/--no-isolate", default=True, show_default=True,
              help="Run in a network namespace of its own with only the loopback interface (unshare).")
def drill_command(scenarios: str, short: bool, trace_path: Path | None, manifest_path: Path | None, span: float,
                  k: float, bin_dir: Path, drill_dir: Path, out: Path, port_base: int, isolate: bool) -> None:
    """Build nothing, run everything: a local control plane from the binaries `make drill-build` made (etcd,
    kube-apiserver, kube-controller-manager, KWOK, KEDA's operator and adapter), a real Prometheus and
    forescale; each scenario's trace through them k times faster, then `forescale backtest --scaledobject` of
    the same manifests on the same trace. Writes OUT/report.json: per scenario and cache mode the HPA syncs,
    the rule mismatches, the share of ticks within one replica, the pod-seconds ratio and the scale-up lag.
    Exit 0: every check passed; 1: a check failed (the report says which); 2: the drill could not run.
    """
    try:
        from ..drill import procs, report
    except ImportError as e:  # the drill extra (cryptography, psutil) is not in the base install
        fail(f"forescale drill needs the drill extra ({e.name} is not installed): pip install 'forescale[drill]'")

    if isolate and not procs.isolated():
        try:
            sys.exit(procs.reexec_isolated([sys.executable, "-m", "scaler.cli", *sys.argv[1:]]))
        except procs.DrillError as e:
            fail(str(e))
    if (trace_path is None) != (manifest_path is None):
        fail("--trace and --scaledobject go together (your trace drilled with your ScaledObject)")
    try:
        user = _user(trace_path, manifest_path, span) if trace_path and manifest_path else None
        chosen = report.choose(scenarios, short, user)
        doc, ok = report.run_all(chosen, k, out, bin_dir, drill_dir, port_base)
    except procs.DrillError as e:
        fail(str(e))
    click.echo(report.table(doc))
    click.echo(f"wrote {out / 'report.json'}")
    sys.exit(0 if ok else 1)


def _user(trace_path: Path, manifest_path: Path, span: float):
    """The user's trace (read as `backtest` reads it, averaged to 60 s) and their one ScaledObject."""
    from ..drill.scenarios import from_trace
    from ..replay.engine import ReplayError
    from .traces import load_csv

    try:
        tr = load_csv(trace_path, step=60.0)
    except ReplayError as e:
        fail(str(e))
    docs = _scaledobjects(manifest_path)
    if len(docs) != 1:
        fail(f"{manifest_path}: {len(docs)} ScaledObjects; the drill runs one (choose it into a file of its own)")
    return from_trace(docs[0]["metadata"]["name"], tr.series.t, tr.series.y, tr.series.step, docs[0], span)


def _scaledobjects(path: Path) -> list[dict]:
    import yaml

    if not path.is_file():
        fail(f"--scaledobject {path}: no such file")
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict)]
    except yaml.YAMLError as e:
        fail(f"--scaledobject {path}: not valid YAML ({getattr(e, 'problem', None) or 'parse error'})")
    return [d for d in docs if d.get("kind") == "ScaledObject" and str(d.get("apiVersion", "")).startswith("keda.sh/")
            and isinstance(d.get("metadata"), dict) and d["metadata"].get("name")]

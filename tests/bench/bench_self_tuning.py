"""The server's `tuning: auto`: CPU seconds of one selection (= per workload per day at tuningInterval 24h).

Per trace in TRACES_DIR, the job the server builds (``serve.tuning``'s
``TuningJob`` with the defaults of a ScaledObject that sets only
``qpsPerReplica``: its step, history, refit interval, the server's families
and span, targetMiss and maxCostRatio) runs through ``serve.tuning.run_job``
in a fresh process of this tree and of ``--baseline`` (alternately); the CPU
counted is the process's and its children's (Stan), user + system. Prints
both, the ratio new/old, the part of each that is Stan's (the children's CPU: the fits' optimiser) and whether the
selection is the same.

``--days 2`` (the default): two consecutive daily selections (the trace's day before its end, then its end) in
one process, as the server's persistent tuning worker runs them: the first pays the imports and first-time costs
(and, in a tree with a fit cache, makes every fit), the second is the steady-state cost of a day. The data is
what the server fetches (history + span + 1 d) for both trees.

Target (issue 26): <= 5 CPU-seconds per workload per day.

Run: ``PYTHONPATH=. .venv/bin/python tests/bench/bench_self_tuning.py TRACES_DIR --baseline ../bench-base [--only GOOG] [--days N]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

TRACES = [  # name, file, qps per replica (as tests/support/shared_traces.py)
    ("nab_tweets AMZN", "nab_tweets/AMZN_per_5min.csv", 0.25),
    ("nab_tweets GOOG", "nab_tweets/GOOG_per_5min.csv", 0.08),
    ("nab_tweets FB", "nab_tweets/FB_per_5min.csv", 0.2),
    ("servegen_m-small", "servegen_m-small/per_10min.csv", 200.0),
    ("worldcup98", "worldcup98/per_minute.csv", 20.0),
    ("nab_nyc_taxi", "nab_nyc_taxi/per_30min.csv", 1.0),
]
HERE = Path(__file__).resolve().parents[2]


def child(path: str, qps: float, days: int) -> None:
    """In the measured process: build the server's job for this trace and run it, for ``days`` consecutive days
    (the last one ending at the trace's end), as the server's one tuning worker does: one process, its imports
    and first-time costs paid by the first selection, its fit cache (where the tree has one) kept between them."""
    import math

    from scaler.cli import traces
    from scaler.serve import tuning
    from scaler.spec import parse_metadata

    spec, _ = parse_metadata({"serverAddress": "http://p:9090", "query": "q", "qpsPerReplica": f"{qps:g}"})
    tr = traces.load_csv(path, step=spec.step_seconds)
    s = tr.series
    cfg = tuning.TuningConfig()
    # what the server fetches: history + span + a day (the new tree's fetch_seconds), the same data for both trees
    fetch = spec.history_seconds + cfg.span_seconds + 86400.0
    out = []
    for back in range(days - 1, -1, -1):
        end = s.t[-1] + s.step - back * 86400.0
        keep = (s.t > end - fetch) & (s.t < end)
        t, y = s.t[keep], s.y[keep]
        covered = float(t[-1] - t[0] + s.step)
        job = tuning.TuningJob(name=tr.name, t=t, y=y, step=s.step, qps_per_replica=spec.qps_per_replica,
                               cold_start_seconds=spec.lead.cold_start_seconds,
                               buffer_seconds=spec.lead.buffer_seconds,
                               model=spec.model if spec.model != "auto" else "prophet",
                               history_seconds=spec.history_seconds,
                               refit_seconds=max(spec.refit_interval_seconds, cfg.min_refit_seconds),
                               span_seconds=min(cfg.span_seconds, covered / 2),
                               tolerance=tuning.cluster_tolerance(spec),
                               activation_threshold=spec.activation_threshold, target_miss=spec.target_miss,
                               max_cost_ratio=spec.max_cost_ratio, families=cfg.families)
        c0, k0 = _cpu(), _stan_cpu()
        r = tuning.run_job(job)
        out.append({"cpu": _cpu() - c0, "stan": _stan_cpu() - k0, "label": r["label"], "points": r["points"],
                    "days": r["simulated_days"],
                    "nan": math.isnan(r["miss"]), "reused": r.get("fits_reused"), "fits": r.get("fits")})
    print(json.dumps(out))


def _cpu() -> float:
    """This process's and its children's (Stan's) CPU seconds, user + system."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _stan_cpu() -> float:
    """The children's (Stan's) CPU seconds alone, user + system: what the fits' optimiser costs."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


def measure(tree: Path, path: Path, qps: float, days: int) -> list[dict] | dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(path), str(qps), str(days)],
                       cwd=tree, env=env, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout)[-400:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", type=Path)
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--only", default=None)
    ap.add_argument("--days", type=int, default=2, help="consecutive daily selections in one process (default 2)")
    a = ap.parse_args()
    with open("/proc/loadavg") as fh:
        print(f"load average at start: {fh.read().split()[:3]}")
    for i, (name, rel, qps) in enumerate(TRACES):
        path = a.traces / rel
        if (a.only and a.only.lower() not in name.lower()) or not path.is_file():
            continue
        runs = {}
        for kind in (("old", "new") if i % 2 == 0 else ("new", "old")):
            runs[kind] = measure(a.baseline if kind == "old" else HERE, path.resolve(), qps, a.days)
        o, n = runs["old"], runs["new"]
        if isinstance(o, dict) or isinstance(n, dict):
            print(f"{name}: failed: {o.get('error') if isinstance(o, dict) else n.get('error')}")
            continue
        for d, (od, nd) in enumerate(zip(o, n)):
            which = "first (fresh process)" if d == 0 else f"day {d + 1} (same process)"
            reuse = "" if nd.get("reused") is None else f", {nd['reused']}/{nd['fits']} fits reused"
            stan = "" if "stan" not in od else f" (Stan {od['stan']:.1f} / {nd['stan']:.1f})"
            print(f"{name:18s} {which:22s} {nd['days']:.1f} d simulated, {nd['points']} points: CPU old "
                  f"{od['cpu']:6.1f} s, new {nd['cpu']:6.1f} s, new/old {nd['cpu'] / od['cpu']:.2f}{stan}{reuse}; "
                  f"selection "
                  f"{'identical' if od['label'] == nd['label'] else 'DIFFERS: ' + od['label'] + ' -> ' + nd['label']}",
                  flush=True)
    with open("/proc/loadavg") as fh:
        print(f"load average at end: {fh.read().split()[:3]}")


if __name__ == "__main__":
    main()

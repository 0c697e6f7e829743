"""The server's `tuning: auto`: CPU seconds of one selection (= per workload per day at tuningInterval 24h).

Per trace in TRACES_DIR, the job the server builds (``serve.tuning``'s
``TuningJob`` with the defaults of a ScaledObject that sets only
``qpsPerReplica``: its step, history, refit interval, the server's families
and span, targetMiss and maxCostRatio) runs through ``serve.tuning.run_job``
in a fresh process of this tree and of ``--baseline`` (alternately); the CPU
counted is the process's and its children's (Stan), user + system. Prints
both, the ratio new/old and whether the selection is the same.

Target (issue 26): <= 5 CPU-seconds per workload per day.

Run: ``PYTHONPATH=. .venv/bin/python tests/bench/bench_self_tuning.py TRACES_DIR --baseline ../bench-base [--only GOOG]``
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


def child(path: str, qps: float) -> None:
    """In the measured process: build the server's job for this trace and run it."""
    import math

    from scaler.cli import traces
    from scaler.serve import tuning
    from scaler.spec import parse_metadata

    spec, _ = parse_metadata({"serverAddress": "http://p:9090", "query": "q", "qpsPerReplica": f"{qps:g}"})
    tr = traces.load_csv(path, step=spec.step_seconds)
    s = tr.series
    keep = s.t > s.t[-1] - spec.history_seconds
    t, y = s.t[keep], s.y[keep]
    cfg = tuning.TuningConfig()
    covered = float(t[-1] - t[0] + s.step)
    job = tuning.TuningJob(name=tr.name, t=t, y=y, step=s.step, qps_per_replica=spec.qps_per_replica,
                           cold_start_seconds=spec.lead.cold_start_seconds, buffer_seconds=spec.lead.buffer_seconds,
                           model=spec.model if spec.model != "auto" else "prophet",
                           history_seconds=spec.history_seconds,
                           refit_seconds=max(spec.refit_interval_seconds, cfg.min_refit_seconds),
                           span_seconds=min(cfg.span_seconds, covered / 2), tolerance=tuning.cluster_tolerance(spec),
                           activation_threshold=spec.activation_threshold, target_miss=spec.target_miss,
                           max_cost_ratio=spec.max_cost_ratio, families=cfg.families)
    out = tuning.run_job(job)
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    print(json.dumps({"cpu": cpu, "label": out["label"], "points": out["points"], "days": out["simulated_days"],
                      "nan": math.isnan(out["miss"])}))


def measure(tree: Path, path: Path, qps: float) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(path), str(qps)], cwd=tree,
                       env=env, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout)[-400:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], float(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", type=Path)
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--only", default=None)
    a = ap.parse_args()
    with open("/proc/loadavg") as fh:
        print(f"load average at start: {fh.read().split()[:3]}")
    for i, (name, rel, qps) in enumerate(TRACES):
        path = a.traces / rel
        if (a.only and a.only.lower() not in name.lower()) or not path.is_file():
            continue
        runs = {}
        for kind in (("old", "new") if i % 2 == 0 else ("new", "old")):
            runs[kind] = measure(a.baseline if kind == "old" else HERE, path.resolve(), qps)
        o, n = runs["old"], runs["new"]
        if "error" in o or "error" in n:
            print(f"{name}: failed: {o.get('error') or n.get('error')}")
            continue
        print(f"{name:18s} {n['days']:.1f} d simulated, {n['points']} points: CPU old {o['cpu']:6.1f} s, "
              f"new {n['cpu']:6.1f} s, new/old {n['cpu'] / o['cpu']:.2f}; selection "
              f"{'identical' if o['label'] == n['label'] else 'DIFFERS: ' + o['label'] + ' -> ' + n['label']}",
              flush=True)
    with open("/proc/loadavg") as fh:
        print(f"load average at end: {fh.read().split()[:3]}")


if __name__ == "__main__":
    main()

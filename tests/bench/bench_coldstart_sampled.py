"""Sampled start-ups vs one fixed T_cold, on the bundled WorldCup98 trace (docs/cold-start.md, "Measured").

The start-ups: 200 synthetic pods (seeded) shaped like a GPU pool's: 80 % land on a node with a free GPU
(scheduling 1-8 s, container start 1-3 s, load + warm-up 70-130 s), 20 % wait for a new node (scheduling
240-420 s, then the image pull on the fresh node 30-60 s on top of the load). The scaler's T_cold is their
p90. Three replays per model, each with the lead L = p90 + 105 s:

* fixed p90: every pod takes the p90 (what the replay did before: one number);
* sampled: each pod draws its own start from the 200 (``--cold-starts``), no node pool;
* fixed p50: every pod takes the median (a T_cold typed from a warm-node measurement), lead p50 + 105 s;
* with a node pool (8 GPUs per node, a node boots in 330 s): every pod takes the p90 on top of any node
  boot (fixed), against each pod drawing a warm-node start, or a new-node one after the pool's boot.

Prints, per policy, the missed-request fraction and replica-hours of each. Run:
``PYTHONPATH=. .venv/bin/python tests/bench/bench_coldstart_sampled.py [--model seasonal_naive]``
(seconds with seasonal_naive; prophet: minutes).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def write_starts(path: Path, n: int = 200, seed: int = 23) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t, totals = 1_760_000_000.0, []
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["pod", "created", "scheduled", "started", "ready"])
        for i in range(n):
            t += float(rng.uniform(600, 7200))
            new = rng.random() < 0.2
            sched = float(rng.uniform(240, 420)) if new else float(rng.uniform(1, 8))
            start = float(rng.uniform(1, 3))
            ready = float(rng.uniform(70, 130)) + (float(rng.uniform(30, 60)) if new else 0.0)
            w.writerow([f"p{i}", f"{t:.3f}", f"{t + sched:.3f}", f"{t + sched + start:.3f}",
                        f"{t + sched + start + ready:.3f}"])
            totals.append(sched + start + ready)
    return np.asarray(totals)


def backtest(args: list[str], out: Path) -> dict:
    cmd = [sys.executable, "-m", "scaler.cli", "backtest", *args, "--json", str(out), "--no-progress"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="seasonal_naive")
    ap.add_argument("--policies", default="reactive,predictive")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        totals = write_starts(d / "starts.csv")
        p50, p90 = float(np.quantile(totals, 0.5)), float(np.quantile(totals, 0.9))
        common = ["--policies", a.policies, "--model", a.model, "--qps-per-replica", "200"]
        runs = {
            f"fixed p90 ({p90:.0f} s)": backtest(common + ["--cold-start", f"{p90!r}"], d / "a.json"),
            "sampled": backtest(common + ["--cold-starts", str(d / "starts.csv")], d / "b.json"),
            f"fixed p50 ({p50:.0f} s)": backtest(common + ["--cold-start", f"{p50!r}"], d / "c.json"),
        }
        pool = ["--gpus-per-node", "8", "--node-provision-seconds", "330"]
        runs["pool, fixed p90"] = backtest(common + pool + ["--cold-start", f"{p90!r}"], d / "d.json")
        runs["pool, sampled"] = backtest(common + pool + ["--cold-starts", str(d / "starts.csv")], d / "e.json")
    print(f"start-ups: {len(totals)}, p50 {p50:.0f} s, p90 {p90:.0f} s, max {totals.max():.0f} s; model {a.model}")
    print(f"{'policy':12s} {'run':22s} {'missed %':>9s} {'replica-h':>10s} {'gpu-node-h':>12s}")
    for pol in a.policies.split(","):
        for name, doc in runs.items():
            p = doc["policies"][pol]
            node_h = p.get("gpu_node_hours")
            print(f"{pol:12s} {name:22s} {100 * p['underprovisioned_fraction']:9.3f} {p['replica_hours']:10.1f}"
                  + (f" {node_h:12.1f}" if node_h is not None else ""))


if __name__ == "__main__":
    main()

"""A fleet GPU budget at 70 % of the unconstrained fleet peak: value-weighted arbitration against the equal share.

Two fleets, each tuned and replayed exactly as ``forescale tune --series-column workload --out DIR --gpu-budget 70%
--value-per-request FILE`` does it (the command itself, in this process):

* **bundled**: the bundled WorldCup98 trace (28 days, 1 min) split into its four weeks, each week one workload,
  re-timed onto the last week's dates (so the four run at once: the build-up weeks are quiet, the tournament's
  loud);
* **shared**: four 10-day windows of the shared WorldCup98 trace (87 days) ending on days 86, 79, 72 and 65 of it
  (whole weeks apart, so weekdays line up), each re-timed onto the last window's dates.

Each workload's requests have a value of their own (``VALUES``, $ per lost request: the loudest workload's are the
cheapest). Every workload is tuned alone (``--model seasonal_naive`` for speed: the selection picks among every
family), then the fleet is replayed jointly three times: without a budget (its peak sets the budget: 70 %, rounded
down), within it by the value rule and by the equal share. Printed: per fleet the budget, the peak held by each rule
(never above the budget: the replay checks it at every tick), the requests and value lost above the unconstrained
replay by each rule, and the ratio value / equal.

Run: ``.venv/bin/python tests/bench/bench_budget.py [--span 2d] [--jobs 2] [--traces DIR]``
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path

import numpy as np

WEEK = 7 * 86400
VALUES = (0.004, 0.002, 0.001, 0.0005)  # $ per lost request of workloads w1..w4 (w4: the loudest, the cheapest)


def read_counts(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``timestamp,count`` per minute (gzip or not) -> epoch seconds, counts."""
    from datetime import datetime, timezone

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        rows = [ln.strip().split(",") for ln in f.readlines()[1:] if ln.strip()]
    t = np.array([datetime.fromisoformat(a).replace(tzinfo=timezone.utc).timestamp() for a, _ in rows])
    return t, np.array([float(b) for _, b in rows])


def bundled_fleet() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    from scaler.cli.traces import BUNDLED_TRACE

    t, y = read_counts(Path(BUNDLED_TRACE))
    per = 7 * 1440
    return {f"w{k + 1}": (t[k * per:(k + 1) * per] + (3 - k) * WEEK, y[k * per:(k + 1) * per]) for k in range(4)}


def shared_fleet(traces: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    t, y = read_counts(traces / "worldcup98" / "per_minute.csv")
    end_last = t[0] + 86 * 86400 + 86400  # the end of day 86 (from the trace's first minute)
    out = {}
    for k, back in enumerate((3, 2, 1, 0)):  # windows ending on days 65, 72, 79, 86: w4 the latest (the loudest)
        end = end_last - back * WEEK
        sel = (t >= end - 10 * 86400) & (t < end)
        out[f"w{k + 1}"] = (t[sel] + back * WEEK, y[sel])
    return out


def write(fleet: dict, path: Path) -> None:
    with open(path, "w") as f:
        f.write("timestamp,workload,count\n")
        for name, (t, y) in fleet.items():
            f.writelines(f"{a:.0f},{name},{b:g}\n" for a, b in zip(t, y))


def run(name: str, fleet: dict, span: str, history: str, jobs: int) -> dict:
    from click.testing import CliRunner

    from scaler.cli import main

    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        write(fleet, d / "fleet.csv")
        (d / "values.csv").write_text("workload,value_per_request\n" + "".join(
            f"{w},{v}\n" for w, v in zip(fleet, VALUES)))
        t0 = time.perf_counter()
        r = CliRunner().invoke(main, ["tune", str(d / "fleet.csv"), "--series-column", "workload", "--out",
                                      str(d / "out"), "--gpu-budget", "70%", "--value-per-request",
                                      str(d / "values.csv"), "--model", "seasonal_naive", "--span", span,
                                      "--history", history, "--jobs", str(jobs), "--no-progress"],
                               catch_exceptions=False)
        wall = time.perf_counter() - t0
        if r.exit_code != 0:
            raise SystemExit(f"{name}: exit {r.exit_code}\n{r.output}")
        doc = json.loads((d / "out" / "fleet.json").read_text())
    print(f"\n== {name}: {len(fleet)} workloads, {wall:.0f} s ==")
    print(r.output[r.output.index("GPU budget"):r.output.index("wrote ")])
    return doc["budget"]


def summary(name: str, b: dict) -> None:
    total, peak = b["gpus"]["*"], b["unconstrained"]["peak_gpus"]["*"]
    v, e = b["rules"]["value"], b["rules"]["equal"]
    print(f"{name}: budget {total:g} GPUs = 70 % of the unconstrained peak {peak:g}; peak held: value "
          f"{v['peak_gpus']['*']:g}, equal {e['peak_gpus']['*']:g} (never over: {v['never_over_budget']} / "
          f"{e['never_over_budget']})")
    print(f"  lost above unconstrained: value ${v['extra_lost_value']:.2f} ({v['extra_lost_requests']:.0f} requests, "
          f"{v['gave_way_minutes']:.0f} workload-minutes given way), equal ${e['extra_lost_value']:.2f} "
          f"({e['extra_lost_requests']:.0f} requests, {e['gave_way_minutes']:.0f} min)")
    ratio = v["extra_lost_value"] / e["extra_lost_value"] if e["extra_lost_value"] > 0 else float("nan")
    print(f"  value / equal, lost value above unconstrained: {ratio:.3f}; lost requests: "
          f"{v['extra_lost_requests'] / max(e['extra_lost_requests'], 1e-9):.3f}")


def main() -> None:
    from support.paths import TRACES

    ap = argparse.ArgumentParser()
    ap.add_argument("--span", default="2d", help="the simulated span of each workload")
    ap.add_argument("--history", default="5d", help="the history before it")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--traces", type=Path, default=TRACES)
    a = ap.parse_args()
    results = {"bundled": run("bundled worldcup98, its 4 weeks as 4 workloads", bundled_fleet(), a.span, a.history,
                              a.jobs),
               "shared": run("shared worldcup98, 4 windows of 10 days as 4 workloads", shared_fleet(a.traces),
                             a.span, a.history, a.jobs)}
    print()
    for name, b in results.items():
        summary(name, b)


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: support.paths
    main()

"""`forescale tune`, `backtest --sweep` and the default `backtest`: this tree against a baseline checkout.

The baseline is another checkout of forescale (the issue-26 figures use main
at 6696aa0: ``git worktree add ../bench-base 6696aa0``), run with the same
Python. Per trace in TRACES_DIR (the shared traces: nab_tweets AMZN/GOOG/FB,
servegen_m-small, worldcup98, nab_nyc_taxi, azure_llm_2023_code per minute;
those missing are skipped) and per command, the two trees run alternately
(old, new, new, old, ... for ``--reps`` pairs), each as its own process with
``PYTHONPATH`` set to its tree, and the script prints:

* each run's wall seconds, and the ratio new/old of the summed walls;
* tune: whether the selection (label and knobs) is identical; sweep and
  backtest: whether the Pareto frontier's labels are identical;
* how many numbers of the JSON differ (timing fields aside) and the largest
  relative difference (0 = the replay's numbers are unchanged).

Targets (issue 26): tune and sweep new/old <= 0.2, default backtest <= 0.5.

Run (long; the machine's load moves absolute times, the ratio is what counts):
``PYTHONPATH=. .venv/bin/python tests/bench/bench_tune.py TRACES_DIR --baseline ../bench-base
[--what tune,sweep,backtest] [--span 2d] [--only AMZN] [--reps 1] [--jobs 1]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRACES = [  # name, file under TRACES_DIR
    ("nab_tweets AMZN", "nab_tweets/AMZN_per_5min.csv"),
    ("nab_tweets GOOG", "nab_tweets/GOOG_per_5min.csv"),
    ("nab_tweets FB", "nab_tweets/FB_per_5min.csv"),
    ("servegen_m-small", "servegen_m-small/per_10min.csv"),
    ("worldcup98", "worldcup98/per_minute.csv"),
    ("nab_nyc_taxi", "nab_nyc_taxi/per_30min.csv"),
    ("azure_llm_2023_code", "azure_llm_2023_code/per_minute.csv"),
]
HERE = Path(__file__).resolve().parents[2]


def run(tree: Path, args: list[str], out: Path, timeout: float) -> tuple[float, dict | None, str]:
    """One CLI run in its own process with ``tree`` first on the path: (wall seconds, its JSON, error text)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "scaler.cli", *args, "--no-progress", "--json", str(out)], cwd=tree,
                       env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        return wall, None, (p.stderr or p.stdout)[-400:]
    return wall, json.loads(out.read_text()), ""


def numbers(doc, path=""):
    """Every number of a JSON document by its path (timing fields and the trace's file path aside)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in ("timing", "source"):
                continue
            yield from numbers(v, f"{path}/{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from numbers(v, f"{path}[{i}]")
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        yield path, float(doc)
    else:
        yield path, doc


def compare(old: dict, new: dict) -> tuple[int, float]:
    a, b = dict(numbers(old)), dict(numbers(new))
    diff, rel = 0, 0.0
    for k in set(a) | set(b):
        x, y = a.get(k), b.get(k)
        if x == y:
            continue
        diff += 1
        if isinstance(x, float) and isinstance(y, float) and x:
            rel = max(rel, abs(y - x) / abs(x))
        else:
            rel = float("inf")
    return diff, rel


def number(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return v


def selection(doc: dict, what: str):
    if what == "tune":
        s = doc.get("selection") or {}
        # numbers as numbers, the mode left out (the label names the policy): 6696aa0 wrote numbers and no mode,
        # main writes the metadata's strings ("0" for 0.0) and the mode; the same selection either way
        knobs = {k: number(v) for k, v in (s.get("knobs") or {}).items() if k != "mode"}
        return s.get("label"), json.dumps(knobs, sort_keys=True)
    return tuple(sorted(p["label"] for p in doc.get("frontier", []) if p.get("pareto")))


def bench(name: str, what: str, args: list[str], base: Path, reps: int, timeout: float) -> None:
    walls: dict[str, list[float]] = {"old": [], "new": []}
    docs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-tune-") as d:
        order = []
        for r in range(reps):
            order += ["old", "new"] if r % 2 == 0 else ["new", "old"]
        for kind in order:
            tree = base if kind == "old" else HERE
            wall, doc, err = run(tree, args, Path(d) / f"{kind}.json", timeout)
            if doc is None:
                other = HERE if kind == "old" else base
                if run(other, args, Path(d) / "other.json", timeout)[1] is None:
                    print(f"{name:22s} {what:8s} skipped: both trees refuse it: {err.strip()[:200]}")
                else:
                    print(f"{name:22s} {what:8s} the {kind} tree failed: {err.strip()}")
                return
            walls[kind].append(wall)
            docs[kind] = doc
    ratio = sum(walls["new"]) / sum(walls["old"])
    same = selection(docs["old"], what) == selection(docs["new"], what)
    n, rel = compare(docs["old"], docs["new"])
    old_w = " + ".join(f"{w:.1f}" for w in walls["old"])
    new_w = " + ".join(f"{w:.1f}" for w in walls["new"])
    print(f"{name:22s} {what:8s} old {old_w:>14s} s  new {new_w:>14s} s  new/old {ratio:5.2f}  "
          f"selection {'identical' if same else 'DIFFERS'}  numbers differing {n} (max rel {rel:.2g})", flush=True)
    if not same:
        print(f"    old: {selection(docs['old'], what)}\n    new: {selection(docs['new'], what)}")
        if what == "tune":
            print("    " + dominance(docs["old"], docs["new"]))


def dominance(old: dict, new: dict) -> str:
    """Whether the new selection (its missed fraction and replica-hours in the new run) is dominated by a selectable
    point of the old run's frontier (one that misses no more and costs no more, and is better in one)."""
    s = new.get("selection") or {}
    m, h = s.get("underprovisioned_fraction"), s.get("replica_hours")
    if m is None or h is None:
        return "new selection: no point to compare"
    by = [p for p in old.get("frontier", []) if p.get("selectable", True) and not p.get("reference")
          and p["underprovisioned_fraction"] <= m and p["replica_hours"] <= h
          and (p["underprovisioned_fraction"] < m or p["replica_hours"] < h)]
    o = old.get("selection") or {}
    head = (f"new selection: miss {m:.5f}, {h:.1f} replica-h; old selection: miss "
            f"{o.get('underprovisioned_fraction', float('nan')):.5f}, {o.get('replica_hours', float('nan')):.1f} replica-h; ")
    if not by:
        return head + "not dominated on the old frontier"
    best = min(by, key=lambda p: p["replica_hours"])
    return head + (f"DOMINATED on the old frontier by {len(by)} point(s), e.g. {best['label']} "
                   f"(miss {best['underprovisioned_fraction']:.5f}, {best['replica_hours']:.1f} replica-h)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", type=Path, help="the directory of the shared traces")
    ap.add_argument("--baseline", type=Path, required=True, help="a checkout of the baseline (e.g. main at 6696aa0)")
    ap.add_argument("--what", default="tune,sweep,backtest", help="comma-separated: tune, sweep, backtest")
    ap.add_argument("--span", default=None, help="simulated span for tune and sweep (default: the CLI's)")
    ap.add_argument("--only", default=None, help="only traces whose name contains this")
    ap.add_argument("--reps", type=int, default=1, help="old/new pairs per trace (alternating order)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    a = ap.parse_args()
    if not (a.baseline / "scaler" / "cli").is_dir():
        sys.exit(f"--baseline {a.baseline}: not a forescale checkout (no scaler/cli); "
                 f"create one with: git worktree add {a.baseline} 6696aa0")
    if not a.traces.is_dir():
        sys.exit(f"{a.traces}: not a directory of traces")
    whats = [w.strip() for w in a.what.split(",") if w.strip()]
    with open("/proc/loadavg") as fh:
        print(f"load average at start: {fh.read().split()[:3]}; {os.cpu_count()} CPUs; jobs {a.jobs}")
    span = ["--span", a.span] if a.span else []
    for w in whats:
        if w == "backtest":
            bench("bundled worldcup98", "backtest", ["backtest", "--jobs", str(a.jobs)], a.baseline, a.reps,
                  a.timeout)
            continue
        for name, rel in TRACES:
            path = a.traces / rel
            if (a.only and a.only.lower() not in name.lower()) or not path.is_file():
                continue
            cmd = ["tune"] if w == "tune" else ["backtest", "--sweep"]
            bench(name, w, [*cmd, "--jobs", str(a.jobs), *span, str(path.resolve())], a.baseline, a.reps, a.timeout)
    with open("/proc/loadavg") as fh:
        print(f"load average at end: {fh.read().split()[:3]}")


if __name__ == "__main__":
    main()

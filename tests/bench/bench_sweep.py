"""How long the frontier sweep takes: ~50 variants on 21 days of 1-minute data.

The last 21 days of the bundled WorldCup98 trace (1 min): 14 days of history,
the last 7 days simulated, every family of ``scaler.replay.engine`` over its default
knob grid, the predictive family with Prophet. Prints the wall time, the
number of variants and fits, the peak RSS of this process,
and the Pareto-optimal points.

Run: ``.venv/bin/python tests/bench/bench_sweep.py [--days 21] [--span 7d] [--refit 2h] [--jobs 2]``
"""

from __future__ import annotations

import argparse
import os
import resource
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=float, default=21.0, help="trace length (the end of the bundled trace)")
    ap.add_argument("--span", default="7d", help="simulated span (the rest is history)")
    ap.add_argument("--refit", default="2h", help="refit cadence of the forecast models")
    ap.add_argument("--model", default="prophet")
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: usable cores, <= 4)")
    a = ap.parse_args()

    from dataclasses import replace

    from forecaster.base import Series
    from scaler.cli import render, traces
    from scaler.replay import engine, frontier, variants
    from scaler.spec import parse_duration

    tr = traces.bundled_trace()
    s = tr.series
    keep = s.t >= s.t[-1] + s.step - a.days * 86400
    tr = replace(tr, series=Series(s.t[keep], s.y[keep], s.step), name=f"worldcup98, last {a.days:g} d")
    settings = engine.Settings(span_seconds=parse_duration(a.span), refit_seconds=parse_duration(a.refit), model=a.model)
    jobs = a.jobs or engine.default_jobs()
    t0 = time.perf_counter()
    grid = variants.Grid()
    sr = engine.run(tr, settings, variants.variants(grid, settings), score=variants.accuracy_models(settings, grid.families),
                    jobs=jobs)
    wall = time.perf_counter() - t0
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    fits = {m: mr.fits for m, mr in sr.models.items()}
    r = sr
    print(f"{tr.name}: {len(tr.series)} points at {s.step:g}s; simulated {(r.sim_end - r.sim_start) / 86400:.2f} d, "
          f"{a.refit} refits, {len(sr.points)} variants")
    print(render.format_frontier(sr, only_pareto=True))
    sel = frontier.select(sr.points, 0.005)
    if sel.point is not None:
        print(f"tune --target-miss 0.005: {sel.point.label} (missed {100 * sel.point.miss:.3f} %, "
              f"{sel.point.cost_ratio:.3f}x oracle, met={sel.met})")
    print(f"wall {wall:.1f} s on {jobs} worker process(es), {os.cpu_count()} cores; fits {fits}; "
          f"forecast seconds (inside workers) "
          + ", ".join(f"{k.removeprefix('forecast_').removesuffix('_seconds')} {v:.1f}"
                      for k, v in sr.timing.items() if k.startswith("forecast_"))
          + f"; peak RSS of this process {me:.0f} MiB")


if __name__ == "__main__":
    main()

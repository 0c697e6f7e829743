"""Refits per minute on this machine: 14 days of 1-minute history (20,160 points).

Prophet cold (a fresh fit) vs warm-started (``fit(series, warm_start=prev)``
on the window slid 30 minutes on, as the server refits), Prophet's own
``Prophet().fit`` on the raw 1-min points for reference, and the other
models. One process, one core; wall-clock seconds per fit include the band
computation and everything ``fit`` does. Prints refits/min and ratios.

    .venv/bin/python tests/bench/bench_refit.py            # ~1-2 min
    .venv/bin/python tests/bench/bench_refit.py --quick    # fewer repetitions, no native Prophet
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from forecaster.base import Series  # noqa: E402
from forecaster.models import make  # noqa: E402
from forecaster.tracecsv import from_csv  # noqa: E402

TRACE = ROOT.parent / "shared" / "data" / "traces" / "worldcup98" / "per_minute.csv"
DAY_POINTS = 1440
SLIDE = 30  # points (minutes) between refits


def windows(s: Series, start_day: int, count: int) -> list[Series]:
    i0 = start_day * DAY_POINTS
    n = 14 * DAY_POINTS
    return [Series(s.t[i0 + k * SLIDE:i0 + k * SLIDE + n], s.y[i0 + k * SLIDE:i0 + k * SLIDE + n], s.step)
            for k in range(count)]


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_model(name: str, wins: list[Series], cold_n: int, **opts) -> dict:
    model = make(name, **opts)
    model.fit(wins[0])  # imports, Stan binary loaded, caches warm: not counted
    cold = [timed(lambda w=w: model.fit(w)) for w in wins[1:1 + cold_n]]
    prev = model.fit(wins[0])
    warm = []
    for w in wins[1:]:
        t0 = time.perf_counter()
        prev = model.fit(w, warm_start=prev)
        warm.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(20):
        prev.predict(360, (0.1, 0.5, 0.9))
    predict = (time.perf_counter() - t0) / 20
    return {"cold": statistics.median(cold), "warm": statistics.median(warm), "warm_p90": float(np.quantile(warm, 0.9)),
            "predict": predict, "n_cold": len(cold), "n_warm": len(warm)}


def native_prophet(w: Series) -> float:
    """Prophet's public path on the raw 1-min points (what a naive integration would do)."""
    import pandas as pd
    from prophet import Prophet

    from forecaster.models.prophet_fit import silence

    silence()
    df = pd.DataFrame({"ds": pd.to_datetime((w.t * 1e3).astype("int64"), unit="ms"), "y": w.y})
    m = Prophet(weekly_seasonality=True, daily_seasonality=True, yearly_seasonality=False, uncertainty_samples=0)
    return timed(lambda: m.fit(df))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    s, _ = from_csv(TRACE)
    reps = 6 if args.quick else 16
    wins = windows(s, 40, reps + 1)  # late May - mid June 1998, 14 d each
    print(f"14 days of 1-min history = {len(wins[0])} points; refits every {SLIDE} min; "
          f"median seconds per fit over {reps} windows; one core of this machine")
    rows = []
    t_start = time.perf_counter()
    if not args.quick:
        nat = native_prophet(wins[0])
        print(f"\nProphet().fit on the raw 1-min points (reference, once): {nat:.2f} s = {60 / nat:.1f} fits/min")
    for label, name, opts, cold_n in (
            ("prophet (15-min fit grid, weekly order 25)", "prophet", {}, min(6, reps)),
            ("prophet, weekly order 3", "prophet", {"weekly_order": 3}, min(4, reps)),
            ("prophet, 10-min fit grid", "prophet", {"fit_step": 600.0}, min(4, reps)),
            ("naive", "naive", {}, reps),
            ("seasonal_naive", "seasonal_naive", {}, reps),
            ("linear_trend", "linear_trend", {}, reps),
            ("auto (fits every candidate twice)", "auto", {}, min(3, reps))):
        if args.quick and label.startswith("prophet,"):
            continue
        r = bench_model(name, wins if name != "auto" else wins[:min(len(wins), 5)], cold_n, **opts)
        rows.append((label, r))
    print(f"\n{'model':44s} {'cold s':>8s} {'warm s':>8s} {'warm p90':>9s} {'cold/min':>9s} {'warm/min':>9s} "
          f"{'cold/warm':>9s} {'predict ms':>10s}")
    for label, r in rows:
        print(f"{label:44s} {r['cold']:8.3f} {r['warm']:8.3f} {r['warm_p90']:9.3f} {60 / r['cold']:9.1f} "
              f"{60 / r['warm']:9.1f} {r['cold'] / r['warm']:9.2f} {1e3 * r['predict']:10.2f}")
    p = rows[0][1]
    goal = 100
    print(f"\nprophet warm-started: {60 / p['warm']:.0f} refits/min per core (goal >= {goal}: "
          f"{'met' if 60 / p['warm'] >= goal else 'NOT met'}); cold {60 / p['cold']:.0f}/min; "
          f"warm is {p['cold'] / p['warm']:.1f}x faster than cold")
    if not args.quick:
        print(f"vs Prophet on raw 1-min points: {nat / p['warm']:.0f}x (warm), {nat / p['cold']:.0f}x (cold)")
    print(f"200 workloads refitted every 30 min need {200 * p['warm'] / 1800 * 100:.1f} % of one core (warm)")
    print(f"total {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()

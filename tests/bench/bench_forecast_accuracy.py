"""Forecast accuracy on real traces: prophet plain vs level-corrected vs the baselines.

Rolling origin (``forecaster.evaluate``): 14 days of history before each
window, cutoffs every ``stride`` steps across the window, refit every
``refit`` cutoffs (warm-started), forecasts level-corrected at the cutoff
exactly as the policy does (the curve covers ``now``: ``include_now=True``).
MASE is scaled by the in-sample one-step naive MAE of each window (so
``naive`` is about 1 on noisy 1-min data), averaged over windows; WAPE is a
fraction, pooled the same way; coverage is one-sided (actual <= q90).

Prints, per trace: MASE/WAPE at each horizon for naive, linear_trend,
seasonal_naive (+LC), prophet plain, prophet + level correction at several
half-lives, auto; the q90 coverage of the default model (bands calibrated for
its own half-life); and Prophet's native interval coverage for comparison.

    .venv/bin/python tests/bench/bench_forecast_accuracy.py            # ~4-6 min on 2 shared cores
    .venv/bin/python tests/bench/bench_forecast_accuracy.py --quick    # one window per trace
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from forecaster.base import Series  # noqa: E402
from forecaster.evaluate import historical_forecasts, level_corrected, score  # noqa: E402
from forecaster.level import DEFAULT_HALF_LIFE_SECONDS  # noqa: E402
from forecaster.models import make  # noqa: E402
from forecaster.tracecsv import from_csv  # noqa: E402

TRACES = ROOT.parent / "shared" / "data" / "traces"
DAY = 86400.0
HALF_LIVES = (600.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0)

# trace: file, window start days, days per window, stride, refit every k cutoffs, horizons (steps)
SETUPS = {
    "worldcup98": ("worldcup98/per_minute.csv", (24, 47, 60, 72), 1, 5, 6, (3, 10, 30)),
    "nab_nyc_taxi": ("nab_nyc_taxi/per_30min.csv", (30, 60, 120, 180), 7, 1, 4, (1, 2, 4)),
}


def hl_name(hl: float) -> str:
    return f"{hl / 3600:g}h" if hl >= 3600 else f"{hl / 60:g}m"


def run_trace(name: str, quick: bool) -> None:
    path, days, span, stride, refit, hs = SETUPS[name]
    if quick:
        days = days[1:2]
    s, _ = from_csv(TRACES / path)
    spd = int(round(DAY / s.step))
    H = max(hs)
    step_s = f"{s.step / 60:g} min"
    print(f"\n== {name} ({step_s} steps): windows at days {list(days)}, {span} d each, cutoff every "
          f"{stride} step(s), refit every {refit} cutoffs, 14 d history; horizons {list(hs)} steps")
    rows: dict[str, list[dict]] = {}
    cover: list[float] = []
    native_cov: list[float] = []
    t_fit: dict[str, float] = {}
    default_hl = DEFAULT_HALF_LIFE_SECONDS
    for d in days:
        sub = Series(s.t[(d - 14) * spd:(d + span) * spd], s.y[(d - 14) * spd:(d + span) * spd], s.step)
        start = float(sub.t[14 * spd])
        models = {"naive": make("naive"), "linear_trend": make("linear_trend"),
                  "seasonal_naive": make("seasonal_naive"), "prophet": make("prophet"),
                  "auto": make("auto", lead=hs[0] * s.step)}
        for mname, model in models.items():
            t0 = time.perf_counter()
            every = refit * (4 if mname == "auto" else 1)
            fcs = historical_forecasts(model, sub, start=start, horizon=H, stride=stride, train_window=14 * DAY,
                                       refit_every=every, quantiles=(0.9,), include_now=True)
            t_fit[mname] = t_fit.get(mname, 0.0) + time.perf_counter() - t0
            variants: dict[str, float] = {}
            if mname in ("naive", "linear_trend"):
                variants[mname] = 0.0
            elif mname == "seasonal_naive":
                variants[mname] = 0.0
                variants[f"seasonal_naive+LC {hl_name(default_hl)}"] = default_hl
            elif mname == "prophet":
                variants["prophet plain"] = 0.0
                for hl in HALF_LIVES:
                    variants[f"prophet+LC {hl_name(hl)}"] = hl
            else:
                variants[f"auto (+LC {hl_name(default_hl)})"] = default_hl
            for vname, hl in variants.items():
                lc = level_corrected(sub, fcs, hl)
                rows.setdefault(vname, []).append({h: score(sub, lc, 0.9, 1, h=h) for h in hs})
                if mname == "prophet" and hl == default_hl:
                    cover.append(np.mean([score(sub, lc, 0.9, 1, h=h)["coverage"] for h in hs]))
            if mname == "prophet":
                rows.setdefault(f"prophet, LC {hl_name(default_hl)} on a 2-point mean", []).append(
                    {h: score(sub, level_corrected(sub, fcs, default_hl, observed_points=2), 0.9, 1, h=h) for h in hs})
        native_cov.append(_native_prophet_coverage(sub, start, span))
    print(f"\n{'model':40s}" + "".join(f"  h={h:<3d} MASE   WAPE " for h in hs))
    for vname, per_window in rows.items():
        line = f"{vname:40s}"
        for h in hs:
            m = np.nanmean([w[h]["mase"] for w in per_window])
            wp = np.nanmean([w[h]["wape"] for w in per_window])
            line += f"  {m:10.3f} {wp:6.3f}"
        print(line)
    naive = {h: np.nanmean([w[h]["mase"] for w in rows["naive"]]) for h in hs}
    best = {h: min((np.nanmean([w[h]["mase"] for w in rows[v]]), v) for v in rows if v.startswith("prophet+LC"))
            for h in hs}
    print("\nbest prophet half-life by horizon: " + ", ".join(
        f"h={h}: {best[h][1].split()[-1]} (MASE {best[h][0]:.3f} vs naive {naive[h]:.3f})" for h in hs))
    print(f"q90 coverage of prophet+LC {hl_name(default_hl)} (its bands calibrated for that half-life), "
          f"mean over horizons: {np.mean(cover):.3f} (windows: {', '.join(f'{c:.3f}' for c in cover)})")
    print(f"Prophet's own interval (interval_width=0.8 -> yhat_upper = q90), plain curve, "
          f"coverage: {np.nanmean(native_cov):.3f} (windows: {', '.join(f'{c:.3f}' for c in native_cov)})")
    print("fit+predict seconds per model (all windows): " + ", ".join(f"{k} {v:.1f}" for k, v in t_fit.items()))


def _native_prophet_coverage(sub: Series, start: float, span_days: int) -> float:
    """Prophet's own 80 % interval (upper = q90) on the same 15-min buckets, scored on the window's points."""
    import logging

    import pandas as pd
    from prophet import Prophet

    from forecaster.models.prophet_fit import silence
    from forecaster.series import resample

    silence()
    logging.getLogger("prophet.plot").setLevel(logging.CRITICAL)
    train = sub.until(start)
    k = max(1, int(900 // train.step))
    agg = resample(train, k * train.step) if k > 1 else train
    ok = np.isfinite(agg.y)
    ds = pd.to_datetime(((agg.t[ok] + 0.5 * (k - 1) * train.step) * 1e3).astype("int64"), unit="ms")
    m = Prophet(interval_width=0.8, uncertainty_samples=300, yearly_seasonality=False,
                weekly_seasonality=True, daily_seasonality=True)
    m.fit(pd.DataFrame({"ds": ds, "y": agg.y[ok]}), seed=0)
    test = sub.tail(span_days * DAY)
    test = Series(test.t[::5], test.y[::5], test.step)  # every 5th point is plenty
    fut = pd.DataFrame({"ds": pd.to_datetime((test.t * 1e3).astype("int64"), unit="ms")})
    np.random.seed(0)
    upper = m.predict(fut)["yhat_upper"].to_numpy()
    ok = np.isfinite(test.y)
    return float(np.mean(test.y[ok] <= upper[ok]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one window per trace")
    ap.add_argument("--trace", choices=sorted(SETUPS), action="append", help="only this trace (repeatable)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    for name in args.trace or list(SETUPS):
        run_trace(name, args.quick)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()

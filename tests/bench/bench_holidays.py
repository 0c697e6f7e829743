"""Holidays on the shared nab_nyc_taxi trace (NYC taxi passengers, 2014-07 .. 2015-01, 30-min buckets; local
time, so UTC days are its days): forecast accuracy on US holiday days and on ordinary days, with and without
``holidays: US`` and for each ``holidayAs`` rule, and the fit-time cost per refit (a ratio against a fit without
holidays, in this run).

Accuracy: rolling-origin forecasts from every 30-min cutoff of 2014-11-01 .. 2015-01-15 (the policy's model:
``make_for_policy``, level correction 4 h as the policy uses it, q0.8), refitted every ``--refit-hours`` on the
last ``--history-days``, scored at horizon L (285 s: one 30-min step) and 6 h ahead from the same forecasts. The
days split on are the US holidays of the span (Veterans Day, Thanksgiving, Christmas, New Year) in every run;
only the forecast differs. MASE is scaled by the seasonal-naive error of the history before each part's first
cutoff. Variants: ``off`` (no holidays), ``sunday`` (holidayAs sunday: the models' own weekday rule),
``ordinary`` (substitution only), ``learned`` (the profile of the history's most recent holiday, the similar day;
without one an ordinary day). With any rule the holiday in progress stays as observed in the history.

``--trace worldcup98|azure`` checks the other shared traces' ordinary days (1-min traces: slower).

Run: ``.venv/bin/python tests/bench/bench_holidays.py [--models prophet] [--history-days 90 --refit-hours 24]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support.paths import TRACES  # noqa: E402

DAY = 86400.0
VARIANTS = {"off": None, "sunday": 6, "ordinary": 8, "learned": 7}
SPANS = {  # trace -> (csv, first cutoff, end)
    "nab_nyc_taxi": ("nab_nyc_taxi/per_30min.csv", (2014, 11, 1), (2015, 1, 15)),
    "worldcup98": ("worldcup98/per_minute.csv", (1998, 5, 20), (1998, 7, 10)),
}


def ts(*a) -> float:
    return dt.datetime(*a, tzinfo=dt.timezone.utc).timestamp()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default="nab_nyc_taxi", choices=sorted(SPANS))
    ap.add_argument("--refit-hours", type=float, default=12.0)
    ap.add_argument("--history-days", type=float, default=14.0)
    ap.add_argument("--models", default="seasonal_naive,prophet")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--aheads", default="0.5,6", help="hours ahead scored (the first is L)")
    ap.add_argument("--fit-ratio", action="store_true")
    ap.add_argument("--json", default=None, help="also write the figures here")
    a = ap.parse_args()
    from forecaster.calendar import holiday_days
    from scaler.cli import traces

    path, s0, s1 = SPANS[a.trace]
    series = traces.load_csv(TRACES / path, name=a.trace).series
    start, end = ts(*s0), ts(*s1)
    days = holiday_days("US", float(series.t[0]), float(series.t[-1]) + DAY)
    in_span = {n: name for n, name in days.items() if start <= n * DAY < end}
    print("holiday days scored:", ", ".join(f"{dt.date.fromordinal(719163 + n)} {v}" for n, v in in_span.items()))
    print(f"history {a.history_days:g} d, refit {a.refit_hours:g} h")
    print(f"{'model':<15}{'ahead':>6}{'variant':>10} | {'MASE ord':>9}{'cov ord':>8} | {'MASE hol':>9}{'cov hol':>8}"
          f"{'n hol':>6} | {'s':>6} | relative MAE on each holiday day")
    rows = []
    aheads = [max(1, int(round(float(h) * 3600 / series.step))) for h in a.aheads.split(",")]
    for model in a.models.split(","):
        for v in a.variants.split(","):
            t0 = time.perf_counter()
            sc = run(series, model, start, end, days, VARIANTS[v], a, aheads)
            for h, r in zip(aheads, sc):
                o, hd = r["ordinary"], r["holiday_or_event"]
                rows.append(dict(trace=a.trace, model=model, variant=v, ahead_h=h * series.step / 3600,
                                 history_days=a.history_days, ordinary=o, holiday=hd, per_day=r["per_day"]))
                print(f"{model:<15}{h * series.step / 3600:>5g}h{v:>10} | {o['mase']:>9.3f}{o['coverage']:>8.3f} | "
                      f"{hd['mase']:>9.3f}{hd['coverage']:>8.3f}{hd['n']:>6d} | {time.perf_counter() - t0:>6.1f} | "
                      + " ".join(f"{k[5:]}:{x:.3f}" for k, x in r["per_day"].items()), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1, default=float))
    if a.fit_ratio:
        fit_ratio(series, days)


def run(series, model, start, end, days, holiday_as, a, aheads) -> list[dict]:
    """One model's rolling-origin forecasts, level-corrected as the policy uses them, split-scored at each ahead."""
    from forecaster import evaluate
    from forecaster.models import make_for_policy
    from scaler.replay.forecasts import band, padded, split_scores

    q, step = 0.8, series.step
    f = make_for_policy(model, seed=0, level_half_life=4 * 3600.0, quantile=q,
                        holiday_days=tuple(days) if holiday_as is not None else (),
                        holiday_as=6 if holiday_as is None else holiday_as)
    horizon = max(aheads) + 1
    fseries = padded(series.until(end), horizon - 1)
    fcs = evaluate.historical_forecasts(f, fseries, start=start, horizon=horizon, train_window=a.history_days * DAY,
                                        refit_every=max(1, int(round(a.refit_hours * 3600 / step))),
                                        quantiles=band(q))
    fcs = [(c, fc) for c, fc in fcs if start - 1e-6 <= c < end]
    lc = evaluate.level_corrected(fseries, fcs, 4 * 3600.0)
    season = max(1, int(round(DAY / step)))
    out = []
    for h in aheads:
        sc = split_scores(fseries, lc, tuple(days), q=q, season=season, h=h)
        sc["per_day"] = per_day(fseries, lc, days, h)
        out.append(sc)
    return out


def per_day(series, forecasts, days, h: int) -> dict[str, float]:
    """Relative MAE (mean |forecast - actual| / mean actual) of the mean ``h`` steps ahead on each holiday day."""
    idx = {round(float(t), 3): i for i, t in enumerate(series.t)}
    acc: dict[int, list] = {}
    for _, fc in forecasts:
        tt = float(fc.t[h - 1])
        d = int(tt // DAY)
        i = idx.get(round(tt, 3))
        if d in days and i is not None and np.isfinite(series.y[i]):
            acc.setdefault(d, []).append((abs(float(fc.mean[h - 1]) - series.y[i]), series.y[i]))
    return {str(dt.date.fromordinal(719163 + d)): round(float(np.mean([e for e, _ in v]) / np.mean([y for _, y in v])),
                                                        3) for d, v in sorted(acc.items())}


def fit_ratio(series, days) -> None:
    """Prophet fit seconds with holidays (sunday: the native rule; learned: the shared mechanism) / without,
    alternating, on the 14 days before 2015-01-05."""
    from forecaster.base import Series
    from forecaster.models import make_for_policy

    end = ts(2015, 1, 5)
    keep = (series.t >= end - 14 * DAY) & (series.t < end)
    s = Series(series.t[keep], series.y[keep], series.step)
    fs = {v: make_for_policy("prophet", seed=0, level_half_life=4 * 3600.0, quantile=0.8,
                             holiday_days=tuple(days) if h is not None else (), holiday_as=6 if h is None else h)
          for v, h in (("off", None), ("sunday", 6), ("learned", 7))}
    for f in fs.values():
        f.fit(s)  # warm-up (Stan model load)
    took: dict[str, list[float]] = {v: [] for v in fs}
    for _ in range(5):
        for v, f in fs.items():
            t0 = time.perf_counter()
            f.fit(s)
            took[v].append(time.perf_counter() - t0)
    base = float(np.median(took["off"]))
    print("prophet fit (14 d at 30 min, 5 each, median): " + ", ".join(
        f"{v} {np.median(x):.3f} s (ratio {np.median(x) / base:.2f})" for v, x in took.items()))


if __name__ == "__main__":
    main()

"""Holidays on the shared nab_nyc_taxi trace (NYC taxi passengers, 2014-07 .. 2015-01, 30-min buckets; local
time, so UTC days are its days): forecast accuracy on US holiday days and on ordinary days, with and without
the holiday rule (``holidays: US``: holidays substituted in the history, forecast as Sunday), and the fit-time
cost of the rule per Prophet refit (a ratio against a fit without it, in this run).

Accuracy: rolling-origin forecasts from every 30-min cutoff of 2014-11-01 .. 2015-01-15 (the replay's
``forecasts.run_model``: 14-day history, level correction 4 h as the policy uses it, q0.8), scored at
horizon L (285 s: one 30-min step) and at 6 h ahead; the days split on are the US holidays of the span
(Veterans Day, Thanksgiving, Christmas, New Year, MLK day) in both runs. MASE is scaled by the seasonal-naive
error of the history before each part's first cutoff.

Run (about 10 min on 2 busy cores): ``.venv/bin/python tests/bench/bench_holidays.py [--refit-hours 12]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support.paths import TRACES  # noqa: E402

DAY = 86400.0


def ts(*a) -> float:
    return dt.datetime(*a, tzinfo=dt.timezone.utc).timestamp()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--refit-hours", type=float, default=12.0)
    ap.add_argument("--models", default="seasonal_naive,prophet")
    ap.add_argument("--holiday-as", type=int, default=6, help="weekday a holiday is forecast as (Monday = 0)")
    ap.add_argument("--no-fit-ratio", action="store_true")
    a = ap.parse_args()
    from forecaster.calendar import holiday_days
    from scaler.cli import traces
    from scaler.replay.forecasts import band, run_model

    series = traces.load_csv(TRACES / "nab_nyc_taxi/per_30min.csv", name="nab_nyc_taxi").series
    start, end = ts(2014, 11, 1), ts(2015, 1, 15)
    days = holiday_days("US", float(series.t[0]), float(series.t[-1]) + DAY)
    in_span = {n: name for n, name in days.items() if start <= n * DAY < end}
    print("holiday days scored:", ", ".join(f"{dt.date.fromordinal(719163 + n)} {v}" for n, v in in_span.items()))
    step, q = series.step, 0.8
    print(f"{'model':<15}{'h':>5}{'holidays':>10} | {'MASE ord':>9}{'cov ord':>8} | {'MASE hol':>9}{'cov hol':>8}"
          f"{'n hol':>6} | {'s':>6}")
    for model in a.models.split(","):
        for h_steps in (1, 12):
            for use in (False, True):
                t0 = time.perf_counter()
                mr = run_model(series, model, start, end, horizon=h_steps + 1, score_points=h_steps,
                               refit_every=max(1, int(round(a.refit_hours * 3600 / step))), history_seconds=14 * DAY,
                               quantiles=band(q), q=q, level_seconds=4 * 3600.0,
                               holiday_days=tuple(days) if use else (), holiday_as=a.holiday_as,
                               special_days=tuple(days))
                o, hd = mr.scores["days"]["ordinary"], mr.scores["days"]["holiday_or_event"]
                print(f"{model:<15}{h_steps * step / 3600:>4g}h{'US' if use else '-':>10} | {o['mase']:>9.3f}"
                      f"{o['coverage']:>8.3f} | {hd['mase']:>9.3f}{hd['coverage']:>8.3f}{hd['n']:>6d} | "
                      f"{time.perf_counter() - t0:>6.1f}", flush=True)
    if not a.no_fit_ratio:
        fit_ratio(series, days)


def fit_ratio(series, days) -> None:
    """Prophet fit seconds with the holiday rule / without, alternating, on the 14 days before 2015-01-05."""
    from forecaster.base import Series
    from forecaster.models.prophet import ProphetForecaster

    end = ts(2015, 1, 5)
    keep = (series.t >= end - 14 * DAY) & (series.t < end)
    s = Series(series.t[keep], series.y[keep], series.step)
    plain, hol = ProphetForecaster(), ProphetForecaster(holiday_days=tuple(days))
    plain.fit(s), hol.fit(s)  # warm-up (Stan model load)
    tp, th = [], []
    for _ in range(5):
        for f, out in ((plain, tp), (hol, th)):
            t0 = time.perf_counter()
            f.fit(s)
            out.append(time.perf_counter() - t0)
    print(f"prophet fit (14 d at 30 min, 5 each, median): without {np.median(tp):.3f} s, with holidays "
          f"{np.median(th):.3f} s, ratio {np.median(th) / np.median(tp):.2f}")


if __name__ == "__main__":
    main()

"""Warm-started vs cold Prophet refits along a trace, as the replay refits: time ratio and forecast change.

At N cutoffs ``--refit`` apart (the last ones of the trace), Prophet is fitted
on the ``--history`` before each cutoff twice: cold (Prophet's own initial
values) and warm (from the previous warm fit's parameters, as
``forecaster.evaluate.historical_forecasts`` and the server refit). The order
alternates per cutoff. Prints the total fit seconds of each and their ratio,
and the largest relative difference of the mean and of the q0.9 band over a
``--horizon`` of points (relative to the cold curve's own peak over that
horizon, so near-zero rates do not inflate it).

Run: ``PYTHONPATH=. .venv/bin/python tests/bench/bench_warm_fits.py TRACE.csv [--fits 12] [--refit 2h]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", help="a trace CSV (timestamp,count or timestamp,qps)")
    ap.add_argument("--fits", type=int, default=12)
    ap.add_argument("--refit", default="2h")
    ap.add_argument("--history", default="14d")
    ap.add_argument("--horizon", type=int, default=30, help="points forecast per fit")
    ap.add_argument("--step", type=float, default=60.0, help="resample finer traces to this step (s), as the CLI")
    a = ap.parse_args()

    from forecaster.models.prophet import ProphetForecaster
    from scaler.cli import traces
    from scaler.spec import parse_duration

    tr = traces.load_csv(a.trace, step=a.step)
    s = tr.series
    refit, hist = parse_duration(a.refit), parse_duration(a.history)
    cuts = s.t[-1] + s.step - refit * np.arange(a.fits, 0, -1)
    model = ProphetForecaster(seed=0)
    cold_s = warm_s = 0.0
    d_mean = d_q = 0.0
    prev = None
    for i, c in enumerate(cuts):
        past = s.until(c).tail(hist)
        runs = {}
        for kind in (("cold", "warm") if i % 2 == 0 else ("warm", "cold")):
            t0 = time.perf_counter()
            f = model.fit(past, warm_start=prev if kind == "warm" else None)
            runs[kind] = (time.perf_counter() - t0, f)
        cold_t, cold = runs["cold"]
        warm_t, warm = runs["warm"]
        if i > 0:  # the first warm fit has nothing to start from
            cold_s += cold_t
            warm_s += warm_t
        fc, fw = cold.predict(a.horizon, (0.9,)), warm.predict(a.horizon, (0.9,))
        scale = max(float(np.max(fc.quantiles[0.9])), 1e-9)
        dm = float(np.max(np.abs(fw.mean - fc.mean))) / scale
        dq = float(np.max(np.abs(fw.quantiles[0.9] - fc.quantiles[0.9]))) / scale
        d_mean, d_q = max(d_mean, dm), max(d_q, dq)
        print(f"cutoff {i:2d}: cold {cold_t:6.3f} s  warm {warm_t:6.3f} s  "
              f"|mean diff|/peak {dm:.2e}  |q0.9 diff|/peak {dq:.2e}")
        prev = warm
    n = max(len(cuts) - 1, 1)
    print(f"\n{tr.name}: {n} refits after the first: cold {cold_s:.2f} s, warm {warm_s:.2f} s, "
          f"warm/cold = {warm_s / max(cold_s, 1e-9):.2f}")
    print(f"largest change of a forecast (relative to the cold q0.9 peak over {a.horizon} points): "
          f"mean {d_mean:.2e}, q0.9 {d_q:.2e}")


if __name__ == "__main__":
    main()

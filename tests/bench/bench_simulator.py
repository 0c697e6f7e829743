"""Simulation core throughput: ticks per second for every policy over 30 days at 15 s ticks.

The forecast-driven policies get precomputed curves (a seasonal-naive curve
per 1-minute cutoff, made with numpy here) so that this measures the
simulator and ``decide``, not model fitting. Run: ``.venv/bin/python tests/bench/bench_simulator.py``.
"""

from __future__ import annotations

import math
import time

import numpy as np

from forecaster.base import Forecast
from scaler.replay import hpa as hpa_mod
from scaler.replay.keda import run_hpa
from scaler.replay import policies as pol
from scaler.replay.families.oracle import oracle
from scaler.replay import scenario as scn
from scaler.cli import traces
from scaler.replay import prepare
from scaler.replay.forecasts import Curve
from scaler.policy import PolicyParams

DAYS = 30


def main() -> None:
    tr = traces.bundled_trace()
    s = tr.series
    step = s.step
    # 28 bundled days + their first 3 again: 30 simulated days after one day of history
    y = np.concatenate([s.y, s.y[: int(3 * 86400 / step)]])
    t = s.t[0] + step * np.arange(y.size)
    start, end = t[0] + 86400, t[0] + 86400 + DAYS * 86400
    end = min(end, t[-1] + step)
    q = prepare.nice_round(float(np.max(y)) / 20)
    t0 = time.perf_counter()
    sc = scn.scenario(t, y, step, start, end, cold_start_seconds=180, qps_per_replica=q)
    t_scen = time.perf_counter() - t0
    hpa = hpa_mod.Hpa(target=q)
    lead = 285.0
    h = int(math.ceil((lead + step) / step)) + 1
    day = int(86400 / step)
    cut = np.arange(start, end, step)
    i0 = np.searchsorted(t, cut)
    curves = []
    for c, i in zip(cut, i0):
        past = y[i - day: i - day + h]
        ft = c + step * np.arange(h)
        curves.append(Curve(float(c), Forecast(ft, past, {0.9: past * 1.1}), float(np.max(y[:i]))))
    params = PolicyParams(mode="forecastAndScale", lead_seconds=lead, quantile=0.9, qps_per_replica=q,
                          level_correction_seconds=1800)
    print(f"{sc.n} ticks ({(end - start) / 86400:.1f} days at 15 s), scenario built in {t_scen:.2f}s; "
          f"{len(curves)} forecast curves")
    print(f"{'policy':<13}{'values s':>10}{'HPA s':>8}{'total s':>9}{'ticks/s':>12}")
    total_ticks, total_s = 0, 0.0
    for name in ("reactive", "linear_trend", "predictive", "hybrid", "scheduled", "keep_alive", "oracle"):
        ta = time.perf_counter()
        if name == "reactive":
            vals = pol.planned_values(sc, hpa, PolicyParams(mode="reactive", lead_seconds=0.0, quantile=0.5,
                                                             qps_per_replica=q, hpa_tolerance=0.0), ()).values
        elif name in ("linear_trend", "predictive", "hybrid"):
            vals = pol.planned_values(sc, hpa, params, curves).values
        elif name == "scheduled":
            vals = np.full(hpa_mod.poll_count(sc.n, hpa), float(np.median(y)))
        else:
            vals = None
        tb = time.perf_counter()
        if name == "keep_alive":
            tl = pol.fixed_pool(sc, int(math.ceil(np.max(sc.demand) / q)))
        elif name == "oracle":
            tl = oracle(sc)
        else:
            tl = run_hpa(sc, vals, hpa)
        scn.evaluate(sc, tl)
        tc = time.perf_counter()
        total_ticks += sc.n
        total_s += tc - ta
        print(f"{name:<13}{tb - ta:>10.2f}{tc - tb:>8.2f}{tc - ta:>9.2f}{sc.n / (tc - ta):>12,.0f}")
    print(f"{'all':<13}{'':>10}{'':>8}{total_s:>9.2f}{total_ticks / total_s:>12,.0f}")


if __name__ == "__main__":
    main()

"""Accuracy on real traces, rolling origin, scored as the policy uses the forecast.

The default model is ``prophet`` with the policy's level correction
(``forecaster.level``, half-life ``DEFAULT_HALF_LIFE_SECONDS``) applied at
each cutoff to a curve that covers ``now`` (``include_now=True``); ``auto``
the same. Baselines: ``naive`` and ``linear_trend`` (the seed predictor).

Figures this file measured when it was written (mean over windows; MASE on
the one-step naive in-sample scale; tests/bench/bench_forecast_accuracy.py has the
wider table):

    worldcup98, days 24 and 47, 1 day each of 5-min cutoffs, 14 d history, h = 3 / 5 min:
        naive 1.593 / 1.768, linear_trend 2.193 / 2.929,
        prophet+LC 1.592 / 1.754 (q90 coverage 0.925 / 0.932), auto 1.578 / 1.730
    nab_nyc_taxi, days 30, 60, 120, 180, 3 days each of 30-min cutoffs, 21 d history, h = 1 / 2 steps:
        naive 0.860 / 1.584, linear_trend 0.995 / 1.740,
        prophet+LC 0.544 / 0.824 (coverage 0.892 / 0.886), auto 0.440 / 0.619 (0.876 / 0.869)

On worldcup98 prophet+LC and naive are within 1 % of each other at 3-5 min
(matches make the traffic jump in ways no daily/weekly curve knows; over
other windows the sign flips): the assertion there is "better than
linear_trend" and "no worse than naive by more than 3 %", not a strict win.
On nab_nyc_taxi both beat both baselines by 35-60 %.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from forecaster.base import Series
from forecaster.evaluate import historical_forecasts, level_corrected, score
from forecaster.level import DEFAULT_HALF_LIFE_SECONDS
from forecaster.models import make
from forecaster.tracecsv import from_csv
from support.paths import TRACES

DAY = 86400.0
HL = DEFAULT_HALF_LIFE_SECONDS


def traces() -> Path:
    return TRACES


pytestmark = pytest.mark.skipif(not traces().exists(), reason="shared traces not present")


def evaluate_trace(path: str, *, days: tuple[int, ...], history_days: int, span_days: int, stride: int,
                   refit: int, hs: tuple[int, ...], lead_steps: int) -> dict:
    """{model: {h: {"mase", "wape", "coverage"}}}, each the mean over the windows starting at ``days``."""
    s, _ = from_csv(traces() / path)
    spd = int(round(DAY / s.step))
    per: dict = {}
    for day in days:
        lo, hi = (day - history_days) * spd, (day + span_days) * spd
        sub = Series(s.t[lo:hi], s.y[lo:hi], s.step)
        start = float(sub.t[history_days * spd])
        for name, model, hl, every in (
                ("naive", make("naive"), 0.0, refit),
                ("linear_trend", make("linear_trend"), 0.0, refit),
                ("prophet", make("prophet", seed=0), HL, refit),
                ("auto", make("auto", seed=0, lead=lead_steps * s.step), HL, refit * 6)):
            fcs = historical_forecasts(model, sub, start=start, horizon=max(hs), stride=stride,
                                       train_window=history_days * DAY, refit_every=every, quantiles=(0.9,),
                                       include_now=True)
            lc = level_corrected(sub, fcs, hl)
            for h in hs:
                per.setdefault(name, {}).setdefault(h, []).append(score(sub, lc, 0.9, 1, h=h))
    return {m: {h: {k: float(np.mean([w[k] for w in ws])) for k in ("mase", "wape", "coverage")}
                for h, ws in r.items()} for m, r in per.items()}


@pytest.fixture(scope="module")
def worldcup():
    return evaluate_trace("worldcup98/per_minute.csv", days=(24, 47), history_days=14, span_days=1, stride=5,
                          refit=12, hs=(3, 5), lead_steps=5)


@pytest.fixture(scope="module")
def taxi():
    return evaluate_trace("nab_nyc_taxi/per_30min.csv", days=(30, 60, 120, 180), history_days=21, span_days=3,
                          stride=1, refit=4, hs=(1, 2), lead_steps=1)


def table(res: dict) -> str:
    return "; ".join(f"{m}: " + ", ".join(f"h={h} mase={v['mase']:.3f} cov={v['coverage']:.3f}"
                                         for h, v in r.items()) for m, r in res.items())


@pytest.mark.parametrize("h", [3, 5])
@pytest.mark.parametrize("model", ["prophet", "auto"])
def test_worldcup_default_and_auto_vs_baselines(worldcup, model, h):
    r = worldcup
    print(table(r))
    assert r[model][h]["mase"] < r["linear_trend"][h]["mase"]
    assert r[model][h]["mase"] <= 1.03 * r["naive"][h]["mase"], table(r)


@pytest.mark.parametrize("h", [1, 2])
@pytest.mark.parametrize("model", ["prophet", "auto"])
def test_taxi_default_and_auto_beat_baselines(taxi, model, h):
    r = taxi
    print(table(r))
    assert r[model][h]["mase"] < r["naive"][h]["mase"], table(r)
    assert r[model][h]["mase"] < r["linear_trend"][h]["mase"], table(r)


@pytest.mark.parametrize("model", ["prophet", "auto"])
def test_coverage_of_q90_within_5_points(worldcup, taxi, model):
    """q90 (bands calibrated for the policy's half-life), level-corrected, mean over the horizons."""
    for res in (worldcup, taxi):
        cov = np.mean([v["coverage"] for v in res[model].values()])
        assert abs(cov - 0.9) <= 0.05, table(res)

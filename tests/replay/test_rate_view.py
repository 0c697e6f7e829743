"""The history as the server's query reads it: a trace of requests per interval through ``rate(x[2m])``."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from forecaster.base import Series
from scaler.replay import engine
from scaler.replay.scenario import rate_view


def test_rate_view_worked():
    t = 60.0 * np.arange(6)
    y = np.array([10.0, 10, 40, 40, np.nan, 40])
    v = rate_view(t, y, 60.0)
    # t=0: nothing before it, its own rate; t=60: [0, 60] -> 10; t=120: [0, 120] -> 10;
    # t=180: [60, 180] -> (10 x 60 + 40 x 60) / 120 = 25; t=240: [120, 240] -> 40;
    # t=300: [180, 300] holds the gap at [240, 300): the server sees no data
    assert v[:5].tolist() == [10.0, 10.0, 10.0, 25.0, 40.0] and math.isnan(v[5])
    # a 10-minute trace: at each point the rate of the 2 minutes before it, the previous interval's
    assert rate_view(600.0 * np.arange(3), np.array([5.0, 7.0, 9.0]), 600.0).tolist() == [5.0, 5.0, 7.0]


def test_a_trace_of_counts_is_forecast_from_its_view():
    # the same replay of a trace of counts and of its view given as a query's answers: the same forecasts
    rng = np.random.default_rng(3)
    n = 3 * 1440
    t = 1_700_006_400.0 + 60.0 * np.arange(n)
    y = 40 + 20 * np.sin(2 * np.pi * np.arange(n) / 1440) + rng.normal(0, 2, n)
    s = engine.Settings(model="seasonal_naive", policies=("predictive",), span_seconds=6 * 3600.0,
                        history_seconds=2 * 86400.0, qps_per_replica=5.0)
    counts = engine.Trace("c", Series(t, y, 60.0), "", "test", counts=True)
    viewed = replace(counts, series=Series(t, rate_view(t, y, 60.0), 60.0), counts=False)
    def mean_at_l(trace):
        return engine.run(trace, s, [], score=("seasonal_naive",)).models["seasonal_naive"].mean_at_l

    a = mean_at_l(counts)
    assert np.array_equal(a, mean_at_l(viewed)) and len(a) > 100
    assert not np.array_equal(a, mean_at_l(replace(counts, counts=False)))  # the raw counts forecast otherwise

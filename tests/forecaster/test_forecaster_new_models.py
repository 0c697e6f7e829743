"""``envelope``, ``mstl`` and ``ets``: what each adds beyond the contract, with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from forecaster.base import Series
from forecaster.metrics import mase
from forecaster.models import make
from forecaster.models.envelope import DAY, WEEK, detect_period
from forecaster.models.statsf import coarse

T0 = 1_700_006_400.0  # a Wednesday 00:00 UTC


def daily_weekly(days: int, step: float = 600.0, seed: int = 0, weekend: float = 0.5) -> Series:
    """A daily cycle, weekends (4 days of 7 here) at ``weekend`` x the traffic, noise sd 2."""
    t = T0 + step * np.arange(int(days * DAY / step))
    day = 2 * np.pi * ((t - T0) % DAY) / DAY
    weekend_days = (((t - T0) // DAY) % 7) >= 3
    y = (60 + 40 * np.sin(day - 1.5)) * np.where(weekend_days, weekend, 1.0)
    return Series(t, np.maximum(y + np.random.default_rng(seed).normal(0, 2, len(t)), 0), step)


def test_period_detection_prefers_the_week_when_weekends_differ():
    assert detect_period(daily_weekly(21).y, 600.0) == WEEK
    assert detect_period(daily_weekly(10).y, 600.0) == DAY  # 10 days: a week is not covered twice
    assert detect_period(daily_weekly(1).y, 600.0) is None


def test_envelope_forecast_is_the_max_of_the_same_window_a_period_ago():
    """Daily period (5 days of history), 7 days back (only 5 exist), window +-1 step at 1 h steps."""
    step = 3600.0
    t = T0 + step * np.arange(5 * 24)
    y = np.full(len(t), 10.0)
    y[24 * 2 + 13] = 50.0  # day 2, 13:00
    s = Series(t, y, step)
    f = make("envelope", window=3600.0, period=DAY).fit(s)
    fc = f.predict(24, (0.9,))  # day 5, 00:00 .. 23:00
    # 12:00, 13:00 and 14:00 of day 5 have 13:00 of day 2 within +-1 h of the same time 3 days ago
    want = np.full(24, 10.0)
    want[12:15] = 50.0
    np.testing.assert_array_equal(fc.mean, want)
    np.testing.assert_array_equal(fc.quantiles[0.9], want)


def test_mstl_and_ets_forecast_a_seasonal_series_better_than_naive():
    """A day ahead, MSTL (daily + weekly seasons) on three weeks with a weekly pattern, ETS (daily season) on a
    plain daily cycle, both beat a flat line by half and their 80 % interval holds most actuals."""
    for name, weekend in (("mstl", 0.5), ("ets", 1.0)):
        s = daily_weekly(22, weekend=weekend)
        train, test = s.until(s.t[-1] - DAY + 1), s.tail(DAY)
        flat = make("naive").fit(train).predict(len(test)).mean
        f = make(name).fit(train)
        fc = f.predict(len(test), (0.1, 0.9))
        err = np.mean(np.abs(fc.mean - test.y))
        assert err < 0.5 * np.mean(np.abs(flat - test.y)), name
        inside = np.mean((test.y >= fc.quantiles[0.1]) & (test.y <= fc.quantiles[0.9]))
        assert inside > 0.5, (name, inside)  # the 80 % interval holds most actuals
    s = daily_weekly(22)
    train, test = s.until(s.t[-1] - DAY + 1), s.tail(DAY)
    # 10 min points on the 15 min fit grid: 2 points a bucket (20 min), so 72 a day and 504 a week
    assert make("mstl").fit(train).seasons == (72, 504)
    assert mase(test.y, make("mstl").fit(train).predict(len(test)).mean, train.y, 144) < 1.0


def test_coarse_grid_averages_and_fills_gaps():
    t = T0 + 60.0 * np.arange(12)
    y = np.arange(12, dtype=float)
    y[3:6] = np.nan  # the second 15 min... here 3-minute buckets: bucket 1 is all NaN
    ct, cy, fs = coarse(Series(t, y, 60.0), 180.0)
    assert fs == 180.0 and len(ct) == 4
    # buckets [0,1,2] -> 1; [3..5] NaN -> interpolated between 1 and 7 -> 4; [6,7,8] -> 7; [9,10,11] -> 10
    np.testing.assert_allclose(cy, [1.0, 4.0, 7.0, 10.0])


@pytest.mark.parametrize("name", ["mstl", "ets"])
def test_statsforecast_models_refuse_less_than_two_days(name):
    from forecaster.base import InsufficientHistory

    with pytest.raises(InsufficientHistory, match="2 days"):
        make(name).fit(daily_weekly(1))

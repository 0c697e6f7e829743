"""Holiday days in a time zone (``timezone``): a holiday is the zone's calendar day, local midnight to local
midnight, in the substitution, the forecast's effects, the accuracy split and the marked periods. Worked on
5-min series stored in UTC, as the server reads Prometheus."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from forecaster.base import Series
from forecaster.calendar import (CalendarError, ORDINARY, check_timezone, day_bounds, holiday_days, holiday_periods,
                                 local_days, substitute_holidays)
from forecaster.models import make_for_policy

NY = "America/New_York"
STEP = 300.0


def ts(*a) -> float:
    return dt.datetime(*a, tzinfo=dt.timezone.utc).timestamp()


def local_day(y: int, m: int, d: int) -> int:
    """The day number of a calendar date (days since 1970-01-01), whatever the zone."""
    return (dt.date(y, m, d) - dt.date(1970, 1, 1)).days


def series(first: float, days: int) -> Series:
    """5-min points from ``first``; y = the point's index + 1 (every value distinct, so a substituted point shows)."""
    t = first + STEP * np.arange(days * 288)
    return Series(t, np.arange(1.0, len(t) + 1.0), STEP)


def changed(s: Series, day: int, tz: str) -> np.ndarray:
    return s.t[substitute_holidays(s.t, s.y, np.array([day]), 7 * 86400.0, tz) != s.y]


def test_check_timezone_names_what_is_accepted():
    assert check_timezone("America/New_York") == NY and check_timezone("utc") == "UTC"
    for bad in ("Mars/Olympus", "", "../../etc/passwd", "x" * 100):
        with pytest.raises(CalendarError, match="not a known time zone; accepted an IANA time zone name such as UTC"):
            check_timezone(bad)


def test_thanksgiving_in_new_york_is_substituted_from_0500z_to_0500z():
    # Thanksgiving 2026-11-26 (Thursday), EST = UTC-5: local midnight is 05:00Z; the day is 24 h = 288 points,
    # the first at 2026-11-26T05:00Z, the last at 2026-11-27T04:55Z; each replaced by the point a week before
    # (index - 2016, so y - 2016)
    s = series(ts(2026, 11, 9), 21)
    days = holiday_days("US", s.t[0], s.t[-1], tz=NY)
    n = local_day(2026, 11, 26)
    assert days[n] == "Thanksgiving Day"
    got = changed(s, n, NY)
    assert len(got) == 288 and got[0] == ts(2026, 11, 26, 5) and got[-1] == ts(2026, 11, 27, 4, 55)
    sub = substitute_holidays(s.t, s.y, np.array([n]), 7 * 86400.0, NY)
    i = np.flatnonzero(s.t == ts(2026, 11, 26, 5))[0]
    assert sub[i] == s.y[i] - 2016
    # in UTC (the default) the same day number is 00:00Z .. 23:55Z
    utc = changed(s, n, "UTC")
    assert utc[0] == ts(2026, 11, 26) and utc[-1] == ts(2026, 11, 26, 23, 55)
    assert holiday_periods("US", s.t[0], s.t[-1], tz=NY)[-1] == (ts(2026, 11, 26, 5), ts(2026, 11, 27, 5),
                                                                 "Thanksgiving Day")


@pytest.mark.parametrize("date, start, end, points", [
    # DST ends Sunday 2026-11-01: local midnight is 04:00Z (EDT), the next one 05:00Z (EST): 25 h = 300 points
    ((2026, 11, 1), (2026, 11, 1, 4), (2026, 11, 2, 5), 300),
    # DST starts Sunday 2026-03-08: 05:00Z (EST) to 04:00Z (EDT): 23 h = 276 points
    ((2026, 3, 8), (2026, 3, 8, 5), (2026, 3, 9, 4), 276),
])
def test_a_dst_day_is_23_or_25_hours(date, start, end, points):
    n = local_day(*date)
    lo, hi = day_bounds([n], NY)
    assert (lo[0], hi[0]) == (ts(*start), ts(*end))
    s = series(ts(*date) - 10 * 86400.0, 20)
    got = changed(s, n, NY)
    assert len(got) == points and got[0] == ts(*start) and got[-1] == ts(*end) - STEP
    assert list(local_days([ts(*start) - 1, ts(*start), ts(*end) - 1, ts(*end)], NY)) == [n - 1, n, n, n + 1]


def test_a_forecast_of_the_holiday_ahead_covers_the_local_day():
    # two ordinary weeks of a daily shape (y = 100 + hour of the UTC day), then Thanksgiving ahead with
    # holidayAs ordinary and a one-day window: the days are New York's; the model, seasonal_naive, copies the
    # week before; with the ``learned`` rule and the profile of a past holiday the effect covers the local day.
    # Here: the past holiday is Veterans Day 2026-11-11 (Wednesday) at 10 % of its day, local 05:00Z .. 05:00Z;
    # substituted by the Wednesday before it, its profile per local hour is log((0.1 y + c) / (y + c)); Thanksgiving
    # (Thursday 11-26) ahead takes it on its local hours only: 05:00Z 11-26 .. 04:55Z 11-27.
    t = ts(2026, 11, 2, 5) + STEP * np.arange(22 * 288)  # local midnight Monday 11-02 .. Tuesday 11-24
    y = 100.0 + (t % 86400.0) // 3600.0
    vet = (t >= ts(2026, 11, 11, 5)) & (t < ts(2026, 11, 12, 5))
    y[vet] *= 0.1
    s = Series(t, y, STEP)
    days = tuple(holiday_days("US", t[0], t[-1] + 3 * 86400.0, tz=NY))
    f = make_for_policy("seasonal_naive", seed=0, level_half_life=0.0, quantile=0.8, holiday_days=days,
                        timezone=NY).fit(s)
    assert f.effects.profile_day == local_day(2026, 11, 11)
    fc = f.predict(3 * 288)
    on = (fc.t >= ts(2026, 11, 26, 5)) & (fc.t < ts(2026, 11, 27, 5))
    plain = 100.0 + (fc.t % 86400.0) // 3600.0
    np.testing.assert_allclose(fc.mean[on], 0.1 * plain[on], rtol=1e-9)  # (y + c) x (0.1 y + c) / (y + c) - c
    np.testing.assert_allclose(fc.mean[~on], plain[~on], rtol=1e-12)
    g = make_for_policy("seasonal_naive", seed=0, level_half_life=0.0, quantile=0.8, holiday_days=days,
                        holiday_as=ORDINARY, timezone=NY).fit(s)
    np.testing.assert_allclose(g.predict(3 * 288).mean, plain, rtol=1e-12)  # substituted: an ordinary Thursday

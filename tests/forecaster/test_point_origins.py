"""The point models forecast from many origins in one call (``predict_origins``), as one at a time, bit for bit.

``linear_trend`` and ``seasonal_naive`` forecast from the newest points, so a replay asked them one cutoff at a
time (10,080 calls a model over a week of 1-minute cutoffs). Where every row is regular (the line's points are
finite; the seasonal history on the grid, without a gap or a holiday) the rows are computed at once; the others
go through ``_one``, the general path. Each number must be what ``_one`` gives for that origin alone.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forecaster.base import Series
from forecaster.evaluate import historical_forecasts
from forecaster.models.linear_trend import LinearTrendFitted, LinearTrendForecaster, line
from forecaster.models.seasonal_naive import SeasonalNaiveFitted, SeasonalNaiveForecaster
from support.forecasts import OneAtATime, same

STEP = 600.0
T0 = 1_700_006_400.0  # a Wednesday, 00:00 UTC
QS = st.sets(st.sampled_from([0.05, 0.1, 0.5, 0.8, 0.9, 0.99]), max_size=4).map(lambda s: tuple(sorted(s)))


def series(days: float, seed: int = 3, gaps: tuple[int, ...] = ()) -> Series:
    t = T0 + STEP * np.arange(int(days * 86400 / STEP))
    day = 2 * np.pi * (t - T0) / 86400.0
    y = np.maximum(100.0 + 40.0 * np.sin(day) + np.random.default_rng(seed).normal(0, 3, t.size), 0.0)
    y[list(gaps)] = np.nan
    return Series(t, y, STEP)


@st.composite
def cases(draw):
    """A fit on 4 days, then origins up to a day after it (on the grid, or anywhere), a recent window with
    gaps or none, and the quantiles."""
    gaps = tuple(draw(st.lists(st.integers(0, 5 * 144 - 1), max_size=6)))
    s = series(5.0, seed=draw(st.integers(0, 5)), gaps=gaps)
    fit_n = 4 * 144
    on_grid = st.integers(-3, 144).map(lambda k: float(s.t[fit_n - 1] + STEP * k))
    anywhere = st.floats(float(s.t[fit_n - 20]), float(s.t[-1]) + 3 * STEP, allow_nan=False)
    origins = draw(st.lists(st.one_of(on_grid, anywhere), max_size=40))
    lo = draw(st.integers(fit_n - 12, fit_n))
    recent = None if draw(st.booleans()) else Series(s.t[lo:], s.y[lo:], STEP)
    return s, fit_n, origins, recent, draw(st.integers(0, 30)), draw(QS)


@settings(max_examples=80, deadline=None)
@given(cases(), st.booleans())
def test_seasonal_naive_many_origins_equal_one_at_a_time(case, holidays):
    s, fit_n, origins, recent, horizon, qs = case
    days = (19680, 19681) if holidays else ()
    f = SeasonalNaiveForecaster(season=86400.0, holiday_days=days).fit(Series(s.t[:fit_n], s.y[:fit_n], STEP))
    many = f.predict_origins(horizon, qs, origins, recent)
    assert len(many) == len(origins)
    for o, fc in zip(origins, many):
        assert same(fc, f._one(horizon, qs, o, recent)), o
        assert same(fc, f.predict(horizon, qs, origin=o, recent=recent)), o


@settings(max_examples=80, deadline=None)
@given(cases(), st.integers(2, 6))
def test_linear_trend_many_origins_equal_one_at_a_time(case, points):
    s, fit_n, origins, recent, horizon, qs = case
    f = LinearTrendForecaster(points=points).fit(Series(s.t[:fit_n], s.y[:fit_n], STEP))
    many = f.predict_origins(horizon, qs, origins, recent)
    assert len(many) == len(origins)
    for o, fc in zip(origins, many):
        assert same(fc, f._one(horizon, qs, o, recent)), o
        assert same(fc, f.predict(horizon, qs, origin=o, recent=recent)), o


def test_regular_rows_take_the_row_path(monkeypatch):
    """On the grid, without gaps: no origin goes through ``_one`` (else the test above compares _one with
    itself); a gap sends the seasonal model's rows (its history is filled from before each origin) and the
    line's rows whose last points hold it one at a time."""
    s = series(5.0)
    fit = Series(s.t[:576], s.y[:576], STEP)
    recent = Series(s.t[566:], s.y[566:], STEP)
    origins = [float(s.t[575] + STEP * k) for k in range(100)]
    ones: list[str] = []
    for cls in (SeasonalNaiveFitted, LinearTrendFitted):
        real = cls._one
        monkeypatch.setattr(cls, "_one", lambda self, *a, _r=real: ones.append(self.model) or _r(self, *a))
    sn = SeasonalNaiveForecaster(season=86400.0).fit(fit)
    lt = LinearTrendForecaster().fit(fit)
    assert len(sn.predict_origins(12, (0.5, 0.9), origins, recent)) == 100
    assert len(lt.predict_origins(12, (0.5, 0.9), origins, recent)) == 100
    assert ones == []
    gappy = Series(recent.t, recent.y.copy(), STEP)
    gappy.y[60] = np.nan  # origin 50 (index 625) is the first whose last 5 points hold it; 54's are past it
    sn.predict_origins(12, (0.5,), origins, gappy)
    lt.predict_origins(12, (0.5,), origins, gappy)
    assert ones.count("seasonal_naive") == 100
    assert ones.count("linear_trend") == 5


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 7), st.integers(2, 6), st.lists(st.integers(-2, 10), min_size=1, max_size=8), QS)
def test_a_recent_window_shorter_than_the_line_takes_the_stored_points(n_recent, points, steps, qs):
    """The server forecasts with whatever recent points it has (one, a few): fewer than ``points`` of them
    (or none) is the general path, which fills up with the fit's own last points; no row reads past them."""
    s = series(5.0)
    fit_n = 4 * 144
    f = LinearTrendForecaster(points=points).fit(Series(s.t[:fit_n], s.y[:fit_n], STEP))
    recent = Series(s.t[fit_n:fit_n + n_recent], s.y[fit_n:fit_n + n_recent], STEP)
    origins = [float(s.t[fit_n - 1] + STEP * k) for k in steps]
    many = f.predict_origins(6, qs, origins, recent)
    for o, fc in zip(origins, many):
        assert same(fc, f._one(6, qs, o, recent)), o
        assert np.isfinite(fc.mean).all()


def test_line_is_the_least_squares_line():
    """The row form sums left to right; against numpy's mean and dot, the same line within a few ulps."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        k = int(rng.integers(2, 9))
        pt = np.sort(rng.uniform(1.7e9, 1.7e9 + 1e5, k))
        py = rng.uniform(0, 1e4, k)
        t = pt[-1] + 60.0 * np.arange(1, 6)
        dx = pt - pt.mean()
        expect = py.mean() + float(np.dot(dx, py - py.mean()) / np.dot(dx, dx)) * (t - pt.mean())
        np.testing.assert_allclose(line(pt, py, t), expect, rtol=1e-9, atol=1e-6)
    # worked: y = 2 t + 1 through (0, 1), (1, 3), (2, 5): at t = 3, 4 the line gives 7, 9
    assert line(np.array([0.0, 1.0, 2.0]), np.array([1.0, 3.0, 5.0]), np.array([3.0, 4.0])).tolist() == [7.0, 9.0]


@pytest.mark.parametrize("forecaster", [LinearTrendForecaster(), SeasonalNaiveForecaster(),
                                        dataclasses.replace(SeasonalNaiveForecaster(), level_half_life=0.0)])
def test_a_replay_forecasts_the_same_with_and_without_predict_origins(forecaster):
    s = series(16.0, gaps=(2200, 2201, 2230))  # gaps in the last day: some groups go one origin at a time
    start = float(s.t[-1]) - 86400.0 + STEP
    kw = dict(start=start, horizon=12, refit_every=12, train_window=14 * 86400.0, quantiles=(0.2, 0.8))
    batched = historical_forecasts(forecaster, s, **kw)
    single = historical_forecasts(OneAtATime(forecaster), s, **kw)
    assert len(batched) == len(single) == 144 - 11
    for (c1, f1), (c2, f2) in zip(batched, single):
        assert c1 == c2 and same(f1, f2), c1

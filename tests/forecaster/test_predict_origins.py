"""Forecasts from many origins in one call (``ProphetFitted.predict_origins``) are the ones made one at a time.

A replay forecasts from every cutoff between two fits; Prophet's curve is a function of time alone, so the
curve is evaluated once at every distinct time those forecasts need. Each number must be what ``predict``
gives for that origin alone, bit for bit (the seasonal term is a row's own sum for that reason: a BLAS
matrix-vector product differs by an ulp with the row's place in the matrix).
"""

from __future__ import annotations

import dataclasses
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forecaster.base import Series
from forecaster.evaluate import historical_forecasts
from forecaster.models.prophet import ProphetForecaster
from forecaster.models.prophet_curve import ProphetFitted
from support.forecasts import OneAtATime, same

STEP = 300.0
T0 = 1_700_006_400.0  # a Wednesday, 00:00 UTC


def series(days: float = 15.0) -> Series:
    t = T0 + STEP * np.arange(int(days * 86400 / STEP))
    day = 2 * np.pi * (t - T0) / 86400.0
    rng = np.random.default_rng(3)
    y = 100.0 + 40.0 * np.sin(day) + 10.0 * np.sin(day / 7) + rng.normal(0, 3, t.size)
    return Series(t, np.maximum(y, 0.0), STEP)


@pytest.fixture(scope="module")
def fitted() -> ProphetFitted:
    return ProphetForecaster(seed=0).fit(series())


origins = st.lists(st.one_of(st.integers(0, 4000).map(lambda k: T0 + 15 * 86400 + STEP * k),  # on the grid
                             st.floats(T0, T0 + 30 * 86400, allow_nan=False)), min_size=0, max_size=60)


@settings(max_examples=60, deadline=None)
@given(origins, st.integers(0, 40), st.sets(st.sampled_from([0.05, 0.1, 0.5, 0.8, 0.9, 0.99]), max_size=4),
       st.booleans())
def test_many_origins_equal_one_at_a_time_bit_for_bit(fitted, os_, horizon, qs, holidays):
    f = fitted
    if holidays:  # the native weekday rule: holiday points are the curve on another day of the week
        f = dataclasses.replace(fitted, holiday_days=(19680, 19683), holiday_as=6)
    qs = tuple(sorted(qs))
    many = f.predict_origins(horizon, qs, os_)
    assert len(many) == len(os_)
    for o, fc in zip(os_, many):
        one = f.predict(horizon, qs, origin=o)
        assert same(fc, one), o
        assert fc.t.tolist() == pytest.approx([o + STEP * i for i in range(1, horizon + 1)], abs=1e-6)


def test_a_replay_forecasts_the_same_with_and_without_predict_origins(monkeypatch):
    calls: list[int] = []  # origins per predict_origins call
    real = ProphetFitted.predict_origins
    monkeypatch.setattr(ProphetFitted, "predict_origins",
                        lambda self, h, qs, os_, recent=None: calls.append(len(os_)) or real(self, h, qs, os_, recent))
    s = series(16.0)
    start = float(s.t[-1]) - 86400.0 + STEP  # the last day: 288 cutoffs, a refit every 2 h (24 cutoffs)
    kw = dict(start=start, horizon=12, refit_every=24, train_window=14 * 86400.0, quantiles=(0.2, 0.8))
    batched = historical_forecasts(ProphetForecaster(seed=0), s, **kw)
    grouped = list(calls)
    calls.clear()
    single = historical_forecasts(OneAtATime(ProphetForecaster(seed=0)), s, **kw)
    assert len(batched) == len(single) == 288 - 11  # the last 11 cutoffs' windows run past the series' end
    for (c1, f1), (c2, f2) in zip(batched, single):
        assert c1 == c2 and same(f1, f2)
    # 277 cutoffs in groups of up to 24, one call a fit; the wrapper's __getattr__ would forward predict_origins,
    # but its class has none: one origin a call
    assert sum(grouped) == 277 and max(grouped) == 24 and len(grouped) <= 13
    assert calls == [1] * 277


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(-3000, 3000), st.integers(1024, 4000), st.sampled_from([60.0, 300.0])),
                min_size=1, max_size=6), st.booleans())
def test_sliding_features_are_the_features_bit_for_bit(windows, weekly):
    """A refit's band window is its predecessor's moved on: the rows of the times both hold are reused. Any
    sequence of windows (overlapping or not, moved back, another step) gives ``features`` exactly."""
    from forecaster.models import prophet_curve as pc

    seas = (("daily", 1.0, 10),) + ((("weekly", 7.0, 25),) if weekly else ())
    for start, n, step in windows:
        t = T0 + step * (start + np.arange(n))
        got = pc.features_sliding(t, seas)
        assert got.tobytes() == pc.features(t, seas).tobytes()
        assert not got.flags.writeable


def test_sliding_features_compute_only_the_new_times(monkeypatch):
    from forecaster.models import prophet_curve as pc

    rows: list[int] = []
    real = pc.features
    monkeypatch.setattr(pc, "features", lambda t, s: rows.append(len(t)) or real(t, s))
    seas = (("daily", 1.0, 10),)
    week = T0 + 60.0 * np.arange(10080)
    pc.features_sliding(week, seas)
    pc.features_sliding(week + 7200.0, seas)  # two hours on: 120 new times
    pc.features_sliding(week[:500], seas)  # short calls neither reuse nor replace the kept rows
    pc.features_sliding(week + 14400.0, seas)
    assert rows[-3:] == [120, 500, 120]
    monkeypatch.setattr(pc, "SLIDING_MAX_BYTES", 10080 * 20 * 8 - 1)  # a week's rows over the bound: not kept
    pc.features_sliding(week + 21600.0, seas)  # still uses the rows kept before, then keeps none
    pc.features_sliding(week + 28800.0, seas)
    assert rows[-2:] == [120, 10080]

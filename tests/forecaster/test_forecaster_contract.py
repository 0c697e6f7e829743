"""One contract, every registered model (statsforecast style): the built-ins and any plugin installed
(``forescale.models`` entry points; tests/forecaster/test_model_plugins.py runs it on the example plugin)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from forecaster.base import Forecast, InsufficientHistory, Series
from forecaster.models import BUILTINS, NAMES, from_state, make, to_state

STEP = 60.0
QS = (0.1, 0.5, 0.9)
T0 = 1_700_000_000.0 - (1_700_000_000.0 % 86400)  # a midnight


def synthetic(days: float = 3.0, step: float = STEP, seed: int = 0) -> Series:
    """Daily-seasonal traffic with noise (requests/s), 1-min grid."""
    n = int(days * 86400 / step)
    t = T0 + step * np.arange(n)
    rng = np.random.default_rng(seed)
    day = 2 * np.pi * (t - T0) / 86400
    y = 50 + 35 * np.sin(day - 1.0) + 8 * np.sin(2 * day) + rng.normal(0, 3, n)
    return Series(t, np.maximum(y, 0.0), step)


@pytest.fixture(scope="module")
def series() -> Series:
    return synthetic()


@pytest.fixture(scope="module")
def fitted(series):
    return {name: make(name, seed=0).fit(series) for name in NAMES}


def check_forecast(fc: Forecast, origin: float, step: float, horizon: int, qs=QS) -> None:
    assert isinstance(fc, Forecast)
    assert fc.t.shape == fc.mean.shape == (horizon,)
    np.testing.assert_allclose(fc.t, origin + step * np.arange(1, horizon + 1))
    assert np.all(np.isfinite(fc.mean)) and np.all(fc.mean >= 0)
    assert sorted(fc.quantiles) == sorted(qs)
    for q in qs:
        v = fc.quantiles[q]
        assert v.shape == (horizon,) and np.all(np.isfinite(v)) and np.all(v >= 0)
    ordered = [fc.quantiles[q] for q in sorted(qs)]
    for lo, hi in zip(ordered, ordered[1:]):
        assert np.all(lo <= hi + 1e-9), "quantiles cross"


@pytest.mark.parametrize("name", NAMES)
def test_shapes_timestamps_order_nonnegative(name, series, fitted):
    fc = fitted[name].predict(120, QS)
    check_forecast(fc, series.t[-1], STEP, 120)
    assert fc.model.startswith(name)
    f = fitted[name]
    assert f.model == name and f.step == STEP and f.last_t == series.t[-1]
    assert f.chosen in NAMES and f.chosen != "auto"
    assert f.history_max == pytest.approx(np.nanmax(series.y))


@pytest.mark.parametrize("name", NAMES)
def test_forecast_is_sane_on_a_seasonal_series(name, series, fitted):
    fc = fitted[name].predict(60, QS)
    lo, hi = np.nanmin(series.y), np.nanmax(series.y)
    assert np.all(fc.mean <= 2 * hi) and np.all(fc.mean >= 0)
    assert np.all(fc.quantiles[0.9] <= 3 * hi)
    assert lo >= 0


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_with_a_seed(name, series, fitted):
    again = make(name, seed=0).fit(series).predict(60, QS)
    first = fitted[name].predict(60, QS)
    np.testing.assert_array_equal(first.mean, again.mean)
    for q in QS:
        np.testing.assert_array_equal(first.quantiles[q], again.quantiles[q])


@pytest.mark.parametrize("name", NAMES)
def test_predict_from_a_later_origin(name, fitted):
    """A model fitted earlier forecasts from now: starts one step after the new origin, uses newer points."""
    later = synthetic(days=3.5)  # the same process, 12 h more
    f = fitted[name]
    recent = later.tail(12 * 3600)
    fc = f.predict(30, QS, recent=recent)
    check_forecast(fc, later.t[-1], STEP, 30)
    # an explicit origin in the middle of ``recent`` ignores the points after it (no peeking)
    origin = later.t[-100]
    a = f.predict(30, QS, origin=origin, recent=recent)
    b = f.predict(30, QS, origin=origin, recent=recent.until(origin + 1))
    check_forecast(a, origin, STEP, 30)
    np.testing.assert_array_equal(a.mean, b.mean)


def test_later_origin_uses_recent_points():
    """naive and linear_trend follow the newest observations, prophet evaluates its curve further on."""
    s = synthetic()
    recent = Series(s.t[-1] + STEP * np.arange(1, 11), np.full(10, 500.0), STEP)
    assert make("naive").fit(s).predict(3, recent=recent).mean == pytest.approx([500.0] * 3)
    assert make("linear_trend").fit(s).predict(3, recent=recent).mean == pytest.approx([500.0] * 3)
    p = make("prophet").fit(s)
    np.testing.assert_allclose(p.predict(3, recent=recent).mean, p.predict(13).mean[-3:])


@pytest.mark.parametrize("name", NAMES)
def test_state_round_trip_is_json(name, fitted):
    state = to_state(fitted[name])
    text = json.dumps(state, allow_nan=False)
    back = from_state(json.loads(text))
    a, b = fitted[name].predict(90, QS), back.predict(90, QS)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-12)
    for q in QS:
        np.testing.assert_allclose(a.quantiles[q], b.quantiles[q], rtol=1e-12)
    assert back.chosen == fitted[name].chosen


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [0, 1, 3, 30])
def test_short_input_is_refused_or_valid(name, n):
    s = synthetic()
    short = Series(s.t[:n], s.y[:n], STEP)
    try:
        f = make(name).fit(short)
    except InsufficientHistory as e:
        assert str(e)
        return
    fc = f.predict(10, QS)
    check_forecast(fc, short.t[-1], STEP, 10)


@pytest.mark.parametrize("name", NAMES)
def test_all_nan_input_is_refused(name):
    s = synthetic(days=3)
    with pytest.raises(InsufficientHistory):
        make(name).fit(Series(s.t, np.full(len(s), np.nan), STEP))


@pytest.mark.parametrize("name", NAMES)
def test_gappy_input(name):
    """NaN runs in the middle (and a NaN last point) still give a valid forecast."""
    s = synthetic(days=3)
    y = s.y.copy()
    y[1000:1400] = np.nan  # a 6.7 h outage
    y[2500:2510] = np.nan
    y[-1] = np.nan
    gappy = Series(s.t, y, STEP)
    fc = make(name).fit(gappy).predict(60, QS)
    check_forecast(fc, s.t[-1], STEP, 60)
    assert np.all(fc.mean <= 2 * np.nanmax(y))


@pytest.mark.parametrize("name", NAMES)
def test_zero_horizon_and_bad_quantiles(name, fitted):
    fc = fitted[name].predict(0, QS)
    assert len(fc) == 0
    with pytest.raises(ValueError):
        fitted[name].predict(5, (1.5,))


def test_registry():
    assert BUILTINS == ("prophet", "seasonal_naive", "naive", "linear_trend", "auto", "envelope", "mstl", "ets")
    assert NAMES[:len(BUILTINS)] == BUILTINS  # then the plugins installed (tests/forecaster/test_model_plugins.py)
    with pytest.raises(ValueError, match="accepted: prophet, seasonal_naive, naive, linear_trend, auto, envelope, mstl, ets"):
        make("arima")
    with pytest.raises(ValueError, match="unknown option"):
        make("naive", bogus=1)
    assert make("PROPHET", seed=3).seed == 3
    with pytest.raises(ValueError, match="state names model"):
        from_state({"model": "arima"})


def test_constant_series():
    s = synthetic()
    flat = Series(s.t, np.full(len(s), 7.0), STEP)
    for name in NAMES:
        fc = make(name).fit(flat).predict(10, QS)
        check_forecast(fc, s.t[-1], STEP, 10)
        np.testing.assert_allclose(fc.mean, 7.0, rtol=1e-3)


def test_auto_records_its_choice():
    s = synthetic(days=3)
    f = make("auto", lead=300).fit(s)
    assert f.chosen in ("prophet", "seasonal_naive", "naive", "linear_trend", "envelope", "mstl", "ets")
    assert set(f.scores) == {"prophet", "seasonal_naive", "naive", "linear_trend"}  # MASE_CANDIDATES
    assert f.predict(5).model == f"auto:{f.chosen}"
    best = min((v, k) for k, v in f.scores.items() if np.isfinite(v))[1]
    assert f.chosen == best


def test_auto_scored_on_the_provisioned_quantile_lets_every_model_compete():
    from forecaster.models import make_for_policy

    s = synthetic(days=3)
    f = make_for_policy("auto", seed=0, level_half_life=14400.0, quantile=0.8).fit(s)
    assert set(f.scores) == set(BUILTINS) - {"auto"}  # every built-in model, scored by the q0.8 pinball loss
    assert sum(np.isfinite(v) for v in f.scores.values()) >= 4
    best = min((v, k) for k, v in f.scores.items() if np.isfinite(v))[1]
    assert f.chosen == best
    # the pinball loss of a quantile is in the data's units and below the mean absolute level of the data
    assert 0 < f.scores[best] < float(np.mean(np.abs(s.y)))
    # only auto takes the quantile; any other model is made as make() makes it
    assert make_for_policy("naive", seed=2, level_half_life=60.0, quantile=0.8) == make("naive", seed=2,
                                                                                        level_half_life=60.0)
    with pytest.raises(ValueError, match="quantile 1.5: accepted is a number strictly between 0 and 1"):
        make("auto", quantile=1.5).fit(s)


def test_forecaster_never_imports_scaler():
    import subprocess
    import sys

    code = ("import sys, forecaster.models, forecaster.series, forecaster.evaluate, forecaster.metrics, "
            "forecaster.level; forecaster.models.make('prophet'); "
            "sys.exit(1 if any(m == 'scaler' or m.startswith('scaler.') for m in sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


@pytest.mark.parametrize("name", NAMES)
def test_every_model_takes_seed_and_level_half_life(name):
    """The server passes the same options to whichever model the metadata names."""
    assert make(name, seed=1, level_half_life=1800.0).seed == 1


@pytest.mark.parametrize("name", NAMES)
def test_every_model_keeps_the_contract_with_holidays(name, series):
    """The holiday mechanism (make_for_policy with holidays, learned) around every model keeps the contract. The
    series' last day is a holiday in progress at 40 % of its traffic; 3 days hold no week before it, so nothing is
    substituted or learned (test_holiday_mechanism has the worked values) and the forecast is the model's own."""
    from forecaster.models import make_for_policy
    from forecaster.models.holiday import HolidayFitted

    last_day = int(series.t[-1] // 86400)
    part = series.until(series.t[-1] - 6 * 3600)  # the holiday's first 18 h are observed
    y = part.y.copy()
    y[part.t >= last_day * 86400] *= 0.4
    s = Series(part.t, y, STEP)
    f = make_for_policy(name, seed=0, level_half_life=1800.0, quantile=0.9, holiday_days=(last_day,)).fit(s)
    assert isinstance(f, HolidayFitted) and f.model == name and f.last_t == s.t[-1]
    fc = f.predict(120, QS)
    check_forecast(fc, s.t[-1], STEP, 120)
    back = from_state(json.loads(json.dumps(to_state(f), allow_nan=False)))
    np.testing.assert_allclose(back.predict(120, QS).mean, fc.mean, rtol=1e-9)
    np.testing.assert_allclose(fc.mean, f.inner.predict(120, QS).mean, rtol=1e-12)

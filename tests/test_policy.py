"""The pure decision, table-driven, with cases on the HPA tolerance edge."""

import math

import numpy as np
import pytest

from forecaster.base import Forecast
from scaler.policy import PolicyParams, Reason, decide
from scaler.deadband import clear_dead_band, to_milli

NOW = 1_700_000_000.0
STEP = 60.0


def curve(fn, start=NOW - 600, minutes=60, q90_extra=0.0):
    """A 1-min forecast curve from ``fn(seconds from NOW)``, starting 10 min before NOW."""
    t = start + STEP * np.arange(minutes)
    mean = np.array([fn(x - NOW) for x in t], dtype=float)
    return Forecast(t, mean, {0.1: np.maximum(mean - 1, 0), 0.9: mean + q90_extra}, "test")


def params(**kw):
    base = dict(mode="forecastAndScale", lead_seconds=300.0, quantile=0.9, qps_per_replica=10.0, hpa_tolerance=0.0)
    base.update(kw)
    return PolicyParams(**base)


def ramp_at(offset, low=20.0, high=80.0):
    return lambda dt: high if dt >= offset else low


# observed, forecast, params, unusable -> planned, reason
CASES = {
    "reactive mode acts on observed": (50.0, curve(lambda dt: 90.0), params(mode="reactive"), None, 50.0, Reason.MODE_REACTIVE),
    "forecastOnly acts on observed": (50.0, curve(lambda dt: 90.0), params(mode="forecastOnly"), None, 50.0, Reason.MODE_FORECAST_ONLY),
    "zero history falls back to observed": (30.0, None, params(), Reason.INSUFFICIENT_HISTORY, 30.0, Reason.INSUFFICIENT_HISTORY),
    "fit failed falls back to observed": (30.0, curve(lambda dt: 90.0), params(), Reason.FIT_FAILED, 30.0, Reason.FIT_FAILED),
    "no forecast yet": (30.0, None, params(), None, 30.0, Reason.NO_FORECAST_YET),
    "flat zero traffic stays at zero": (0.0, curve(lambda dt: 0.0), params(), None, 0.0, Reason.OBSERVED_FLOOR),
    "ramp inside the lead window is provisioned now": (20.0, curve(ramp_at(200)), params(), None, 80.0, Reason.FORECAST),
    "ramp just past the window is not yet": (20.0, curve(ramp_at(360)), params(), None, 20.0, Reason.OBSERVED_FLOOR),
    "ramp exactly at now+L counts": (20.0, curve(ramp_at(300)), params(), None, 80.0, Reason.FORECAST),
    "forecast below observed keeps observed": (70.0, curve(lambda dt: 40.0), params(), None, 70.0, Reason.OBSERVED_FLOOR),
    "quantile, not mean, is provisioned": (10.0, curve(lambda dt: 40.0, q90_extra=15.0), params(), None, 55.0, Reason.FORECAST),
    "curve ending before now+L is stale": (25.0, curve(lambda dt: 90.0, minutes=14), params(), None, 25.0, Reason.FORECAST_STALE),
    "NaN forecast is absurd": (25.0, curve(lambda dt: math.nan), params(), None, 25.0, Reason.FORECAST_ABSURD),
    "negative observed is floored": (-3.0, None, params(mode="reactive"), None, 0.0, Reason.MODE_REACTIVE),
    "headroom multiplies the plan": (20.0, curve(ramp_at(200)), params(headroom=1.25), None, 100.0, Reason.FORECAST),
}


@pytest.mark.parametrize("name", list(CASES))
def test_decision_table(name):
    observed, fc, p, unusable, planned, reason = CASES[name]
    d = decide(observed, fc, p, NOW, unusable=unusable, history_max=100.0)
    assert d.reason is reason
    assert d.planned == pytest.approx(planned)


def test_far_outside_history_is_absurd():
    d = decide(20.0, curve(lambda dt: 5000.0), params(), NOW, history_max=100.0)
    assert d.reason is Reason.FORECAST_ABSURD and d.planned == 20.0


def test_forecast_only_still_reports_the_forecast_peak():
    d = decide(50.0, curve(lambda dt: 90.0), params(mode="forecastOnly"), NOW)
    assert d.forecast_peak == pytest.approx(90.0) and d.planned == 50.0


def test_level_correction_carries_the_current_residual():
    # traffic runs 20 above a flat forecast of 40: with a 10 min half-life the peak at now is 60
    d = decide(60.0, curve(lambda dt: 40.0), params(level_correction_seconds=600.0), NOW)
    assert d.forecast_peak == pytest.approx(60.0, abs=1e-6)
    assert d.planned == pytest.approx(60.0, abs=1e-6)
    # a ramp ahead keeps most of the residual: 80 + 20 * 0.5 ** (240/600) at the first ramp point
    d = decide(40.0, curve(ramp_at(240)), params(level_correction_seconds=600.0), NOW)
    assert d.forecast_peak == pytest.approx(80 + 20 * 0.5 ** (240 / 600))


# HPA (AverageValue, Kubernetes >= 1.33): no change while 1 - tol <= value / (target * current) <= 1 + tol,
# on the milli-quantities KEDA passes
def hpa_desired(value, target, current, tolerance=0.1):
    v, t = to_milli(value), to_milli(target)
    ratio = v / (t * current)
    if 1 - tolerance <= ratio <= 1 + tolerance:
        return current
    return math.ceil(v / t)


@pytest.mark.parametrize("current,planned,raw_result,compensated_result", [
    (10, 110.0, 10, 12),  # exactly +10 % at 10 replicas: inside the band (ratio <= 1.1); cleared, and +1 cannot exist
    (4, 44.001, 5, 5),    # one milli-unit past the edge over 4 running: the HPA acts, left alone
    (10, 109.0, 10, 12),  # inside the band: a +1 step from 10 cannot exist at tolerance 0.1, so +2
    (4, 42.0, 4, 5),      # 5 % over 4 replicas: swallowed raw, exact +1 compensated
    (9, 95.0, 9, 10),     # 5.6 % over 9: swallowed raw, +1 compensated (1.1 * 9 = 9.9 < 10)
    (11, 111.0, 11, 13),  # 12 planned over 11 running: inside the band, cleared at the price of one more
    (10, 111.0, 12, 13),  # compensation assumes r-1 replicas run: from 10 it overshoots by one
    (5, 50.0, 5, 5),      # steady: no change either way
    (1, 15.0, 2, 2),      # at 1 replica there is no band below 2
])
def test_tolerance_edge(current, planned, raw_result, compensated_result):
    assert hpa_desired(planned, 10.0, current) == raw_result
    value = clear_dead_band(planned, 10.0, 0.1)
    assert value >= planned
    assert hpa_desired(value, 10.0, current) == compensated_result
    # compensation never asks for fewer replicas than planned, and below 10 replicas never more
    r = math.ceil(planned / 10.0)
    assert math.ceil(value / 10.0 - 1e-9) >= r
    if r <= 10:
        assert math.ceil(value / 10.0 - 1e-9) == r
    # from r-1 replicas the compensated value always makes the HPA act
    if r >= 2:
        assert hpa_desired(value, 10.0, r - 1) >= r


def test_tolerance_compensation_follows_the_configured_tolerance():
    # a cluster with behavior.scaleUp.tolerance = 0.02
    value = clear_dead_band(42.0, 10.0, 0.02)
    assert value == 42.0  # 42/40 = 1.05 is already outside a 2 % band
    assert clear_dead_band(40.5, 10.0, 0.02) == 40.801  # the next milli-quantity past 1.02 x 40
    assert clear_dead_band(42.0, 10.0, 0.0) == 42.0


def test_decide_applies_the_compensation():
    d = decide(42.0, None, params(mode="reactive", hpa_tolerance=0.1), NOW)
    assert d.base == 42.0 and d.planned == 44.001 and math.ceil(d.planned / 10) == 5


def test_compensated_value_survives_keda_rounding():
    # KEDA formats the value with %.3f: a margin below one milli-unit would vanish and leave the ratio at 1.1
    for planned in (105.0, 100.0001, 42.0, 95.0, 1000.5):
        value = clear_dead_band(planned, 10.0, 0.1)
        r = math.ceil(to_milli(planned) / 10_000)  # the replicas the HPA reads from the rounded value
        assert to_milli(value) / (10_000 * (r - 1)) > 1.1


def test_warm_floor_adds_to_observed_and_forecast():
    # floor 15 req/s. forecast q0.9 = 40 everywhere, observed 10: base = 15 + max(10, 40) = 55.
    fc = curve(lambda dt: 40.0)
    d = decide(10.0, fc, params(floor_qps=15.0), NOW, history_max=100.0)
    assert d.reason is Reason.FORECAST
    assert d.base == 55.0 and d.forecast_peak == 55.0 and d.observed == 25.0
    # observed 70 above the forecast: base = 15 + 70 = 85, the observed floor wins.
    d = decide(70.0, fc, params(floor_qps=15.0), NOW, history_max=100.0)
    assert (d.reason, d.base) == (Reason.OBSERVED_FLOOR, 85.0)
    # no forecast at all: the floor still holds, 15 + 0 (negative observed floored first) = 15.
    d = decide(-4.0, None, params(floor_qps=15.0), NOW)
    assert (d.reason, d.planned) == (Reason.NO_FORECAST_YET, 15.0)
    # the absurdity check compares floor + peak with absurd_factor x (floor + history max):
    # peak 40 + 15 = 55 > 10 x (4 + 15) = 190? no -> trusted; without the floor 40 > 10 x max(4, 10 qps) = 100? no.
    # peak 150 + 15 = 165 vs 10 x (12 + 15) = 270 -> trusted with the floor; without it 150 > 10 x 12 = 120 -> absurd.
    big = curve(lambda dt: 150.0)
    assert decide(10.0, big, params(floor_qps=15.0), NOW, history_max=12.0).reason is Reason.FORECAST
    assert decide(10.0, big, params(), NOW, history_max=12.0).reason is Reason.FORECAST_ABSURD
    # level correction is unchanged by the floor: residual = (obs + 15) - (mean + 15) = obs - mean.
    lc = params(level_correction_seconds=3600.0)
    lc_floor = params(level_correction_seconds=3600.0, floor_qps=15.0)
    assert decide(60.0, fc, lc_floor, NOW).base == pytest.approx(decide(60.0, fc, lc, NOW).base + 15.0)


# -- missing data (issue 36, item 1) ---------------------------------------------------------------------------------
def test_missing_data_holds_on_the_forecast_and_never_learns_from_the_gap():
    """The issue's case: a 70.6 req/s forecast, levelCorrection 4h, the series stopped. Read as 0, the residual
    0 - 70.6 = -70.6 pulled the plan to 70.6 - 70.6 x 0.5^(300/14400) ~ 1.0 req/s (reason forecast). Missing: no
    correction at all (the plain q0.9 window max, 70.6), the held observation (the last good one, 50) only as the
    floor, reason fallback_missing_data."""
    lc = params(level_correction_seconds=14400.0)
    zero = decide(0.0, curve(lambda dt: 70.6), lc, NOW)  # what a gap read as 0 gave
    assert zero.reason is Reason.FORECAST and zero.planned == pytest.approx(70.6 - 70.6 * 0.5 ** (300 / 14400))
    d = decide(50.0, curve(lambda dt: 70.6), lc, NOW, missing=True)
    assert (d.reason, d.observed) == (Reason.MISSING_DATA, 50.0)
    assert d.planned == pytest.approx(70.6) and d.forecast_peak == pytest.approx(70.6)
    # the same poll with the observation known (50): the residual -20.6 is carried, the plan is below the forecast
    known = decide(50.0, curve(lambda dt: 70.6), lc, NOW)
    # (the window's max is at now + L = 300 s, where the negative residual has decayed most)
    assert known.planned == pytest.approx(70.6 - 20.6 * 0.5 ** (300 / 14400)) and known.planned < d.planned


@pytest.mark.parametrize("mode,fc,unusable,held,planned", [
    # forecastAndScale: max(held, forecast peak): a held 90 above a 40 forecast stays 90 (never below either)
    ("forecastAndScale", 40.0, None, 90.0, 90.0),
    ("forecastAndScale", 40.0, None, 10.0, 40.0),
    # no usable forecast (first fit pending, fit failed): the held observation
    ("forecastAndScale", None, None, 25.0, 25.0),
    ("forecastAndScale", 40.0, Reason.FIT_FAILED, 25.0, 25.0),
    # the modes that act on the observed rate act on the held one
    ("forecastOnly", 40.0, None, 25.0, 25.0),
    ("reactive", 40.0, None, 25.0, 25.0),
    # nothing held (no series ever): 0 (the registry reads that case as a real zero before it gets here)
    ("reactive", None, None, math.nan, 0.0),
])
def test_missing_data_in_every_mode_is_its_own_reason(mode, fc, unusable, held, planned):
    f = None if fc is None else curve(lambda dt: fc)
    d = decide(held, f, params(mode=mode, level_correction_seconds=3600.0), NOW, unusable=unusable, missing=True)
    assert d.reason is Reason.MISSING_DATA and d.planned == pytest.approx(planned)


def test_missing_data_keeps_events_and_headroom():
    """An event floor of 120 over a 40 forecast while the data is missing: 120 (the floor), headroom 1.5 on top,
    the reason still the missing-data one (the event's name in Decision.event)."""
    from forecaster.eventsfile import Event

    ev = Event("launch", NOW - 60, NOW + 3600, None, 120.0, 2)
    d = decide(30.0, curve(lambda dt: 40.0), params(events=(ev,), headroom=1.5), NOW, missing=True)
    assert (d.planned, d.reason, d.event) == (pytest.approx(180.0), Reason.MISSING_DATA, "launch")


def test_missing_data_rule_holds_for_any_curve_and_held_value():
    """Hypothesis: with the observation missing, the plan is never below the uncorrected quantile's window max nor
    the held observation (forecastAndScale, no headroom, no tolerance), and the level correction changes nothing."""
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=200, deadline=None, derandomize=True)
    @given(st.lists(st.floats(0, 1e4), min_size=60, max_size=60), st.floats(0, 1e4), st.floats(0, 86400))
    def check(values, held, half_life):
        t = NOW - 600 + STEP * np.arange(60)
        mean = np.array(values)
        fc = Forecast(t, mean, {0.9: mean * 1.1}, "test")
        d = decide(held, fc, params(level_correction_seconds=half_life), NOW, missing=True, history_max=1e5)
        window = (t >= NOW) & (t <= NOW + 300)
        assert d.reason is Reason.MISSING_DATA
        assert d.planned >= max(float(np.max(mean[window] * 1.1)), held) - 1e-9
        same = decide(held, fc, params(level_correction_seconds=0.0), NOW, missing=True, history_max=1e5)
        assert d.planned == same.planned

    check()

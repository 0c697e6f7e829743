"""The decision on arrays: ``decide_array`` over many polls agrees bit for bit with ``decide`` poll by poll.

``decide`` is ``decide_array`` on one poll, so the property checked here is
that deciding many polls at once (rows gathered per poll, blocks of
``CHUNK`` polls, masks instead of branches) changes nothing, on inputs
that reach every branch: NaN/Inf/negative observed and forecasts, curves
that end before now + L (stale), absurd peaks, no forecast, unusable
forecasts, every mode, level correction, a warm floor, headroom and the
dead band. ``to_milli`` is checked against KEDA's ``"%.3f"`` itself, with
values built on the rounding ties.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from forecaster.base import Forecast
from forecaster.level import interp_rows
from scaler import policy
from scaler.policy import NO_REASON, REASONS, Curves, PolicyParams, Reason, decide, decide_array
from scaler.deadband import clear_dead_band, to_milli, to_milli_array

STEP = 60.0
T0 = 1_700_000_000.0


def same(a: float | None, b: float | None) -> bool:
    """Bit for bit, NaN payloads aside (None only equals None)."""
    if a is None or b is None:
        return a is None and b is None
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def keda_milli(x: float) -> int:
    """KEDA's milli-quantity, by its definition: the ``"%.3f"`` string, times 1000."""
    if not math.isfinite(x) or x <= 0:
        return 0
    return int(round(float(f"{x:.3f}") * 1000))


# ------------------------------------------------------------------ to_milli

def test_to_milli_on_the_ties():
    # 2.0625 = 33/16 is exact in binary and a tie at 3 decimals: "%.3f" rounds half to even -> "2.062" -> 2062,
    # where rint(2.0625 * 1000) = rint(2062.5) = 2062 too; 2.0635 is not exact (2.06349999...) -> "2.063" -> 2063,
    # but 2.0635 * 1000 = 2063.4999999999995 or 2063.5 in binary: the product alone cannot tell; the format can.
    assert to_milli(2.0625) == 2062
    assert to_milli(2.0635) == keda_milli(2.0635) == 2063
    assert to_milli(0.0005) == keda_milli(0.0005)  # 0.0005 is 0.000500000000000000010...: "0.001" -> 1
    assert to_milli(0.0005) == 1
    assert to_milli(1.0005) == keda_milli(1.0005)  # 1.000499999999999989...: "1.000" -> 1000
    assert to_milli(1.0005) == 1000
    for bad in (math.nan, math.inf, -math.inf, -1.0, 0.0, -0.0):
        assert to_milli(bad) == 0


ties = st.integers(min_value=0, max_value=10**9).map(lambda k: (2 * k + 1) / 2000.0)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.floats(min_value=-1.0, max_value=1e12), st.sampled_from([math.nan, math.inf, -math.inf]),
                          ties, ties.map(lambda x: math.nextafter(x, math.inf)),
                          ties.map(lambda x: math.nextafter(x, -math.inf))), min_size=1, max_size=40))
def test_to_milli_array_is_keda_format(xs):
    got = to_milli_array(np.array(xs, dtype=np.float64))
    assert [int(g) for g in got] == [keda_milli(x) for x in xs]


def test_to_milli_holds_absurd_rates():
    # above 2**50 milli (about 1.1e12 req/s) the milli-quantity is held at 2**50 instead of overflowing
    assert to_milli(1e300) == 2**50
    assert clear_dead_band(1e300, 10.0, 0.1) == 1e300


# ------------------------------------------------------------------ np.interp, row by row

@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=1, max_value=6), st.data())
def test_interp_rows_is_numpys(h, data):
    n = data.draw(st.integers(min_value=1, max_value=8))
    vals = st.floats(allow_nan=True, allow_infinity=True, width=64)
    rows_t, rows_y, xs = [], [], []
    for _ in range(n):
        t0 = data.draw(st.floats(min_value=-1e6, max_value=1e6))
        step = data.draw(st.sampled_from([0.1, 1.0, 60.0, 3.0e-7]))
        t = t0 + step * np.arange(h)
        rows_t.append(t)
        rows_y.append(np.array(data.draw(st.lists(vals, min_size=h, max_size=h))))
        xs.append(data.draw(st.one_of(st.sampled_from(list(t)), st.floats(min_value=t0 - 2 * step,
                                                                        max_value=t0 + (h + 1) * step),
                                      st.just(math.nan))))
    got = interp_rows(np.array(xs), np.vstack(rows_t), np.vstack(rows_y))
    for i in range(n):
        want = float(np.interp(xs[i], rows_t[i], rows_y[i]))
        assert same(float(got[i]), want), (xs[i], rows_t[i], rows_y[i], got[i], want)


# ------------------------------------------------------------------ decide: array vs poll by poll

value = st.one_of(st.floats(min_value=0.0, max_value=500.0), st.floats(min_value=-50.0, max_value=0.0),
                  st.sampled_from([math.nan, math.inf, -math.inf, 0.0, 1e6, 9.95, 10.0, 10.0005, 21.9995, 22.0]))


@st.composite
def scenarios(draw):
    h = draw(st.integers(min_value=1, max_value=12))
    m = draw(st.integers(min_value=1, max_value=5))
    qs = draw(st.sampled_from([(0.9,), (0.1, 0.9), (0.2, 0.8), ()]))
    starts = [T0 + STEP * draw(st.integers(min_value=-6, max_value=3)) for _ in range(m)]
    t = np.vstack([s + STEP * np.arange(h) for s in starts])

    def band():
        return np.array(draw(st.lists(value, min_size=m * h, max_size=m * h))).reshape(m, h)
    curves = Curves(t, band(), {q: band() for q in qs})
    n = draw(st.integers(min_value=1, max_value=30))
    observed = draw(st.lists(value, min_size=n, max_size=n))
    now = [T0 + draw(st.floats(min_value=-120.0, max_value=STEP * 10)) for _ in range(n)]
    rows = draw(st.lists(st.integers(min_value=-1, max_value=m - 1), min_size=n, max_size=n))
    codes = [NO_REASON, REASONS.index(Reason.FIT_FAILED), REASONS.index(Reason.INSUFFICIENT_HISTORY)]
    unusable = draw(st.lists(st.sampled_from(codes), min_size=n, max_size=n))
    hmax = draw(st.lists(st.sampled_from([math.nan, 0.0, 5.0, 40.0, 1e4]), min_size=n, max_size=n))
    params = PolicyParams(
        mode=draw(st.sampled_from(["forecastAndScale", "forecastAndScale", "forecastOnly", "reactive"])),
        lead_seconds=draw(st.sampled_from([0.0, 30.0, 60.0, 285.0, 600.0])),
        quantile=draw(st.sampled_from([0.9, 0.8, 0.5, 0.1, 0.95, 0.05])),
        qps_per_replica=draw(st.sampled_from([10.0, 1.0, 0.37, 100.0])),
        headroom=draw(st.sampled_from([1.0, 1.1, 1.2345])),
        hpa_tolerance=draw(st.sampled_from([0.0, 0.1, 0.05, 0.2])),
        level_correction_seconds=draw(st.sampled_from([0.0, 600.0, 14400.0])),
        absurd_factor=draw(st.sampled_from([10.0, 2.0])),
        floor_qps=draw(st.sampled_from([0.0, 0.0, 20.0, 3.7])),
    )
    return curves, np.array(observed), np.array(now), np.array(rows), np.array(unusable), np.array(hmax), params


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.booleans(), st.sampled_from([1, 3, 4096]))
def test_array_form_agrees_with_one_poll_at_a_time(case, with_mean, chunk):
    curves, observed, now, rows, unusable, hmax, params = case
    old = policy.CHUNK
    policy.CHUNK = chunk  # blocks of 1 and 3 polls exercise the block boundaries
    try:
        arr = decide_array(observed, now, params, curves, rows, unusable=unusable, history_max=hmax,
                           with_mean=with_mean)
    finally:
        policy.CHUNK = old
    for i in range(len(observed)):
        r = int(rows[i])
        fc = None if r < 0 else Forecast(curves.t[r], curves.mean[r], {q: v[r] for q, v in curves.quantiles.items()})
        one = decide(float(observed[i]), fc, params, float(now[i]),
                     unusable=None if unusable[i] == NO_REASON else REASONS[int(unusable[i])],
                     history_max=None if math.isnan(hmax[i]) else float(hmax[i]), with_mean=with_mean)
        got = arr.at(i)
        assert got.reason is one.reason, (i, got, one)
        for field in ("planned", "observed", "base", "forecast_peak", "forecast_mean_peak"):
            assert same(getattr(got, field), getattr(one, field)), (field, i, got, one)


def test_reasons_are_counted_per_poll():
    # three polls: no forecast yet, reactive is not asked; a forecast of 80 over observed 20 (FORECAST);
    # the same curve at a time past its end + L (stale)
    t = T0 + STEP * np.arange(10)
    curves = Curves(t[None, :], np.full((1, 10), 80.0), {0.9: np.full((1, 10), 80.0)})
    p = PolicyParams(mode="forecastAndScale", lead_seconds=120.0, quantile=0.9, qps_per_replica=10.0,
                     hpa_tolerance=0.0)
    d = decide_array(np.array([20.0, 20.0, 20.0]), np.array([T0, T0, T0 + 9 * STEP]), p, curves, np.array([-1, 0, 0]))
    assert d.reason_counts() == {"fallback_no_forecast_yet": 1, "forecast": 1, "fallback_forecast_stale": 1}
    assert list(d.planned) == [20.0, 80.0, 20.0]


@pytest.mark.parametrize("value,qps,tol,want", [
    # 4 replicas of 10 run; 44.0 asks for ceil(44/10) = 5 but 44/(10*4) = 1.1 is inside the band:
    # the smallest milli outside it is floor(1.1 * 10000 * 4 + 1e-6) + 1 = 44001 -> 44.001
    (44.0, 10.0, 0.1, 44.001),
    (44.001, 10.0, 0.1, 44.001),  # 1.100025 is outside: unchanged
    (40.0, 10.0, 0.1, 40.0),  # ceil = 4: no step up asked
    (10.5, 10.0, 0.1, 11.001),  # r = 2, 10.5/10 = 1.05 inside -> floor(11000 + 1e-6) + 1 = 11001
])
def test_dead_band_worked(value, qps, tol, want):
    assert clear_dead_band(value, qps, tol) == want

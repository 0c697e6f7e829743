"""Metrics with hand-computed numbers; rolling-origin evaluation without peeking."""

from __future__ import annotations

import math

import numpy as np
import pytest

from forecaster.base import Forecast, Series
from forecaster.evaluate import cutoffs, historical_forecasts, level_corrected, score
from forecaster.level import level_correct, residual_at
from forecaster.metrics import coverage, mase, pinball, seasonal_mae, wape
from forecaster.models import make

NAN = math.nan


def test_mase_by_hand():
    insample = [1, 3, 2, 4]  # |diffs| at lag 1: 2, 1, 2 -> scale 5/3
    assert mase([2, 4], [1, 6], insample, 1) == pytest.approx((1 + 2) / 2 / (5 / 3))
    # lag 2: |2-1|, |4-3| -> scale 1
    assert mase([2, 4], [1, 6], insample, 2) == pytest.approx(1.5)
    assert seasonal_mae([1, NAN, 2, 5], 1) == pytest.approx(3.0)  # only the 2 -> 5 pair is finite


def test_mase_nan_safe_and_degenerate():
    assert mase([1, NAN, 3], [2, 5, NAN], [0, 1, 2], 1) == pytest.approx(1.0)  # one pair: |1-2| / 1
    assert math.isnan(mase([1], [1], [5, 5, 5], 1))  # flat in-sample: no scale
    assert math.isnan(mase([NAN], [1], [0, 1], 1))
    with pytest.raises(ValueError):
        mase([1], [1, 2], [0, 1], 1)


def test_wape_by_hand():
    assert wape([10, 20, 30], [12, 18, 33]) == pytest.approx((2 + 2 + 3) / 60)
    assert wape([10, NAN], [11, 5]) == pytest.approx(0.1)
    assert math.isnan(wape([0, 0], [1, 1]))


def test_pinball_by_hand():
    # q = 0.9: under-forecast by 10 costs 9, over-forecast by 10 costs 1
    assert pinball([110, 90], [100, 100], 0.9) == pytest.approx((9 + 1) / 2)
    assert pinball([100], [100], 0.5) == 0.0
    assert pinball([110, NAN], [100, 1], 0.1) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        pinball([1], [1], 1.0)


def test_coverage_one_and_two_sided():
    actual = [1, 2, 3, 4, NAN]
    assert coverage(actual, [2, 2, 2, 5, 9]) == pytest.approx(3 / 4)  # actual <= upper
    assert coverage(actual, [2, 2, 2, 5, 9], lower=[0, 3, 0, 0, 0]) == pytest.approx(2 / 4)


def ramp(n=400, step=60.0) -> Series:
    t = 1_700_000_000.0 + step * np.arange(n)
    return Series(t, np.arange(n, dtype=float), step)


class Spy:
    """A forecaster that records what it was fitted on."""

    name = "spy"

    def __init__(self):
        self.seen: list[float] = []
        self.warm: list[object] = []

    def fit(self, series, *, warm_start=None):
        self.seen.append(float(series.t[-1]))
        self.warm.append(warm_start)
        return make("naive").fit(series)


def test_historical_forecasts_no_peeking_and_refit_cadence():
    s = ramp()
    spy = Spy()
    start = s.t[100]
    fcs = historical_forecasts(spy, s, start=start, horizon=5, stride=10, refit_every=3)
    cuts = [c for c, _ in fcs]
    assert cuts == list(cutoffs(s, start=start, horizon=5, stride=10))
    assert cuts[0] == start and cuts[-1] <= s.t[-5]
    assert len(spy.seen) == math.ceil(len(cuts) / 3)
    for k, last in enumerate(spy.seen):
        assert last == cuts[3 * k] - s.step  # fitted only on points before its cutoff
    assert spy.warm[0] is None and spy.warm[1] is not None  # refits are warm-started
    for c, fc in fcs:
        np.testing.assert_allclose(fc.t, c + s.step * np.arange(5))
        # naive, refitted or not, forecasts the last point before the cutoff: the ramp's value at c - step
        np.testing.assert_allclose(fc.mean, (c - s.t[0]) / s.step - 1)


def test_historical_forecasts_fixed_window():
    s = ramp()
    spy = Spy()
    historical_forecasts(spy, s, start=s.t[200], horizon=1, stride=50, train_window=3600)
    assert len(spy.seen) == 4


def test_score_at_horizon_by_hand():
    s = ramp(50)
    # two forecasts of 3 points, each off by +1, +2, +3
    fcs = []
    for i in (20, 30):
        c = s.t[i]
        t = c + s.step * np.arange(3)
        mean = s.y[i:i + 3] + np.array([1.0, 2.0, 3.0])
        fcs.append((c, Forecast(t, mean, {0.9: mean + 1.0})))
    sc = score(s, fcs, q=0.9, season=1)  # at h = 3: errors -3, -3; in-sample lag-1 MAE = 1
    assert sc["mase"] == pytest.approx(3.0) and sc["n"] == 2
    assert sc["wape"] == pytest.approx(6 / (22 + 32))
    assert sc["coverage"] == 1.0 and sc["pinball"] == pytest.approx(0.1 * 4)
    assert score(s, fcs, q=0.9, season=1, h=1)["mase"] == pytest.approx(1.0)


def test_include_now_and_level_correction():
    """The curve covers ``now``: the residual is taken there, as in the server."""
    s = ramp(300)
    fcs = historical_forecasts(make("naive"), s, start=s.t[100], horizon=4, stride=50, include_now=True)
    for c, fc in fcs:
        assert fc.t[0] == c - s.step and len(fc) == 5
    lc = level_corrected(s, fcs, 3600.0)
    # naive's value at now was made one step earlier (y[now] - 1): the residual is +1, carried forward
    c, fc = lc[0]
    assert fc.mean[1] == pytest.approx(s.y[100 - 1] + 1.0 * 0.5 ** (60 / 3600), rel=1e-9)
    assert score(s, lc, h=1)["n"] == len(lc)


def test_level_correct_by_hand():
    t = 1000.0 + 60.0 * np.arange(4)
    fc = Forecast(t, np.array([10.0, 10, 10, 10]), {0.9: np.array([12.0, 12, 12, 12])})
    assert residual_at(fc, 1060.0, 16.0) == 6.0
    out = level_correct(fc, 1060.0, 16.0, 60.0)
    np.testing.assert_allclose(out.mean, [16, 16, 13, 11.5])
    np.testing.assert_allclose(out.quantiles[0.9], [18, 18, 15, 13.5])
    neg = level_correct(fc, 1060.0, 0.0, 60.0)
    assert np.all(neg.mean >= 0)


def test_level_corrected_is_level_correct_on_each_forecast_bit_for_bit():
    """``level_corrected`` corrects the forecasts of one shape at once (``residual_rows``/``corrector`` on the
    stack): every number equals ``level_correct`` on that forecast alone, exactly (pure array arithmetic, no
    optimiser), on the real AMZN trace with missing points, zero-residual rows and forecasts of two lengths."""
    from forecaster.tracecsv import from_csv
    from support.paths import TRACES

    s = from_csv(TRACES / "nab_tweets" / "AMZN_per_5min.csv")[0]
    s = Series(s.t[-3000:], s.y[-3000:].copy(), s.step)
    s.y[2500:2510] = NAN  # cutoffs whose "now" is missing: left uncorrected
    fcs = historical_forecasts(make("seasonal_naive"), s, start=s.t[2400], horizon=12, stride=1, refit_every=100,
                               quantiles=(0.5, 0.9), include_now=True)
    fcs += historical_forecasts(make("linear_trend"), s, start=s.t[2900], horizon=5, stride=3, refit_every=10,
                                quantiles=(0.8,), include_now=True)
    c0, f0 = fcs[0]
    fcs.append((c0, Forecast(f0.t, f0.mean.copy(), {q: v.copy() for q, v in f0.quantiles.items()}, f0.model)))
    i0 = int(round((c0 - s.step - s.t[0]) / s.step))
    fcs[-1][1].mean[0] = s.y[i0]  # the curve equals the observation at now: residual 0, the forecast as it was
    lc = level_corrected(s, fcs, 1800.0)
    assert len(lc) == len(fcs) > 500
    changed = 0
    for (c, fc), (c2, got) in zip(fcs, lc):
        i = int(round((c - s.step - s.t[0]) / s.step))
        want = level_correct(fc, c - s.step, float(s.y[i]), 1800.0) if np.isfinite(s.y[i]) else fc
        assert c2 == c and np.array_equal(got.mean, want.mean, equal_nan=True)
        assert got.quantiles.keys() == want.quantiles.keys()
        assert all(np.array_equal(got.quantiles[q], want.quantiles[q], equal_nan=True) for q in want.quantiles)
        changed += got is not fc
    assert 0 < changed < len(fcs)  # some corrected, some (missing now, zero residual) left alone
    assert lc[-1][1] is fcs[-1][1]


def test_quantile_rows_is_numpy_quantile_on_each_row():
    """The band tables' error quantiles for many rows at once equal ``np.quantile`` on each row (its default,
    linear method), as numbers, exactly: rows of 1 to 3,000 values of different lengths, with ties, rounded values,
    both signed zeros, and the real in-sample errors of a linear_trend fit on AMZN."""
    from forecaster.models._common import LEVELS, quantile_rows
    from forecaster.tracecsv import from_csv
    from support.paths import TRACES

    rng = np.random.default_rng(7)
    y = from_csv(TRACES / "nab_tweets" / "AMZN_per_5min.csv")[0].y[-2016:]
    y = y[np.isfinite(y)]
    cases = [[y[h:] - y[:-h] for h in (1, 2, 5, 12, 40)],  # the naive model's errors by horizon
             [rng.normal(size=int(n)) for n in rng.integers(1, 3000, size=12)],
             [np.round(rng.normal(size=int(n)), 1) for n in rng.integers(1, 400, size=12)],  # ties
             [np.concatenate([np.zeros(n), -np.zeros(n), rng.exponential(size=n)]) for n in (1, 5, 50)],
             [np.array([3.5]), np.array([-1.0, 2.0])]]
    for rows in cases:
        want = np.vstack([np.quantile(r, LEVELS) for r in rows])
        got = quantile_rows(rows, LEVELS)
        assert got.shape == want.shape and np.all(got == want)  # -0.0 == 0.0: a zero's sign may differ
    assert quantile_rows([], LEVELS).shape == (0, LEVELS.size)
    with pytest.raises(ValueError, match="at least one value"):
        quantile_rows([np.array([])], LEVELS)

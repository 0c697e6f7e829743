"""The empirical error bands every model's forecast carries (``forecaster.models._common``).

``BandTable.at_steps`` memoises the band at horizons 1..n (what every predict between two fits asks): its
answer must be ``at``'s, bit for bit, and read-only; ``finalize`` floors, fills and orders the quantiles.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forecaster.models._common import LEVELS, BandTable, bands_for, finalize

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@st.composite
def tables(draw):
    hs = sorted(set(draw(st.lists(st.integers(1, 500), min_size=1, max_size=8))))
    rows = [np.maximum.accumulate(np.array(draw(st.lists(finite, min_size=LEVELS.size, max_size=LEVELS.size))))
            for _ in hs]
    return BandTable(np.array(hs), np.vstack(rows), draw(st.booleans()), draw(st.floats(0, 10)))


@settings(max_examples=200, deadline=None)
@given(tables(), st.integers(0, 300), st.sampled_from([0.005, 0.1, 0.5, 0.8, 0.95, 0.995, 0.333]))
def test_memoised_band_equals_the_interpolated_one_bit_for_bit(table, n, q):
    want = table.at(np.arange(1, n + 1), q)
    first, again = table.at_steps(n, q), table.at_steps(n, q)
    assert first.tobytes() == want.tobytes() and again is first  # the second ask is the memo
    assert not first.flags.writeable  # shared by every predict: no caller may change it
    mean = np.linspace(-5.0, 50.0, n)
    assert table.apply(mean, n, q).tobytes() == table.apply(mean, np.arange(1, n + 1), q).tobytes()


def test_the_memo_is_bounded():
    t = BandTable(np.array([1, 10]), np.vstack([LEVELS, 2 * LEVELS]))
    for n in range(1, 200):  # a caller asking ever new horizons
        t.at_steps(n, 0.8)
        assert len(t.steps) <= 64
    # at 10 steps the 0.8 error quantile is 2 x 0.8 = 1.6; at 1 step 0.8; between them linear in h
    assert t.at_steps(10, 0.8)[[0, 9]] == pytest.approx([0.8, 1.6], abs=1e-12)


def test_finalize_floors_fills_and_orders():
    # mean [-1, nan, 3]: floored and filled to [0, 0, 3]; q0.9 below q0.1 at the last point is swapped back;
    # a NaN band point takes the mean's value (0 at the second point)
    t = np.array([60.0, 120.0, 180.0])
    f = finalize(t, np.array([-1.0, math.nan, 3.0]),
                 {0.9: np.array([2.0, math.nan, 1.0]), 0.1: np.array([-3.0, 1.0, 4.0])}, "m")
    assert f.mean.tolist() == [0.0, 0.0, 3.0]
    assert f.quantiles[0.1].tolist() == [0.0, 0.0, 1.0]
    assert f.quantiles[0.9].tolist() == [2.0, 1.0, 4.0]
    empty = finalize(np.array([]), np.array([]), {0.5: np.array([])}, "m")
    assert empty.quantiles[0.5].shape == (0,)


def test_bands_for_a_relative_table_scale_with_the_curve():
    # relative: error e x (max(mean, 0) + offset); e at q0.8 is 0.8 (values = LEVELS), offset 1
    t = BandTable(np.array([1]), LEVELS[None, :].copy(), relative=True, offset=1.0)
    b = bands_for(t, np.array([10.0, -2.0]), (0.8,))
    assert b[0.8].tolist() == pytest.approx([10.0 + 11.0 * 0.8, -2.0 + 1.0 * 0.8], abs=1e-12)

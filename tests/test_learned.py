"""``scaler.learned``: the online capacity estimate, its bounds and its hysteresis, worked by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from scaler.learned import CapacityLearner


def feed(lr: CapacityLearner, t0: float, n: int, served: float, queue: float, ready: float, step: float = 30.0):
    for k in range(n):
        lr.observe(t0 + k * step, served, queue, ready)
    return t0 + n * step


def test_only_settled_saturated_samples_count():
    # configured 10 req/s per replica; 4 ready replicas serve 28 req/s while 6 requests wait: 7 per replica.
    # Samples every 30 s from t = 0: the run starts at 0, a sample counts from t - 0 >= 120, i.e. t = 120, 150,
    # ...: 16 samples (0 .. 450) count 12 (120 .. 450)
    lr = CapacityLearner(10.0)
    feed(lr, 0.0, 16, 28.0, 6.0, 4.0)
    s = lr.state()
    assert s.samples == 12 and s.saturated
    assert s.estimate == pytest.approx(7.0) and s.ratio == pytest.approx(0.7)
    # 7 is inside [5, 20] and 30 % from 10 (> 10 % hysteresis): in force
    assert s.in_force == pytest.approx(7.0) and s.factor == pytest.approx(10 / 7)


def test_an_idle_queue_teaches_nothing():
    # no one waits: the replicas may have room to spare, so their served rate says nothing of their capacity
    lr = CapacityLearner(10.0)
    feed(lr, 0.0, 100, 28.0, 0.0, 4.0)
    s = lr.state()
    assert (s.samples, s.estimate, s.in_force, s.saturated) == (0, None, 10.0, False)


def test_a_replica_joining_restarts_the_run_and_a_gap_ends_it():
    # 9 samples at 4 ready (0 .. 240: 120 .. 240 count, 5), then 5 at 5 ready (270 .. 390: the run restarts at
    # 270, so 390 counts: 1), a missing queue at 420 ends the run, 4 more at 5 ready (450 .. 540: 450 + 120 = 570
    # not reached: 0). 6 counted, below the 10 needed: no estimate yet
    lr = CapacityLearner(10.0)
    t = feed(lr, 0.0, 9, 28.0, 3.0, 4.0)
    t = feed(lr, t, 5, 35.0, 3.0, 5.0)
    lr.observe(t, 35.0, math.nan, 5.0)
    feed(lr, t + 30, 4, 35.0, 3.0, 5.0)
    s = lr.state()
    assert s.samples == 6 and s.estimate is None and s.in_force == 10.0


def test_the_figure_in_force_is_bounded_to_half_and_twice_the_configured():
    # 1 ready replica serving 50 req/s at saturation against a configured 10: the estimate is 50 (ratio 5, exported
    # as it is), the figure in force stops at 2 x 10 = 20; serving 2 req/s: estimate 2, in force 0.5 x 10 = 5
    hi = CapacityLearner(10.0)
    feed(hi, 0.0, 20, 50.0, 9.0, 1.0)
    assert (hi.state().estimate, hi.state().ratio, hi.state().in_force) == (50.0, 5.0, 20.0)
    lo = CapacityLearner(10.0)
    feed(lo, 0.0, 20, 2.0, 9.0, 1.0)
    assert (lo.state().estimate, lo.state().in_force) == (2.0, 5.0)


def test_hysteresis_holds_the_figure_until_the_estimate_moves_more_than_ten_percent():
    # configured 10. Saturated at 9.5 per replica: estimate 9.5, 5 % from 10: in force stays 10.
    lr = CapacityLearner(10.0, window=600.0)  # a 10-minute window, so that newer samples take over quickly
    t = feed(lr, 0.0, 20, 9.5, 5.0, 1.0)
    assert lr.state().estimate == 9.5 and lr.state().in_force == 10.0
    # then at 8.5: once the window holds only those (its median 8.5), 15 % from 10 > 10 %: 8.5 in force
    t = feed(lr, t, 30, 8.5, 5.0, 1.0)
    assert lr.state().estimate == 8.5 and lr.state().in_force == 8.5
    # back to 9.0: 5.9 % from 8.5: held at 8.5 (a figure moving back and forth would move the replicas with it)
    feed(lr, t, 30, 9.0, 5.0, 1.0)
    assert lr.state().estimate == 9.0 and lr.state().in_force == 8.5


def test_the_estimate_is_the_median_of_the_window():
    # 11 counted samples: 10 at 6 per replica and one outlier at 60 (a scrape glitch): the median is 6
    lr = CapacityLearner(10.0, settle=0.0)
    feed(lr, 0.0, 10, 12.0, 2.0, 2.0)
    lr.observe(300.0, 120.0, 2.0, 2.0)
    assert lr.state().samples == 11 and lr.state().estimate == 6.0


def test_bad_samples_never_count():
    lr = CapacityLearner(10.0, settle=0.0, min_samples=1)
    for served, queue, ready in ((math.nan, 5, 2), (-3.0, 5, 2), (10.0, 5, 0), (10.0, math.inf, 2), (None, 5, 2)):
        lr.observe(0.0, served, queue, ready)
    assert lr.state().samples == 0 and lr.state().estimate is None
    with pytest.raises(ValueError, match="configured capacity 0"):
        CapacityLearner(0.0)


@settings(max_examples=80, deadline=None)
@given(st.floats(0.1, 1e4), st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 50), st.integers(0, 20)),
                                     min_size=1, max_size=80))
def test_the_figure_in_force_never_leaves_its_bounds(configured, samples):
    lr = CapacityLearner(configured, settle=30.0, min_samples=3)
    for k, (served, queue, ready) in enumerate(samples):
        lr.observe(15.0 * k, served, queue, ready)
        s = lr.state()
        assert 0.5 * configured * (1 - 1e-12) <= s.in_force <= 2 * configured * (1 + 1e-12)

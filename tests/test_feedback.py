"""The closed loop's rule (``scaler.feedback.step``) and its factor in ``decide``: worked arithmetic and properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from scaler import feedback
from scaler.feedback import LoopState, Signals, Targets, step
from scaler.policy import PolicyParams, Reason, decide, decide_array

NOW = 1_700_000_000.0
Q2 = Targets(queue=2.0)


def go(state=LoopState(), *, waiting=math.nan, ready=math.nan, ttft=math.nan, itl=math.nan, targets=Q2, dt=15.0,
       asked=math.nan, now=NOW, settle=300.0):
    return step(state, Signals(waiting, ready, ttft, itl), targets, now=now, dt=dt, asked=asked, settle_seconds=settle)


def test_a_queue_over_its_target_raises_by_five_percent_of_the_excess_when_settled():
    # 30 waiting over 10 ready replicas = 3 per replica, target 2: p = 1.5, excess 0.5 -> x (1 + 0.05 x 0.5) = 1.025
    s = go(waiting=30, ready=10, asked=10)
    assert s.factor == pytest.approx(1.025) and s.pressure == pytest.approx(1.5) and s.raised_at == NOW
    assert "raised 1.000 -> 1.025" in s.why
    # 100 waiting over 10 (the 10 asked for are ready): p = 5, the excess capped at 1: x 1.05 -> 1.07625
    s = go(s, waiting=100, ready=10, asked=10, now=NOW + 15)
    assert s.factor == pytest.approx(1.025 * 1.05)


def test_no_raise_while_the_replicas_asked_for_are_starting():
    # 8 of the 10 asked for are ready: held (the raise already asked for will be ready one cold start later)
    s = go(LoopState(factor=1.2, raised_at=NOW - 60), waiting=100, ready=8, asked=10)
    assert s.factor == 1.2 and "8 of the 10 replicas asked for ready" in s.why
    # ... unless settle_seconds passed since that raise (the HPA's tolerance swallowed it, or maxReplicaCount):
    # then it raises again, 1.2 x 1.05 = 1.26
    assert go(LoopState(factor=1.2, raised_at=NOW - 300), waiting=100, ready=8, asked=10).factor == pytest.approx(1.26)
    # the queue per replica is per READY replica: 100 / 8 = 12.5 per replica, p = 6.25
    assert s.pressure == pytest.approx(6.25)


def test_without_a_ready_count_a_raise_waits_settle_seconds_and_the_queue_is_per_replica_asked_for():
    # no readyReplicasQuery: 40 waiting over the 10 asked for = 4 per replica, p = 2 -> x 1.05
    s = go(waiting=40, asked=10, now=NOW)
    assert s.factor == pytest.approx(1.05) and s.pressure == pytest.approx(2.0)
    s2 = go(s, waiting=40, asked=10, now=NOW + 299.0)  # 299 s < settle 300 s after the raise: held
    assert s2.factor == pytest.approx(1.05)
    s3 = go(s2, waiting=40, asked=10, now=NOW + 300.0)  # then the next raise (p 2, not falling): 1.05^2 = 1.1025
    assert s3.factor == pytest.approx(1.1025)


def test_a_queue_that_falls_is_draining_and_holds_the_factor():
    # 60 over 10 (p 3) after 80 over 10 (p 4): over the target but falling: held; then level at p 3: raised
    s = go(LoopState(factor=1.1, pressure=4.0), waiting=60, ready=10, asked=10)
    assert s.factor == 1.1 and "falling from 4.00x (draining)" in s.why
    assert go(s, waiting=60, ready=10, asked=10, now=NOW + 15).factor == pytest.approx(1.1 * 1.05)


def test_the_dead_zone_holds_and_well_inside_decays_with_the_half_life():
    base = LoopState(factor=1.4)
    # 1.5 per replica of 2: p = 0.75 in [0.5, 1]: held for any dt
    assert go(base, waiting=15, ready=10, asked=10, dt=86400.0).factor == 1.4
    # 0.5 per replica: p = 0.25 < 0.5: 1 + 0.4 x 2^(-dt / 1 d); dt = one day -> 1.2, half a day -> 1 + 0.4 / sqrt 2
    assert go(base, waiting=5, ready=10, asked=10, dt=86400.0).factor == pytest.approx(1.2)
    assert go(base, waiting=5, ready=10, asked=10, dt=43200.0).factor == pytest.approx(1 + 0.4 / math.sqrt(2))
    # at 1 nothing changes, inside or not
    assert go(waiting=0, ready=10, asked=10, dt=86400.0).factor == 1.0
    assert go(waiting=15, ready=10, asked=10).factor == 1.0


def test_the_factor_is_bounded_at_two():
    s = go(LoopState(factor=1.95), waiting=1000, ready=10, asked=10)
    assert s.factor == 2.0
    s = go(s, waiting=1000, ready=10, asked=10, now=NOW + 15)
    assert s.factor == 2.0 and "bound 2" in s.why


def test_the_worst_signal_counts():
    t = Targets(queue=2.0, ttft=1.0, itl=0.05)
    # queue 1 per replica (0.5), TTFT 3 s (3.0), ITL 40 ms (0.8): p = 3, excess capped at 1 -> 1.05
    s = go(waiting=10, ready=10, ttft=3.0, itl=0.04, asked=10, targets=t)
    assert s.pressure == pytest.approx(3.0) and s.factor == pytest.approx(1.05) and "ttft" in s.why


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0])
def test_an_unknown_signal_is_never_a_zero(bad):
    # the queue is unknown (NaN: a histogram without buckets; inf; a negative count): no raise, no "inside" either:
    # the factor decays only as it does with no signal at all, and the state says why
    s = go(LoopState(factor=1.5), waiting=bad, ready=10, asked=10, dt=0.0)
    assert s.factor == 1.5 and math.isnan(s.pressure) and "no signal known (queue unknown)" in s.why
    # with a known TTFT next to it, the TTFT alone decides: 0.6 of its target: the dead zone, held
    s = go(LoopState(factor=1.5), waiting=bad, ready=10, ttft=0.6, asked=10, targets=Targets(queue=2.0, ttft=1.0))
    assert s.factor == 1.5 and s.pressure == pytest.approx(0.6) and "(queue unknown)" in s.why
    # an unknown ready count falls back to the replicas asked for; none of either: the queue is unknown
    assert go(waiting=40, ready=bad, asked=10).pressure == pytest.approx(2.0)
    assert math.isnan(go(waiting=40, ready=bad, asked=math.nan).pressure)


def params(**kw):
    base = dict(mode="reactive", lead_seconds=300.0, quantile=0.9, qps_per_replica=10.0, hpa_tolerance=0.0)
    base.update(kw)
    return PolicyParams(**base)


def test_decide_multiplies_the_plan_by_the_factor_and_says_so():
    # observed 50 req/s, reactive: the plan is 50; factor 1.3 -> 65, reason feedback
    d = decide(50.0, None, params(), NOW, feedback=1.3)
    assert d.planned == pytest.approx(65.0) and d.reason is Reason.FEEDBACK and d.feedback == 1.3
    assert d.base == 50.0  # the plan itself is unchanged: the factor is on top
    # factor 1 (or none): exactly the answer without the loop, reason unchanged
    for f in (1.0, None):
        d = decide(50.0, None, params(), NOW, feedback=f)
        assert (d.planned, d.reason) == (50.0, Reason.MODE_REACTIVE)
    # headroom 1.2 and factor 1.25: 50 x 1.2 x 1.25 = 75
    assert decide(50.0, None, params(headroom=1.2), NOW, feedback=1.25).planned == pytest.approx(75.0)


def test_a_fallback_reason_stays_when_the_loop_raises():
    # no forecast yet (forecastAndScale): the fallback says more than "feedback"; the value is raised all the same
    d = decide(40.0, None, params(mode="forecastAndScale"), NOW, feedback=1.5)
    assert d.reason is Reason.NO_FORECAST_YET and d.planned == pytest.approx(60.0)
    d = decide(40.0, None, params(mode="forecastAndScale"), NOW, missing=True, feedback=1.5)
    assert d.reason is Reason.MISSING_DATA and d.planned == pytest.approx(60.0)


def test_the_dead_band_compensation_applies_after_the_factor():
    # 41 req/s x 1.1 = 45.1 at 10 per replica, tolerance 0.1: 5 replicas wanted, 45.1 / 40 = 1.1275 > 1.1 from 4:
    # outside the band already; 38 x 1.1 = 41.8: 41.8 / 40 = 1.045, inside: pushed to 44.001
    assert decide(41.0, None, params(hpa_tolerance=0.1), NOW, feedback=1.1).planned == pytest.approx(45.1)
    assert decide(38.0, None, params(hpa_tolerance=0.1), NOW, feedback=1.1).planned == pytest.approx(44.001)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(base=st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=20),
       factor=st.lists(st.one_of(st.floats(0, 3), st.just(math.nan)), min_size=1, max_size=20),
       qps=st.floats(0.001, 1e4), headroom=st.floats(1, 3), tol=st.sampled_from([0.0, 0.05, 0.1, 0.3]),
       mode=st.sampled_from(["reactive", "forecastAndScale", "forecastOnly"]))
def test_feedback_never_lowers_the_plan(base, factor, qps, headroom, tol, mode):
    n = min(len(base), len(factor))
    b, f = np.array(base[:n]), np.array(factor[:n])
    p = params(mode=mode, qps_per_replica=qps, headroom=headroom, hpa_tolerance=tol)
    without = decide_array(b, np.full(n, NOW), p, None)
    with_loop = decide_array(b, np.full(n, NOW), p, None, feedback=f)
    assert (with_loop.planned >= without.planned).all()
    # and the compensation is monotone, so the raised value is the compensated raised plan (the max is no patch)
    from scaler.deadband import clear_dead_band_array
    raw = clear_dead_band_array(without.base * headroom * np.where(f >= 1, f, 1.0), qps, tol)
    assert np.array_equal(with_loop.planned, np.maximum(raw, without.planned))
    assert (raw >= without.planned).all()


@settings(max_examples=200, deadline=None, derandomize=True)
@given(seq=st.lists(st.tuples(st.one_of(st.floats(0, 1e4), st.just(math.nan), st.just(-1.0)),
                              st.one_of(st.floats(0, 100), st.just(math.nan)),
                              st.one_of(st.floats(0, 60), st.just(math.nan)), st.floats(0, 3600)),
                    min_size=1, max_size=30))
def test_the_factor_stays_in_one_to_two_and_rises_only_on_an_excess(seq):
    s, t = LoopState(), Targets(queue=2.0, ttft=1.0)
    now = NOW
    for waiting, ready, ttft, dt in seq:
        now += dt
        n = step(s, Signals(waiting, ready, ttft), t, now=now, dt=dt, asked=10.0, settle_seconds=300.0)
        assert 1.0 <= n.factor <= feedback.RULE.max_factor
        if n.factor > s.factor:
            assert n.pressure > 1.0
        s = n

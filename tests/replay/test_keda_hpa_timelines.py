"""The KEDA/HPA/cold-start emulation: hand-computed timelines and each rule at its edge.

The values here are per KEDA poll, held until the next one: KEDA's ``useCachedMetrics: true`` mode
(``Hpa(cached_metrics=True)``); tests/replay/test_live_metrics.py has the default, asked at every HPA sync."""

from __future__ import annotations

import math

import numpy as np
import pytest

from forecaster.base import Forecast
from scaler.policy import PolicyParams, decide
from scaler.deadband import to_milli
from scaler.replay.hpa import Hpa, poll_count
from scaler.replay.keda import run_hpa
from scaler.replay.forecasts import Curve
from scaler.replay.families.oracle import oracle
from scaler.replay.policies import fixed_pool, planned_values
from scaler.replay.scenario import Scenario, evaluate, scenario

Q = 10.0  # qps per replica in the hand-computed cases


def keda_prometheus_values(sc: Scenario, hpa: Hpa):
    """What KEDA's Prometheus scaler returns at each poll: the observed rate as is (decide, reactive, no compensation)."""
    return planned_values(sc, hpa, PolicyParams(mode="reactive", lead_seconds=0.0, quantile=0.5, qps_per_replica=Q,
                                                hpa_tolerance=0.0), ())


def step_trace(cold: float = 60.0) -> Scenario:
    """10 qps for 10 minutes, then 50 qps for 10 minutes, on the 15 s grid."""
    d = np.r_[np.full(40, 10.0), np.full(40, 50.0)]
    return scenario(np.arange(80) * 15.0, d, 15.0, 0.0, 1200.0, cold_start_seconds=cold, qps_per_replica=Q)


def flat(n: int, cold: float = 60.0, q: float = Q) -> Scenario:
    """A scenario whose demand does not matter: the test drives the HPA through explicit values."""
    d = np.full(n, q)
    return Scenario(0.0, d, d.copy(), cold, q)


def held(values_per_poll: list[tuple[int, float]], n: int, hpa: Hpa) -> np.ndarray:
    """Poll values from (first poll, value) change points."""
    out = np.zeros(poll_count(n, hpa))
    for k, v in values_per_poll:
        out[k:] = v
    return out


# --------------------------------------------------------------------------- hand-computed step


def test_observed_lags_like_rate_over_2m():
    sc = step_trace()
    # tick 40+k: the last 8 ticks hold k ticks of 50 and 8-k of 10
    assert sc.observed[40:49].tolist() == [10 + 5 * k for k in range(9)]
    assert sc.observed[0] == 10.0 and sc.observed[60] == 50.0


def test_step_reactive_exact_timeline_and_metrics():
    sc = step_trace(cold=60.0)  # 4 ticks
    hpa = Hpa(cached_metrics=True, target=Q)
    tl = run_hpa(sc, keda_prometheus_values(sc, hpa).values, hpa)
    # polls at even ticks see 10, 20, 30, 40, 50 at ticks 40..48: one more replica per poll
    # (the +100 %/4-pod limit never binds), each ready 4 ticks later
    exp_rep = [1] * 42 + [2] * 2 + [3] * 2 + [4] * 2 + [5] * 32
    exp_ready = [1] * 46 + [2] * 2 + [3] * 2 + [4] * 2 + [5] * 28
    assert tl.replicas.tolist() == exp_rep
    assert tl.ready.tolist() == exp_ready
    o = evaluate(sc, tl)
    # deficit: 6 ticks x 40 + 2 x 30 + 2 x 20 + 2 x 10 = 360 of 40x10 + 40x50 = 2400
    assert o.underprovisioned_fraction == pytest.approx(360 / 2400, abs=1e-15)
    assert o.missed_requests == pytest.approx(360 * 15)
    assert o.violation_minutes == 3  # ticks 40..51 = 600..779 s = minutes 10, 11, 12
    assert o.replica_hours == pytest.approx(220 * 15 / 3600)
    assert o.scale_ups == 4 and o.peak_replicas == 5
    assert o.cold_start_requests == pytest.approx(10 * 50 * 15)  # ticks 42..51 have a starting pod


def test_step_oracle_exact_timeline_and_metrics():
    sc = step_trace(cold=60.0)
    tl = oracle(sc)
    assert tl.replicas.tolist() == [1] * 36 + [5] * 44  # 4 pods created exactly T_cold before tick 40
    assert tl.ready.tolist() == [1] * 40 + [5] * 40
    o = evaluate(sc, tl)
    assert o.underprovisioned_fraction == 0 and o.violation_minutes == 0 and o.missed_requests == 0
    assert o.replica_hours == pytest.approx(256 * 15 / 3600)
    assert o.scale_ups == 1 and o.peak_replicas == 5
    assert o.cold_start_requests == pytest.approx(4 * 10 * 15)


def test_step_predictive_with_a_perfect_forecast_has_no_miss():
    sc = step_trace(cold=60.0)
    hpa = Hpa(cached_metrics=True, target=Q)
    t = np.arange(0, 1200 + 600, 60.0)
    fc = Forecast(t, np.where(t >= 600, 50.0, 10.0), {0.9: np.where(t >= 600, 50.0, 10.0)})
    params = PolicyParams(mode="forecastAndScale", lead_seconds=165.0, quantile=0.9, qps_per_replica=Q)
    pv = planned_values(sc, hpa, params, [Curve(0.0, fc)])
    # the first poll whose window [t, t+165] reaches 600 s is tick 30 (450 s)
    assert pv.values[14] == 10.0 and pv.values[15] == 50.0
    tl = run_hpa(sc, pv.values, hpa)
    assert tl.replicas[29] == 1 and tl.replicas[30] == 5 and tl.ready[34] == 5
    o = evaluate(sc, tl)
    assert o.missed_requests == 0
    assert o.replica_hours >= evaluate(sc, oracle(sc)).replica_hours
    # forecast ahead of the step (polls 15..19) and while observed still lags it (polls 20..23)
    assert pv.reasons == {"observed_floor": 31, "forecast": 9}


def test_planned_values_uses_the_latest_curve_and_decide():
    sc = step_trace()
    hpa = Hpa(cached_metrics=True, target=Q)
    t = np.arange(0, 2400, 60.0)
    low = Forecast(t, np.full(t.size, 1.0), {0.9: np.full(t.size, 1.0)})
    high = Forecast(t, np.full(t.size, 33.0), {0.9: np.full(t.size, 33.0)})
    params = PolicyParams(mode="forecastAndScale", lead_seconds=120.0, quantile=0.9, qps_per_replica=Q)
    pv = planned_values(sc, hpa, params, [Curve(0.0, low), Curve(300.0, high)])
    times = np.arange(poll_count(sc.n, hpa)) * 30.0
    for k, tk in enumerate(times):
        fc = high if tk >= 300 else low
        assert pv.values[k] == decide(float(sc.observed[2 * k]), fc, params, float(tk)).planned


# --------------------------------------------------------------------------- HPA rules at their edges


def test_milli_quantity_rounding():
    assert to_milli(110.0) == 110000
    assert to_milli(110.0004) == 110000
    assert to_milli(110.0006) == 110001
    assert to_milli(float("nan")) == 0 and to_milli(-3.0) == 0 and to_milli(math.inf) == 0


@pytest.mark.parametrize("value, expect", [
    (110.0, 10),  # ratio exactly 1.1: inside the band (1 - 0.1 <= ratio <= 1 + 0.1)
    (110.0004, 10),  # rounds to 110.000 as a milli-quantity: still inside
    (110.0006, 12),  # 110.001 -> ratio just above 1.1 -> ceil(110.001 / 10) = 12
    (100.0, 10),
])
def test_tolerance_edge_up(value, expect):
    hpa = Hpa(cached_metrics=True, target=Q)
    n = 4
    vals = held([(0, 100.0), (1, value)], n, hpa)
    tl = run_hpa(flat(n), vals, hpa, initial_replicas=10)
    assert tl.replicas[2] == expect


def test_tolerance_edge_down_and_300s_stabilisation():
    hpa = Hpa(cached_metrics=True, target=Q)
    n = 60
    # 90.0 is ratio 0.9: inside; 89.99 asks for 9 but waits for the stabilisation window
    tl = run_hpa(flat(n), held([(0, 100.0), (1, 90.0)], n, hpa), hpa, initial_replicas=10)
    assert set(tl.replicas.tolist()) == {10}
    tl = run_hpa(flat(n), held([(0, 100.0), (10, 89.99)], n, hpa), hpa, initial_replicas=10)
    # the last recommendation of 10 is at tick 19 (285 s); it leaves the window (now-300, now] at tick 39
    assert tl.replicas[38] == 10 and tl.replicas[39] == 9


def test_configured_smaller_scale_up_tolerance():
    n = 4
    for tol, value, expect in [(0.0, 100.001, 11), (0.0, 100.0, 10), (0.05, 105.0, 10), (0.05, 105.001, 11)]:
        hpa = Hpa(cached_metrics=True, target=Q, tolerance_up=tol)
        tl = run_hpa(flat(n), held([(0, 100.0), (1, value)], n, hpa), hpa, initial_replicas=10)
        assert tl.replicas[2] == expect, (tol, value)


def test_scale_up_rate_limit_max_4_pods_or_100_percent():
    hpa = Hpa(cached_metrics=True, target=Q, max_replicas=100)
    n = 8
    tl = run_hpa(flat(n), held([(0, 10.0), (1, 1000.0)], n, hpa), hpa, initial_replicas=1)
    # tick 2: max(1+4, 2) = 5; then max(5+4, 10) = 10, max(14, 20) = 20, 40, 80, capped at 100
    assert tl.replicas.tolist() == [1, 1, 5, 10, 20, 40, 80, 100]
    tl = run_hpa(flat(4), held([(0, 10.0), (1, 25.0)], 4, hpa), hpa, initial_replicas=1)
    assert tl.replicas.tolist() == [1, 1, 3, 3]  # within the limit: straight to ceil(25/10)


def test_scale_up_period_counts_earlier_events():
    """With a 60 s policy period the limit applies to the replicas 60 s ago, not to each sync."""
    hpa = Hpa(cached_metrics=True, target=Q, scale_up_period_seconds=60.0)
    n = 8
    tl = run_hpa(flat(n), held([(0, 10.0), (1, 1000.0)], n, hpa), hpa, initial_replicas=1)
    # period start stays 1 until the tick-2 event is 60 s old (tick 6): limit 5 until then
    assert tl.replicas.tolist() == [1, 1, 5, 5, 5, 5, 10, 10]


def test_ready_exactly_t_cold_after_creation():
    for cold, ticks in [(0.0, 0), (15.0, 1), (60.0, 4), (50.0, 4), (180.0, 12)]:
        hpa = Hpa(cached_metrics=True, target=Q)
        n = 20
        tl = run_hpa(flat(n, cold=cold), held([(0, 10.0), (1, 20.0)], n, hpa), hpa, initial_replicas=1)
        assert tl.replicas[2] == 2
        first = int(np.argmax(tl.ready == 2))
        assert first == 2 + ticks, cold


def test_scale_down_removes_not_ready_pods_first():
    hpa = Hpa(cached_metrics=True, target=Q, scale_down_window_seconds=0.0)
    n = 40
    vals = held([(0, 20.0), (1, 40.0), (15, 80.0), (16, 50.0)], n, hpa)
    tl = run_hpa(flat(n, cold=60.0), vals, hpa, initial_replicas=2)
    assert tl.replicas[2] == 4 and tl.ready[6] == 4  # the first two new pods are ready at tick 6
    assert tl.replicas[30] == 8 and tl.ready[31] == 4  # four more created at tick 30, ready at 34
    assert tl.replicas[32] == 5  # down by three: all three from the not-ready batch
    assert tl.ready[32] == 4 and tl.ready[33] == 4 and tl.ready[34] == 5


def test_scale_to_zero_after_cooldown_and_activation():
    hpa = Hpa(cached_metrics=True, target=Q, min_replicas=0, activation_threshold=0.0)
    n = 50
    vals = held([(0, 10.0), (1, 0.0), (20, 35.0)], n, hpa)
    tl = run_hpa(flat(n), vals, hpa)
    assert tl.replicas[0] == 1
    assert tl.replicas[20] == 1  # the HPA's own minimum is 1
    assert tl.replicas[21] == 1 and tl.replicas[22] == 0  # last active at tick 0; cooldown 300 s = 20 ticks
    assert tl.replicas[39] == 0 and tl.replicas[40] == 1  # KEDA activates 0 -> 1 at the poll
    assert tl.replicas[41] == 4  # the HPA takes over at its next sync
    # activation is strict: a value equal to the threshold does not wake it
    hpa5 = Hpa(cached_metrics=True, target=Q, min_replicas=0, activation_threshold=5.0)
    tl = run_hpa(flat(n), held([(0, 5.0)], n, hpa5), hpa5)
    assert set(tl.replicas.tolist()) == {0}


def test_min_and_max_replicas():
    hpa = Hpa(cached_metrics=True, target=Q, min_replicas=3, max_replicas=6)
    n = 6
    tl = run_hpa(flat(n), held([(0, 1.0), (1, 1000.0)], n, hpa), hpa)
    assert tl.replicas.tolist() == [3, 3, 6, 6, 6, 6]


def test_keep_alive_is_a_fixed_ready_pool():
    sc = step_trace()
    tl = fixed_pool(sc, 5)
    o = evaluate(sc, tl)
    assert o.missed_requests == 0 and o.scale_ups == 0 and o.replica_hours == pytest.approx(5 * 80 * 15 / 3600)


def test_policy_dead_band_compensation_survives_keda_rounding():
    params = PolicyParams(mode="forecastAndScale", lead_seconds=285.0, quantile=0.9, qps_per_replica=Q)
    planned = decide(105.0, None, params, 0.0).planned  # needs 11 replicas while 10 run
    hpa = Hpa(cached_metrics=True, target=Q)
    tl = run_hpa(flat(4), np.full(2, planned), hpa, initial_replicas=10)
    assert tl.replicas[2] >= 11


# --------------------------------------------------------------------------- oracle and determinism


def _random_scenario(rng: np.random.Generator, n: int, cold: float) -> Scenario:
    level = rng.uniform(5, 80)
    y = np.abs(level + np.cumsum(rng.normal(0, 4, n)) + rng.choice([0, 0, 0, 60], n) * (rng.random(n) < 0.03))
    return scenario(np.arange(n) * 60.0, y, 60.0, 600.0, n * 60.0, cold_start_seconds=cold, qps_per_replica=Q)


@pytest.mark.parametrize("seed", range(8))
def test_oracle_never_misses_and_is_cheapest_among_zero_miss_policies(seed):
    rng = np.random.default_rng(seed)
    cold = float(rng.choice([0, 15, 60, 180, 600]))
    sc = _random_scenario(rng, 400, cold)
    o = evaluate(sc, oracle(sc))
    assert o.missed_requests == 0 and o.violation_minutes == 0
    zero_miss = 0
    hpa = Hpa(cached_metrics=True, target=Q, tolerance_up=0.0)
    base = keda_prometheus_values(sc, hpa).values
    for factor in (1.0, 1.5, 2.0, 3.0, 5.0):
        tl = run_hpa(sc, base * factor + 20 * (factor - 1), hpa)
        r = evaluate(sc, tl)
        if r.missed_requests == 0:
            zero_miss += 1
            assert o.replica_hours <= r.replica_hours + 1e-9
    keep = evaluate(sc, fixed_pool(sc, int(sc.need().max())))
    assert keep.missed_requests == 0 and o.replica_hours <= keep.replica_hours + 1e-9
    assert zero_miss >= 1  # the check above ran on at least one HPA-driven policy


def test_oracle_keeps_a_pod_through_a_gap_shorter_than_t_cold():
    d = np.r_[np.full(10, 10.0), np.full(10, 20.0), np.full(3, 10.0), np.full(10, 20.0), np.full(10, 10.0)]
    sc = scenario(np.arange(d.size) * 15.0, d, 15.0, 0.0, d.size * 15.0, cold_start_seconds=60.0, qps_per_replica=Q)
    tl = oracle(sc)
    assert tl.ready[20:23].tolist() == [2, 2, 2]  # a 3-tick gap costs less than a 4-tick cold start
    d2 = np.r_[np.full(10, 10.0), np.full(10, 20.0), np.full(6, 10.0), np.full(10, 20.0), np.full(10, 10.0)]
    sc2 = scenario(np.arange(d2.size) * 15.0, d2, 15.0, 0.0, d2.size * 15.0, cold_start_seconds=60.0,
                   qps_per_replica=Q)
    tl2 = oracle(sc2)
    assert tl2.ready[20:26].tolist() == [1] * 6 and tl2.replicas[20:26].tolist() == [1, 1, 2, 2, 2, 2]


def test_deterministic():
    rng = np.random.default_rng(3)
    sc = _random_scenario(rng, 600, 180.0)
    hpa = Hpa(cached_metrics=True, target=Q)
    a = run_hpa(sc, keda_prometheus_values(sc, hpa).values, hpa)
    b = run_hpa(sc, keda_prometheus_values(sc, hpa).values, hpa)
    assert np.array_equal(a.replicas, b.replicas) and np.array_equal(a.ready, b.ready)
    assert evaluate(sc, a) == evaluate(sc, b)
    assert np.array_equal(oracle(sc).replicas, oracle(sc).replicas)


def test_scenario_averages_a_fine_trace_per_tick_and_rejects_bad_input():
    t = np.arange(120.0)  # 1 s trace, 2 minutes
    y = np.where(t < 60, 3.0, 9.0)
    sc = scenario(t, y, 1.0, 0.0, 120.0, cold_start_seconds=0, qps_per_replica=1)
    assert sc.demand.tolist() == [3.0] * 4 + [9.0] * 4
    with pytest.raises(ValueError, match="cold start"):
        scenario(t, y, 1.0, 0.0, 120.0, cold_start_seconds=-1, qps_per_replica=1)
    with pytest.raises(ValueError, match="qps per replica"):
        scenario(t, y, 1.0, 0.0, 120.0, cold_start_seconds=0, qps_per_replica=0)
    with pytest.raises(ValueError, match="empty simulation span"):
        scenario(t, y, 1.0, 60.0, 60.0, cold_start_seconds=0, qps_per_replica=1)

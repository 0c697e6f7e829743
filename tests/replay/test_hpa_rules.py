"""Each HPA rule of the emulation on its edges, with the arithmetic in the comments, then run_hpa end to end.

The rules work on 15 s ticks: a window of ``s`` seconds holds the records less
than ``window_ticks(s) = s / 15 - 1e-9`` ticks old (Kubernetes' ``After(cutoff)``).
Targets are 10 req/s per replica (10000 as KEDA's milli-quantity) unless said.
run_hpa's cases give one value per poll: KEDA's cached mode (``Hpa(cached_metrics=True)``).
"""

from __future__ import annotations

import numpy as np
import pytest

from scaler.deadband import KUBERNETES_TOLERANCE, Tolerance, clear_dead_band, to_milli
from scaler.replay.hpa import Hpa, poll_count, window_ticks
from scaler.replay.hparules import (HpaReason, bounds, period_start, replica_recommendation, scale_down_limit,
                                    scale_up_limit, stabilize)
from scaler.replay.keda import run_hpa
from scaler.replay.scenario import Scenario

R = HpaReason
K8S = KUBERNETES_TOLERANCE
T_M = 10_000  # target 10 req/s per replica as a milli-quantity
DOWN_300 = window_ticks(300.0)  # 19.999999999: records 0..19 ticks (0..285 s) old
UP_0 = window_ticks(0.0)  # -1e-9: no record is inside, the scale-up window is off


# --------------------------------------------------------------------------- Tolerance


@pytest.mark.parametrize("tolerance, ratio, inside", [
    (K8S, 1.0, True),
    (K8S, 1.1, True),  # 1 + 0.1 == 1.1 in floats: the upper edge is inside
    (K8S, 1.10001, False),  # 110001 / 100000 milli: one milli-unit past the edge
    (K8S, 0.9, True),  # 1 - 0.1 == 0.9: the lower edge is inside
    (K8S, 0.89999, False),
    (K8S, 0.0, False),
    (Tolerance(up=0.0, down=0.0), 1.0, True),  # a zero band still holds ratio 1 exactly
    (Tolerance(up=0.0, down=0.0), 1.00001, False),
    (Tolerance(up=0.0, down=0.0), 0.99999, False),
    (Tolerance(up=0.02, down=0.1), 102_000 / 100_000, True),  # 1.02 = 1 + 0.02: the edge
    (Tolerance(up=0.02, down=0.1), 102_001 / 100_000, False),
    (Tolerance(up=0.02, down=0.1), 0.95, True),  # the down tolerance stays 0.1
])
def test_tolerance_is_within(tolerance, ratio, inside):
    assert tolerance.is_within(ratio) is inside


def test_kubernetes_tolerance_is_the_default_of_the_hpa_and_the_policy():
    assert (K8S.up, K8S.down) == (0.1, 0.1)
    assert (K8S.low, K8S.high) == (0.9, 1.1)
    assert Hpa(cached_metrics=True, target=10.0).tolerance == K8S
    assert Hpa(cached_metrics=True, target=10.0, tolerance_up=0.02).tolerance == Tolerance(up=0.02, down=0.1)


def test_policy_clears_exactly_the_band_the_hpa_applies():
    # 105 req/s needs 11 replicas while 10 run: 105000 / 100000 = 1.05 is inside, the HPA would stay at 10
    assert replica_recommendation(to_milli(105.0), T_M, 10, K8S) == (10, R.WITHIN_TOLERANCE)
    # the policy sends the first milli-quantity past 1.1 x 10 x 10 = 110.000: 110.001
    value = clear_dead_band(105.0, 10.0, K8S.up)
    assert value == 110.001
    # 110001 / 100000 = 1.10001 > 1.1 -> ceil(110001 / 10000) = ceil(11.0001) = 12
    assert replica_recommendation(to_milli(value), T_M, 10, K8S) == (12, R.METRIC)


# --------------------------------------------------------------------------- replica calculator


@pytest.mark.parametrize("value, current, tolerance, expect", [
    # 109.999 / (10 x 10) = 1.09999 <= 1.1 -> within tolerance, stays 10
    (109.999, 10, K8S, (10, R.WITHIN_TOLERANCE)),
    # 110.000 / 100 = 1.1: the edge is inside
    (110.0, 10, K8S, (10, R.WITHIN_TOLERANCE)),
    # "%.3f" of 110.0004 is 110.000: still exactly on the edge
    (110.0004, 10, K8S, (10, R.WITHIN_TOLERANCE)),
    # 110.001 -> ratio 1.10001 > 1.1 -> ceil(11.0001) = 12 (a +1 step from 10 cannot exist)
    (110.001, 10, K8S, (12, R.METRIC)),
    # "%.3f" of 110.0006 is 110.001: past the edge
    (110.0006, 10, K8S, (12, R.METRIC)),
    # 90.000 / 100 = 0.9: the lower edge is inside
    (90.0, 10, K8S, (10, R.WITHIN_TOLERANCE)),
    # "%.3f" of 89.9996 is 90.000: inside
    (89.9996, 10, K8S, (10, R.WITHIN_TOLERANCE)),
    # 89.999 -> 0.89999 < 0.9 -> ceil(8.9999) = 9
    (89.999, 10, K8S, (9, R.METRIC)),
    # "%.3f" of 89.9994 is 89.999
    (89.9994, 10, K8S, (9, R.METRIC)),
    # 44.000 / (10 x 4) = 1.1: inside; 44.001 / 40 = 1.100025 -> ceil(4.4001) = 5
    (44.0, 4, K8S, (4, R.WITHIN_TOLERANCE)),
    (44.001, 4, K8S, (5, R.METRIC)),
    # 15 / 10 = 1.5 at 1 replica -> ceil(1.5) = 2
    (15.0, 1, K8S, (2, R.METRIC)),
    # 0 / 50 = 0 -> ceil(0) = 0 (bounds lift it to the HPA's min)
    (0.0, 5, K8S, (0, R.METRIC)),
    # tolerance 0: 100.000 / 100 = 1.0 stays; 100.001 -> 1.00001 -> ceil(10.0001) = 11
    (100.0, 10, Tolerance(0.0, 0.0), (10, R.WITHIN_TOLERANCE)),
    (100.001, 10, Tolerance(0.0, 0.0), (11, R.METRIC)),
    # scale-up tolerance 0.05: 105.000 / 100 = 1.05 stays; 105.001 -> 1.05001 -> ceil(10.5001) = 11
    (105.0, 10, Tolerance(0.05, 0.1), (10, R.WITHIN_TOLERANCE)),
    (105.001, 10, Tolerance(0.05, 0.1), (11, R.METRIC)),
])
def test_replica_recommendation_on_milli_quantities(value, current, tolerance, expect):
    assert replica_recommendation(to_milli(value), T_M, current, tolerance) == expect


@pytest.mark.parametrize("value, target, current, expect", [
    # without milli rounding 110.0004 / 100 = 1.100004 > 1.1 -> ceil(11.00004) = 12
    (110.0004, 10.0, 10, (12, R.METRIC)),
    # 2.1 / 0.3 = 7.000000000000001 in floats: ceil(x - 1e-9) = 7, not 8
    (2.1, 0.3, 1, (7, R.METRIC)),
    # 110 / 100 = 1.1 exactly: inside
    (110.0, 10.0, 10, (10, R.WITHIN_TOLERANCE)),
])
def test_replica_recommendation_on_raw_values(value, target, current, expect):
    assert replica_recommendation(value, target, current, K8S, milli=False) == expect


# --------------------------------------------------------------------------- stabilisation


def test_window_ticks_convention():
    # 300 s / 15 s = 20 ticks, less 1e-9: a record 19 ticks (285 s) old is inside, 20 ticks (300 s) is not
    assert 19 < DOWN_300 < 20
    assert window_ticks(60.0) == pytest.approx(4.0) and window_ticks(60.0) < 4
    assert UP_0 < 0  # even a record of this very tick is outside a 0 s window


@pytest.mark.parametrize("rec, current, records, now, up_w, expect", [
    # scale-down: the record of tick 1 is 20 - 1 = 19 ticks = 285 s old: inside -> max(9, 10) = 10 holds
    (9, 10, [(1, 10)], 20, UP_0, (10, R.SCALE_DOWN_STABILIZED)),
    # at tick 21 it is 20 ticks = 300 s old: outside -> the recommendation 9
    (9, 10, [(1, 10)], 21, UP_0, (9, R.RECOMMENDATION)),
    # the highest of the window, not the current count: max(8, 11, 10, 9) = 11, below current 12
    (8, 12, [(0, 11), (5, 10), (10, 9)], 16, UP_0, (11, R.SCALE_DOWN_STABILIZED)),
    # four ticks later (0, 11) is 300 s old: max(8, 10, 9) = 10
    (8, 12, [(0, 11), (5, 10), (10, 9)], 20, UP_0, (10, R.SCALE_DOWN_STABILIZED)),
    # no record: straight to the recommendation
    (7, 10, [], 5, UP_0, (7, R.RECOMMENDATION)),
    # scale-up window 0: a recommendation of 5 one tick ago does not slow a scale-up to 15
    (15, 10, [(19, 5)], 20, UP_0, (15, R.RECOMMENDATION)),
    # scale-up window 60 s (records 0..3 ticks old): min(15, 12, 11) = 11; (16, 5) is 4 ticks = 60 s old: out
    (15, 10, [(16, 5), (17, 12), (18, 11)], 20, window_ticks(60.0), (11, R.SCALE_UP_STABILIZED)),
    # (17, 5) is 3 ticks old: inside -> min = 5, and max(current 10, 5) = 10: no scale-up
    (15, 10, [(17, 5), (18, 11)], 20, window_ticks(60.0), (10, R.SCALE_UP_STABILIZED)),
    # recommendation = current: max(10, 10) = 10, min(10, 12) = 10
    (10, 10, [(5, 12)], 10, UP_0, (10, R.RECOMMENDATION)),
])
def test_stabilize(rec, current, records, now, up_w, expect):
    assert stabilize(rec, current, records, now, up_w, DOWN_300) == expect


# --------------------------------------------------------------------------- rate limits


@pytest.mark.parametrize("current, ups, downs, now, period, expect", [
    # 15 s period (window 1 - 1e-9 ticks): only this tick's events count
    (20, [(2, 10)], [], 2, window_ticks(15.0), 10),  # 20 - 10 added now
    (20, [(2, 10)], [], 3, window_ticks(15.0), 20),  # 1 tick = 15 s old: outside
    # 60 s period: 3 ticks old counts, 4 ticks (60 s) does not
    (8, [(2, 4)], [], 5, window_ticks(60.0), 4),
    (8, [(2, 4)], [], 6, window_ticks(60.0), 8),
    # 5 - 10 added (tick 2) + 15 removed (tick 4) = 10; a tick later the addition is 60 s old: 5 + 15 = 20
    (5, [(2, 10)], [(4, 15)], 5, window_ticks(60.0), 10),
    (5, [(2, 10)], [(4, 15)], 6, window_ticks(60.0), 20),
])
def test_period_start(current, ups, downs, now, period, expect):
    assert period_start(current, ups, downs, now, period) == expect


@pytest.mark.parametrize("desired, current, start, pods, percent, expect", [
    # from 0: max(0 + 4, ceil(0 x 2) = 0) = 4; only the Pods policy moves from nothing
    (10, 0, 0, 4, 100.0, (4, R.SCALE_UP_LIMIT)),
    # from 1: max(1 + 4, 2) = 5
    (100, 1, 1, 4, 100.0, (5, R.SCALE_UP_LIMIT)),
    # from 3: max(3 + 4, 6) = 7; 7 itself passes, 8 is cut to 7
    (7, 3, 3, 4, 100.0, (7, R.DESIRED_WITHIN_RANGE)),
    (8, 3, 3, 4, 100.0, (7, R.SCALE_UP_LIMIT)),
    # from 4: max(8, 8) = 8, both policies agree
    (9, 4, 4, 4, 100.0, (8, R.SCALE_UP_LIMIT)),
    # from 10: max(14, 20) = 20; 20 passes, 21 is cut to 20
    (20, 10, 10, 4, 100.0, (20, R.DESIRED_WITHIN_RANGE)),
    (21, 10, 10, 4, 100.0, (20, R.SCALE_UP_LIMIT)),
    # 50 %: from 3 max(7, ceil(4.5) = 5) = 7; without the Pods policy ceil(4.5) = 5
    (100, 3, 3, 4, 50.0, (7, R.SCALE_UP_LIMIT)),
    (100, 3, 3, 0, 50.0, (5, R.SCALE_UP_LIMIT)),
    # 25 x 1.12 = 28.000000000000004 in float64, rounded up as Go's math.Ceil does: 29 (the real HPA's answer in
    # the drill's percent scenario), not the 28 of exact arithmetic
    (100, 25, 25, 0, 12.0, (29, R.SCALE_UP_LIMIT)),
    # earlier additions in the period: start 5 -> max(9, 10) = 10, below current 20: never below current
    (30, 20, 5, 4, 100.0, (20, R.SCALE_UP_LIMIT)),
])
def test_scale_up_limit(desired, current, start, pods, percent, expect):
    assert scale_up_limit(desired, current, start, pods, percent) == expect


@pytest.mark.parametrize("desired, current, start, percent, expect", [
    # 100 % (the default): int(10 x 0) = 0, any scale-down passes
    (1, 10, 10, 100.0, (1, R.DESIRED_WITHIN_RANGE)),
    # 50 %: int(10 x 0.5) = 5; 3 is lifted to 5, 5 and 6 pass
    (3, 10, 10, 50.0, (5, R.SCALE_DOWN_LIMIT)),
    (5, 10, 10, 50.0, (5, R.DESIRED_WITHIN_RANGE)),
    (6, 10, 10, 50.0, (6, R.DESIRED_WITHIN_RANGE)),
    # Kubernetes truncates: int(5 x 0.5) = int(2.5) = 2; int(7 x 0.9) = int(6.3) = 6
    (1, 5, 5, 50.0, (2, R.SCALE_DOWN_LIMIT)),
    (1, 7, 7, 10.0, (6, R.SCALE_DOWN_LIMIT)),
    # removals earlier in the period: start 20 -> int(10) = 10, above current 5: capped at 5, never a scale-up
    (3, 5, 20, 50.0, (5, R.SCALE_DOWN_LIMIT)),
])
def test_scale_down_limit(desired, current, start, percent, expect):
    assert scale_down_limit(desired, current, start, percent) == expect


# --------------------------------------------------------------------------- bounds


@pytest.mark.parametrize("replicas, lo, hi, expect", [
    (0, 1, 100, (1, R.TOO_FEW_REPLICAS)),  # minReplicaCount 0: the HPA's own minimum is still 1
    (1, 1, 100, (1, R.DESIRED_WITHIN_RANGE)),
    (100, 1, 100, (100, R.DESIRED_WITHIN_RANGE)),
    (101, 1, 100, (100, R.TOO_MANY_REPLICAS)),
    (2, 3, 6, (3, R.TOO_FEW_REPLICAS)),
    (7, 3, 6, (6, R.TOO_MANY_REPLICAS)),
])
def test_bounds(replicas, lo, hi, expect):
    assert bounds(replicas, lo, hi) == expect


# --------------------------------------------------------------------------- run_hpa end to end


def flat(n: int, cold: float = 60.0) -> Scenario:
    d = np.full(n, 10.0)
    return Scenario(0.0, d, d.copy(), cold, 10.0)


def test_run_hpa_tolerance_edge_then_stabilised_scale_down():
    hpa = Hpa(cached_metrics=True, target=10.0)
    n = 28
    values = np.array([100.0, 110.0, 110.001] + [60.0] * (poll_count(n, hpa) - 3))
    tl = run_hpa(flat(n, cold=60.0), values, hpa, initial_replicas=10)
    # tick 2: 110.000 / (10 x 10) = 1.1, inside: 10 stays
    # tick 4: 110.001 -> 1.10001 -> ceil(11.0001) = 12 <= max(14, 20): 12 at once
    # tick 5: 110001 / 120000 = 0.92, inside: the recommendation stays 12
    # tick 6 on: 60000 / 120000 = 0.5 -> 6, held at 12 by the 300 s window until the tick-5 record is
    #   20 ticks old: tick 25; the 100 % scale-down policy does not bind: 6 at once
    assert tl.replicas.tolist() == [10] * 4 + [12] * 21 + [6] * 3
    # the two new pods are ready 60 s = 4 ticks after tick 4; at tick 25 the newest six go (both new pods first)
    assert tl.ready.tolist() == [10] * 8 + [12] * 17 + [6] * 3
    assert tl.value.tolist() == [float(values[i // 2]) for i in range(n)]


def test_run_hpa_scale_down_limit_never_scales_up():
    hpa = Hpa(cached_metrics=True, target=10.0, scale_down_percent=50.0, scale_down_period_seconds=60.0,
              scale_down_window_seconds=0.0)
    values = np.array([100.0, 200.0, 30.0, 30.0, 30.0, 30.0])
    tl = run_hpa(flat(12), values, hpa, initial_replicas=10)
    # tick 2: 200000 / 100000 = 2 -> 20 = max(10 + 4, 10 x 2): +10
    # tick 4: 30000 / 200000 = 0.15 -> 3; start = 20 - 10 (added at tick 2, 2 ticks ago) = 10
    #   -> limit int(10 x 0.5) = 5: 5 (-15)
    # tick 6: the +10 is 60 s old: start = 5 + 15 = 20 -> int(20 x 0.5) = 10 > 5: capped at 5, stays
    # tick 8: the -15 is 60 s old too: start 5 -> int(2.5) = 2 <= 3: 3
    assert tl.replicas.tolist() == [10, 10, 20, 20, 5, 5, 5, 5, 3, 3, 3, 3]


@pytest.mark.parametrize("initial, expect", [
    # 8 > max 5: tick 0 goes to 5 without the calculator or the rate limits (TooManyReplicas);
    # tick 1: 30000 / 50000 = 0.6 -> 3, held at 5 by the window's first record (tick 1, 5) until
    # it is 300 s old at tick 21
    (8, [5] * 21 + [3] * 3),
    # 1 < min 2: tick 0 goes to 2 (TooFewReplicas); 30000 / 20000 = 1.5 -> ceil = 3 at tick 1
    (1, [2] + [3] * 23),
])
def test_run_hpa_current_outside_the_bounds(initial, expect):
    hpa = Hpa(cached_metrics=True, target=10.0, min_replicas=2, max_replicas=5)
    tl = run_hpa(flat(24), np.full(12, 30.0), hpa, initial_replicas=initial)
    assert tl.replicas.tolist() == expect

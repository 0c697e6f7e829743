"""KEDA's cadence in the replay: the HPA reads a value asked at its own sync (``useCachedMetrics: false``, KEDA's
default) or the one KEDA's polling loop cached (``useCachedMetrics: true``). Worked arithmetic at 15 s ticks, HPA
syncs every tick (15 s), KEDA polls every 2 ticks (30 s), 10 req/s per replica, T_cold 0.
"""

from __future__ import annotations

import numpy as np
import pytest

from scaler.replay.hpa import Hpa, poll_ticks, sync_ticks, value_at_polls, value_ticks
from scaler.replay.keda import run_hpa
from scaler.replay.scenario import scenario

Q = 10.0


def flat(n: int):
    return scenario(15.0 * np.arange(n + 10), np.full(n + 10, 10.0), 15.0, 150.0, 150.0 + 15.0 * n,
                    cold_start_seconds=0.0, qps_per_replica=Q)


def test_value_ticks_are_every_sync_live_and_every_poll_cached():
    n = 9
    assert value_ticks(n, Hpa(target=Q)).tolist() == sync_ticks(n, Hpa(target=Q)).tolist() == list(range(9))
    assert value_ticks(n, Hpa(target=Q, cached_metrics=True)).tolist() == [0, 2, 4, 6, 8]
    # IsActive at each poll (ticks 0, 2, 4, 6, 8) reads the latest value asked: live the value of that very tick
    assert value_at_polls(n, Hpa(target=Q)).tolist() == [0, 2, 4, 6, 8]
    assert value_at_polls(n, Hpa(target=Q, cached_metrics=True)).tolist() == [0, 1, 2, 3, 4]
    assert poll_ticks(n, Hpa(target=Q)).tolist() == [0, 2, 4, 6, 8]


def test_a_rise_between_polls_is_seen_at_the_next_sync_live_and_at_the_next_poll_cached():
    sc = flat(6)
    # live: one value per sync. Tick 0: 20 -> 2 replicas (the steady start). Tick 1: 45 -> ratio 45 / (10 x 2)
    # = 2.25, outside the 10 % band -> ceil(45 / 10) = 5, within the rate limit max(2 + 4, 2 x 2) = 6: 5 at tick 1
    live = run_hpa(sc, np.array([20.0, 45, 45, 45, 45, 45]), Hpa(target=Q))
    assert live.replicas.tolist() == [2, 5, 5, 5, 5, 5]
    # cached: one value per poll, held: poll 0 (tick 0) 20, poll 1 (tick 2) 45 -> the rise lands at tick 2
    cached = run_hpa(sc, np.array([20.0, 45, 45]), Hpa(target=Q, cached_metrics=True))
    assert cached.replicas.tolist() == [2, 2, 5, 5, 5, 5]


def test_a_one_sync_spike_moves_the_live_hpa_only():
    sc = flat(6)
    # live: 80 at tick 1 alone -> ceil(80 / 10) = 8, limited to max(2 + 4, 4) = 6; the next syncs read 20 again:
    # the 300 s scale-down window holds the recommendation 8, so 6 stays
    live = run_hpa(sc, np.array([20.0, 80, 20, 20, 20, 20]), Hpa(target=Q))
    assert live.replicas.tolist() == [2, 6, 6, 6, 6, 6]
    # cached: polls at ticks 0, 2, 4 read 20 (tick 1's answer was never cached): nothing moves
    cached = run_hpa(sc, np.array([20.0, 20, 20]), Hpa(target=Q, cached_metrics=True))
    assert cached.replicas.tolist() == [2] * 6


def test_run_hpa_wants_one_value_per_value_tick():
    with pytest.raises(ValueError, match="need 6 values for 6 ticks, got 3"):
        run_hpa(flat(6), np.array([20.0, 20, 20]), Hpa(target=Q))


def test_activation_from_zero_reads_the_latest_value_at_a_poll():
    sc = flat(6)
    # minReplicaCount 0: no pods until a poll sees value > activationThreshold 0. Live: tick 1 answers 30, but
    # IsActive is acted on at polls only: the poll at tick 2 reads tick 2's 30 -> 0 -> 1 at tick 2; the HPA's
    # sync at tick 3 (1 replica, ratio 3) -> 3
    live = run_hpa(sc, np.array([0.0, 30, 30, 30, 30, 30]), Hpa(target=Q))
    assert live.replicas.tolist() == [0, 0, 1, 3, 3, 3]

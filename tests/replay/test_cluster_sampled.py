"""Sampled start-ups in the cluster replay (scaler.replay.cluster.simulate with ``starts``): worked ticks."""

from __future__ import annotations

import numpy as np
import pytest

from scaler.coldstart import PodStart, StartDraws, StartSample
from scaler.replay.cluster import Phases, Pool, simulate

TICK = 15.0


def fixed_sample(warm=60.0, new=120.0):
    return StartSample(warm=(warm,), new_node=(new,), total=(warm,), t_cold=warm, quantile=0.9)


def steps(n, at):
    """0 replicas, then +1 at each tick of ``at``."""
    r = np.zeros(n, dtype=np.int64)
    for i in at:
        r[i:] += 1
    return r


def test_no_pool_each_pod_draws_its_whole_start():
    rep = simulate(steps(20, [2]), Phases(pod=999.0), TICK, starts=StartDraws(fixed_sample()))
    # created at tick 2 (30 s), ready 30 + 60 = 90 s -> tick 6 (Phases' 999 s are not used)
    assert rep.timeline.ready.tolist()[:8] == [0, 0, 0, 0, 0, 0, 1, 1]


def test_with_a_pool_a_new_node_and_a_warm_node():
    pool = Pool(gpus_per_node=2, provision_seconds=300.0, idle_seconds=3600.0)
    rep = simulate(steps(60, [2, 40]), Phases(pod=999.0), TICK, pool=pool, starts=StartDraws(fixed_sample()))
    ready = rep.timeline.ready
    # pod 1 at 30 s: no node, one boots until 330 s, then scheduled->ready of a new-node start: 120 s -> 450 s, tick 30
    assert ready[29] == 0 and ready[30] == 1
    # pod 2 at tick 40 (600 s): the node is up with a free GPU -> created->ready of a warm start: 660 s, tick 44
    assert ready[43] == 1 and ready[44] == 2


def test_draws_are_seeded_and_follow_the_sample():
    sample = StartSample.from_pods([PodStart(f"p{i}", 0.0, 2.0, 3.0, float(40 + 10 * i)) for i in range(10)])
    # totals 40..130; none waited > 60 s to be scheduled: all warm
    assert sample.warm == sample.total and sample.new_node == ()
    assert sample.t_cold == pytest.approx(121.0)  # h = 8.1 -> 120 + 0.1 * 10
    reps = steps(420, range(20, 420, 20))  # none at tick 0 (pods there are ready from the start)
    a = simulate(reps, Phases(), TICK, starts=StartDraws(sample, seed=3)).timeline.ready
    b = simulate(reps, Phases(), TICK, starts=StartDraws(sample, seed=3)).timeline.ready
    c = simulate(reps, Phases(), TICK, starts=StartDraws(sample, seed=4)).timeline.ready
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    # every pod is ready 40..130 s after it was created: between 3 and 9 ticks (ceil)
    created = np.flatnonzero(np.diff(np.concatenate([[0], reps])) > 0)
    became = np.flatnonzero(np.diff(np.concatenate([[0], a])) > 0)
    assert len(created) == len(became) == 20
    assert np.all((became - created >= 3) & (became - created <= 9))


def test_new_node_starts_are_told_apart():
    pods = [PodStart("w", 0.0, 5.0, 6.0, 100.0), PodStart("n", 0.0, 300.0, 301.0, 450.0)]
    s = StartSample.from_pods(pods)
    # waited 5 s (warm): created->ready 100; waited 300 s (> 60 s: a new node): scheduled->ready 150
    assert s.warm == (100.0,) and s.new_node == (150.0,) and s.total == (100.0, 450.0)
    assert s.summary()["new_node_starts"] == 1
    with pytest.raises(ValueError, match="no start-up"):
        StartSample.from_pods([PodStart("x", 0.0, 1.0, 2.0, None)])

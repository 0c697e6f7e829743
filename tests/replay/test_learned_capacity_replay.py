"""Capacity learned online, on a replay (issue 37, acceptance): the server's estimator fed what its queries would
show of a day of real traffic whose replicas sustain less than qpsPerReplica says, with saturation episodes."""

from __future__ import annotations

import numpy as np
import pytest

from scaler.replay import engine, variants
from scaler.replay.saturation import replay_learner, served_and_queue
from support import shared_traces as st

DAY = 86400.0


def test_the_fluid_queue_serves_what_waits_up_to_the_capacity():
    # 1 s ticks, capacity 2 req/s: 3 arrive in each of the first two ticks (1 waits, then 2), none after: the queue
    # drains at 2 a tick. Served [2, 2, 2, 0], waiting at each tick's end [1, 2, 0, 0]
    served, queue = served_and_queue(np.array([3.0, 3.0, 0.0, 0.0]), np.full(4, 2.0), 1.0)
    assert served.tolist() == [2.0, 2.0, 2.0, 0.0] and queue.tolist() == [1.0, 2.0, 0.0, 0.0]


@pytest.fixture(scope="module")
def day():
    # the last day of ServeGen m-small (Alibaba Cloud Model Studio, Apache-2.0), 2 days of history before it,
    # replayed with reactive KEDA at qpsPerReplica 200: its replicas, tick by tick
    name, rel, qps, days = st.TRACE_SPECS[0]
    s = engine.Settings(cold_start_seconds=180.0, qps_per_replica=qps, span_seconds=DAY, history_seconds=2 * DAY,
                        min_replicas=1, max_replicas=1000, policies=("reactive",))
    r = engine.run(st.load(name, rel, days), s, variants.defaults(s))
    return r.scenario, r.policies["reactive"].timeline, qps


def test_the_learned_capacity_lands_within_ten_percent_of_the_loadtest_figure(day):
    # the replicas really sustain 200 / 1.3 = 153.8 req/s each (what a loadtest of them measures), the trigger says
    # 200: reactive KEDA under-provisions whenever the traffic needs more than 1.3 x its replicas' real capacity,
    # so the queue fills in episodes (about half the day's samples; 0.67 with this noise: 10 % per-tick service
    # error and Poisson arrivals). The learner, fed a sample every 30 s (rate over 2 min, the queue, the ready
    # replicas) with the server's defaults (settled 120 s, median of a day, >= 10 samples), lands on 153.8
    # (measured 153.5: -0.2 %), exports the ratio 0.77, and puts it in force (inside [100, 400], 23 % from 200;
    # held at an earlier estimate, 154.4, while the later ones stay within the 10 % hysteresis of it)
    sc, tl, qps = day
    truth = qps / 1.3
    rep = replay_learner(sc.demand / 1.3, tl.ready, sc.tick, true_capacity=truth, configured=qps, noise=0.1)
    s = rep.learned
    assert 0.2 < rep.saturated_share < 0.9 and s.samples >= 100
    assert s.estimate == pytest.approx(truth, rel=0.10)
    assert s.ratio == pytest.approx(1 / 1.3, rel=0.10)
    assert s.in_force == pytest.approx(s.estimate, rel=0.10) and s.in_force == pytest.approx(truth, rel=0.10)
    assert s.factor == pytest.approx(1.3, rel=0.10)


def test_a_correct_figure_stays_in_force(day):
    # the same replicas at their configured 200 req/s: saturated only where reactive KEDA lags the traffic; the
    # estimate is 200 within the noise, less than 10 % from the configured figure, so the figure in force does not
    # move (the hysteresis)
    sc, tl, qps = day
    rep = replay_learner(sc.demand, tl.ready, sc.tick, true_capacity=qps, configured=qps, noise=0.1, seed=3)
    s = rep.learned
    assert s.estimate == pytest.approx(qps, rel=0.05) and s.in_force == qps and s.factor == 1.0

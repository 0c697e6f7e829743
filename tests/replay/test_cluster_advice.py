"""``replay.advice``: the smallest hot pool at the SLO, the ranking by GPU(-node)-hours, the paragraph."""

from __future__ import annotations

import numpy as np
import pytest

from scaler.replay import advice, engine, plan, variants
from scaler.replay import scenarios as scn
from scaler.replay.cluster import Pool
from scaler.replay.scenario import scenario
from scaler.replay.world import World

HOUR = 3600.0


def flat_scenario(rate: float = 6.0, hours: float = 3.0):
    s = scn.flat(rate, (hours + 1) * HOUR, step=60.0)
    start = float(s.t[0]) + HOUR
    return scenario(s.t, s.y, 60.0, start, start + hours * HOUR, cold_start_seconds=180.0, qps_per_replica=1.0)


def flat_run(world: World, rate: float = 6.0, hours: float = 3.0) -> engine.Result:
    """``rate`` req/s flat for 2 h of history and ``hours`` simulated, 1 req/s per replica, T_cold 180 s."""
    s = scn.flat(rate, (hours + 2) * HOUR, step=60.0)
    st = engine.Settings(cold_start_seconds=180.0, qps_per_replica=1.0, model="naive", history_seconds=2 * HOUR,
                         span_seconds=hours * HOUR, refit_seconds=HOUR, world=world)
    return engine.run(engine.Trace("flat", s, "synthetic", "memory"), st, variants.defaults(st))


def test_the_hot_pool_is_the_smallest_that_meets_the_slo():
    sc = flat_scenario()
    # 6 req/s at 1 req/s per replica: 5 replicas miss 1/6 of the requests, 6 miss none
    n, lv = advice.hot_pool(sc, World(service_seconds=0.2), 0.005, None)
    assert n == 6 and lv.outcome.underprovisioned_fraction == 0
    # with a pool of 4-GPU nodes the 6 replicas need 2 nodes: 2 x 3 h = 6 node-hours
    n, lv = advice.hot_pool(sc, World(pool=Pool(gpus_per_node=4), service_seconds=0.2), 0.005, None)
    assert n == 6 and lv.metrics()["gpu_node_hours"] == pytest.approx(6.0)


def test_the_cheapest_option_that_meets_the_slo_is_picked_and_explained():
    world = World(service_seconds=0.2)
    adv = plan.plan(flat_run(world), world, target_miss=0.005)
    assert adv.unit == "GPU-hours" and adv.slo == "missed requests <= 0.5 %"
    by = {o.policy: o for o in adv.options}
    assert set(by) == {"keep_alive", "scheduled", "hybrid", "reactive", "predictive"}
    # 6 req/s at 1 req/s per replica, flat: 6 replicas for 3 h = 18 GPU-hours meets it with nothing missed,
    # whether kept (keep-alive), scheduled (every hour's profile is 6), followed (reactive) or forecast
    for name in ("keep_alive", "scheduled", "reactive", "predictive"):
        assert (name, by[name].cost, by[name].miss, by[name].meets) == (name, pytest.approx(18.0), 0.0, True)
    # hybrid's floor (p10 of the history = 6 req/s = 6 replicas) sits under the forecast: 6 + 6 = 12 req/s, which
    # the dead-band compensation pushes past 1.1 x 11 replicas (12.101 req/s): 13 replicas for 3 h = 39
    assert by["hybrid"].cost == pytest.approx(39.0) and by["hybrid"].detail.startswith("floor 6 replicas")
    assert by["keep_alive"].detail == "6 replicas always ready"
    assert adv.pick is not None and adv.pick.cost == pytest.approx(18.0)
    assert adv.runner_up is not None and adv.runner_up.cost == pytest.approx(18.0)
    assert "the demand peaks at 6 req/s (6 replicas of 1)" in adv.paragraph
    assert "pick " in adv.paragraph and "18.0 GPU-hours" in adv.paragraph and "Runner-up: " in adv.paragraph
    # each option is deployable: a forescale trigger, the hot pool (min = max = 6) or the schedule's cron windows
    assert by["keep_alive"].deploy.min_replicas == by["keep_alive"].deploy.max_replicas == 6
    assert len(by["scheduled"].deploy.cron) == 24 and {n for _, _, n in by["scheduled"].deploy.cron} == {6}


def test_no_option_meets_the_slo_says_so():
    world = World(service_seconds=0.2, p95_target_seconds=0.1)  # below the service time: nobody can meet it
    r = flat_run(world)
    adv = plan.plan(r, world, target_miss=0.005)
    assert adv.pick is None and "None of the candidates meets P95 latency <= 0.1 s" in adv.paragraph
    assert np.isclose(advice.days_of(r.scenario), 3 / 24)

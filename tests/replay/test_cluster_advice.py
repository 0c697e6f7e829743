"""``replay.advice``: the smallest hot pool at the SLO, the ranking by GPU(-node)-hours, the paragraph."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from scaler.replay import advice
from scaler.replay import scenarios as scn
from scaler.replay.cluster import Pool
from scaler.replay.policies import fixed_pool
from scaler.replay.scenario import evaluate, scenario
from scaler.replay.world import World

HOUR = 3600.0


def flat_scenario(rate: float = 6.0, hours: float = 3.0):
    s = scn.flat(rate, (hours + 1) * HOUR, step=60.0)
    start = float(s.t[0]) + HOUR
    return scenario(s.t, s.y, 60.0, start, start + hours * HOUR, cold_start_seconds=180.0, qps_per_replica=1.0)


def run_of(sc, replicas: int, world_metrics: dict) -> SimpleNamespace:
    return SimpleNamespace(outcome=evaluate(sc, fixed_pool(sc, replicas)), world=world_metrics)


def test_the_hot_pool_is_the_smallest_that_meets_the_slo():
    sc = flat_scenario()
    # 6 req/s at 1 req/s per replica: 5 replicas miss 1/6 of the requests, 6 miss none
    n, lv = advice.hot_pool(sc, World(service_seconds=0.2), 0.005, None)
    assert n == 6 and lv.outcome.underprovisioned_fraction == 0
    # with a pool of 4-GPU nodes the 6 replicas need 2 nodes: 2 x 3 h = 6 node-hours
    n, lv = advice.hot_pool(sc, World(pool=Pool(gpus_per_node=4), service_seconds=0.2), 0.005, None)
    assert n == 6 and lv.metrics()["gpu_node_hours"] == pytest.approx(6.0)


def test_the_cheapest_option_that_meets_the_slo_is_picked_and_explained():
    sc = flat_scenario()
    world = World(service_seconds=0.2)
    # reactive is cheaper (5 replicas) but misses 1/6; predictive meets it at 6 replicas of GPU-hours = 18
    # (3 h), hybrid at 7 replicas = 21; keep-alive's searched pool is 6 replicas = 18 as well
    pols = {"reactive": run_of(sc, 5, {"p95_latency_seconds": 30.0}),
            "predictive": run_of(sc, 6, {"p95_latency_seconds": 0.2}),
            "hybrid": run_of(sc, 7, {"p95_latency_seconds": 0.2})}
    adv = advice.advise(pols, sc, world, target_miss=0.005, days=advice.days_of(sc))
    assert adv.unit == "GPU-hours" and adv.slo == "missed requests <= 0.5 %"
    ranked = [(o.policy, o.meets, o.cost) for o in adv.options]
    assert ranked[-1] == ("reactive", False, pytest.approx(15.0))
    assert {p for p, ok, _ in ranked if ok} == {"keep_alive", "predictive", "hybrid"}
    assert adv.pick is not None and adv.pick.cost == pytest.approx(18.0)
    assert adv.pick.policy in ("keep_alive", "predictive")  # a tie at 18 GPU-hours: either is the cheapest
    assert "pick " in adv.paragraph and "18.0 GPU-hours" in adv.paragraph


def test_no_option_meets_the_slo_says_so():
    sc = flat_scenario()
    world = World(service_seconds=0.2, p95_target_seconds=0.1)  # below the service time: nobody can meet it
    pols = {"predictive": run_of(sc, 6, {"p95_latency_seconds": 0.2})}
    adv = advice.advise(pols, sc, world, target_miss=0.005, days=advice.days_of(sc))
    assert adv.pick is None and "none of the candidates meets P95 latency <= 0.1 s" in adv.paragraph
    assert np.isclose(advice.days_of(sc), 3 / 24)

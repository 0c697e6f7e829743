"""``engine.run`` with a World: today's numbers without one, the node pool, the queue and the checks with one."""

from __future__ import annotations

import numpy as np
import pytest

from forecaster.base import Series
from scaler.replay import engine, variants
from scaler.replay.cluster import Phases, Pool
from scaler.replay.world import PLACEHOLDER, World

DAY = 86400.0


def daily(days: float = 2.0, step: float = 60.0) -> engine.Trace:
    t0 = 1_700_006_400.0
    t = t0 + step * np.arange(int(days * DAY / step))
    hour = (t % DAY) / 3600
    y = 50 + 40 * np.sin(2 * np.pi * (hour - 9) / 24) + np.where((hour > 19) & (hour < 20), 120, 0)
    return engine.Trace("daily", Series(t, y, step), "synthetic", "memory")


def run(world: World, **kw) -> engine.Result:
    s = engine.Settings(model="linear_trend", span_seconds=12 * 3600, history_seconds=DAY, qps_per_replica=15.0,
                        world=world, **kw)
    return engine.run(daily(), s, variants.defaults(s))


def test_a_neutral_world_changes_nothing():
    plain = run(World())
    # the cluster replayed with one phase of T_cold, unlimited GPUs, no kills: the same ready pods, so the
    # same outcomes, to the last request
    neutral = run(World(phases=Phases(pod=engine.Settings().cold_start_seconds)))
    assert {k: p.outcome for k, p in plain.policies.items()} == {k: p.outcome for k, p in neutral.policies.items()}
    assert all(p.world == {} for p in plain.policies.values()) and plain.checks == []
    assert all("pending_pod_hours" in p.world for p in neutral.policies.values())


def test_a_node_pool_costs_node_hours_and_slows_scale_out():
    pool = Pool(gpus_per_node=4, provision_seconds=420, idle_seconds=600)
    r = run(World(pool=pool, service_seconds=0.1))
    plain = run(World())
    for name in ("reactive", "predictive"):
        w = r.policies[name].world
        # 4 pods per node: the node-hours are at least a quarter of the replica-hours
        assert w["gpu_node_hours"] >= r.policies[name].outcome.replica_hours / 4 - 1e-9
        # a pod that needs a node starts 420 s later: more is missed than with unlimited GPUs
        assert r.policies[name].outcome.missed_requests > plain.policies[name].outcome.missed_requests
        assert w["p95_latency_seconds"] >= 0.1 and 0 <= w["timed_out_fraction"] <= 1
    # keep_alive holds its pool from the start: nodes never wait, nothing is missed
    assert r.policies["keep_alive"].outcome.missed_requests == 0


def test_the_placeholder_policy_gets_nodes_up_before_the_pods():
    pool = Pool(gpus_per_node=2, provision_seconds=420)
    r = run(World(pool=pool, placeholder_policy=True))
    pred, ph = r.policies["predictive"], r.policies[PLACEHOLDER]
    assert np.array_equal(pred.timeline.replicas, ph.timeline.replicas)  # the same real pods ...
    assert ph.world["placeholder_gpu_hours"] > 0  # ... plus placeholders, whose nodes cost
    # ... and the pods find their nodes up: ready no later at any tick, sooner at some, fewer requests
    # arrive while pods are starting
    assert (ph.timeline.ready >= pred.timeline.ready).all() and (ph.timeline.ready > pred.timeline.ready).any()
    assert ph.outcome.cold_start_requests < pred.outcome.cold_start_requests
    assert ph.outcome.missed_requests <= pred.outcome.missed_requests
    assert ph.world["gpu_node_hours"] >= pred.world["gpu_node_hours"]


def test_scenarios_report_their_checks_per_policy():
    r = run(World(scenarios=("step:from=0.6,to=1.2,at=2h", "pod-kill:at=3h"), p95_target_seconds=1.0),
            policies=("reactive", "keep_alive"))
    kinds = {(c["policy"], c["check"].split(" (")[0]) for c in r.checks}
    assert kinds == {(p, k) for p in ("reactive", "keep_alive")
                     for k in ("step scale-out", "step p95 during", "pod-kill recovery, worst of 1")}
    assert all(set(c) == {"policy", "check", "value_seconds", "limit_seconds", "passed"} for c in r.checks)
    ka = {c["check"].split(" (")[0]: c for c in r.checks if c["policy"] == "keep_alive"}
    # keep_alive is sized for the span's peak in hindsight (the step included): ready long before the step
    assert ka["step scale-out"]["passed"] and ka["step scale-out"]["value_seconds"] < 0


@pytest.mark.parametrize("world,needle", [
    (World(phases=Phases(pod=10)), "phases sum to 10 s, T_cold is 180 s"),
    (World(placeholder_policy=True), "needs a GPU node pool"),
    (World(scenarios=("step:at=1h,by=2",)), "unknown key by"),
    (World(timeout_seconds=0.0), "timeout seconds 0"),
])
def test_bad_worlds_are_named(world, needle):
    with pytest.raises(engine.ReplayError, match=needle):
        run(world)

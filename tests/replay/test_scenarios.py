"""``replay.scenarios`` on a flat load: a 60 % -> 120 % step, pod kills, and the checks they report."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scaler.policy import PolicyParams
from scaler.replay import scenarios as scn
from scaler.replay.cluster import Phases
from scaler.replay.hpa import Hpa, value_ticks
from scaler.replay.keda import run_hpa
from scaler.replay.policies import fixed_pool, planned_values
from scaler.replay.scenario import scenario
from scaler.replay.world import World, checks, live

TICK = 15.0
T_COLD = 120.0
BUFFER = 75.0
LEAD = T_COLD + BUFFER
HOUR = 3600.0


def step_scenario():
    """10 replicas of 1 req/s provisioned (minReplicaCount), a flat 6 req/s (60 %), at 1 h a step to 12 (120 %)."""
    flat = scn.flat(6.0, 4 * HOUR, step=60.0)
    start = float(flat.t[0]) + HOUR  # an hour before the span: the rate window has history
    spec = scn.parse("step:from=0.6,to=1.2,at=1h")
    series = scn.with_load(flat, start, (spec,))
    sc = scenario(series.t, series.y, series.step, start, start + 3 * HOUR, cold_start_seconds=T_COLD,
                  qps_per_replica=1.0)
    return sc, spec, int(round(HOUR / TICK))


def test_the_step_doubles_the_load_from_its_time_on():
    sc, spec, at = step_scenario()
    assert spec.factor == pytest.approx(2.0)
    assert sc.demand[at - 1] == pytest.approx(6.0) and sc.demand[at] == pytest.approx(12.0)
    assert sc.demand[-1] == pytest.approx(12.0)


def test_reactive_scale_out_takes_at_least_one_poll_and_t_cold():
    sc, spec, at = step_scenario()
    hpa = Hpa(target=1.0, min_replicas=10)
    params = PolicyParams(mode="reactive", lead_seconds=0.0, quantile=0.5, qps_per_replica=1.0, headroom=1.0,
                          hpa_tolerance=0.0)
    tl = run_hpa(sc, planned_values(sc, hpa, params, ()).values, hpa)
    assert tl.replicas[at - 1] == 10 and tl.replicas[-1] == 12  # 60 % of 10 before, 12 needed after
    took = scn.scale_out_seconds(tl.ready, sc.demand, 1.0, at, TICK)
    # the rate over 2 min shows the step only after it; KEDA sees it at its next poll (<= 30 s), the HPA
    # adds the pods, they serve T_cold later: at least one poll + T_cold after the step
    assert took >= 30.0 + T_COLD
    assert took > LEAD  # and so the check against T_cold + T_buffer fails
    got = scn.checks("reactive", (spec,), tl.ready, sc.demand, 1.0, TICK, LEAD, [], None, 0.0, None, None)
    assert got == [{"policy": "reactive", "check": "step scale-out (step:from=0.6,to=1.2,at=1h)",
                    "value_seconds": took, "limit_seconds": LEAD, "passed": False}]


def test_predictive_with_a_correct_forecast_finishes_before_the_step():
    sc, spec, at = step_scenario()
    hpa = Hpa(target=1.0, min_replicas=10)
    idx = value_ticks(sc.n, hpa, TICK)
    ahead = int(math.ceil(LEAD / TICK))
    # what decide returns with an exact forecast: max(observed, the forecast's max over [now, now + L])
    values = np.array([max(sc.observed[i], sc.demand[i:i + ahead + 1].max()) for i in idx])
    tl = run_hpa(sc, values, hpa)
    took = scn.scale_out_seconds(tl.ready, sc.demand, 1.0, at, TICK)
    # the first poll whose window [t, t + 195 s] reaches the step is at most 30 s after at - 195 s; its pods
    # serve T_cold = 120 s later, by at - 195 + 30 + 120 = at - 45 s: took <= -45 s
    assert took <= -(LEAD - 30.0 - T_COLD)
    got = scn.checks("predictive", (spec,), tl.ready, sc.demand, 1.0, TICK, LEAD, [], None, 0.0, None, None)
    assert got[0]["passed"] and got[0]["value_seconds"] == took


def flat_world(replicas: int, spec: str):
    flat = scn.flat(6.0, 4 * HOUR, step=60.0)
    start = float(flat.t[0]) + HOUR
    sc = scenario(flat.t, flat.y, 60.0, start, start + 3 * HOUR, cold_start_seconds=T_COLD, qps_per_replica=1.0)
    w = World(phases=Phases(pod=T_COLD), scenarios=(spec,), service_seconds=0.2)
    lv = live(w, sc, fixed_pool(sc, replicas))
    return w, sc, lv


def test_a_pod_kill_with_a_hot_spare_recovers_within_one_hpa_sync():
    # 6 req/s need 6 pods; 7 are ready: losing one leaves demand covered: recovery 0 s <= one sync (15 s)
    w, sc, lv = flat_world(7, "pod-kill:at=1h,count=1")
    at = int(round(HOUR / TICK))
    assert lv.timeline.ready[at - 1] == 7 and lv.timeline.ready[at] == 6  # the kill did happen
    (c,) = checks(w, "keep_alive", sc, lv, LEAD)
    assert c["value_seconds"] <= Hpa.sync_seconds and c["passed"] and c["limit_seconds"] == 60.0
    assert lv.latency.p95_seconds == pytest.approx(0.2)  # nobody waited


def test_a_pod_kill_without_a_spare_is_short_for_t_cold():
    # 6 pods for 6 req/s: the replacement serves T_cold = 120 s = 8 ticks later: recovery 120 s > 60 s
    w, sc, lv = flat_world(6, "pod-kill:at=1h,count=1")
    (c,) = checks(w, "keep_alive", sc, lv, LEAD)
    assert c["value_seconds"] == pytest.approx(T_COLD) and not c["passed"]
    # 1 req/s short for 120 s: requests queue, the p99 latency grows past the service time
    assert lv.latency.p99_seconds > 0.2 and lv.outcome.missed_requests == pytest.approx(120.0)


def test_random_kills_are_seeded_and_counted():
    ks = scn.kills((scn.parse("pod-kill:rate=6,count=2"),), 240 * 4, TICK, seed=3)
    assert ks == scn.kills((scn.parse("pod-kill:rate=6,count=2"),), 240 * 4, TICK, seed=3)
    assert 1 <= len(ks) <= 60 and all(k.count == 2 and not k.node for k in ks)


@pytest.mark.parametrize("text,needle", [
    ("wobble:at=1h", "unknown kind 'wobble'"),
    ("step:from=0.6,to=1.2", "needs at=DURATION"),
    ("step:from=0.6,to=1.2,at=soon", "not a duration"),
    ("spike:to=2,at=1h", "spike needs for=DURATION"),
    ("pod-kill:count=1", "exactly one of at=DURATION or rate=N"),
    ("pod-kill:at=1h,count=1.5", "whole number"),
    ("step:at=1h,by=2", "unknown key by"),
])
def test_bad_specs_are_named(text, needle):
    with pytest.raises(ValueError, match=needle):
        scn.parse(text)


def test_ramp_and_spike_shapes():
    rel = np.array([0.0, 1800.0, 2700.0, 3600.0, 7200.0])
    ramp = scn.parse("ramp:from=1,to=3,at=30m,over=30m")
    assert ramp.multiplier(rel).tolist() == pytest.approx([1.0, 1.0, 2.0, 3.0, 3.0])
    spike = scn.parse("spike:from=1,to=2,at=30m,for=15m")
    assert spike.multiplier(rel).tolist() == pytest.approx([1.0, 2.0, 1.0, 1.0, 1.0])

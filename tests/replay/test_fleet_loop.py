"""The fleet replayed jointly under a GPU budget (scaler.replay.fleetloop), by worked arithmetic and as rules."""

from __future__ import annotations

import numpy as np
import pytest

from scaler.budget import BudgetError
from scaler.replay import fleetloop
from scaler.replay.fleetmember import Member
from scaler.replay.hpa import Hpa, value_ticks
from scaler.replay.keda import run_hpa
from scaler.replay.scenario import scenario


def member(name: str, demand: np.ndarray, value: float, *, cold: float = 30.0, q: float = 10.0, lo: int = 0,
           t0: float = 0.0) -> Member:
    """A workload whose own answer is its demand (a perfect plan), on 15 s ticks from ``t0``."""
    n = len(demand)
    t = t0 + 15.0 * np.arange(n)
    sc = scenario(t, demand, 15.0, t0, t0 + 15.0 * n, cold_start_seconds=cold, qps_per_replica=q)
    hpa = Hpa(target=q, min_replicas=lo)
    return Member(name, sc, hpa, sc.demand[value_ticks(sc.n, hpa)].copy(), value_per_request=value)


def by_name(fr):
    return {p.member.name: p for p in fr.played}


def small_fleet():
    # a: 30 req/s all along, $1 a request; b: 10 req/s, then 30 from tick 20 on, $10 a request. 10 req/s a replica,
    # 1 GPU each, T_cold 30 s = 2 ticks, KEDA and the HPA's defaults (stabilisation down 300 s = 20 ticks).
    n = 60
    return [member("a", np.full(n, 30.0), 1.0), member("b", np.where(np.arange(n) < 20, 10.0, 30.0), 10.0)]


def test_worked_fleet_value_rule():
    # Budget 4 GPUs. Ticks 0-19: a asks 3, b 1: 4 fit, nobody capped, both start steady (ready).
    # Tick 20: b asks 3 (6 > 4). Value per GPU of a next replica: b 10 x 10 = 100, a 1 x 10 = 10 -> b 3, a 1:
    # a's answer is capped to 1 x 10 = 10 req/s. a's HPA recommends 1, but its scale-down window (300 s) holds the
    # 3 it recommended at ticks 0-19 until tick 39 (the record of tick 19 leaves the window there: 39 - 19 = 20).
    # b's HPA goes to 3 at tick 20; no GPU is free (a 3 + b 1 = 4), so 2 pods are Pending until a drops to 1 at
    # tick 39; they bind then and are ready at 41.
    # b missed: ticks 20..40 (21 ticks) x (30 - 10) req/s x 15 s = 6,300 requests = $63,000;
    # a missed: ticks 39..59 (21 ticks) x (30 - 10) x 15 = 6,300 requests = $6,300.
    fr = fleetloop.replay(small_fleet(), {"*": 4.0}, "value")
    a, b = by_name(fr)["a"], by_name(fr)["b"]
    assert fr.gpus["*"].max() == 4.0
    assert list(a.timeline.replicas[[19, 38, 39]]) == [3, 3, 1]
    assert list(b.want[[19, 20]]) == [1, 3] and list(b.timeline.replicas[[20, 38, 39]]) == [1, 1, 3]
    assert list(b.timeline.ready[[40, 41]]) == [1, 3]
    assert a.capped[20:].all() and not a.capped[:20].any() and not b.capped.any()
    assert b.pending[20:39].tolist() == [2] * 19 and b.pending[39:].sum() == 0
    assert b.outcome.missed_requests == pytest.approx(6300.0)
    assert a.outcome.missed_requests == pytest.approx(6300.0)
    assert np.flatnonzero(b.gave_way).tolist() == list(range(20, 39))


def test_worked_fleet_equal_share_loses_more_value():
    # Same fleet, equal share: at tick 20 one replica at a time to the fewest GPUs granted (ties: the name):
    # a, b, a, b -> 2 each; both answers capped to 20 req/s. a holds 3 until tick 39 (stabilisation), then 2;
    # b wants 2 at tick 20, its one Pending pod binds at tick 39 (a's freed GPU), ready at 41.
    # b missed: 21 ticks x 20 x 15 = 6,300, then ticks 41..59 (19) x (30 - 20) x 15 = 2,850: 9,150 = $91,500;
    # a missed: ticks 39..59 (21) x (30 - 20) x 15 = 3,150 = $3,150. $94,650 in all against the value rule's $69,300.
    fr = fleetloop.replay(small_fleet(), {"*": 4.0}, "equal")
    a, b = by_name(fr)["a"], by_name(fr)["b"]
    assert list(a.timeline.replicas[[38, 39]]) == [3, 2] and list(b.timeline.ready[[40, 41]]) == [1, 2]
    assert b.outcome.missed_requests == pytest.approx(9150.0)
    assert a.outcome.missed_requests == pytest.approx(3150.0)
    lost = {r: sum(p.outcome.missed_requests * p.member.value_per_request
                   for p in fleetloop.replay(small_fleet(), {"*": 4.0}, r).played) for r in ("value", "equal")}
    assert lost == pytest.approx({"value": 69300.0, "equal": 94650.0})


def test_without_a_budget_nobody_waits():
    # b's two new pods bind at tick 20 and are ready at 22: missed 2 ticks x 20 x 15 = 600; a misses none
    fr = fleetloop.replay(small_fleet(), None)
    a, b = by_name(fr)["a"], by_name(fr)["b"]
    assert b.outcome.missed_requests == pytest.approx(600.0) and a.outcome.missed_requests == 0
    assert fr.gpus["*"].max() == 6.0 and not (a.gave_way.any() or b.gave_way.any())


def _case(rng: np.random.Generator, t0: float):
    n = int(rng.integers(40, 160))
    cold = float(rng.choice([0.0, 15.0, 50.0, 180.0]))
    q = float(rng.choice([1.0, 2.5, 10.0]))
    y = np.abs(rng.uniform(0, 60) + np.cumsum(rng.normal(0, 5, n + 10)))
    sc = scenario(t0 + np.arange(n + 10) * 15.0, y, 15.0, t0 + 150.0, t0 + (n + 10) * 15.0, cold_start_seconds=cold,
                  qps_per_replica=q)
    lo = int(rng.choice([0, 0, 1, 3]))
    hpa = Hpa(cached_metrics=bool(rng.random() < 0.3), target=q, min_replicas=lo,
              max_replicas=int(rng.choice([max(lo, 1), 5, 20, 100])), tolerance_up=float(rng.choice([0.0, 0.1])),
              scale_up_pods=int(rng.choice([1, 4])), scale_up_percent=float(rng.choice([10.0, 100.0])),
              scale_up_window_seconds=float(rng.choice([0.0, 0.0, 60.0])),
              scale_down_window_seconds=float(rng.choice([0.0, 60.0, 300.0])),
              scale_down_percent=float(rng.choice([10.0, 100.0])), polling_seconds=float(rng.choice([15.0, 30.0])),
              activation_threshold=float(rng.choice([0.0, 0.0, 5.0])), cooldown_seconds=float(rng.choice([60.0, 300.0])),
              milli=bool(rng.random() < 0.8), legacy=bool(rng.random() < 0.2))
    k = len(value_ticks(sc.n, hpa, sc.tick))
    vals = sc.observed[value_ticks(sc.n, hpa, sc.tick)] * rng.choice([0.5, 1.0, 1.3])
    vals = np.where(rng.random(k) < 0.1, 0.0, vals + np.where(rng.random(k) < 0.05, 80.0, 0.0))
    return sc, vals, hpa


def test_without_a_budget_each_member_replays_as_it_does_alone():
    # 150 fleets of 1-3 members (each starting at its own tick of the grid) against keda.run_hpa member by member:
    # the same rules called one tick at a time give the same pods, tick for tick
    rng = np.random.default_rng(5)
    for _ in range(150):
        ms = []
        for w in range(int(rng.integers(1, 4))):
            sc, vals, hpa = _case(rng, 15.0 * int(rng.integers(0, 6)))
            ms.append((Member(f"w{w}", sc, hpa, vals), run_hpa(sc, vals, hpa)))
        fr = fleetloop.replay([m for m, _ in ms], None)
        for (m, alone), p in zip(ms, fr.played):
            assert np.array_equal(alone.replicas, p.timeline.replicas), m.hpa
            assert np.array_equal(alone.ready, p.timeline.ready), m.hpa


@pytest.mark.parametrize("rule", ["value", "equal"])
def test_a_budget_is_never_exceeded_and_keeps_the_minimums(rule):
    rng = np.random.default_rng(11 if rule == "value" else 12)
    for _ in range(40):
        ms = []
        for w in range(int(rng.integers(2, 5))):
            sc, vals, hpa = _case(rng, 0.0)
            ms.append(Member(f"w{w}", sc, hpa, vals, gpus_per_replica=float(rng.choice([0.5, 1.0, 2.0])),
                             value_per_request=float(rng.choice([0.1, 1.0, 5.0]))))
        peak = fleetloop.replay(ms, None).gpus["*"].max()
        floor = sum(m.minimum * m.gpus_per_replica for m in ms)
        total = max(floor, 0.7 * peak)
        fr = fleetloop.replay(ms, {"*": total}, rule)  # the loop itself raises BudgetOverrun at a tick over it
        assert fr.gpus["*"].max() <= total + 1e-9
        for p in fr.played:  # every answer KEDA got while capped asks for no more than the member's own plan
            assert (p.timeline.value[p.capped] <= p.member.values.max() + 1e-9).all()


def test_a_budget_below_the_minimums_is_refused_before_the_replay():
    ms = [member("a", np.full(10, 30.0), 1.0, lo=3), member("b", np.full(10, 30.0), 1.0, lo=2)]
    with pytest.raises(BudgetError, match=r"below the 5 GPUs.*a: 3, b: 2"):
        fleetloop.replay(ms, {"*": 4.0})
    with pytest.raises(ValueError, match="not on the fleet's grid"):
        fleetloop.replay([ms[0], member("c", np.full(10, 1.0), 1.0, t0=7.0)], None)

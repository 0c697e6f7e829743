"""GPU node pools of types and prices (``scaler.gpus``, ``replay.pools``): the pool file, placement, dollars.

Worked arithmetic: ticks of 15 s; a pod serves from the first tick start at or after its ready time; a node
counts (and bills) from its provisioning to its removal.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from scaler.gpus import PoolError, choices, parse_pool_file
from scaler.money import break_even
from scaler.replay import pools as pl
from scaler.replay.cluster import Phases, Pool, simulate
from scaler.replay.scenario import Timeline, scenario
from scaler.replay.world import World, live

TICK = 15.0


def doc(**over) -> dict:
    """A pool file: h100 (2 GPUs a node, 1 node, $6.88/GPU-h, MIG 3g.40gb) before l4 (1 GPU, <= 2 nodes)."""
    d = {"pools": [{"name": "h100", "gpu": "H100", "gpusPerNode": 2, "nodeBootSeconds": 300, "maxNodes": 1,
                    "pricePerGpuHour": 6.88, "mig": ["3g.40gb"]},
                   {"name": "l4", "gpu": "L4", "gpusPerNode": 1, "nodeBootSeconds": 240, "maxNodes": 2,
                    "pricePerGpuHour": 0.8}],
         "replica": {"capacity": {"H100": 1, "H100/3g.40gb": 0.45, "L4": 0.25}, "coldStartSeconds": {"L4": 120}},
         "placement": ["h100", "l4"]}
    d.update(over)
    return d


def flat_scenario(rate: float, ticks: int, cold: float = 90.0):
    t = 1_700_000_000.0 + 60.0 * np.arange(ticks // 4 + 40)
    y = np.full(t.size, rate)
    start = t[20]
    return scenario(t, y, 60.0, start, start + ticks * TICK, cold_start_seconds=cold, qps_per_replica=1.0)


def counts(*runs: tuple[int, int]) -> np.ndarray:
    return np.concatenate([np.full(k, v, dtype=np.int64) for v, k in runs])


def test_a_choice_holds_whole_gpus_or_slices_per_node():
    pf = parse_pool_file(doc())
    by = {c.key: c for c in choices(pf)}
    assert set(by) == {"h100", "h100/3g.40gb", "l4"}
    # whole GPUs: 2 per node, one per replica; 3g.40gb: 2 instances per GPU (NVIDIA's MIG profiles), so a
    # node of 2 GPUs holds 2 x 2 = 4 replicas, each holding half a GPU, at 0.45 of a whole H100's capacity
    assert (by["h100"].slots_per_node, by["h100"].gpu_fraction, by["h100"].resource) == (2, 1.0, "nvidia.com/gpu")
    s = by["h100/3g.40gb"]
    assert (s.slots_per_node, s.gpu_fraction, s.capacity, s.resource) == (4, 0.5, 0.45, "nvidia.com/mig-3g.40gb")
    assert by["l4"].cold_start_seconds == 120 and by["h100"].cold_start_seconds is None


def test_the_priority_split_fills_the_first_pool_to_its_maximum_then_the_next():
    placement = pl.from_file(parse_pool_file(doc()))
    # h100 holds 1 node x 2 = 2 replicas; l4 (the last) takes the rest: 5 -> 2 + 3 (one more than its 2 nodes)
    a, b = pl.split(np.array([0, 1, 2, 3, 5]), placement)
    assert a.tolist() == [0, 1, 2, 2, 2] and b.tolist() == [0, 0, 0, 1, 3]
    assert placement.rule == "priority" and [p.capacity for p in placement.pools] == [1.0, 0.25]


def test_an_overflow_replica_on_l4_boots_its_node_loads_and_adds_a_quarter():
    # replicas 2 for ticks 0-3, then 3 until tick 59 (15 min). h100 takes 2 (its one node, up from the start);
    # the third goes to l4 at t = 60 s: a node is provisioned, up at 60 + 240 = 300 s; T_cold on L4 120 s:
    # ready at 420 s = tick 28 exactly. Its capacity is 0.25 of an H100 replica: ready 2 -> 2.25.
    sc = flat_scenario(2.1, 60)
    world = World(placement=pl.from_file(parse_pool_file(doc()), money=True), lost_request_value=0.05)
    lv = live(world, sc, Timeline(replicas=counts((2, 4), (3, 56)), ready=np.zeros(60)))
    ready = lv.timeline.ready
    assert ready[27] == pytest.approx(2.0) and ready[28] == pytest.approx(2.25)
    f = lv.pools
    # h100: 1 node x 60 ticks x 15 s = 900 s = 0.25 node-h = 0.5 GPU-h x $6.88 = $3.44
    assert f["h100"]["node_hours"] == pytest.approx(0.25) and f["h100"]["dollars"] == pytest.approx(3.44)
    # l4: 1 node from tick 4 (provisioned) to 59: 56 x 15 s = 840 s = 0.2333 h x 1 GPU x $0.80 = $0.18667
    assert f["l4"]["gpu_hours"] == pytest.approx(840 / 3600) and f["l4"]["dollars"] == pytest.approx(0.8 * 840 / 3600)
    m = lv.metrics()
    assert m["dollars"] == pytest.approx(3.44 + 0.8 * 840 / 3600)
    # demand 2.1 req/s, capacity 2.0 for ticks 0-27: 0.1 x 28 x 15 s = 42 requests missed, x $0.05 = $2.10
    assert lv.outcome.missed_requests == pytest.approx(42.0)
    assert m["lost_dollars"] == pytest.approx(2.10) and m["total_dollars"] == pytest.approx(3.44 + 0.18667 + 2.1,
                                                                                              abs=1e-4)
    assert m["unplaced_replica_hours"] == 0.0


def test_a_replica_that_fits_nowhere_is_counted_not_dropped():
    # 5 replicas: h100 holds 2, l4 at most 2 nodes of 1 GPU: the fifth stays Pending the whole 60 ticks
    # with every pool at its maximum: 60 x 15 s = 0.25 replica-h unplaced (it still counts in the replicas)
    sc = flat_scenario(1.0, 60)
    world = World(placement=pl.from_file(parse_pool_file(doc())))
    lv = live(world, sc, Timeline(replicas=np.full(60, 5), ready=np.zeros(60)))
    assert lv.pools["l4"]["unplaced_replica_hours"] == pytest.approx(0.25)
    assert lv.metrics()["unplaced_replica_hours"] == pytest.approx(0.25)
    assert lv.timeline.replicas.tolist() == [5] * 60
    assert lv.timeline.ready[-1] == pytest.approx(2 + 2 * 0.25)  # the ready ones: 2 H100 + 2 L4 at 0.25


def test_one_pool_is_the_single_pool_replay_exactly():
    # a placement of one pool of whole GPUs (capacity 1, T_cold the run's) is cluster.simulate on that pool
    reps = counts((1, 10), (6, 80), (2, 60))
    sc = flat_scenario(3.0, reps.size)
    placement = pl.from_file(parse_pool_file(doc(placement="h100", pools=[dict(doc()["pools"][0], maxNodes=9)])))
    lv = live(World(placement=placement), sc, Timeline(replicas=reps, ready=np.zeros(reps.size)))
    rep = simulate(reps, Phases(pod=90.0), TICK, pool=Pool(2, 9, 300.0))
    assert np.array_equal(lv.timeline.ready, rep.timeline.ready) and np.array_equal(lv.replay.nodes, rep.nodes)
    assert lv.pools["h100"]["node_hours"] == pytest.approx(rep.gpu_node_hours)


def test_a_mig_slice_placement_bills_whole_nodes():
    # 3 replicas on h100/3g.40gb: a node of 2 GPUs holds 4 slices, so 1 node; it bills its 2 GPUs x $6.88 for
    # 40 ticks = 600 s: 2 x 6.88 / 6 = $2.2933; the pods hold 3 x 0.5 GPU x 600 s = 0.25 GPU-h
    sc = flat_scenario(1.0, 40)
    placement = pl.from_file(parse_pool_file(doc()), ["h100/3g.40gb"])
    lv = live(World(placement=placement), sc, Timeline(replicas=np.full(40, 3), ready=np.zeros(40)))
    f = lv.pools["h100/3g.40gb"]
    assert f["peak_nodes"] == 1 and f["dollars"] == pytest.approx(2 * 6.88 / 6)
    assert f["pod_gpu_hours"] == pytest.approx(0.25) and placement.qps_scale == 0.45


@pytest.mark.parametrize("change, needle", [
    (lambda d: d["pools"][0].update(gpu="H900"), "pools[0].gpu 'H900': unknown GPU type"),
    (lambda d: d["pools"][0].update(mig=["5g.50gb"]), "pools[0].mig '5g.50gb': not a MIG profile of H100"),
    (lambda d: d["pools"][1].update(mig=["1g.10gb"]), "L4 has no MIG"),
    (lambda d: d["pools"][0].update(pricePerGpuHour=-1), "pools[0].pricePerGpuHour -1"),
    (lambda d: d["pools"][0].update(gpusPerNode=0), "pools[0].gpusPerNode 0"),
    (lambda d: d["pools"][0].update(colour="red"), "pools[0]: unknown field(s) colour"),
    (lambda d: d.update(placement=["a100"]), "placement"),
    (lambda d: d["replica"].update(memoryGB=30), "cannot hold the model's 30 GB"),
    (lambda d: d["replica"]["capacity"].pop("L4"), "replica.capacity has no L4"),
    (lambda d: d["pools"][0].update(warm={"nodes": 1, "bootSeconds": 60, "stoppedCostFraction": 2}),
     "pools[0].warm.stoppedCostFraction 2"),
])
def test_bad_pool_files_name_the_field(change, needle):
    d = doc()
    d["pools"] = [dict(p) for p in d["pools"]]
    d["replica"] = {k: dict(v) if isinstance(v, dict) else v for k, v in d["replica"].items()}
    change(d)
    with pytest.raises(PoolError) as e:
        pf = parse_pool_file(d)
        pl.from_file(pf, ["l4"] if "L4" in needle else ())
        choices(pf)
    assert needle in str(e.value)


def test_money_asked_needs_every_pools_price():
    d = doc()
    d["pools"] = [dict(d["pools"][0]), {k: v for k, v in d["pools"][1].items() if k != "pricePerGpuHour"}]
    pf = parse_pool_file(d)
    assert pl.from_file(pf).pools[1].billing is None  # GPU-hours only, no dollars
    with pytest.raises(PoolError, match="pool l4 has no pricePerGpuHour"):
        pl.from_file(pf, money=True)


def test_the_break_even_rate_of_scale_to_zero():
    # one L4 replica at $0.80/h; a wake costs T_cold 120 s + 300 s idle = 420 s of GPU = $0.09333, plus a lost
    # request worth $0.01: $0.10333. r* = 0.80 / 0.10333 = 7.742 requests per hour; the formula holds below
    # 3600 / 420 = 8.571 wakes per hour
    be = break_even(0.8, 120, 300, 0.01)
    assert be.wake_dollars == pytest.approx(0.8 * 420 / 3600 + 0.01)
    assert be.requests_per_hour == pytest.approx(0.8 / (0.8 * 420 / 3600 + 0.01))
    assert be.requests_per_hour == pytest.approx(7.742, abs=1e-3) and be.valid_below == pytest.approx(8.571, abs=1e-3)
    # a wake that costs nothing (no cold start, no idle tail, no value): scaling to zero is always cheaper
    assert math.isinf(break_even(0.8, 0, 0).requests_per_hour)


def test_tune_selects_the_cheapest_in_dollars_when_every_point_has_them():
    from dataclasses import replace

    from scaler.replay import frontier, variants
    from scaler.replay.scenario import Outcome

    def pt(headroom: float, miss: float, replica_h: float, usd: float | None) -> frontier.Point:
        o = Outcome(miss, 0, replica_h, 0, 0, 0.0, 0.0, 1.0)
        return frontier.Point(variants.Variant("reactive", headroom=headroom), o, replica_h / 100, True, False,
                              dollars=usd)

    # both meet a 1 % miss; x1.1 holds fewer replica-hours (100 < 120) but lands on dearer nodes ($900 > $700)
    a, b = pt(1.1, 0.005, 100.0, 900.0), pt(1.2, 0.004, 120.0, 700.0)
    sel = frontier.select([a, b], 0.01)
    assert sel.point is b and "in dollars" in sel.message
    # without dollars on every point: replica-hours, as before
    sel = frontier.select([a, replace(b, dollars=None)], 0.01)
    assert sel.point is a and "in dollars" not in sel.message


def test_a_warm_pool_starts_a_stopped_node_and_bills_it_stopped():
    # one GPU a node, boot 300 s, a warm pool of 1 stopped node that starts in 60 s at 10 % while stopped; $1/GPU-h.
    # replicas 1 for ticks 0-1, then 2 until tick 239 (1 h). The second pod (t = 30 s) takes the stopped node:
    # up at 90 s with the image, load 90 s: ready at 180 s = tick 12 (a new node: up 330 s, ready 420 s = tick 28).
    # Its replacement is launched at 30 s and stopped at 330 s = tick 22: stopped 1 for ticks 0-1, 0 for 2-21,
    # 1 from 22: 220 ticks x 15 s = 0.91667 h. Nodes: 1 for 2 ticks, 2 for 238: 478 x 15 s = 1.99167 node-h.
    # $ = 1.99167 running + 0.1 x 0.91667 stopped + the replacement's boot 300 s = 0.08333 -> $2.16667
    d = doc(placement="l4")
    d["pools"] = [d["pools"][0], dict(d["pools"][1], nodeBootSeconds=300, pricePerGpuHour=1.0,
                                      warm={"nodes": 1, "bootSeconds": 60, "stoppedCostFraction": 0.1})]
    d["replica"] = {"capacity": {"L4": 1}, "coldStartSeconds": {"L4": 90}}
    sc = flat_scenario(1.0, 240)
    lv = live(World(placement=pl.from_file(parse_pool_file(d))), sc,
              Timeline(replicas=counts((1, 2), (2, 238)), ready=np.zeros(240)))
    assert lv.timeline.ready[11] == 1 and lv.timeline.ready[12] == 2
    f = lv.pools["l4"]
    assert f["warm_starts"] == 1 and f["stopped_node_hours"] == pytest.approx(220 * 15 / 3600)
    assert f["node_hours"] == pytest.approx(478 * 15 / 3600)
    assert f["dollars"] == pytest.approx(478 * 15 / 3600 + 0.1 * 220 * 15 / 3600 + 300 / 3600)
    # the same without the warm pool: ready 2 only at tick 28, and no stopped node billed
    d["pools"][1].pop("warm")
    cold = live(World(placement=pl.from_file(parse_pool_file(d))), sc,
                Timeline(replicas=counts((1, 2), (2, 238)), ready=np.zeros(240)))
    assert cold.timeline.ready[27] == 1 and cold.timeline.ready[28] == 2
    assert cold.pools["l4"]["dollars"] == pytest.approx(478 * 15 / 3600)


def test_a_spot_pool_bills_the_spot_price_and_loses_nodes_at_its_rate():
    # h100 on spot at $2.90/GPU-h: 2 replicas on its one node of 2 GPUs for 240 ticks (1 h) = 2 GPU-h = $5.80
    # with no interruptions; at 1 interruption per node-hour the losses are Poisson(1 x 1 node-h) drawn with
    # seed + 1000 (the pool's index 0): numpy's draw for seed 0 is 1, so the node goes once and its pods
    # restart on a new node (up 300 s later)
    d = doc(placement="h100")
    d["pools"] = [dict(d["pools"][0], capacityType="spot", spotPricePerGpuHour=2.9), d["pools"][1]]
    sc = flat_scenario(2.0, 240)
    tl = Timeline(replicas=np.full(240, 2), ready=np.zeros(240))
    calm = live(World(placement=pl.from_file(parse_pool_file(d))), sc, tl)
    assert calm.pools["h100"]["dollars"] == pytest.approx(5.8) and calm.pools["h100"]["spot_interruptions"] == 0
    d["pools"][0]["spotInterruptionsPerNodeHour"] = 1.0
    hit = live(World(placement=pl.from_file(parse_pool_file(d))), sc, tl, seed=0)
    assert int(np.random.default_rng(1000).poisson(1.0)) == 1
    assert hit.pools["h100"]["spot_interruptions"] == 1 and hit.timeline.ready.min() == 0  # the node went, the pods waited for another
    assert hit.outcome.missed_requests > 0

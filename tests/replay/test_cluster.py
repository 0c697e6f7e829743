"""``replay.cluster``: a pod's cold start by phases on the node it lands on, the GPU node pool, kills.

Worked arithmetic: every expected tick and figure is derived in the comments
(ticks of 15 s; a pod serves from the first tick start at or after its ready time).
"""

from __future__ import annotations

import numpy as np
import pytest

from scaler.replay.cluster import Kill, Phases, Pool, simulate
from scaler.replay.hpa import Hpa
from scaler.replay.keda import run_hpa
from scaler.replay.scenario import scenario

TICK = 15.0
# scheduling 20 s, image pull 60 s, container start 10 s, weight load 60 s + warm-up 30 s = 90 s
PH = Phases(scheduling=20, image_pull=60, container_start=10, pod=90)


def counts(*runs: tuple[int, int]) -> np.ndarray:
    """Replica counts per tick from (value, ticks) runs."""
    return np.concatenate([np.full(k, v, dtype=np.int64) for v, k in runs])


def test_without_a_pool_or_phases_it_is_the_hpa_emulation_exactly():
    # a bumpy demand through the real KEDA/HPA emulation: the cluster with one phase (T_cold = 180 s),
    # unlimited GPUs and no kills must give the very same ready count
    t = 1_700_000_000.0 + 60.0 * np.arange(600)
    y = 40 + 30 * np.sin(np.arange(600) / 20.0) + np.where((np.arange(600) % 97) < 5, 60, 0)
    sc = scenario(t, y, 60.0, t[120], t[-1], cold_start_seconds=180.0, qps_per_replica=7.0)
    hpa = Hpa(target=7.0, min_replicas=0)
    values = sc.observed  # KEDA asks at every HPA sync (15 s, one tick)
    tl = run_hpa(sc, values, hpa)
    rep = simulate(tl.replicas, Phases(pod=180.0), TICK)
    assert np.array_equal(rep.timeline.ready, tl.ready) and np.array_equal(rep.timeline.replicas, tl.replicas)
    assert tl.replicas.max() > tl.replicas.min()  # the test moves: scale-ups and downs happened
    assert rep.nodes is None and rep.gpu_node_hours is None


def test_a_pod_that_needs_a_new_node_pays_provision_pull_start_load_and_warm_up():
    # one GPU per node; the first pod fills the node the replay starts with. The second pod is created at
    # tick 2 (t = 30 s): no free GPU, so a node is provisioned, up at 30 + 300 = 330 s. Binding waits for it
    # (330 > 30 + 20 s of scheduling); the node lacks the image: pull 330 .. 390; container 390 .. 400;
    # load + warm-up 400 .. 490. start = 300 + 60 + 10 + 90 = 460 s after creation; ready at 490 s,
    # the first tick start at or after it: ceil(490 / 15) = tick 33 (495 s).
    rep = simulate(counts((1, 2), (2, 60)), PH, TICK, pool=Pool(gpus_per_node=1, provision_seconds=300))
    ready = rep.timeline.ready
    assert ready[32] == 1 and ready[33] == 2
    assert rep.nodes[1] == 1 and rep.nodes[2] == 2  # the node counts from its provisioning
    assert rep.pending.max() == 0  # bound to the booting node at once, not waiting for a GPU


def test_the_same_pod_on_a_pre_pulled_pool_skips_the_pull():
    # --prepull: the image is on every node when it comes up: ready = 330 + 10 + 90 = 430 s, 400 s after
    # creation (460 - 60); ceil(430 / 15) = 28.67 -> tick 29
    rep = simulate(counts((1, 2), (2, 60)), PH, TICK, pool=Pool(gpus_per_node=1, provision_seconds=300),
                   prepull=True)
    assert rep.timeline.ready[28] == 1 and rep.timeline.ready[29] == 2


def test_a_pod_on_a_node_that_holds_the_image_pays_scheduling_start_load_and_warm_up():
    # two GPUs per node, one pod at the start: the second pod (tick 2, 30 s) finds a free GPU on a node that
    # holds the image: 30 + 20 + 10 + 90 = 150 s -> tick 10 exactly; no node is added
    rep = simulate(counts((1, 2), (2, 30)), PH, TICK, pool=Pool(gpus_per_node=2))
    assert rep.timeline.ready[9] == 1 and rep.timeline.ready[10] == 2
    assert set(rep.nodes.tolist()) == {1}


def test_a_pod_waits_for_the_node_already_booting_and_shares_its_pull():
    # two GPUs per node, two pods fill the first node. Pod A at tick 2 (30 s) asks for a node (up at 330 s,
    # 2 GPUs); pod B at tick 10 (150 s) takes the booting node's second GPU instead of asking for another:
    # bind max(150 + 20, 330) = 330; A's pull (330 .. 390) is B's too: ready 390 + 10 + 90 = 490 -> tick 33
    # for both. B waited 490 - 150 = 340 s, 120 s less than a pod that needs its own node (460 s).
    rep = simulate(counts((2, 2), (3, 8), (4, 40)), PH, TICK, pool=Pool(gpus_per_node=2, provision_seconds=300))
    ready = rep.timeline.ready
    assert ready[32] == 2 and ready[33] == 4
    assert rep.nodes.max() == 2


def test_an_empty_node_goes_after_the_idle_time_and_gpu_node_hours_count_it():
    # one GPU per node, two pods on two nodes; at tick 20 (300 s) the HPA scales to 1: the newest pod goes,
    # its node is empty from 300 s and removed at the first tick with 600 s of idleness: 900 s = tick 60.
    # 80 ticks: 60 with 2 nodes + 20 with 1 = 140 node-ticks x 15 s = 2100 s = 0.58333 node-hours
    rep = simulate(counts((2, 20), (1, 60)), PH, TICK, pool=Pool(gpus_per_node=1, idle_seconds=600))
    assert rep.nodes[59] == 2 and rep.nodes[60] == 1
    assert rep.gpu_node_hours == pytest.approx(140 * 15 / 3600)


def test_a_placeholder_is_preempted_and_its_replacement_asks_for_the_node():
    # one GPU per node, 1 pod + 1 placeholder at the start: 2 nodes, both with the image. The pod created
    # at tick 2 (30 s) preempts the placeholder and binds at 30 + 20 = 50 s: ready 50 + 10 + 90 = 150 s,
    # tick 10 (not 460 s later); the evicted placeholder goes Pending and a third node is provisioned
    rep = simulate(counts((1, 2), (2, 40)), PH, TICK, pool=Pool(gpus_per_node=1), placeholders=1)
    assert rep.timeline.ready[9] == 1 and rep.timeline.ready[10] == 2
    assert rep.nodes[1] == 2 and rep.nodes[2] == 3
    # the placeholder is bound to that booting node from tick 2 on (so it asks for no further node)
    assert set(rep.placeholders.tolist()) == {1} and rep.nodes.max() == 3


def test_at_max_nodes_a_pod_stays_pending():
    rep = simulate(counts((1, 2), (2, 30)), PH, TICK, pool=Pool(gpus_per_node=1, max_nodes=1))
    assert rep.timeline.ready.max() == 1 and rep.pending[2:].min() == 1 and rep.nodes.max() == 1


def test_a_killed_pod_is_replaced_and_pays_the_start_on_its_warm_node():
    # 3 ready pods on one 4-GPU node; a kill at tick 10 (150 s): the ReplicaSet's replacement lands on the
    # freed GPU (image there): 150 + 20 + 10 + 90 = 270 s -> tick 18; replicas stay 3 throughout
    rep = simulate(counts((3, 30)), PH, TICK, pool=Pool(gpus_per_node=4), kills=[Kill(10)])
    ready = rep.timeline.ready
    assert ready[9] == 3 and ready[10] == 2 and ready[17] == 2 and ready[18] == 3
    assert set(rep.timeline.replicas.tolist()) == {3} and rep.kills == ((10, 1),)


def test_a_lost_node_takes_its_pods_and_they_need_a_new_node():
    # 2 pods on two 1-GPU nodes; losing one node at tick 4 (60 s): its pod is replaced, no free GPU: a node
    # up at 60 + 300 = 360 s, pull to 420, start 430, ready 520 s -> ceil(34.67) = tick 35
    rep = simulate(counts((2, 40)), PH, TICK, pool=Pool(gpus_per_node=1), kills=[Kill(4, node=True)])
    ready = rep.timeline.ready
    assert ready[3] == 2 and ready[4] == 1 and ready[34] == 1 and ready[35] == 2
    assert rep.nodes[3] == 2 and rep.nodes[4] == 2  # one lost, one provisioned in the same tick


def test_bad_knobs_are_named():
    with pytest.raises(ValueError, match="image_pull"):
        Phases(image_pull=-1)
    with pytest.raises(ValueError, match="gpus per node 0"):
        Pool(gpus_per_node=0)

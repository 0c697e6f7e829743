"""One workload of a fleet replayed tick by tick (``fleetloop``): its KEDA + HPA and its pods, with the GPUs apart.

``Member`` is what a workload brings (plain data): its scenario (demand on the tick grid), the values its own
policy answers at each of KEDA's calls (``hpa.value_ticks``: every family ``tune`` may select runs on the HPA), its
HPA, and what the budget reads: GPUs per replica, the value of a lost request, the budget it draws on.

``Pods`` replays it one tick at a time with the project's own rules, called as ``hpaloop.run_loop`` calls them:
``hpaloop.hpa_sync`` (the replica calculator, stabilisation, rate limits, bounds), ``hpaloop.keda_poll`` (activation,
minReplicaCount, cooldown, scale to zero) and ``hpaloop.scale_pods`` (the pods' stack, newest removed first). What is
new is the split of the Deployment's count (``want``, what the HPA sets) into pods that hold a GPU (``bound``:
starting or ready; their start-up begins when they bind) and Pending pods that hold nothing, as on a fixed pool of
GPUs: ``grow`` binds Pending pods when the fleet loop grants GPUs, and a scale-down takes Pending pods first
(Kubernetes' ReplicaSet deletion ranking: unscheduled, then not ready, then newest). Given every GPU it asks for at
once, a member replays exactly as ``keda.run_hpa`` (``tests/replay/test_fleet_loop.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..deadband import to_milli
from .hpa import Hpa, every_ticks
from .hpaloop import hpa_sync, keda_poll, numba_target, scale_pods
from .keda import behavior_args, milli_values, steady_start
from .scenario import Scenario, Timeline


@dataclass(frozen=True)
class Member:
    """One workload of the fleet (plain data)."""

    name: str
    scenario: Scenario  # its demand on the tick grid (t0 on the fleet's grid), qpsPerReplica, T_cold
    hpa: Hpa
    values: np.ndarray  # its own answer at each of KEDA's value calls (``hpa.value_ticks``)
    gpus_per_replica: float = 1.0
    value_per_request: float = 1.0  # of a lost request ($, or 1: requests per GPU decide)
    key: str = "*"  # the budget it draws on (``scaler.budget.ANY``: GPUs of every type)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.gpus_per_replica) and self.gpus_per_replica > 0):
            raise ValueError(f"member {self.name!r}: gpusPerReplica {self.gpus_per_replica!r}: accepted is a "
                             "number > 0")

    @property
    def minimum(self) -> int:
        """The replicas it keeps whatever the budget: the HPA's minReplicaCount."""
        return int(self.hpa.min_replicas)


class Pods:
    """A member's state during the fleet loop: the HPA's memory, KEDA's, and the pods (ticks are the member's own)."""

    def __init__(self, m: Member):
        self.m = m
        sc, hpa = m.scenario, m.hpa
        n, self.cold = sc.n, sc.cold_ticks
        self.poll_every = every_ticks(hpa.polling_seconds, sc.tick)
        self.sync_every = every_ticks(hpa.sync_seconds, sc.tick)
        self.value_every = self.poll_every if hpa.cached_metrics else self.sync_every
        self.target = float(to_milli(hpa.target)) if hpa.milli else float(hpa.target)
        self.rules = behavior_args(hpa, sc.tick)
        self.hpa_min, self.idle = max(hpa.min_replicas, 1), -1 if hpa.idle_replicas is None else int(hpa.idle_replicas)
        self.created = np.empty(max(hpa.max_replicas, hpa.min_replicas, 1) + 2, dtype=np.int64)
        self.born, self.died = np.zeros(n + 1, dtype=np.int64), np.zeros(n + 1, dtype=np.int64)
        self.ready_on, self.ready_off = np.zeros(n + self.cold + 2, dtype=np.int64), np.zeros(n + 1, dtype=np.int64)
        n_sync = n // self.sync_every + 2
        self.rec_t, self.rec_v = np.empty(n_sync, dtype=np.int64), np.empty(n_sync, dtype=np.int64)
        self.ev_t, self.ev_add, self.ev_rem = (np.empty(n_sync, dtype=np.int64) for _ in range(3))
        self.st = np.zeros(4, dtype=np.int64)
        periods = list(self.rules[6]) + list(self.rules[10])
        self.keep = max(self.rules[2], self.rules[3]) + (1.0 if hpa.legacy else 0.0)
        self.keep_ev = max(periods, default=0.0)
        self.up_starts, self.dn_starts = np.empty(len(self.rules[4]), np.int64), np.empty(len(self.rules[8]), np.int64)
        self.one = (np.zeros(1, np.bool_), np.array([self.target]), np.ones(1, np.bool_))  # fallback, target, per pod
        self.want = self.bound = 0  # the Deployment's count; pods holding a GPU (the newest of ``want``)
        self.last_active = -math.inf
        self.answer = 0.0  # the value KEDA got at its latest call
        self.own = 0.0  # the member's own plan at its latest call: its claim on the budget
        numba_target()

    # -- what the fleet loop reads ----------------------------------------------------------------------------
    def plan(self, j: int) -> float | None:
        """The member's own answer at its tick ``j`` when KEDA calls it then (None: no call at ``j``)."""
        if j % self.value_every:
            return None
        c = j // self.value_every
        self.own = float(self.m.values[c])
        return self.own

    def start(self, first_answer: float) -> int:
        """The steady start (``keda.steady_start``) the member would take alone: the replicas it asks for."""
        m = self.m
        seen = milli_values(np.array([first_answer]), m.hpa.milli)
        self.answer = first_answer
        if first_answer > m.hpa.activation_threshold:
            self.last_active = 0.0
        return steady_start(m.hpa, seen, np.array([self.target]), first_answer > m.hpa.activation_threshold)

    def begin(self, want: int, bound: int) -> None:
        """Tick 0: ``want`` pods of which ``bound`` hold a GPU, ready (``run_loop``'s initial pods)."""
        self.want = want
        for k in range(bound):
            self.created[k] = -(self.cold + 1)
        self.bound = bound
        self.born[0] = bound
        self.ready_on[0] = bound

    # -- one tick -----------------------------------------------------------------------------------------------
    def step(self, j: int, answer: float | None) -> None:
        """The HPA's sync and KEDA's poll at the member's tick ``j`` (``run_loop``'s order), ``answer`` the value
        KEDA got at this call (None: no call at ``j``). A scale-down takes Pending pods first."""
        m = self.m
        if answer is not None:
            self.answer = answer
        if self.want > 0 and j % self.sync_every == 0:
            self._set(j, self._sync(j))
        if j % self.poll_every == 0:
            active = self.answer > m.hpa.activation_threshold
            new, self.last_active = keda_poll(j, self.want, active, False, 0, 0, int(m.hpa.min_replicas), self.idle,
                                              m.hpa.cooldown_seconds / m.scenario.tick,
                                              m.hpa.initial_cooldown_seconds / m.scenario.tick, self.last_active)
            self._set(j, int(new))

    def _sync(self, j: int) -> int:
        """``hpa_sync`` on the latest answer as the HPA reads it (KEDA's milli-quantity)."""
        m = self.m
        seen = milli_values(np.array([self.answer]), m.hpa.milli)
        return int(hpa_sync(j, self.want, seen, *self.one, 0, 0, self.hpa_min, int(m.hpa.max_replicas), m.hpa.milli,
                            *self.rules, bool(m.hpa.legacy),
                            self.rec_t, self.rec_v, self.ev_t, self.ev_add, self.ev_rem, self.st, self.keep,
                            self.keep_ev, self.up_starts, self.dn_starts))

    def _set(self, j: int, new: int) -> None:
        """The Deployment scaled to ``new``: Pending pods removed first, then bound ones (newest first)."""
        self.want = new
        if new < self.bound:
            self.bound = scale_pods(j, self.bound, new, self.created, self.cold, self.born, self.died, self.ready_on,
                                    self.ready_off)

    @property
    def pending(self) -> int:
        return self.want - self.bound

    def grow(self, j: int, k: int) -> None:
        """``k`` Pending pods bind to GPUs at tick ``j``: their start-up begins."""
        if k > 0:
            self.bound = scale_pods(j, self.bound, self.bound + k, self.created, self.cold, self.born, self.died,
                                    self.ready_on, self.ready_off)

    def timeline(self, answers: np.ndarray) -> Timeline:
        """Pods holding a GPU (starting + ready: the cost) and ready pods per tick, and the value KEDA held."""
        n = self.m.scenario.n
        return Timeline(replicas=np.cumsum(self.born[:n] - self.died[:n]),
                        ready=np.cumsum(self.ready_on[:n] - self.ready_off[:n]), value=answers)

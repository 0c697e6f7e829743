"""KEDA's layer over the HPA: several metrics, activation, fallback, idle replicas; the loop's inputs as arrays.

``replay`` takes, per HPA metric, the value KEDA serves at each HPA sync (or, for a
``useCachedMetrics`` trigger, at each poll; NaN: that call failed) and KEDA's IsActive
per poll, and runs the compiled loop
(``hpaloop.run_loop``). Pure: arrays in, a ``Timeline`` out.

Fallback (KEDA's ``fallback``): a metric's consecutive failed polls are
counted; once they are more than ``failureThreshold`` (KEDA's strict ``>``),
KEDA serves ``target x replicas`` for that metric (AverageValue metrics only,
as KEDA), ``replicas`` from ``behavior``: static (``fallback.replicas``),
currentReplicas, currentReplicasIfHigher/IfLower (against the count at the
HPA's sync). While a fallback is in effect and no trigger is active, KEDA's
own loop also sets that count at each poll (``doFallbackScaling``). Failures are
counted per call: at each HPA sync for a live metric, at each poll for a cached one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..deadband import to_milli, to_milli_array
from .hpa import PERCENT, PODS, SELECT, Hpa, ScalingRules, every_ticks, value_at_polls, value_ticks, window_ticks
from .hpaloop import loop_state, numba_target, run_loop, run_span
from .scenario import EPS, Scenario, Timeline

FALLBACK_BEHAVIORS = ("static", "currentReplicas", "currentReplicasIfHigher", "currentReplicasIfLower")


@dataclass(frozen=True)
class Metric:
    """One external metric of the HPA and its target: KEDA's value at each HPA sync when ``live`` (the trigger's
    ``useCachedMetrics`` is false, KEDA's default: its adapter asks the scaler on every HPA request), else at each
    poll (the value KEDA's polling loop cached). NaN: that call failed."""

    values: np.ndarray
    target: float
    per_pod: bool = True  # AverageValue; False: Value
    live: bool = False
    unseen: np.ndarray | None = None  # calls where KEDA could not even get the metric's spec (an unreachable
    # external scaler: GetMetricSpec fails first): NaN for the HPA, and no failure counted for the fallback


@dataclass(frozen=True)
class Fallback:
    """KEDA's ``spec.fallback``."""

    failure_threshold: int
    replicas: int
    behavior: str = "static"

    def __post_init__(self) -> None:
        if self.behavior not in FALLBACK_BEHAVIORS:
            raise ValueError(f"fallback.behavior {self.behavior!r}: accepted are {', '.join(FALLBACK_BEHAVIORS)}")
        if self.failure_threshold < 0 or self.replicas < 0:
            raise ValueError("fallback.failureThreshold and fallback.replicas must be >= 0")


def milli_values(values: np.ndarray, milli: bool) -> np.ndarray:
    """The values as the HPA reads them: KEDA's milli-quantities (``deadband.to_milli_array``), or as they are;
    NaN stays NaN."""
    v = np.asarray(values, dtype=np.float64)
    if not milli:
        return v.copy()
    out = to_milli_array(v)
    out[np.isnan(v)] = np.nan
    return out


def failing_beyond(failed: np.ndarray, threshold: int, unseen: np.ndarray | None = None) -> np.ndarray:
    """Per call: more than ``threshold`` consecutive failed calls up to and including this one. An ``unseen``
    call (no metric spec: nothing observed) neither counts nor resets the streak, and serves no fallback."""
    failed = np.asarray(failed, dtype=bool)
    skip = np.zeros(failed.shape[0], dtype=bool) if unseen is None else np.asarray(unseen, dtype=bool)
    run = np.zeros(failed.shape[0], dtype=np.int64)
    c = 0
    for k, f in enumerate(failed):
        if skip[k]:
            run[k] = 0
            continue
        c = c + 1 if f else 0
        run[k] = c
    return run > threshold


def rules_arrays(r: ScalingRules, tick: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """One direction's policies as the compiled loop takes them: kinds, values, periods in ticks, selectPolicy."""
    kinds = np.array([PODS if p.kind == "Pods" else PERCENT for p in r.policies], dtype=np.int64)
    values = np.array([p.value for p in r.policies], dtype=np.float64)
    periods = np.array([window_ticks(p.period_seconds, tick) for p in r.policies], dtype=np.float64)
    return kinds, values, periods, SELECT[r.select]


def behavior_args(hpa: Hpa, tick: float) -> tuple:
    """The HPA's ``behavior`` as the compiled rules take it (``hpaloop.hpa_sync``, ``run_loop``): the tolerances up
    and down, the stabilisation windows in ticks (legacy: the downscale window, a record inside when ``age <=``), and
    each direction's policies (kinds, values, periods, selectPolicy)."""
    up, down = hpa.up_rules(), hpa.down_rules()
    down_w = (hpa.scale_down_window_seconds / tick + EPS) if hpa.legacy else window_ticks(down.window_seconds, tick)
    return (up.tolerance, down.tolerance, window_ticks(up.window_seconds, tick), down_w,
            *rules_arrays(up, tick), *rules_arrays(down, tick))


def steady_start(hpa: Hpa, first: np.ndarray, targets: np.ndarray, active: bool) -> int:
    """The replicas a replay starts with, all ready: inactive with minReplicaCount 0 or an idle count -> that;
    else the largest count the first values (as the HPA reads them; NaN: unreadable) ask for, within the bounds."""
    idle = -1 if hpa.idle_replicas is None else int(hpa.idle_replicas)
    if not active and (hpa.min_replicas == 0 or idle >= 0):
        return max(idle, 0)
    hpa_min = max(hpa.min_replicas, 1)
    asks = [math.ceil(first[j] / targets[j] - (0 if hpa.milli else EPS)) for j in range(len(first))
            if np.isfinite(first[j])]
    return min(max(max(asks, default=hpa_min), hpa_min), hpa.max_replicas)


@dataclass
class Loop:
    """The compiled loop's inputs as ``keda.replay`` prepares them (``inputs``): ``run`` replays every tick at once;
    the closed loop (``closedloop``) writes ``vals``/``active`` as it decides and runs ``span`` by ``span``."""

    n: int
    poll_every: int
    sync_every: int
    polls: int
    syncs: int
    raw: np.ndarray  # (metrics, calls) the values as KEDA serves them (NaN: failed)
    vals: np.ndarray  # the same as the HPA reads them (milli-quantities)
    active: np.ndarray  # IsActive per poll
    args: tuple  # run_span's arguments after ``i0, i1`` up to the state
    initial: int

    def run(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``born, died, ready_on, ready_off`` per tick (``hpaloop.run_loop``)."""
        numba_target()
        (cold, pe, se, vals, per_sync, targets, per_pod, fb_on, fb_mode, fb_replicas, act, fb_scale, kmin, idle,
         hpa_min, hpa_max, cooldown, init_cd, milli, tu, td, uw, dw, uk, uv, up_, us, dk, dv, dp, ds, legacy) = self.args
        return run_loop(self.n, cold, pe, se, vals, per_sync, targets, per_pod, fb_on, fb_mode, fb_replicas, act,
                        fb_scale, kmin, idle, hpa_min, hpa_max, cooldown, init_cd, milli, tu, td, uw, dw, uk, uv,
                        up_, us, dk, dv, dp, ds, self.initial, legacy)

    def state(self) -> tuple:
        """A fresh state for ``span`` (``hpaloop.loop_state``)."""
        numba_target()
        a = self.args
        return loop_state(self.n, a[0], self.sync_every, self.initial, a[15], a[12], a[9], a[13], len(a[23]),
                          len(a[27]), self.vals.shape[0], bool(self.active[0]))

    def span(self, i0: int, i1: int, state: tuple) -> None:
        """Ticks ``[i0, i1)`` on ``state`` (in place): they read ``vals`` and ``active`` as they are now."""
        run_span(i0, i1, *self.args, *state)

    def timeline(self, born: np.ndarray, died: np.ndarray, ready_on: np.ndarray, ready_off: np.ndarray,
                 held: np.ndarray | None = None) -> Timeline:
        n = self.n
        replicas = np.cumsum(born[:n] - died[:n])
        ready = np.cumsum(ready_on[:n] - ready_off[:n])
        if held is not None:
            value = np.repeat(np.asarray(held, dtype=np.float64)[:self.polls], self.poll_every)[:n]
        elif bool(self.args[4][0]):  # the first metric is live: its value per sync
            value = np.repeat(self.raw[0, :self.syncs], self.sync_every)[:n]
        else:
            value = np.repeat(self.raw[0, :self.polls], self.poll_every)[:n]
        return Timeline(replicas=replicas, ready=ready, value=value)


def replay(sc: Scenario, hpa: Hpa, metrics: Sequence[Metric], active: np.ndarray, *,
           fallback: Fallback | None = None, initial_replicas: int | None = None,
           held: np.ndarray | None = None) -> Timeline:
    """KEDA + HPA over the scenario with these metrics and KEDA's IsActive per poll.

    The initial state is steady: ``initial_replicas`` (default: inactive with
    minReplicaCount 0 or an idle count -> that; else the largest count the
    first values ask for, within the bounds), all ready. ``held``: the value
    per poll the timeline shows (default: the first metric's).
    """
    lp = inputs(sc, hpa, metrics, active, fallback=fallback, initial_replicas=initial_replicas)
    born, died, ready_on, ready_off = lp.run()
    return lp.timeline(born, died, ready_on, ready_off, held=held)


def inputs(sc: Scenario, hpa: Hpa, metrics: Sequence[Metric], active: np.ndarray, *,
           fallback: Fallback | None = None, initial_replicas: int | None = None) -> Loop:
    """The compiled loop's inputs for ``replay`` (its arguments)."""
    n, tick = sc.n, sc.tick
    if not metrics:
        raise ValueError("a replay needs at least one metric")
    poll_every = every_ticks(hpa.polling_seconds, tick)
    sync_every = every_ticks(hpa.sync_seconds, tick)
    polls = (n + poll_every - 1) // poll_every
    syncs = (n + sync_every - 1) // sync_every
    milli = hpa.milli
    width = max(polls, syncs)
    raw = np.full((len(metrics), width), np.nan)
    for j, mt in enumerate(metrics):
        need = syncs if mt.live else polls
        v = np.asarray(mt.values, dtype=np.float64)[:need]
        if v.shape[0] < need:
            raise ValueError(f"need {need} {'sync' if mt.live else 'poll'} values for {n} ticks, got {v.shape[0]}")
        raw[j, :need] = v
    vals = milli_values(raw, milli)
    targets = np.array([to_milli(mt.target) if milli else mt.target for mt in metrics], dtype=np.float64)
    if not (targets > 0).all():
        raise ValueError(f"a target is 0 as a milli-quantity: {[mt.target for mt in metrics]}")
    per_pod = np.array([mt.per_pod for mt in metrics], dtype=np.bool_)
    act = np.array(active, dtype=np.bool_)[:polls]
    hpa_min = max(hpa.min_replicas, 1)
    idle = -1 if hpa.idle_replicas is None else int(hpa.idle_replicas)
    fb_on = np.zeros(vals.shape, dtype=np.bool_)
    fb_mode, fb_replicas = 0, 0
    if fallback is not None:
        fb_mode, fb_replicas = FALLBACK_BEHAVIORS.index(fallback.behavior), int(fallback.replicas)
        for j, mt in enumerate(metrics):
            if mt.per_pod:  # KEDA: fallback only for AverageValue metrics
                unseen = None
                if mt.unseen is not None:
                    unseen = np.zeros(width, dtype=bool)
                    unseen[:len(mt.unseen)] = np.asarray(mt.unseen, dtype=bool)[:width]
                fb_on[j] = failing_beyond(np.isnan(raw[j]), fallback.failure_threshold, unseen)
    fb_scale = np.zeros(polls, dtype=np.bool_)  # at each poll: a metric in fallback at its latest observation
    for j, mt in enumerate(metrics):
        at = (np.arange(polls) * poll_every) // sync_every if mt.live else np.arange(polls)
        fb_scale |= fb_on[j, at]
    if initial_replicas is None:
        initial_replicas = steady_start(hpa, vals[:, 0], targets, bool(act[0]))
    per_sync = np.array([mt.live for mt in metrics], dtype=np.bool_)
    args = (sc.cold_ticks, poll_every, sync_every, vals, per_sync, targets, per_pod, fb_on, fb_mode, fb_replicas, act,
            fb_scale, int(hpa.min_replicas), idle, hpa_min, int(hpa.max_replicas), hpa.cooldown_seconds / tick,
            hpa.initial_cooldown_seconds / tick, milli, *behavior_args(hpa, tick), bool(hpa.legacy))
    return Loop(n, poll_every, sync_every, polls, syncs, raw, vals, act, args, int(initial_replicas))


def run_hpa(sc: Scenario, values: np.ndarray, hpa: Hpa, *, initial_replicas: int | None = None) -> Timeline:
    """Replay KEDA + HPA over the scenario with the value the scaler answers at each ``value_ticks`` tick (one
    AverageValue metric; IsActive = value > activationThreshold at each poll).

    ``values[k]`` is the value at the k-th of ``value_ticks``. The initial state is steady:
    ``initial_replicas`` (default: what the first value asks for, within the bounds), all ready.
    """
    values = np.asarray(values, dtype=np.float64)
    need = len(value_ticks(sc.n, hpa, sc.tick))
    if values.shape[0] < need:
        raise ValueError(f"need {need} values for {sc.n} ticks, got {values.shape[0]}")
    active = values[value_at_polls(sc.n, hpa, sc.tick)] > hpa.activation_threshold
    return replay(sc, hpa, [Metric(values[:need], hpa.target, live=not hpa.cached_metrics)], active,
                  initial_replicas=initial_replicas)

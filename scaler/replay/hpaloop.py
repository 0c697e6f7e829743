"""The sequential KEDA + HPA loop over the ticks, compiled: the HPA's rules (``hparules``) composed per sync.

Everything arrives as arrays and numbers (``keda.replay`` prepares them), so
numba compiles the whole loop; the only state is the live pods (a stack of
creation ticks), the HPA's recommendation records and its scale events (both
in arrays read through a moving start index: nothing is ever copied). Per
tick ``i``, in Kubernetes' and KEDA's order:

1. an HPA sync (every ``sync_every`` ticks, only while pods exist; ``hpa_sync``):
   outside the bounds the count is clamped; else each metric's recommendation (the
   value KEDA asked for at this sync, with useCachedMetrics the one its last poll
   cached, or the fallback value), the largest wins; the sync is skipped
   when every metric is unreadable or an unreadable one would let the others
   scale down; then stabilisation, the rate limits of the direction, the bounds;
2. at a KEDA poll (every ``poll_every`` ticks), KEDA's ``RequestScale``:
   active -> at least minReplicaCount (1 from zero or idle); inactive with a
   fallback in effect -> the fallback count; inactive and above idle/zero ->
   idle (or 0) once ``cooldown`` has passed since the last active poll (and
   ``initial_cooldown`` since the start); inactive below minReplicaCount -> minReplicaCount (``keda_poll``).

The fleet's joint replay under a GPU budget (``fleetmember``) calls the same ``hpa_sync``, ``keda_poll`` and
``scale_pods`` one tick at a time.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
from .hparules import (clamp, compiled, legacy_limit, legacy_stabilize, period_start_events, recommend,
                       scale_down_rate_limit, scale_up_rate_limit, stabilize_records)


def _drop_stale_cache() -> None:
    """numba's disk cache of this module's functions holds the rules of ``hparules`` compiled into them, and numba
    checks only this file's own stamp: a change to ``hparules.py`` alone would leave the loop running the old rules
    (seen during the drill's Percent fix). So this module's cache files go when ``hparules.py`` changed since they
    were written (a digest kept beside them). Best effort: an unwritable place changes nothing."""
    here = Path(__file__).resolve()
    cache = here.parent / "__pycache__"
    try:
        digest = hashlib.sha256((here.parent / "hparules.py").read_bytes()).hexdigest()
        stamp = cache / "hpaloop.rules-digest"
        if stamp.exists() and stamp.read_text() == digest:
            return
        for f in cache.glob("hpaloop.*.nb[ic]"):
            f.unlink()
        cache.mkdir(exist_ok=True)
        stamp.write_text(digest)
    except OSError:
        pass


_drop_stale_cache()


_target_ready = False


def numba_target() -> None:
    """numba's CPU target set up once per process, before the first compiled call, without SciPy's linear algebra.

    numba sets its target up at the first call of a compiled function (from the disk cache or not): it loads the
    implementations of everything it can compile, and its ``arraymath`` imports ``scipy.linalg`` only to find out
    whether ``np.dot`` and friends may be compiled. The HPA loop uses no linear algebra, and importing
    ``scipy.linalg`` is about half of that set-up (0.3-2 s of every process that replays, more on a loaded
    machine), so while numba looks, ``scipy.linalg.cython_blas`` is marked absent (numba then leaves BLAS
    functions uncompilable in this process). ``scipy.linalg`` stays importable afterwards; a process that
    imported it before keeps numba's BLAS support."""
    global _target_ready
    if _target_ready:
        return
    import sys

    try:
        from numba.core.registry import cpu_target
    except ImportError:  # without the `fast` extra the loop runs interpreted
        _target_ready = True
        return

    name = "scipy.linalg.cython_blas"
    block = name not in sys.modules
    if block:
        sys.modules[name] = None  # type: ignore[assignment]  # "import scipy.linalg.cython_blas" raises ImportError
    try:
        cpu_target.target_context.refresh()
    finally:
        if block and name in sys.modules and sys.modules[name] is None:
            del sys.modules[name]
    _target_ready = True


@compiled
def fallback_count(mode, replicas, current):
    """KEDA's ``fallback.behavior``: 0 static, 1 currentReplicas, 2 currentReplicasIfHigher, 3 ...IfLower."""
    if mode == 1:
        return current
    if mode == 2:
        return max(current, replicas)
    if mode == 3:
        return min(current, replicas)
    return replicas


@compiled
def _set_count(i, new, created, cnt, cold, born, died, ready_on, ready_off):
    """The live pods' stack scaled to ``new`` at tick ``i``; removals take the newest first (not-ready pods go
    first, Kubernetes' ReplicaSet deletion ranking) and undo their readiness."""
    if new > cnt:
        while cnt < new:
            created[cnt] = i
            cnt += 1
        return cnt
    while cnt > new:
        cnt -= 1
        c = created[cnt]
        died[i] += 1
        if c + cold <= i:
            ready_off[i] += 1
        else:
            ready_on[c + cold] -= 1
    return cnt


@compiled
def keda_poll(i, cnt, active, fb_scale, fb_mode, fb_replicas, kmin, idle, cooldown, init_cooldown, last_active):
    """KEDA's ``RequestScale`` at a poll at tick ``i`` with ``cnt`` replicas: ``(the count it sets, the tick of the
    last active poll)``. Active: at least minReplicaCount (1 from zero); inactive with a fallback in effect: the
    fallback count; inactive above idle/zero: idle (or minReplicaCount) once ``cooldown`` ticks passed since the last
    active poll (and ``init_cooldown`` since the start); inactive below minReplicaCount: minReplicaCount."""
    if active:
        if cnt < kmin:
            return kmin, float(i)
        if cnt == 0:
            return 1, float(i)  # activation 0 -> 1
        return cnt, float(i)
    if fb_scale and fb_replicas != 0:
        return fallback_count(fb_mode, fb_replicas, cnt), last_active
    if (idle >= 0 and cnt > idle) or (cnt > 0 and kmin == 0):
        if i - last_active > cooldown and (init_cooldown <= 0 or i > init_cooldown):
            return (idle if idle >= 0 else kmin), last_active  # to zero (or idle) after cooldownPeriod
        return cnt, last_active
    if cnt < kmin and idle < 0:
        return kmin, last_active
    return cnt, last_active


@compiled
def scale_pods(i, cur, new, created, cold, born, died, ready_on, ready_off):
    """``_set_count`` with the bookkeeping of additions (born, ready_on)."""
    if new > cur:
        born[i] += new - cur
        ready_on[i + cold] += new - cur
    return _set_count(i, new, created, cur, cold, born, died, ready_on, ready_off)


@compiled
def hpa_sync(i, cur, vm, fb, targets, per_pod, fb_mode, fb_replicas, hpa_min, hpa_max, milli, tol_up, tol_down,
             up_w, down_w, up_kinds, up_values, up_periods, up_select, dn_kinds, dn_values, dn_periods, dn_select,
             legacy, rec_t, rec_v, ev_t, ev_add, ev_rem, st, keep, keep_ev, up_starts, dn_starts):
    """One HPA reconcile at tick ``i`` with ``cur`` >= 1 replicas: the count it sets (``cur``: unchanged).

    ``vm[j]``: metric ``j``'s value as the HPA reads it (NaN: it cannot); ``fb[j]``: KEDA serves the fallback
    value for it instead. The HPA's memory is kept in the arrays: its recommendations ``rec_t/rec_v`` and its
    scale events ``ev_t/ev_add/ev_rem``, live between the indices ``st = [rec_lo, rec_hi, ev_lo, ev_hi]``
    (updated in place). Ticks are any unit the windows and periods are in (``hpa.window_ticks``).
    """
    if cur > hpa_max or cur < hpa_min:  # outside the bounds the calculator is skipped
        new = clamp(cur, hpa_min, hpa_max)[0]
    else:
        m = vm.shape[0]
        rec = -1
        invalid = 0
        for j in range(m):
            v = vm[j]
            if fb[j]:
                v = targets[j] * fallback_count(fb_mode, fb_replicas, cur)
            if v != v:
                invalid += 1
                continue
            r = recommend(v, targets[j], cur, tol_up, tol_down, milli, per_pod[j])[0]
            if r > rec:
                rec = r
        if invalid >= m or (invalid > 0 and rec < cur):
            return cur
        if st[1] == 0:  # maybeInitScaleDownStabilizationWindow
            rec_t[0] = i
            rec_v[0] = cur
            st[1] = 1
        while st[0] < st[1] and i - rec_t[st[0]] >= keep:
            st[0] += 1
        if legacy:  # no behavior: the controller's legacy normalisation
            new = legacy_stabilize(rec, rec_t, rec_v, st[0], st[1], i, down_w)
            new = legacy_limit(new, cur, hpa_min, hpa_max)[0]
        elif rec != cur:  # (rec == cur: the stabilised value is always cur)
            new = stabilize_records(rec, cur, rec_t, rec_v, st[0], st[1], i, up_w, down_w)[0]
            if new != cur:
                while st[2] < st[3] and i - ev_t[st[2]] >= keep_ev:
                    st[2] += 1
                if new > cur:
                    for p in range(len(up_kinds)):
                        up_starts[p] = period_start_events(cur, ev_t, ev_add, ev_rem, st[2], st[3], i, up_periods[p])
                    new = scale_up_rate_limit(new, cur, up_starts, up_kinds, up_values, up_select)[0]
                else:
                    for p in range(len(dn_kinds)):
                        dn_starts[p] = period_start_events(cur, ev_t, ev_add, ev_rem, st[2], st[3], i, dn_periods[p])
                    new = scale_down_rate_limit(new, cur, dn_starts, dn_kinds, dn_values, dn_select)[0]
                new = clamp(new, hpa_min, hpa_max)[0]
        else:
            new = cur
        rec_t[st[1]] = i
        rec_v[st[1]] = rec
        st[1] += 1
    if new != cur:
        ev_t[st[3]] = i
        ev_add[st[3]] = max(new - cur, 0)
        ev_rem[st[3]] = max(cur - new, 0)
        st[3] += 1
    return new


@compiled
def loop_state(n, cold, sync_every, initial, hpa_max, kmin, fb_replicas, idle, n_up, n_dn, m, active0):
    """The loop's state before tick 0: ``initial`` pods, all ready; every array ``run_span`` writes."""
    cap = max(initial, hpa_max, kmin, fb_replicas, idle, 1) + 1
    created = np.empty(cap, dtype=np.int64)
    born = np.zeros(n + 1, dtype=np.int64)
    died = np.zeros(n + 1, dtype=np.int64)
    ready_on = np.zeros(n + cold + 2, dtype=np.int64)
    ready_off = np.zeros(n + 1, dtype=np.int64)
    for c in range(initial):
        created[c] = -(cold + 1)
    born[0] = initial
    ready_on[0] = initial
    n_sync = n // sync_every + 2
    rec_t = np.empty(n_sync, dtype=np.int64)
    rec_v = np.empty(n_sync, dtype=np.int64)
    ev_t = np.empty(n_sync, dtype=np.int64)
    ev_add = np.empty(n_sync, dtype=np.int64)
    ev_rem = np.empty(n_sync, dtype=np.int64)
    st = np.zeros(5, dtype=np.int64)  # rec_lo, rec_hi, ev_lo, ev_hi, the live pods
    st[4] = initial
    lst = np.zeros(1, dtype=np.float64)  # the last active tick
    lst[0] = 0.0 if active0 else -math.inf
    return (created, born, died, ready_on, ready_off, rec_t, rec_v, ev_t, ev_add, ev_rem, st,
            np.empty(n_up, dtype=np.int64), np.empty(n_dn, dtype=np.int64), np.empty(m, dtype=np.float64),
            np.zeros(m, dtype=np.bool_), lst)


@compiled
def run_span(i0, i1, cold, poll_every, sync_every, vals, per_sync, targets, per_pod, fb_on, fb_mode, fb_replicas,
             active, fb_scale, kmin, idle, hpa_min, hpa_max, cooldown, init_cooldown, milli, tol_up, tol_down,
             up_w, down_w, up_kinds, up_values, up_periods, up_select, dn_kinds, dn_values, dn_periods, dn_select,
             legacy, created, born, died, ready_on, ready_off, rec_t, rec_v, ev_t, ev_add, ev_rem, st, up_starts,
             dn_starts, vm, fbm, lst):
    """Ticks ``[i0, i1)`` of the loop on its state (``loop_state``; updated in place): ``run_loop`` runs them all
    at once, the closed loop (``closedloop``) one value at a time, each value written into ``vals`` and
    ``active`` before the ticks that read it."""
    m = vals.shape[0]
    keep = max(up_w, down_w) + (1.0 if legacy else 0.0)
    keep_ev = 0.0
    for p in up_periods:
        keep_ev = max(keep_ev, p)
    for p in dn_periods:
        keep_ev = max(keep_ev, p)
    cnt = st[4]
    last_active = lst[0]
    for i in range(i0, i1):
        k = i // poll_every
        if cnt > 0 and i % sync_every == 0:  # one HPA reconcile
            for j in range(m):  # live: the value KEDA asks for at this sync; cached: the one its last poll cached
                c = i // sync_every if per_sync[j] else k
                vm[j] = vals[j, c]
                fbm[j] = fb_on[j, c]
            new = hpa_sync(i, cnt, vm, fbm, targets, per_pod, fb_mode, fb_replicas, hpa_min,
                           hpa_max, milli, tol_up, tol_down, up_w, down_w, up_kinds, up_values, up_periods,
                           up_select, dn_kinds, dn_values, dn_periods, dn_select, legacy, rec_t, rec_v, ev_t,
                           ev_add, ev_rem, st, keep, keep_ev, up_starts, dn_starts)
            if new != cnt:
                cnt = scale_pods(i, cnt, new, created, cold, born, died, ready_on, ready_off)
        if i % poll_every == 0:  # KEDA acts on IsActive after the HPA's sync of the same tick
            new, last_active = keda_poll(i, cnt, active[k], fb_scale[k], fb_mode, fb_replicas, kmin, idle, cooldown,
                                         init_cooldown, last_active)
            if new != cnt:
                cnt = scale_pods(i, cnt, new, created, cold, born, died, ready_on, ready_off)
    st[4] = cnt
    lst[0] = last_active


@compiled
def run_loop(n, cold, poll_every, sync_every, vals, per_sync, targets, per_pod, fb_on, fb_mode, fb_replicas,
             active, fb_scale, kmin, idle, hpa_min, hpa_max, cooldown, init_cooldown, milli, tol_up, tol_down,
             up_w, down_w, up_kinds, up_values, up_periods, up_select, dn_kinds, dn_values, dn_periods, dn_select,
             initial, legacy):
    """Replay; returns ``born, died, ready_on, ready_off`` per tick (see the module docstring).

    ``vals[j, c]``: metric ``j`` as the HPA reads it (NaN: it cannot) at HPA sync ``c`` when
    ``per_sync[j]`` (KEDA asks the scaler at every sync: ``useCachedMetrics`` false), else at KEDA poll ``c``
    (the value its polling loop cached); ``fb_on[j, c]``: KEDA serves the fallback value for it instead;
    ``active[k]``, ``fb_scale[k]``: KEDA's IsActive and fallback-in-effect at
    poll ``k``. Windows and periods in ticks (``hpa.window_ticks``); ``idle`` -1: none. ``legacy``: no
    ``behavior`` (``down_w`` is then the downscale window in ticks, a record inside when ``age <= down_w``).
    """
    (created, born, died, ready_on, ready_off, rec_t, rec_v, ev_t, ev_add, ev_rem, st, up_starts, dn_starts, vm,
     fbm, lst) = loop_state(n, cold, sync_every, initial, hpa_max, kmin, fb_replicas, idle, len(up_kinds),
                            len(dn_kinds), vals.shape[0], active[0])
    run_span(0, n, cold, poll_every, sync_every, vals, per_sync, targets, per_pod, fb_on, fb_mode, fb_replicas,
             active, fb_scale, kmin, idle, hpa_min, hpa_max, cooldown, init_cooldown, milli, tol_up, tol_down,
             up_w, down_w, up_kinds, up_values, up_periods, up_select, dn_kinds, dn_values, dn_periods, dn_select,
             legacy, created, born, died, ready_on, ready_off, rec_t, rec_v, ev_t, ev_add, ev_rem, st, up_starts,
             dn_starts, vm, fbm, lst)
    return born, died, ready_on, ready_off

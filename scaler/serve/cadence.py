"""A trigger's timings: how often it is refreshed, when its observation is late or stale, when it is retired.

Pure functions of a ``Workload`` and the ``RegistryConfig``, read by the scheduler tick (``Registry.tick``:
``triage``) and by the decision (``answer``: ``late_after``, ``stale_after``). The refresh interval is the
trigger's ``refreshInterval``, else KEDA's polling cadence learned from its calls (``Workload.learn_poll``),
bounded by ``refresh_seconds`` and ``max_refresh_seconds``; every other timing follows from it or from the
configuration. All of them are ages on the registry's monotonic clock.
"""

from __future__ import annotations

import math
from typing import Iterable

from .registryconfig import RegistryConfig
from .workload import Workload


def refresh_interval(wl: Workload, config: RegistryConfig) -> float:
    """refreshInterval, else KEDA's learned polling cadence (at least the floor ``refresh_seconds``)."""
    if wl.spec.refresh_seconds is not None:
        return wl.spec.refresh_seconds
    learned = wl.poll_interval if wl.poll_interval is not None else config.refresh_seconds
    return max(config.refresh_seconds, min(learned, config.max_refresh_seconds))


def late_after(wl: Workload, config: RegistryConfig) -> float:
    """An observation older than this was not renewed on time: served with reason prometheus_stale."""
    return 2 * refresh_interval(wl, config) + wl.spec.prometheus.timeout_seconds + 2.0


def stale_after(wl: Workload, config: RegistryConfig) -> float:
    """An observation older than this is not served (UNAVAILABLE): ``stale_seconds``, or 4 declared
    ``refreshInterval`` when that is longer (a refresh every 10 min must not be UNAVAILABLE half the time)."""
    declared = wl.spec.refresh_seconds
    return config.stale_seconds if declared is None else max(config.stale_seconds, 4 * declared)


def retire_after(wl: Workload, config: RegistryConfig) -> float:
    """Silence after which a trigger whose ScaledObject has a more recently polled one (an edit) is retired:
    three of its own learned polls, at least ``retire_seconds``; with no cadence learned yet, ``forget_seconds``
    (issue 40, item 6: a sibling polled by another caller never makes a trigger silent)."""
    if wl.poll_interval is None:
        return config.forget_seconds
    return min(config.forget_seconds, max(config.retire_seconds, 3 * wl.poll_interval))


def triage(workloads: Iterable[Workload], now: float,
           config: RegistryConfig) -> tuple[list[tuple[Workload, str]], list[Workload], list[Workload]]:
    """A scheduler tick's look at the tracked triggers: those to forget (and why: not polled for
    ``forget_seconds``, or for ``retire_after`` while another trigger of its ScaledObject is), those kept, and of
    those the ones due for a refresh (none in flight or queued, the last attempt a refresh interval ago), oldest
    attempt first."""
    workloads = list(workloads)
    newest: dict[tuple[str, str], float] = {}  # each ScaledObject's most recent poll, over its triggers
    for wl in workloads:
        so = (wl.namespace, wl.name)
        newest[so] = max(newest.get(so, -math.inf), wl.last_polled)
    gone, kept, due = [], [], []
    for wl in workloads:
        silent = now - wl.last_polled
        if silent > config.forget_seconds:
            gone.append((wl, f"not polled for {silent:.0f}s"))
            continue
        if silent > retire_after(wl, config) and newest[(wl.namespace, wl.name)] > wl.last_polled + 1.0:
            gone.append((wl, f"not polled for {silent:.0f}s while another trigger of its ScaledObject is: "
                             "its metadata changed"))
            continue
        kept.append(wl)
        if not wl.refreshing and not wl.queued and (wl.attempted_at is None
                                                    or now - wl.attempted_at >= refresh_interval(wl, config)):
            due.append(wl)
    # oldest first; a host:port or namespace at its limit waits (its own hung requests hold no one else)
    due.sort(key=lambda w: w.attempted_at or 0.0)
    return gone, kept, due

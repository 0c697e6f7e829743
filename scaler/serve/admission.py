"""Room for a new trigger (issue 40, item 7): the cap, the namespace's quota, and which trigger goes for a new one.

The cap (``max_tracked``) and the quota per namespace (``max_tracked_per_namespace``) used to be first come, first
kept: one caller filled the cap in 2.7 s and every new ScaledObject, and every edit, was RESOURCE_EXHAUSTED. Now a
trigger polled fewer than ``PROVEN_POLLS`` times (a caller's one-shot: KEDA polls every trigger every
pollingInterval) is evicted for a new one, the least recently polled first (within the namespace at its quota, or
anywhere at the cap); only when every tracked trigger there is in use is the new one refused.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from .registryconfig import RegistryConfig
from .workload import Workload

PROVEN_POLLS = 3  # a trigger polled this often is KEDA's (kept at the cap); fewer: evicted first for a new one


def no_room(workloads: Mapping[tuple, Workload], namespace: str, config: RegistryConfig) -> str | None:
    """Why a new trigger of ``namespace`` does not fit (None: it fits)."""
    if len(workloads) >= config.max_tracked:
        return f"this scaler tracks {len(workloads)} triggers, its limit (MAX_TRACKED {config.max_tracked})"
    n = sum(1 for k in workloads if k[0] == namespace)
    if n >= config.max_tracked_per_namespace:
        return (f"namespace {namespace} has {n} triggers here, its quota (--max-triggers-per-namespace "
                f"{config.max_tracked_per_namespace})")
    return None


def evictable(workloads: Iterable[Workload], namespace: str, name: str, why: str) -> Workload | None:
    """The trigger to evict for a new one of ``namespace/name`` that found no room (``why``): the least recently
    polled unproven one, of the namespace at its quota or of any at the cap; never one of the same ScaledObject."""
    scope = namespace if why.startswith("namespace") else None
    unproven = [w for w in workloads if w.polls < PROVEN_POLLS and (scope is None or w.namespace == scope)
                and (w.namespace, w.name) != (namespace, name)]
    return min(unproven, key=lambda w: w.last_polled) if unproven else None

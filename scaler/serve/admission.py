"""Room for a new trigger (issue 40, item 7): the cap, the namespace's quota, and which trigger goes for a new one.

The cap (``max_tracked``) and the quota per namespace (``max_tracked_per_namespace``) used to be first come, first
kept: one caller filled the cap in 2.7 s and every new ScaledObject, and every edit, was RESOURCE_EXHAUSTED. Now a
trigger polled fewer than ``PROVEN_POLLS`` times (a caller's one-shot: KEDA polls every trigger every
pollingInterval) is evicted for a new one, the least recently polled first (within the namespace at its quota, or
anywhere at the cap); only when every tracked trigger there is in use is the new one refused.
"""

from __future__ import annotations

from collections import OrderedDict

from .registryconfig import RegistryConfig
from .workload import Workload

PROVEN_POLLS = 3  # a trigger polled this often is KEDA's (kept at the cap); fewer: evicted first for a new one


class Table:
    """The tracked workloads by key, indexed by ScaledObject, by namespace, and the unproven ones (polled fewer than
    ``PROVEN_POLLS`` times) per namespace least recently polled first, so that what a new trigger costs does not
    grow with the number tracked (a caller churning one-shot triggers used to scan every workload several times
    per call under the registry's lock). The registry's lock guards it."""

    def __init__(self) -> None:
        self._by_key: dict[tuple, Workload] = {}
        self._by_so: dict[tuple[str, str], dict[tuple, Workload]] = {}
        self._by_ns: dict[str, dict[tuple, Workload]] = {}
        self._unproven: dict[str, OrderedDict[tuple, Workload]] = {}  # namespace -> least recently polled first

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key) -> bool:
        return key in self._by_key

    def get(self, key) -> Workload | None:
        return self._by_key.get(key)

    def values(self):
        return self._by_key.values()

    def of(self, namespace: str, name: str) -> list[Workload]:
        """The triggers of one ScaledObject."""
        return list(self._by_so.get((namespace, name), {}).values())

    def count(self, namespace: str) -> int:
        return len(self._by_ns.get(namespace, ()))

    def add(self, wl: Workload) -> None:
        self._by_key[wl.key] = wl
        self._by_so.setdefault((wl.namespace, wl.name), {})[wl.key] = wl
        self._by_ns.setdefault(wl.namespace, {})[wl.key] = wl
        if wl.polls < PROVEN_POLLS:
            self._unproven.setdefault(wl.namespace, OrderedDict())[wl.key] = wl

    def polled(self, wl: Workload) -> None:
        """``wl`` was just polled (``last_polled`` set): the most recent of its namespace, or proven now."""
        un = self._unproven.get(wl.namespace)
        if un is None or wl.key not in un:
            return
        if wl.polls < PROVEN_POLLS:
            un.move_to_end(wl.key)
        else:
            self._drop_unproven(wl)

    def remove(self, wl: Workload) -> bool:
        """``wl`` out; True when it was its ScaledObject's last trigger."""
        del self._by_key[wl.key]
        so, ns = self._by_so[(wl.namespace, wl.name)], self._by_ns[wl.namespace]
        del so[wl.key], ns[wl.key]
        self._drop_unproven(wl)
        if not ns:
            del self._by_ns[wl.namespace]
        if not so:
            del self._by_so[(wl.namespace, wl.name)]
            return True
        return False

    def _drop_unproven(self, wl: Workload) -> None:
        un = self._unproven.get(wl.namespace)
        if un is not None and un.pop(wl.key, None) is not None and not un:
            del self._unproven[wl.namespace]

    def no_room(self, namespace: str, config: RegistryConfig) -> str | None:
        """Why a new trigger of ``namespace`` does not fit (None: it fits)."""
        if len(self) >= config.max_tracked:
            return f"this scaler tracks {len(self)} triggers, its limit (MAX_TRACKED {config.max_tracked})"
        n = self.count(namespace)
        if n >= config.max_tracked_per_namespace:
            return (f"namespace {namespace} has {n} triggers here, its quota (--max-triggers-per-namespace "
                    f"{config.max_tracked_per_namespace})")
        return None

    def evictable(self, namespace: str, name: str, why: str) -> Workload | None:
        """The trigger to evict for a new one of ``namespace/name`` that found no room (``why``): the least
        recently polled unproven one, of the namespace at its quota or of any at the cap; never one of the same
        ScaledObject. Costs one look per namespace (and per unproven trigger of the same ScaledObject)."""
        scopes = [namespace] if why.startswith("namespace") else list(self._unproven)
        best = None
        for ns in scopes:
            for w in self._unproven.get(ns, {}).values():  # least recently polled first: the first one is it
                if (w.namespace, w.name) != (namespace, name):
                    if best is None or w.last_polled < best.last_polled:
                        best = w
                    break
        return best

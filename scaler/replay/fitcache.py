"""Fits kept between replays in one process: the server's daily ``tuning: auto`` replays 3 days, 2 of which it
replayed the day before; with clock-aligned refits (``Settings.aligned``) those fits are the same computation.

A fit is looked up by a key that digests everything it depends on:

- the model's configuration (``config``: the model name and every argument ``run_model`` builds it from);
- the exact data window the fit reads (times, values and step, bytes for bytes: NaN, a late sample, a changed
  point or a shifted window make another key);
- the key of the fit it was warm-started from (``"cold"`` for none), so a key stands for the whole chain of
  warm starts behind it. A hit is therefore exactly what a fresh run computes given the same chain (Stan is
  deterministic for a given data file, init and seed): no tolerance.

Entries belong to a group (a workload: ``run(group, end, keep_from)`` around its replay). A run first drops its
group's fits of cutoffs before ``keep_from`` (the first cutoff it or any later run can need), and afterwards the
ones it did not use (of data that has changed: no later run reads them), so a workload holds one run's fits. A group whose last run's data ended more than
``stale_seconds`` before the current run's is dropped when room is needed (a workload deleted or no longer
tuned).

Bounded: at most ``max_bytes`` (the pickled size of the fits held, measured when stored; a band table later
memoises a column per quantile predicted, ~0.2 KB each; default 256 MiB) and ``max_entries``. When a fit does not
fit (after dropping stale groups) it is not kept: the groups already held keep their place. The server's
workloads come round in the same order every day, where "least recently used first" would evict exactly the
fits the next workload needs and reuse nothing once the fleet exceeds the bound; first come, first kept reuses
the fits of as many workloads as the bound holds, every day. A Prophet fit on 14 days is ~20 KB (its curve's
parameters and its band table).

Pure: no clock (a run's time is its data's end), no files. One cache serves one process (the server's tuning
worker holds one: ``shared()``).
"""

from __future__ import annotations

import hashlib
import pickle
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

DEFAULT_MAX_BYTES = 256 << 20
DEFAULT_MAX_ENTRIES = 100_000
ENTRY_OVERHEAD = 64  # bytes counted for a key and its entry besides the pickled fit

OK, FIT_FAILED, INSUFFICIENT = "ok", "fit_failed", "insufficient_history"


@dataclass(frozen=True)
class Entry:
    outcome: str  # OK, FIT_FAILED (the previous fit was kept), INSUFFICIENT (no fit)
    fitted: Any  # the Fitted (None unless OK)
    nbytes: int
    cutoff: float  # the fit's cutoff (its window's end)


@dataclass
class _Group:
    entries: dict[bytes, Entry] = field(default_factory=dict)
    bytes: int = 0
    last_end: float = float("-inf")


def config_key(*parts: Any) -> bytes:
    """A digest of a model's configuration (plain values: names, numbers, tuples)."""
    return hashlib.blake2b(repr(parts).encode(), digest_size=16).digest()


def fit_key(config: bytes, t: np.ndarray, y: np.ndarray, step: float, warm: bytes | None) -> bytes:
    """The key of one fit: its configuration, the exact window it reads, the key of its warm start (None: cold)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(config)
    h.update(np.ascontiguousarray(t, dtype=np.float64).tobytes())
    h.update(b"|")
    h.update(np.ascontiguousarray(y, dtype=np.float64).tobytes())
    h.update(repr(float(step)).encode())
    h.update(b"cold" if warm is None else warm)
    return h.digest()


class FitCache:
    """Fits by ``fit_key``, grouped by workload, bounded in bytes and entries (see the module docstring)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, max_entries: int = DEFAULT_MAX_ENTRIES,
                 stale_seconds: float = 3 * 86400.0):
        if max_bytes < 0 or max_entries < 0 or not stale_seconds > 0:
            raise ValueError(f"cache bounds must be >= 0 and the staleness > 0, got {max_bytes} bytes, "
                             f"{max_entries} entries, {stale_seconds} s")
        self.max_bytes, self.max_entries, self.stale_seconds = int(max_bytes), int(max_entries), float(stale_seconds)
        self._groups: dict[str, _Group] = {}
        self._where: dict[bytes, str] = {}  # key -> its group
        self._lock = threading.Lock()  # the replay fits its models in threads
        self._group, self._end = "", float("-inf")  # the run in progress
        self._used: set[bytes] = set()
        self.bytes = 0
        self.hits = self.misses = self.refused = self.dropped = 0

    def __len__(self) -> int:
        return len(self._where)

    @contextmanager
    def run(self, group: str, end: float, keep_from: float = float("-inf")) -> Iterator["FitCache"]:
        """One replay of ``group`` whose data ends at ``end``: first the group's fits of cutoffs before
        ``keep_from`` are dropped, afterwards the ones the replay did not use."""
        with self._lock:
            self._group, self._end, self._used = group, float(end), set()
            g = self._groups.get(group)
            if g is not None:
                for k in [k for k, e in g.entries.items() if e.cutoff < keep_from]:
                    self._drop(g, k)
        try:
            yield self
        finally:
            with self._lock:
                g = self._groups.get(group)
                if g is not None:
                    for k in [k for k in g.entries if k not in self._used]:
                        self._drop(g, k)
                    g.last_end = max(g.last_end, float(end))
                    if not g.entries:
                        del self._groups[group]
                self._group, self._end, self._used = "", float("-inf"), set()

    def get(self, key: bytes) -> Entry | None:
        with self._lock:
            name = self._where.get(key)
            if name is None:
                self.misses += 1
                return None
            e = self._groups[name].entries[key]
            if self._group and name != self._group:  # another workload's fit (the same data): it moves to this one
                self._move(key, name, self._group)
            self._used.add(key)
            self.hits += 1
            return e

    def put(self, key: bytes, outcome: str, fitted: Any, cutoff: float) -> None:
        nbytes = ENTRY_OVERHEAD + (len(pickle.dumps(fitted, protocol=pickle.HIGHEST_PROTOCOL))
                                   if fitted is not None else 0)
        with self._lock:
            if key in self._where:
                self._used.add(key)
                return
            if not self._room(nbytes):
                self.refused += 1
                return
            g = self._groups.setdefault(self._group, _Group())
            g.entries[key] = Entry(outcome, fitted, nbytes, float(cutoff))
            g.bytes += nbytes
            self.bytes += nbytes
            self._where[key] = self._group
            self._used.add(key)

    def entries(self) -> list[Entry]:
        """The entries held."""
        with self._lock:
            return [e for g in self._groups.values() for e in g.entries.values()]

    def copy(self) -> "FitCache":
        """Another cache with the same bounds and fits (its own groups and counts)."""
        out = FitCache(self.max_bytes, self.max_entries, self.stale_seconds)
        with self._lock:
            out._groups = {n: _Group(dict(g.entries), g.bytes, g.last_end) for n, g in self._groups.items()}
            out._where = dict(self._where)
            out.bytes = self.bytes
        return out

    def group_bytes(self, group: str) -> int:
        with self._lock:
            g = self._groups.get(group)
            return g.bytes if g is not None else 0

    def stats(self) -> dict:
        with self._lock:
            return {"entries": len(self._where), "bytes": self.bytes, "groups": len(self._groups),
                    "hits": self.hits, "misses": self.misses, "refused": self.refused, "dropped": self.dropped}

    # -- under the lock ---------------------------------------------------------------------------------
    def _room(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more fit, after dropping the groups that went stale."""
        def fits() -> bool:
            return self.bytes + nbytes <= self.max_bytes and len(self._where) < self.max_entries

        if fits():
            return True
        for name in [n for n, g in self._groups.items()
                     if n != self._group and g.last_end < self._end - self.stale_seconds]:
            g = self._groups.pop(name)
            for k in list(g.entries):
                self._drop(g, k)
        return fits()

    def _drop(self, g: _Group, key: bytes) -> None:
        e = g.entries.pop(key)
        g.bytes -= e.nbytes
        self.bytes -= e.nbytes
        del self._where[key]
        self.dropped += 1

    def _move(self, key: bytes, src: str, dst: str) -> None:
        a, b = self._groups[src], self._groups.setdefault(dst, _Group())
        e = a.entries.pop(key)
        a.bytes -= e.nbytes
        b.entries[key] = e
        b.bytes += e.nbytes
        self._where[key] = dst
        if not a.entries:
            del self._groups[src]


_SHARED: FitCache | None = None


def shared() -> FitCache:
    """This process's cache (made on first use, with the default bounds)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = FitCache()
    return _SHARED

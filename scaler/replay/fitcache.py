"""Fits kept between replays in one process: the server's daily ``tuning: auto`` replays 3 days, 2 of which it
replayed the day before; with clock-aligned refits (``Settings.aligned``) those fits are the same computation.

A fit is looked up by a key that digests everything it depends on:

- the model's configuration (``config``: the model name and every argument ``run_model`` builds it from);
- the exact data window the fit reads (times, values and step, bytes for bytes: NaN, a late sample, a changed
  point or a shifted window make another key);
- the key of the fit it was warm-started from (``"cold"`` for none), so a key stands for the whole chain of
  warm starts behind it. A hit is therefore exactly what a fresh run computes given the same chain (Stan is
  deterministic for a given data file, init and seed): no tolerance.

Bounded: at most ``max_bytes`` (the pickled size of the fits held, measured when stored; a band table later
memoises a column per quantile predicted, ~0.2 KB each; default 256 MiB) and ``max_entries``; least recently
used fits go first. A Prophet fit on 14 days is ~20 KB (its curve's parameters and its band table).

Pure: no clock, no files. One cache serves one process (the server's tuning worker holds one: ``shared()``).
"""

from __future__ import annotations

import hashlib
import pickle
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_MAX_BYTES = 256 << 20
DEFAULT_MAX_ENTRIES = 100_000

OK, FIT_FAILED, INSUFFICIENT = "ok", "fit_failed", "insufficient_history"


@dataclass(frozen=True)
class Entry:
    outcome: str  # OK, FIT_FAILED (the previous fit was kept), INSUFFICIENT (no fit)
    fitted: Any  # the Fitted (None for INSUFFICIENT)
    nbytes: int


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
    """A bounded LRU map from ``fit_key`` to ``Entry``."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, max_entries: int = DEFAULT_MAX_ENTRIES):
        if max_bytes < 0 or max_entries < 0:
            raise ValueError(f"cache bounds must be >= 0, got {max_bytes} bytes and {max_entries} entries")
        self.max_bytes, self.max_entries = int(max_bytes), int(max_entries)
        self._map: OrderedDict[bytes, Entry] = OrderedDict()
        self.bytes = 0
        self.hits = self.misses = self.evictions = 0

    def __len__(self) -> int:
        return len(self._map)

    def get(self, key: bytes) -> Entry | None:
        e = self._map.get(key)
        if e is None:
            self.misses += 1
            return None
        self._map.move_to_end(key)
        self.hits += 1
        return e

    def put(self, key: bytes, outcome: str, fitted: Any) -> None:
        nbytes = len(pickle.dumps(fitted, protocol=pickle.HIGHEST_PROTOCOL)) if fitted is not None else 0
        nbytes += 64  # the key and the entry
        if nbytes > self.max_bytes or self.max_entries == 0:
            return
        old = self._map.pop(key, None)
        if old is not None:
            self.bytes -= old.nbytes
        self._map[key] = Entry(outcome, fitted, nbytes)
        self.bytes += nbytes
        while self.bytes > self.max_bytes or len(self._map) > self.max_entries:
            _, e = self._map.popitem(last=False)
            self.bytes -= e.nbytes
            self.evictions += 1

    def stats(self) -> dict:
        return {"entries": len(self._map), "bytes": self.bytes, "hits": self.hits, "misses": self.misses,
                "evictions": self.evictions}


_SHARED: FitCache | None = None


def shared() -> FitCache:
    """This process's cache (made on first use, with the default bounds)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = FitCache()
    return _SHARED

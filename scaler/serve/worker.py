"""The one background-worker skeleton behind the fit and the tuning services.

Both services run slow work for a workload off the RPC threads: an I/O thread
(the history's range query, handing the result over) and a worker process
(the model fit, the tuning sweep). What they share lives here, once:

- the *busy* set: at most one piece of work per workload key queued or running;
- *backoff*: after a failure the key waits until its retry time (``failed``
  counts failures in a row for an exponential delay; ``succeeded`` clears it);
- *submission* to the I/O executor, the key released whatever the work does;
- the *worker pool*: made on ``start``, replaced once when a worker process
  died (``BrokenProcessPool``: the OOM killer), its processes killed on ``stop``
  (bounded: queued work is dropped, running work is not awaited);
- *due times* on clock-aligned boundaries (``last_boundary``): multiples of an
  interval plus an offset drawn from the workload's identity, so that every
  replica computes the same boundaries for the same trigger (issue 22, item 6).

The services keep what is their own: when work is due, what it computes and
where its result goes.
"""

from __future__ import annotations

import logging
import math
import threading
from concurrent.futures import Executor
from concurrent.futures.process import BrokenProcessPool
from typing import Callable

from .state import digest

log = logging.getLogger(__name__)


# a boundary's data is used once this long has passed: the samples up to it have been scraped and ingested
SETTLE_SECONDS = 60.0


def phase(key: tuple, interval: float) -> float:
    """A fixed offset in [0, interval) for the workload ``key``, in whole minutes (a digest of the key: the
    same in every replica), spreading the boundaries of many triggers over the interval."""
    return math.floor(int(digest(key)[:8], 16) / 0x100000000 * interval / 60.0) * 60.0


def last_boundary(now: float, interval: float, offset: float = 0.0) -> float:
    """The latest ``k * interval + offset`` at or before ``now`` (``offset`` in [0, interval))."""
    return math.floor((now - offset) / interval) * interval + offset


def cutoff(now: float, interval: float, key: tuple) -> float:
    """The data cutoff in force at ``now`` for the workload ``key`` on an ``interval`` schedule: its latest
    boundary (``phase`` offset) at least ``SETTLE_SECONDS`` old. The same in every replica; a replica that
    starts mid-interval works at once on this cutoff's window, not on ``now``'s."""
    return last_boundary(now - SETTLE_SECONDS, interval, phase(key, interval))


class Worker:
    """Busy keys, retry times, submission and the worker pool of one background service.

    ``io`` runs the work (range queries, handing results over); ``pool`` runs
    ``run(fn, job)`` (a process pool; None: ``pool_factory()`` makes it at
    ``start``, and only such an own pool is replaced when broken or killed at
    ``stop``). ``on_broken(replaced)``: called (under ``lock``) before each retry on a broken pool;
    ``replaced``: this call replaced it (the first to see it).
    """

    def __init__(self, io: Executor, pool: Executor | None, pool_factory: Callable[[], Executor],
                 on_broken: Callable[[bool], None] | None = None):
        self.lock = threading.Lock()  # also the owning service's lock for its own per-key state
        self._io = io
        self._pool = pool
        self._own_pool = pool is None
        self._pool_factory = pool_factory
        self._on_broken = on_broken
        self._busy: set[tuple] = set()
        self._retry_at: dict[tuple, float] = {}
        self._failures: dict[tuple, int] = {}

    # -- lifecycle ----------------------------------------------------------------
    def start(self) -> None:
        if self._pool is None:
            self._pool = self._pool_factory()

    @property
    def started(self) -> bool:
        return self._pool is not None

    @property
    def pool(self) -> Executor | None:
        return self._pool

    def stop(self) -> None:
        """Bounded: queued work is dropped and an own pool's worker processes are killed, not awaited."""
        self._io.shutdown(wait=False, cancel_futures=True)
        pool, self._pool = self._pool, None
        if pool is not None and self._own_pool:
            processes = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for p in processes:
                try:
                    p.kill()
                except Exception:  # pragma: no cover - already gone
                    pass

    # -- scheduling ---------------------------------------------------------------
    def busy(self, key: tuple) -> bool:
        with self.lock:
            return key in self._busy

    def schedule(self, key: tuple, now: float, choose: Callable[[bool], Callable | None], *args) -> bool:
        """Submit ``choose``'s work for ``key`` unless the service is stopped or ``key`` is busy.

        ``choose(backing_off)`` runs under ``lock`` (``backing_off``: a failure's retry time is still ahead)
        and returns the work to run (None: nothing due); the work runs on the I/O executor with ``args`` and
        ``key`` stays busy until it returns. True when submitted."""
        with self.lock:
            if self._pool is None or key in self._busy:
                return False
            work = choose(now < self._retry_at.get(key, -math.inf))
            if work is None:
                return False
            self._busy.add(key)
        try:
            self._io.submit(self._guarded, key, work, *args)
        except RuntimeError:  # shut down
            self._release(key)
            return False
        return True

    def _guarded(self, key: tuple, work: Callable, *args) -> None:
        try:
            work(*args)
        finally:
            self._release(key)

    def _release(self, key: tuple) -> None:
        with self.lock:
            self._busy.discard(key)

    # -- backoff ------------------------------------------------------------------
    def failed(self, key: tuple, now: float, delay: Callable[[int], float]) -> int:
        """One more failure in a row for ``key``: it waits ``delay(failures in a row)``. Returns that count."""
        with self.lock:
            n = self._failures[key] = self._failures.get(key, 0) + 1
            self._retry_at[key] = now + delay(n)
            return n

    def retry_at(self, key: tuple, at: float) -> None:
        """``key`` waits until ``at`` (a wait that is no failure: not counted)."""
        with self.lock:
            self._retry_at[key] = at

    def succeeded(self, key: tuple) -> None:
        with self.lock:
            self._retry_at.pop(key, None)
            self._failures.pop(key, None)

    forget = succeeded  # a workload no longer tracked: its backoff goes with it

    # -- the worker pool ----------------------------------------------------------
    def run(self, fn: Callable, job) -> dict:
        """``fn(job)`` in the worker pool; a dead worker's (own) pool is replaced and ``fn`` run once more."""
        for attempt in (0, 1):
            pool = self._pool
            if pool is None:
                raise RuntimeError("service stopped")
            try:
                return pool.submit(fn, job).result()
            except BrokenProcessPool:
                if attempt == 1 or not self._own_pool:
                    raise
                with self.lock:
                    replaced = self._pool is pool  # the first to see it replaces it
                    if replaced:
                        self._pool = self._pool_factory()
                    if self._on_broken is not None:
                        self._on_broken(replaced)
                pool.shutdown(wait=False, cancel_futures=True)
        raise AssertionError("unreachable")

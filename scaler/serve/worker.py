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
  (bounded: queued work is dropped, running work is not awaited); each worker
  process dies with the server (``worker_init``, the pools' initializer);
- *due times* on clock-aligned boundaries (``last_boundary``): multiples of an
  interval plus an offset drawn from the workload's identity, so that every
  replica computes the same boundaries for the same trigger (issue 22, item 6).

The services keep what is their own: when work is due, what it computes and
where its result goes.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import signal
import threading
import time
from concurrent.futures import Executor, TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Callable

from .state import digest

log = logging.getLogger(__name__)
WATCH_SECONDS = 1.0  # how often a bounded run's time and memory are looked at


class GaveUp(RuntimeError):
    """A bounded run was stopped: past its time or over its memory (the message says which, with the figures)."""

    def __init__(self, why: str, seconds: float, rss: int):
        super().__init__(f"gave up after {seconds:.0f}s: {why}")
        self.seconds, self.rss = seconds, rss


def _tree(pids: list[int]) -> list[int]:
    """``pids`` and their descendants (Linux: /proc/<pid>/task/<pid>/children)."""
    out, todo = [], list(pids)
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return out


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def worker_init(parent_pid: int) -> None:
    """In each worker process: die with the server (PR_SET_PDEATHSIG for the direct parent, and a watch on
    the server's pid, since a forkserver worker's parent is the fork server, not the server)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while True:
            time.sleep(1.0)
            try:
                os.kill(parent_pid, 0)
                with open(f"/proc/{parent_pid}/stat", "rb") as f:  # a killed server not yet reaped is a zombie: gone
                    if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                        os._exit(0)
            except ProcessLookupError:
                os._exit(0)
            except (PermissionError, OSError, IndexError):
                pass
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


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
    def run(self, fn: Callable, job, *, seconds: float | None = None, max_rss: int | None = None) -> dict:
        """``fn(job)`` in the worker pool; a dead worker's (own) pool is replaced and ``fn`` run once more.
        ``seconds``/``max_rss``: past that time, or with the worker (and its children) over that resident memory,
        its processes are killed, the pool replaced and ``GaveUp`` raised (issue 40, item 14)."""
        for attempt in (0, 1):
            pool = self._pool
            if pool is None:
                raise RuntimeError("service stopped")
            try:
                fut = pool.submit(fn, job)
                if seconds is None and max_rss is None:
                    return fut.result()
                return self._watched(pool, fut, seconds, max_rss)
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

    def _watched(self, pool: Executor, fut, seconds: float | None, max_rss: int | None) -> dict:
        t0 = time.monotonic()
        while True:
            try:
                return fut.result(timeout=WATCH_SECONDS)
            except FutureTimeout:
                pass
            took, pids = time.monotonic() - t0, _tree([p.pid for p in (getattr(pool, "_processes", None) or {}).values()])
            rss = sum(_rss(p) for p in pids)
            why = (f"ran past {seconds:g}s" if seconds is not None and took > seconds else
                   f"used {rss / 2 ** 20:.0f} MiB, over its {max_rss / 2 ** 20:.0f} MiB" if max_rss is not None
                   and rss > max_rss else None)
            if why is None:
                continue
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            with self.lock:
                if self._own_pool and self._pool is pool:
                    self._pool = self._pool_factory()
            pool.shutdown(wait=False, cancel_futures=True)
            raise GaveUp(why, took, rss)

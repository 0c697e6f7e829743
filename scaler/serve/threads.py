"""A thread pool that gives idle threads back (issue 40, item 8: 1,000 cancelled streams left 1,019 gRPC threads).

``ReapingExecutor`` is what ``grpc.server`` needs of an executor (``submit``): threads are made on demand up to
``max_workers`` and one idle for ``idle_seconds`` exits. concurrent.futures' ThreadPoolExecutor keeps every thread
it ever made.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Executor, Future


class ReapingExecutor(Executor):
    def __init__(self, max_workers: int, idle_seconds: float = 30.0, thread_name_prefix: str = "worker"):
        self.max_workers, self.idle_seconds, self.prefix = max_workers, idle_seconds, thread_name_prefix
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = threading.Semaphore(0)  # one count per idle thread not yet reserved for a submitted item
        self._threads = 0
        self._made = 0
        self._shutdown = False

    @property
    def threads(self) -> int:
        return self._threads

    def submit(self, fn, /, *args, **kwargs) -> Future:
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        f: Future = Future()
        self._work.put((f, fn, args, kwargs))
        if self._idle.acquire(blocking=False):  # an idle thread will take it
            return f
        with self._lock:
            if self._threads < self.max_workers:
                self._threads += 1
                self._made += 1
                threading.Thread(target=self._run, name=f"{self.prefix}_{self._made}", daemon=True).start()
        return f

    def _run(self) -> None:
        while True:
            try:
                item = self._work.get(timeout=self.idle_seconds)
            except queue.Empty:
                if self._idle.acquire(blocking=False):  # idle and not reserved for an item: go
                    with self._lock:
                        self._threads -= 1
                    return
                continue  # reserved: its item is on its way
            if item is None:  # shut down
                with self._lock:
                    self._threads -= 1
                return
            f, fn, args, kwargs = item
            if f.set_running_or_notify_cancel():
                try:
                    f.set_result(fn(*args, **kwargs))
                except BaseException as e:  # noqa: BLE001 - handed to the future, as a pool does
                    f.set_exception(e)
            del item, f, fn, args, kwargs
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._shutdown = True
        with self._lock:
            n = self._threads
        for _ in range(n):
            self._work.put(None)

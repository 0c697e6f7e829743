"""A clock the test moves by hand (the server and the registry take the clock as an argument)."""

from __future__ import annotations

import threading


class FakeClock:
    def __init__(self, t: float):
        self.t = t
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.t

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.t += seconds

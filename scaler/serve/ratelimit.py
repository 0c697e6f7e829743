"""Log rate limiting: a repeated message (same key) is logged at most once per interval, with a count of the rest.

The clock is injected (the registry's), so tests drive it by hand.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Hashable

from ..prom import short

MAX_KEYS = 10_000  # past this, the oldest keys are dropped (bounded memory)
MAX_LINE = 500  # characters of one logged message


class LogLimiter:
    def __init__(self, clock: Callable[[], float], interval: float = 60.0):
        self.clock = clock
        self.interval = interval
        self._last: dict[Hashable, tuple[float, int]] = {}  # key -> (last logged at, suppressed since)
        self._lock = threading.Lock()

    def log(self, logger: logging.Logger, level: int, key: Hashable, msg: str, *args) -> bool:
        """Log ``msg % args`` (cut to ``MAX_LINE``) unless ``key`` was logged less than ``interval`` ago."""
        now = self.clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last[0] < self.interval:
                self._last[key] = (last[0], last[1] + 1)
                return False
            suppressed = last[1] if last is not None else 0
            self._last.pop(key, None)
            self._last[key] = (now, 0)
            while len(self._last) > MAX_KEYS:
                self._last.pop(next(iter(self._last)))
        text = short(msg % args if args else msg, MAX_LINE)
        if suppressed:
            text += f" [{suppressed} more like this in the last {self.interval:.0f}s]"
        logger.log(level, "%s", text)
        return True

    def forget(self, match: Callable[[Hashable], bool]) -> None:
        with self._lock:
            for k in [k for k in self._last if match(k)]:
                del self._last[k]

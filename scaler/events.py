"""The scaler's ``eventsFile``: read at most once per change of the file (mtime, size), bounded in size.

``EventsFiles.get(path)`` gives the events in force and the last error. A file that becomes bad (or goes
away) keeps the last good events and reports why; a file never read successfully gives no events. Parsing
is ``forecaster.calendar`` (pure); this module is the I/O edge (one ``os.stat`` per call).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from forecaster.calendar import CalendarError, Event, load_events


@dataclass(frozen=True)
class EventsReading:
    events: tuple[Event, ...] = ()
    error: str | None = None  # why the file's current content is not in force (the last good events are)


class EventsFiles:
    """Per path: the stat signature last read and its events (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[tuple | None, EventsReading]] = {}

    def get(self, path: str) -> EventsReading:
        if not path:
            return EventsReading()
        try:
            st = os.stat(path)
            sig: tuple | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            sig = None
        with self._lock:
            seen = self._seen.get(path)
            if seen is not None and seen[0] == sig and sig is not None:
                return seen[1]
            last = seen[1].events if seen is not None else ()
            try:
                reading = EventsReading(load_events(path))
            except CalendarError as e:
                reading = EventsReading(last, str(e))
            self._seen[path] = (sig, reading)
            return reading


FILES = EventsFiles()  # the server's one cache (a ConfigMap update changes the mounted file's mtime)

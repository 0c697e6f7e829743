"""The scaler's ``eventsFile``: read off every caller's thread, regular files only, bounded in size and time.

``EventsFiles.get(path)`` gives the events in force and why the file's content is not (``error``), from memory
only: it never opens, stats or waits on the file (issue 40, item 2: a FIFO or ``/dev/stdout`` read under one
process-wide lock on the RPC thread blocked every RPC). Each ``get`` of a path not checked for ``CHECK_SECONDS``
hands a check to a small background pool (at most one in flight per path): ``stat``, and when the signature
(mtime, size, inode) changed a read: ``O_NONBLOCK`` (a FIFO opens at once), a regular file only (``fstat`` before
any byte is read), at most ``MAX_EVENTS_BYTES``, inside the allowed directories (``allow``: the path and every
link in it resolved). A check that runs longer than ``READ_SECONDS`` is reported as such and the path is not
checked again until it returns. A file that becomes bad (or goes away) keeps the last good events and reports why;
a file never read successfully gives no events. Every change of a file's state is logged once. ``wait`` lets the
first call of a new trigger wait (bounded) for its file's first read. Parsing is ``forecaster.calendar`` (pure).

The same reader serves the trigger's ``capacityModel`` (``scaler.serve.capacityfile``): ``EventsFiles(parse=...,
what="capacity file", flag="--capacity-dir", max_bytes=...)`` holds the parsed model as the reading's one item.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from forecaster.calendar import CalendarError
from forecaster.eventsfile import Event, MAX_EVENTS_BYTES, parse_events

from .limits import EVENTS_DIRS as DEFAULT_DIRS  # noqa: F401 - the server's default, declared once in limits

log = logging.getLogger("scaler.events")

CHECK_SECONDS = 5.0  # a path is checked (stat) at most this often, and only while someone asks for it
READ_SECONDS = 2.0  # a check still running after this is reported as hung
MAX_PATHS = 4096  # paths remembered; the least recently asked are dropped past it


@dataclass(frozen=True)
class EventsReading:
    events: tuple[Event, ...] = ()
    error: str | None = None  # why the file's current content is not in force (the last good events are)
    read: bool = False  # checked at least once (False: the first check is pending)


class _Path:
    __slots__ = ("reading", "sig", "checked", "started", "asked")

    def __init__(self) -> None:
        self.reading = EventsReading()
        self.sig: tuple | None = None
        self.checked = -1e18  # monotonic time of the last check's start
        self.started: float | None = None  # a check in flight since then
        self.asked = 0.0


def parse_events_file(text: str, path: str) -> tuple:
    """An events file's events (CSV, or YAML by the file's suffix); CalendarError when it is not one."""
    fmt = "yaml" if path.lower().endswith((".yaml", ".yml")) else "csv"
    return parse_events(text, fmt, source=os.path.basename(path) or path)


class EventsFiles:
    """Per path: the events last read and the state of its checks (thread-safe; no lock is held across I/O).
    ``allowed``: directories events files may be read from (None: any, for tools and tests that read their own).
    ``parse(text, path)``: the file's content as a tuple (ValueError when it is bad: its message is the error);
    ``what``, ``flag``, ``form``: the file's name, the directory flag and the accepted form in messages;
    ``max_bytes``: its size limit."""

    def __init__(self, allowed: tuple[str, ...] | None = None, clock=time.monotonic, workers: int = 4,
                 parse: Callable[[str, str], tuple] = parse_events_file, what: str = "events file",
                 flag: str = "--events-dir", max_bytes: int = MAX_EVENTS_BYTES,
                 form: str = "a readable CSV or YAML file"):
        self.parse, self.what, self.flag, self.max_bytes, self.form = parse, what, flag, max_bytes, form
        self.clock = clock
        self._lock = threading.Lock()
        self._checked = threading.Condition(self._lock)  # notified after every check
        self._paths: dict[str, _Path] = {}
        self._io: ThreadPoolExecutor | None = None
        self._workers = workers
        self.allowed: tuple[str, ...] | None = None
        self.allow(allowed)

    def allow(self, dirs) -> None:
        """Read only files under ``dirs`` (resolved); None: anywhere. Every path is checked again."""
        with self._lock:
            self.allowed = None if dirs is None else tuple(os.path.realpath(d) for d in dirs)
            for p in self._paths.values():
                p.sig, p.checked = None, -1e18

    def get(self, path: str) -> EventsReading:
        """The events of ``path`` in force now, from memory; a check is started when one is due."""
        if not path:
            return EventsReading()
        now = self.clock()
        with self._lock:
            p = self._paths.get(path)
            if p is None:
                p = self._paths[path] = _Path()
                while len(self._paths) > MAX_PATHS:
                    oldest = min(self._paths, key=lambda k: self._paths[k].asked)
                    del self._paths[oldest]
            p.asked = now
            reading = p.reading
            if p.started is not None:
                if now - p.started > READ_SECONDS:
                    reading = EventsReading(reading.events, f"{self.what} {path!r}: reading it has not finished "
                                            f"after {now - p.started:.0f}s (a FIFO, a device or a hung file system?); "
                                            "accepted a regular file", True)
                return reading
            if now - p.checked < CHECK_SECONDS:
                return reading
            p.started = p.checked = now
            io = self._io
            if io is None:
                io = self._io = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="events")
            allowed = self.allowed
        try:
            io.submit(self._check, path, p, allowed)
        except RuntimeError:  # shut down
            with self._lock:
                p.started = None
        return reading

    def wait(self, path: str, timeout: float) -> EventsReading:
        """``get``, after waiting up to ``timeout`` seconds for a check in flight (one is started when due)."""
        self.get(path)
        with self._checked:
            p = self._paths.get(path)
            if p is not None:
                self._checked.wait_for(lambda: p.started is None, timeout)
        return self.get(path)

    def _check(self, path: str, p: _Path, allowed: tuple[str, ...] | None) -> None:
        old = p.reading
        try:
            sig, reading = self._read(path, p.sig, old, allowed)
        except Exception as e:  # noqa: BLE001 - the pool must survive anything
            sig, reading = None, EventsReading(old.events, f"{self.what} {path!r}: cannot be read "
                                                            f"({type(e).__name__})", True)
        with self._checked:
            p.sig, p.reading, p.started = sig, reading, None
            self._checked.notify_all()
        if reading.error != old.error or not old.read:
            if reading.error is not None:
                log.warning("%s%s", reading.error, " (the last good events stay in force)" if reading.events else "")
            elif old.read or old.error:
                log.info("%s %r read: %d item(s)", self.what, path, len(reading.events))

    def _read(self, path: str, last_sig: tuple | None, old: EventsReading,
              allowed: tuple[str, ...] | None) -> tuple[tuple | None, EventsReading]:
        def bad(why: str) -> tuple[None, EventsReading]:
            return None, EventsReading(old.events, f"{self.what} {path!r}: {why}", True)

        limit = self.max_bytes

        if allowed is not None:
            real = os.path.realpath(path)
            if not any(real == d or real.startswith(d.rstrip("/") + "/") for d in allowed):
                return bad(f"outside the directories the scaler reads {self.what}s from ({', '.join(allowed)}; "
                           f"{self.flag}); accepted a file under one of them")
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return bad(f"does not exist; accepted {self.form}")
        except OSError as e:
            return bad(f"cannot be read ({e.strerror})")
        sig = (st.st_mtime_ns, st.st_size, st.st_ino)
        if sig == last_sig and old.read and old.error is None:
            return sig, old
        if not stat.S_ISREG(st.st_mode):
            return bad("not a regular file (a FIFO, a device or a directory); accepted a regular file")
        if st.st_size > limit:
            return bad(f"{st.st_size} bytes; accepted up to {limit // 1024} KiB")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
        except OSError as e:
            return bad(f"cannot be read ({e.strerror})")
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for something else since the stat
                return bad("not a regular file (a FIFO, a device or a directory); accepted a regular file")
            raw = os.read(fd, limit + 1)
        finally:
            os.close(fd)
        if len(raw) > limit:
            return bad(f"accepted up to {limit // 1024} KiB")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return bad("not UTF-8 text")
        try:
            return sig, EventsReading(self.parse(text, path), None, True)
        except (CalendarError, ValueError) as e:
            return sig, EventsReading(old.events, str(e), True)

    def stop(self) -> None:
        with self._lock:
            io, self._io = self._io, None
        if io is not None:
            io.shutdown(wait=False, cancel_futures=True)


FILES = EventsFiles()  # the server's one cache (a ConfigMap update changes the mounted file's mtime)

"""The durable decision log (issue 36, item 4): per trigger, a JSON-lines file under ``<state-dir>/decisions/``.

``Watch`` appends what the in-memory ring shows (``scaler.serve.watch``) in a bounded form: a decision when what it
says changed (replicas, reason, event, model or tuned choice) and otherwise one every ``HEARTBEAT_SECONDS``; every
fit, tuning run and change of the eventsFile's state. ``append`` only queues (an RPC thread never waits on the
disk): one writer thread appends the lines, through the directory's descriptor without following links
(``files.StateDir``). A file past ``MAX_BYTES`` is rotated to ``<name>.1`` (the older one dropped), so a trigger
holds at most 2 x ``MAX_BYTES``; a full queue drops the line and counts it. ``read`` gives a trigger's entries,
oldest first, after a restart too (``/api/scaledobjects/{namespace}/{name}/decisions``' ``history``); ``forget``
removes them with the trigger's other state.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
from collections import defaultdict

from .files import StateDir
from .state import file_name

log = logging.getLogger(__name__)

MAX_BYTES = 128 * 1024  # one generation of a trigger's log (two are kept)
HEARTBEAT_SECONDS = 300.0  # an unchanged decision is logged at most this often
QUEUE_LINES = 20_000  # lines waiting for the writer; more are dropped (counted)
READ_LIMIT = 2000  # entries one read returns at most (the newest)


def log_name(namespace: str, name: str, metric: str) -> str:
    return file_name(namespace, name, metric)[:-len(".json")] + ".jsonl"


class DecisionLog:
    def __init__(self, root: str | os.PathLike, metrics=None, max_bytes: int = MAX_BYTES):
        self.dir = StateDir(root)
        self.max_bytes = max_bytes
        self._queue: queue.Queue = queue.Queue(QUEUE_LINES)
        self._lock = threading.Lock()  # a file is written, rotated, read or removed by one thread at a time
        self._dropped = None
        if metrics is not None:
            from prometheus_client import Counter

            self._dropped = Counter("forescale_decision_log_dropped_total", "Decision log lines dropped (the "
                                    "writer fell behind, or the state dir is not writable)", registry=metrics.registry)
        self._thread = threading.Thread(target=self._run, name="decision-log", daemon=True)
        self._stopping = threading.Event()
        self._thread.start()

    # -- writing ------------------------------------------------------------------------------------------------
    def append(self, key3: tuple[str, str, str], entry: dict) -> None:
        """Queue one entry of the trigger ``key3`` (never blocks)."""
        try:
            self._queue.put_nowait((key3, json.dumps(entry, allow_nan=False, default=str) + "\n"))
        except (queue.Full, ValueError):
            self._drop()

    def _drop(self, n: int = 1) -> None:
        if self._dropped is not None:
            self._dropped.inc(n)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                first = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            batch = [first]
            while len(batch) < 1000:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._write(batch)

    def _write(self, batch: list) -> None:
        lines: dict[tuple, list[str]] = defaultdict(list)
        flushed = []
        for key3, line in batch:
            if key3 is None:  # flush's marker: set once what came before it is written
                flushed.append(line)
            else:
                lines[key3].append(line)
        for key3, ls in lines.items():
            name = log_name(*key3)
            try:
                with self._lock:
                    size = self.dir.size(name)
                    piece: list[bytes] = []
                    for line in ls:  # each generation at most max_bytes: the batch is written in pieces that fit
                        b = line.encode()
                        if size + len(b) > self.max_bytes and (piece or size):
                            if piece:
                                self.dir.append(name, b"".join(piece))
                            self.dir.rename(name, name + ".1")
                            size, piece = 0, []
                        piece.append(b)
                        size += len(b)
                    if piece:
                        self.dir.append(name, b"".join(piece))
            except OSError as e:
                self._drop(len(ls))
                log.debug("decision log %s not written: %s", name, e)
        for done in flushed:
            done.set()

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until what was queued is written (tests, and a clean stop)."""
        done = threading.Event()
        self._queue.put((None, done))
        done.wait(timeout)

    # -- reading ------------------------------------------------------------------------------------------------
    def read(self, key3: tuple[str, str, str], limit: int = READ_LIMIT, since: float | None = None) -> list[dict]:
        """The trigger's entries, oldest first (the newest ``limit``; with ``since``, those at or after it)."""
        name = log_name(*key3)
        out: list[dict] = []
        with self._lock:
            for part in (name + ".1", name):
                try:
                    data = self.dir.read(part, self.max_bytes + (1 << 16))
                except FileNotFoundError:
                    continue
                except (OSError, ValueError) as e:
                    log.warning("decision log %s not read: %s", part, getattr(e, "strerror", None) or e)
                    continue
                for line in data.splitlines():
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue  # a line cut by a crash mid-write
                    if isinstance(entry, dict) and (since is None or (entry.get("time") or 0) >= since):
                        out.append(entry)
        return out[-limit:]

    def triggers(self, namespace: str, name: str) -> list[tuple[str, str, str]]:
        """The (namespace, name, metric) of every trigger of a ScaledObject with a log (tracked or not)."""
        prefix = file_name(namespace, name, "")[:-len(".json")]
        with self._lock:
            names = [n for n in self.dir.names() if n.startswith(prefix) and n.endswith(".jsonl")]
        return sorted((namespace, name, n[len(prefix):-len(".jsonl")]) for n in names)

    def forget(self, namespace: str, name: str, metric: str) -> None:
        n = log_name(namespace, name, metric)
        with self._lock:
            self.dir.unlink(n)
            self.dir.unlink(n + ".1")

    def stop(self) -> None:
        self.flush(2.0)
        self._stopping.set()
        self._thread.join(2.0)
        self.dir.close()

"""What survives a restart: one JSON document per trigger, under ``--state-dir``.

One store serves both background services: the forecast service keeps its
curves directly under ``--state-dir``, the tuner its choices under
``<state-dir>/tuning/``. A document is ``<namespace>__<name>__<metric>.json``
(other characters replaced by ``_``), written atomically through the state
dir's descriptor without following links (``files.StateDir``), and carries a
``version``, a ``key`` (a one-way digest of the inputs it was made for) and an
``hmac`` (HMAC-SHA256 with the scaler's state key, ``--state-key-file``):
``load`` returns it only when all three match. An unreadable, malformed or
unsigned file is logged and ignored: the service then recomputes what it held.

Bounds: a document over ``MAX_STATE_FILE_BYTES`` is neither written nor read;
only a regular file is read (a FIFO or device swapped in is refused, opened
non-blocking and checked before any read); a long name is cut and completed by
a digest (file names stay under 255 bytes). Failed writes and refused reads
are counted in ``forescale_state_errors_total{op}`` and the last write's
outcome is ``forescale_state_writable`` (0: the state dir is full, gone or
read-only).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
from pathlib import Path
from typing import Callable, Iterable, TypeVar

import numpy as np

from ..limits import MAX_STATE_FILE_BYTES
from .files import StateDir, load_key, sign, verify

log = logging.getLogger(__name__)


T = TypeVar("T")

def digest(material: tuple) -> str:
    """A one-way key for what a stored document was made from (it may hold secrets: never stored in clear)."""
    return hashlib.sha256(repr(material).encode()).hexdigest()[:32]


MAX_FILE_NAME = 200  # bytes before ".json"/".tmp": under the 255 most file systems allow


def file_name(namespace: str, name: str, metric: str) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{namespace}__{name}__{metric}")
    if len(base) > MAX_FILE_NAME:
        base = base[:MAX_FILE_NAME - 33] + "-" + hashlib.sha256(base.encode()).hexdigest()[:32]
    return base + ".json"


class StateTooLarge(ValueError):
    """A document over ``MAX_STATE_FILE_BYTES``."""


def finite_or_none(x) -> float | None:
    """A float for JSON: NaN and +-Inf become null (strict JSON has no NaN)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def json_floats(a: Iterable[float]) -> list[float | None]:
    """An array for JSON: non-finite values become null."""
    return [finite_or_none(x) for x in np.asarray(a, dtype=float)]


def float_array(v: Iterable[float | None]) -> np.ndarray:
    """``json_floats`` read back: null becomes NaN."""
    return np.array([np.nan if x is None else x for x in v], dtype=float)


class JsonStore:
    """JSON documents on disk, one per trigger, written atomically, checked on load."""

    def __init__(self, root: str | os.PathLike, metrics=None, key: bytes | None = None):
        """``metrics``: a ``ScalerMetrics`` whose registry gets the store's error counter and writable gauge.
        ``key``: the HMAC key documents are signed with (``files.load_key``; None: the one under ``root``)."""
        self.root = Path(root)
        self._errors = self._writable = None
        if metrics is not None:
            from .opsmetrics import ops_metrics

            ops = ops_metrics(metrics)
            self._errors, self._writable = ops.state_errors, ops.state_writable
            self._writable.set(1)
        try:
            self.dir = StateDir(self.root)
            self.dir.write_atomic(".write-test", b"ok")
            self.dir.unlink(".write-test")
            self.key = key if key is not None else load_key(None, self.root)
        except OSError as e:
            raise OSError(f"--state-dir: {self.root} is not writable: {e.strerror or e}") from None

    def path(self, namespace: str, name: str, metric: str) -> Path:
        return self.root / file_name(namespace, name, metric)

    def save(self, namespace: str, name: str, metric: str, doc: dict, *, version: int, key: str) -> None:
        """Write ``doc`` with its envelope (version, trigger, key) and its HMAC. OSError/ValueError (a NaN)."""
        full = {"version": version, "namespace": namespace, "name": name, "metric": metric, "key": key, **doc}
        body = json.dumps(full, allow_nan=False, sort_keys=True).encode()
        # the MAC is over the canonical (sorted) form; the file keeps the document's own order
        text = json.dumps({**full, "hmac": sign(self.key, body)}, allow_nan=False).encode()
        if len(text) > MAX_STATE_FILE_BYTES:
            self._count("write_too_large")
            raise StateTooLarge(f"state document of {len(text)} bytes is over the {MAX_STATE_FILE_BYTES} bytes a "
                                "state file may hold (MAX_STATE_FILE_BYTES): not stored, recomputed after a restart")
        try:
            self.dir.write_atomic(file_name(namespace, name, metric), text)
        except OSError:
            self._count("write")
            if self._writable is not None:
                self._writable.set(0)
            raise
        if self._writable is not None:
            self._writable.set(1)

    def _count(self, op: str) -> None:
        if self._errors is not None:
            self._errors.labels(op).inc()

    def load(self, namespace: str, name: str, metric: str, *, version: int, key: str) -> dict | None:
        """The stored document, or None: none, unreadable, not signed with this scaler's key, written for another
        trigger (a copied file), another version, or made for another key."""
        doc, _ = self.verified(file_name(namespace, name, metric))
        if doc is None or not self.written_for(doc, namespace, name, metric):
            return None
        if doc.get("version") != version or doc.get("key") != key:
            return None  # made for other inputs: recompute
        return doc

    def verified(self, fname: str) -> tuple[dict | None, bool]:
        """``(the document in the file fname, signed with this scaler's key; else None, logged, True: present)``;
        ``(None, False)`` when there is no such file."""
        path = self.root / fname
        try:
            doc = json.loads(self.dir.read(fname, MAX_STATE_FILE_BYTES))
        except FileNotFoundError:
            return None, False
        except (OSError, ValueError) as e:
            self._count("read")
            log.warning("ignoring unreadable state file %s: %s", path, getattr(e, "strerror", None) or e)
            return None, True
        if not isinstance(doc, dict):
            log.warning("ignoring malformed state file %s: not a JSON object", path)
            return None, True
        mac = doc.pop("hmac", None)
        try:
            body = json.dumps(doc, allow_nan=False, sort_keys=True).encode()
        except ValueError:
            body = b""
        if not verify(self.key, body, mac):
            self._count("read_unsigned")
            log.warning("ignoring state file %s: not signed with this scaler's state key (forged, edited, or "
                        "written before signing); recomputed", path)
            return None, True
        return doc, True

    def written_for(self, doc: dict, namespace: str, name: str, metric: str) -> bool:
        """Whether a signed document names the trigger it is read for (else logged: a file copied from another)."""
        said = (doc.get("namespace"), doc.get("name"), doc.get("metric"))
        if said == (namespace, name, metric):
            return True
        self._count("read_foreign")
        log.warning("ignoring state file %s: written for %s, not for %s/%s %s (a file copied from another "
                    "trigger); recomputed", self.path(namespace, name, metric),
                    "/".join(str(x)[:80] for x in said[:2]) + f" {str(said[2])[:120]}", namespace, name, metric)
        return False

    def forget(self, namespace: str, name: str, metric: str) -> None:
        self.dir.unlink(file_name(namespace, name, metric))

    def read(self, key3: tuple[str, str, str], decode: Callable[[dict], T], *, version: int, key: str) -> T | None:
        """``decode`` of the stored document for ``(namespace, name, metric)``; None when there is none or
        it cannot be decoded (logged)."""
        doc = self.load(*key3, version=version, key=key)
        if doc is None:
            return None
        try:
            return decode(doc)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            log.warning("ignoring malformed state file %s: %s", self.path(*key3), e)
            return None

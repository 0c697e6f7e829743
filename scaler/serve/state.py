"""What survives a restart: one JSON document per trigger, under ``--state-dir``.

One store serves both background services: the forecast service keeps its
curves directly under ``--state-dir``, the tuner its choices under
``<state-dir>/tuning/``. A document is ``<namespace>__<name>__<metric>.json``
(other characters replaced by ``_``), written atomically (a temporary file,
then ``os.replace``), and carries a ``version`` and a ``key`` (a one-way
digest of the inputs it was made for): ``load`` returns it only when both
match. An unreadable or malformed file is logged and ignored: the service
then recomputes what it held.
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

log = logging.getLogger(__name__)


T = TypeVar("T")

def digest(material: tuple) -> str:
    """A one-way key for what a stored document was made from (it may hold secrets: never stored in clear)."""
    return hashlib.sha256(repr(material).encode()).hexdigest()[:32]


def file_name(namespace: str, name: str, metric: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{namespace}__{name}__{metric}") + ".json"


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

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        probe = self.root / ".write-test"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe.write_text("ok")
            probe.unlink()
        except OSError as e:
            raise OSError(f"--state-dir: {self.root} is not writable: {e.strerror or e}") from None

    def path(self, namespace: str, name: str, metric: str) -> Path:
        return self.root / file_name(namespace, name, metric)

    def save(self, namespace: str, name: str, metric: str, doc: dict, *, version: int, key: str) -> None:
        """Write ``doc`` with its envelope (version, trigger, key). OSError/ValueError (a NaN) on failure."""
        full = {"version": version, "namespace": namespace, "name": name, "metric": metric, "key": key, **doc}
        path = self.path(namespace, name, metric)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(full, allow_nan=False))
        os.replace(tmp, path)

    def load(self, namespace: str, name: str, metric: str, *, version: int, key: str) -> dict | None:
        """The stored document, or None: none, unreadable, another version, or made for another key."""
        path = self.path(namespace, name, metric)
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            log.warning("ignoring unreadable state file %s: %s", path, e)
            return None
        if not isinstance(doc, dict):
            log.warning("ignoring malformed state file %s: not a JSON object", path)
            return None
        if doc.get("version") != version or doc.get("key") != key:
            return None  # made for other inputs: recompute
        return doc

    def forget(self, namespace: str, name: str, metric: str) -> None:
        try:
            self.path(namespace, name, metric).unlink()
        except FileNotFoundError:
            pass

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

"""A trigger's identity: the digest of its metadata map (issue 27, H1).

KEDA sends a trigger's whole metadata map with every call. Its sha256 is part
of the workload's identity, so another map for the same (namespace, name) --
a second forescale trigger in the ScaledObject, an edit, or another gRPC
caller -- is another workload and never replaces one in force.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from typing import Mapping

from ..limits import name_violation
from ..spec import MetadataError, ScalerSpec, parse_metadata
from .workload import ScalerError

log = logging.getLogger("scaler.serve.registry")


class SpecCache:
    """Parsed trigger metadata by (namespace, name, digest), bounded in entries and bytes; a warning once per
    ScaledObject for unknown keys."""

    def __init__(self, max_specs: int, max_bytes: int):
        self.max_specs, self.max_bytes = max_specs, max_bytes
        self._lock = threading.Lock()
        # (namespace, name, digest of the metadata) -> (parsed or error, bytes it stands for)
        self._specs: OrderedDict[tuple, tuple[tuple[ScalerSpec, tuple[str, ...]] | MetadataError, int]] = OrderedDict()
        self._spec_bytes = 0
        self._by_so: dict[tuple[str, str], set[tuple]] = {}  # (namespace, name) -> its cache keys
        self._warned_unknown: dict[tuple[str, str], tuple[str, ...]] = {}

    def identify(self, namespace: str, name: str, metadata: Mapping[str, str]) -> tuple[ScalerSpec, str]:
        """The validated spec (cached) and the metadata digest; ScalerError INVALID_ARGUMENT for names that are
        not Kubernetes names (checked first: nothing is hashed or parsed for them) and for bad metadata."""
        bad = name_violation(namespace, name)
        if bad is not None:
            raise ScalerError("INVALID_ARGUMENT", f"ScaledObject: {bad}")
        ck, size = cache_key(namespace, name, metadata)
        with self._lock:
            got = self._specs.get(ck)
            if got is not None:
                self._specs.move_to_end(ck)
        hit: tuple[ScalerSpec, tuple[str, ...]] | MetadataError
        if got is None:
            try:
                hit = parse_metadata(metadata, name=name, namespace=namespace)
            except MetadataError as e:
                hit = e.with_traceback(None)  # the traceback's frames hold the metadata: never cache them
                size = len(str(e)) + len(namespace) + len(name) + 300  # what is held: the (bounded) message
            with self._lock:
                if ck not in self._specs:
                    self._specs[ck] = (hit, size)
                    self._spec_bytes += size
                    self._by_so.setdefault(ck[:2], set()).add(ck)
                while self._specs and (len(self._specs) > self.max_specs
                                       or self._spec_bytes > self.max_bytes):
                    old, (_, n) = self._specs.popitem(last=False)
                    self._spec_bytes -= n
                    self._unindex(old)
        else:
            hit = got[0]
        if isinstance(hit, MetadataError):
            raise ScalerError("INVALID_ARGUMENT", f"ScaledObject {cut(namespace)}/{cut(name)}: {hit}")
        spec, unknown = hit
        if unknown and self._warned_unknown.get((namespace, name)) != unknown:
            with self._lock:
                self._warned_unknown[(namespace, name)] = unknown
                while len(self._warned_unknown) > self.max_specs:
                    self._warned_unknown.pop(next(iter(self._warned_unknown)))
            log.warning("ScaledObject %s/%s: unknown metadata keys ignored: %s", cut(namespace), cut(name),
                        cut(", ".join(unknown), 300))
        return spec, ck[2]

    def forget(self, namespace: str, name: str, digest: str | None) -> None:
        """One map's entry (``digest``), or with None every entry and warning of the ScaledObject."""
        with self._lock:
            if digest is None:
                self._warned_unknown.pop((namespace, name), None)
            for k in [k for k in self._by_so.get((namespace, name), ()) if digest is None or k[2] == digest]:
                self._spec_bytes -= self._specs.pop(k)[1]
                self._unindex(k)

    def _unindex(self, ck: tuple) -> None:
        keys = self._by_so.get(ck[:2])
        if keys is not None:
            keys.discard(ck)
            if not keys:
                del self._by_so[ck[:2]]

    def __len__(self) -> int:
        return len(self._specs)

    @property
    def bytes(self) -> int:
        return self._spec_bytes

    @property
    def warned(self) -> int:
        return len(self._warned_unknown)


def cut(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"



def metadata_digest(metadata: Mapping[str, str]) -> str:
    """sha256 (hex) of a trigger's metadata map: the same map always, any other map never, gives this digest.
    Its first 8 characters are the ``trigger`` label of the workload's series."""
    h = hashlib.sha256()
    for k, v in sorted(metadata.items()):
        kb, vb = k.encode("utf-8", "replace"), v.encode("utf-8", "replace")
        h.update(len(kb).to_bytes(8, "little") + kb + len(vb).to_bytes(8, "little") + vb)
    return h.hexdigest()


def cache_key(namespace: str, name: str, metadata: Mapping[str, str]) -> tuple[tuple, int]:
    """A fixed-size key for a metadata map (a digest, not the map) and the bytes a spec parsed from it holds."""
    size = sum(len(k.encode("utf-8", "replace")) + len(v.encode("utf-8", "replace")) for k, v in metadata.items())
    return (namespace, name, metadata_digest(metadata)), size + len(namespace) + len(name) + 200


def inherit(wl, siblings, tuning) -> None:
    """A new trigger of a tracked ScaledObject (an edit) starts from what a sibling already knows about the
    same inputs: its observation (same Prometheus and query) and its tuned choice (when ``tuning`` says it still
    applies). Copied, never shared: the sibling keeps serving its own metadata until it is retired. Never its
    forecast: a curve is fitted for its own map (the lead, the quantile, the events it learned), and another
    caller's map must not hand a trigger its forecast (issue 40, item 6). The registry calls this under its
    lock, before ``wl`` is visible."""
    for other in siblings:
        if (other.namespace, other.name) != (wl.namespace, wl.name):
            continue
        if (other.observed_at is not None and wl.observed_at is None
                and (other.declared.prometheus, other.declared.load_identity())
                == (wl.spec.prometheus, wl.spec.load_identity())):
            wl.observed, wl.observed_at, wl.attempted_at = other.observed, other.observed_at, other.attempted_at
            wl.missing_since, wl.missing_at = other.missing_since, other.missing_at
            wl.first_done.set()
        if (wl.tuned is None and other.tuned is not None and tuning is not None
                and tuning.applies(other.tuned, wl.declared)):
            wl.tuned, wl.spec = other.tuned, other.tuned.apply(wl.declared)  # a choice the edit does not concern


"""How the replay reads a ScaledObject's fields: each reader refuses with a ``ManifestError`` that names the
document, the field and what is accepted (``scaler.replay.manifest`` and ``manifesttrigger`` read with them)."""

from __future__ import annotations

from typing import Any, Mapping


class ManifestError(ValueError):
    """A manifest the replay cannot run as KEDA would: names the document, the field and what is accepted."""


def mapping(v: Any, at: str, path: str, optional: bool = False) -> Mapping:
    if v is None and optional:
        return {}
    if not isinstance(v, Mapping):
        raise ManifestError(f"{at}: {path} must be a mapping, got {type(v).__name__}")
    return v


def known(m: Mapping, allowed: set, at: str, path: str) -> None:
    for k in m:
        if k not in allowed:
            raise ManifestError(f"{at}: field {path}.{k} cannot be replayed; the replay honours {path}."
                                f"{{{', '.join(sorted(allowed))}}}")


def whole(m: Mapping, key: str, at: str, path: str) -> int | None:
    v = m.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ManifestError(f"{at}: {path}.{key} {v!r}: accepted is a whole number >= 0")
    return v


def number(v: Any, at: str, path: str, lo: float = 0.0) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ManifestError(f"{at}: {path} {str(v)[:40]!r}: accepted is a number") from None
    if not (x == x and abs(x) != float("inf")) or x < lo:
        raise ManifestError(f"{at}: {path} {str(v)[:40]!r}: accepted is a finite number >= {lo:g}")
    return x

"""Typed reading of one trigger metadata map (``Reader``) and its error (``MetadataError``), for ``scaler.spec``.

Every getter raises ``MetadataError`` naming the key, the value received (cut, escaped, or hidden for a secret)
and the accepted form. A value with a control character is refused whatever the key (``limits.control_violation``);
the PromQL keys read tab, newline and carriage return as spaces first.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

from .durations import DURATION_FORM, format_duration, parse_duration
from .keys import DEFAULTS
from .limits import CONTROL_FORM, control_violation, fold_promql_space, size_violation

SECRET_HINT = "<redacted>"


class MetadataError(ValueError):
    """Bad trigger metadata: maps to gRPC INVALID_ARGUMENT."""

    def __init__(self, key: str, value: str | None, accepted: str, secret: bool = False, shown: str | None = None):
        self.key, self.accepted = key, accepted
        if shown is None:
            shown = "missing" if value is None else (SECRET_HINT if secret else cut(repr(value)))
        super().__init__(f"metadata key '{cut(key, 60)}': got {shown}; accepted: {accepted}")


def cut(text: str, limit: int = 120) -> str:
    """A value as an error shows it: never more than ``limit`` characters (no megabyte echo)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def check_size(md: Mapping[str, str]) -> None:
    """MetadataError when the map is over one of the size limits (``scaler.limits``; checked before anything else)."""
    over = size_violation(md)
    if over is not None:
        key, shown, accepted = over
        raise MetadataError(key, None, accepted, shown=shown)


PROMQL_KEYS = ("query", "coldStartQuery")  # PromQL: tab, newline and carriage return read as spaces
SECRET_KEYS = ("customHeaders",)  # never shown in an error


class Reader:
    """Typed access to one metadata map, each getter raising MetadataError; a value with a control character is
    refused whatever the key (``limits.control_violation``)."""

    def __init__(self, md: Mapping[str, str]):
        self.md = md

    def raw(self, key: str) -> str | None:
        v = self.md.get(key)
        if v is None:
            return None
        if key in PROMQL_KEYS:
            v = fold_promql_space(v)
        bad = control_violation(v)
        if bad is not None:
            raise MetadataError(key, v, f"{CONTROL_FORM}; found {bad}", secret=key in SECRET_KEYS)
        return None if v.strip() == "" else v.strip()

    def get(self, key: str, conv: Callable[[str], object], accepted: str, *, secret: bool = False,
            default: str | None = None, show: Callable[[str], str] | None = None):
        """``conv`` of the value, or of the key's default (``DEFAULTS``, or ``default`` for derived ones)."""
        v = self.raw(key)
        if v is None:
            v = default if default is not None else DEFAULTS.get(key)
            if v is None:
                raise MetadataError(key, None, accepted)
        try:
            return conv(v)
        except (ValueError, TypeError):
            raise MetadataError(key, v, accepted, secret, shown=None if show is None else show(v)) from None

    def number(self, key: str, *, lo: float | None = None, lo_open: bool = False,
               hi: float | None = None, hi_open: bool = False, accepted: str) -> float:
        def conv(v: str) -> float:
            x = float(v)
            if not math.isfinite(x):
                raise ValueError(v)
            if lo is not None and (x < lo or (lo_open and x == lo)):
                raise ValueError(v)
            if hi is not None and (x > hi or (hi_open and x == hi)):
                raise ValueError(v)
            return x
        return self.get(key, conv, accepted)

    def boolean(self, key: str) -> bool:
        def conv(v: str) -> bool:
            low = v.lower()
            if low in ("true", "1", "yes"):
                return True
            if low in ("false", "0", "no"):
                return False
            raise ValueError(v)
        return self.get(key, conv, "true or false")

    def duration(self, key: str, *, minimum: float = 0.0, maximum: float = math.inf) -> float:
        def conv(v: str) -> float:
            d = parse_duration(v)
            if d < minimum or d > maximum:
                raise ValueError(v)
            return d
        extra = (f" (at least {format_duration(minimum) if minimum >= 60 else f'{minimum:g}s'}"
                 + (f", at most {format_duration(maximum)})" if math.isfinite(maximum) else ")")) if minimum else \
            (f" (at most {format_duration(maximum)})" if math.isfinite(maximum) else "")
        return self.get(key, conv, DURATION_FORM + extra)

    def choice(self, key: str, options: tuple[str, ...]) -> str:
        def conv(v: str) -> str:
            for o in options:
                if o.lower() == v.lower():
                    return o
            raise ValueError(v)
        return self.get(key, conv, " | ".join(options))

"""Durations as trigger metadata and the CLI write them: ``90s``, ``15m``, ``6h``, ``14d``, ``2w``, ``1h30m``."""

from __future__ import annotations

import math
import re

_DURATION = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*(w|d|h|m|s|ms))+\s*$")
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|w|d|h|m|s)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
DURATION_FORM = "a duration such as 90s, 15m, 6h, 14d, 2w, 1h30m, or plain seconds"


def parse_duration(text: str) -> float:
    """'1h30m' -> 5400.0; plain numbers are seconds. Raises ValueError."""
    s = text.strip()
    try:
        v = float(s)
    except ValueError:
        if not _DURATION.match(s):
            raise ValueError(f"not a duration: {text!r}") from None
        v = sum(float(n) * _UNIT[u] for n, u in _PART.findall(s))
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"not a duration: {text!r}")
    return v


def format_duration(seconds: float) -> str:
    """1800 -> '30m', 7200 -> '2h', 0 -> '0' (a form ``spec.parse_duration`` reads back)."""
    s = float(seconds)
    if s <= 0:
        return "0"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if s >= size and abs(s / size - round(s / size)) < 1e-9:
            return f"{int(round(s / size))}{unit}"
    return f"{s:g}s"

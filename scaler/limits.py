"""Size and range limits of what the scaler accepts (trigger metadata), in one place; no imports.

Larger metadata is INVALID_ARGUMENT naming the limit (``spec.check_size``);
the lead and horizon caps bound the forecast curves held and stored.
"""

from __future__ import annotations

from typing import Mapping

MAX_VALUE_BYTES = 8 * 1024  # one metadata value (UTF-8)
MAX_KEY_BYTES = 256  # one metadata key name
MAX_METADATA_BYTES = 32 * 1024  # all keys and values of one trigger
MAX_METADATA_KEYS = 64
MAX_LEAD_SECONDS = 86400.0  # L = T_cold + T_buffer
MAX_HISTORY_STEPS = 100_000  # history / step
MAX_HORIZON_STEPS = 50_000  # (2 x refitInterval + L) / step
MAX_RATE = 1e15  # requests/s: a larger observed or planned rate is served as this (KEDA always gets a finite value)


def size_violation(md: Mapping[str, str]) -> tuple[str, str, str] | None:
    """(key, what was got, the limit) for the first limit ``md`` is over; None when within them all."""
    if len(md) > MAX_METADATA_KEYS:
        return "(metadata)", f"{len(md)} keys", f"at most {MAX_METADATA_KEYS} keys (MAX_METADATA_KEYS)"
    total = 0
    for k, v in md.items():
        kb, vb = len(k.encode("utf-8", "replace")), len(v.encode("utf-8", "replace"))
        if kb > MAX_KEY_BYTES:
            return k[:60], f"a key name of {kb} bytes", f"key names of at most {MAX_KEY_BYTES} bytes (MAX_KEY_BYTES)"
        if vb > MAX_VALUE_BYTES:
            return k, f"a value of {vb} bytes", f"values of at most {MAX_VALUE_BYTES} bytes (MAX_VALUE_BYTES)"
        total += kb + vb
    if total > MAX_METADATA_BYTES:
        return "(metadata)", f"{total} bytes", (f"at most {MAX_METADATA_BYTES} bytes in all keys and values "
                                                "(MAX_METADATA_BYTES)")
    return None

"""Size and range limits of what the scaler accepts (trigger metadata), in one place; standard library only.

Larger metadata is INVALID_ARGUMENT naming the limit (``spec.check_size``);
the lead and horizon caps bound the forecast curves held and stored.
"""

from __future__ import annotations

import re
from typing import Mapping

MAX_VALUE_BYTES = 8 * 1024  # one metadata value (UTF-8)
MAX_KEY_BYTES = 256  # one metadata key name
MAX_METADATA_BYTES = 32 * 1024  # all keys and values of one trigger
MAX_METADATA_KEYS = 64
MAX_LEAD_SECONDS = 86400.0  # L = T_cold + T_buffer
MAX_HISTORY_STEPS = 100_000  # history / step
MAX_HORIZON_STEPS = 50_000  # (2 x refitInterval + L) / step
MAX_TIMEOUT_SECONDS = 60.0  # timeout: a Prometheus request's deadline (a slow target holds its slot this long at most)
MAX_RATE = 1e15  # requests/s: a larger observed or planned rate is served as this (KEDA always gets a finite value)
BUDGET_SYNC_SECONDS = 2.0  # a fleet GPU budget's claims fetched from the peers this often (--budget-sync-seconds)


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


# Control characters (C0, DEL, C1): refused in every metadata value (a newline or an ANSI escape would reach a
# Prometheus request, a header or a log line as it is). PromQL keys fold tab, newline and carriage return to a space
# first (a YAML block scalar spreads a query over lines; PromQL reads them as whitespace).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_PROMQL_SPACE = re.compile(r"[\t\n\r]")
CONTROL_FORM = "text without control characters (none of U+0000-U+001F, U+007F-U+009F)"


def fold_promql_space(text: str) -> str:
    """Tab, newline and carriage return (whitespace to PromQL) as spaces."""
    return _PROMQL_SPACE.sub(" ", text)


def control_violation(text: str) -> str | None:
    """Where ``text`` holds a control character (e.g. "U+000A at character 4"); None when it holds none."""
    m = _CONTROL.search(text)
    return None if m is None else f"U+{ord(m.group()):04X} at character {m.start() + 1}"


# -- what the server holds (issue 27) ------------------------------------------------------------------------
MAX_TRACKED = 2000  # tracked triggers (workloads) per server; a new one beyond evicts an unproven one, else
# is RESOURCE_EXHAUSTED
MAX_TRACKED_PER_NAMESPACE = 1000  # ... and per namespace (--max-triggers-per-namespace): half the cap
MAX_STATE_FILE_BYTES = 512 * 1024  # one state document; x MAX_TRACKED x 2 stores fits the chart's 1 GiB emptyDir
MAX_INSTANT_BODY_BYTES = 1 << 20  # an instant-query answer (decompressed); one series is well under 1 KB
MAX_RANGE_BODY_BYTES = 8 << 20  # one range-query chunk (decompressed): 11,000 points of one series is ~0.4 MB
# Kubernetes' own limits: a namespace is a DNS-1123 label, a ScaledObject name a DNS-1123 subdomain
MAX_NAMESPACE_BYTES = 63
MAX_NAME_BYTES = 253
_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"


def name_violation(namespace: str, name: str) -> str | None:
    """Why ``namespace``/``name`` cannot be a Kubernetes namespace / object name; None when they can."""
    if not 0 < len(namespace) <= MAX_NAMESPACE_BYTES or not re.fullmatch(_LABEL, namespace):
        return (f"namespace of {len(namespace)} characters is not a Kubernetes namespace (a DNS-1123 label: at most "
                f"{MAX_NAMESPACE_BYTES} characters of a-z, 0-9 and '-', starting and ending with a letter or digit)")
    if not 0 < len(name) <= MAX_NAME_BYTES or not re.fullmatch(rf"{_LABEL}(\.{_LABEL})*", name):
        return (f"name of {len(name)} characters is not a Kubernetes object name (a DNS-1123 subdomain: at most "
                f"{MAX_NAME_BYTES} characters of a-z, 0-9, '-' and '.', starting and ending with a letter or digit)")
    return None

EVENTS_DIRS = ("/etc/forescale",)  # where the server reads eventsFile files unless told otherwise (--events-dir)
CAPACITY_DIRS = ("/etc/forescale",)  # where the server reads capacityModel files unless told otherwise (--capacity-dir)

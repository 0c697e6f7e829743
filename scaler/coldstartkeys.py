"""The trigger keys of ``coldStartFrom: cluster`` (``coldStartWorkload`` or ``coldStartSelector``,
``coldStartQuantile``, ``coldStartWindow``, ``coldStartMinSamples``): ``parse_source`` reads them into a
``ClusterSource`` (``scaler.spec.parse_metadata`` calls it; a bad key is a ``ColdStartKeyError``, which the spec
turns into its MetadataError) and ``to_metadata`` writes one back. ``scaler.coldstart`` estimates T_cold from the
start-ups of the pods a ``ClusterSource`` names.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Mapping

from .durations import DURATION_FORM, format_duration, parse_duration

KINDS = ("Deployment", "StatefulSet")
WINDOW_BOUNDS = (3600.0, 30 * 86400.0)
MIN_SAMPLES_BOUNDS = (1, 10000)
SOURCES = ("metadata", "cluster")


@dataclass(frozen=True)
class ClusterSource:
    """``coldStartFrom: cluster``: which pods, which quantile, over what window."""

    kind: str = ""  # Deployment | StatefulSet; "" with a selector
    name: str = ""
    selector: str = ""  # PromQL label matchers on kube_pod_labels, e.g. label_app="vllm"
    quantile: float = 0.9
    window_seconds: float = 7 * 86400.0
    min_samples: int = 10

    def describe(self) -> str:
        return f"{self.kind}/{self.name}" if self.kind else f"pods with {{{self.selector}}}"


class ColdStartKeyError(ValueError):
    """A bad key: (key, value, accepted); ``scaler.spec`` turns it into a MetadataError."""

    def __init__(self, key: str, value: str | None, accepted: str):
        self.key, self.value, self.accepted = key, value, accepted
        super().__init__(key)


WORKLOAD_FORM = "Deployment/NAME or StatefulSet/NAME (in the ScaledObject's namespace), e.g. Deployment/vllm"
SELECTOR_FORM = ('PromQL label matchers on kube_pod_labels, e.g. label_app="vllm",label_tier=~"gpu-.*" '
                 '(labels must be in kube-state-metrics\' --metric-labels-allowlist)')
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*')


def parse_selector(text: str) -> str:
    """Label matchers, checked one by one (no other PromQL gets through) and written back canonically."""
    if len(text) > 1000:
        raise ValueError(text)
    out, pos = [], 0
    while True:
        m = _MATCHER.match(text, pos)
        if m is None or m.group(1) in ("namespace", "__name__"):
            raise ValueError(text)
        out.append(f'{m.group(1)}{m.group(2)}"{m.group(3)}"')
        pos = m.end()
        if pos == len(text):
            return ",".join(out)
        if text[pos] != ",":
            raise ValueError(text)
        pos += 1


def parse_source(raw: Callable[[str], str | None], defaults: Mapping[str, str]) -> ClusterSource | None:
    """``coldStartFrom`` and its keys (``raw(key)``: the stripped value or None); ColdStartKeyError on a bad one."""
    def get(key: str) -> str:
        return raw(key) or defaults[key]

    src = get("coldStartFrom").lower()
    if src not in SOURCES:
        raise ColdStartKeyError("coldStartFrom", raw("coldStartFrom"), " | ".join(SOURCES))
    if src != "cluster":
        return None
    kind = name = selector = ""
    wl = raw("coldStartWorkload")
    if wl is not None:
        k, _, n = wl.partition("/")
        kind = next((x for x in KINDS if x.lower() == k.strip().lower()), "")
        if not kind or not _NAME.fullmatch(n.strip()):
            raise ColdStartKeyError("coldStartWorkload", wl, WORKLOAD_FORM)
        name = n.strip()
    sel = raw("coldStartSelector")
    if sel is not None:
        try:
            selector = parse_selector(sel)
        except ValueError:
            raise ColdStartKeyError("coldStartSelector", sel, SELECTOR_FORM) from None
    if not (kind or selector):
        raise ColdStartKeyError("coldStartWorkload", None, WORKLOAD_FORM + " (or coldStartSelector) with coldStartFrom=cluster")
    q = _number(get("coldStartQuantile"))
    if q is None or not 0 < q < 1:
        raise ColdStartKeyError("coldStartQuantile", raw("coldStartQuantile"), "a number strictly between 0 and 1, e.g. 0.9")
    try:
        window = parse_duration(get("coldStartWindow"))
    except ValueError:
        window = -1.0
    if not WINDOW_BOUNDS[0] <= window <= WINDOW_BOUNDS[1]:
        raise ColdStartKeyError("coldStartWindow", raw("coldStartWindow"), DURATION_FORM + " (at least 1h, at most 30d)")
    samples = _number(get("coldStartMinSamples"))
    if samples is None or samples != int(samples) or not MIN_SAMPLES_BOUNDS[0] <= samples <= MIN_SAMPLES_BOUNDS[1]:
        raise ColdStartKeyError("coldStartMinSamples", raw("coldStartMinSamples"), "a whole number in [1, 10000], e.g. 10")
    return ClusterSource(kind, name, selector, q, window, int(samples))


def _number(v: str) -> float | None:
    try:
        x = float(v)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def to_metadata(source: ClusterSource | None) -> dict[str, str]:
    """The metadata keys ``parse_source`` reads back as ``source`` (empty when coldStartFrom is metadata)."""
    if source is None:
        return {}
    md = {"coldStartFrom": "cluster", "coldStartQuantile": f"{source.quantile!r}",
          "coldStartWindow": format_duration(source.window_seconds), "coldStartMinSamples": str(source.min_samples)}
    if parse_duration(md["coldStartWindow"]) != source.window_seconds:
        md["coldStartWindow"] = f"{source.window_seconds:g}s"
    if source.kind:
        md["coldStartWorkload"] = f"{source.kind}/{source.name}"
    if source.selector:
        md["coldStartSelector"] = source.selector
    return md

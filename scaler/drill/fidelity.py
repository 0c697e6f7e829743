"""Rule fidelity: the values the real HPA read, replayed through the project's own HPA rules at the very times
the real HPA synced; ``desiredReplicas`` must be equal at every sync.

The rules are the replay's (``scaler.replay.hpaloop.hpa_sync``: the replica calculator with the tolerance, the
stabilisation windows, the rate limits from each period's start, the bounds, the legacy path without
``behavior``), configured from the HPA object KEDA created (as the apiserver defaulted it) and run on a clock of
milliseconds, at the controller's own instants (its decision when the metrics were in, its scale event when
the write was done: at a policy period's edge a few milliseconds decide). The inputs are what the controller
had: the count it read from the scale, and per metric the value
KEDA served (forescale's answer to that very request; for a ``useCachedMetrics`` trigger the answer of KEDA's
last poll before it; KEDA's fallback value where its health shows the threshold passed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..deadband import to_milli
from ..replay.hpa import EPS, ScalingPolicy, ScalingRules, window_ticks
from ..replay.hpaloop import hpa_sync
from ..replay.keda import rules_arrays
from .audit import Sync, Timelines, milli

TICK = 0.001  # the rule replay's tick: a millisecond
KUBE_TOLERANCE = 0.1  # --horizontal-pod-autoscaler-tolerance's default
DEFAULT_UP = ScalingRules(0.0, "Max", (ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15)))


@dataclass(frozen=True)
class HpaRules:
    """What ``hpa_sync`` needs of one HPA, on the millisecond clock."""

    names: tuple[str, ...]  # its external metrics, in spec order
    targets: np.ndarray  # milli
    per_pod: np.ndarray
    hpa_min: int
    hpa_max: int
    legacy: bool
    up: ScalingRules
    down: ScalingRules
    legacy_down_seconds: float


def _rules(raw: dict | None, default: ScalingRules, tolerance: float) -> ScalingRules:
    if raw is None:
        return ScalingRules(default.window_seconds, default.select, default.policies, tolerance)
    pols = tuple(ScalingPolicy(p["type"], float(p["value"]), float(p["periodSeconds"])) for p in raw.get("policies") or ())
    tol = float(milli(raw["tolerance"])) / 1000 if raw.get("tolerance") is not None else tolerance
    window = raw.get("stabilizationWindowSeconds")
    return ScalingRules(float(default.window_seconds if window is None else window), raw.get("selectPolicy") or "Max",
                        pols, tol)


def rules_of(hpa: dict, legacy_down_seconds: float) -> HpaRules:
    """The rules of an autoscaling/v2 HorizontalPodAutoscaler object (the apiserver's defaulted spec)."""
    spec = hpa["spec"]
    mets = [m for m in spec.get("metrics", []) if m.get("type") == "External"]
    names = tuple(m["external"]["metric"]["name"] for m in mets)
    targets, per_pod = [], []
    for m in mets:
        t = m["external"]["target"]
        per_pod.append(t["type"] == "AverageValue")
        targets.append(float(milli(t["averageValue"] if t["type"] == "AverageValue" else t["value"])))
    beh = spec.get("behavior")
    down_default = ScalingRules(300.0, "Max", (ScalingPolicy("Percent", 100, 15),))
    return HpaRules(names, np.array(targets), np.array(per_pod, dtype=np.bool_), int(spec.get("minReplicas", 1)),
                    int(spec["maxReplicas"]), beh is None,
                    _rules((beh or {}).get("scaleUp"), DEFAULT_UP, KUBE_TOLERANCE),
                    _rules((beh or {}).get("scaleDown"), down_default, KUBE_TOLERANCE), legacy_down_seconds)


@dataclass
class Checked:
    at: float
    current: int
    values: list[float]  # milli per metric (NaN: KEDA served an error)
    ours: int
    live: int | None


@dataclass
class Fidelity:
    syncs: list[Checked] = field(default_factory=list)

    @property
    def mismatches(self) -> list[Checked]:
        return [c for c in self.syncs if c.live is not None and c.ours != c.live]


Served = Callable[[Sync, str], float]  # (sync, metric) -> the value KEDA served it (NaN: an error)


def replay_syncs(tl: Timelines, so: str, rules: HpaRules, served: Served) -> Fidelity:
    """Every recorded sync of ``so``'s HPA through ``hpa_sync``, the HPA's memory carried from sync to sync."""
    syncs = [s for s in tl.syncs[so] if s.current > 0]  # at 0 replicas the HPA does not compute (KEDA owns 0 <-> 1)
    out = Fidelity()
    if not syncs:
        return out
    n = len(syncs) + 2
    rec_t, rec_v = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    ev_t, ev_add, ev_rem = (np.empty(n, dtype=np.int64) for _ in range(3))
    st = np.zeros(4, dtype=np.int64)
    uk, uv, up_p, us = rules_arrays(rules.up, TICK)
    dk, dv, dp, ds = rules_arrays(rules.down, TICK)
    up_w = window_ticks(rules.up.window_seconds, TICK)
    down_w = (rules.legacy_down_seconds / TICK + EPS) if rules.legacy else window_ticks(rules.down.window_seconds, TICK)
    keep = max(up_w, down_w) + (1.0 if rules.legacy else 0.0)
    keep_ev = max([0.0, *up_p, *dp])
    up_starts, dn_starts = np.empty(len(uk), dtype=np.int64), np.empty(len(dk), dtype=np.int64)
    t0 = syncs[0].at
    hpa_min = max(rules.hpa_min, 1)
    all_syncs = tl.syncs[so]
    live_prev: int | None = None
    for s in syncs:
        vm = np.empty(len(rules.names))
        fb = np.zeros(len(rules.names), dtype=np.bool_)  # KEDA's fallback value arrives as the value served
        for j, name in enumerate(rules.names):
            v = served(s, name)
            vm[j] = float(to_milli(v)) if math.isfinite(v) else math.nan
        i = int(round((s.decided - t0) / TICK))  # the controller's time.Now() for windows and periods
        ours = hpa_sync(i, s.current, vm, fb, rules.targets, rules.per_pod, 0, 0, hpa_min, rules.hpa_max, True,
                        rules.up.tolerance, rules.down.tolerance, up_w, down_w, uk, uv, up_p, us, dk, dv, dp, ds,
                        rules.legacy, rec_t, rec_v, ev_t, ev_add, ev_rem, st, keep, keep_ev, up_starts, dn_starts)
        if ours != s.current and s.wrote is not None:  # the HPA stamps its scale event after the write
            ev_t[st[3] - 1] = int(round((s.wrote - t0) / TICK))
        later = [x.at for x in all_syncs if x.at > s.at]
        live = tl.desired_after(so, s.at, later[0] if later else math.inf)
        live = live if live is not None else live_prev
        live_prev = live
        out.syncs.append(Checked(s.at, s.current, vm.tolist(), int(ours), live))
    return out

"""The two comparisons of a drill run, per ScaledObject (one per cache mode).

* **Rule fidelity** (``fidelity``): what KEDA served the HPA at each of its syncs, through the project's HPA
  rules; ``rule_mismatches`` counts the syncs whose desiredReplicas differ. What KEDA served is found here:
  forescale's answer to the very request (live), the answer to KEDA's last poll before it (``useCachedMetrics``),
  Prometheus' answer at that moment (KEDA's own prometheus trigger), KEDA's fallback value once its health shows
  the threshold passed.
* **End to end**: ``forescale backtest --scaledobject`` of the same manifest on the same trace against the live
  replica and pod timelines, on the replay's ticks: ``within_one_share`` (ticks where the replay's replica count
  is within one of the live Deployment's), ``pod_seconds_ratio`` (replay / live, the pods that existed),
  ``scale_up_lag_s`` (the median, over the replay's scale-ups, of how much later the live count reached the
  same level; trace seconds, negative: earlier).
"""

from __future__ import annotations

import csv
import json
import math
import urllib.parse
import urllib.request
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .audit import Sync, Timelines, quantity
from .fidelity import Fidelity, replay_syncs, rules_of

PAIR_SLACK = 0.05  # s: forescale's answer lies inside the HPA's request to the adapter (one clock, loopback)


@dataclass(frozen=True)
class Trig:
    """A trigger of the applied ScaledObject, as the judge needs it."""

    index: int
    kind: str  # external | prometheus
    cached: bool
    query: str = ""


def trigger_index(metric: str) -> int:
    """KEDA names its metrics ``s<index>-...``."""
    head = metric.split("-", 1)[0]
    return int(head[1:]) if head.startswith("s") and head[1:].isdigit() else -1


class PromAt:
    """Instant queries at given wall times (what KEDA's prometheus scaler got then), memoised."""

    def __init__(self, url: str):
        self.url = url
        self.memo: dict[tuple[str, float], float] = {}

    def __call__(self, query: str, t: float) -> float:
        key = (query, round(t, 3))
        if key not in self.memo:
            q = urllib.parse.urlencode({"query": query, "time": f"{t:.3f}"})
            try:
                with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=10) as r:
                    res = json.loads(r.read())["data"]["result"]
                self.memo[key] = float(res[0]["value"][1]) if res else 0.0  # KEDA: ignoreNullValues -> 0
            except (OSError, ValueError, KeyError, IndexError):
                self.memo[key] = math.nan
        return self.memo[key]


def served_values(tl: Timelines, so: str, trigs: dict[int, Trig], prom: PromAt | None,
                  fallback: dict | None) -> Callable[[Sync, str], float]:
    answers = [a for a in tl.answers.get((so, "GetMetrics"), [])]
    walls = [a["wall"] for a in answers]
    health = tl.health.get(so, [])

    def loop_polls() -> list[dict]:
        """forescale's answers that no HPA request asked for: KEDA's polling loop (with useCachedMetrics,
        every answer: the HPA's requests read the cache)."""
        if all(t.cached for t in trigs.values() if t.kind == "external"):
            return list(answers)
        taken = set()
        for s in tl.syncs.get(so, []):
            for recv, done in s.metrics.values():
                for i in range(bisect_right(walls, recv), bisect_right(walls, done + PAIR_SLACK)):
                    taken.add(i)
        return [a for i, a in enumerate(answers) if i not in taken]

    polls = loop_polls()
    poll_walls = [a["wall"] for a in polls]

    def fallback_value(metric: str, recv: float, done: float, target: float) -> float:
        if not fallback:
            return math.nan
        for t, h in health:
            if recv - PAIR_SLACK <= t <= done + 1.0 and metric in h:
                n = h[metric].get("numberOfFailures") or 0
                if h[metric].get("status") == "Failing" and n > int(fallback.get("failureThreshold", 3)):
                    return float(fallback["replicas"]) * target
        return math.nan

    def served(s: Sync, metric: str) -> float:
        recv, done = s.metrics.get(metric, (s.at, s.at))
        trig = trigs.get(trigger_index(metric))
        if trig is None:
            return math.nan
        if trig.kind == "prometheus":
            if prom is None:
                return math.nan
            if trig.cached:
                k = bisect_right(poll_walls, recv) - 1
                return prom(trig.query, polls[k]["wall"]) if k >= 0 else math.nan
            return prom(trig.query, recv)
        if trig.cached:
            k = bisect_right(poll_walls, recv) - 1
            a = polls[k] if k >= 0 else None
        else:  # the adapter's call comes after the HPA's request arrived and ends before its answer went out
            lo, hi = bisect_right(walls, recv), bisect_right(walls, done + PAIR_SLACK)
            a = answers[lo] if hi > lo else None
        if a is not None and "value" in a and a["value"]:
            return float(a["value"][0])
        target = _target(tl, so, metric)
        return fallback_value(metric, recv, done, target)

    return served


def _target(tl: Timelines, so: str, metric: str) -> float:
    for m in tl.hpa.get(so, {}).get("spec", {}).get("metrics", []):
        if m.get("external", {}).get("metric", {}).get("name") == metric:
            t = m["external"]["target"]
            return float(quantity(t.get("averageValue") or t.get("value")))
    return math.nan


def fidelity(tl: Timelines, so: str, trigs: dict[int, Trig], prom: PromAt | None, fallback: dict | None,
             legacy_down_seconds: float) -> Fidelity:
    if so not in tl.hpa:
        return Fidelity()
    rules = rules_of(tl.hpa[so], legacy_down_seconds)
    return replay_syncs(tl, so, rules, served_values(tl, so, trigs, prom, fallback))


# --------------------------------------------------------------------------- end to end


def replay_series(csv_path: Path, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The replay's per-tick times (epoch s), replicas (ready + starting) and ready pods of policy ``name``."""
    from datetime import datetime

    t, rep, ready = [], [], []
    with open(csv_path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            t.append(datetime.fromisoformat(row["timestamp"].replace("Z", "+00:00")).timestamp())
            r, st = float(row[f"{name}_ready"]), float(row[f"{name}_starting"])
            rep.append(r + st)
            ready.append(r)
    return np.array(t), np.array(rep), np.array(ready)


def live_counts(tl: Timelines, deployment: str, initial: int, walls: np.ndarray) -> np.ndarray:
    """The Deployment's spec.replicas at each wall time (its creation count, then every write of its scale)."""
    writes = sorted(tl.scales.get(deployment, []))
    times = [w[0] for w in writes]
    out = np.empty(len(walls), dtype=np.int64)
    for i, w in enumerate(walls):
        k = bisect_right(times, w) - 1
        out[i] = writes[k][2] if k >= 0 else initial
    return out


def pods_alive(tl: Timelines, deployment: str, walls: np.ndarray, ready_only: bool = False) -> np.ndarray:
    pods = tl.pods.get(deployment, {}).values()
    out = np.zeros(len(walls), dtype=np.int64)
    for p in pods:
        start = p.ready if ready_only else p.created
        if start is None:
            continue
        end = p.deleted if p.deleted is not None else math.inf
        out += (walls >= start) & (walls < end)
    return out


@dataclass(frozen=True)
class EndToEnd:
    within_one_share: float
    pod_seconds_ratio: float
    scale_up_lag_s: float | None
    replay_pod_seconds: float
    live_pod_seconds: float


def end_to_end(tl: Timelines, deployment: str, initial: int, csv_path: Path, to_wall: Callable[[np.ndarray], np.ndarray],
               k: float, tick: float = 15.0) -> EndToEnd:
    t, rep, _ = replay_series(csv_path, deployment)
    mid = to_wall(t + tick / 2)  # the middle of each replay tick, on the wall clock
    live = live_counts(tl, deployment, initial, mid)
    within = float(np.mean(np.abs(live - rep) <= 1)) if len(t) else math.nan
    # pods that existed, on a fine grid (1 s of trace time)
    fine = np.arange(t[0], t[-1] + tick, 1.0)
    alive = pods_alive(tl, deployment, to_wall(fine))
    live_ps = float(alive.sum()) * 1.0
    replay_ps = float(rep.sum()) * tick
    return EndToEnd(within, replay_ps / live_ps if live_ps > 0 else math.nan,
                    _lag(t, rep, fine, live_counts(tl, deployment, initial, to_wall(fine))), replay_ps, live_ps)


def _lag(t: np.ndarray, rep: np.ndarray, fine: np.ndarray, live: np.ndarray) -> float | None:
    lags = []
    for i in range(1, len(rep)):
        if rep[i] > rep[i - 1]:
            level, at = rep[i], t[i]
            near = np.flatnonzero((fine >= at - 600) & (live >= level))
            if len(near):
                lags.append(float(fine[near[np.argmin(np.abs(fine[near] - at))]] - at))
    return float(np.median(lags)) if lags else None


# --------------------------------------------------------------------------- KEDA's own loop


@dataclass(frozen=True)
class KedaCheck:
    at: float
    what: str
    ok: bool


def keda_loop(tl: Timelines, so: str, deployment: str, initial: int, cooldown: float, polling: float,
              slack: float = 1.0) -> list[KedaCheck]:
    """KEDA's activation and scale to zero against its own rules, at the polls forescale saw.

    A poll of KEDA's loop is an IsActive call that no HPA request asked for. At a poll that answered true while
    the Deployment was at 0, KEDA must set 1 within ``slack`` s; every write of 1 from 0 by KEDA must follow
    such a poll; every write of 0 by KEDA must come at the first poll after ``cooldown`` s without an active
    answer (within ``polling + slack``)."""
    active = [a for a in tl.answers.get((so, "IsActive"), []) if "value" in a]
    synced = []
    for s in tl.syncs.get(so, []):
        synced += [(recv - PAIR_SLACK, done + PAIR_SLACK) for recv, done in s.metrics.values()]
    polls = [a for a in active if not any(lo <= a["wall"] <= hi for lo, hi in synced)]
    writes = sorted(w for w in tl.scales.get(deployment, []))
    keda_writes = [w for w in writes if w[1] == "keda-operator"]
    times = [w[0] for w in writes]

    def count_at(t: float) -> int:
        k = bisect_right(times, t) - 1
        return writes[k][2] if k >= 0 else initial

    out: list[KedaCheck] = []
    for p in polls:
        if p["value"] and count_at(p["wall"]) == 0:
            ok = any(p["wall"] <= w[0] <= p["done"] + slack and w[2] >= 1 for w in keda_writes)
            out.append(KedaCheck(p["wall"], "activation 0 -> 1 after an active poll", ok))
    for w in keda_writes:
        before = count_at(w[0] - 1e-6)
        if before == 0 and w[2] >= 1:
            ok = any(p["value"] and w[0] - slack - 1.0 <= p["wall"] <= w[0] for p in polls)
            out.append(KedaCheck(w[0], "activation write follows an active poll", ok))
        elif w[2] == 0 and before > 0:
            # KEDA's lastActiveTime: its loop's last active poll (the HPA's calls of IsActive do not set it)
            last = max((p["wall"] for p in polls if p["value"] and p["wall"] < w[0]), default=-math.inf)
            ok = last + cooldown <= w[0] + slack and w[0] <= last + cooldown + polling + slack
            out.append(KedaCheck(w[0], f"scale to zero {w[0] - last:.1f} s after the last active poll "
                                       f"(cooldown {cooldown:g} s)", ok))
    return out

"""The tests a platform team runs before going live, on top of a trace or a flat load, and their checks.

Specs (``--scenario``, times as durations from the start of the simulated span)::

    step:from=0.6,to=1.2,at=2h              the load x to/from from ``at`` on
    spike:from=0.6,to=1.2,at=2h,for=5m      the same for ``for``, then back
    ramp:from=0.6,to=1.2,at=2h,over=30m     from x 1 to x to/from linearly over ``over``, then held
    pod-kill:at=2h,count=1                  ``count`` ready pods killed at ``at`` (their ReplicaSet replaces them)
    pod-kill:rate=2,count=1                 ... at random times, ``rate`` times an hour (seeded)
    node-loss:at=2h,count=1                 ``count`` nodes lost (the one with the most pods first)
    scaler-down:at=2h,for=5m                forescale unreachable for ``for``: every call of a ScaledObject's
                                            forescale trigger fails (KEDA's fallback; ``--scaledobject`` only)

``from``/``to`` are fractions of the capacity provisioned before the load
change; the load is scaled by their ratio (on a flat load of ``from`` x your
capacity, the step lands on ``to`` x it). Checks, per policy
(``scenario_checks`` in the JSON):

* ``scale-out``: from the load change until ready capacity covers the new
  demand and keeps covering it for 5 min (negative: it was ready before the
  change), against T_cold + T_buffer;
* ``p95 during``: P95 latency of the requests arriving from the change until
  2 x (T_cold + T_buffer) after it (at least 10 min; a spike: its duration),
  against ``--p95-target`` (only with one);
* ``recovery``: from a kill until ready capacity covers demand again (0 when
  it never stopped covering it) or is back to its pre-kill level (a policy
  already short before the kill), the worst over the scenario's kills, against 60 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from forecaster.base import Series

from ..spec import format_duration, parse_duration
from .cluster import Kill
from .latency import Waits
from .scenario import EPS

KINDS = ("step", "spike", "ramp", "pod-kill", "node-loss", "scaler-down")
LOAD_KINDS = ("step", "spike", "ramp")
RECOVERY_LIMIT_SECONDS = 60.0
HOLD_SECONDS = 300.0
FORM = ("step|spike|ramp:from=F,to=F,at=DURATION[,for=|over=DURATION] or pod-kill|node-loss:at=DURATION|rate=N"
        "[,count=K] or scaler-down:at=DURATION,for=DURATION (at: from the start of the simulated span)")


@dataclass(frozen=True)
class Spec:
    kind: str
    at: float | None = None  # seconds from the simulated start
    frm: float = 1.0
    to: float = 1.0
    length: float = 0.0  # for (spike) / over (ramp)
    rate: float | None = None  # kills per hour
    count: int = 1
    text: str = field(default="", compare=False)

    @property
    def factor(self) -> float:
        return self.to / self.frm

    def multiplier(self, rel: np.ndarray) -> np.ndarray:
        """The load factor at ``rel`` seconds from the simulated start (1 outside a load scenario)."""
        out = np.ones_like(rel, dtype=np.float64)
        if self.kind not in LOAD_KINDS:
            return out
        assert self.at is not None  # parse: every load scenario has one
        after = rel >= self.at - EPS
        if self.kind == "step":
            out[after] = self.factor
        elif self.kind == "spike":
            out[after & (rel < self.at + self.length - EPS)] = self.factor
        else:
            frac = np.clip((rel - self.at) / self.length, 0.0, 1.0) if self.length > 0 else after.astype(float)
            out = 1.0 + (self.factor - 1.0) * np.where(after, frac, 0.0)
        return out


def parse(text: str) -> Spec:
    """One ``--scenario`` spec; ValueError naming what was wrong and the accepted form."""
    kind, _, rest = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind not in KINDS:
        raise ValueError(f"scenario {text!r}: unknown kind {kind!r}; accepted: {', '.join(KINDS)} ({FORM})")
    kv: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        k, eq, v = part.partition("=")
        if not eq:
            raise ValueError(f"scenario {text!r}: {part!r} is not key=value; accepted: {FORM}")
        key = k.strip().lower()
        if key in kv:
            raise ValueError(f"scenario {text!r}: key {key!r} given twice; accepted: each key once ({FORM})")
        kv[key] = v.strip()
    allowed = {"step": {"from", "to", "at"}, "spike": {"from", "to", "at", "for"},
               "ramp": {"from", "to", "at", "over"}, "pod-kill": {"at", "rate", "count"},
               "node-loss": {"at", "rate", "count"}, "scaler-down": {"at", "for"}}[kind]
    bad = sorted(set(kv) - allowed)
    if bad:
        raise ValueError(f"scenario {text!r}: unknown key {', '.join(bad)}; {kind} accepts {', '.join(sorted(allowed))}")

    def dur(key: str) -> float:
        try:
            v = parse_duration(kv[key])
        except ValueError:
            raise ValueError(f"scenario {text!r}: {key}={kv[key]!r} is not a duration (e.g. 90s, 2h)") from None
        if v < 0:
            raise ValueError(f"scenario {text!r}: {key} must be >= 0")
        return v

    def num(key: str, default: float) -> float:
        if key not in kv:
            return default
        try:
            v = float(kv[key])
        except ValueError:
            raise ValueError(f"scenario {text!r}: {key}={kv[key]!r} is not a number") from None
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"scenario {text!r}: {key} must be a number > 0")
        return v

    if kind in LOAD_KINDS:
        if "at" not in kv:
            raise ValueError(f"scenario {text!r}: {kind} needs at=DURATION ({FORM})")
        length = dur("for") if "for" in kv else dur("over") if "over" in kv else 0.0
        if kind == "spike" and length <= 0:
            raise ValueError(f"scenario {text!r}: spike needs for=DURATION > 0")
        return Spec(kind, dur("at"), num("from", 1.0), num("to", 1.0), length, text=text)
    if kind == "scaler-down":
        if "at" not in kv or "for" not in kv or dur("for") <= 0:
            raise ValueError(f"scenario {text!r}: scaler-down needs at=DURATION and for=DURATION > 0")
        return Spec(kind, dur("at"), length=dur("for"), text=text)
    if ("at" in kv) == ("rate" in kv):
        raise ValueError(f"scenario {text!r}: {kind} needs exactly one of at=DURATION or rate=N (per hour)")
    count = num("count", 1.0)
    if count != int(count):
        raise ValueError(f"scenario {text!r}: count must be a whole number >= 1")
    return Spec(kind, dur("at") if "at" in kv else None, rate=num("rate", 1.0) if "rate" in kv else None,
                count=int(count), text=text)


def check_within(specs: tuple[Spec, ...], span_seconds: float) -> None:
    """ValueError for a scenario whose ``at`` lies at or beyond the end of the simulated span (it would never
    happen in the replay)."""
    for s in specs:
        if s.at is not None and s.at >= span_seconds - EPS:
            raise ValueError(f"scenario {s.text!r}: at={format_duration(s.at)} is not within the simulated span "
                             f"of {format_duration(span_seconds)}; accepted: at from 0 to less than the span "
                             "(--span), counted from its start")


def load_factor(specs: tuple[Spec, ...], rel: np.ndarray) -> np.ndarray:
    out = np.ones_like(np.asarray(rel, dtype=np.float64))
    for s in specs:
        out = out * s.multiplier(np.asarray(rel, dtype=np.float64))
    return out


def with_load(series: Series, start: float, specs: tuple[Spec, ...]) -> Series:
    """The trace with the load scenarios applied (from ``start``, the simulated span's start)."""
    if not any(s.kind in LOAD_KINDS for s in specs):
        return series
    return Series(series.t, series.y * load_factor(specs, series.t - start), series.step)


def flat(rate: float, seconds: float, step: float = 60.0, t0: float = 1_700_006_400.0) -> Series:
    """A flat synthetic load of ``rate`` req/s for ``seconds`` (history and span)."""
    n = int(math.ceil(seconds / step))
    return Series(t0 + step * np.arange(n, dtype=np.float64), np.full(n, float(rate)), step)


def outages(specs: tuple[Spec, ...]) -> list[tuple[float, float]]:
    """The scaler-down windows, ``[at, at + for)`` in seconds from the simulated start."""
    return [(float(s.at or 0.0), float(s.at or 0.0) + s.length) for s in specs if s.kind == "scaler-down"]


def kills(specs: tuple[Spec, ...], n_ticks: int, tick: float, seed: int = 0) -> list[Kill]:
    """The pod kills and node losses on the tick grid (random ones: Poisson times, seeded)."""
    out: list[Kill] = []
    rng = np.random.default_rng(seed)
    for si, s in enumerate(specs):
        if s.kind not in ("pod-kill", "node-loss"):
            continue
        node = s.kind == "node-loss"
        if s.at is not None:
            k = int(round(s.at / tick))
            if 0 <= k < n_ticks:
                out.append(Kill(k, s.count, node, si))
            continue
        assert s.rate is not None  # parse: a kill without at has a rate
        t, end = 0.0, n_ticks * tick
        while True:
            t += float(rng.exponential(3600.0 / s.rate))
            if t >= end:
                break
            out.append(Kill(int(t // tick), s.count, node, si))
    return sorted(out, key=lambda k: k.tick)


# --------------------------------------------------------------------------- checks


def covered(ready: np.ndarray, demand: np.ndarray, qps: float) -> np.ndarray:
    return ready.astype(np.float64) * qps >= demand * (1 - 1e-12) - 1e-12


def scale_out_seconds(ready: np.ndarray, demand: np.ndarray, qps: float, at_tick: int, tick: float) -> float:
    """From the load change to the start of the first 5 min of covered demand (inf: never within the replay)."""
    ok = covered(ready, demand, qps)
    n = len(ok)
    hold = max(1, int(round(HOLD_SECONDS / tick)))
    j = at_tick
    while j < n:
        run_end = min(n, j + hold)
        bad = np.flatnonzero(~ok[j:run_end])
        if bad.size == 0:
            break
        j += int(bad[-1]) + 1
    if j >= n:
        return math.inf
    if j == at_tick:  # ready before the change: how long before
        after = demand[at_tick]
        while j > 0 and ready[j - 1] * qps >= after * (1 - 1e-12) - 1e-12:
            j -= 1
    return (j - at_tick) * tick


def recovery_seconds(ready: np.ndarray, demand: np.ndarray, qps: float, kill_tick: int, tick: float) -> float:
    """From a kill until ready capacity covers demand again, or is back to what it was before the kill.

    0 when the kill left demand covered (a hot spare); a policy already short
    before the kill recovers when it is back to its own pre-kill capacity.
    """
    before = int(ready[kill_tick - 1]) if kill_tick > 0 else int(ready[0])
    r = ready[kill_tick:]
    ok = covered(r, demand[kill_tick:], qps) | (r >= before)
    hit = np.flatnonzero(ok)
    return float(hit[0]) * tick if hit.size else math.inf


def checks(policy: str, specs: tuple[Spec, ...], ready: np.ndarray, demand: np.ndarray, qps: float, tick: float,
           lead_seconds: float, kill_list: list[Kill], waits: Waits | None,
           service_seconds: float, timeout: float | None, p95_target: float | None) -> list[dict]:
    """The scenario checks of one policy (``kill_list``: from ``kills``, tagged with their spec's index)."""
    out: list[dict] = []

    def add(check: str, value: float, limit: float) -> None:
        out.append({"policy": policy, "check": check, "value_seconds": value if math.isfinite(value) else None,
                    "limit_seconds": limit, "passed": bool(math.isfinite(value) and value <= limit + EPS)})

    n = len(ready)
    for si, s in enumerate(specs):
        if s.kind in LOAD_KINDS:
            assert s.at is not None  # parse: every load scenario has one
            a = int(round(s.at / tick))
            if not 0 <= a < n:
                continue
            add(f"{s.kind} scale-out ({s.text})", scale_out_seconds(ready, demand, qps, a, tick), lead_seconds)
            if p95_target is not None and waits is not None:
                span = s.length if s.kind == "spike" else max(2 * lead_seconds, 600.0)
                b = min(n, a + max(1, int(math.ceil(span / tick - EPS))))
                add(f"{s.kind} p95 during ({s.text})", waits.quantile(0.95, service_seconds, timeout, (a, b)),
                    p95_target)
        elif s.kind in ("pod-kill", "node-loss"):
            own = [recovery_seconds(ready, demand, qps, k.tick, tick) for k in kill_list if k.tag == si]
            if own:
                add(f"{s.kind} recovery, worst of {len(own)} ({s.text})", max(own), RECOVERY_LIMIT_SECONDS)
    return out

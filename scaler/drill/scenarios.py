"""The drill's scenarios: a trace, a ScaledObject, what happens to the cluster, and how the replay is asked.

Each scenario is run in both of KEDA's cache modes at once: the manifest is applied twice, as
``<name>-live`` (``useCachedMetrics: false``, KEDA's default: the HPA's every request asks forescale) and
``<name>-cached`` (``useCachedMetrics: true`` on every trigger: the HPA reads what KEDA's polling loop cached), each
on its own Deployment. Times below are trace times; the drill runs them ``k`` times faster (``compress``).

* ``step``: a flat 29 req/s for two days, then 58 req/s from 8 min into the span (a 60 % -> 120 % step of the
  capacity of 5 replicas at 48 req/s); Prophet, minReplicaCount 1.
* ``zero``: nothing but a 37 req/s burst from 09:00 to 09:15 every day; seasonal_naive, minReplicaCount 0: the
  forecast wakes the workload from zero before the first request (predictive activation), and it goes back to
  zero after cooldownPeriod.
* ``pod-kill``: a flat 47 req/s; one ready pod of each Deployment is deleted 8 min into the span (its
  ReplicaSet replaces it, Ready T_cold later).
* ``scaler-down``: a flat 38 req/s; forescale is stopped 6 min into the span for 4 min, then started again on its
  state directory (fallback: failureThreshold 3, replicas 8; KEDA v2.21 does not fall back for an unreachable
  external scaler: the drill found that, the replay now models it).
* ``percent``: 243 req/s (25 replicas; ``hpaTolerance: "0"``, no dead-band compensation), then 403 from 5 min
  in, under one scale-up policy, Percent 12 per 50 s: Kubernetes limits 25 replicas to ``ceil(25 x 1.12)`` in
  float64, 29 (28.000000000000004 rounded up), where a careful reading would say 28. (50 s, not 60: a period
  that is a multiple of the sync period puts every step on a few milliseconds' edge, see docs/drill.md.)
* ``behavior``: a ramp from 28 to 87 req/s over 10 min from 5 min in, held, back to 28 at 25 min; ``behavior``
  with Pods and Percent policies, selectPolicy Min up and Max down, both stabilisation windows, and a second
  trigger, KEDA's own ``prometheus`` scaler on the observed rate.

No load sits on a replica boundary (a multiple of qpsPerReplica): there ``ceil`` turns the last bit of a float
(Prometheus' rate of a flat counter is 47.00000000001 one scrape and 46.9999999999 the next) into a replica.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np

from .procs import DrillError

DAY = 86400.0
STEP = 60.0
HISTORY = 2 * DAY
TRIGGER_KINDS = ("external", "prometheus")  # the drill has a source for these; cron runs on the wall clock
FORESCALE_ADDRESS = "forescale-scaler-address"  # replaced by the drill's forescale


@dataclass(frozen=True)
class Event:
    """Something the drill does to the cluster at ``at`` seconds into the span."""

    kind: str  # "kill-pods" | "stop-scaler"
    at: float
    count: int = 1
    seconds: float = 0.0  # stop-scaler: how long

    def replay_spec(self) -> str:
        """The same event for ``forescale backtest --scenario``."""
        if self.kind == "kill-pods":
            return f"pod-kill:at={self.at:g}s,count={self.count}"
        return f"scaler-down:at={self.at:g}s,for={self.seconds:g}s"


@dataclass(frozen=True)
class Scenario:
    name: str
    rates: np.ndarray  # req/s per STEP interval, history then span
    span_start_index: int  # the first interval of the span
    manifest: dict  # one ScaledObject (its triggers' forescale metadata in trace time)
    cold_start_seconds: float = 180.0
    qps_per_replica: float = 10.0
    events: tuple[Event, ...] = ()
    t0: float = 0.0  # epoch seconds of the first interval (set by ``place``)
    extra_series: tuple[str, ...] = field(default=())  # prometheus triggers fed with the observed rate
    own_times: bool = False  # a user's trace keeps its timestamps (``place`` leaves it)

    @property
    def span_seconds(self) -> float:
        return (len(self.rates) - self.span_start_index) * STEP

    @property
    def span_start(self) -> float:
        return self.t0 + self.span_start_index * STEP

    @property
    def times(self) -> np.ndarray:
        return self.t0 + STEP * np.arange(len(self.rates), dtype=np.float64)


def scaled_object(name: str, triggers: list[dict], **spec) -> dict:
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": name},
            "spec": {"scaleTargetRef": {"name": name}, "pollingInterval": 30, "cooldownPeriod": 300,
                     "minReplicaCount": 1, "maxReplicaCount": 40, **spec, "triggers": triggers}}


def forescale_trigger(**meta: str) -> dict:
    base = {"scalerAddress": FORESCALE_ADDRESS, "serverAddress": "http://prometheus", "query": "rate(requests[2m])",
            "qpsPerReplica": "10", "coldStartSeconds": "180", "history": "2d", "minHistory": "1d",
            "refitInterval": "30m", "tuning": "off", "model": "prophet"}
    return {"type": "external", "name": "forescale", "metadata": {**base, **meta}}


def _flat(rate: float, span_minutes: int) -> np.ndarray:
    return np.full(int(HISTORY / STEP) + span_minutes, rate)


def _daily(minutes: int, start_min: int, end_min: int, rate: float, span_from: int) -> tuple[np.ndarray, int]:
    """A burst each day from ``start_min`` to ``end_min`` (minutes of the day); the span starts at minute
    ``span_from`` of the third day and lasts ``minutes``."""
    n = int(2 * DAY / STEP) + span_from + minutes
    minute_of_day = np.arange(n) % 1440
    y = np.where((minute_of_day >= start_min) & (minute_of_day < end_min), rate, 0.0)
    return y, int(2 * DAY / STEP) + span_from


def builtins(short: bool = False) -> dict[str, Scenario]:
    """The five scenarios (``short``: the CI's shorter step)."""
    h = int(HISTORY / STEP)
    step_min = 16 if short else 30
    step = _flat(29.0, step_min)
    step[h + 8:] = 58.0
    zero, zero_start = _daily(40, 9 * 60, 9 * 60 + 15, 37.0, 8 * 60 + 50)
    ramp = _flat(28.0, 40)
    ramp[h + 5:h + 15] = np.linspace(28.0, 87.0, 10)
    ramp[h + 15:h + 25] = 87.0
    behavior = {"horizontalPodAutoscalerConfig": {"behavior": {
        "scaleUp": {"stabilizationWindowSeconds": 60, "selectPolicy": "Min",
                    "policies": [{"type": "Pods", "value": 2, "periodSeconds": 30},
                                 {"type": "Percent", "value": 50, "periodSeconds": 30}]},
        "scaleDown": {"stabilizationWindowSeconds": 120, "selectPolicy": "Max",
                      "policies": [{"type": "Pods", "value": 1, "periodSeconds": 30},
                                   {"type": "Percent", "value": 20, "periodSeconds": 60}]}}}}
    percent = _flat(243.0, 15)
    percent[h + 5:] = 403.0
    twelve = {"horizontalPodAutoscalerConfig": {"behavior": {
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                    "policies": [{"type": "Percent", "value": 12, "periodSeconds": 50}]}}}}
    prom = {"type": "prometheus", "name": "observed",
            "metadata": {"serverAddress": "http://prometheus", "query": "observed", "threshold": "10"}}
    return {
        "step": Scenario("step", step, h, scaled_object("step", [forescale_trigger()])),
        "zero": Scenario("zero", zero, zero_start, scaled_object(
            "zero", [forescale_trigger(model="seasonal_naive")], minReplicaCount=0)),
        "pod-kill": Scenario("pod-kill", _flat(47.0, 25), h, scaled_object("pod-kill", [forescale_trigger()]),
                             events=(Event("kill-pods", 8 * 60.0),)),
        "scaler-down": Scenario("scaler-down", _flat(38.0, 25), h, scaled_object(
            "scaler-down", [forescale_trigger()], fallback={"failureThreshold": 3, "replicas": 8}),
            events=(Event("stop-scaler", 6 * 60.0, seconds=4 * 60.0),)),
        "percent": Scenario("percent", percent, h, scaled_object(
            "percent", [forescale_trigger(hpaTolerance="0")], maxReplicaCount=60, advanced=twelve)),
        "behavior": Scenario("behavior", ramp, h, scaled_object(
            "behavior", [forescale_trigger(), prom], advanced=behavior), extra_series=("observed",)),
    }


def place(sc: Scenario, wall_now: float, k: float, lead_in: float) -> Scenario:
    """The scenario's trace laid on epoch seconds so that the whole drill stays in the wall clock's past (the
    backfilled blocks never meet Prometheus' live head): the span starts on a day boundary plus its own time of
    day, at least ``(k - 1) x (lead_in + span) + 2 days`` before now."""
    if sc.own_times:
        return sc
    needed = (k - 1) * (lead_in + sc.span_seconds) + 2 * DAY
    day0 = math.floor((wall_now - needed - sc.span_start_index * STEP) / DAY) * DAY
    return Scenario(**{**sc.__dict__, "t0": day0})


def compress(manifest: dict, k: float) -> dict:
    """The ScaledObject as the drill applies it: every period KEDA and the HPA hold divided by ``k``
    (pollingInterval, cooldownPeriod, initialCooldownPeriod, behavior's windows and periods). Each must come
    out a whole number of seconds (KEDA's and the HPA's fields are integers): DrillError naming the field."""
    m = copy.deepcopy(manifest)
    spec = m.setdefault("spec", {})

    def div(where: str, value: float) -> int:
        q = value / k
        if abs(q - round(q)) > 1e-9 or (value > 0 and round(q) < 1):
            raise DrillError(f"{where}: {value:g} s is not a whole number of seconds at k={k:g} ({q:g} s); choose a "
                             f"k that divides it (--k 1 runs uncompressed)")
        return int(round(q))

    for key, default in (("pollingInterval", 30), ("cooldownPeriod", 300), ("initialCooldownPeriod", 0)):
        spec[key] = div(f"spec.{key}", float(spec.get(key, default)))
    beh = spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior")
    for direction in ("scaleUp", "scaleDown"):
        rules = (beh or {}).get(direction)
        if not rules:
            continue
        if "stabilizationWindowSeconds" in rules:
            rules["stabilizationWindowSeconds"] = div(f"behavior.{direction}.stabilizationWindowSeconds",
                                                      float(rules["stabilizationWindowSeconds"]))
        elif direction == "scaleDown":  # the API's default of 300 s, compressed like the rest
            rules["stabilizationWindowSeconds"] = div("behavior.scaleDown.stabilizationWindowSeconds (default)", 300)
        for i, p in enumerate(rules.get("policies", ())):
            p["periodSeconds"] = div(f"behavior.{direction}.policies[{i}].periodSeconds", float(p["periodSeconds"]))
    return m


def check_triggers(manifest: dict) -> None:
    """DrillError for a trigger the drill has no source for."""
    for i, t in enumerate(manifest.get("spec", {}).get("triggers", ())):
        kind = t.get("type")
        if kind not in TRIGGER_KINDS:
            raise DrillError(f"spec.triggers[{i}] ({t.get('name') or kind}): type {kind!r} has no source in the drill; "
                             f"it runs external (forescale) and prometheus triggers (cron follows the wall clock, "
                             f"which the drill compresses; other scalers need their own systems)")
        if kind == "external":
            meta = t.get("metadata", {})
            if meta.get("coldStartFrom", "metadata") != "metadata" or meta.get("coldStartQuery"):
                raise DrillError(f"spec.triggers[{i}]: coldStartFrom/coldStartQuery read the cluster's start-ups; "
                                 f"the drill's pods start in coldStartSeconds exactly: remove them for the drill")


def from_trace(name: str, t: np.ndarray, y: np.ndarray, step: float, manifest: dict, span_seconds: float) -> Scenario:
    """A user's trace (rates over intervals ``[t_i, t_i + step)``) and ScaledObject as a drill scenario: the last
    ``span_seconds`` drilled, the trigger's ``history`` (or 2 days) before it backfilled. T_cold and qpsPerReplica
    are the forescale trigger's ``coldStartSeconds`` and ``qpsPerReplica``."""
    if step > STEP and abs(step / STEP - round(step / STEP)) < 1e-9:  # a coarser trace: the same rate each minute
        reps = int(round(step / STEP))
        t = (t[:, None] + STEP * np.arange(reps)[None, :]).ravel()
        y = np.repeat(y, reps)
    elif abs(step - STEP) > 1e-9:
        raise DrillError(f"the trace's interval is {step:g} s: the drill takes 60 s or a multiple of it (a finer "
                         f"trace is averaged to 60 s when read)")
    check_triggers(manifest)
    ext = [tr for tr in manifest["spec"]["triggers"] if tr.get("type") == "external"]
    if not ext:
        raise DrillError("the ScaledObject has no external (forescale) trigger to drill")
    meta = ext[0].get("metadata", {})
    try:
        cold = float(meta.get("coldStartSeconds", 180))
        qps = float(meta.get("qpsPerReplica") or meta.get("threshold") or "nan")
    except ValueError:
        raise DrillError("the forescale trigger's coldStartSeconds and qpsPerReplica must be numbers") from None
    if not (qps > 0 and cold >= 0 and math.isfinite(cold)):
        raise DrillError("the forescale trigger needs qpsPerReplica > 0 and coldStartSeconds >= 0")
    from ..spec import parse_duration

    history = parse_duration(meta.get("history", "2d")) if meta.get("history") else HISTORY
    n_span = int(math.ceil(span_seconds / STEP))
    n_hist = int(math.ceil(min(history, 14 * DAY) / STEP))
    if len(y) < n_span + int(DAY / STEP):
        raise DrillError(f"the trace holds {len(y) * STEP / 3600:.1f} h: a drill of {span_seconds / 3600:.2g} h needs "
                         f"it plus at least a day of history before it (minHistory's default)")
    keep = min(len(y), n_span + n_hist)
    t, y = t[-keep:], np.asarray(y[-keep:], dtype=np.float64)
    extra = tuple(tr.get("name") or f"trigger{i}" for i, tr in enumerate(manifest["spec"]["triggers"])
                  if tr.get("type") == "prometheus")
    so = copy.deepcopy(manifest)
    so.setdefault("spec", {}).setdefault("scaleTargetRef", {})["name"] = so["metadata"]["name"]
    sc = Scenario(name, y, keep - n_span, so, cold_start_seconds=cold, qps_per_replica=qps, extra_series=extra)
    return Scenario(**{**sc.__dict__, "t0": float(t[0]), "own_times": True})

"""What the server keeps of an LLM trigger beside its load: the capacity it learns online and a short history of
the token mix, the capacity used, the queue and the latencies, for the status page and the metrics.

An LLM trigger is one with ``tokenQuery``, ``capacityModel`` or the closed loop's queries (``applies``). After
each refresh the refresher hands its observation and the model server's signals to ``note`` (under the
registry's lock): the learner (``scaler.learned``, with ``queueQuery`` and ``readyReplicasQuery``) takes the load
served, the waiting requests and the ready replicas; a history row is kept (``HISTORY`` at most, the oldest
dropped) and the gauges set. ``factor`` is what ``capacity: learned`` multiplies the plan by (configured / in
force; 1 otherwise); ``export`` says whether the capacity file is in force (``forescale_capacity_model_ok``).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from ..feedback import Signals
from ..learned import CapacityLearner
from ..spec import ScalerSpec
from .capacityfile import reading
from .load import Observed
from .metrics import ScalerMetrics

HISTORY = 720  # rows per trigger: 6 h at a 30 s refresh
COLUMNS = ("t", "requests", "input_tokens", "output_tokens", "load", "waiting", "ready", "ttft", "itl",
           "capacity_per_replica", "used")


def applies(spec: ScalerSpec) -> bool:
    return bool(spec.token_query or spec.capacity.model_file or spec.loop.queries())


def learns(spec: ScalerSpec) -> bool:
    """Saturation can be seen: the waiting requests and the ready replicas are queried."""
    given = {name for name, _ in spec.loop.queries()}
    return {"waiting", "ready"} <= given


@dataclass
class LlmState:
    learner: CapacityLearner | None = None
    rows: deque = field(default_factory=lambda: deque(maxlen=HISTORY))
    clamped: bool = False  # the mix is outside the capacity model's lengths now

    def in_force(self, spec: ScalerSpec) -> float:
        """The per-replica capacity the plan is on (req/s-equivalents): the learned one with ``capacity: learned``."""
        if spec.capacity.learned and self.learner is not None:
            return self.learner.state().in_force
        return spec.qps_per_replica

    def factor(self, spec: ScalerSpec) -> float:
        """configured / in force: > 1 when a replica serves less than qpsPerReplica says (more replicas)."""
        return spec.qps_per_replica / self.in_force(spec)


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 6)


def note(state: LlmState, spec: ScalerSpec, labels: tuple[str, str, str], obs: Observed | None,
         signals: Signals | None, now: float, wall: float, metrics: ScalerMetrics, **learner) -> None:
    """Caller holds the registry's lock: one refresh's observation (``obs``: None when the load failed) and signals
    (None: none queried) learned from, kept and exported. ``now``: the monotonic clock (the learner's), ``wall``:
    the rows' time; ``learner``: the estimator's knobs (``settle``, ``min_samples``; the server's config)."""
    load = math.nan if obs is None else obs.load
    waiting = math.nan if signals is None else signals.waiting
    ready = math.nan if signals is None else signals.ready
    if learns(spec):
        if state.learner is None:
            state.learner = CapacityLearner(spec.qps_per_replica, **learner)
        state.learner.observe(now, load, waiting, ready)
        _export_learned(state, spec, labels, metrics)
    state.clamped = bool(obs is not None and obs.clamped)
    if spec.capacity.model_file:
        metrics.capacity_clamped.labels(*labels).set(1.0 if state.clamped else 0.0)
    for kind, v in (("input", None if obs is None else obs.input_tokens),
                    ("output", None if obs is None else obs.output_tokens)):
        if v is not None and math.isfinite(v):
            metrics.tokens.labels(*labels, kind).set(v)
        else:
            metrics.drop_tokens(labels, kind)
    cap = state.in_force(spec)
    used = load / (ready * cap) if math.isfinite(ready) and ready >= 1 else math.nan
    state.rows.append(tuple(_num(x) for x in (
        wall, math.nan if obs is None else obs.requests, math.nan if obs is None else obs.input_tokens,
        math.nan if obs is None else obs.output_tokens, load, waiting, ready,
        math.nan if signals is None else signals.ttft, math.nan if signals is None else signals.itl, cap, used)))


def _export_learned(state: LlmState, spec: ScalerSpec, labels: tuple[str, str, str], metrics: ScalerMetrics) -> None:
    assert state.learner is not None
    s = state.learner.state()
    metrics.capacity_samples.labels(*labels).set(s.samples)
    metrics.capacity_in_force.labels(*labels).set(state.in_force(spec) / spec.qps_per_replica)
    if s.estimate is None:
        for m in (metrics.capacity_learned, metrics.capacity_ratio):
            try:
                m.remove(*labels)
            except KeyError:
                pass
        return
    metrics.capacity_learned.labels(*labels).set(s.estimate)
    metrics.capacity_ratio.labels(*labels).set(s.estimate / spec.qps_per_replica)


def export(spec: ScalerSpec, labels: tuple[str, str, str], metrics: ScalerMetrics) -> None:
    """With capacityModel: 1 when its file's model is in force as written, else 0 (status and log say why)."""
    if spec.capacity.model_file:
        model, why = reading(spec)
        ok = model is not None and why is None and spec.capacity.model == model
        metrics.capacity_model_ok.labels(*labels).set(1.0 if ok else 0.0)


def view(state: LlmState, spec: ScalerSpec) -> dict:
    """For the status page: the history's columns, the learned capacity, the model and why it is not in force."""
    rows = list(state.rows)
    out: dict = {"columns": list(COLUMNS), "rows": [list(r) for r in rows], "qps_per_replica": spec.qps_per_replica,
                 "capacity_mode": "learned" if spec.capacity.learned else "configured",
                 "targets": {"queue": spec.loop.queue_target, "ttft": spec.loop.ttft_target,
                             "itl": spec.loop.itl_target},
                 "learned": None, "model": None, "clamped": state.clamped}
    if state.learner is not None:
        s = state.learner.state()
        out["learned"] = {"estimate": s.estimate, "ratio": s.ratio, "in_force": s.in_force, "samples": s.samples,
                          "saturated": s.saturated}
    if spec.capacity.model_file:
        m = spec.capacity.model
        _, why = reading(spec)
        out["model"] = {"file": spec.capacity.model_file, "error": why,
                        "in_force": None if m is None else {
                            "model": m.model, "hardware": m.hardware, "qps_per_replica": m.qps_per_replica,
                            "tokens_per_replica": m.token_capacity().tokens_per_replica,
                            "input_weight": m.fit.input_weight, "max_error": m.fit.max_error,
                            "lengths": list(m.lengths)}}
    return out

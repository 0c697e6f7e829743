"""The miss-vs-cost frontier: every policy family over its knob values, through one simulator.

``forescale backtest --sweep``, ``forescale tune`` and the server's
``tuning: auto`` all call ``run`` and ``select``:

    sr = run(trace, Settings(...), Grid(), jobs=2)   # points with miss, cost, Pareto flag
    choice = select(sr.points, target_miss=0.005, max_cost_ratio=None)
    print(render_metadata(metadata_for(choice.point, sr), ...))

How it stays fast (DESIGN.md section 5): each forecast model is fitted once
per refit time over the simulated span (``backtest.run_model``: historical
forecasts from every trace step, every quantile any variant needs taken from
the same fit), and the knob variants are derived from those curves at
decision time: the quantile is picked, level correction, headroom and the
dead-band compensation are applied by the server's own ``policy.decide`` at
each KEDA poll. Every variant is replayed through the same ``simulator``.
Work runs in ``jobs`` processes (model fits first, variants as their curves
arrive).

Families (``policy`` in the JSON) and their knobs (named as the trigger
metadata names them):

* ``reactive``       KEDA's Prometheus scaler, with ``headroom`` x dead-band
                     compensation (``hpaTolerance`` 0 = off)
* ``linear_trend``   the seed predictor: ``quantile`` x ``headroom``
* ``seasonal_naive`` the same day last week/yesterday: ``quantile`` x ``headroom``
* ``predictive``     forescale's default model (prophet): ``quantile`` x
                     ``levelCorrection`` x ``headroom``
* ``hybrid``         an always-warm floor (``floorPercentile`` of the history,
                     expressed as ``minReplicaCount``) plus predictive above it
* ``scheduled``, ``keep_alive``  baselines (not expressible as forescale metadata)
* ``oracle``         perfect foresight: the cost reference (cost_ratio 1), marked,
                     never Pareto-ranked nor selected
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

import numpy as np

from forecaster.base import Forecast, Series

from ..policy import PolicyParams, Reason, decide
from . import backtest as bt
from .hpa import Hpa, poll_ticks, run_hpa
from .policies import Curve, fixed_pool, oracle, planned_values
from .scenario import Outcome, Scenario, Timeline, evaluate

FAMILIES = ("reactive", "linear_trend", "seasonal_naive", "predictive", "hybrid", "scheduled", "keep_alive", "oracle")
# what a ScaledObject with forescale can express (hybrid through minReplicaCount), simplest first: the
# selection prefers the simpler of two configurations of equal cost
SELECTABLE = ("reactive", "linear_trend", "seasonal_naive", "predictive", "hybrid")
FORECAST_FAMILIES = {"linear_trend": "linear_trend", "seasonal_naive": "seasonal_naive"}  # family -> fixed model
COST_TIE = 0.005  # costs within 0.5 % count as equal in the selection
DEFAULT_CLUSTER_TOLERANCE = 0.1


# --------------------------------------------------------------------------- knobs


@dataclass(frozen=True)
class Grid:
    """The knob values swept per family (the family's default configuration is always added)."""

    reactive_headroom: tuple[float, ...] = (1.0, 1.05, 1.1, 1.2, 1.3, 1.5)
    reactive_compensation: tuple[bool, ...] = (False, True)
    quantiles: tuple[float, ...] = (0.5, 0.8, 0.9, 0.95, 0.99)  # predictive
    level_corrections: tuple[float, ...] = (0.0, 1800.0, 14400.0)  # predictive, half-life seconds (0 = off)
    headroom: tuple[float, ...] = (1.0, 1.1)  # the forecast families
    simple_quantiles: tuple[float, ...] = (0.5, 0.9)  # linear_trend, seasonal_naive
    hybrid_floor_percentiles: tuple[float, ...] = (10.0, 25.0)
    scheduled_quantiles: tuple[float, ...] = (0.9, 0.99)
    families: tuple[str, ...] = FAMILIES

    def __post_init__(self) -> None:
        bad = [f for f in self.families if f not in FAMILIES]
        if bad:
            raise ValueError(f"unknown policy family {', '.join(bad)}; accepted: {', '.join(FAMILIES)}")


@dataclass(frozen=True)
class Variant:
    """One configuration of one family."""

    policy: str
    model: str | None = None
    quantile: float | None = None
    level_correction_seconds: float | None = None
    headroom: float = 1.0
    compensation: bool = True  # push the value past the HPA's dead band
    floor_percentile: float | None = None  # hybrid

    @property
    def uses_model(self) -> bool:
        return self.model is not None

    def label(self) -> str:
        parts = [self.policy]
        if self.policy in ("predictive", "hybrid") and self.model:
            parts.append(self.model)
        if self.floor_percentile is not None:
            parts.append(f"floor p{self.floor_percentile:g}")
        if self.quantile is not None:
            parts.append(f"q{self.quantile:g}")
        if self.level_correction_seconds is not None and self.policy in ("predictive", "hybrid"):
            parts.append(f"lc {format_duration(self.level_correction_seconds)}")
        if self.policy not in ("scheduled", "keep_alive", "oracle"):
            parts.append(f"x{self.headroom:g}")
            if not self.compensation:
                parts.append("no dead-band comp.")
        return " ".join(parts)


def format_duration(seconds: float) -> str:
    """1800 -> '30m', 7200 -> '2h', 0 -> '0' (a form ``spec.parse_duration`` reads back)."""
    s = float(seconds)
    if s <= 0:
        return "0"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if s >= size and abs(s / size - round(s / size)) < 1e-9:
            return f"{int(round(s / size))}{unit}"
    return f"{s:g}s"


def variants(grid: Grid, settings: bt.Settings) -> list[Variant]:
    """The sweep: every family's knob values, its default configuration first."""
    s = settings
    comp_default = s.hpa_tolerance > 0
    comps = tuple(dict.fromkeys(c for c in grid.reactive_compensation if c is False or s.hpa_tolerance > 0))
    out: list[Variant] = []

    def add(v: Variant) -> None:
        if v not in out:
            out.append(v)

    fams = grid.families
    if "reactive" in fams:
        add(Variant("reactive", compensation=False))  # what KEDA's Prometheus scaler does
        for h in grid.reactive_headroom:
            for c in comps or (False,):
                add(Variant("reactive", headroom=h, compensation=c))
    for fam, model in FORECAST_FAMILIES.items():
        if fam in fams and not ("predictive" in fams and s.model == model):
            add(Variant(fam, model, s.quantile, s.level_correction_seconds, s.headroom, comp_default))
            for q in grid.simple_quantiles:
                for h in grid.headroom:
                    add(Variant(fam, model, q, s.level_correction_seconds, h, comp_default))
    if "predictive" in fams:
        add(Variant("predictive", s.model, s.quantile, s.level_correction_seconds, s.headroom, comp_default))
        for q in grid.quantiles:
            for lc in grid.level_corrections:
                for h in grid.headroom:
                    add(Variant("predictive", s.model, q, lc, h, comp_default))
    if "hybrid" in fams:
        for p in (s.hybrid_floor_percentile, *grid.hybrid_floor_percentiles):
            add(Variant("hybrid", s.model, s.quantile, s.level_correction_seconds, s.headroom, comp_default, p))
    if "scheduled" in fams:
        for q in (s.quantile, *grid.scheduled_quantiles):
            add(Variant("scheduled", quantile=q))
    if "keep_alive" in fams:
        add(Variant("keep_alive"))
    add(Variant("oracle"))  # always: the cost reference
    return out


def is_default(v: Variant, settings: bt.Settings) -> bool:
    """The configuration ``forescale backtest`` runs for this family."""
    s = settings
    if v.policy == "reactive":
        return v.headroom == 1.0 and not v.compensation
    if v.policy in ("linear_trend", "seasonal_naive", "predictive", "hybrid"):
        same = (v.quantile == s.quantile and v.level_correction_seconds == s.level_correction_seconds
                and v.headroom == s.headroom and v.compensation == (s.hpa_tolerance > 0))
        if v.policy == "hybrid":
            return same and v.floor_percentile == s.hybrid_floor_percentile
        return same
    if v.policy == "scheduled":
        return v.quantile == s.quantile
    return True


# --------------------------------------------------------------------------- curves across processes


@dataclass
class Packed:
    """A model's curves as arrays (cheap to send to a worker; one quantile at a time rebuilt there)."""

    model: str
    since: np.ndarray  # (n,) epoch seconds each curve is valid from
    index: np.ndarray  # (n,) row in t/mean/quantiles, -1 = no forecast
    history_max: np.ndarray  # (n,), NaN = None
    unusable: list  # (n,) Reason value or None
    t: np.ndarray  # (m, h)
    mean: np.ndarray
    quantiles: dict[float, np.ndarray]

    @staticmethod
    def from_curves(model: str, curves: Sequence[Curve]) -> "Packed":
        fcs = [c.forecast for c in curves if c.forecast is not None]
        h = len(fcs[0]) if fcs else 0
        if any(len(f) != h for f in fcs):
            raise ValueError("forecasts of unequal length cannot be packed")
        qs = sorted(fcs[0].quantiles) if fcs else []
        index = np.full(len(curves), -1, dtype=np.int64)
        k = 0
        for i, c in enumerate(curves):
            if c.forecast is not None:
                index[i] = k
                k += 1
        stack = (lambda get: np.vstack([get(f) for f in fcs]) if fcs else np.zeros((0, h)))
        return Packed(
            model=model,
            since=np.array([c.since for c in curves], dtype=np.float64),
            index=index,
            history_max=np.array([np.nan if c.history_max is None else c.history_max for c in curves], dtype=float),
            unusable=[None if c.unusable is None else c.unusable.value for c in curves],
            t=stack(lambda f: f.t), mean=stack(lambda f: f.mean),
            quantiles={q: stack(lambda f, q=q: f.quantiles[q]) for q in qs},
        )

    def only(self, qs: Iterable[float]) -> "Packed":
        """The same curves with just the quantiles ``qs`` (what one batch of variants needs)."""
        keep = {q: self.quantiles[q] for q in self.quantiles if any(abs(q - x) < 1e-9 for x in qs)}
        return replace(self, quantiles=keep)

    def curves(self, shift: float = 0.0) -> list[Curve]:
        out = []
        for i in range(len(self.since)):
            k = int(self.index[i])
            fc = None
            if k >= 0:
                fc = Forecast(self.t[k], self.mean[k] + shift, {q: v[k] + shift for q, v in self.quantiles.items()},
                              self.model)
            hm = float(self.history_max[i])
            out.append(Curve(float(self.since[i]), fc, None if not math.isfinite(hm) else hm + shift,
                                 None if self.unusable[i] is None else Reason(self.unusable[i])))
        return out


# --------------------------------------------------------------------------- one variant


@dataclass(frozen=True)
class Context:
    """What every variant needs (plain data: it crosses a process boundary)."""

    scenario: Scenario
    hpa: Hpa
    qps: float
    lead_seconds: float
    tolerance: float  # the emulated HPA's; compensation on = the policy uses it too
    train_t: np.ndarray  # the history before the simulated span (scheduled, hybrid floor)
    train_y: np.ndarray
    train_seconds: float
    peak: float  # the simulated span's peak rate (keep_alive)


@dataclass
class Evaluated:
    variant: Variant
    outcome: Outcome
    reasons: dict
    note: str
    timeline: Timeline | None  # kept for the family's default configuration only
    extra: dict = field(default_factory=dict)  # e.g. hybrid's minReplicaCount


def base_values(ctx: Context, v: Variant, packed: Packed | None) -> tuple[np.ndarray, dict, Hpa, str, dict]:
    """Stage 1 of a decision at every KEDA poll: ``decide`` without headroom and compensation.

    Returns the value per poll (``Decision.base``: max(observed, forecast peak)
    or observed), the reasons counted, the HPA to replay it with, a note and
    extras. Headroom and the dead-band compensation do not change the base
    (``decide`` applies them last), so variants that differ only in those
    share this stage; ``finish`` applies them.
    """
    sc, hpa, qps = ctx.scenario, ctx.hpa, ctx.qps
    extra: dict = {}
    if v.policy == "reactive":
        params = PolicyParams(mode="reactive", lead_seconds=0.0, quantile=0.5, qps_per_replica=qps,
                              headroom=1.0, hpa_tolerance=0.0)
        pv = planned_values(sc, hpa, params, ())
        return pv.values, {}, hpa, "KEDA's Prometheus scaler: the observed rate", extra
    assert packed is not None and v.quantile is not None and v.level_correction_seconds is not None
    params = PolicyParams(mode="forecastAndScale", lead_seconds=ctx.lead_seconds, quantile=v.quantile,
                          qps_per_replica=qps, headroom=1.0, hpa_tolerance=0.0,
                          level_correction_seconds=v.level_correction_seconds)
    if v.policy == "hybrid":
        y = ctx.train_y
        pct = float(v.floor_percentile if v.floor_percentile is not None else 10.0)
        floor_qps = float(np.percentile(y, pct)) if y.size else 0.0
        floor = int(math.ceil(floor_qps / qps - 1e-9)) if floor_qps > 0 else 0
        shift = floor * qps
        pv = planned_values(sc, hpa, params, packed.curves(shift), observed_offset=shift)
        h2 = replace(hpa, min_replicas=max(hpa.min_replicas, floor), max_replicas=max(hpa.max_replicas, floor))
        extra["minReplicaCount"] = max(hpa.min_replicas, floor)
        return (pv.values, pv.reasons, h2,
                f"{floor} always-warm replica(s) (p{pct:g} of the history) + predictive above them", extra)
    pv = planned_values(sc, hpa, params, packed.curves())
    return pv.values, pv.reasons, hpa, f"decide(forecastAndScale), model {packed.model}", extra


def finish(base: np.ndarray, qps: float, headroom: float, tolerance: float) -> np.ndarray:
    """Stage 2: headroom and dead-band compensation, by ``decide`` itself (reactive mode on the base value)."""
    if headroom == 1.0 and tolerance <= 0:
        return base
    p = PolicyParams(mode="reactive", lead_seconds=0.0, quantile=0.5, qps_per_replica=qps, headroom=headroom,
                     hpa_tolerance=tolerance)
    return np.fromiter((decide(float(b), None, p, 0.0).planned for b in base), dtype=np.float64, count=len(base))


def evaluate_batch(ctx: Context, batch: Sequence[tuple[Variant, bool]], packed: Packed | None) -> list[Evaluated]:
    """Replay configurations through the simulator; ``(variant, keep_timeline)`` pairs.

    Each value is what the server's ``decide`` returns at that poll; the
    decision's expensive part (forecast window, level correction) is shared by
    the variants that differ only in headroom and compensation, and identical
    value sequences are replayed once.
    """
    sc, qps = ctx.scenario, ctx.qps
    stage1: dict[tuple, tuple] = {}
    replayed: dict[tuple, Timeline] = {}
    out: list[Evaluated] = []
    for v, keep in batch:
        if v.policy in ("reactive", "predictive", "linear_trend", "seasonal_naive", "hybrid"):
            k1 = (v.policy, v.model, v.quantile, v.level_correction_seconds, v.floor_percentile)
            if k1 not in stage1:
                stage1[k1] = base_values(ctx, v, packed)
            base, reasons, hpa, note, extra = stage1[k1]
            tol = ctx.tolerance if v.compensation else 0.0
            values = finish(base, qps, v.headroom, tol)
            key = (hpa, values.tobytes())
            if key not in replayed:
                replayed[key] = run_hpa(sc, values, hpa)
            tl = replayed[key]
            if v.headroom != 1.0:
                note += f", x {v.headroom:g}"
            if tol > 0:
                note += ", pushed past the HPA dead band"
            out.append(Evaluated(v, evaluate(sc, tl), dict(reasons), note, tl if keep else None, dict(extra)))
        else:
            out.append(_baseline(ctx, v, keep))
    return out


def evaluate_variant(ctx: Context, v: Variant, packed: Packed | None, keep_timeline: bool = False) -> Evaluated:
    """One configuration (see ``evaluate_batch``)."""
    return evaluate_batch(ctx, [(v, keep_timeline)], packed)[0]


def _baseline(ctx: Context, v: Variant, keep: bool) -> Evaluated:
    sc, hpa, qps = ctx.scenario, ctx.hpa, ctx.qps
    if v.policy == "scheduled":
        weekly = ctx.train_seconds >= 7 * bt.DAY
        prof = bt.hour_profile(ctx.train_t, ctx.train_y, float(v.quantile), weekly)
        times = sc.t0 + sc.tick * poll_ticks(sc.n, hpa, sc.tick)
        vals = np.maximum(prof[bt.hour_slot(times, weekly)], prof[bt.hour_slot(times + ctx.lead_seconds, weekly)])
        tl = run_hpa(sc, vals, hpa)
        note = f"q{v.quantile:g} of each hour of the {'week' if weekly else 'day'} in the history, L ahead"
    elif v.policy == "keep_alive":
        n = int(math.ceil(ctx.peak / qps - 1e-9)) if ctx.peak > 0 else 1
        tl = fixed_pool(sc, n)
        note = f"{n} replicas always ready (the span's peak, in hindsight)"
    elif v.policy == "oracle":
        tl = oracle(sc)
        note = "perfect foresight, pods started exactly T_cold ahead, no HPA limits"
    else:
        raise ValueError(f"unknown policy family {v.policy!r}")
    return Evaluated(v, evaluate(sc, tl), {}, note, tl if keep else None)


def _variants_task(ctx: Context, batch: list[tuple[Variant, bool]], packed: Packed | None) -> list[Evaluated]:
    return evaluate_batch(ctx, batch, packed)


def _fit_task(series: Series, model: str, start: float, end: float, kw: dict) -> tuple[bt.ModelRun, Packed]:
    mr = bt.run_model(series, model, start, end, **kw)
    q = kw["q"]
    band = (round(1 - q, 6), q) if q != 0.5 else (0.5,)
    if tuple(kw["quantiles"]) != band and mr.curves:
        # the report draws the q(1-q) .. q band: run_model took the outermost of all the quantiles asked for
        from forecaster import evaluate

        fcs = [(c.since, c.forecast) for c in mr.curves if c.forecast is not None]
        lvl = kw["level_seconds"]
        lc = evaluate.level_corrected(bt.padded(series.until(end), kw["horizon"] - 1), fcs, lvl) if lvl > 0 else fcs
        k = kw["score_points"] - 1
        mr.lo_at_l = np.array([f.at_quantile(min(band))[k] for _, f in lc], dtype=float)
        mr.hi_at_l = np.array([f.at_quantile(max(band))[k] for _, f in lc], dtype=float)
    packed = Packed.from_curves(model, mr.curves)
    mr.curves = []  # rebuilt from the packed arrays by the caller (smaller to send)
    return mr, packed


# --------------------------------------------------------------------------- the sweep


@dataclass(frozen=True)
class Point:
    """One configuration on the miss-vs-cost plane."""

    variant: Variant
    outcome: Outcome
    cost_ratio: float | None  # replica-hours / oracle's
    pareto: bool
    default: bool  # the configuration `forescale backtest` runs for this family
    extra: dict = field(default_factory=dict)

    @property
    def policy(self) -> str:
        return self.variant.policy

    @property
    def miss(self) -> float:
        return self.outcome.underprovisioned_fraction

    @property
    def cost(self) -> float:
        return self.outcome.replica_hours

    @property
    def selectable(self) -> bool:
        return self.policy in SELECTABLE

    def knobs(self, tolerance: float) -> dict:
        """The knob values in the trigger metadata's vocabulary (JSON-able)."""
        v = self.variant
        k: dict = {}
        if v.model is not None:
            k["model"] = v.model
        if v.quantile is not None:
            k["quantile"] = v.quantile
        if v.level_correction_seconds is not None:
            k["levelCorrection"] = format_duration(v.level_correction_seconds)
        if v.policy in SELECTABLE:
            k["headroom"] = v.headroom
            k["hpaTolerance"] = tolerance if v.compensation else 0.0
        if v.floor_percentile is not None:
            k["floorPercentile"] = v.floor_percentile
        k.update(self.extra)
        return k


@dataclass
class SweepResult:
    result: bt.Result  # the family defaults as a plain backtest result (table, report, JSON contract)
    points: list[Point]
    tolerance: float
    timing: dict[str, float]

    @property
    def oracle_hours(self) -> float:
        return next(p.cost for p in self.points if p.policy == "oracle")


def pareto_flags(miss: Sequence[float], cost: Sequence[float]) -> list[bool]:
    """True for the points no other point dominates (<= on both, < on one): minimise both."""
    m = np.asarray(miss, dtype=float)
    c = np.asarray(cost, dtype=float)
    out = []
    for i in range(len(m)):
        dom = (m <= m[i]) & (c <= c[i]) & ((m < m[i]) | (c < c[i]))
        out.append(not bool(dom.any()))
    return out


def default_jobs() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        n = os.cpu_count() or 1
    return max(1, min(n, 4))


def run(trace: bt.Trace, settings: bt.Settings, grid: Grid = Grid(), *, jobs: int | None = None,
        progress: bt.Progress | None = None, executor: ProcessPoolExecutor | None = None) -> SweepResult:
    """The sweep. ``jobs`` worker processes (default: the usable cores, at most 4; 1 = in this process).

    ``progress(done, total)`` is called as fits and variants finish.
    """
    settings.validate()
    t_all = time.perf_counter()
    series = trace.series
    step = series.step
    su = bt.setup(trace, settings)
    start, end, notes, peak, qps, qps_note = su.start, su.end, su.notes, su.peak, su.qps, su.qps_note
    lead, sc, hpa = su.lead, su.scenario, su.hpa
    L = lead.seconds
    train = bt.slice_series(series, start - settings.history_seconds, start)
    ok = np.isfinite(train.y)
    ctx = Context(sc, hpa, qps, L, settings.hpa_tolerance, train.t[ok], train.y[ok], len(train) * step, peak)

    vs = variants(grid, settings)
    n_cutoffs = int(round((end - start) / step))
    horizon = int(math.ceil((L + step) / step)) + 1
    score_points = max(1, int(math.ceil(L / step - 1e-9)))
    refit_every = max(1, int(round(settings.refit_seconds / step)))
    q = settings.quantile
    models: list[str] = []
    for v in vs:
        if v.model is not None and v.model not in models:
            models.append(v.model)
    if "predictive" in grid.families or "hybrid" in grid.families:  # the accuracy table, as backtest shows it
        for m in bt.ACCURACY_BASELINES:
            if m not in models:
                models.append(m)
    models.sort(key=lambda m: m != settings.model)  # the slow default model first
    need_q: dict[str, set[float]] = {m: {round(1 - q, 6), q} if q != 0.5 else {0.5} for m in models}
    for v in vs:
        if v.model is not None:
            need_q[v.model].add(float(v.quantile))
    fit_kw = {m: dict(horizon=horizon, score_points=score_points, refit_every=refit_every,
                      history_seconds=settings.history_seconds, quantiles=tuple(sorted(need_q[m])), q=q,
                      level_seconds=settings.level_correction_seconds, seed=settings.seed) for m in models}

    # batches: the model-free variants at once; a model's variants per quantile once its curves are there
    free = [(v, is_default(v, settings)) for v in vs if not v.uses_model]
    by_model: dict[str, dict[float, list[tuple[Variant, bool]]]] = {}
    for v in vs:
        if v.uses_model:
            by_model.setdefault(v.model, {}).setdefault(float(v.quantile), []).append((v, is_default(v, settings)))
    n_fits = len(models) * -(-n_cutoffs // refit_every)
    total = n_fits + len(vs)
    tick = (lambda n: progress(n, total)) if progress is not None else (lambda n: None)
    timing: dict[str, float] = {}
    runs: dict[str, bt.ModelRun] = {}
    done: list[Evaluated] = []
    jobs = default_jobs() if jobs is None else max(1, int(jobs))
    if executor is None and jobs <= 1:
        done += _variants_task(ctx, free, None)
        tick(len(free))
        for m in models:
            mr, packed = _fit_task(series, m, start, end, fit_kw[m])
            tick(mr.fits)
            runs[m] = _restore(mr, packed)
            timing[f"forecast_{m}_seconds"] = mr.seconds
            for qq, batch in by_model.get(m, {}).items():
                done += _variants_task(ctx, batch, packed.only([qq]))
                tick(len(batch))
    else:
        own = executor is None
        pool = executor or ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("forkserver"))
        try:
            pending: dict[Future, tuple] = {}
            for m in models:
                pending[pool.submit(_fit_task, series, m, start, end, fit_kw[m])] = ("fit", m)
            for i in range(0, len(free), 8):
                chunk = free[i:i + 8]
                pending[pool.submit(_variants_task, ctx, chunk, None)] = ("var", len(chunk))
            while pending:
                finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                for f in finished:
                    kind, what = pending.pop(f)
                    if kind == "fit":
                        mr, packed = f.result()
                        tick(mr.fits)
                        runs[what] = _restore(mr, packed)
                        timing[f"forecast_{what}_seconds"] = mr.seconds
                        for qq, batch in by_model.get(what, {}).items():
                            part = packed.only([qq])
                            for i in range(0, len(batch), 6):
                                pending[pool.submit(_variants_task, ctx, batch[i:i + 6], part)] = ("var", len(batch[i:i + 6]))
                    else:
                        done += f.result()
                        tick(what)
        finally:
            if own:
                pool.shutdown(wait=True, cancel_futures=True)

    # ---- points, in the sweep's order
    order = {v: i for i, v in enumerate(vs)}
    done.sort(key=lambda e: order[e.variant])
    oracle_h = next(e.outcome.replica_hours for e in done if e.variant.policy == "oracle")
    ranked = [e for e in done if e.variant.policy != "oracle"]
    flags = pareto_flags([e.outcome.underprovisioned_fraction for e in ranked],
                         [e.outcome.replica_hours for e in ranked])
    is_pareto = {id(e): f for e, f in zip(ranked, flags)}
    points = [Point(e.variant, e.outcome, (e.outcome.replica_hours / oracle_h) if oracle_h > 0 else None,
                    is_pareto.get(id(e), False), is_default(e.variant, settings), e.extra) for e in done]

    # ---- the family defaults as a backtest result (the table, the report, the JSON contract)
    pol: dict[str, bt.PolicyRun] = {}
    for e in done:
        if e.timeline is not None and e.variant.policy in bt.POLICIES and e.variant.policy not in pol:
            pol[e.variant.policy] = bt.PolicyRun(e.variant.policy, e.timeline, e.outcome, e.note, e.reasons)
    pol = {k: pol[k] for k in bt.POLICIES if k in pol}
    timing["total_seconds"] = time.perf_counter() - t_all
    timing["variants"] = float(len(vs))
    used = replace(settings, policies=tuple(pol) or settings.policies)
    result = bt.Result(trace, used, qps, qps_note, lead, sc, start, end, runs, pol, notes, timing)
    return SweepResult(result, points, settings.hpa_tolerance, timing)


def _restore(mr: bt.ModelRun, packed: Packed) -> bt.ModelRun:
    mr.curves = packed.curves()
    return mr


# --------------------------------------------------------------------------- selection


@dataclass(frozen=True)
class Selection:
    point: Point | None
    met: bool  # the target miss (and the cost cap) is met
    target_miss: float
    max_cost_ratio: float | None
    message: str


def select(points: Sequence[Point], target_miss: float, max_cost_ratio: float | None = None, *,
           families: Sequence[str] = SELECTABLE) -> Selection:
    """The cheapest configuration whose miss is <= ``target_miss`` (and cost ratio <= ``max_cost_ratio``).

    Only configurations no other feasible one dominates (misses less for no
    more cost) are considered. Costs within 0.5 % count as equal; then the
    simpler configuration wins
    (family order of ``SELECTABLE``, then smaller headroom, no compensation
    before compensation, lower quantile), then the lower miss. When nothing
    meets the target: the lowest-miss configuration within the cost cap (or
    overall when there is no cap or nothing is within it), ``met`` False.
    """
    cands = [p for p in points if p.policy in families and p.policy in SELECTABLE]
    if not cands:
        return Selection(None, False, target_miss, max_cost_ratio, "no selectable configuration was swept")
    within_cap = [p for p in cands if max_cost_ratio is None or (p.cost_ratio is not None and p.cost_ratio <= max_cost_ratio + 1e-12)]
    feasible = [p for p in within_cap if p.miss <= target_miss + 1e-15]
    cap_txt = "" if max_cost_ratio is None else f" and cost <= {max_cost_ratio:g}x oracle"
    if feasible:
        # a dominated point is never the answer: among the non-dominated feasible ones, the cheapest
        flags = pareto_flags([p.miss for p in feasible], [p.cost for p in feasible])
        front = [p for p, f in zip(feasible, flags) if f]
        cheapest = min(p.cost for p in front)
        tied = [p for p in front if p.cost <= cheapest * (1 + COST_TIE) + 1e-12]
        best = min(tied, key=lambda p: (_simplicity(p), p.miss, p.cost))
        return Selection(best, True, target_miss, max_cost_ratio,
                         f"cheapest configuration with missed requests <= {100 * target_miss:g} %{cap_txt}")
    pool = within_cap or cands
    best = min(pool, key=lambda p: (p.miss, p.cost, _simplicity(p)))
    if within_cap:
        why = (f"no configuration meets the target (missed requests <= {100 * target_miss:g} %{cap_txt}); "
               f"this is the lowest miss {'within the cost cap' if max_cost_ratio is not None else 'found'}")
    else:
        why = (f"no configuration is within the cost cap ({max_cost_ratio:g}x oracle); this is the lowest miss "
               f"found, at {best.cost_ratio or float('nan'):.2f}x")
    return Selection(best, False, target_miss, max_cost_ratio, why)


def _simplicity(p: Point) -> tuple:
    v = p.variant
    return (SELECTABLE.index(v.policy), v.headroom, v.compensation, v.quantile or 0.0,
            v.level_correction_seconds or 0.0, v.floor_percentile or 0.0)

"""THE replay engine: a trace through KEDA/HPA with cold starts, for a list of policy variants.

``forescale backtest`` (the family defaults), ``backtest --sweep`` and
``forescale tune`` (every family over its knobs) and the server's
``tuning: auto`` all call ``run``::

    r = run(trace, Settings(...), variants.defaults(settings))      # one configuration per family
    r = run(trace, settings, variants.variants(Grid(), settings), jobs=2)
    choice = frontier.select(r.points, target_miss=0.005)

How it stays fast: each forecast model is fitted once per refit time over the
simulated span (``forecasts.run_model``: historical forecasts from every
trace step, every quantile any variant needs taken from the same fit), and
the variants are derived from those curves at decision time by the server's
own ``policy.decide`` at each KEDA poll (``policies``). Every variant is
replayed through the same HPA emulation (``hpa``). Work runs in ``jobs``
processes (model fits first, variants as their curves arrive).

Pure: no clock but ``time.perf_counter`` for the timing figures, no files, no
terminal; progress is reported through a callback.
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

import numpy as np

from forecaster.base import Series

from ..misstarget import MissTarget, as_target
from ..feedback import Targets
from ..spec import DEFAULTS, LeadTime
from .fitcache import FitCache
from .execution import Job, Work, execute
from .forecasts import ModelRun, band, slice_series
from .frontier import Point, pareto_flags
from .batches import Evaluated, evaluate_batch
from .families import TABLE, family
from .families.oracle import oracle
from .policies import Context
from .prepare import Setup, prepared
from .scenario import Outcome, Scenario, Timeline, evaluate, rate_view
from .settings import ReplayError, Settings, Trace  # noqa: F401 (re-exported: engine.run's inputs)
from .variants import POLICIES, Variant, default_variant, is_default
from .triggers import replay_scaled_objects
from . import llm, tokenload, world
from .llm import LoopSettings

Progress = Callable[[int, int], None]  # (units done since the last call, total units)


@dataclass
class PolicyRun:
    """One family's default configuration as the backtest table shows it."""

    name: str
    timeline: Timeline
    outcome: Outcome
    note: str = ""
    reasons: dict = field(default_factory=dict)
    world: dict = field(default_factory=dict)  # gpu_node_hours, latency... (only with a World)
    llm: dict = field(default_factory=dict)  # ttft_p95_s, itl_p95_s (with tokens or the closed loop: llm)


@dataclass
class Result:
    trace: Trace
    settings: Settings
    qps_per_replica: float
    qps_note: str
    lead: LeadTime
    scenario: Scenario
    sim_start: float
    sim_end: float
    models: dict[str, ModelRun]
    policies: dict[str, PolicyRun]  # the family defaults (the table, the report, the JSON contract)
    notes: list[str]
    timing: dict[str, float]
    points: list[Point] = field(default_factory=list)  # every variant on the miss-vs-cost plane
    tolerance: float = 0.0  # the emulated HPA's scale-up tolerance
    checks: list[dict] = field(default_factory=list)  # scenario_checks (only with scenarios)
    target_miss: float | None = None  # the search's target as a fraction (a relative one resolved)
    reactive_miss: float | None = None  # reactive KEDA's missed fraction (when a relative target needed it)

    @property
    def oracle_hours(self) -> float | None:
        for p in self.points:
            if p.policy == "oracle":
                return p.cost
        o = self.policies.get("oracle")
        if o is not None:
            return o.outcome.replica_hours
        return evaluate(self.scenario, oracle(self.scenario)).replica_hours


def default_jobs() -> int:
    """The usable cores, at most 4."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        n = os.cpu_count() or 1
    return max(1, min(n, 4))


def holiday_kw(settings: Settings, series, ahead: float) -> dict:
    """``run_model``'s holiday arguments for a trace: its holidays from its first point to ``ahead`` past its end,
    and the days the accuracy is split on (holidays and event days)."""
    if not (settings.holidays or settings.events) or not len(series):
        return {}
    days = settings.holiday_days(float(series.t[0]), float(series.t[-1]) + ahead)
    from forecaster.calendar import local_days

    ev: set[int] = set()
    for e in settings.events:  # every local day an event touches, its first to its last
        first, last = (int(x) for x in local_days([e.start, e.end], settings.timezone))
        ev.update(range(first, last + 1))
    return dict(holiday_days=days, holiday_as=settings.holiday_as, special_days=tuple(sorted(set(days) | ev)),
                **({"timezone": settings.timezone} if settings.timezone != DEFAULTS["timezone"] else {}),
                **({"events": tuple(settings.events)} if settings.events else {}))


def run(trace: Trace, settings: Settings, variants: Sequence[Variant], *, score: Sequence[str] = (),
        jobs: int | None = 1, progress: Progress | None = None,
        executor: ProcessPoolExecutor | None = None, target_miss: float | MissTarget | None = None,
        scaled_objects: Sequence = (), trigger_series: Mapping[str, object] | None = None,
        fits: FitCache | None = None, accuracy: bool = True) -> Result:
    """Replay ``variants`` over the trace; ``score``: more models for the accuracy table (``accuracy`` False: no
    table, ``score`` unused, each model's ``scores`` its cutoffs alone, no band at L: for a caller reading neither).

    ``target_miss``: also search each family's headroom for the cheapest value meeting it
    (``policies.evaluate_batch``, ``search``); the points found are added, marked ``searched``. A
    relative target (``0.5x``) is first resolved against reactive KEDA's miss on the same span
    (``Result.target_miss``, ``Result.reactive_miss``).

    ``jobs`` worker processes (None: ``default_jobs()``; 1 = in this process).
    ``progress(done, total)`` is called as fits and variants finish.
    ``scaled_objects``: ``manifest.Plan``s (``manifest.plans(documents)``), each replayed as KEDA and the HPA
    run it and added to the table as a policy named by its ``metadata.name`` (``triggers``);
    ``trigger_series``: a prometheus trigger's series by trigger name (``(t, y)`` arrays or ``"observed"``).
    ``fits``: a ``fitcache.FitCache`` the model fits are taken from and kept in (in this process: with
    ``jobs`` 1 and no executor; with ``settings.aligned`` a later replay of an overlapping span finds them).
    """
    settings.validate()
    t_all = time.perf_counter()
    trace, su = prepared(trace, settings)
    series = trace.series
    if settings.tokens is not None and settings.token_aware:  # the binding load of the two queries' views
        series = tokenload.seen(series, tokenload.weighted(trace, settings.tokens), su.qps, settings.tokens,
                                counts=trace.counts)
    elif trace.counts:  # the history the server fits and predicts from is its query's view of these requests
        series = Series(series.t, rate_view(series.t, series.y, series.step), series.step)
    ctx = context(series, su, settings)
    absolute, reactive_miss = resolved_target(ctx, settings, target_miss)
    vs = checked(variants)
    work = planned(series, su, settings, vs, score if accuracy else (), accuracy)
    tick = (lambda n: progress(n, work.total)) if progress is not None else (lambda n: None)
    done = execute(Job(ctx, series, su.start, su.end, work, absolute),
                   jobs=default_jobs() if jobs is None else max(1, int(jobs)), executor=executor, fits=fits, tick=tick)
    points = points_of(done.evaluated, vs, settings)
    pol = table_of(done.evaluated, settings)
    used = replace(settings, policies=tuple(pol) or settings.policies)
    if scaled_objects:
        pol.update(manifests_replayed(su, series, scaled_objects, trigger_series or {}, settings, work.fit_kw,
                                      done.packs, taken=set(pol)))
    checks = in_world(settings, su, pol, done.runs) if settings.world.active else []
    if settings.llm_figures:  # TTFT and ITL per policy (llm)
        for p in pol.values():
            p.llm = llm.figures(su.scenario, p.timeline, su.serving, settings.world.timeout_seconds)
    timing = {**done.timing, "total_seconds": time.perf_counter() - t_all, "variants": float(len(vs))}
    return Result(trace, used, su.qps, su.qps_note, su.lead, su.scenario, su.start, su.end, done.runs, pol, su.notes,
                  timing, points, settings.hpa_tolerance, checks, absolute, reactive_miss)


# --------------------------------------------------------------------------- run's steps, in order


def context(series, su: Setup, settings: Settings) -> Context:
    """What every variant's evaluation reads: the scenario, the HPA, the history before the span, the trace."""
    step = series.step
    train = slice_series(series, su.start - settings.history_seconds, su.start)
    ok = np.isfinite(train.y)
    upto = slice_series(series, float(series.t[0]), su.end)
    loop = None if settings.loop is None and not settings.capacity_learned else LoopSettings(
        settings.loop or Targets(), su.serving, settings.loop_rule, settings.capacity_learned,
        1.0 / settings.capacity_factor)
    return Context(su.scenario, su.hpa, su.qps, su.lead.seconds, settings.hpa_tolerance, train.t[ok], train.y[ok],
                   len(train) * step, su.peak, upto.t, upto.y, step, tuple(settings.events), loop)


def resolved_target(ctx: Context, settings: Settings,
                    target_miss: float | MissTarget | None) -> tuple[float | None, float | None]:
    """The search's target as a fraction, and reactive KEDA's miss when a relative target (``0.5x``) needed it."""
    target = as_target(target_miss)
    reactive_miss = reactive_missed(ctx, settings) if target is not None and target.relative else None
    return (None if target is None else target.absolute(reactive_miss or 0.0)), reactive_miss


def checked(variants: Sequence[Variant]) -> list[Variant]:
    """The variants once each, every family known (``ReplayError`` naming the accepted ones), the oracle added."""
    vs = list(dict.fromkeys(variants))
    for v in vs:
        try:
            family(v.policy)
        except ValueError as e:
            raise ReplayError(str(e)) from None
    if not any(v.policy == "oracle" for v in vs):
        vs.append(Variant("oracle"))  # the cost reference
    return vs


def planned(series, su: Setup, settings: Settings, vs: list[Variant], score: Sequence[str], accuracy: bool) -> Work:
    """What to fit (each model once, every quantile a variant needs) and which variants wait for which curves."""
    step, L = series.step, su.lead.seconds
    n_cutoffs = int(round((su.end - su.start) / step))
    horizon = int(math.ceil((L + settings.world.extra_lead_seconds + step) / step)) + 1
    score_points = max(1, int(math.ceil(L / step - 1e-9)))
    refit_every = max(1, int(round(settings.refit_seconds / step)))
    q = settings.quantile
    models: list[str] = []
    for m in [v.model for v in vs if v.model is not None] + list(score):
        if m not in models:
            models.append(m)
    models.sort(key=lambda m: m != settings.model)  # the slow default model first
    need_q: dict[str, set[float]] = {m: set(band(q)) for m in models}
    for v in vs:
        if v.model is not None:
            assert v.quantile is not None  # a configuration with a model has its quantile
            need_q[v.model].add(float(v.quantile))
    fit_kw = {m: dict(horizon=horizon, score_points=score_points, refit_every=refit_every,
                      history_seconds=settings.history_seconds, quantiles=tuple(sorted(need_q[m])), q=q,
                      level_seconds=settings.level_correction_seconds, seed=settings.seed, aligned=settings.aligned,
                      accuracy=accuracy, **holiday_kw(settings, series, horizon * step)) for m in models}
    if not settings.holiday_handling:  # tune's no-holidays twin: the holidays still split the accuracy, no more
        for kw in fit_kw.values():
            kw["holiday_days"] = ()
    # batches: the model-free variants at once; a model's variants per quantile once its curves are there
    free = [(v, is_default(v, settings)) for v in vs if v.model is None]
    by_model: dict[str, dict[float, list[tuple[Variant, bool]]]] = {}
    for v in vs:
        if v.model is not None:
            assert v.quantile is not None
            by_model.setdefault(v.model, {}).setdefault(float(v.quantile), []).append((v, is_default(v, settings)))
    refits = -(-n_cutoffs // refit_every)
    return Work(models, fit_kw, free, by_model, refits, len(models) * refits + len(vs))


def points_of(done: list[Evaluated], vs: list[Variant], settings: Settings) -> list[Point]:
    """Every evaluation on the miss-vs-cost plane, in the variants' order (searched points last), Pareto-flagged."""
    order = {v: i for i, v in enumerate(vs)}
    done.sort(key=lambda e: (order.get(e.variant, len(vs)), e.variant.policy))
    oracle_h = next(e.outcome.replica_hours for e in done if e.variant.policy == "oracle")
    ranked = [e for e in done if e.variant.policy != "oracle"]
    flags = pareto_flags([e.outcome.underprovisioned_fraction for e in ranked],
                         [e.outcome.replica_hours for e in ranked])
    is_pareto = {id(e): f for e, f in zip(ranked, flags)}
    return [Point(e.variant, e.outcome, (e.outcome.replica_hours / oracle_h) if oracle_h > 0 else None,
                  is_pareto.get(id(e), False), is_default(e.variant, settings), e.extra) for e in done]


def table_of(done: list[Evaluated], settings: Settings) -> dict[str, PolicyRun]:
    """The family defaults as the backtest table shows them, in the table's order."""
    pol: dict[str, PolicyRun] = {}
    for e in done:
        p = e.variant.policy
        if e.timeline is not None and p in settings.policies and p not in pol:
            pol[p] = PolicyRun(p, e.timeline, e.outcome, e.note, e.reasons)
    return {k: pol[k] for k in TABLE if k in pol}


def manifests_replayed(su: Setup, series, plans: Sequence, trigger_series: Mapping[str, object], settings: Settings,
                       fit_kw: dict, packs: dict, *, taken: set[str]) -> dict[str, PolicyRun]:
    """The ScaledObjects replayed as KEDA and the HPA run them (``triggers``), each a row named by its name."""
    try:
        replayed = replay_scaled_objects(su.scenario, series, su.start, su.end, plans, trigger_series, settings,
                                         fit_kw, packs)
    except KeyError as e:
        raise ReplayError(str(e.args[0])) from None
    out: dict[str, PolicyRun] = {}
    for name, (tl, why, note) in replayed.items():
        if name in taken or name in out or name in POLICIES or name == world.PLACEHOLDER:
            raise ReplayError(f"ScaledObject {name!r} has the name of a policy of the table; rename it "
                              f"(metadata.name): {', '.join(POLICIES + (world.PLACEHOLDER,))} are taken")
        out[name] = PolicyRun(name, tl, evaluate(su.scenario, tl), note, why)
    return out


def reactive_missed(ctx: Context, settings: Settings) -> float:
    """Reactive KEDA's missed fraction (the family default: headroom 1, no dead-band compensation)."""
    e = evaluate_batch(ctx, [(default_variant("reactive", settings), False)], None)[0]
    return e.outcome.underprovisioned_fraction


def in_world(settings: Settings, su: Setup, pol: dict[str, PolicyRun], runs: dict[str, ModelRun]) -> list[dict]:
    """The family defaults through the cluster and the queue (``world``), the placeholder row; the checks."""
    W, sc = settings.world, su.scenario
    held: dict[str, np.ndarray] = {}
    if W.placeholder_policy and "predictive" in pol and settings.model in runs:
        base = pol["predictive"]
        assert base.timeline.value is not None  # a replayed policy's timeline holds the value KEDA got
        held[world.PLACEHOLDER] = world.placeholder_counts(
            sc, su.hpa, base.timeline.value, runs[settings.model].curves, lead_long=su.lead.seconds
            + W.extra_lead_seconds, quantile=settings.quantile,
            level_correction_seconds=settings.level_correction_seconds)
        pol[world.PLACEHOLDER] = PolicyRun(world.PLACEHOLDER, base.timeline, base.outcome,
                                           f"predictive + placeholder pods from the forecast at lead T_node + L = "
                                           f"{W.extra_lead_seconds:g} + {su.lead.seconds:g} s", dict(base.reasons))
    elif W.placeholder_policy:
        su.notes.append("the placeholder policy needs the predictive policy in --policies: not run")
    checks: list[dict] = []
    for name, p in pol.items():
        lv = world.live(W, sc, p.timeline, placeholders=held.get(name, 0), seed=settings.seed)
        p.timeline, p.outcome, p.world = lv.timeline, lv.outcome, lv.metrics()
        checks += world.checks(W, name, sc, lv, su.lead.seconds, settings.seed)
    return checks

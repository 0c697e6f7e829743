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
from datetime import datetime, timezone
from typing import Callable, Mapping, Sequence

import numpy as np

from forecaster.base import Series

from ..misstarget import MissTarget, as_target
from ..deadband import target_refusal
from ..feedback import Targets
from ..spec import DEFAULTS, LeadTime
from .fitcache import FitCache
from .execution import Job, Work, execute
from .forecasts import ModelRun, band, slice_series
from .frontier import Point, pareto_flags
from .hpa import Hpa
from .batches import Evaluated, evaluate_batch
from .families import TABLE, family
from .families.oracle import oracle
from .policies import Context
from .pools import replica_qps
from .scenario import DAY, TICK_SECONDS, Outcome, Scenario, Timeline, evaluate, rate_view, scenario
from .settings import ReplayError, Settings, Trace  # noqa: F401 (re-exported: engine.run's inputs)
from .variants import POLICIES, Variant, default_variant, is_default
from .triggers import replay_scaled_objects
from . import llm, scenarios, tokenload, world
from .llm import LoopSettings

TARGET_PEAK_REPLICAS = 20  # the derived qps per replica makes the simulated peak need about this many
Progress = Callable[[int, int], None]  # (units done since the last call, total units)


def nice_round(x: float) -> float:
    """Round to 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 x 10^k (a figure a person would pick)."""
    if not x > 0:
        return 1.0
    k = math.floor(math.log10(x))
    base = x / 10 ** k
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if base <= m * 1.0000001:
            return float(m * 10 ** k)
    return float(10 ** (k + 1))


@dataclass(frozen=True)
class Setup:
    """What every run over a trace starts from: the simulated span, the replica size, the KEDA/HPA scenario."""

    start: float
    end: float
    notes: list[str]
    peak: float
    qps: float
    qps_note: str
    lead: LeadTime
    scenario: Scenario
    hpa: Hpa
    serving: llm.Serving = llm.Serving()  # the latency model's inputs (TTFT and ITL; the loop's signals)


def setup(trace: Trace, settings: Settings) -> Setup:
    """The simulated span (the end of the trace, leaving history before it), qps per replica and scenario."""
    series = trace.series
    step = series.step
    t_first, t_end = float(series.t[0]), float(series.t[-1] + step)
    length = t_end - t_first
    notes: list[str] = []
    if settings.sim_start is not None:
        start = float(settings.sim_start)
        if not t_first < start < t_end:
            raise ReplayError(f"--sim-start {iso(start)} is outside the trace ({iso(t_first)} .. {iso(t_end)})")
    else:
        start = max(t_end - settings.span_seconds, t_first + min(settings.history_seconds, length / 2))
    start = t_first + math.ceil((start - t_first) / step - 1e-9) * step  # on the trace grid
    end = min(t_end, start + settings.span_seconds)
    if end - start < 4 * TICK_SECONDS:
        raise ReplayError(f"the trace is too short to simulate: {length:g} s")
    if start - t_first < settings.history_seconds:
        notes.append(f"only {(start - t_first) / DAY:.2f} d of history before the simulated span "
                     f"(history window {settings.history_seconds / DAY:g} d)")
    span = slice_series(series, start, end)
    peak = float(np.nanmax(span.y)) if np.isfinite(span.y).any() else 0.0
    if settings.qps_per_replica is None:
        one = nice_round(peak / TARGET_PEAK_REPLICAS) if peak > 0 else 1.0
        qps = replica_qps(one, settings.world.placement)  # given, the CLI scaled it (--pools)
        qps_note = (f"derived: the simulated peak {peak:.4g} req/s / {TARGET_PEAK_REPLICAS} replicas, "
                    f"rounded (--qps-per-replica to set it)" + ("" if qps == one else f", x{qps / one:g} on the "
                                                               f"first pool (--pools)"))
    else:
        qps, qps_note = float(settings.qps_per_replica), "given"
    if why := target_refusal(qps):
        raise ReplayError(f"qpsPerReplica {why}; it was {qps_note}")
    sc = scenario(series.t, series.y, step, start, end, cold_start_seconds=settings.cold_start_seconds,
                      qps_per_replica=qps)
    serving = llm.Serving(settings.itl_seconds)
    if settings.tokens is not None:
        requests = sc
        sc = token_scenario(trace, settings, sc, start, end, qps)
        notes += token_notes(trace, settings, start, end, qps)
        cap = settings.tokens
        assert trace.input_tokens is not None
        prompt = tokenload.prompt_per_request(requests, series, trace.input_tokens, start, end)
        serving = llm.Serving(settings.itl_seconds,
                              settings.capacity_factor * cap.input_weight * prompt / cap.tokens_per_replica)
    if settings.capacity_factor != 1.0:  # the replicas sustain 1/f of what they are configured for
        sc = replace(sc, demand=sc.demand * settings.capacity_factor)
        notes.append(f"capacity overstated x{settings.capacity_factor:g}: a replica sustains 1/"
                     f"{settings.capacity_factor:g} of qpsPerReplica; judged on {settings.capacity_factor:g} x the "
                     "load (its requests counted in that unit), scaled on the load as it is")
    hpa = Hpa(target=qps, min_replicas=settings.min_replicas, max_replicas=settings.max_replicas,
                  tolerance_up=settings.hpa_tolerance, activation_threshold=settings.activation_threshold)
    return Setup(start, end, notes, peak, qps, qps_note, settings.lead(), sc, hpa, serving)

def token_notes(trace: Trace, settings: Settings, start: float, end: float, qps: float) -> list[str]:
    """What the table says of the tokens: where they bind, and where a measured model's lengths were left."""
    cap = settings.tokens
    assert cap is not None
    series, k = trace.series, tokenload.weighted(trace, cap)
    share = tokenload.token_share(series, k, qps, cap, start, end)
    notes = [f"tokens: {cap.tokens_per_replica:g} weighted tokens/s per replica (input weight {cap.input_weight:g}); "
             f"the tokens bind in {100 * share:.1f} % of the simulated intervals; scaled on "
             f"{'the binding load' if settings.token_aware else 'req/s alone'}"]
    if cap.lengths is not None:
        held = tokenload.clamped_share(series, k, cap, start, end)
        notes.append(f"capacity model: the mix left the lengths it was measured on ({cap.lengths[0]:.4g}-"
                     f"{cap.lengths[1]:.4g} weighted tokens per request) in {100 * held:.1f} % of the simulated "
                     "intervals: held to the nearest measured length (clamped, not extrapolated)")
    return notes


def token_scenario(trace: Trace, settings: Settings, requests: Scenario, start: float, end: float,
                   qps: float) -> Scenario:
    """The scenario judged on the binding load of requests and tokens (``tokenload``); ReplayError without tokens."""
    cap = settings.tokens
    assert cap is not None
    if not trace.has_tokens:
        raise ReplayError(f"--tokens-per-replica needs a trace with token counts: {trace.source} has no "
                          "'input_tokens' and 'output_tokens' columns; accepted: a CSV with the header "
                          "timestamp,count,input_tokens,output_tokens (sums per interval)")
    s = trace.series
    k = tokenload.weighted(trace, cap)
    kw = dict(cold_start_seconds=settings.cold_start_seconds, qps_per_replica=qps)
    toks = scenario(s.t, tokenload.equivalent(s.y, k, qps, cap), s.step, start, end, **kw)
    need = scenario(s.t, tokenload.judged(s, k, qps, cap), s.step, start, end, **kw)
    return tokenload.with_need(requests, toks, need, token_aware=settings.token_aware, cap=cap)


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


def iso(t: float) -> str:
    """Epoch seconds as ISO-8601 UTC (messages, tables)."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def prepared(trace: Trace, settings: Settings) -> tuple[Trace, Setup]:
    """The trace as replayed (the world's load scenarios added to it) and its ``Setup``."""
    su = setup(trace, settings)
    W = settings.world
    if W.active and any(sp.kind in scenarios.LOAD_KINDS for sp in W.specs()):  # the load scenarios on the trace
        if settings.tokens is not None:
            raise ReplayError("--scenario's load scenarios change the requests, not the tokens: accepted is one "
                              "of them, --tokens-per-replica or a load --scenario")
        trace = replace(trace, series=scenarios.with_load(trace.series, su.start, W.specs()))
        su = replace(setup(trace, replace(settings, qps_per_replica=su.qps)), qps_note=su.qps_note)
    return trace, su


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

"""The backtest run: replay a trace through KEDA/HPA with cold starts, per policy.

Produces the forecasts a server would have had at each moment (fitted only on
data before each cutoff, refitted on a cadence), scores them (rolling
origin), turns them into KEDA values with the server's own ``decide``,
replays those through the HPA emulation and scores SLO and cost per policy.

The forecasts are made once per model and shared by the accuracy table and
the simulation: cutoffs every trace step over the simulated span, a model
refitted every ``refit`` seconds on the ``history`` window before the cutoff,
and in between asked for a forecast from the cutoff (``predict(origin=...,
recent=...)``). Accuracy is scored on the curve as the policy uses it: level-
corrected at the cutoff with the observed rate (``forecaster.level``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Callable, Sequence

import numpy as np

from forecaster.base import FitFailed, Forecast, InsufficientHistory, Series

from ..policy import PolicyParams, Reason
from ..spec import DEFAULTS, LeadTime, parse_duration
from .hpa import Hpa, poll_ticks, run_hpa
from .policies import Curve, fixed_pool, oracle, planned_values, reactive_values
from .scenario import DAY, TICK_SECONDS, Outcome, Scenario, Timeline, evaluate, scenario

POLICIES = ("reactive", "linear_trend", "predictive", "hybrid", "scheduled", "keep_alive", "oracle")
ACCURACY_BASELINES = ("seasonal_naive", "linear_trend")
TARGET_PEAK_REPLICAS = 20  # the derived qps per replica makes the simulated peak need about this many
Progress = Callable[[int, int], None]  # (units done since the last call, total units)


class BacktestError(ValueError):
    """Bad input for a backtest: the message names what was wrong and what is accepted."""


@dataclass(frozen=True)
class Trace:
    name: str
    series: Series
    hygiene: str  # the HygieneReport's one-line message
    source: str  # path or URL
    attribution: str = ""


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Settings:
    """Every knob of one backtest (defaults: the scaler's documented metadata defaults)."""

    cold_start_seconds: float = float(DEFAULTS["coldStartSeconds"])
    qps_per_replica: float | None = None  # None: derived from the simulated span's peak
    buffer_seconds: float | None = None  # None: forecastErrorSeconds + schedulingSeconds + readinessSeconds
    model: str = DEFAULTS["model"]
    quantile: float = float(DEFAULTS["quantile"])
    history_seconds: float = parse_duration(DEFAULTS["history"])
    refit_seconds: float = 3600.0
    span_seconds: float = 2 * DAY
    sim_start: float | None = None
    level_correction_seconds: float = parse_duration(DEFAULTS["levelCorrection"])
    headroom: float = float(DEFAULTS["headroom"])
    hpa_tolerance: float = float(DEFAULTS["hpaTolerance"])  # the emulated HPA's and the policy's
    min_replicas: int = 0
    max_replicas: int = 100
    activation_threshold: float = 0.0
    hybrid_floor_percentile: float = 10.0
    policies: tuple[str, ...] = POLICIES
    seed: int = 0

    def lead(self) -> LeadTime:
        lt = LeadTime(self.cold_start_seconds, float(DEFAULTS["forecastErrorSeconds"]),
                      float(DEFAULTS["schedulingSeconds"]), float(DEFAULTS["readinessSeconds"]),
                      self.buffer_seconds)
        return lt

    def validate(self) -> None:
        if not (math.isfinite(self.cold_start_seconds) and self.cold_start_seconds >= 0):
            raise BacktestError(f"cold start {self.cold_start_seconds:g} s: accepted is a finite number of seconds >= 0")
        if self.qps_per_replica is not None and not (math.isfinite(self.qps_per_replica) and self.qps_per_replica > 0):
            raise BacktestError(f"qps per replica {self.qps_per_replica:g}: accepted is a finite number > 0")
        if not 0 < self.quantile < 1:
            raise BacktestError(f"quantile {self.quantile:g}: accepted is a number strictly between 0 and 1")
        unknown = [p for p in self.policies if p not in POLICIES]
        if unknown or not self.policies:
            raise BacktestError(f"unknown policy {', '.join(map(repr, unknown)) or '(none given)'}; "
                                f"accepted: {', '.join(POLICIES)} (comma-separated)")
        _quiet_prophet_import()
        from forecaster.models import NAMES

        if self.model not in NAMES:
            raise BacktestError(f"unknown model {self.model!r}; accepted: {', '.join(NAMES)}")
        if not 0 <= self.hpa_tolerance < 1:
            raise BacktestError(f"HPA tolerance {self.hpa_tolerance:g}: accepted is a fraction in [0, 1)")
        if self.refit_seconds <= 0 or self.span_seconds <= 0 or self.history_seconds <= 0:
            raise BacktestError("--refit, --span and --history must be positive durations")
        if self.min_replicas < 0 or self.max_replicas < max(1, self.min_replicas):
            raise BacktestError(f"replica bounds {self.min_replicas}..{self.max_replicas}: accepted is "
                                f"0 <= min <= max, max >= 1")


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


# --------------------------------------------------------------------------- forecasts


@dataclass
class ModelRun:
    """One model's forecasts over the simulated span and their scores."""

    model: str
    curves: list[Curve]
    target_t: np.ndarray  # the time each scored forecast point is for (horizon = L), for the report
    mean_at_l: np.ndarray
    lo_at_l: np.ndarray
    hi_at_l: np.ndarray
    scores: dict = field(default_factory=dict)
    fits: int = 0
    failures: dict = field(default_factory=dict)
    seconds: float = 0.0


def slice_series(series: Series, lo: float, hi: float) -> Series:
    """Points with ``lo <= t < hi`` (views, no copy)."""
    a = int(np.searchsorted(series.t, lo, side="left"))
    b = int(np.searchsorted(series.t, hi, side="left"))
    return Series(series.t[a:b], series.y[a:b], series.step)


class _Counted:
    """A Forecaster that counts its fits, ticks the progress bar and survives a failed refit.

    ``historical_forecasts`` skips a cutoff on InsufficientHistory; a FitFailed
    (the optimiser gave up) keeps the previous fit, as the server keeps its
    last good curve, or counts as too little history when there is none.
    """

    def __init__(self, inner, progress: Callable[[int], None] | None):
        self.inner, self.name, self.progress = inner, inner.name, progress
        self.fits = 0
        self.failures: dict[str, int] = {}

    def fit(self, series: Series, *, warm_start=None):
        if self.progress:
            self.progress(1)
        try:
            fitted = self.inner.fit(series, warm_start=warm_start)
        except InsufficientHistory:
            self.failures["insufficient_history"] = self.failures.get("insufficient_history", 0) + 1
            raise
        except FitFailed:
            self.failures["fit_failed"] = self.failures.get("fit_failed", 0) + 1
            if warm_start is None:
                raise InsufficientHistory("fit failed with no earlier fit to fall back on") from None
            return warm_start
        self.fits += 1
        return fitted


def padded(series: Series, extra: int) -> Series:
    """The series followed by ``extra`` NaN points: cutoffs may reach its end (NaN actuals are not scored)."""
    t = np.concatenate([series.t, series.t[-1] + series.step * np.arange(1, extra + 1)])
    return Series(t, np.concatenate([series.y, np.full(extra, np.nan)]), series.step)


def _window_max(series: Series, cutoffs: np.ndarray, seconds: float) -> np.ndarray:
    """max of the finite points in ``[c - seconds, c)`` for each cutoff (the absurdity check's history max)."""
    y = np.where(np.isfinite(series.y), series.y, -np.inf)
    lo = np.searchsorted(series.t, cutoffs - seconds, side="left")
    hi = np.searchsorted(series.t, cutoffs, side="left")
    out = np.full(len(cutoffs), np.nan)
    for j, (a, b) in enumerate(zip(lo, hi)):
        if b > a:
            out[j] = float(y[a:b].max())
    return np.where(np.isfinite(out), out, np.nan)


def run_model(series: Series, model: str, start: float, end: float, *, horizon: int, score_points: int,
              refit_every: int, history_seconds: float, quantiles: Sequence[float], q: float,
              level_seconds: float, seed: int = 0, progress: Callable[[int], None] | None = None) -> ModelRun:
    """Historical forecasts from every cutoff in ``[start, end)`` (``forecaster.evaluate``), scored at horizon L.

    A cutoff c sees only points before c; the model is refitted every
    ``refit_every`` cutoffs on the ``history_seconds`` before it and forecasts
    from each cutoff in between. ``horizon`` points per forecast (enough for
    the policy's window from any poll until the next cutoff);
    ``score_points`` = L in steps, the horizon scored.
    """
    from forecaster import evaluate

    _quiet_prophet_import()
    from forecaster.models import make

    t_start = time.perf_counter()
    step = series.step
    fseries = padded(series.until(end), horizon - 1)  # the last cutoff is end - step
    counted = _Counted(make(model, seed=seed, level_half_life=level_seconds), progress)
    fcs = evaluate.historical_forecasts(counted, fseries, start=start, horizon=horizon, stride=1,
                                        train_window=history_seconds, refit_every=refit_every,
                                        quantiles=tuple(quantiles))
    fcs = [(c, f) for c, f in fcs if start - 1e-6 <= c < end]
    cut = np.array([c for c, _ in fcs], dtype=float)
    hmax = _window_max(series, cut, history_seconds) if len(cut) else np.array([])
    curves: list[Curve] = []
    known = set(np.round(cut, 3))
    for c in np.arange(start, end, step):  # cutoffs the model skipped: too little history
        if round(float(c), 3) not in known:
            curves.append(Curve(float(c), None, None, Reason.INSUFFICIENT_HISTORY))
    for (c, f), h in zip(fcs, hmax):
        curves.append(Curve(float(c), f, None if not np.isfinite(h) else float(h)))
    curves.sort(key=lambda cv: cv.since)
    # accuracy, as the policy uses the curve: level-corrected at the cutoff, scored L ahead
    lc = evaluate.level_corrected(fseries, fcs, level_seconds) if level_seconds > 0 else fcs
    season = max(1, int(round(DAY / step)))
    if len(series.until(start)) <= season:
        season = 1
    scores = dict(evaluate.score(fseries, lc, q=q, season=season, h=score_points))
    scores.update(cutoffs=len(fcs), horizon_steps=int(score_points), mase_season_steps=int(season))
    lo_q, hi_q = min(quantiles), max(quantiles)
    k = score_points - 1
    target = np.array([f.t[k] for _, f in lc], dtype=float)
    mean = np.array([f.mean[k] for _, f in lc], dtype=float)
    lo = np.array([f.at_quantile(lo_q)[k] for _, f in lc], dtype=float)
    hi = np.array([f.at_quantile(hi_q)[k] for _, f in lc], dtype=float)
    return ModelRun(model, curves, target, mean, lo, hi, scores, counted.fits, counted.failures,
                    time.perf_counter() - t_start)


def _quiet_prophet_import() -> None:
    """prophet logs 'Importing plotly failed' at import time: noise for a backtest that never uses plotly."""
    import logging

    lg = logging.getLogger("prophet.plot")
    lg.setLevel(logging.CRITICAL)
    if not any(isinstance(h, logging.NullHandler) for h in lg.handlers):
        lg.addHandler(logging.NullHandler())  # else, with propagate off, logging's last-resort handler prints it


# --------------------------------------------------------------------------- policies


def hour_profile(t: np.ndarray, y: np.ndarray, q: float, weekly: bool) -> np.ndarray:
    """The ``q`` quantile of the rate in each hour of the week (168) or of the day (24)."""
    slots = 168 if weekly else 24
    s = hour_slot(t, weekly)
    prof = np.full(slots, np.nan)
    ok = np.isfinite(y)
    overall = float(np.quantile(y[ok], q)) if ok.any() else 0.0
    for k in range(slots):
        v = y[ok & (s == k)]
        prof[k] = float(np.quantile(v, q)) if v.size else overall
    return prof


def hour_slot(t: np.ndarray, weekly: bool) -> np.ndarray:
    h = np.floor(np.asarray(t, dtype=float) / 3600.0).astype(np.int64)
    return (h + 72) % 168 if weekly else h % 24  # epoch 0 was a Thursday: Monday 00:00 -> slot 0


@dataclass
class PolicyRun:
    name: str
    timeline: Timeline
    outcome: Outcome
    note: str = ""
    reasons: dict = field(default_factory=dict)


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
    policies: dict[str, PolicyRun]
    notes: list[str]
    timing: dict[str, float]

    @property
    def oracle_hours(self) -> float | None:
        o = self.policies.get("oracle")
        if o is not None:
            return o.outcome.replica_hours
        return evaluate(self.scenario, oracle(self.scenario)).replica_hours



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
            raise BacktestError(f"--sim-start {iso(start)} is outside the trace ({iso(t_first)} .. {iso(t_end)})")
    else:
        start = max(t_end - settings.span_seconds, t_first + min(settings.history_seconds, length / 2))
    start = t_first + math.ceil((start - t_first) / step - 1e-9) * step  # on the trace grid
    end = min(t_end, start + settings.span_seconds)
    if end - start < 4 * TICK_SECONDS:
        raise BacktestError(f"the trace is too short to simulate: {length:g} s")
    if start - t_first < settings.history_seconds:
        notes.append(f"only {(start - t_first) / DAY:.2f} d of history before the simulated span "
                     f"(history window {settings.history_seconds / DAY:g} d)")
    span = slice_series(series, start, end)
    peak = float(np.nanmax(span.y)) if np.isfinite(span.y).any() else 0.0
    if settings.qps_per_replica is None:
        qps = nice_round(peak / TARGET_PEAK_REPLICAS) if peak > 0 else 1.0
        qps_note = (f"derived: the simulated peak {peak:.4g} req/s / {TARGET_PEAK_REPLICAS} replicas, "
                    f"rounded (--qps-per-replica to set it)")
    else:
        qps, qps_note = float(settings.qps_per_replica), "given"
    sc = scenario(series.t, series.y, step, start, end, cold_start_seconds=settings.cold_start_seconds,
                      qps_per_replica=qps)
    hpa = Hpa(target=qps, min_replicas=settings.min_replicas, max_replicas=settings.max_replicas,
                  tolerance_up=settings.hpa_tolerance, activation_threshold=settings.activation_threshold)
    return Setup(start, end, notes, peak, qps, qps_note, settings.lead(), sc, hpa)


def run(trace: Trace, settings: Settings, *, progress: Progress | None = None) -> Result:
    """The whole backtest. ``progress(done, total)`` is called as model fits finish."""
    settings.validate()
    t_all = time.perf_counter()
    series = trace.series
    step = series.step
    su = setup(trace, settings)
    start, end, notes, peak, qps, qps_note = su.start, su.end, su.notes, su.peak, su.qps, su.qps_note
    lead, sc, hpa = su.lead, su.scenario, su.hpa
    L = lead.seconds
    timing: dict[str, float] = {}

    # ---- forecasts, shared by the accuracy table and the forecast-driven policies
    want = set(settings.policies)
    need_models: list[str] = []
    if want & {"predictive", "hybrid"}:
        need_models.append(settings.model)
    if "linear_trend" in want:
        need_models.append("linear_trend")
    for m in (settings.model, *ACCURACY_BASELINES):  # the accuracy part always compares these
        if m not in need_models:
            need_models.append(m)
    n_cutoffs = int(round((end - start) / step))
    horizon = int(math.ceil((L + step) / step)) + 1
    score_points = max(1, int(math.ceil(L / step - 1e-9)))
    refit_every = max(1, int(round(settings.refit_seconds / step)))
    q = settings.quantile
    quantiles = tuple(sorted({round(1 - q, 6), q})) if q != 0.5 else (0.5,)

    models: dict[str, ModelRun] = {}
    total_fits = len(need_models) * -(-n_cutoffs // refit_every)
    tick = (lambda n: progress(n, total_fits)) if progress is not None else None
    for m in need_models:
        models[m] = run_model(series, m, start, end, horizon=horizon, score_points=score_points,
                              refit_every=refit_every, history_seconds=settings.history_seconds,
                              quantiles=quantiles, q=q, level_seconds=settings.level_correction_seconds,
                              seed=settings.seed, progress=tick)
        timing[f"forecast_{m}_seconds"] = models[m].seconds

    # ---- policies
    t_pol = time.perf_counter()
    params = PolicyParams(mode="forecastAndScale", lead_seconds=L, quantile=q, qps_per_replica=qps,
                          headroom=settings.headroom, hpa_tolerance=settings.hpa_tolerance,
                          level_correction_seconds=settings.level_correction_seconds)
    train = slice_series(series, start - settings.history_seconds, start)
    train_y = train.y[np.isfinite(train.y)]
    runs: dict[str, PolicyRun] = {}
    for name in POLICIES:
        if name not in want:
            continue
        note, reasons = "", {}
        if name == "reactive":
            pv = reactive_values(sc, hpa, qps)
            tl = run_hpa(sc, pv.values, hpa)
            note = "KEDA's Prometheus scaler: value = rate over 2 min, as is"
        elif name in ("linear_trend", "predictive"):
            mr = models["linear_trend" if name == "linear_trend" else settings.model]
            pv = planned_values(sc, hpa, params, mr.curves)
            tl = run_hpa(sc, pv.values, hpa)
            reasons = pv.reasons
            note = f"decide(forecastAndScale), model {mr.model}, q={q:g}, L={L:g}s"
        elif name == "hybrid":
            floor_qps = float(np.percentile(train_y, settings.hybrid_floor_percentile)) if train_y.size else 0.0
            floor = int(math.ceil(floor_qps / qps - 1e-9)) if floor_qps > 0 else 0
            shift = floor * qps
            curves = [Curve(c.since, _shifted(c.forecast, shift) if c.forecast is not None else None,
                                None if c.history_max is None else c.history_max + shift, c.unusable)
                      for c in models[settings.model].curves]
            pv = planned_values(sc, hpa, params, curves, observed_offset=shift)
            h2 = replace(hpa, min_replicas=max(hpa.min_replicas, floor), max_replicas=max(hpa.max_replicas, floor))
            tl = run_hpa(sc, pv.values, h2)
            reasons = pv.reasons
            note = (f"{floor} always-warm replica(s) (p{settings.hybrid_floor_percentile:g} of the history, "
                    f"{floor_qps:.4g} req/s) + predictive above them")
        elif name == "scheduled":
            weekly = len(train) * step >= 7 * DAY
            prof = hour_profile(train.t, train.y, q, weekly)
            times = sc.t0 + sc.tick * poll_ticks(sc.n, hpa, sc.tick)
            vals = np.maximum(prof[hour_slot(times, weekly)], prof[hour_slot(times + L, weekly)])
            tl = run_hpa(sc, vals, hpa)
            note = f"q{q:g} of each hour of the {'week' if weekly else 'day'} in the history, {L:g}s ahead, no observed floor"
        elif name == "keep_alive":
            n = int(math.ceil(peak / qps - 1e-9)) if peak > 0 else 1
            tl = fixed_pool(sc, n)
            note = f"{n} replicas always ready (the simulated span's peak, in hindsight)"
        else:
            tl = oracle(sc)
            note = "perfect foresight, pods started exactly T_cold ahead, no HPA limits"
        runs[name] = PolicyRun(name, tl, evaluate(sc, tl), note, reasons)
    timing["policies_seconds"] = time.perf_counter() - t_pol
    timing["total_seconds"] = time.perf_counter() - t_all
    return Result(trace, settings, qps, qps_note, lead, sc, start, end, models, runs, notes, timing)


def iso(t: float) -> str:
    """Epoch seconds as ISO-8601 UTC (messages, tables)."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _shifted(fc: Forecast, shift: float) -> Forecast:
    if shift == 0:
        return fc
    return Forecast(fc.t, fc.mean + shift, {k: v + shift for k, v in fc.quantiles.items()}, fc.model)


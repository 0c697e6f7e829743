"""``forescale backtest``: replay a request trace through KEDA/HPA with cold starts, per policy.

Orchestration only: load the trace (CSV, Prometheus, or the bundled one),
produce the forecasts a server would have had at each moment (fitted only on
data before each cutoff, refitted on a cadence), score them (rolling origin),
turn them into KEDA values with the server's own ``decide``, replay those
through ``scaler.simulator`` and report SLO and cost per policy.

The forecasts are made once per model and shared by the accuracy table and
the simulation: cutoffs every trace step over the simulated span, a model
refitted every ``refit`` seconds on the ``history`` window before the cutoff,
and in between asked for a forecast from the cutoff (``predict(origin=...,
recent=...)``). Accuracy is scored on the curve as the policy uses it: level-
corrected at the cutoff with the observed rate (``forecaster.level``).
"""

from __future__ import annotations

import gzip
import math
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from forecaster.base import FitFailed, Forecast, InsufficientHistory, Series

from . import simulator as sim
from .policy import PolicyParams, Reason
from .spec import KEYS, LeadTime, parse_duration

POLICIES = ("reactive", "linear_trend", "predictive", "hybrid", "scheduled", "keep_alive", "oracle")
ACCURACY_BASELINES = ("seasonal_naive", "linear_trend")
BUNDLED_DIR = Path(__file__).resolve().parent / "data" / "worldcup98"
BUNDLED_TRACE = BUNDLED_DIR / "per_minute.csv.gz"
DEFAULT_COLD_START = 180.0
TARGET_PEAK_REPLICAS = 20  # the derived qps per replica makes the simulated peak need about this many
DAY = 86400.0


class BacktestError(ValueError):
    """Bad input for a backtest: the message names what was wrong and what is accepted."""


def _spec_default(key: str) -> str:
    for k in KEYS:
        if k.name == key:
            assert k.default is not None
            return k.default
    raise KeyError(key)


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Trace:
    name: str
    series: Series
    hygiene: str  # the HygieneReport's one-line message
    source: str  # path or URL
    attribution: str = ""


def load_csv(path: str | os.PathLike, *, name: str | None = None) -> Trace:
    """A trace CSV (``timestamp,count`` or ``timestamp,qps``; ``.gz`` too) via ``forecaster.series.from_csv``."""
    from forecaster.series import from_csv

    p = Path(path)
    if not p.is_file():
        raise BacktestError(f"trace file {str(p)!r} does not exist; expected a CSV with a header 'timestamp,count' "
                            f"or 'timestamp,qps' (optionally gzip'd, .csv.gz)")
    label = name or re.sub(r"\.csv$", "", p.name[:-3] if p.name.endswith(".gz") else p.name)
    try:
        if p.suffix == ".gz":
            with tempfile.TemporaryDirectory(prefix="forescale-") as d:
                tmp = Path(d) / "trace.csv"
                try:
                    with gzip.open(p, "rb") as src, open(tmp, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                except (OSError, EOFError) as e:
                    raise BacktestError(f"{p}: not a readable gzip file ({e}); expected a gzip'd trace CSV") from None
                try:
                    series, rep = from_csv(tmp)
                except ValueError as e:
                    raise BacktestError(str(e).replace(str(tmp), str(p))) from None
        else:
            series, rep = from_csv(p)
    except BacktestError:
        raise
    except ValueError as e:
        raise BacktestError(str(e)) from None
    if len(series) < 2 or not np.isfinite(series.y).any():
        raise BacktestError(f"{p}: no usable rows ({rep.message})")
    return Trace(label, series, rep.message, str(p))


def bundled_trace() -> Trace:
    """The packaged real trace (WorldCup98, 28 days at 1 min) with its attribution."""
    t = load_csv(BUNDLED_TRACE, name="worldcup98 (bundled: 1998-06-03 .. 1998-06-30, 1 min)")
    return replace(t, attribution=('M. Arlitt and T. Jin, "1998 World Cup Web Site Access Logs", August 1998 '
                                   f'(notice: {BUNDLED_DIR / "ATTRIBUTION.txt"})'))


def fetch_prometheus(url: str, query: str, start: float, end: float, step: float) -> list[dict]:
    """``data.result`` of a range query, through the server's own client (split under 11,000 points)."""
    from .prom import PrometheusClient
    from .spec import PrometheusTarget

    return PrometheusClient(PrometheusTarget(url.rstrip("/"), timeout_seconds=60.0)).range(query, start, end, step)


def load_prometheus(url: str, query: str, start: float, end: float, step: float) -> Trace:
    from forecaster.series import from_prometheus_matrix

    if end <= start:
        raise BacktestError(f"--end must be after --start (got {start:g} .. {end:g} epoch s)")
    try:
        result = fetch_prometheus(url, query, start, end, step)
    except BacktestError:
        raise
    except Exception as e:  # network, HTTP, PromQL errors: one clear line
        raise BacktestError(f"Prometheus range query failed at {url}: {type(e).__name__}: {e}") from None
    try:
        series, rep = from_prometheus_matrix(result, step)
    except ValueError as e:
        raise BacktestError(f"Prometheus query {query!r}: {e}") from None
    return Trace(f"prometheus: {query}", series, rep.message, url)


def parse_time(text: str, *, now: float) -> float:
    """ISO-8601 (naive = UTC), epoch seconds, ``now`` or ``now-14d``."""
    s = text.strip()
    m = re.fullmatch(r"now(?:\s*-\s*(.+))?", s)
    if m:
        return now - (parse_duration(m.group(1)) if m.group(1) else 0.0)
    try:
        return float(s)
    except ValueError:
        pass
    dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Settings:
    """Every knob of one backtest (defaults: the scaler's documented metadata defaults)."""

    cold_start_seconds: float = DEFAULT_COLD_START
    qps_per_replica: float | None = None  # None: derived from the simulated span's peak
    buffer_seconds: float | None = None  # None: forecastErrorSeconds + schedulingSeconds + readinessSeconds
    model: str = _spec_default("model")
    quantile: float = float(_spec_default("quantile"))
    history_seconds: float = parse_duration(_spec_default("history"))
    refit_seconds: float = 3600.0
    span_seconds: float = 2 * DAY
    sim_start: float | None = None
    level_correction_seconds: float = parse_duration(_spec_default("levelCorrection"))
    headroom: float = float(_spec_default("headroom"))
    hpa_tolerance: float = float(_spec_default("hpaTolerance"))  # the emulated HPA's and the policy's
    min_replicas: int = 0
    max_replicas: int = 100
    activation_threshold: float = 0.0
    hybrid_floor_percentile: float = 10.0
    policies: tuple[str, ...] = POLICIES
    seed: int = 0

    def lead(self) -> LeadTime:
        lt = LeadTime(self.cold_start_seconds, float(_spec_default("forecastErrorSeconds")),
                      float(_spec_default("schedulingSeconds")), float(_spec_default("readinessSeconds")),
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
    curves: list[sim.Curve]
    target_t: np.ndarray  # the time each scored forecast point is for (horizon = L), for the report
    mean_at_l: np.ndarray
    lo_at_l: np.ndarray
    hi_at_l: np.ndarray
    scores: dict = field(default_factory=dict)
    fits: int = 0
    failures: dict = field(default_factory=dict)
    seconds: float = 0.0


def _slice(series: Series, lo: float, hi: float) -> Series:
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


def _padded(series: Series, extra: int) -> Series:
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
    fseries = _padded(series.until(end), horizon - 1)  # the last cutoff is end - step
    counted = _Counted(make(model, seed=seed, level_half_life=level_seconds), progress)
    fcs = evaluate.historical_forecasts(counted, fseries, start=start, horizon=horizon, stride=1,
                                        train_window=history_seconds, refit_every=refit_every,
                                        quantiles=tuple(quantiles))
    fcs = [(c, f) for c, f in fcs if start - 1e-6 <= c < end]
    cut = np.array([c for c, _ in fcs], dtype=float)
    hmax = _window_max(series, cut, history_seconds) if len(cut) else np.array([])
    curves: list[sim.Curve] = []
    known = set(np.round(cut, 3))
    for c in np.arange(start, end, step):  # cutoffs the model skipped: too little history
        if round(float(c), 3) not in known:
            curves.append(sim.Curve(float(c), None, None, Reason.INSUFFICIENT_HISTORY))
    for (c, f), h in zip(fcs, hmax):
        curves.append(sim.Curve(float(c), f, None if not np.isfinite(h) else float(h)))
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
    s = _slot(t, weekly)
    prof = np.full(slots, np.nan)
    ok = np.isfinite(y)
    overall = float(np.quantile(y[ok], q)) if ok.any() else 0.0
    for k in range(slots):
        v = y[ok & (s == k)]
        prof[k] = float(np.quantile(v, q)) if v.size else overall
    return prof


def _slot(t: np.ndarray, weekly: bool) -> np.ndarray:
    h = np.floor(np.asarray(t, dtype=float) / 3600.0).astype(np.int64)
    return (h + 72) % 168 if weekly else h % 24  # epoch 0 was a Thursday: Monday 00:00 -> slot 0


@dataclass
class PolicyRun:
    name: str
    timeline: sim.Timeline
    outcome: sim.Outcome
    note: str = ""
    reasons: dict = field(default_factory=dict)


@dataclass
class Result:
    trace: Trace
    settings: Settings
    qps_per_replica: float
    qps_note: str
    lead: LeadTime
    scenario: sim.Scenario
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
        return sim.evaluate(self.scenario, sim.oracle(self.scenario)).replica_hours


def _progress_bar(total: int, desc: str, enabled: bool | None):
    """tqdm on stderr; ``enabled`` None = only on a terminal."""
    if enabled is False:
        return _NullBar()
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="fit", leave=False, disable=None if enabled is None else False,
                dynamic_ncols=True, mininterval=0.5)


class _NullBar:
    def update(self, n: int = 1) -> None: ...

    def close(self) -> None: ...


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
    scenario: sim.Scenario
    hpa: sim.Hpa


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
            raise BacktestError(f"--sim-start {_iso(start)} is outside the trace ({_iso(t_first)} .. {_iso(t_end)})")
    else:
        start = max(t_end - settings.span_seconds, t_first + min(settings.history_seconds, length / 2))
    start = t_first + math.ceil((start - t_first) / step - 1e-9) * step  # on the trace grid
    end = min(t_end, start + settings.span_seconds)
    if end - start < 4 * sim.TICK_SECONDS:
        raise BacktestError(f"the trace is too short to simulate: {length:g} s")
    if start - t_first < settings.history_seconds:
        notes.append(f"only {(start - t_first) / DAY:.2f} d of history before the simulated span "
                     f"(history window {settings.history_seconds / DAY:g} d)")
    span = _slice(series, start, end)
    peak = float(np.nanmax(span.y)) if np.isfinite(span.y).any() else 0.0
    if settings.qps_per_replica is None:
        qps = nice_round(peak / TARGET_PEAK_REPLICAS) if peak > 0 else 1.0
        qps_note = (f"derived: the simulated peak {peak:.4g} req/s / {TARGET_PEAK_REPLICAS} replicas, "
                    f"rounded (--qps-per-replica to set it)")
    else:
        qps, qps_note = float(settings.qps_per_replica), "given"
    sc = sim.scenario(series.t, series.y, step, start, end, cold_start_seconds=settings.cold_start_seconds,
                      qps_per_replica=qps)
    hpa = sim.Hpa(target=qps, min_replicas=settings.min_replicas, max_replicas=settings.max_replicas,
                  tolerance_up=settings.hpa_tolerance, activation_threshold=settings.activation_threshold)
    return Setup(start, end, notes, peak, qps, qps_note, settings.lead(), sc, hpa)


def run(trace: Trace, settings: Settings, *, progress: bool | None = None,
        log: Callable[[str], None] | None = None) -> Result:
    """The whole backtest. ``progress``: True/False, or None = only on a terminal."""
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
    bar = _progress_bar(len(need_models) * -(-n_cutoffs // refit_every), "fits", progress)
    try:
        for m in need_models:
            if hasattr(bar, "set_description"):
                bar.set_description(f"fitting {m}")
            models[m] = run_model(series, m, start, end, horizon=horizon, score_points=score_points,
                                  refit_every=refit_every, history_seconds=settings.history_seconds,
                                  quantiles=quantiles, q=q, level_seconds=settings.level_correction_seconds,
                                  seed=settings.seed, progress=bar.update)
            timing[f"forecast_{m}_seconds"] = models[m].seconds
    finally:
        bar.close()

    # ---- policies
    t_pol = time.perf_counter()
    params = PolicyParams(mode="forecastAndScale", lead_seconds=L, quantile=q, qps_per_replica=qps,
                          headroom=settings.headroom, hpa_tolerance=settings.hpa_tolerance,
                          level_correction_seconds=settings.level_correction_seconds)
    train = _slice(series, start - settings.history_seconds, start)
    train_y = train.y[np.isfinite(train.y)]
    runs: dict[str, PolicyRun] = {}
    for name in POLICIES:
        if name not in want:
            continue
        note, reasons = "", {}
        if name == "reactive":
            pv = sim.reactive_values(sc, hpa, qps)
            tl = sim.run_hpa(sc, pv.values, hpa)
            note = "KEDA's Prometheus scaler: value = rate over 2 min, as is"
        elif name in ("linear_trend", "predictive"):
            mr = models["linear_trend" if name == "linear_trend" else settings.model]
            pv = sim.planned_values(sc, hpa, params, mr.curves)
            tl = sim.run_hpa(sc, pv.values, hpa)
            reasons = pv.reasons
            note = f"decide(forecastAndScale), model {mr.model}, q={q:g}, L={L:g}s"
        elif name == "hybrid":
            floor_qps = float(np.percentile(train_y, settings.hybrid_floor_percentile)) if train_y.size else 0.0
            floor = int(math.ceil(floor_qps / qps - 1e-9)) if floor_qps > 0 else 0
            shift = floor * qps
            curves = [sim.Curve(c.since, _shifted(c.forecast, shift) if c.forecast is not None else None,
                                None if c.history_max is None else c.history_max + shift, c.unusable)
                      for c in models[settings.model].curves]
            pv = sim.planned_values(sc, hpa, params, curves, observed_offset=shift)
            h2 = replace(hpa, min_replicas=max(hpa.min_replicas, floor), max_replicas=max(hpa.max_replicas, floor))
            tl = sim.run_hpa(sc, pv.values, h2)
            reasons = pv.reasons
            note = (f"{floor} always-warm replica(s) (p{settings.hybrid_floor_percentile:g} of the history, "
                    f"{floor_qps:.4g} req/s) + predictive above them")
        elif name == "scheduled":
            weekly = len(train) * step >= 7 * DAY
            prof = hour_profile(train.t, train.y, q, weekly)
            times = sc.t0 + sc.tick * sim.poll_ticks(sc.n, hpa, sc.tick)
            vals = np.maximum(prof[_slot(times, weekly)], prof[_slot(times + L, weekly)])
            tl = sim.run_hpa(sc, vals, hpa)
            note = f"q{q:g} of each hour of the {'week' if weekly else 'day'} in the history, {L:g}s ahead, no observed floor"
        elif name == "keep_alive":
            n = int(math.ceil(peak / qps - 1e-9)) if peak > 0 else 1
            tl = sim.fixed_pool(sc, n)
            note = f"{n} replicas always ready (the simulated span's peak, in hindsight)"
        else:
            tl = sim.oracle(sc)
            note = "perfect foresight, pods started exactly T_cold ahead, no HPA limits"
        runs[name] = PolicyRun(name, tl, sim.evaluate(sc, tl), note, reasons)
    timing["policies_seconds"] = time.perf_counter() - t_pol
    timing["total_seconds"] = time.perf_counter() - t_all
    return Result(trace, settings, qps, qps_note, lead, sc, start, end, models, runs, notes, timing)


def _shifted(fc: Forecast, shift: float) -> Forecast:
    if shift == 0:
        return fc
    return Forecast(fc.t, fc.mean + shift, {k: v + shift for k, v in fc.quantiles.items()}, fc.model)


# --------------------------------------------------------------------------- output


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _num(x: float) -> float | None:
    """JSON-safe float (NaN/Inf -> null)."""
    return float(x) if x is not None and math.isfinite(x) else None


def to_json(r: Result) -> dict:
    """The JSON contract of DESIGN.md section 5 (plus extra keys scripts may ignore)."""
    s = r.settings
    oh = r.oracle_hours
    pols = {}
    for name, p in r.policies.items():
        d = p.outcome.as_dict()
        d["cost_ratio"] = _num(p.outcome.replica_hours / oh) if oh else None
        d["cold_start_request_fraction"] = (_num(p.outcome.cold_start_requests / p.outcome.requests)
                                            if p.outcome.requests else 0.0)
        d["note"] = p.note
        if p.reasons:
            d["reasons"] = dict(sorted(p.reasons.items()))
        pols[name] = d
    fc = {}
    for m, mr in r.models.items():
        fc[m] = {k: (_num(v) if isinstance(v, float) else v) for k, v in mr.scores.items()}
        fc[m]["fits"] = mr.fits
        if mr.failures:
            fc[m]["failures"] = mr.failures
    series = r.trace.series
    return {
        "trace": {
            "name": r.trace.name,
            "points": int(len(series)),
            "step_seconds": float(series.step),
            "span_days": float(series.span_seconds / DAY),
            "source": r.trace.source,
            "hygiene": r.trace.hygiene,
        },
        "settings": {
            "cold_start_seconds": r.lead.cold_start_seconds,
            "lead_seconds": r.lead.seconds,
            "buffer_seconds": r.lead.buffer_seconds,
            "qps_per_replica": r.qps_per_replica,
            "qps_per_replica_source": r.qps_note,
            "model": s.model,
            "quantile": s.quantile,
            "history_seconds": s.history_seconds,
            "refit_seconds": s.refit_seconds,
            "level_correction_seconds": s.level_correction_seconds,
            "headroom": s.headroom,
            "hpa_tolerance": s.hpa_tolerance,
            "min_replicas": s.min_replicas,
            "max_replicas": s.max_replicas,
            "tick_seconds": r.scenario.tick,
            "polling_seconds": 30.0,
            "rate_window_seconds": 120.0,
            "simulated_start": _iso(r.sim_start),
            "simulated_end": _iso(r.sim_end),
            "simulated_days": (r.sim_end - r.sim_start) / DAY,
            "policies": list(r.policies),
        },
        "forecast": fc,
        "policies": pols,
        "notes": list(r.notes),
        "timing": {k: round(v, 3) for k, v in r.timing.items()},
    }


def format_table(r: Result) -> str:
    """The terminal summary: what was run, then one row per policy and one per model."""
    s = r.settings
    oh = r.oracle_hours
    lines = [
        f"trace     {r.trace.name}: {len(r.trace.series)} points at {r.trace.series.step:g}s, "
        f"{r.trace.series.span_seconds / DAY:.1f} d ({r.trace.hygiene})",
        f"simulated {_iso(r.sim_start)} .. {_iso(r.sim_end)} ({(r.sim_end - r.sim_start) / DAY:.2f} d, "
        f"{r.scenario.n} ticks of {r.scenario.tick:g}s)",
        f"replica   {r.qps_per_replica:g} req/s per replica ({r.qps_note}); T_cold {r.lead.cold_start_seconds:g}s, "
        f"lead L = T_cold + {r.lead.buffer_seconds:g}s = {r.lead.seconds:g}s",
        f"forecast  {s.model} q{s.quantile:g}, fitted on {s.history_seconds / DAY:g} d before each cutoff, "
        f"refit every {s.refit_seconds / 60:g} min ({r.models[s.model].fits if s.model in r.models else 0} fits), "
        f"forecast from every {r.trace.series.step:g}s cutoff",
        f"HPA       tolerance {s.hpa_tolerance:g} (scale-up), +max(4 pods, 100 %)/15 s, 300 s down-stabilisation, "
        f"replicas {s.min_replicas}..{s.max_replicas}, KEDA polls every 30 s",
    ]
    lines += [f"note      {n}" for n in r.notes]
    lines.append("")
    head = f"{'policy':<13}{'missed %':>9}{'viol min':>9}{'replica-h':>11}{'x oracle':>9}{'scale-ups':>10}{'peak':>6}" \
           f"{'in cold start %':>17}"
    lines += [head, "-" * len(head)]
    for name, p in r.policies.items():
        o = p.outcome
        ratio = f"{o.replica_hours / oh:.2f}" if oh else "-"
        lines.append(f"{name:<13}{100 * o.underprovisioned_fraction:>9.3f}{o.violation_minutes:>9d}"
                     f"{o.replica_hours:>11.1f}{ratio:>9}{o.scale_ups:>10d}{o.peak_replicas:>6d}"
                     f"{100 * o.cold_start_requests / o.requests if o.requests else 0:>17.1f}")
    lines.append("(missed: requests above ready capacity; viol min: minutes with any; in cold start: requests that "
                 "arrived while a replica was starting)")
    lines.append("")
    lines.append(f"forecast accuracy at horizon L (rolling origin, {len(next(iter(r.models.values())).curves)} cutoffs; "
                 f"scored level-corrected, as the policy uses it)")
    head2 = f"{'model':<16}{'MASE':>8}{'WAPE':>8}{'pinball':>10}{'coverage':>10}{'fits':>6}"
    lines += [head2, "-" * len(head2)]
    for m, mr in r.models.items():
        sc = mr.scores
        lines.append(f"{m:<16}{_f(sc['mase'], 8, 3)}{_f(sc['wape'], 8, 3)}{_f(sc['pinball'], 10, 2)}"
                     f"{_f(sc['coverage'], 10, 3)}{mr.fits:>6d}")
    lines.append(f"(coverage: share of actuals at or below the q{s.quantile:g} forecast; MASE scaled by the "
                 f"in-sample seasonal-naive error)")
    return "\n".join(lines)


def _f(x: float, w: int, d: int) -> str:
    return f"{x:>{w}.{d}f}" if x is not None and math.isfinite(x) else f"{'-':>{w}}"

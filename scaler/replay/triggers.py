"""A ScaledObject's triggers evaluated at each KEDA poll, composed as KEDA does, and replayed (``replay_plan``).

* ``forescale`` (external): the server's own ``decide`` with the trigger's
  ``PolicyParams`` (mode, lead from coldStartSeconds + buffers, quantile,
  headroom, hpaTolerance, levelCorrection) on the curves of its model, at each
  of KEDA's calls (``policies.polled_decisions``), then the server's self-watch
  on those answers (``drift.drift_response``: ``fallback_forecast_drift`` while
  the live scores say the forecast drifted, as ``forescale serve`` always runs
  it); IsActive = planned > activationThreshold (the server's ``IsActive``).
* ``prometheus``: the series given for the trigger (``--trigger-series``),
  the latest sample at or before each poll (5 min lookback, as Prometheus);
  no sample is 0 with ``ignoreNullValues`` (KEDA's default), else a failed poll.
  A NaN sample is a failed poll (the way to replay an outage and ``fallback``).
* ``cron``: active from each ``start`` until the next ``end`` (KEDA: the next
  end comes before the next start), in ``timezone``; value ``desiredReplicas``
  while active, else 1, target 1 (croniter reads the five-field expressions).

Without ``scalingModifiers`` each trigger is one HPA metric (the HPA takes
the largest recommendation) and KEDA is active when any trigger is. With it,
the formula of the triggers' values is the one metric (a failed trigger fails
it) and KEDA is active when it is above ``activationTarget``.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Callable, Mapping, Sequence, cast
from zoneinfo import ZoneInfo

import numpy as np

from forecaster.calendar import DEFAULT_HOLIDAY_AS_CODE, UTC

from ..params import loop_targets, policy_params
from ..policy import REASONS, PolicyParams
from .forecasts import Curve, Packed
from .hpa import poll_ticks, sync_ticks
from .keda import Metric, replay
from .manifest import Plan
from .manifesttrigger import Trigger
from .policies import polled_decisions
from .scenario import EPS, Scenario, Timeline
from .scenarios import outages
from .selfwatch import drift_response

# a prometheus trigger's series by name: (t, y) arrays, or "observed" (the trace's own rate)
TriggerSeries = Mapping[str, tuple[np.ndarray, np.ndarray] | str]
LOOKBACK_SECONDS = 300.0  # Prometheus' default lookback delta for an instant query


def _occurrences(expr: str, tz: ZoneInfo, t0: float, t1: float) -> np.ndarray:
    """Every occurrence of ``expr`` in ``(t0, t1]`` plus the first after ``t1`` (epoch seconds)."""
    from croniter import croniter

    it = croniter(expr, datetime.fromtimestamp(t0, tz))
    out = []
    while True:
        t = float(it.get_next(float))
        out.append(t)
        if t > t1 or len(out) > 1_000_000:
            break
    return np.array(out, dtype=np.float64)


def cron_active(trigger: Trigger, times: np.ndarray) -> np.ndarray:
    """KEDA's cron scaler at each time: active unless the next start comes strictly before the next end."""
    tz = ZoneInfo(trigger.timezone)
    t0, t1 = float(times[0]) - 1.0, float(times[-1])
    starts = _occurrences(trigger.start, tz, t0, t1)
    ends = _occurrences(trigger.end, tz, t0, t1)
    nxt_s = starts[np.searchsorted(starts, times, side="right")]
    nxt_e = ends[np.searchsorted(ends, times, side="right")]
    return nxt_e <= nxt_s  # KEDA: inactive only when the next start comes strictly before the next end


def series_at(t: np.ndarray, y: np.ndarray, times: np.ndarray, ignore_null: bool) -> np.ndarray:
    """The latest sample at or before each time within ``LOOKBACK_SECONDS``; none -> 0 or NaN (a failed poll)."""
    k = np.searchsorted(t, times, side="right") - 1
    ok = (k >= 0) & (times - t[np.clip(k, 0, None)] <= LOOKBACK_SECONDS)
    v = np.where(ok, y[np.clip(k, 0, None)], 0.0 if ignore_null else np.nan)
    return v.astype(np.float64)


def trigger_params(trig: Trigger) -> PolicyParams:
    """A forescale trigger's decision knobs: the server's translation (``scaler.params.policy_params``) with the lead
    from coldStartSeconds and the events read for the replay (``manifest.with_events``)."""
    assert trig.spec is not None
    return policy_params(trig.spec, events=trig.events)


def trigger_values(sc: Scenario, plan: Plan, trig: Trigger, *, curves: Callable[[Trigger], Sequence[Curve]],
                   series: TriggerSeries,
                   down: Sequence[tuple[float, float]] = (), step: float = 60.0) -> tuple[np.ndarray, dict]:
    """The trigger's answer if asked at each tick (NaN: a failed call) and the decisions' reasons. ``down``:
    epoch-second windows ``[a, b)`` in which forescale does not answer (``scaler-down`` scenarios). ``step``:
    the trace's, the self-watch's scoring step."""
    idx = np.arange(sc.n)
    times = sc.t0 + sc.tick * idx
    if trig.kind == "forescale":
        params = trigger_params(trig)
        # the server decides at each of KEDA's calls (each HPA sync; each poll with useCachedMetrics) and its
        # self-watch scores each answer: the drift response, as `forescale serve` always runs it
        calls = poll_ticks(sc.n, plan.hpa, sc.tick) if trig.cached else sync_ticks(sc.n, plan.hpa, sc.tick)
        t_c, obs_c, d = polled_decisions(sc, plan.hpa, params, curves(trig) if params.mode != "reactive" else (),
                                         ticks=calls)
        gone = unreachable(t_c, down)
        planned, reason, _ = drift_response(t_c, obs_c, d, params, step=step, skip=gone)
        planned[gone] = np.nan
        codes, counts = np.unique(reason[~gone], return_counts=True)
        held = planned[np.searchsorted(calls, idx, side="right") - 1]  # between calls, the last answer
        return held, {REASONS[int(c)].value: int(k) for c, k in zip(codes, counts)}
    if trig.kind == "prometheus":
        src = series.get(f"{plan.name}/{trig.name}", series.get(trig.name))
        if src is None:
            raise KeyError(f"{plan.where} (ScaledObject {plan.name!r}): {trig.where} (prometheus trigger "
                           f"{trig.name!r}) needs its series: give --trigger-series {trig.name}=FILE.csv "
                           f"(timestamp,value) or {trig.name}=observed (the trace's own rate over 2 min), or read the "
                           f"traffic with --prometheus to fetch its query")
        if isinstance(src, str):  # "observed"
            return sc.observed[idx].astype(np.float64), {}
        return series_at(src[0], src[1], times, trig.ignore_null), {}
    act = cron_active(trig, times)
    return np.where(act, float(trig.desired), 1.0), {}


def unreachable(times: np.ndarray, down: Sequence[tuple[float, float]]) -> np.ndarray:
    """Per time: inside one of the ``down`` windows ``[a, b)``."""
    out = np.zeros(len(times), dtype=bool)
    for a, b in down:
        out |= (times >= a - EPS) & (times < b - EPS)
    return out


def served(values: np.ndarray, trig: Trigger, sc: Scenario, hpa) -> np.ndarray:
    """Per tick, what KEDA has for the HPA from this trigger: its answer asked at that tick, or with
    ``useCachedMetrics`` the one its last poll cached."""
    if not trig.cached:
        return values
    polls = poll_ticks(sc.n, hpa, sc.tick)
    return values[polls[np.searchsorted(polls, np.arange(sc.n), side="right") - 1]]


def replay_plan(sc: Scenario, plan: Plan, *, curves: Callable[[Trigger], Sequence[Curve]],
                series: TriggerSeries, cluster_tolerance: float,
                down: Sequence[tuple[float, float]] = (), step: float = 60.0) -> tuple[Timeline, dict]:
    """Replay one ScaledObject: its triggers asked as KEDA asks them (at each HPA sync; with
    ``useCachedMetrics`` at each poll), composed as KEDA does, through the HPA loop.

    ``cluster_tolerance``: the HPA's scale-up tolerance where the manifest sets
    none (the controller's; ``--hpa-tolerance``).
    """
    vals: dict[str, np.ndarray] = {}
    reasons: dict[str, int] = {}
    for t in plan.triggers:
        v, why = trigger_values(sc, plan, t, curves=curves, series=series, down=down, step=step)
        vals[t.name] = v
        for k, c in why.items():
            reasons[k] = reasons.get(k, 0) + c
    hpa = plan.hpa
    if not plan.explicit_up_tolerance and hpa.scale_up is not None:
        from dataclasses import replace

        hpa = replace(hpa, tolerance_up=cluster_tolerance, scale_up=replace(hpa.scale_up, tolerance=cluster_tolerance))
    syncs, polls = sync_ticks(sc.n, hpa, sc.tick), poll_ticks(sc.n, hpa, sc.tick)
    live = not all(t.cached for t in plan.triggers)  # the HPA's reads of a metric with a live part ask at each sync
    at = syncs if live else polls
    held = {t.name: served(vals[t.name], t, sc, hpa) for t in plan.triggers}
    failed = np.zeros(sc.n, dtype=bool)
    for v in vals.values():
        failed |= np.isnan(v)
    if plan.modifiers is not None:
        m = plan.modifiers
        with np.errstate(all="ignore"):
            comp = m.formula.evaluate(held)
        comp = np.where(failed | ~np.isfinite(comp), np.nan, comp)
        per_trigger = np.zeros(sc.n, dtype=bool)
        for t in plan.triggers:
            per_trigger |= np.nan_to_num(vals[t.name], nan=-math.inf) > t.activation
        active = np.where(failed, per_trigger, np.nan_to_num(comp, nan=-math.inf) > m.activation_target)[polls]
        gone = unreachable(sc.t0 + sc.tick * np.arange(sc.n), down if any(t.kind == "forescale"
                                                                          for t in plan.triggers) else ())
        metrics = [Metric(comp[at], m.target, m.per_pod, live=live, unseen=gone[at])]
        shown = comp[polls]
    else:
        active = np.zeros(sc.n, dtype=bool)
        for t in plan.triggers:
            active |= np.nan_to_num(vals[t.name], nan=-math.inf) > t.activation
        active = active[polls]
        gone = unreachable(sc.t0 + sc.tick * np.arange(sc.n), down)  # forescale down: KEDA has no metric spec
        metrics = [Metric(held[t.name][syncs if not t.cached else polls], t.target, t.per_pod, live=not t.cached,
                          unseen=(gone[syncs if not t.cached else polls] if t.kind == "forescale" else None))
                   for t in plan.triggers]
        shown = None
    return replay(sc, hpa, metrics, active, fallback=plan.fallback, held=shown), reasons


def _caveats(t: Trigger) -> str:
    """What of a forescale trigger the replay runs differently from the live server, said in the note."""
    s = t.spec
    if s is None:
        return ""
    out = ""
    if s.tuning == "auto":
        out += f"; {t.name}: tuning auto replayed as the knobs written (self-tuning is not replayed)"
    if s.cold_start_query:
        out += f"; {t.name}: coldStartQuery not read, lead from coldStartSeconds"
    if s.cold_start_cluster is not None:
        out += (f"; {t.name}: {t.cold_start_note}" if t.cold_start_note else
                f"; {t.name}: coldStartFrom cluster not replayed, T_cold {s.lead.cold_start_seconds:g}s "
                f"(coldStartSeconds; give --cold-starts FILE or --cold-start-from cluster to replay it)")
    if s.events_file:
        out += f"; {t.name}: eventsFile {s.events_file} read from {t.events_source} ({len(t.events)} events)"
    if loop_targets(s) is not None:
        out += (f"; {t.name}: the closed loop (queueTarget, ttftTarget, itlTarget) not replayed from a ScaledObject "
                "(backtest --queue-target, --ttft-target, --itl-target replay it on the policies)")
    if s.capacity.learned:
        out += (f"; {t.name}: capacity learned not replayed from a ScaledObject, planned on qpsPerReplica (backtest "
                "--capacity learned replays it on the policies)")
    if s.lead.forecast_error_auto:
        out += f"; {t.name}: forecastErrorSeconds auto replayed at its prior {s.lead.forecast_error_seconds:g}s"
    return out


def replay_scaled_objects(sc: Scenario, series, start: float, end: float, plans: Sequence[Plan],
                          trigger_series: Mapping[str, object], settings, fit_kw: Mapping[str, dict],
                          packs: Mapping[str, Packed]) -> dict[str, tuple[Timeline, dict, str]]:
    """Every plan replayed on the engine's scenario: ``{name: (timeline, reasons, note)}``.

    A forescale trigger's curves come from the engine's own fit of its model
    when that fit has the trigger's quantile and settings (history, refit,
    level correction, a horizon covering its lead), else from a fit of its own
    (``forecasts.fit_task``, shared by the triggers that need the same one).
    """
    from .forecasts import band, fit_task

    step = series.step
    own: dict[tuple, Packed] = {}

    def curves(trig: Trigger) -> list[Curve]:
        s = trig.spec
        assert s is not None  # a forescale trigger's (trigger_params)
        q = float(s.quantile)
        horizon = int(math.ceil((s.lead.seconds + step) / step)) + 1
        kw = dict(horizon=horizon, score_points=max(1, int(math.ceil(s.lead.seconds / step - 1e-9))),
                  refit_every=max(1, int(round(s.refit_interval_seconds / step))),
                  history_seconds=s.history_seconds, quantiles=tuple(sorted(set(band(q)) | {q})), q=q,
                  level_seconds=s.level_correction_seconds, seed=settings.seed)
        if s.holidays and len(series):  # the trigger's own holidays/holidayWindow/holidayAs, as the server fits
            from forecaster.calendar import holiday_days

            kw.update(holiday_days=tuple(holiday_days(s.holidays, float(series.t[0]), end + horizon * step,
                                                      s.holiday_window, s.timezone)), holiday_as=s.holiday_as,
                      **({"timezone": s.timezone} if s.timezone != UTC else {}))
        ek = fit_kw.get(s.model)
        if (ek is not None and s.model in packs and ek["horizon"] >= horizon and ek["refit_every"] == kw["refit_every"]
                and ek.get("holiday_days", ()) == kw.get("holiday_days", ())
                and ek.get("timezone", UTC) == kw.get("timezone", UTC)
                and ek.get("holiday_as", DEFAULT_HOLIDAY_AS_CODE) == kw.get("holiday_as", DEFAULT_HOLIDAY_AS_CODE)
                and ek["history_seconds"] == kw["history_seconds"] and ek["level_seconds"] == kw["level_seconds"]
                and any(abs(q - x) < 1e-9 for x in ek["quantiles"]) and (s.model != "auto" or ek["q"] == q)):
            return packs[s.model].only([q]).curves()
        key = (s.model, tuple(sorted(kw.items())))
        if key not in own:
            own[key] = fit_task(series, s.model, start, end, kw)[1]
        return own[key].only([q]).curves()

    out: dict[str, tuple[Timeline, dict, str]] = {}
    down = [(start + a, start + b) for a, b in outages(settings.world.specs())]
    for p in plans:
        tl, reasons = replay_plan(sc, p, curves=curves, series=cast(TriggerSeries, trigger_series),
                                  cluster_tolerance=settings.hpa_tolerance, down=down, step=step)
        kinds = ", ".join(f"{t.kind} {t.name}" for t in p.triggers)
        out[p.name] = (tl, reasons, f"ScaledObject {p.name} ({p.where}): {kinds}"
                                    + (f", formula {p.modifiers.formula.text!r}" if p.modifiers else "")
                                    + ("; no behavior: the HPA's legacy path" if p.hpa.legacy else "")
                                    + "".join(_caveats(t) for t in p.triggers))
    return out

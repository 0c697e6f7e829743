"""``tuning: auto``: the scaler runs ``forescale tune``'s selection on its own history, in the background.

For each ScaledObject with ``tuning: auto`` (the default unless the trigger
sets one of the knobs it replaces) the service, on clock-aligned cutoffs
(``worker.cutoff``: multiples of ``tuningInterval``, default daily, plus the
trigger's phase, the same in every replica; at once on the latest cutoff when
there is no valid choice yet, but not before the history covers
``tuningMinHistory``: until then the run counts as ``waiting`` and is looked
at again within the hour, and the first choice is made on the earliest
whole-hour boundary whose window covers it: ``tuningwindow``), fetches the workload's
history up to the cutoff from Prometheus (``fetch_seconds``: ``history`` + the simulated span + a day; range
query, the workload's own client, an I/O thread), replays the last few days of it (clock-aligned refits, each
on ``history``; the fits the day before made are reused from the worker's ``replay.fitcache``)
through the frontier sweep (``scaler.replay``: reactive with headroom and
dead-band compensation, seasonal_naive, the declared model with its
quantile / level-correction / headroom grid, the oracle as the cost
reference; see ``SERVER_FAMILIES``; only the configurations the scaler can run: ``server_grid``) and picks the cheapest configuration whose missed-request fraction
is at most ``targetMiss`` (a fraction, or a multiple of reactive KEDA's miss on the same replay) within
``maxCostRatio`` (else the lowest miss within it, with a warning). The choice replaces ``mode``, ``model``, ``quantile``,
``levelCorrection``, ``headroom`` and ``hpaTolerance`` of the running spec
(``Registry.apply_tuned``): only the value sent to KEDA changes, never the
metric or its target (KEDA rebuilds the HPA target only on spec changes).

Bounded CPU: one sweep at a time for the whole scaler, in one worker process
of its own at a lower priority (``nice``). RPCs never wait on any of this.
The choice is exported (``forescale_tuning_info`` and friends), logged with
its figures, and persisted under ``<state-dir>/tuning/`` (``tuningdoc``) so that a restart
keeps it (until the next scheduled run, or a metadata change that concerns it).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from forecaster.base import Series
from forecaster.calendar import DEFAULT_HOLIDAY_AS_CODE, UTC

from ..events import FILES
from ..misstarget import MissTarget
from ..prom import PromError
from ..replay.forecasts import MAX_CHAIN_SECONDS
from ..spec import ScalerSpec
from .metrics import ScalerMetrics, drop_series
from .state import JsonStore
from .tuningdoc import STATE_VERSION, cluster_tolerance, tuned_from_document, tuning_document, tuning_key
from .tuningwindow import NotEnoughHistory, run_window
from .worker import GaveUp, Worker, cutoff, worker_init
from .workload import Apply, Tuned, Workload

log = logging.getLogger(__name__)

SPAN_SECONDS = 3 * 86400.0  # the simulated part of the history (at most half of what there is)
MIN_REFIT_SECONDS = 7200.0  # the sweep refits no more often than this (the server refits every refitInterval)
RETRY_SECONDS = 3600.0  # after a failed run, and at most between two looks at a history still too short
MIN_WAIT_SECONDS = 600.0  # at least between two looks at a history still too short
MAX_RUN_SECONDS = 300.0  # a tuning run past this gives up (issue 40, item 14: a pathological trace ran past 420 s)
MAX_RUN_RSS_BYTES = 1 << 30  # ... as does one whose worker process (and its CmdStan children) holds more
# Expressible as metadata and run by the server as simulated (the fit service re-predicts linear_trend and
# seasonal_naive from every step's newest points, as the simulation does). Not hybrid: its floor needs
# minReplicaCount too, which the scaler cannot set (a choice sets floorReplicas to 0). envelope: ``model: envelope`` (its servable window), whose curve
# at fit time is exact for the next period.
SERVER_FAMILIES = ("reactive", "linear_trend", "seasonal_naive", "predictive", "envelope", "oracle")


# --------------------------------------------------------------------------- the job (worker process)


@dataclass(frozen=True)
class TuningJob:
    """Everything the worker needs (plain data: it crosses a process boundary)."""

    name: str
    t: np.ndarray
    y: np.ndarray
    step: float
    qps_per_replica: float
    cold_start_seconds: float
    buffer_seconds: float
    model: str
    history_seconds: float
    refit_seconds: float
    span_seconds: float
    tolerance: float
    activation_threshold: float
    target_miss: MissTarget
    max_cost_ratio: float | None
    families: tuple[str, ...] = SERVER_FAMILIES
    holidays: str = ""  # holidays / holidayWindow / holidayAs: the replay forecasts as the server does
    holiday_window: int = 0
    holiday_as: int = DEFAULT_HOLIDAY_AS_CODE
    timezone: str = UTC  # timezone: the zone of the holiday days
    events: tuple = ()  # forecaster.eventsfile.Event of eventsFile: the replay applies them as the server does


def fetch_seconds(history_seconds: float, span_seconds: float) -> float:
    """How much history a tuning run fetches: ``history`` before every replayed fit, that is before the simulated
    span and before the first aligned warm-start chain, which starts up to a day earlier. Each fit then reads the
    ``history`` before its cutoff, or all the data has when it holds less (a young workload: from the same first
    point every day). Either way the fit at a (clock-aligned) cutoff reads the same points whatever day the job
    runs on, and the next day's job finds it in the worker's ``FitCache``; only a data start that moves every day
    (a Prometheus retention shorter than this) makes every window new."""
    return history_seconds + span_seconds + MAX_CHAIN_SECONDS


def server_grid(families: tuple[str, ...]):
    """The sweep of the server's job (a ``replay.variants.Grid``): only the configurations the scaler can run
    (``variants.is_selectable``): no window-max band variants (the server computes pointwise bands only) and the
    envelope at its servable window only. ``frontier.select`` picks among these alone and each variant's replay,
    headroom search included, depends on no other variant's, so the choice and its figures are the full grid's;
    the variants left out were replays (and searches) that no choice could use."""
    from ..replay import variants

    return variants.Grid(families=families, window_band_quantiles=(), envelope_windows=(variants.ENVELOPE_WINDOW,))


def run_job(job: TuningJob, fits=None) -> dict:
    """Sweep and select (in the worker process). Returns plain data.

    Refits are clock-aligned and every fit reads ``history`` (``fetch_seconds``), so the fits of the two days this job
    shares with the one of the day before are taken from ``fits`` (default: the process's
    ``replay.fitcache.shared()``): the same fits and selection, a third of the fits made (default 3 d span). The
    sweep is ``server_grid``'s."""
    from ..replay import engine, fitcache
    from ..replay.tune import tune

    t0 = time.perf_counter()
    cache = fitcache.shared() if fits is None else fits
    before = cache.stats()
    trace = engine.Trace(job.name, Series(job.t, job.y, job.step), "", "prometheus")
    settings = engine.Settings(cold_start_seconds=job.cold_start_seconds, qps_per_replica=job.qps_per_replica,
                               buffer_seconds=job.buffer_seconds, model=job.model, history_seconds=job.history_seconds,
                               refit_seconds=job.refit_seconds, span_seconds=job.span_seconds,
                               hpa_tolerance=job.tolerance, activation_threshold=job.activation_threshold,
                               holidays=job.holidays, holiday_window=job.holiday_window, holiday_as=job.holiday_as,
                               timezone=job.timezone, events=tuple(job.events), aligned=True)
    end = float(job.t[-1] + job.step)
    with cache.run(job.name, end, keep_from=end - job.span_seconds - MAX_CHAIN_SECONDS):  # before: no run needs them
        tuning = tune(trace, settings, job.target_miss, job.max_cost_ratio,
                      grid=server_grid(job.families), fits=cache, accuracy=False)  # no accuracy: nothing reads it
    r, sel = tuning.result, tuning.selection
    settings_out = tuning.deployment()  # the family table's mapping (ValueError when nothing was selectable)
    p = sel.point
    assert p is not None  # (deployment() raised otherwise)
    v = p.variant
    return {
        "label": p.label, "policy": str(v.policy), "settings": settings_out, "met": sel.met, "message": sel.message,
        "miss": p.miss, "cost_ratio": p.cost_ratio, "violation_minutes": p.outcome.violation_minutes,
        "replica_hours": p.cost, "points": len(r.points), "pareto": sum(q.pareto for q in r.points),
        "simulated_days": (r.sim_end - r.sim_start) / 86400.0, "seconds": time.perf_counter() - t0,
        "knobs": p.knobs(r.tolerance), "target_miss": r.target_miss, "reactive_miss": r.reactive_miss,
        "fits": sum(m.fits for m in r.models.values()), "fits_reused": sum(m.reused for m in r.models.values()),
        "cache": {k: v - before.get(k, 0) if k in ("hits", "misses", "refused", "dropped") else v
                  for k, v in cache.stats().items()},
    }


def _tuning_worker_init(parent_pid: int, nice: bool) -> None:
    """The tuning worker dies with the server, as a fit worker does (``worker.worker_init``), at a lower priority."""
    worker_init(parent_pid)
    if nice:
        try:
            os.nice(10)
        except OSError:  # pragma: no cover
            pass


# --------------------------------------------------------------------------- the service


@dataclass
class TuningConfig:
    span_seconds: float = SPAN_SECONDS
    min_refit_seconds: float = MIN_REFIT_SECONDS
    retry_seconds: float = RETRY_SECONDS
    min_wait_seconds: float = MIN_WAIT_SECONDS
    nice: bool = True
    families: tuple[str, ...] = field(default=SERVER_FAMILIES)
    max_seconds: float = MAX_RUN_SECONDS  # a run past this is stopped (its process killed): outcome gave_up
    max_rss_bytes: int = MAX_RUN_RSS_BYTES  # ... or with its process over this resident memory


class TuningService:
    """Implements ``workload.TuningService``.

    ``store``: where choices survive a restart (the server passes one under
    ``<state-dir>/tuning/``; None: memory only). ``pool`` runs the sweeps
    (default: one low-priority forkserver process, made by ``start``); ``io``
    runs the range query and hands the choice over (default: one thread: one
    run at a time). Tests pass executors of their own.
    """

    def __init__(self, clock: Callable[[], float], metrics: ScalerMetrics, *, store: JsonStore | None = None,
                 config: TuningConfig | None = None, pool: Executor | None = None, io: Executor | None = None,
                 on_run: Callable[[Workload, float, str, str], None] | None = None):
        self.clock = clock
        self.metrics = metrics
        self.config = config or TuningConfig()
        self.store = store
        self.on_run = on_run  # told of every run that chose nothing: (workload, cutoff, outcome, why)
        # one run at a time: one I/O thread, one worker process
        self.worker = Worker(io or ThreadPoolExecutor(max_workers=1, thread_name_prefix="tune"), pool, self._new_pool)

    def _new_pool(self) -> Executor:
        ctx = multiprocessing.get_context("forkserver")  # never fork the gRPC process itself
        return ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=_tuning_worker_init,
                                   initargs=(os.getpid(), self.config.nice))

    def start(self) -> None:
        self.worker.start()

    def stop(self) -> None:
        """Bounded: a sweep takes minutes; it is not waited for (its process is killed)."""
        self.worker.stop()

    # -- TuningService protocol -------------------------------------------------
    def applies(self, tuned: Tuned, declared: ScalerSpec) -> bool:
        return declared.tuning == "auto" and tuned.key == tuning_key(declared)

    def busy(self, wl: Workload) -> bool:
        return self.worker.busy(wl.key)

    def restore(self, wl: Workload) -> Tuned | None:
        if self.store is None:
            return None
        got = self.store.read(wl.key, tuned_from_document, version=STATE_VERSION, key=tuning_key(wl.declared or wl.spec))
        if got is None:
            return None
        tuned, _ = got
        self._export(wl, tuned)
        log.info("ScaledObject %s/%s: restored tuned configuration %s chosen at %.0f (expected miss %.3f %%, "
                 "%.3fx oracle)", wl.namespace, wl.name, tuned.label, tuned.chosen_at, 100 * tuned.miss,
                 tuned.cost_ratio or float("nan"))
        return tuned

    def maybe_tune(self, wl: Workload, now: float, apply: Apply) -> None:
        declared = wl.declared or wl.spec
        if declared.tuning != "auto":
            return

        at = cutoff(now, declared.tuning_interval_seconds, wl.key)  # the same in every replica (worker.cutoff)

        def choose(backing_off: bool):  # under the worker's lock
            t = wl.tuned
            if t is not None and self.applies(t, declared) and t.chosen_at >= at:
                return None  # chosen on this cutoff's window (or, a first choice, on a later one)
            return None if backing_off else self._run
        self.worker.schedule(wl.key, now, choose, wl, declared, now, apply, at)

    def forget(self, wl: Workload) -> None:
        self.worker.forget(wl.key)

    # -- the work (tuning thread) ------------------------------------------------
    def _run(self, wl: Workload, declared: ScalerSpec, now: float, apply: Apply, at: float) -> None:
        key = wl.key
        ns, name = wl.namespace, wl.name
        try:
            out, at = self._tune_once(wl, declared, now, at)
            tuned = Tuned(key=tuning_key(declared), settings=tuple(out["settings"].items()), label=out["label"],
                          policy=out["policy"], chosen_at=at, met=bool(out["met"]), miss=float(out["miss"]),
                          cost_ratio=out["cost_ratio"],
                          summary=(f"{out['points']} configurations swept ({out['pareto']} Pareto) on "
                                   f"{out['simulated_days']:.1f} d of history; target miss "
                                   f"{100 * out['target_miss']:.3f} %: " + ("met at the lowest cost" if out["met"]
                                                                           else f"not met: {out['message']}")))
            if not apply(wl, tuned):
                log.info("ScaledObject %s/%s: metadata changed during tuning; choice discarded", ns, name)
                self._note(wl, at, "discarded", f"chose {tuned.label}, but the metadata changed during the run")
                return
            figures = {k: out[k] for k in ("violation_minutes", "replica_hours", "points", "pareto",
                                           "simulated_days", "seconds", "message", "knobs", "target_miss",
                                           "reactive_miss")}
            if self.store is not None:
                try:
                    self.store.save(*key, tuning_document(tuned, figures),
                                    version=STATE_VERSION, key=tuned.key)
                except (OSError, ValueError) as e:
                    log.warning("cannot write tuning state for %s/%s: %s", ns, name, e)
            self._export(wl, tuned)
            self.metrics.tuning_runs.labels(ns, name, "chosen").inc()
            self.worker.succeeded(key)
            log.log(logging.INFO if tuned.met else logging.WARNING,
                    "ScaledObject %s/%s: tuning chose %s: expected miss %.3f %% (target %.3f %%: %s%s), %.3fx oracle's "
                    "replica-hours, %d violation min in %.1f d of history; %d configurations swept (%d Pareto) in "
                    "%.1fs%s", ns, name, tuned.label, 100 * tuned.miss, 100 * out["target_miss"], declared.target_miss.describe(),
                    "" if declared.max_cost_ratio is None else f", cap {declared.max_cost_ratio:g}x",
                    tuned.cost_ratio or float("nan"), out["violation_minutes"], out["simulated_days"], out["points"],
                    out["pareto"], out["seconds"], "" if tuned.met else f" -- TARGET NOT MET: {out['message']}")
        except GaveUp as e:  # bounded: the run is stopped, its process killed; tried again after retry_seconds
            self.metrics.tuning_runs.labels(ns, name, "gave_up").inc()
            self.worker.failed(key, now, lambda _: min(declared.tuning_interval_seconds, self.config.retry_seconds))
            log.warning("ScaledObject %s/%s: tuning %s (keeping %s)", ns, name, e,
                        wl.tuned.label if wl.tuned is not None else "the declared configuration")
            self._note(wl, at, "gave_up", str(e))
        except NotEnoughHistory as e:  # the normal first week: not a failure
            self.metrics.tuning_runs.labels(ns, name, "waiting").inc()
            self.worker.retry_at(key, now + min(max(e.wait_seconds, self.config.min_wait_seconds),
                                                self.config.retry_seconds))
            log.info("ScaledObject %s/%s: tuning waits for history: %s", ns, name, e)
            self._note(wl, at, "waiting", str(e))
        except Exception as e:  # a tuning run must never take the service down
            self.metrics.tuning_runs.labels(ns, name, "failed").inc()
            self.worker.failed(key, now, lambda _: min(declared.tuning_interval_seconds, self.config.retry_seconds))
            log.warning("ScaledObject %s/%s: tuning failed (keeping %s): %s", ns, name,
                        wl.tuned.label if wl.tuned is not None else "the declared configuration",
                        e if isinstance(e, (ValueError, PromError)) else f"{type(e).__name__}: {e}")
            self._note(wl, at, "failed", str(e) if isinstance(e, (ValueError, PromError)) else type(e).__name__)

    def _note(self, wl: Workload, at: float, outcome: str, detail: str) -> None:
        """A run that chose nothing, for the decision log (``on_run``: the server's ``Watch.note_tuning_run``)."""
        if self.on_run is not None:
            self.on_run(wl, at, outcome, detail)

    def _tune_once(self, wl: Workload, spec: ScalerSpec, now: float, at: float) -> tuple[dict, float]:
        """The sweep's figures and the cutoff it ran on (``at``, or a first choice's earlier grid boundary)."""
        step = spec.step_seconds
        series, at, have = run_window(wl.client, wl.key, spec, now, at,
                                      fetch_seconds(spec.history_seconds, self.config.span_seconds),
                                      self.config.retry_seconds)
        cold = wl.t_cold().seconds  # the T_cold in force: the cluster's, the probe's or coldStartSeconds
        model = spec.model if spec.model != "auto" else "prophet"
        job = TuningJob(name=f"{wl.namespace}/{wl.name}", t=series.t, y=series.y, step=step,
                        qps_per_replica=spec.qps_per_replica, cold_start_seconds=cold,
                        buffer_seconds=spec.lead.buffer_seconds, model=model, history_seconds=spec.history_seconds,
                        refit_seconds=max(spec.refit_interval_seconds, self.config.min_refit_seconds),
                        span_seconds=min(self.config.span_seconds, have / 2), tolerance=cluster_tolerance(spec),
                        activation_threshold=spec.activation_threshold, target_miss=spec.target_miss,
                        max_cost_ratio=spec.max_cost_ratio, families=self.config.families, holidays=spec.holidays,
                        holiday_window=spec.holiday_window, holiday_as=spec.holiday_as, timezone=spec.timezone,
                        events=FILES.get(spec.events_file).events if spec.events_file else ())
        return self.worker.run(run_job, job, seconds=self.config.max_seconds, max_rss=self.config.max_rss_bytes), at

    def _export(self, wl: Workload, tuned: Tuned) -> None:
        m, ns, name = self.metrics, wl.namespace, wl.name
        drop_series(m.tuning_info, lambda k: k[:2] == (ns, name))
        st = dict(tuned.settings)
        declared = wl.declared or wl.spec
        applied = declared.mode != "forecastOnly"
        m.tuning_info.labels(ns, name, tuned.policy, str(st.get("mode", declared.mode)),
                             str(st.get("model", "")) if st.get("mode") != "reactive" else "",
                             "" if "quantile" not in st or st.get("mode") == "reactive" else f"{st['quantile']:g}",
                             "" if st.get("mode") == "reactive" else f"{st.get('level_correction_seconds', 0):g}",
                             f"{st.get('headroom', 1.0):g}", f"{st.get('hpa_tolerance', 0.0):g}",
                             "true" if tuned.met else "false", "true" if applied else "false").set(1)
        m.tuning_miss.labels(ns, name).set(tuned.miss)
        if tuned.cost_ratio is not None:
            m.tuning_cost.labels(ns, name).set(tuned.cost_ratio)
        m.tuning_last.labels(ns, name).set(tuned.chosen_at)

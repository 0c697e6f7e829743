"""The registry of tracked ScaledObjects, refreshed in the background; RPCs read it from memory.

``Registry`` owns every tracked ScaledObject (a ``Workload``): its validated
spec, its Prometheus client, the last observation, the cold-start value and
the forecast. A scheduler thread (``tick``) has observations refreshed every few
seconds (``scaler.serve.refresher``: the queries, on an I/O pool), asks the forecast and
tuning services to run on their schedules and forgets ScaledObjects that KEDA
stopped polling. Parsed metadata is cached apart (``identity.SpecCache``). ``decision`` turns that state
into the policy's answer or a ``ScalerError`` (``scaler.serve.answer``) -- never a blocking call, except
the first call for a new ScaledObject, which may wait for one bounded refresh.

The registry is the only writer of a ``Workload``: the forecast and tuning
services hand their results to ``adopt_forecast`` and ``apply_tuned``, which
keep them only if the spec they were computed for is still the one in force.

Identity: a workload is (namespace, name, metricName, digest of the metadata
map). Another map for the same names -- a second forescale trigger in one
ScaledObject, another gRPC caller, or the user's edit -- is another workload
with its own observation, forecast, series (label ``trigger``), state and
budget; it never replaces one in force. A workload KEDA stopped polling is
retired (``cadence.triage``): after ``retire_seconds`` of silence once another workload of the same
ScaledObject was polled since (an edit), else after ``forget_seconds``; its
state files stay until a sweep ``forget_seconds`` later.

Clocks are injected: ``clock`` (wall: forecast times, KEDA's answers) and
``monotonic`` (ages, intervals, forgetting; a stepped wall clock moves none of
them). The server passes ``time.time`` and ``time.monotonic``, tests a fake
for both; so is the Prometheus client (``client_factory``).
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Mapping

from ..policy import Decision
from ..prom import CredentialStore, Credentials, PrometheusClient, PromError
from ..spec import PrometheusTarget, ScalerSpec
from ..events import FILES
from .admission import PROVEN_POLLS, Table  # noqa: F401 - PROVEN_POLLS: re-exported
from . import capacityfile
from .answer import Answers, match_metric
from .cadence import refresh_interval, triage
from .capacityfile import CAPACITY_FILES
from .coldstart import ColdStartService
from .keeper import Keeper
from ..learned import CapacityLearner
from .state import JsonStore
from .metrics import ScalerMetrics
from .opsmetrics import ops_metrics
from .ratelimit import LogLimiter
from .identity import SpecCache, inherit, metadata_digest  # noqa: F401 - metadata_digest: re-exported
from .refresher import Refresher
from .registryconfig import RegistryConfig  # noqa: F401 - RegistryConfig: re-exported
from .watch import Watch
from .workload import Clock, ForecastService, ForecastState, ScalerError, Tuned, TuningService, Workload

log = logging.getLogger(__name__)


class Registry:
    def __init__(self, clock: Clock, credentials: CredentialStore, metrics: ScalerMetrics,
                 config: RegistryConfig = RegistryConfig(), forecasts: ForecastService | None = None,
                 tuning: TuningService | None = None, stores: tuple = (),
                 client_factory: Callable[[PrometheusTarget, Credentials | None], PrometheusClient] = PrometheusClient,
                 monotonic: Clock | None = None, query_at: Clock | None = None, watch: Watch | None = None,
                 ledger=None, learned_store: JsonStore | None = None):
        self.wall = clock  # forecast times and the policy's now
        self.clock = monotonic or clock  # ages, intervals, forgetting
        self.credentials = credentials
        self.metrics = metrics
        self.config = config
        self.forecasts = forecasts
        self.tuning = tuning
        self.coldstarts = ColdStartService(clock, metrics)  # coldStartFrom: cluster
        self.watch = watch  # live scores, drift state, the decision log (scaler.serve.watch); the caller records
        self.client_factory = client_factory
        self.stores = tuple(stores)  # JsonStores whose files a forgotten ScaledObject takes with it
        self._lock = threading.Lock()
        self.changed = threading.Condition(self._lock)  # notified at stop; each workload has its own (``wait_changed``)
        self._workloads = Table()  # by key, indexed by ScaledObject and namespace (scaler.serve.admission)
        self.specs = SpecCache(config.max_specs_cached, config.max_spec_cache_bytes)
        self._unswept: dict[tuple[str, str, str], float] = {}  # forgotten workload key -> when (its files await a sweep)
        self.limiter = LogLimiter(self.clock, config.log_interval_seconds)
        self.ops = ops_metrics(metrics)
        # what a trigger learns online (capacity, the loop's factor, the forecast error), kept across a restart
        self.keeper = None if learned_store is None else Keeper(
            learned_store, self.changed, clock, self.clock, watch=watch, learner=lambda configured: CapacityLearner(
                configured, settle=config.capacity_settle_seconds, min_samples=config.capacity_min_samples))
        if learned_store is not None:
            self.stores += (learned_store,)
        # the decision and what is recorded of it; ``ledger``: the fleet GPU budgets (scaler.serve.ledger.Ledger),
        # None without --budget-file
        self.answers = Answers(self.clock, clock, config, metrics, watch, ledger)
        # the observation refreshes (scaler.serve.refresher). Instant queries carry no time= (Prometheus' own
        # now, as KEDA's scaler); only a simulated clock (tests replaying backfilled data) passes itself as
        # ``query_at`` to evaluate them at its time
        self.refresher = Refresher(self.changed, self.clock, metrics, config, self.limiter,
                                   lambda w: self._workloads.get(w.key) is w, query_at, wall=clock, keeper=self.keeper)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ticks = 0  # scheduler rounds done: the process' heartbeat (the server's health reads it)

    # -- lookup (RPC threads) -------------------------------------------------
    def spec_for(self, namespace: str, name: str, metadata: Mapping[str, str]) -> ScalerSpec:
        """Parse (cached) and validate; raises ScalerError INVALID_ARGUMENT."""
        return self.identify(namespace, name, metadata)[0]

    def identify(self, namespace: str, name: str, metadata: Mapping[str, str]) -> tuple[ScalerSpec, str]:
        """The validated spec (cached) and the metadata digest; raises ScalerError INVALID_ARGUMENT."""
        return self.specs.identify(namespace, name, metadata)

    def workload(self, namespace: str, name: str, metadata: Mapping[str, str], *, wait: bool = True,
                 poll: bool = True) -> Workload:
        """The tracked workload for this trigger, created (and first refreshed) on first sight.

        ``poll``: this is one of KEDA's polls (its cadence sets the refresh interval); a stream's own
        re-check passes False."""
        spec, digest = self.identify(namespace, name, metadata)
        if spec.gpu_budget:
            self.answers.budget_known(spec.gpu_budget)
        now = self.clock()
        key = (namespace, name, f"{spec.metric_name}.{digest[:32]}")
        evicted, last = None, False
        with self._lock:
            wl = self._workloads.get(key)
            if wl is None:
                full = self._workloads.no_room(namespace, self.config)
                if full is not None:  # the cap or the namespace's quota: the least recently polled unproven goes
                    evicted = self._workloads.evictable(namespace, name, full)
                    if evicted is None:
                        raise ScalerError("RESOURCE_EXHAUSTED", f"ScaledObject {namespace}/{name}: {full}, and every "
                                          "trigger in it is in use; run another scaler for more ScaledObjects, or "
                                          "wait until unused ones are forgotten")
                    last = self._unlink(evicted)
                wl = Workload(namespace, name, capacityfile.read_in(spec), self._client(spec), created=now, last_polled=now,
                              changed=threading.Condition(self._lock), digest=digest)
                inherit(wl, self._workloads.of(namespace, name), self.tuning)  # an edit starts from its sibling
                self._workloads.add(wl)
                self._unswept.pop(key, None)  # back before the sweep: its files serve it again
                self.metrics.workloads.set(len(self._workloads))
                self.metrics.target.labels(*wl.labels).set(spec.qps_per_replica)
                self.metrics.refit_interval.labels(*wl.labels).set(spec.refit_interval_seconds)
                if wl.observed_at is None and not (wait and spec.capacity.model_file):  # else after its file
                    self.refresher.submit(wl, now)
                created = True
            else:
                created = False
                if poll:
                    wl.learn_poll(now)
            if poll:
                wl.polls += 1
            wl.last_polled = now
            self._workloads.polled(wl)
        if wait and created and spec.capacity.model_file:
            # its capacity file first (the model is the load's identity, which a stored forecast or choice must
            # match), then the first refresh, on that model
            CAPACITY_FILES.wait(spec.capacity.model_file, self.config.first_wait_seconds)
            capacityfile.apply(wl, self._lock)
            with self._lock:
                self.refresher.submit(wl, now)
        if created and self.tuning is not None and spec.tuning == "auto":
            tuned = self.tuning.restore(wl)  # the last choice (restart), before the forecast it selects
            if tuned is not None:
                self.apply_tuned(wl, tuned)
        if created and self.forecasts is not None and wl.spec.mode != "reactive":
            fs = self.forecasts.restore(wl)  # a stored forecast (restart) answers the very first call
            if fs is not None and fs.key is not None:  # (a stored forecast has its key)
                self.adopt_forecast(wl, fs, fs.key)
        if evicted is not None:
            self._cleanup(evicted, last, f"evicted for a new trigger: polled fewer than {PROVEN_POLLS} times while the "
                                         "scaler was at its limit")
        if wait and created and spec.events_file:  # its events read off this thread: waited for once, bounded
            FILES.wait(spec.events_file, self.config.first_wait_seconds)
        if wait and not wl.first_done.is_set():
            wl.first_done.wait(self.config.first_wait_seconds)
        return wl

    def _client(self, spec: ScalerSpec) -> PrometheusClient:
        try:
            creds = self.credentials.get(spec.prometheus.credentials)
            if creds is not None:
                creds.check_target(spec.prometheus.server_address)
                creds.check_headers(spec.prometheus.custom_headers)
        except PromError as e:
            raise ScalerError("FAILED_PRECONDITION", str(e)) from None
        return self.client_factory(spec.prometheus, creds)

    def apply_tuned(self, wl: Workload, tuned: Tuned) -> bool:
        """Adopt an auto-tuned configuration (tuner thread or first sight); False if the metadata moved on.

        Only the value's knobs change; a different model is refitted by the
        forecast service on its next tick while the current curve keeps serving.
        """
        with self._lock:
            declared = wl.declared or wl.spec
            if self.tuning is None or not self.tuning.applies(tuned, declared):
                return False
            wl.tuned = tuned
            wl.spec = tuned.apply(declared)
        if self.watch is not None:
            self.watch.note_tuned(wl, tuned)
        return True

    def adopt_forecast(self, wl: Workload, state: ForecastState, for_key: tuple,
                       replaces: ForecastState | None = None) -> bool:
        """Adopt a forecast computed for the forecast key ``for_key`` (fitter thread or first sight).

        False, and nothing changes, if the spec's forecast inputs changed
        meanwhile or, given ``replaces``, the forecast is no longer that one.
        """
        with self._lock:
            if wl.spec.forecast_key() != for_key or (replaces is not None and wl.forecast is not replaces):
                return False
            wl.forecast = state
        if self.watch is not None and replaces is None:
            self.watch.note_fit(wl, state)
        return True

    def adopt_cold_start(self, wl: Workload, reading) -> bool:  # a cluster reading, kept if the keys still ask for it
        with self._lock:
            if wl.spec.cold_start_cluster != reading.source or self._workloads.get(wl.key) is not wl:
                return False
            wl.cluster_cold = reading
            return True

    # -- the answer (RPC threads, memory only: scaler.serve.answer) ----------------
    def match_metric(self, wl: Workload, metric_name: str) -> None:
        """NOT_FOUND unless ``metric_name`` is the trigger's (in KEDA's forms: ``answer.match_metric``)."""
        match_metric(wl, metric_name)

    def decision(self, wl: Workload) -> Decision:
        """The answer for ``wl`` now, read from memory, or a ``ScalerError`` (``Answers.decision``)."""
        return self.answers.decision(wl)

    def record(self, wl: Workload, d: Decision) -> None:
        """The caller of ``decision`` records what it served (GetMetrics): exported, scored and logged
        (``scaler.serve.watch``)."""
        self.answers.export(wl, d)
        wl.answered = d.planned  # the replicas asked for: the closed loop waits for them before it raises again
        derived = self.answers.scored(wl, d)
        if derived is not None:  # the lead's forecast-error part as the scores measure it (forecastErrorSeconds: auto)
            wl.forecast_error = derived

    def note_active(self, wl: Workload, d: Decision, active: bool) -> None:
        """An IsActive answer (its metrics, and its changes in the decision log)."""
        self.answers.note_active(wl, d, active)

    def export(self, wl: Workload, d: Decision) -> None:
        """A decision as metrics (``Answers.export``)."""
        self.answers.export(wl, d)

    # -- background ------------------------------------------------------------
    def start(self, tick_seconds: float = 1.0) -> None:
        def loop() -> None:
            before = self.clock()
            while not self._stop.wait(tick_seconds):
                now = self.clock()
                self._skip_stall(now - before - tick_seconds)
                before = now
                try:
                    self.tick()
                except Exception:  # the loop must survive anything
                    log.exception("scheduler tick failed")
                self.ticks += 1
        self._thread = threading.Thread(target=loop, name="forescale-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self.changed:
            self.changed.notify_all()
            for wl in self._workloads.values():
                if wl.changed is not None:
                    wl.changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.keeper is not None:
            self.keeper.flush(self.workloads())
        self.refresher.stop()
        self.coldstarts.stop()

    def wait_changed(self, wl: Workload, seconds: float) -> None:
        """Sleep until ``wl`` is refreshed, the registry stops, or ``seconds`` pass."""
        if wl.changed is None or self._stop.is_set():
            return
        with wl.changed:
            wl.changed.wait(seconds)

    def wait_stopping(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True when the registry is stopping."""
        return self._stop.wait(seconds)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def tick(self) -> None:
        """Refresh what is due, schedule refits, retire and forget what KEDA stopped polling, sweep files."""
        now = self.clock()
        with self._lock:
            workloads = list(self._workloads.values())
        gone, kept, due = triage(workloads, now, self.config)  # (scaler.serve.cadence)
        for wl, why in gone:
            self._forget(wl, why)
        with self._lock:
            self.refresher.drain(now)  # what waits for a rate's tokens goes first
        for wl in due:
            late = wl.attempted_at is not None and now - wl.attempted_at > refresh_interval(wl, self.config) + 2.0
            with self._lock:
                started = self.refresher.submit(wl, now)
            if started and late:
                self.ops.late.inc()
        with self._lock:
            self.ops.in_flight.set(self.refresher.in_flight())
        wall = self.wall()
        for wl in kept:
            if self.forecasts is not None and wl.spec.mode != "reactive":
                self.forecasts.maybe_refit(wl, wall, self.adopt_forecast)
            if self.tuning is not None and (wl.declared or wl.spec).tuning == "auto":
                self.tuning.maybe_tune(wl, wall, self.apply_tuned)
            self.coldstarts.maybe_refresh(wl, wall, self.adopt_cold_start)
            capacityfile.apply(wl, self._lock)  # a capacity file read anew: its model in force (memory only)
        self._sweep(now)

    def _skip_stall(self, gap: float) -> None:
        """The scheduler woke ``gap`` seconds late: past ``stall_seconds`` the process was frozen (SIGSTOP, a
        paused VM) and KEDA could not reach us meanwhile, so the gap does not count as silence."""
        if gap <= self.config.stall_seconds:
            return
        with self._lock:
            for wl in self._workloads.values():
                wl.last_polled += gap
            for k in self._unswept:
                self._unswept[k] += gap
        log.warning("scheduler resumed after %.0fs (the process was frozen): not counted as KEDA's silence", gap)

    def _sweep(self, now: float) -> None:
        """State files of workloads forgotten ``forget_seconds`` ago and not back since."""
        with self._lock:
            gone = [k for k, at in self._unswept.items() if now - at >= self.config.forget_seconds
                    and k not in self._workloads]
            for k in gone:
                del self._unswept[k]
        for k in gone:
            for store in self.stores:
                try:
                    store.forget(*k)
                except OSError as e:
                    log.warning("cannot remove state of %s/%s: %s", k[0], k[1], e.strerror)

    def _forget(self, wl: Workload, why: str) -> None:
        """Out of memory, its series gone; its state files stay until ``_sweep`` (it may come back)."""
        with self._lock:
            if self._workloads.get(wl.key) is not wl:
                return
            last = self._unlink(wl)
        self._cleanup(wl, last, why)

    def _unlink(self, wl: Workload) -> bool:
        """Caller holds the lock: ``wl`` out of the table; True when it was its ScaledObject's last trigger."""
        last = self._workloads.remove(wl)
        self._unswept[wl.key] = self.clock()
        self.metrics.workloads.set(len(self._workloads))
        return last

    def _cleanup(self, wl: Workload, last: bool, why: str) -> None:
        """The rest of forgetting an unlinked workload: its cached spec, series, services' state, log."""
        self.specs.forget(wl.namespace, wl.name, None if last else wl.digest)
        self.metrics.forget(wl.namespace, wl.name, wl.trigger, whole=last)
        labels = wl.labels
        self.limiter.forget(lambda k: isinstance(k, tuple) and k[:3] == labels)
        if self.forecasts is not None:
            self.forecasts.forget(wl)
        if self.tuning is not None:
            self.tuning.forget(wl)
        self.coldstarts.forget(wl)
        if self.watch is not None:
            self.watch.forget(wl)
        # at most one line a minute per namespace (a caller churning one-shot triggers must not flood the log)
        self.limiter.log(log, logging.INFO, (wl.namespace, "forgot"), "forgot ScaledObject %s/%s trigger %s (%s)",
                         wl.namespace, wl.name, wl.trigger, why)

    def workloads(self, namespace: str | None = None, name: str | None = None) -> list[Workload]:
        """The tracked workloads (of one ScaledObject, given its namespace and name)."""
        with self._lock:
            if namespace is None:
                return list(self._workloads.values())
            return [] if name is None else self._workloads.of(namespace, name)

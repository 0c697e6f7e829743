"""Server wiring: the one place that reads the clock, the environment and signals.

``Server`` assembles the state stores (``--state-dir``: forecasts at its top,
tuning choices under ``tuning/``, what triggers learned online under ``learned/``), the registry, the forecast and tuning
services, the servicer, the gRPC server (with the standard health service and
reflection) and the HTTP endpoint (``/metrics``, ``/healthz``); ``run`` adds
signal handling and blocks until SIGTERM/SIGINT, then stops gracefully.
A port or host it cannot listen on, or TLS files that do not load, raise
``OSError``/``ValueError`` naming the flag and the cause (the CLI exits 2).

Clocks: ``time.time`` (forecast times) and ``time.monotonic`` (ages, intervals,
forgetting) are read here only and passed in. TLS (``tls``): the certificate, key and
client CA are re-read after they change on disk (cert-manager rotates them),
on the next handshake; plaintext gRPC logs a warning at start and exports
``forescale_grpc_tls_enabled 0``.
"""

from __future__ import annotations

import faulthandler
import functools
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from .._proto import externalscaler_pb2 as pb
from .._proto import externalscaler_pb2_grpc as pb_grpc
from .http import HttpEndpoint, TokenFile, add_runtime_collectors, make_app
from .metrics import ScalerMetrics
from ..events import DEFAULT_DIRS as DEFAULT_EVENTS_DIRS, FILES as EVENTS_FILES
from ..limits import BUDGET_SYNC_SECONDS
from .capacityfile import CAPACITY_FILES, DEFAULT_DIRS as DEFAULT_CAPACITY_DIRS
from ..prom import CredentialStore, PrometheusClient, PromPool
from ..spec import GRPC_PORT
from .opsmetrics import ops_metrics
from .service import ExternalScalerServicer
from .registry import Registry, RegistryConfig
from .decisionlog import DecisionLog
from .files import load_key
from .logs import setup_logging
from .state import JsonStore
from .threads import ReapingExecutor
from .tls import server_credentials
from .tuning import MAX_RUN_RSS_BYTES, MAX_RUN_SECONDS
from .view import StatusView
from .watch import Watch, WatchCollector

log = logging.getLogger("forescale")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ExternalScaler"].full_name


@dataclass(frozen=True)
class ServerConfig:
    host: str = "0.0.0.0"
    grpc_port: int = GRPC_PORT
    http_port: int = 8080
    state_dir: str | None = None
    state_key_file: str | None = None  # the HMAC key of the state files (a mounted Secret); else <state-dir>/.state-key
    credentials_dir: str | None = None
    log_level: str = "info"
    log_format: str = "text"  # or "json": one JSON object per line
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None  # given: clients must present a certificate (mTLS)
    max_streams: int = 1000  # open StreamIsActive/StreamMetricSpec at most; more are RESOURCE_EXHAUSTED
    max_streams_per_namespace: int = 100  # ... per namespace (one caller cannot take KEDA's slots)
    rpc_idle_seconds: float = 30.0  # an RPC thread idle this long exits (cancelled streams give theirs back)
    grpc_workers: int = 1064  # each open stream holds one; max_streams + 64 are left for unary RPCs
    prom_connections_per_target: int = 8  # shared by every ScaledObject querying that Prometheus
    prom_max_in_flight: int = 256  # all targets together (32 hung targets of 8 before a healthy one queues)
    fit_workers: int = 1
    self_watch: bool = True  # live scores, drift response and the decision log (scaler.serve.watch)
    registry: RegistryConfig = field(default_factory=RegistryConfig)
    grace_seconds: float = 10.0
    events_dirs: tuple[str, ...] = DEFAULT_EVENTS_DIRS  # eventsFile is read only under these (--events-dir)
    capacity_dirs: tuple[str, ...] = DEFAULT_CAPACITY_DIRS  # capacityModel is read only under these (--capacity-dir)
    liveness_seconds: int = 60  # the scheduler silent this many supervisor rounds (1 s): NOT_SERVING
    http_token_file: str | None = None  # every HTTP path but /healthz wants this bearer token (--http-token-file)
    http_hide_queries: bool = False  # the status page and the API leave the triggers' PromQL out
    tuning_max_seconds: float = MAX_RUN_SECONDS  # a tuning run past this gives up (outcome gave_up)
    tuning_max_rss_bytes: int = MAX_RUN_RSS_BYTES  # ... or with its worker over this resident memory
    scheduler_tick_seconds: float = 1.0  # the registry's background tick (wall seconds; the drill's is 1/k)
    budget_file: str | None = None  # fleet GPU budgets (scaler.serve.ledger): YAML {budgets: [{name, gpus, rule}]}
    budget_peers: tuple[str, ...] = ()  # the other replicas' HTTP ports, whose budget claims are fetched
    budget_sync_seconds: float = BUDGET_SYNC_SECONDS  # ... this often


class Server:
    """A running forescale: gRPC + HTTP + background work. ``stop`` is graceful."""

    def __init__(self, config: ServerConfig, clock: Callable[[], float] = time.time,
                 extra_handlers: Sequence[grpc.GenericRpcHandler] = (), monotonic: Callable[[], float] | None = None,
                 pin_queries: bool | None = None, interceptors: Sequence[grpc.ServerInterceptor] = ()):
        """``monotonic``: the clock of ages and intervals (``time.monotonic`` when ``clock`` is the wall clock;
        a test's fake ``clock`` serves as both). ``pin_queries``: instant queries carry ``time=clock()``; by
        default only for a simulated clock (a test replaying backfilled data), never for ``time.time``.
        ``interceptors``: gRPC server interceptors (the drill records every answer with one)."""
        self.config = config
        if monotonic is None:
            monotonic = time.monotonic if clock is time.time else clock
        self.metrics = ScalerMetrics()
        add_runtime_collectors(self.metrics.registry)
        EVENTS_FILES.allow(config.events_dirs)
        CAPACITY_FILES.allow(config.capacity_dirs)
        self.clock = clock
        self.ops = ops_metrics(self.metrics)
        self.pool = PromPool(per_target=config.prom_connections_per_target, max_in_flight=config.prom_max_in_flight,
                             clock=monotonic)
        key = load_key(config.state_key_file, config.state_dir) if config.state_dir else None
        forecast_store = JsonStore(config.state_dir, self.metrics, key) if config.state_dir else None
        tuning_store = JsonStore(Path(config.state_dir) / "tuning", self.metrics, key) if config.state_dir else None
        learned_store = JsonStore(Path(config.state_dir) / "learned", self.metrics, key) if config.state_dir else None
        self.forecasts = _forecast_service(config, clock, self.metrics, forecast_store)
        self.tuning = _tuning_service(config, clock, self.metrics, tuning_store)
        self.journal = DecisionLog(Path(config.state_dir) / "decisions", self.metrics) \
            if config.state_dir and config.self_watch else None  # the durable decision log (scaler.serve.decisionlog)
        self.watch = Watch(on_alarm=self.forecasts.refit_now if self.forecasts is not None else None,
                           journal=self.journal) if config.self_watch else None
        if self.watch is not None:
            self.metrics.registry.register(WatchCollector(self.watch, clock))
            if self.tuning is not None:
                self.tuning.on_run = self.watch.note_tuning_run  # waits and failures in the decision log too
        self.ledger = _ledger(config, clock, self.metrics)
        self.registry = Registry(clock, CredentialStore(config.credentials_dir), self.metrics, config.registry,
                                 forecasts=self.forecasts, tuning=self.tuning,
                                 stores=tuple(x for x in (forecast_store, tuning_store, self.journal)
                                              if x is not None),
                                 client_factory=functools.partial(PrometheusClient, pool=self.pool),
                                 monotonic=monotonic, watch=self.watch, ledger=self.ledger, learned_store=learned_store,
                                 query_at=clock if (clock is not time.time if pin_queries is None else pin_queries) else None)
        if config.max_streams > config.grpc_workers - 16:
            raise ValueError(f"max_streams ({config.max_streams}) must leave at least 16 of grpc_workers "
                             f"({config.grpc_workers}) to unary RPCs and the health check")
        # no SO_REUSEPORT: a second scaler on a busy port must fail, not share it silently
        # threads made on demand and given back after 30 s idle (1,000 cancelled streams must not leave 1,000)
        self.rpc_pool = ReapingExecutor(config.grpc_workers, config.rpc_idle_seconds, thread_name_prefix="rpc")
        self.grpc = grpc.server(self.rpc_pool, handlers=list(extra_handlers), interceptors=list(interceptors),
                                options=[("grpc.so_reuseport", 0)])
        pb_grpc.add_ExternalScalerServicer_to_server(
            ExternalScalerServicer(self.registry, max_streams=config.max_streams,
                                   max_streams_per_namespace=config.max_streams_per_namespace), self.grpc)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc)
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self.grpc)
        address = f"{config.host}:{config.grpc_port}"
        creds = (server_credentials(config.tls_cert, config.tls_key, config.tls_client_ca) if config.tls_cert
                 else None)
        self.ops.grpc_tls.set(0 if creds is None else 2 if config.tls_client_ca else 1)
        try:
            self.grpc_port = self.grpc.add_secure_port(address, creds) if creds else self.grpc.add_insecure_port(address)
        except RuntimeError:  # grpcio >= 1.5x raises instead of returning 0
            self.grpc_port = 0
        if self.grpc_port == 0:
            raise OSError(f"cannot listen on {address} (gRPC, --host/--port): {_bind_cause(config.host, config.grpc_port)}")
        self._stopping = threading.Event()
        token = TokenFile(config.http_token_file) if config.http_token_file else None
        self.token = token
        self.http = HttpEndpoint(config.host, config.http_port,
                                 make_app(self.metrics.registry, self.healthy, clock,
                                          StatusView(self.registry, self.watch, config.http_hide_queries), token,
                                          ledger=self.ledger),
                                 monotonic=time.monotonic)
        self.http_port = self.http.port
        self._serving = True
        self._stalled_rounds = 0  # supervisor rounds (1 s) since the scheduler last ticked
        self._watch_thread = threading.Thread(target=self._watch, name="supervisor", daemon=True)

    def healthy(self) -> bool:
        """The process can serve: not stopping, and its scheduler (the refreshes behind every answer) has ticked in
        the last ``liveness_seconds`` rounds of the supervisor (1 s each). Never one workload's state: a
        trigger whose fits fail or whose history is short has its own reason, metric and alert (issue 40, item 3)."""
        return not self._stopping.is_set() and self._stalled_rounds < self.config.liveness_seconds

    def _watch(self) -> None:
        """Every second: health follows the scheduler's heartbeat; connection and in-flight gauges follow the pool."""
        seen = self.registry.ticks
        while not self._stopping.wait(1.0):
            ticks = self.registry.ticks
            self._stalled_rounds = 0 if ticks != seen else self._stalled_rounds + 1
            seen = ticks
            ok = self.healthy()
            if ok != self._serving:
                self._serving = ok
                status = health_pb2.HealthCheckResponse.SERVING if ok else health_pb2.HealthCheckResponse.NOT_SERVING
                for name in ("", SERVICE_NAME):
                    self.health.set(name, status)
                log.log(logging.INFO if ok else logging.ERROR, "health: %s",
                        "SERVING" if ok else f"NOT_SERVING (the scheduler has not ticked for {self._stalled_rounds}s)")
            self.ops.connections.set(self.pool.connections())

    def start(self) -> "Server":
        if self.forecasts is not None:
            self.forecasts.start()
        self.tuning.start()
        self.registry.start(self.config.scheduler_tick_seconds)
        if self.ledger is not None:
            self.ledger.start(list(self.config.budget_peers), self.token.get if self.token is not None else None,
                              self.config.budget_sync_seconds)
        self.grpc.start()
        self.http.start()
        self._watch_thread.start()
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("forescale serving gRPC on %s:%d, HTTP on %s:%d", self.config.host, self.grpc_port,
                 self.config.host, self.http_port)
        if not self.config.tls_cert:
            log.warning("gRPC is plaintext and unauthenticated: any client that reaches port %d can read every "
                        "ScaledObject's decisions and start queries with its metadata; set --tls-cert/--tls-key "
                        "and --tls-client-ca (mutual TLS, the Helm chart's default)", self.grpc_port)
        return self

    def stop(self, grace: float | None = None) -> None:
        """Report NOT_SERVING, finish in-flight RPCs (bounded), stop background work; within grace + ~3 s,
        whatever Prometheus does (requests in flight are cancelled, worker processes killed)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self.health.enter_graceful_shutdown()
        self.registry.stop()  # ends the streams' waits
        if self.ledger is not None:
            self.ledger.stop()
        self.pool.close(timeout=2.0)  # hung or dripping requests end now: no refresher thread waits on them
        self.grpc.stop(self.config.grace_seconds if grace is None else grace).wait()
        if self.forecasts is not None:
            self.forecasts.stop()
        self.tuning.stop()
        self.http.stop()
        if self.journal is not None:
            self.journal.stop()
        EVENTS_FILES.allow(None)
        CAPACITY_FILES.allow(None)
        log.info("forescale stopped")


def _bind_cause(host: str, port: int) -> str:
    """Why gRPC could not listen (it says only "Failed to bind"): try the same bind and report the OS error."""
    import socket

    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as e:
        return f"{host!r} is not an address of this machine ({e.strerror or e})"
    for family, kind, proto, _, addr in infos:
        with socket.socket(family, kind, proto) as s:
            try:
                s.bind(addr)
            except OSError as e:
                return f"{e.strerror or e} (errno {e.errno})"
    return "address in use or not allowed"


def _ledger(config: ServerConfig, clock: Callable[[], float], metrics: ScalerMetrics):
    """The fleet GPU budgets of ``--budget-file`` (None without one); ValueError naming what is wrong."""
    if config.budget_file is None:
        if config.budget_peers:
            raise ValueError("--budget-peers shares the claims of a fleet GPU budget: give --budget-file too")
        return None
    from ..manifest_yaml import MAX_MANIFEST_BYTES, YamlError, load_all
    from .ledger import BudgetFileError, Ledger, check_peers, read_budgets

    path = config.budget_file
    try:
        with open(path, encoding="utf-8") as fh:
            docs = [d for d in load_all(fh.read(MAX_MANIFEST_BYTES + 1)) if d is not None]
        if len(docs) != 1:
            raise BudgetFileError(f"{len(docs)} YAML documents; expected one: budgets: [{{name, gpus, rule}}]")
        budgets = read_budgets(docs[0])
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--budget-file {path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    except (YamlError, BudgetFileError) as e:
        raise ValueError(f"--budget-file {path}: {e}") from None
    if not config.budget_sync_seconds > 0:
        raise ValueError(f"--budget-sync-seconds {config.budget_sync_seconds!r}: accepted is a number of seconds > 0")
    check_peers(list(config.budget_peers))
    return Ledger(budgets, clock, metrics)


def _forecast_service(config: ServerConfig, clock: Callable[[], float], metrics: ScalerMetrics,
                      store: JsonStore | None):
    """The background forecast fitter."""
    from .fitting import FitService

    return FitService(clock, metrics, store=store, workers=config.fit_workers)


def _tuning_service(config: ServerConfig, clock: Callable[[], float], metrics: ScalerMetrics, store: JsonStore | None):
    """``tuning: auto``: one background sweep at a time, in a low-priority worker process, bounded in time and
    memory."""
    from .tuning import TuningConfig, TuningService

    return TuningService(clock, metrics, store=store, config=TuningConfig(max_seconds=config.tuning_max_seconds,
                                                                          max_rss_bytes=config.tuning_max_rss_bytes))


def handle_other_signals() -> None:
    """Signals that used to kill the server at once (issue 40, item 11): SIGUSR1 writes every thread's stack to
    stderr (faulthandler: a hung server's state, as ``kill -USR1`` asks of many daemons); SIGHUP and SIGUSR2 are
    ignored and logged (nothing needs reloading: TLS, events and credential files are re-read when they change)."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    def ignored(signum, _frame) -> None:
        log.info("received %s: ignored (TLS, events and credential files are re-read when they change; "
                 "SIGUSR1 dumps the threads' stacks, SIGTERM stops)", signal.Signals(signum).name)

    for sig in (signal.SIGHUP, signal.SIGUSR2):
        signal.signal(sig, ignored)


def run(config: ServerConfig) -> None:
    setup_logging(config.log_level, config.log_format)
    if config.credentials_dir is None and os.environ.get("FORESCALE_CREDENTIALS_DIR"):
        config = ServerConfig(**{**config.__dict__, "credentials_dir": os.environ["FORESCALE_CREDENTIALS_DIR"]})
    done = threading.Event()

    def on_signal(signum, _frame) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        done.set()

    # before start: a SIGTERM that lands once "serving" is logged (or during start) stops gracefully too
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    handle_other_signals()
    server = Server(config).start()
    done.wait()
    server.stop(grace=min(config.grace_seconds, 5.0))  # the whole stop within 10 s (kubelet's grace is 30 s)
    logging.shutdown()
    os._exit(0)  # threads stuck in I/O (none should be) must not hold the exit

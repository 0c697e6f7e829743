"""Server wiring: the one place that reads the clock, the environment and signals.

``Server`` assembles the state stores (``--state-dir``: forecasts at its top,
tuning choices under ``tuning/``), the registry, the forecast and tuning
services, the servicer, the gRPC server (with the standard health service and
reflection) and the HTTP endpoint (``/metrics``, ``/healthz``); ``run`` adds
signal handling and blocks until SIGTERM/SIGINT, then stops gracefully.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .._proto import externalscaler_pb2 as pb
from .._proto import externalscaler_pb2_grpc as pb_grpc
from .metrics import ScalerMetrics
from ..prom import CredentialStore, PrometheusClient, PromPool
from .opsmetrics import ops_metrics
from .service import ExternalScalerServicer
from .registry import Registry, RegistryConfig
from .state import JsonStore

log = logging.getLogger("forescale")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ExternalScaler"].full_name


@dataclass(frozen=True)
class ServerConfig:
    host: str = "0.0.0.0"
    grpc_port: int = 9090
    http_port: int = 8080
    state_dir: str | None = None
    credentials_dir: str | None = None
    log_level: str = "info"
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None  # given: clients must present a certificate (mTLS)
    max_streams: int = 1000  # open StreamIsActive/StreamMetricSpec at most; more are RESOURCE_EXHAUSTED
    grpc_workers: int = 1064  # each open stream holds one; max_streams + 64 are left for unary RPCs
    prom_connections_per_target: int = 8  # shared by every ScaledObject querying that Prometheus
    prom_max_in_flight: int = 256  # all targets together (32 hung targets of 8 before a healthy one queues)
    fit_workers: int = 1
    registry: RegistryConfig = field(default_factory=RegistryConfig)
    grace_seconds: float = 10.0


class _Http(ThreadingHTTPServer):
    daemon_threads = True


def _http_handler(metrics: ScalerMetrics, healthy: Callable[[], bool]):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server API)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                body, ctype, code = generate_latest(metrics.registry), CONTENT_TYPE_LATEST, 200
            elif path == "/healthz":
                ok = healthy()
                body, ctype, code = (b"ok\n" if ok else b"stopping\n"), "text/plain", (200 if ok else 503)
            else:
                body, ctype, code = b"not found: try /metrics or /healthz\n", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:  # quiet: scrapes every 15 s
            pass

    return Handler


class Server:
    """A running forescale: gRPC + HTTP + background work. ``stop`` is graceful."""

    def __init__(self, config: ServerConfig, clock: Callable[[], float] = time.time,
                 extra_handlers: Sequence[grpc.GenericRpcHandler] = ()):
        self.config = config
        self.metrics = ScalerMetrics()
        self.clock = clock
        self.ops = ops_metrics(self.metrics)
        self.pool = PromPool(per_target=config.prom_connections_per_target, max_in_flight=config.prom_max_in_flight)
        forecast_store = JsonStore(config.state_dir) if config.state_dir else None
        tuning_store = JsonStore(Path(config.state_dir) / "tuning") if config.state_dir else None
        self.forecasts = _forecast_service(config, clock, self.metrics, forecast_store)
        self.tuning = _tuning_service(clock, self.metrics, tuning_store)
        self.registry = Registry(clock, CredentialStore(config.credentials_dir), self.metrics, config.registry,
                                 forecasts=self.forecasts, tuning=self.tuning,
                                 stores=tuple(x for x in (forecast_store, tuning_store) if x is not None),
                                 client_factory=functools.partial(PrometheusClient, pool=self.pool))
        if config.max_streams > config.grpc_workers - 16:
            raise ValueError(f"max_streams ({config.max_streams}) must leave at least 16 of grpc_workers "
                             f"({config.grpc_workers}) to unary RPCs and the health check")
        self.grpc = grpc.server(ThreadPoolExecutor(max_workers=config.grpc_workers, thread_name_prefix="rpc"),
                                handlers=list(extra_handlers))
        pb_grpc.add_ExternalScalerServicer_to_server(
            ExternalScalerServicer(self.registry, max_streams=config.max_streams), self.grpc)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc)
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self.grpc)
        address = f"{config.host}:{config.grpc_port}"
        if config.tls_cert:
            self.grpc_port = self.grpc.add_secure_port(address, _tls(config))
        else:
            self.grpc_port = self.grpc.add_insecure_port(address)
        if self.grpc_port == 0:
            raise OSError(f"cannot listen on {address} (gRPC): address in use or not allowed")
        self._stopping = threading.Event()
        try:
            self.http = _Http((config.host, config.http_port), _http_handler(self.metrics, self.healthy))
        except OSError as e:
            raise OSError(f"cannot listen on {config.host}:{config.http_port} (HTTP): {e.strerror}") from None
        self.http_port = self.http.server_address[1]
        self._http_thread = threading.Thread(target=self.http.serve_forever, name="http", daemon=True)
        self._serving = True
        self._watch_thread = threading.Thread(target=self._watch, name="supervisor", daemon=True)

    def healthy(self) -> bool:
        """Serving: not stopping, and the forecast fits are not all failing for longer than a refit interval."""
        return not self._stopping.is_set() and (self.forecasts is None or self.forecasts.healthy(self.clock()))

    def _watch(self) -> None:
        """Every second: health follows the fit worker's state; connection and in-flight gauges follow the pool."""
        while not self._stopping.wait(1.0):
            ok = self.healthy()
            if ok != self._serving:
                self._serving = ok
                status = health_pb2.HealthCheckResponse.SERVING if ok else health_pb2.HealthCheckResponse.NOT_SERVING
                for name in ("", SERVICE_NAME):
                    self.health.set(name, status)
                log.log(logging.INFO if ok else logging.ERROR, "health: %s",
                        "SERVING" if ok else "NOT_SERVING (every forecast fit failing for longer than a refit interval)")
            self.ops.connections.set(self.pool.connections())

    def start(self) -> "Server":
        if self.forecasts is not None:
            self.forecasts.start()
        self.tuning.start()
        self.registry.start()
        self.grpc.start()
        self._http_thread.start()
        self._watch_thread.start()
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("forescale serving gRPC on %s:%d, HTTP on %s:%d", self.config.host, self.grpc_port,
                 self.config.host, self.http_port)
        return self

    def stop(self, grace: float | None = None) -> None:
        """Report NOT_SERVING, finish in-flight RPCs (bounded), stop background work; within grace + ~3 s,
        whatever Prometheus does (requests in flight are cancelled, worker processes killed)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self.health.enter_graceful_shutdown()
        self.registry.stop()  # ends the streams' waits
        self.pool.close(timeout=2.0)  # hung or dripping requests end now: no refresher thread waits on them
        self.grpc.stop(self.config.grace_seconds if grace is None else grace).wait()
        if self.forecasts is not None:
            self.forecasts.stop()
        self.tuning.stop()
        self.http.shutdown()
        self.http.server_close()
        log.info("forescale stopped")


def _tls(config: ServerConfig) -> grpc.ServerCredentials:
    def read(path: str, what: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            raise OSError(f"--{what}: cannot read {path}: {e.strerror}") from None

    if not config.tls_key:
        raise ValueError("--tls-cert needs --tls-key")
    pair = [(read(config.tls_key, "tls-key"), read(config.tls_cert, "tls-cert"))]
    if config.tls_client_ca:
        return grpc.ssl_server_credentials(pair, root_certificates=read(config.tls_client_ca, "tls-client-ca"),
                                           require_client_auth=True)
    return grpc.ssl_server_credentials(pair)


def _forecast_service(config: ServerConfig, clock: Callable[[], float], metrics: ScalerMetrics,
                      store: JsonStore | None):
    """The background forecast fitter."""
    from .fitting import FitService

    return FitService(clock, metrics, store=store, workers=config.fit_workers)


def _tuning_service(clock: Callable[[], float], metrics: ScalerMetrics, store: JsonStore | None):
    """``tuning: auto``: one background sweep at a time, in a low-priority worker process."""
    from .tuning import TuningService

    return TuningService(clock, metrics, store=store)


def run(config: ServerConfig) -> None:
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if config.credentials_dir is None and os.environ.get("FORESCALE_CREDENTIALS_DIR"):
        config = ServerConfig(**{**config.__dict__, "credentials_dir": os.environ["FORESCALE_CREDENTIALS_DIR"]})
    server = Server(config).start()
    done = threading.Event()

    def on_signal(signum, _frame) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    done.wait()
    server.stop(grace=min(config.grace_seconds, 5.0))  # the whole stop within 10 s (kubelet's grace is 30 s)
    logging.shutdown()
    os._exit(0)  # threads stuck in I/O (none should be) must not hold the exit

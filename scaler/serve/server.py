"""Server wiring: the one place that reads the clock, the environment and signals.

``Server`` assembles the state stores (``--state-dir``: forecasts at its top,
tuning choices under ``tuning/``), the registry, the forecast and tuning
services, the servicer, the gRPC server (with the standard health service and
reflection) and the HTTP endpoint (``/metrics``, ``/healthz``); ``run`` adds
signal handling and blocks until SIGTERM/SIGINT, then stops gracefully.
"""

from __future__ import annotations

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
from ..prom import CredentialStore
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
    grpc_workers: int = 64  # each open KEDA stream holds one
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
        forecast_store = JsonStore(config.state_dir) if config.state_dir else None
        tuning_store = JsonStore(Path(config.state_dir) / "tuning") if config.state_dir else None
        self.forecasts = _forecast_service(config, clock, self.metrics, forecast_store)
        self.tuning = _tuning_service(clock, self.metrics, tuning_store)
        self.registry = Registry(clock, CredentialStore(config.credentials_dir), self.metrics, config.registry,
                                 forecasts=self.forecasts, tuning=self.tuning)
        self.grpc = grpc.server(ThreadPoolExecutor(max_workers=config.grpc_workers, thread_name_prefix="rpc"),
                                handlers=list(extra_handlers))
        pb_grpc.add_ExternalScalerServicer_to_server(ExternalScalerServicer(self.registry), self.grpc)
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
            self.http = _Http((config.host, config.http_port), _http_handler(self.metrics, lambda: not self._stopping.is_set()))
        except OSError as e:
            raise OSError(f"cannot listen on {config.host}:{config.http_port} (HTTP): {e.strerror}") from None
        self.http_port = self.http.server_address[1]
        self._http_thread = threading.Thread(target=self.http.serve_forever, name="http", daemon=True)

    def start(self) -> "Server":
        if self.forecasts is not None:
            self.forecasts.start()
        self.tuning.start()
        self.registry.start()
        self.grpc.start()
        self._http_thread.start()
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("forescale serving gRPC on %s:%d, HTTP on %s:%d", self.config.host, self.grpc_port,
                 self.config.host, self.http_port)
        return self

    def stop(self, grace: float | None = None) -> None:
        """Report NOT_SERVING, finish in-flight RPCs (bounded), stop background work."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self.health.enter_graceful_shutdown()
        self.registry.stop()  # ends the streams' waits
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
    server.stop()

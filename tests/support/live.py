"""Parts for tests against a server on the wall clock (tests/chaos): a real server over real gRPC on loopback
(``LiveScaler``), trigger metadata for the chaos Prometheus, targets that misbehave (``Switchable``: drip, tarpit)
and the process' resident memory."""

from __future__ import annotations

import json
import socket
import threading
import time

import grpc

from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from scaler.serve.registry import RegistryConfig
from scaler.serve.server import Server, ServerConfig

FLAT_QPS = 5.0
RATE = 'sum(rate(chaos_requests_total{job="flat"}[2m]))'


def threads(pid: str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("Threads:")).split()[1])


def sockets(pid: str = "self") -> int:
    """Open sockets of the process (its fds that are sockets)."""
    import os

    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


def server_threads() -> int:
    """Python threads of this process but the test's own and its fakes' (unnamed: ``Thread-N``): the server's."""
    return sum(1 for t in threading.enumerate() if not t.name.startswith("Thread-"))


class Vitals:
    """The server's threads (``server_threads``), this process' sockets and resident memory (the server under test
    runs in it), at the start and as the worst seen; ``figures()`` for a test's printed line."""

    def __init__(self):
        self.base = (server_threads(), sockets(), rss_bytes())
        self.worst = self.base

    def sample(self) -> tuple[int, int, int]:
        now = (server_threads(), sockets(), rss_bytes())
        self.worst = tuple(max(a, b) for a, b in zip(self.worst, now))  # type: ignore[assignment]
        return now

    def figures(self) -> str:
        (t0, s0, r0), (t1, s1, r1) = self.base, self.worst
        return f"threads {t0} -> {t1}, sockets {s0} -> {s1}, RSS {r0 >> 20} -> {r1 >> 20} MiB"


def health(channel) -> str:
    """The gRPC health check's status name (SERVING, NOT_SERVING)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status
    return health_pb2.HealthCheckResponse.ServingStatus.Name(status)


def rss_bytes(pid: str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


class LiveScaler:
    """A real ``Server`` on the wall clock, and a stub on loopback."""

    def __init__(self, **config):
        registry = config.pop("registry", {})
        cfg = ServerConfig(host="127.0.0.1", grpc_port=0, http_port=0, grace_seconds=1.0,
                           registry=RegistryConfig(**registry), **config)
        self.server = Server(cfg, clock=time.time).start()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.server.grpc_port}",
                                             options=[("grpc.max_send_message_length", 8 << 20)])
        self.stub = pb_grpc.ExternalScalerStub(self.channel)

    def ref(self, md: dict, name: str, namespace: str = "chaos") -> pb.ScaledObjectRef:
        return pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=md)

    def get(self, md: dict, name: str, timeout: float = 5.0) -> float:
        resp = self.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=self.ref(md, name)), timeout=timeout)
        return resp.metricValues[0].metricValueFloat

    def close(self) -> None:
        self.channel.close()
        self.server.stop(grace=1.0)


def metadata(url: str, **over) -> dict:
    return {"serverAddress": url, "query": RATE, "qpsPerReplica": "1", "mode": "reactive", "hpaTolerance": "0",
            **over}


class Switchable:
    """A Prometheus stand-in on 127.0.0.1 that answers ``value`` (mode ``ok``) until switched to ``drip``
    (the answer at 1 byte per 0.2 s) or ``tarpit`` (accepts, never answers)."""

    def __init__(self, value: float = 7.0):
        self.mode = "ok"
        self.value = value
        self.dripping = 0  # requests met in drip mode (each is held for seconds: in flight at the client)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.sock.settimeout(0.1)
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _answer(self) -> bytes:
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {}, "value": [time.time(), str(self.value)]}]}}).encode()
        return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self._conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        try:
            c.settimeout(0.5)  # inside: ``close`` may have closed it already
            while not self._stop.is_set():
                try:
                    req = c.recv(65536)
                except socket.timeout:
                    continue
                if not req:
                    return
                if self.mode == "ok":
                    c.sendall(self._answer())
                elif self.mode == "drip":
                    self.dripping += 1  # from the connection threads: a test only waits for it to leave 0
                    data = self._answer()
                    for i in range(len(data)):
                        if self._stop.wait(0.2):
                            return
                        c.send(data[i:i + 1])
                else:  # tarpit
                    self._stop.wait()
                    return
        except OSError:
            pass

    def close(self) -> None:
        self._stop.set()
        for c in self._conns:
            try:
                c.close()
            except OSError:
                pass
        self.sock.close()



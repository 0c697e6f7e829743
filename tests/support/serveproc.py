"""A real ``forescale serve`` process for tests from outside (tests/chaos): started on free ports, driven over
gRPC and its HTTP port, its helper processes found through /proc."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

import grpc

from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc

from . import promfixture as pf


def descendants(pid: int) -> dict[int, int]:
    """pid -> parent pid of every process below ``pid``."""
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, frontier = {}, [pid]
    while frontier:
        p = frontier.pop()
        for c, pp in parent.items():
            if pp == p and c not in out:
                out[c] = p
                frontier.append(c)
    return out


class Serve:
    """A real ``forescale serve`` process on 127.0.0.1 (free ports), its state under ``tmp_path / "state"``;
    ``args``: more flags. ``close`` kills it and returns everything it printed."""

    def __init__(self, tmp_path, *args: str):
        self.port, self.http_port = pf.find_free_port(), pf.find_free_port()
        self.state_dir = tmp_path / "state"
        exe = os.path.join(os.path.dirname(sys.executable), "forescale")
        self.proc = subprocess.Popen([exe, "serve", "--host", "127.0.0.1", "--port", str(self.port), "--http-port",
                                      str(self.http_port), "--state-dir", str(self.state_dir), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = pb_grpc.ExternalScalerStub(self.channel)
        self.output: str | None = None
        # drained all along: a server whose stdout pipe fills blocks in its logging (a container runtime drains it)
        self._lines: list[str] = []
        self._drain = threading.Thread(target=lambda: self._lines.extend(self.proc.stdout), daemon=True)
        self._drain.start()

    def ready(self) -> Serve:
        grpc.channel_ready_future(self.channel).result(timeout=30)
        return self

    def get(self, md: dict, name: str) -> float:
        ref = pb.ScaledObjectRef(name=name, namespace="chaos", scalerMetadata=md)
        return self.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref), timeout=10).metricValues[0].metricValueFloat

    def metric(self, name: str, labels: str = "") -> float | None:
        body = urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=5).read().decode()
        # the labels given, and any after them (a trigger's series also carry ``trigger``)
        pattern = re.escape(labels[:-1]) + r"(,[^}]*)?\}" if labels else ""
        m = re.search(rf"^{re.escape(name)}{pattern} (\S+)$", body, flags=re.M)
        return float(m.group(m.lastindex)) if m else None

    def wait_metric(self, name: str, labels: str, pred, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = self.metric(name, labels)
            if v is not None and pred(v):
                return v
            time.sleep(0.2)
        raise AssertionError(f"{name}{labels} not as expected within {timeout}s (last {v})")

    def close(self) -> str:
        if self.output is None:
            self.channel.close()
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(10)
            self._drain.join(10)
            self.output = "".join(self._lines)
        return self.output

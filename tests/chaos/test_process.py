"""The real ``forescale serve`` process: a SIGKILLed fit worker is replaced and the next fit succeeds; SIGTERM
ends it within 10 s while a target drips; SIGKILLed, it leaves no helper process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import grpc
import pytest

from scaler._proto import externalscaler_pb2 as pb
from scaler._proto import externalscaler_pb2_grpc as pb_grpc
from support import promfixture as pf
from support.live import FLAT_QPS, metadata


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
    def __init__(self, tmp_path):
        self.port, self.http_port = pf.find_free_port(), pf.find_free_port()
        exe = os.path.join(os.path.dirname(sys.executable), "forescale")
        self.proc = subprocess.Popen([exe, "serve", "--host", "127.0.0.1", "--port", str(self.port), "--http-port",
                                      str(self.http_port), "--state-dir", str(tmp_path / "state")],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = pb_grpc.ExternalScalerStub(self.channel)
        self.output: str | None = None

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
            self.output, _ = self.proc.communicate(timeout=10)
        return self.output


FIT_MD = {"mode": "forecastAndScale", "model": "naive", "history": "1h", "minHistory": "30m", "refitInterval": "10s",
          "levelCorrection": "0"}
LAST_FIT = 'forescale_last_fit_timestamp_seconds'
SO_LABELS = '{namespace="chaos",scaledobject="fitted"}'


@pytest.fixture(scope="module")
def servers(live_prom, tmp_path_factory):
    """One ``forescale serve`` process per test, both started side by side (each pays an interpreter's start-up
    and a first fit in a new worker process), each with the fitted workload polled once: its first fit is under way."""
    made = {k: Serve(tmp_path_factory.mktemp(k)) for k in ("sigterm", "sigkill")}
    try:
        for s in made.values():
            s.ready().get(metadata(live_prom.url, **FIT_MD), "fitted")
        yield made
    finally:
        for s in made.values():
            s.close()


def test_a_killed_fit_worker_is_replaced_and_sigterm_ends_within_10s(servers, live_prom, switchable):
    s = servers["sigterm"]
    try:
        md = metadata(live_prom.url, **FIT_MD)
        assert s.get(md, "fitted") == pytest.approx(FLAT_QPS, rel=1e-6)
        first = s.wait_metric(LAST_FIT, SO_LABELS, lambda v: v > 0, timeout=40)
        workers = [p for p, pp in descendants(s.proc.pid).items() if pp != s.proc.pid]  # children of the fork server
        assert workers, descendants(s.proc.pid)
        for w in workers:
            os.kill(w, signal.SIGKILL)  # as the OOM killer does
        # the next refit (10 s later) meets the dead pool: replaced, retried once, fitted
        s.wait_metric(LAST_FIT, SO_LABELS, lambda v: v > first, timeout=30)
        assert s.metric("forescale_fit_worker_restarts_total") == 1.0
        assert s.get(md, "fitted") == pytest.approx(FLAT_QPS, rel=1e-6)
        # a dripping target has requests in flight at SIGTERM: the stop is bounded anyway
        drip = switchable(value=1.0)
        for i in range(4):
            s.get(metadata(drip.url, timeout="60s"), f"drip-{i}")
        drip.mode = "drip"
        # the next refreshes (refresh floor 5 s) now hang in the drip (a 60 s timeout): wait until one does
        deadline = time.monotonic() + 30
        while drip.dripping == 0:
            assert time.monotonic() < deadline, "no refresh reached the dripping target within 30 s"
            time.sleep(0.1)
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        s.proc.wait(timeout=15)
        assert time.monotonic() - t0 < 10.0 and s.proc.returncode == 0
    finally:
        out = s.close()
    assert "a fit worker died; worker pool replaced" in out


def test_a_killed_server_leaves_no_helper_process(servers, live_prom):
    s = servers["sigkill"]
    try:
        s.get(metadata(live_prom.url, **FIT_MD), "fitted")
        s.wait_metric(LAST_FIT, SO_LABELS, lambda v: v > 0, timeout=40)
        helpers = descendants(s.proc.pid)
        assert len(helpers) >= 2  # the fork server and a fit worker at least
        s.proc.kill()
        s.proc.wait(10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in helpers):
            time.sleep(0.1)
        alive = [p for p in helpers if os.path.exists(f"/proc/{p}")
                 and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
        assert alive == [], alive
    finally:
        s.close()

"""The real ``forescale serve`` process: a SIGKILLed fit worker is replaced and the next fit succeeds; SIGTERM
ends it within 10 s while a target drips; SIGKILLed, it leaves no helper process behind."""

from __future__ import annotations

import os
import signal
import time

import pytest

from support.live import FLAT_QPS, metadata
from support.serveproc import Serve, descendants


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

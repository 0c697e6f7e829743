"""What a trigger learned online survives a restart (``scaler.serve.keeper``): a real server in this process on a
fake clock, over real gRPC, reading a real Prometheus, stopped and started again on its state directory.

The model server, as Prometheus holds it: 10 requests/s served by 2 ready replicas with requests waiting (6 until
``end + 540``, then 3): saturated all along, 5 req/s per replica where ``qpsPerReplica`` says 8. The trigger learns
the capacity (settled from the first sample, 3 samples: the test's knobs), uses it (``capacity: learned``), runs
the closed loop on the queue (target 2 per replica: 6 / 2 = 3 is 1.5x the target, raised; 3 / 2 = 1.5 is in the
dead zone, held) and measures its forecast error (``forecastErrorSeconds: auto``, a naive forecast of the flat
rate: every scored minute covered at once)."""

from __future__ import annotations

import json
import logging
import time

import numpy as np
import pytest

from scaler.leaderror import PRIOR_MINUTES
from scaler.serve.keeper import MAX_AGE_SECONDS, VERSION, part_keys
from scaler.serve.state import file_name
from support import promfixture as pf
from support.clock import FakeClock
from support.scaler import Scaler, wait_for_fit

REQ = "sum(rate(vllm:request_success_total[2m]))"
MD = {"query": REQ, "qpsPerReplica": "8", "hpaTolerance": "0", "tuning": "off", "refreshInterval": "5s",
      "model": "naive", "history": "2h", "minHistory": "1h", "refitInterval": "1h", "levelCorrection": "0",
      "coldStartSeconds": "60", "forecastErrorSeconds": "auto", "capacity": "learned",
      "queueQuery": "sum(vllm:num_requests_waiting)", "queueTarget": "2",
      "readyReplicasQuery": "max(kube_deployment_status_replicas_ready)"}
KNOBS = {"capacity_settle_seconds": 0.0, "capacity_min_samples": 3}
FAST = {"scheduler_tick_seconds": 0.1}  # the registry's tick (wall time): a refresh due on the fake clock starts soon


@pytest.fixture(scope="module")
def prom():
    end = float(int(time.time()) // 60 * 60)
    t = pf.sample_times(end - 7200.0, end + 1.2 * 86400, 30.0)
    waiting = np.where(t <= end + 540, 6.0, 3.0)
    series = [pf.SeriesSpec("vllm:request_success", {"model_name": "m"}, "counter", t, pf.counter_from_rate(t, 10.0)),
              pf.SeriesSpec("vllm:num_requests_waiting", {"model_name": "m"}, "gauge", t, waiting),
              pf.SeriesSpec("kube_deployment_status_replicas_ready", {"deployment": "m"}, "gauge", t,
                            np.full(len(t), 2.0))]
    with pf.PrometheusServer(series) as p:
        yield p, end


def trigger(s: Scaler, name: str = "llm", md: dict | None = None):
    """The tracked workload of ScaledObject serving/``name`` (the first poll's, made if it is not yet)."""
    return s.server.registry.workload("serving", name, md)


def refreshed(s: Scaler, clock: FakeClock, wl, seconds: float) -> None:
    """The clock ``seconds`` on and the trigger's next refresh done (its LLM history grows by a row)."""
    before = len(wl.llm.rows)
    clock.advance(seconds)
    for _ in range(800):  # only a hang waits this out
        if len(wl.llm.rows) > before and not wl.refreshing:
            return
        time.sleep(0.025)
    raise AssertionError(f"no refresh after the clock moved {seconds} s")


def learned(wl) -> tuple:
    st = wl.llm.learner.state() if wl.llm.learner is not None else None
    return None if st is None else (st.estimate, st.in_force, st.samples)


def test_the_learned_capacity_the_loop_and_the_forecast_error_survive_a_restart(prom, tmp_path, caplog):
    p, end = prom
    md = {**MD, "serverAddress": p.url}
    clock = FakeClock(end)
    s = Scaler(clock, state_dir=str(tmp_path), server=FAST, **KNOBS)
    try:
        s.value(md)
        wl = wait_for_fit(s, "llm", timeout=120)
        for _ in range(12):  # 12 minutes: the queue over target until end + 540, in the dead zone after
            refreshed(s, clock, wl, 60.0)
            served = s.value(md).metricValueFloat
        before = {"learned": learned(wl), "factor": wl.loop.factor,
                  "fe": s.server.watch.forecast_error(wl, clock()), "served": served}
    finally:
        s.close()
    est, in_force, n = before["learned"]
    # 5 req/s per ready replica at every sample (10 served / 2 ready), in force (37.5 % from 8: past the 10 %)
    assert est == pytest.approx(5.0, rel=1e-6) and in_force == pytest.approx(5.0, rel=1e-6) and n >= 12
    assert before["factor"] > 1.0  # raised while 3 waited per replica
    fe = before["fe"]
    # every scored minute covered at once (d* = 0): derived = 60 x 30 / (60 + n), n the minutes scored
    assert fe["measured_seconds"] == 0.0 and fe["scored_minutes"] >= 5
    assert fe["derived_seconds"] == pytest.approx(PRIOR_MINUTES * 30.0 / (PRIOR_MINUTES + fe["scored_minutes"]))
    doc = json.loads((tmp_path / "learned" / file_name(*wl.key)).read_text())
    assert doc["version"] == VERSION and set(doc) >= {"capacity", "loop", "lead", "hmac", "saved_at"}
    assert {k: doc[k]["key"] for k in ("capacity", "loop", "lead")} == part_keys(wl.declared)

    caplog.set_level(logging.INFO, logger="scaler.serve.keeper")
    s2 = Scaler(clock, state_dir=str(tmp_path), server=FAST, **KNOBS)  # restarted: the clock has not moved
    try:
        assert s2.value(md).metricValueFloat == pytest.approx(before["served"], rel=1e-9)
        wl2 = trigger(s2, md=md)
        # the first refresh after the restart observed one more sample (5 again): the same estimate and figure
        assert learned(wl2) == (pytest.approx(est), pytest.approx(in_force), n + 1)
        assert wl2.loop.factor == before["factor"]  # 3 / 2 per replica: the dead zone holds it
        fe2 = s2.server.watch.forecast_error(wl2, clock())
        assert (fe2["derived_seconds"], fe2["scored_minutes"]) == (fe["derived_seconds"], fe["scored_minutes"])
        assert wl2.lead().forecast_error_seconds == pytest.approx(fe["derived_seconds"])
        assert any("restored from" in r.getMessage() and "closed-loop factor" in r.getMessage()
                   for r in caplog.records)
        # an edit of queueTarget is another trigger: it starts from the file of the one it replaces, each part
        # whose inputs it did not change (the capacity and the forecast error), not the loop (its target moved)
        caplog.clear()
        edited = trigger(s2, md={**md, "queueTarget": "3"})  # its sibling's observation inherited: refreshed later
        refreshed(s2, clock, edited, 5.0)
        assert edited is not wl2 and learned(edited)[:2] == (pytest.approx(est), pytest.approx(in_force))
        assert edited.loop.factor == 1.0
        assert s2.server.watch.forecast_error(edited, clock())["scored_minutes"] == fe["scored_minutes"]
        assert any("the loop state in" in r.getMessage() and "made for other inputs" in r.getMessage()
                   for r in caplog.records)
    finally:
        s2.close()


def test_a_tampered_a_foreign_and_an_old_state_are_refused_and_the_trigger_starts_fresh(prom, tmp_path, caplog):
    p, end = prom
    md = {**MD, "serverAddress": p.url, "mode": "reactive", "forecastErrorSeconds": "30"}  # no fit needed here
    clock = FakeClock(end)
    s = Scaler(clock, state_dir=str(tmp_path), server=FAST, **KNOBS)
    try:
        wl = trigger(s, md=md)
        other = trigger(s, "other", md)  # another ScaledObject, the same metadata
        for _ in range(10):  # raised until end + 540, held after (the restarts below are in the dead zone)
            refreshed(s, clock, wl, 60.0)
            s.value(md)
        assert learned(wl)[1] == pytest.approx(5.0) and wl.loop.factor > 1.0
    finally:
        s.close()
    d = tmp_path / "learned"
    own, theirs = d / file_name(*wl.key), d / file_name(*other.key)
    good = own.read_bytes()
    doc = json.loads(good)
    doc["loop"]["factor"] = 2.0  # tampered: the HMAC no longer matches
    own.write_text(json.dumps(doc))
    theirs.write_bytes(good)  # foreign: serving/llm's (signed) document under serving/other's name

    def fresh(wl) -> bool:  # one refresh since the start: one sample, no estimate; the loop at 1 (dead zone)
        return learned(wl) == (None, 8.0, 1) and wl.loop.factor == 1.0

    caplog.set_level(logging.WARNING)
    s2 = Scaler(clock, state_dir=str(tmp_path), server=FAST, **KNOBS)
    try:
        assert fresh(trigger(s2, md=md)) and fresh(trigger(s2, "other", md))
        said = [r.getMessage() for r in caplog.records]
        assert any(str(own) in m and "not signed with this scaler's state key" in m for m in said)
        assert any(str(theirs) in m and "written for serving/llm" in m for m in said)
    finally:
        s2.close()
    own.write_bytes(good)
    caplog.clear()
    clock.advance(MAX_AGE_SECONDS + 60.0)  # a day and a minute later: too old to restore
    s3 = Scaler(clock, state_dir=str(tmp_path), server=FAST, **KNOBS)
    try:
        assert fresh(trigger(s3, md=md))
        assert any("older than the 86400 s a state is kept" in r.getMessage() for r in caplog.records)
    finally:
        s3.close()


def test_times_are_kept_on_the_wall_clock_across_a_new_monotonic_clock(tmp_path):
    """The learner and the loop run on the monotonic clock, which a restart resets: their times are stored on the
    wall clock and put back on the new monotonic one (a raise 300 s before the stop is 300 s before the restart)."""
    from scaler.prom import CredentialStore
    from scaler.serve.metrics import ScalerMetrics
    from scaler.serve.registry import Registry, RegistryConfig
    from scaler.serve.state import JsonStore
    from support.fakes import FakePrometheus, wait_for

    wait_q, ready_q = MD["queueQuery"], MD["readyReplicasQuery"]
    prom = FakePrometheus()
    for q, v in ((REQ, 10.0), (wait_q, 6.0), (ready_q, 2.0)):
        prom.set_scalar(q, v)
    md = {**MD, "serverAddress": "http://prom.test:9090", "mode": "reactive", "forecastErrorSeconds": "30"}
    wall = FakeClock(1_700_000_400.0)

    def registry(mono: FakeClock) -> Registry:
        return Registry(wall, CredentialStore(None), ScalerMetrics(), RegistryConfig(
            refresh_seconds=5.0, stale_seconds=600.0, forget_seconds=10 ** 6, capacity_settle_seconds=0.0,
            capacity_min_samples=3), client_factory=prom.factory(), monotonic=mono,
            learned_store=JsonStore(tmp_path))

    mono = FakeClock(5000.0)
    reg = registry(mono)
    try:
        wl = reg.workload("serving", "llm", md)
        for _ in range(4):  # refreshes at mono 5000 .. 5180 (wall T0 .. T0 + 180), each raising the factor
            for c in (wall, mono):
                c.advance(60.0)
            reg.tick()
            wait_for(lambda: not wl.refreshing and wl.observed_at == mono())
        raised_at, samples = wl.loop.raised_at, wl.llm.learner.snapshot()[0]
        assert wl.loop.factor > 1.0 and mono() - raised_at <= 240.0
    finally:
        reg.stop()
    wall.advance(30.0)  # down for 30 s; the new process' monotonic clock starts near 0
    mono2 = FakeClock(12.0)
    reg2 = registry(mono2)
    try:
        wl2 = reg2.workload("serving", "llm", md)
        shift = (wall() - 30.0 - mono()) - (wall() - mono2())  # the same wall moment on the new clock
        assert wl2.loop.raised_at == pytest.approx(raised_at + shift) and wl2.loop.factor >= wl.loop.factor
        kept = wl2.llm.learner.snapshot()[0]
        assert [t for t, _ in kept[:len(samples)]] == pytest.approx([t + shift for t, _ in samples])
    finally:
        reg2.stop()

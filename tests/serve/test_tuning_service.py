"""``tuning: auto`` in the server with a fake Prometheus, a fake clock and a canned sweep (no worker process)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from scaler.misstarget import MissTarget
from scaler.policy import Reason
from scaler.prom import PromError, PromErrorKind
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.state import JsonStore, file_name
from scaler.spec import parse_metadata
from scaler.serve.tuning import TuningService
from scaler.serve.tuningdoc import tuning_key
from scaler.serve.worker import SETTLE_SECONDS, cutoff, phase
from support.clock import FakeClock
from support.fakes import CannedPool, FakePrometheus, Harness, InlineExecutor, signed

T0 = 1_700_000_400.0
Q = "sum(rate(req_total[2m]))"
CHOICE = {"label": "reactive x1.2", "policy": "reactive",
          "settings": {"mode": "reactive", "headroom": 1.2, "hpa_tolerance": 0.1}, "met": True, "message": "met",
          "miss": 0.002, "cost_ratio": 1.3, "violation_minutes": 3.0, "replica_hours": 100.0, "points": 40,
          "pareto": 6, "simulated_days": 0.5, "seconds": 1.5, "knobs": {"headroom": [1.0, 1.2]},
          "target_miss": 0.005, "reactive_miss": None}


def md(**over) -> dict:
    m = {"serverAddress": "http://prom.test:9090", "query": Q, "qpsPerReplica": "10", "model": "seasonal_naive",
         "history": "1d", "minHistory": "4h", "quantile": "0.7", "headroom": "1.4", "hpaTolerance": "0.1",
         "tuning": "auto", "targetMiss": "0.005", "coldStartSeconds": "600"}
    m.update(over)
    return m


class Env(Harness):
    """The registry with a real TuningService whose worker pool answers with a canned choice."""

    def __init__(self, state_dir=None, answer=None, before=None, prom=None, clock=None):
        clock, metrics = clock or FakeClock(T0), ScalerMetrics()
        self.pool = CannedPool(CHOICE if answer is None else answer, before=before)
        store = JsonStore(state_dir) if state_dir is not None else None
        self.tuning = TuningService(clock, metrics, store=store, pool=self.pool, io=InlineExecutor())
        super().__init__(clock, prom or FakePrometheus(), md(), metrics=metrics, tuning=self.tuning)


def tc(wl, now: float = T0) -> float:
    """The tuning cutoff in force at ``now``: the latest day boundary plus the trigger's phase, >= 60 s old."""
    c = cutoff(now, 86400.0, wl.key)
    assert now - 86400 - SETTLE_SECONDS < c <= now - SETTLE_SECONDS and (c - phase(wl.key, 86400.0)) % 86400 == 0
    return c


def scripted(prom: FakePrometheus, hours: float = 48.0) -> FakePrometheus:
    """Data from ``hours`` before T0 (48 h: the 1 d window up to any cutoff in force at T0 is full)."""
    prom.set_scalar(Q, 12.0)
    prom.set_range(Q, lambda t: np.where(t > T0 - hours * 3600, 30.0, np.nan))
    return prom


@pytest.fixture
def env(tmp_path):
    e = Env(state_dir=tmp_path, prom=scripted(FakePrometheus()))
    yield e
    e.close()


def test_the_choice_is_applied_to_the_value_exported_and_stored(env, tmp_path):
    wl = env.workload()
    before = env.reg.decision(wl)
    assert before.planned == pytest.approx(16.8) and before.reason is Reason.NO_FORECAST_YET  # declared: 12 x 1.4
    env.reg.tick()
    job = env.pool.jobs[0]
    assert len(env.pool.jobs) == 1
    c = tc(wl)  # the history ends at the cutoff, not at now: the same in every replica
    # history (1 d) + the simulated span (3 d) + a day for the first aligned warm-start chain (fetch_seconds)
    assert env.prom.calls_of("range") == [("range", Q, c - 5 * 86400 + 60, c, 60.0)]
    # the data begins 48 h before T0 (scripted), inside that window: every minute after it up to c, no more
    n = round((c - (T0 - 48 * 3600)) / 60)
    assert 24 * 60 < n <= 48 * 60
    assert (job.name, job.step, len(job.t), job.qps_per_replica, job.target_miss) == ("serving/llm", 60.0, n,
                                                                                      10.0, MissTarget(0.005))
    assert job.span_seconds == n * 60 / 2 and job.cold_start_seconds == 600.0  # half the history it got
    assert np.all(job.y == 30.0)
    assert not env.tuning.busy(wl)
    t = wl.tuned
    assert (t.label, t.policy, t.chosen_at, t.met, t.miss, t.cost_ratio) == ("reactive x1.2", "reactive", c, True,
                                                                            0.002, 1.3)
    assert t.key == tuning_key(wl.declared)
    # the running spec has the chosen knobs, the declared one is untouched; the metric and target are the same
    assert (wl.spec.mode, wl.spec.headroom, wl.spec.quantile) == ("reactive", 1.2, 0.7)
    assert (wl.declared.mode, wl.declared.headroom) == ("forecastAndScale", 1.4)
    assert (wl.spec.metric_name, wl.spec.qps_per_replica) == (wl.declared.metric_name, 10.0)
    d = env.reg.decision(wl)
    assert d.planned == pytest.approx(14.4) and d.reason is Reason.MODE_REACTIVE  # 12 x 1.2, outside the band
    assert env.sample("forescale_tuning_runs_total", outcome="chosen") == 1
    assert env.sample("forescale_tuning_expected_miss_ratio") == 0.002
    assert env.sample("forescale_tuning_expected_cost_ratio") == 1.3
    assert env.sample("forescale_tuning_last_run_timestamp_seconds") == c
    assert env.sample("forescale_tuning_info", policy="reactive", mode="reactive", model="", quantile="",
                      level_correction="", headroom="1.2", hpa_tolerance="0.1", target_met="true", applied="true") == 1
    doc = json.loads((tmp_path / file_name(*wl.key)).read_text())
    assert (doc["version"], doc["key"], doc["label"], doc["settings"]) == (1, t.key, "reactive x1.2",
                                                                           CHOICE["settings"])
    assert doc["figures"]["points"] == 40 and doc["chosen_at"] == c
    # fresh: the next ticks run nothing until the next cutoff (a day later) is in force
    env.clock.advance(c + 86400 + SETTLE_SECONDS - 1 - T0)
    env.workload()
    env.reg.tick()
    assert len(env.pool.jobs) == 1
    env.clock.advance(1)
    env.workload()
    env.reg.tick()
    assert len(env.pool.jobs) == 2 and wl.tuned.chosen_at == c + 86400
    assert env.prom.calls_of("range")[-1] == ("range", Q, c + 86400 - 5 * 86400 + 60, c + 86400, 60.0)  # fetch_seconds


def test_the_choice_survives_a_restart_and_is_not_rerun(env, tmp_path):
    env.reg.tick()
    wl = env.workload()
    env.reg.tick()
    tuned = wl.tuned
    later = tc(wl) + 86400 + SETTLE_SECONDS - 1  # restarted a second before the next cutoff is in force
    e2 = Env(state_dir=tmp_path, answer=RuntimeError("no sweep expected"), prom=env.prom, clock=FakeClock(later))
    try:
        wl2 = e2.workload()
        assert wl2.tuned == tuned and (wl2.spec.mode, wl2.spec.headroom) == ("reactive", 1.2)
        assert e2.reg.decision(wl2).planned == pytest.approx(14.4)
        e2.reg.tick()
        assert e2.pool.jobs == [] and e2.sample("forescale_tuning_runs_total", outcome="chosen") is None
        assert e2.sample("forescale_tuning_expected_miss_ratio") == 0.002  # exported on restore
    finally:
        e2.close()
    # declared inputs the choice does not fit: the stored choice is not used, tuning runs again
    e3 = Env(state_dir=tmp_path, prom=env.prom, clock=FakeClock(later))
    try:
        wl3 = e3.workload(targetMiss="0.001")
        assert wl3.tuned is None and wl3.spec.headroom == 1.4
        e3.reg.tick()
        assert len(e3.pool.jobs) == 1 and wl3.tuned.key == tuning_key(wl3.declared)
    finally:
        e3.close()


def test_a_metadata_change_mid_run_is_another_workload_tuned_for_its_own_metadata(tmp_path):
    """Issue 27 (H1): a second map never replaces the first: the run in flight is applied to the workload it was
    made for; the edited map is another workload, tuned on the next tick for its own target."""
    holder = {}
    e = Env(state_dir=tmp_path, prom=scripted(FakePrometheus()), before=lambda: holder["change"]())
    try:
        wl = e.workload()
        seen_busy, edited = [], []
        holder["change"] = lambda: (seen_busy.append(e.tuning.busy(wl)), edited.append(e.workload(targetMiss="0.001")))
        e.reg.tick()
        assert seen_busy == [True] and not e.tuning.busy(wl)
        assert wl.tuned is not None and wl.spec.headroom == 1.2 and (tmp_path / file_name(*wl.key)).exists()
        other = edited[0]
        assert other is not wl and other.tuned is None and (other.spec.mode, other.spec.headroom) == ("forecastAndScale", 1.4)
        holder["change"] = lambda: None
        e.reg.tick()
        assert len(e.pool.jobs) == 2 and e.pool.jobs[1].target_miss == MissTarget(0.001)
        assert other.tuned is not None and other.spec.headroom == 1.2
    finally:
        e.close()


def test_shadow_mode_exports_the_choice_but_does_not_apply_it(tmp_path):
    e = Env(state_dir=tmp_path, prom=scripted(FakePrometheus()))
    try:
        wl = e.workload(mode="forecastOnly")
        e.reg.tick()
        assert wl.tuned is not None and (wl.spec.mode, wl.spec.headroom) == ("forecastOnly", 1.4)
        assert e.sample("forescale_tuning_info", policy="reactive", mode="reactive", model="", quantile="",
                        level_correction="", headroom="1.2", hpa_tolerance="0.1", target_met="true",
                        applied="false") == 1
    finally:
        e.close()


def test_a_failed_run_keeps_the_declared_knobs_and_is_retried_after_retry_seconds(tmp_path):
    e = Env(state_dir=tmp_path, answer=ValueError("no configuration met the target"),
            prom=scripted(FakePrometheus()))
    try:
        wl = e.workload()
        e.reg.tick()
        assert wl.tuned is None and wl.spec.headroom == 1.4
        assert e.sample("forescale_tuning_runs_total", outcome="failed") == 1
        for _ in range(5):  # RETRY_SECONDS = 3600, polled every 10 minutes
            e.clock.advance(600)
            e.workload()
            e.reg.tick()
        assert len(e.pool.jobs) == 1
        e.clock.advance(600)
        e.workload()
        e.reg.tick()
        assert len(e.pool.jobs) == 2 and e.sample("forescale_tuning_runs_total", outcome="failed") == 2
    finally:
        e.close()


def test_a_short_history_waits_without_failing_and_is_looked_at_again(tmp_path, caplog):
    # history 1d: tuningMinHistory's default (7d) shrinks to it; 20 h are there, so the first selection waits
    prom = scripted(FakePrometheus(), hours=20.0)
    e = Env(state_dir=tmp_path, prom=prom)
    try:
        wl = e.workload()
        with caplog.at_level(logging.INFO, logger="scaler.serve.tuning"):
            e.reg.tick()
        assert e.pool.jobs == [] and wl.tuned is None and wl.spec.headroom == 1.4  # the declared knobs
        assert e.sample("forescale_tuning_runs_total", outcome="waiting") == 1
        assert e.sample("forescale_tuning_runs_total", outcome="failed") is None
        assert [r.levelno for r in caplog.records if "waits for history" in r.getMessage()] == [logging.INFO]
        # covered at the latest whole-hour boundary (+ the trigger's phase, >= 60 s old), from the first point
        # after T0 - 20 h (T0 - 71940): latest - T0 + 72000 s
        latest = cutoff(T0, 3600.0, wl.key)
        have = (latest - T0 + 72000) / 3600
        assert 18.9 < have <= 20.0
        assert any(f"{have:.1f} h of history, the first selection needs 24.0 h" in r.getMessage()
                   for r in caplog.records)
        # 4 h are missing, so it looks again after RETRY_SECONDS (1 h, the most it waits), not before
        e.clock.advance(3000)
        e.workload()  # KEDA keeps asking
        e.reg.tick()
        assert e.sample("forescale_tuning_runs_total", outcome="waiting") == 1
        e.clock.advance(600)
        e.workload()
        e.reg.tick()
        assert e.sample("forescale_tuning_runs_total", outcome="waiting") == 2
    finally:
        e.close()


@pytest.mark.parametrize("hours,history,error", [
    (0.0, None, "no history returned by the query"),
    (24.0, PromError(PromErrorKind.UNREACHABLE, "Prometheus at x is unreachable"), "Prometheus at x is unreachable"),
])
def test_too_little_history_or_an_error_fails_before_the_sweep(tmp_path, caplog, hours, history, error):
    prom = scripted(FakePrometheus(), hours=hours)
    if history is not None:
        prom.set_range(Q, history)
    e = Env(state_dir=tmp_path, prom=prom)
    try:
        wl = e.workload()
        with caplog.at_level(logging.WARNING, logger="scaler.serve.tuning"):
            e.reg.tick()
        assert e.pool.jobs == [] and wl.tuned is None
        assert e.sample("forescale_tuning_runs_total", outcome="failed") == 1
        assert any(error in r.getMessage() and "keeping the declared configuration" in r.getMessage()
                   for r in caplog.records)
    finally:
        e.close()


def test_tuning_off_never_queries_nor_runs(env):
    wl = env.reg.workload("serving", "llm", md(tuning="off"))
    env.reg.tick()
    assert env.pool.jobs == [] and env.prom.calls_of("range") == [] and not env.tuning.busy(wl)


def test_a_malformed_tuning_file_is_ignored(env, tmp_path, caplog):
    wl = env.workload()
    key = tuning_key(wl.declared)
    env.close()
    path = tmp_path / file_name(*wl.key)
    path.write_text(signed(tmp_path, {"version": 1, "namespace": "serving", "name": "llm", "metric": wl.key[2],
                                      "key": key, "label": "x", "settings": ["not", "a map"]}))
    e = Env(state_dir=tmp_path, prom=env.prom)
    try:
        with caplog.at_level(logging.WARNING):
            wl2 = e.workload()
        assert wl2.tuned is None and wl2.spec.headroom == 1.4
        assert any(f"ignoring malformed state file {path}" in r.getMessage() for r in caplog.records)
    finally:
        e.close()


def test_tuning_replays_the_t_cold_in_force_the_clusters_not_cold_start_seconds(tmp_path):
    """Issue 23: with ``coldStartFrom: cluster`` the self-tuning replays the cluster's measured T_cold (here
    420 s) rather than ``coldStartSeconds`` (600 s), and the measured source is part of the choice's key."""
    from scaler.coldstart import ClusterReading, ColdStartEstimate

    e = Env(prom=scripted(FakePrometheus()))
    try:
        wl = e.workload(coldStartFrom="cluster", coldStartWorkload="Deployment/llm")
        source = wl.spec.cold_start_cluster
        assert source is not None and source.name == "llm"
        reading = ClusterReading(source, ColdStartEstimate(420.0, 0.9, 12), at=T0)
        assert e.reg.adopt_cold_start(wl, reading) and wl.t_cold().seconds == 420.0
        e.reg.tick()  # the tuning job is built (inline) before the cold-start service's next query
        assert e.pool.jobs[0].cold_start_seconds == 420.0
        plain = parse_metadata(md())[0]
        assert tuning_key(wl.declared) != tuning_key(plain)  # another source of T_cold: another choice
    finally:
        e.close()


def test_a_first_choice_is_made_on_the_same_window_by_a_replica_that_looks_later(tmp_path):
    """Issue 22 (item 6): with a short history the first choice is made on the earliest whole-hour boundary
    (plus the trigger's phase) whose window covers tuningMinHistory -- the same for a replica that first looks
    hours later, which queries its own latest window and cuts it there."""
    runs = []
    for looks in (0.0, 5 * 3600.0):
        prom = scripted(FakePrometheus(), hours=20.0)  # first point T0 - 71940: 24 h covered from T0 + 4 h on
        e = Env(state_dir=tmp_path / str(looks), prom=prom, clock=FakeClock(T0 + 4 * 3600 + looks))
        try:
            wl = e.workload()
            first = cutoff(T0 + 4 * 3600 - 60 + 3600, 3600.0, wl.key)  # the first boundary at or after T0 + 4 h
            assert T0 + 4 * 3600 - 60 <= first < T0 + 5 * 3600
            e.clock.t = max(e.clock.t, first + SETTLE_SECONDS)  # the first replica looks once it is in force
            # the premise: the day's cutoff in force is before it (a later one would cover the day by itself)
            assert tc(wl, e.clock.t) < first
            e.reg.tick()
            assert len(e.pool.jobs) == 1 and wl.tuned.chosen_at == first
            job = e.pool.jobs[0]
            assert job.t[-1] == first and len(job.t) == 1440  # the 1 d window up to it, whatever the time now
            runs.append((e.prom.calls_of("range")[-1][3], job.t, job.y))
        finally:
            e.close()
    (end_a, t_a, y_a), (end_b, t_b, y_b) = runs
    assert end_b > end_a  # the later replica queried a later window...
    np.testing.assert_array_equal(t_a, t_b)  # ...and swept the same history
    np.testing.assert_array_equal(y_a, y_b)


def first_run_logged(e: Env) -> dict:
    """The decision log's one tuning entry after ``e``'s first tick (the server's watch as ``on_run``)."""
    from scaler.serve.watch import Watch

    watch = Watch()
    e.tuning.on_run = watch.note_tuning_run
    try:
        wl = e.workload()
        e.reg.tick()
        (t,) = watch.log(wl)["tuning"]
        return dict(t, cutoff=tc(wl))
    finally:
        e.close()


def test_runs_that_choose_nothing_are_in_the_decision_log_with_why(tmp_path):
    """Issue 22 (item 3): the decision log holds every tuning run -- a wait for history and a failure too, with
    what was wrong (cut and cleaned), not only the choices."""
    t = first_run_logged(Env(state_dir=tmp_path, answer=ValueError("no configuration met the target\x00" + "y" * 400),
                             prom=scripted(FakePrometheus())))
    assert (t["outcome"], t["chosen"], t["policy"], t["target_met"], t["time"]) == ("failed", None, None, None,
                                                                                  t["cutoff"])
    assert t["why"].startswith("no configuration met the target ") and "\x00" not in t["why"]
    assert len(t["why"]) == 203  # 200 characters + "..."
    t = first_run_logged(Env(state_dir=tmp_path / "short", prom=scripted(FakePrometheus(), hours=20.0)))
    assert t["outcome"] == "waiting" and t["chosen"] is None
    assert "h of history, the first selection needs 24.0 h" in t["why"]


def test_a_run_past_its_bound_gives_up_and_says_so(tmp_path):
    """Issue 40, item 14: a run the worker stopped (GaveUp: past max_seconds, or over max_rss_bytes) keeps the
    declared knobs, is counted outcome=gave_up, noted in the decision log with why, and tried again later."""
    from scaler.serve.tuning import MAX_RUN_RSS_BYTES, MAX_RUN_SECONDS
    from scaler.serve.watch import Watch
    from scaler.serve.worker import GaveUp

    assert (MAX_RUN_SECONDS, MAX_RUN_RSS_BYTES) == (300.0, 1 << 30)
    e = Env(state_dir=tmp_path, answer=GaveUp("ran past 300s", 301.0, 250 << 20), prom=scripted(FakePrometheus()))
    watch = Watch()
    e.tuning.on_run = watch.note_tuning_run
    try:
        wl = e.workload()
        e.reg.tick()
        assert wl.tuned is None and wl.spec.headroom == 1.4
        assert e.sample("forescale_tuning_runs_total", outcome="gave_up") == 1
        (run,) = watch.log(wl)["tuning"]
        assert run["outcome"] == "gave_up" and run["why"] == "gave up after 301s: ran past 300s"
    finally:
        e.close()


def test_history_that_began_after_the_cutoff_is_waiting_not_a_failure(tmp_path):
    """A young workload whose data begins after its tuning cutoff: the query up to the cutoff is empty. That was
    'failed: no history returned by the query' (retried an hour later, a day's first choice lost); it is the first
    window's case: waiting while the history is short."""
    prom = FakePrometheus()
    e = Env(state_dir=tmp_path, prom=prom)
    try:
        wl = e.workload()
        begin = tc(wl) + 600.0  # after the cutoff
        prom.set_scalar(Q, 12.0)
        prom.set_range(Q, lambda t: np.where(t > begin, 30.0, np.nan))
        e.reg.tick()
        assert e.sample("forescale_tuning_runs_total", outcome="failed") is None
        assert e.sample("forescale_tuning_runs_total", outcome="waiting") == 1
    finally:
        e.close()

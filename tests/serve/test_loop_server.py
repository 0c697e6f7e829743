"""The closed loop in the server: its queries read beside the rate in the background, the factor stepped per refresh,
the answer raised with reason feedback; bad signals unknown (never zero); the same answers as the replay's."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from scaler.feedback import LoopState, Signals
from scaler.policy import Reason
from scaler.prom import PromError, PromErrorKind
from scaler.replay.closedloop import respond
from scaler.replay.llm import LoopSettings
from scaler.replay.policies import finishing
from scaler.params import loop_targets
from scaler.spec import parse_metadata
from scaler.serve.registry import RegistryConfig
from support.clock import FakeClock
from support.fakes import FakePrometheus, Harness

T0 = 1_700_000_400.0
Q = "sum(rate(req_total[2m]))"
WAIT = "sum(vllm:num_requests_waiting)"
READY = 'kube_deployment_status_replicas_ready{deployment="vllm"}'
TTFT = "histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[2m])))"
LOOP = {"queueQuery": WAIT, "readyReplicasQuery": READY, "queueTarget": "2", "ttftQuery": TTFT, "ttftTarget": "1"}
BASE = {"serverAddress": "http://prom.test:9090", "query": Q, "qpsPerReplica": "10", "mode": "reactive",
        "hpaTolerance": "0"}


def harness() -> Harness:
    """A Registry on a fake clock and a fake Prometheus, refreshing what is 5 s old."""
    return Harness(FakeClock(T0), FakePrometheus(), BASE, config=RegistryConfig(
        refresh_seconds=5.0, stale_seconds=120.0, forget_seconds=10 ** 6, first_wait_seconds=2.0))


@pytest.fixture
def env():
    e = harness()
    yield e
    e.close()


def step(env, wl, dt: float = 15.0, **over):
    return env.poll(dt, **(LOOP | over))[1]


def test_a_queue_over_target_raises_the_answer_once_the_asked_replicas_are_ready(env):
    env.prom.set_scalar(Q, 50.0)  # reactive, 10 per replica: 5 replicas asked
    env.prom.set_scalar(WAIT, 0.0)
    env.prom.set_scalar(READY, 5.0)
    env.prom.set_scalar(TTFT, 0.4)
    wl = env.workload(**LOOP)
    d = env.reg.decision(wl)
    env.reg.record(wl, d)
    assert (d.planned, d.reason, d.feedback) == (50.0, Reason.MODE_REACTIVE, 1.0)  # well inside: nothing changes
    assert wl.signals == Signals(0.0, 5.0, 0.4, math.nan) and wl.signals_why == {}
    # 40 waiting over 5 ready = 8 per replica, target 2: p = 4, the excess capped at 1: factor 1.05 -> 52.5 req/s
    env.prom.set_scalar(WAIT, 40.0)
    d = step(env, wl)
    assert d.feedback == pytest.approx(1.05) and d.planned == pytest.approx(52.5) and d.reason is Reason.FEEDBACK
    assert env.sample("forescale_feedback_factor", trigger=wl.trigger) == pytest.approx(1.05)
    assert env.sample("forescale_server_signal", trigger=wl.trigger, signal="waiting") == 40.0
    # 52.5 asks for 6 replicas; 5 are ready: held, whatever the queue
    d = step(env, wl)
    assert d.feedback == pytest.approx(1.05) and "5 of the 6 replicas asked for ready" in wl.loop.why
    env.prom.set_scalar(READY, 6.0)  # the sixth is ready; 40 / 6 = 6.67 per replica: over, but falling from 8: held
    d = step(env, wl)
    assert d.feedback == pytest.approx(1.05) and "falling from 4.00x (draining)" in wl.loop.why
    env.prom.set_scalar(WAIT, 60.0)  # growing again: 60 / 6 = 10 per replica, p = 5 -> x 1.05: 1.1025, 55.125 req/s
    d = step(env, wl)
    assert d.feedback == pytest.approx(1.1025) and d.planned == pytest.approx(55.125)
    # the queues and TTFT go well inside: a day later the factor has halved its excess
    env.prom.set_scalar(WAIT, 0.0)
    env.prom.set_scalar(READY, 7.0)
    env.prom.set_scalar(Q, 50.0)
    step(env, wl, dt=15.0)  # (the first inside refresh decays it by 15 s' worth)
    f0 = wl.loop.factor
    d = step(env, wl, dt=86400.0 - 5.0)
    assert d.feedback == pytest.approx(1 + (f0 - 1) / 2 ** ((86400.0 - 5.0) / 86400.0))


@pytest.mark.parametrize("answer, why", [
    (None, "no usable value (no series, or NaN: a histogram without buckets gives NaN)"),
    (PromError(PromErrorKind.NO_DATA, "query returned NaN, not a usable value"), "no usable value"),
    (-3.0, "a negative value -3: not a count or a time"),
    (PromError(PromErrorKind.UNREACHABLE, "Prometheus at http://prom.test:9090 is unreachable"), "unreachable"),
])
def test_a_bad_signal_is_unknown_with_its_reason_and_the_rate_decides_as_before(env, answer, why):
    env.prom.set_scalar(Q, 50.0)
    env.prom.set_scalar(READY, 5.0)
    env.prom.set_scalar(TTFT, answer)
    env.prom.set_scalar(WAIT, answer)
    wl = env.workload(**LOOP)
    d = env.reg.decision(wl)
    assert (d.planned, d.reason, d.feedback) == (50.0, Reason.MODE_REACTIVE, 1.0)
    assert math.isnan(wl.signals.waiting) and math.isnan(wl.signals.ttft) and wl.signals.ready == 5.0
    assert why in wl.signals_why["waiting"] and why in wl.signals_why["ttft"]
    assert "no signal known (queue, ttft unknown)" in wl.loop.why
    # an unknown signal exports no series (not a zero, not the last value)
    assert env.sample("forescale_server_signal", trigger=wl.trigger, signal="waiting") is None
    assert env.sample("forescale_server_signal", trigger=wl.trigger, signal="ready") == 5.0


def test_a_trigger_without_the_loop_keys_sends_no_signal_query_and_decides_as_before(env):
    env.prom.set_scalar(Q, 50.0)
    wl = env.workload()
    d = env.poll(15.0)[1]
    assert (d.planned, d.reason, d.feedback) == (50.0, Reason.MODE_REACTIVE, 1.0)
    assert {c[1] for c in env.prom.calls_of("scalar")} == {Q}
    assert wl.signals is None and env.sample("forescale_feedback_factor", trigger=wl.trigger) is None


def test_queries_alone_are_observed_not_acted_on(env):
    env.prom.set_scalar(Q, 50.0)
    env.prom.set_scalar(WAIT, 400.0)
    wl = env.workload(queueQuery=WAIT)
    d = env.poll(15.0, queueQuery=WAIT)[1]
    assert (d.planned, d.feedback) == (50.0, 1.0) and wl.signals.waiting == 400.0
    assert env.sample("forescale_server_signal", trigger=wl.trigger, signal="waiting") == 400.0


SIG = st.one_of(st.floats(0, 500), st.just(math.nan))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(seq=st.lists(st.tuples(st.floats(0, 200), SIG, st.one_of(st.floats(0, 30), st.just(math.nan)), SIG,
                              st.sampled_from([5.0, 15.0, 30.0, 600.0])), min_size=1, max_size=12),
       headroom=st.sampled_from(["1", "1.2"]), tol=st.sampled_from(["0", "0.1"]))
def test_the_replay_and_the_server_give_the_same_answers_for_the_same_signals(seq, headroom, tol):
    """The server (a real Registry, refreshes on a fake clock) and the replay's call (``closedloop.respond``: the
    same ``feedback.step`` and ``decide`` with the replay's stage-2 knobs) over one sequence of observations."""
    e = harness()
    try:
        over = {"headroom": headroom, "hpaTolerance": tol, "refreshInterval": "1s", **LOOP}  # each poll refreshes
        spec = parse_metadata(e.metadata(**over), name="llm", namespace="serving")[0]
        loop = LoopSettings(loop_targets(spec))
        p = finishing(spec.qps_per_replica, spec.headroom, spec.hpa_tolerance)
        e.prom.set_scalar(Q, seq[0][0])
        e.workload(**over)  # the first refresh: no signal yet, as the replay's first call
        st_, last, prev = LoopState(), math.nan, None
        for rate, waiting, ready, ttft, dt in seq:
            for q, v in ((Q, rate), (WAIT, waiting), (READY, ready), (TTFT, ttft)):
                e.prom.set_scalar(q, None if v != v else v)
            wl, d = e.poll(dt, **over)
            now = e.clock()
            st_, v, raised = respond(st_, Signals(waiting, ready, ttft), rate, p, loop, now=now,
                                     dt=math.nan if prev is None else now - prev, last=last,
                                     settle_seconds=spec.lead.seconds)
            prev, last = now, v
            assert d.planned == v and (d.reason is Reason.FEEDBACK) == raised and d.feedback == st_.factor
    finally:
        e.close()

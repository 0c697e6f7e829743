"""The load test's pure arithmetic: schedules, step statistics, the knee, the recommendation, the ramp."""

from __future__ import annotations

import random

import pytest

from scaler.loadtest import stats
from scaler.loadtest.stats import Record


def test_arrivals_fix_the_count_and_look_poisson():
    rng = random.Random(7)
    times = stats.arrivals(50.0, 200.0, rng)
    assert len(times) == 10_000  # round(50 req/s * 200 s)
    assert times == sorted(times) and 0.0 <= times[0] and times[-1] < 200.0
    gaps = [b - a for a, b in zip(times, times[1:])]
    mean = sum(gaps) / len(gaps)
    assert mean == pytest.approx(1 / 50, rel=0.02)
    # exponential gaps: the standard deviation equals the mean (a fixed schedule would have 0)
    sd = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5
    assert sd == pytest.approx(mean, rel=0.05)
    # P(gap > mean) = e^-1 = 0.368 for an exponential
    assert sum(g > mean for g in gaps) / len(gaps) == pytest.approx(0.368, abs=0.02)
    assert len(stats.arrivals(0.1, 1.0, rng)) == 1  # never an empty step


def test_percentile_interpolates_like_numpy():
    xs = [1.0, 2.0, 3.0, 4.0]
    assert stats.percentile(xs, 50) == 2.5   # pos (4-1)*0.5 = 1.5: halfway between 2 and 3
    assert stats.percentile(xs, 95) == pytest.approx(3.85)  # pos 2.85: 3 + 0.85 * (4 - 3)
    assert stats.percentile([], 50) is None


def _ok(s, lat, sent=None, ttft=None):
    return Record(s, s if sent is None else sent, "ok", latency=lat, ttft=ttft, finished=s + lat)


def test_summarize_a_step():
    # 10 requests in a 2 s window at a 5 req/s target: 8 ok (latencies 0.1..0.8), one 503, one timeout
    recs = [_ok(i * 0.2, 0.1 * (i + 1), ttft=0.01) for i in range(8)]
    recs += [Record(1.6, 1.6, "error", kind="503", finished=1.7), Record(1.8, 1.8, "timeout", finished=2.8)]
    s = stats.summarize(recs, target=5.0, duration=2.0, slo=0.45, q=95, max_lag=0.05)
    assert s["requests"] == 10 and s["ok"] == 8 and s["errors"] == 1 and s["timeouts"] == 1
    assert s["error_kinds"] == {"503": 1}
    assert s["offered_rps"] == 5.0           # 10 sent within the 2 s window
    # the last ok one is due at 1.4 s and takes 0.8 s: ends at 2.2 s > the window; 8 / 2.2 s
    assert s["achieved_rps"] == pytest.approx(8 / 2.2)
    assert s["p50_s"] == pytest.approx(0.45)  # of 0.1..0.8: pos 3.5 -> 0.45
    assert s["within_slo"] == pytest.approx(0.4)  # 0.1, 0.2, 0.3, 0.4 are <= 0.45 s: 4 of all 10
    assert s["meets_slo"] is False
    assert s["slo_latency_s"] is None  # the 95th of 10 (rank 10) is a failure
    assert s["ttft_p50_s"] == pytest.approx(0.01)
    assert s["generator_limited"] is False and s["send_lag_p99_s"] == 0.0


def test_slo_counts_failures_as_misses():
    recs = [_ok(i * 0.05, 0.1) for i in range(19)] + [Record(0.95, 0.95, "error", kind="connect")]
    s = stats.summarize(recs, target=20.0, duration=1.0, slo=0.2, q=95, max_lag=0.05)
    assert s["within_slo"] == 0.95 and s["meets_slo"]  # 19 of 20: exactly 95 %
    assert s["slo_latency_s"] == pytest.approx(0.1)    # rank ceil(0.95 * 20) = 19: still a success
    s99 = stats.summarize(recs, target=20.0, duration=1.0, slo=0.2, q=99, max_lag=0.05)
    assert not s99["meets_slo"] and s99["slo_latency_s"] is None


def test_generator_limits_are_detected():
    # 10 due in 1 s but only 8 sent within the window (the last two 1.2 s late): offered 8 < 0.95 * 10
    recs = [_ok(i * 0.1, 0.05) for i in range(8)] + [_ok(0.8, 1.2, sent=2.0), _ok(0.9, 1.2, sent=2.1)]
    s = stats.summarize(recs, target=10.0, duration=1.0, slo=2.0, q=95, max_lag=0.05)
    assert s["offered_rps"] == 8.0 and s["generator_limited"]
    assert s["send_lag_max_s"] == pytest.approx(1.2)
    # all sent in time but 5 % of them 60 ms late: p99 lag 60 ms > 50 ms
    late = [_ok(i * 0.01, 0.01, sent=i * 0.01 + (0.06 if i % 20 == 0 else 0.0)) for i in range(100)]
    s = stats.summarize(late, target=100.0, duration=1.0, slo=1.0, q=95, max_lag=0.05)
    assert s["offered_rps"] == 100.0 and s["send_lag_p99_s"] == pytest.approx(0.06) and s["generator_limited"]
    assert not stats.summarize(late, target=100.0, duration=1.0, slo=1.0, q=95)["generator_limited"]  # no max_lag
    # 10 req/s for 2 s, all sent within the window (offered 10): a 0.2 s latency misses a 0.17 s SLO, but
    # 0.05 s of it is send lag (0.15 s at the server would meet it): the generator's fault, not evidence.
    # The same 0.2 s spent at the server (sent on time) is the server's miss: evidence.
    lagged = [_ok(i * 0.1, 0.2, sent=i * 0.1 + 0.05) for i in range(20)]
    s = stats.summarize(lagged, target=10.0, duration=2.0, slo=0.17, q=95)
    assert s["offered_rps"] == 10.0 and not s["meets_slo"] and s["generator_limited"]
    slow = [_ok(i * 0.1, 0.2) for i in range(20)]
    s = stats.summarize(slow, target=10.0, duration=2.0, slo=0.17, q=95)
    assert not s["meets_slo"] and not s["generator_limited"]
    closed = stats.summarize(late, target=None, duration=1.0, slo=1.0, q=95, max_lag=0.05, mode="closed",
                             concurrency=4)
    assert closed["generator_limited"] is False  # a closed loop has no schedule to keep


def _step(rate, meets, limited=False, refinement=False):
    return {"mode": "open", "target_rps": rate, "achieved_rps": rate, "meets_slo": meets,
            "generator_limited": limited, "refinement": refinement}


def test_capacity_is_the_highest_rate_with_every_lower_rate_passing():
    steps = [_step(4, True), _step(1, True), _step(2, True), _step(8, False), _step(16, True)]
    assert stats.capacity(steps)["target_rps"] == 4  # 16 passes by luck after 8 failed: not capacity
    assert stats.capacity([_step(1, False), _step(2, True)]) is None
    # a step the generator could not offer is no evidence: 8 is skipped, 16 fails
    assert stats.capacity([_step(4, True), _step(8, True, limited=True)])["target_rps"] == 4
    assert stats.recommend(20.0, 0.2) == pytest.approx(16.0)
    with pytest.raises(ValueError):
        stats.recommend(20.0, 1.0)


def test_ramp_multiplies_then_bisects():
    kw = dict(start=2.0, factor=2.0, refine=2, max_rate=100.0)
    assert stats.next_ramp_rate([], **kw) == 2.0
    steps = [_step(2, True), _step(4, True)]
    assert stats.next_ramp_rate(steps, **kw) == 8.0
    steps.append(_step(8, False))
    assert stats.next_ramp_rate(steps, **kw) == pytest.approx(32 ** 0.5)  # geometric mean of 4 and 8
    steps.append(_step(32 ** 0.5, True, refinement=True))
    assert stats.next_ramp_rate(steps, **kw) == pytest.approx((32 ** 0.5 * 8) ** 0.5)
    steps.append(_step((32 ** 0.5 * 8) ** 0.5, False, refinement=True))
    assert stats.next_ramp_rate(steps, **kw) is None  # two bisections done
    assert stats.next_ramp_rate([_step(64, True)], **kw) is None  # 128 > max_rate
    assert stats.next_ramp_rate([_step(2, True, limited=True)], **kw) is None


def test_step_windows_show_the_backlog_growing():
    # 1 s windows over 2 s: 5 arrivals in the first (latency 0.1), 10 in the second (latency 0.5)
    recs = [_ok(i * 0.2, 0.1) for i in range(5)] + [_ok(1 + i * 0.1, 0.5) for i in range(10)]
    w = stats.step_window(recs, 1.0, 2.0)
    assert [x["arrivals"] for x in w] == [5, 10] and [x["rate_rps"] for x in w] == [5.0, 10.0]
    assert w[0]["p95_s"] == pytest.approx(0.1) and w[1]["p95_s"] == pytest.approx(0.5)

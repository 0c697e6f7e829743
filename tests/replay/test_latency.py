"""``replay.latency``: the fluid FIFO queue per tick, percentiles and timeouts (worked arithmetic)."""

from __future__ import annotations

import numpy as np
import pytest

from scaler.replay.latency import latency, waits

TICK = 15.0


def test_a_backlog_drains_at_capacity_minus_demand():
    # tick 0: 30 req/s arrive, 20 req/s served: a request arriving u s into the tick waits
    # (0 + (30 - 20) u) / 20 = u / 2 while the server keeps up with it: it serves 20 x 15 = 300 requests,
    # the arrivals of [0, 10) s (waits 0 .. 5 s, uniform); the arrivals of [10, 15) (150) are queued.
    # tick 1: 10 req/s arrive, 20 served: the 150 queued go in 150 / 20 = 7.5 s (waits 20 .. 22.5 - arrival:
    # 5 .. 7.5 s); the new arrivals then wait 22.5 + (x - 15) / 2 - x = 15 - x / 2: 7.5 s at 15 s down to
    # 0 at 30 s -- the backlog of 150 drains at 20 - 10 = 10 req/s in exactly 15 s. tick 2: nothing waits.
    w = waits(np.array([30.0, 10.0, 10.0]), np.array([20.0, 20.0, 20.0]), TICK)
    assert w.mass.tolist() == pytest.approx([300, 150, 150])
    assert w.lo.tolist() == pytest.approx([0, 5, 7.5]) and w.hi.tolist() == pytest.approx([5, 7.5, 0])
    assert w.zero == pytest.approx(150) and w.timed_out == 0
    # 750 requests; the CDF of the wait for w in [0, 5]: 150 + 300 w / 5 + 150 w / 7.5 = 150 + 80 w, so
    # P50 (375) = 2.8125 s; for w in [5, 7.5]: 450 + 150 (w - 5) / 2.5 + 20 w = 150 + 80 w too, so
    # P95 (712.5) = 7.03125 s; with 0.1 s of service on top of each
    lat = latency(np.array([30.0, 10.0, 10.0]), np.array([20.0, 20.0, 20.0]), TICK, service_seconds=0.1)
    assert lat.p50_seconds == pytest.approx(2.8125 + 0.1, abs=1e-6)
    assert lat.p95_seconds == pytest.approx(7.03125 + 0.1, abs=1e-6)
    assert lat.timed_out_fraction == 0 and lat.requests == pytest.approx(750)


def test_no_wait_when_capacity_covers_demand():
    lat = latency(np.full(100, 50.0), np.full(100, 50.0), TICK, service_seconds=0.25)
    assert (lat.p50_seconds, lat.p95_seconds, lat.p99_seconds) == (0.25, 0.25, 0.25)


def test_requests_past_the_timeout_fail_and_their_latency_is_the_timeout():
    # 10 req/s throughout, no ready replica for two ticks, then 40 req/s of capacity; timeout 20 s.
    # tick 2 starts at 30 s: the arrivals older than 20 s, [0, 10) s, have left: 100 timed out. The server
    # then serves [10, 15) (waits 20 .. 16.25 s: 30 + 50 / 40 - 15) and [15, 30) (16.25 .. 5 s) by 35 s,
    # then catches up with the new arrivals. Over 4 ticks 600 requests arrived: 100 / 600 = 1/6 failed,
    # and with 1/6 > 5 % at the timeout, P95 and P99 are the timeout (plus the service time).
    d, c = np.full(4, 10.0), np.array([0.0, 0.0, 40.0, 40.0])
    w = waits(d, c, TICK, timeout=20.0)
    assert w.timed_out == pytest.approx(100)
    lat = latency(d, c, TICK, service_seconds=0.5, timeout=20.0)
    assert lat.timed_out_fraction == pytest.approx(1 / 6)
    assert lat.p95_seconds == pytest.approx(20.5) and lat.p99_seconds == pytest.approx(20.5)
    # without the timeout nobody fails: the 300 queued at 30 s are served by 37.5 s, a request from x waits
    # 30 + 10 x / 40 - x = 30 - 0.75 x (30 .. 7.5 s, uniform); the top 1 % (6 requests) of 600 lie above w
    # with 300 (30 - w) / 22.5 = 6: P99 = 29.55 s
    free = latency(d, c, TICK)
    assert free.timed_out_fraction == 0 and free.p99_seconds == pytest.approx(29.55, abs=1e-6)


def test_requests_still_queued_at_the_end_count_with_their_wait_so_far():
    # no capacity at all: 150 requests over [0, 15) are still queued at 15 s, waits 15 .. 0 s uniform: P50 7.5
    lat = latency(np.array([10.0]), np.array([0.0]), TICK)
    assert lat.p50_seconds == pytest.approx(7.5, abs=1e-6)

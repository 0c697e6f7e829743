"""The replayed closed loop (``replay.closedloop``) and the TTFT/ITL model (``replay.llm``): worked arithmetic,
causality, and the loop curing a capacity configured 30 % too high."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from scaler.feedback import Targets
from scaler.replay import closedloop, llm
from scaler.replay.hpa import Hpa, value_ticks
from scaler.replay.keda import run_hpa
from scaler.replay.policies import finish
from scaler.replay.scenario import Scenario, evaluate

TICK = 15.0


def test_ttft_is_the_wait_plus_a_step_plus_the_prefill_and_itl_follows_the_utilisation():
    # demand 30, 10, 10 req/s on 20 of capacity (tests/replay/test_latency.py's queue): tick 0 waits uniform 0..5 s
    # (300 served) and 5..7.5 s (150, served in tick 1); tick 1's 150 wait 7.5..0 s; tick 2's 150 do not wait.
    # utilisation 1, 0.5, 0.5: ITL 0.02 / (1 - 0.75) = 0.08 s, then 0.02 / 0.5 = 0.04 s; no prefill (no tokens).
    # TTFT = wait + ITL: uniform [0.08, 5.08] x 300, [5.08, 7.58] x 150, [0.04, 7.54] x 150, 0.04 x 150 (750 in all).
    # P95: the top 37.5 lie above x in [5.08, 7.54]: 150 (7.58 - x) / 2.5 + 150 (7.54 - x) / 7.5 = 37.5 ->
    # 80 x = 454.8 + 150.8 - 37.5 -> x = 7.10125 s; ITL P95: 60 % of the requests are tick 0's: 0.08 s.
    d, c = np.array([30.0, 10.0, 10.0]), np.full(3, 20.0)
    ttft, itl = llm.percentiles(d, c, TICK, llm.Serving(0.02))
    assert ttft == pytest.approx(7.10125, abs=1e-6) and itl == pytest.approx(0.08)
    # a prefill of 0.5 s per request in every tick moves every TTFT by it
    ttft2, _ = llm.percentiles(d, c, TICK, llm.Serving(0.02, np.full(3, 0.5)))
    assert ttft2 == pytest.approx(7.10125 + 0.5, abs=1e-6)


def test_the_ttft_of_a_window_waits_out_the_backlog_built_before_it():
    # 10 s ticks; demand 2, 2, 1, 1 req/s on capacity 1, 1, 2, 2: 10 requests queue in tick 0, tick 1 serves them
    # and queues its own 20 (waiting at t = 20 s, served at 2/s until t = 30 s), so the whole of tick 2 serves the
    # backlog and its own 10 arrivals all wait (tick 3 serves them): the one at 20 + u leaves at 30 + u / 2 (u
    # arrived before it, served at 2/s), a wait of 10 - u / 2, uniform over [5, 10] s. Its utilisation 1 / 2: ITL
    # 0.02 / (1 - 0.5) = 0.04 s, TTFT = wait + ITL: the window's P95 5 + 0.95 x 5 + 0.04 = 9.79 s, its median
    # 7.54 s, its ITL P95 0.04 s (ticks 0 and 1, at a utilisation of 1: 0.08 s)
    d, c = np.array([2.0, 2.0, 1.0, 1.0]), np.array([1.0, 1.0, 2.0, 2.0])
    ttft, itl = llm.percentiles(d, c, 10.0, llm.Serving(0.02), ticks=(2, 3))
    assert ttft == pytest.approx(9.79, abs=1e-6) and itl == pytest.approx(0.04)
    assert llm.percentiles(d, c, 10.0, llm.Serving(0.02), q=0.5, ticks=(2, 3))[0] == pytest.approx(7.54, abs=1e-6)
    # the window alone, its backlog not replayed, would wait nothing: 0.04 s
    assert llm.percentiles(d[2:], c[2:], 10.0, llm.Serving(0.02))[0] == pytest.approx(0.04)


def test_a_histogram_records_a_ttft_when_the_first_token_comes():
    # one tick's 100 arrivals over [0, 15) s, TTFT going 0 -> 15 s: first tokens from 0 to 30 s, evenly; in the
    # window [0, 15) half of them, with TTFTs 0 .. 7.5 s uniform: P95 = 7.125 s; nothing in [30, 45): NaN
    args = (np.array([0.0]), np.array([0.0]), np.array([15.0]), np.array([100.0]), TICK)
    assert llm.window_p95(*args, 0.0, 15.0) == pytest.approx(7.125)
    assert np.isnan(llm.window_p95(*args, 30.0, 45.0))


def flat(n: int, rate: float, qps: float, factor: float = 1.0, cold: float = 60.0) -> Scenario:
    """A flat ``rate`` judged at ``factor`` x it (a replica sustains 1/factor of ``qps``)."""
    return Scenario(0.0, np.full(n, rate * factor), np.full(n, rate), cold, qps)


def test_the_loop_cures_a_capacity_configured_30_percent_too_high():
    # 100 req/s at 10 per replica configured, a replica really serves 10 / 1.3 (judged: 130 in configured units):
    # open loop, 10 replicas serve 10 / 13 of the load (3/13 = 23 % missed, the queue grows for ever). Closed loop on
    # the queue (2 per replica; the excess is far over 1, so each raise is 5 %):
    #   tick 2 (the first call that sees the queue, one scrape late): 1.05 -> 105, which the dead-band compensation
    #     pushes past the HPA's +10 % from 10 replicas: 110.001, 12 replicas, ready 4 ticks later (T_cold 60 s);
    #   tick 9: the 12 are ready (settled) and the queue still grows (120 of 130): 1.05^2 = 1.1025 -> 110.25, which
    #     the compensation (from 11) asks as 121.001: 13 replicas, but the HPA at 12 keeps 12 (121 / 120 is inside its
    #     band): the raise never gets its replicas, so the next one comes settle_seconds (135 s = 9 ticks) later;
    #   tick 18: 1.05^3 = 1.158 (the same, 115.8 asks 13 and gets none); tick 27: 1.05^4 = 1.2155 -> 121.55: 13
    #     asked, compensated from 12 to 132.001: 14 replicas (more than the 13 needed). The queue then drains (held:
    #     falling) and empties, and the factor decays with its day-long half-life: the miss is the first minutes'.
    sc = flat(400, 100.0, 10.0, 1.3)
    hpa = Hpa(target=10.0)
    base = sc.observed[value_ticks(sc.n, hpa, TICK)]
    open_ = evaluate(sc, run_hpa(sc, finish(base, 10.0, 1.0, 0.1), hpa))
    assert open_.underprovisioned_fraction == pytest.approx(3 / 13, abs=1e-9)
    run = closedloop.run(sc, base, hpa, qps=10.0, headroom=1.0, tolerance=0.1,
                         loop=llm.LoopSettings(Targets(queue=2.0)), settle_seconds=135.0)
    o = evaluate(sc, run.timeline)
    assert o.underprovisioned_fraction < 0.05 * open_.underprovisioned_fraction
    raises = np.flatnonzero(np.diff(run.factors) > 0) + 1
    assert raises.tolist() == [2, 9, 18, 27] and run.factors.max() == pytest.approx(1.05 ** 4)
    assert 1.2 < run.factors[-1] < 1.05 ** 4 and run.timeline.ready[-1] == 14
    assert run.raised == int((run.factors > 1).sum())  # reactive: every call the factor raised says feedback
    # right capacity: nothing waits, the factor stays 1 and the answers are the open loop's, tick for tick
    right = flat(400, 100.0, 10.0)
    same = closedloop.run(right, base, hpa, qps=10.0, headroom=1.0, tolerance=0.1,
                          loop=llm.LoopSettings(Targets(queue=2.0)), settle_seconds=135.0)
    assert (same.factors == 1).all() and same.raised == 0
    assert np.array_equal(same.timeline.ready, run_hpa(right, finish(base, 10.0, 1.0, 0.1), hpa).ready)


def test_the_replayed_loop_is_causal():
    # the factor at the call at tick i reads the state at the start of tick i - 1 (one scrape late): changing the
    # demand from tick 200 on changes no factor before the call at tick 202 (its signals see tick 201's start,
    # the first queue the new demand can have made)
    hpa = Hpa(target=10.0)
    a = flat(300, 100.0, 10.0, 1.3)
    b = dataclasses.replace(a, demand=np.where(np.arange(300) >= 200, 300.0, a.demand))
    base = a.observed[value_ticks(a.n, hpa, TICK)]
    ls = llm.LoopSettings(Targets(queue=2.0))
    ra, rb = (closedloop.run(s, base, hpa, qps=10.0, headroom=1.0, tolerance=0.0, loop=ls, settle_seconds=135.0)
              for s in (a, b))
    assert np.array_equal(ra.factors[:202], rb.factors[:202]) and not np.array_equal(ra.factors, rb.factors)

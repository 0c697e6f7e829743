"""What the server's tuning job (``serve.tuning.run_job``) sweeps: only configurations the scaler can run.

The replays of window-max band variants and of the envelope at windows other than its servable one were work no
choice could use (``frontier.select`` considers selectable points only); the server's grid (``server_grid``)
leaves them out. Small synthetic trace (5 min steps, a daily cycle with a burst at 19:00), families without
Prophet (linear_trend and seasonal_naive fits: cheap), so the full grid and the server's run in seconds.
"""

from __future__ import annotations

import numpy as np
import pytest

from forecaster.base import Series
from scaler.replay import engine, variants
from scaler.replay.tune import tune
from scaler.serve.tuning import SERVER_FAMILIES, TuningJob, run_job, server_grid

DAY, STEP = 86400.0, 300.0
T0 = 1_700_006_400.0  # a Wednesday 00:00 UTC
FAMILIES = ("reactive", "linear_trend", "seasonal_naive", "envelope", "oracle")  # the server's, less predictive


def bursty() -> tuple[np.ndarray, np.ndarray]:
    t = T0 + STEP * np.arange(int(10 * DAY / STEP))
    hour = (t % DAY) / 3600
    rng = np.random.default_rng(3)
    y = 80 + 50 * np.sin(2 * np.pi * (hour - 9) / 24) + np.where((hour >= 19) & (hour < 19.5), 60, 0)
    return t, np.maximum(y + rng.normal(0, 4, t.size), 0.0)


def job(families=FAMILIES) -> TuningJob:
    t, y = bursty()
    return TuningJob("bursty", t, y, STEP, qps_per_replica=10.0, cold_start_seconds=180.0, buffer_seconds=105.0,
                     model="linear_trend", history_seconds=7 * DAY, refit_seconds=7200.0, span_seconds=2 * DAY,
                     tolerance=0.1, activation_threshold=0.0, target_miss=0.01, max_cost_ratio=None,
                     families=families)


def test_the_server_grid_is_the_full_grid_less_what_the_scaler_cannot_run():
    s = engine.Settings(cold_start_seconds=180, qps_per_replica=10.0, hpa_tolerance=0.1)
    full = variants.variants(variants.Grid(families=SERVER_FAMILIES), s)
    served = variants.variants(server_grid(SERVER_FAMILIES), s)
    # every selectable configuration (and the oracle, the cost reference) is kept, in the same order
    assert served == [v for v in full if variants.is_selectable(v) or v.policy == "oracle"]
    # left out: 4 window-max band quantiles (0.8, 0.9, 0.95, 0.99) x 3 forecast families (linear_trend,
    # seasonal_naive, predictive) = 12, and the envelope's 5 min window x 3 margins (1, 1.1, 1.3) = 3: 15
    assert len(full) - len(served) == 15
    assert not any(v.band is not None for v in served)
    assert {v.window_seconds for v in served if v.policy == "envelope"} == {variants.ENVELOPE_WINDOW}


def test_the_choice_and_every_kept_point_are_the_full_grids():
    j = job()
    s = engine.Settings(cold_start_seconds=180, buffer_seconds=105.0, qps_per_replica=10.0, model="linear_trend",
                        history_seconds=j.history_seconds, refit_seconds=j.refit_seconds,
                        span_seconds=j.span_seconds, hpa_tolerance=0.1, aligned=True)
    trace = engine.Trace("bursty", Series(j.t, j.y, STEP), "", "memory")
    a = tune(trace, s, 0.01, grid=variants.Grid(families=FAMILIES))
    b = tune(trace, s, 0.01, grid=server_grid(FAMILIES))
    # the same selection ...
    assert a.point is not None and b.point is not None
    assert a.point.variant == b.point.variant and a.selection.met == b.selection.met
    # ... and each point of the server's sweep, searched ones included, replayed to the same numbers
    full = {p.variant: p.outcome for p in a.result.points}
    assert len(b.result.points) < len(a.result.points)
    for p in b.result.points:
        o = full[p.variant]
        assert p.outcome.underprovisioned_fraction == pytest.approx(o.underprovisioned_fraction, rel=1e-12, abs=0)
        assert p.outcome.replica_hours == pytest.approx(o.replica_hours, rel=1e-12)
    # the full grid's extra points are exactly the ones the scaler could not run
    assert all(not variants.is_selectable(p.variant) for p in a.result.points if p.variant not in
               {q.variant for q in b.result.points})
    # without the accuracy table (run_job's): the same points, bit for bit, and no scores beyond the cutoffs
    c = tune(trace, s, 0.01, grid=server_grid(FAMILIES), accuracy=False)
    assert [(p.variant, p.outcome) for p in c.result.points] == [(p.variant, p.outcome) for p in b.result.points]
    assert c.point.variant == b.point.variant
    assert set(c.result.models) == set(b.result.models) == {"linear_trend", "seasonal_naive"}
    for m, mr in c.result.models.items():
        assert "mase" in b.result.models[m].scores and mr.scores == {"cutoffs": b.result.models[m].scores["cutoffs"]}
        assert len(mr.target_t) == 0 < len(b.result.models[m].target_t)
    # run_job sweeps the server's grid: its choice is this one
    out = run_job(j)
    assert out["label"] == b.point.label and out["points"] == len(b.result.points)
    assert out["miss"] == pytest.approx(b.point.miss, rel=1e-12, abs=0)


def test_the_servers_tuning_replays_the_events_of_eventsfile():
    # An event with floor_qps 500 over 6 h of the last simulated day: at qpsPerReplica 10 the forecast policies plan
    # at least 500 / 10 = 50 replicas from start - L to end (L = 180 + 105 s). The bursty trace peaks near
    # 80 + 50 + 60 = 190 req/s, about 19-25 replicas with headroom, so the floor adds at least 6 h x (50 - 25) =
    # 150 replica-hours to the linear_trend choice (reactive KEDA, the baseline, is never floored: left out here so
    # that the choice is a forecast policy either way).
    from dataclasses import replace

    from forecaster.eventsfile import Event

    j = job(families=("linear_trend", "oracle"))
    start = float(j.t[-1]) - 12 * 3600.0
    floored = replace(j, events=(Event("promo", start, start + 6 * 3600.0, None, 500.0, 1),))
    without, with_event = run_job(j), run_job(floored)
    assert without["policy"] == with_event["policy"] == "linear_trend"
    assert with_event["replica_hours"] - without["replica_hours"] >= 150.0

"""``replay.engine`` and ``replay.forecasts`` as a library: no CLI, no files, known answers."""

from __future__ import annotations

import numpy as np
import pytest

from forecaster.base import Series
from scaler.replay import engine, forecasts, prepare, variants

DAY = 86400.0


def daily(days: float = 2.0, step: float = 60.0) -> engine.Trace:
    """A daily cycle (10..90 req/s) with an evening burst, in memory."""
    t0 = 1_700_006_400.0  # a Wednesday 00:00 UTC
    t = t0 + step * np.arange(int(days * DAY / step))
    hour = (t % DAY) / 3600
    y = 50 + 40 * np.sin(2 * np.pi * (hour - 9) / 24) + np.where((hour > 19) & (hour < 20), 120, 0)
    return engine.Trace("daily", Series(t, y, step), "synthetic", "memory")


def settings(**kw) -> engine.Settings:
    base = dict(model="linear_trend", span_seconds=12 * 3600, history_seconds=DAY, qps_per_replica=15.0)
    base.update(kw)
    return engine.Settings(**base)


def test_run_is_deterministic_and_reports_progress_to_its_total():
    s = settings()
    calls: list[tuple[int, int]] = []
    a = engine.run(daily(), s, variants.defaults(s), score=variants.accuracy_models(s),
                   progress=lambda done, total: calls.append((done, total)))
    b = engine.run(daily(), s, variants.defaults(s), score=variants.accuracy_models(s))
    assert [(p.variant, p.outcome) for p in a.points] == [(p.variant, p.outcome) for p in b.points]
    assert {k: v.outcome for k, v in a.policies.items()} == {k: v.outcome for k, v in b.policies.items()}
    # 12 h at 60 s = 720 cutoffs, refit every 30 min = 24 fits per model (seasonal_naive has too little history
    # to fit at all: its share still counts), 2 models + 10 variants (7 families and the 3 anchors): 2 x 24 + 10 = 58
    assert {t for _, t in calls} == {58} and sum(d for d, _ in calls) == 58


def test_the_table_holds_the_asked_families_and_the_oracle_is_always_the_reference():
    s = settings(policies=("reactive", "keep_alive"))
    r = engine.run(daily(), s, variants.defaults(s))
    assert list(r.policies) == ["reactive", "keep_alive"]
    oracle = [p for p in r.points if p.policy == "oracle"]
    assert len(oracle) == 1 and oracle[0].cost_ratio == 1.0 and not oracle[0].pareto
    assert r.oracle_hours == oracle[0].cost
    # no forecast model is needed for these families and none was asked for the accuracy table
    assert r.models == {}
    # keep_alive never misses; it is sized for the span's peak in hindsight
    assert r.policies["keep_alive"].outcome.underprovisioned_fraction == 0.0


@pytest.mark.parametrize("kw,needle", [
    (dict(quantile=1.5), "strictly between 0 and 1"),
    (dict(policies=("reactive", "magic")), "accepted: reactive, linear_trend"),
    (dict(model="gpt"), "unknown model 'gpt'"),
    (dict(cold_start_seconds=float("nan")), "finite number of seconds >= 0"),
    (dict(min_replicas=5, max_replicas=2), "0 <= min <= max"),
])
def test_bad_settings_raise_a_replay_error_naming_what_is_accepted(kw, needle):
    s = settings(**kw)
    with pytest.raises(engine.ReplayError, match=needle.replace("(", r"\(")):
        engine.run(daily(), s, variants.defaults(s) if "policies" not in kw else [])


def test_a_trace_too_short_to_simulate_is_refused():
    # 30 s of data: less than four 15 s ticks to simulate
    tr = engine.Trace("tiny", Series(np.array([0.0, 10.0, 20.0]), np.array([1.0, 1.0, 1.0]), 10.0), "", "memory")
    with pytest.raises(engine.ReplayError, match="too short to simulate"):
        engine.run(tr, settings(), [])


def test_forecasts_use_only_data_before_each_cutoff():
    step = 60.0
    t = 1_700_000_000 + step * np.arange(600)
    y = np.where(np.arange(600) < 500, 10.0, 1000.0)
    series = Series(t, y, step)
    cutoffs = t[490:510]
    mr = forecasts.run_model(series, "naive", float(t[490]), float(t[510]), horizon=6, score_points=5,
                             refit_every=30, history_seconds=1e9, quantiles=(0.1, 0.9), q=0.9, level_seconds=0.0)
    assert [c.since for c in mr.curves] == cutoffs.tolist()
    for c, curve in zip(cutoffs, mr.curves):
        seen_jump = c > t[500]  # the point at t[500] is known once its minute is over
        assert (curve.forecast.mean.max() >= 1000) == seen_jump, c
        assert curve.forecast.t[0] == c  # the first point is the one starting at the cutoff
    assert mr.fits == 1


def test_nice_round_and_derived_qps():
    assert [prepare.nice_round(x) for x in (187.6, 0.9, 12, 2001)] == [200.0, 1.0, 12.0, 2500.0]
    s = settings(qps_per_replica=None)
    su = prepare.setup(daily(), s)
    # the simulated half day's peak is the burst, 50 + 40 sin(...) + 120 at 19-20 h; / 20 replicas, rounded
    assert su.qps == prepare.nice_round(su.peak / prepare.TARGET_PEAK_REPLICAS)
    assert "derived" in su.qps_note


def test_a_relative_target_is_resolved_against_reactive_on_the_same_span():
    from scaler.misstarget import MissTarget
    from scaler.replay import frontier

    s = settings(policies=("reactive",))
    vs = [variants.Variant("reactive", headroom=h, compensation=False) for h in (1.0, 1.5)]
    plain = engine.run(daily(), s, vs)
    reactive = next(p for p in plain.points if p.variant == variants.default_variant("reactive", s))
    assert reactive.miss > 0.001  # the evening burst: reactive is late
    r = engine.run(daily(), s, vs, target_miss=MissTarget(0.5, True))
    # the target is half of what reactive (headroom 1, no dead-band compensation) misses on this span
    assert r.reactive_miss == reactive.miss and r.target_miss == pytest.approx(0.5 * reactive.miss)
    sel = frontier.select(r.points, r.target_miss)
    assert sel.met and sel.point.miss <= r.target_miss and sel.point.miss < reactive.miss
    # an absolute target (a plain number is one) needs no reactive replay
    a = engine.run(daily(), s, vs, target_miss=0.004)
    assert (a.target_miss, a.reactive_miss) == (0.004, None)

"""Anchor families, the targeted headroom search and window-max calibration, on small synthetic traces."""

from __future__ import annotations

import math

import numpy as np
import pytest
import hypothesis
from hypothesis import strategies as st

from forecaster.base import Forecast, Series
from forecaster.models import make
from scaler.policy import PolicyParams
from scaler.replay import anchors, calibration, engine, forecasts, frontier, prepare, search, variants
from scaler.replay import batches
from scaler.replay import policies as pol
from scaler.replay import scenario as scn
from scaler.replay.hpa import value_ticks
from scaler.replay.keda import run_hpa

T0 = 1_700_006_400.0  # a Wednesday 00:00 UTC
DAY = 86400.0


def weekly_bursty(days: float = 10.0, step: float = 300.0) -> engine.Trace:
    """A daily cycle (30..130 req/s), a burst at 19:00 on each day, mild noise: 5 min points."""
    t = T0 + step * np.arange(int(days * DAY / step))
    hour = (t % DAY) / 3600
    rng = np.random.default_rng(3)
    y = 80 + 50 * np.sin(2 * np.pi * (hour - 9) / 24) + np.where((hour >= 19) & (hour < 19.5), 60, 0)
    y = np.maximum(y + rng.normal(0, 4, len(t)), 0)
    return engine.Trace("bursty", Series(t, y, step), "synthetic", "memory")


def settings(**kw) -> engine.Settings:
    base = dict(cold_start_seconds=180, qps_per_replica=10.0, model="linear_trend", history_seconds=8 * DAY,
                span_seconds=2 * DAY, refit_seconds=7200, min_replicas=1)
    base.update(kw)
    return engine.Settings(**base)


def context(trace: engine.Trace, s: engine.Settings) -> pol.Context:
    su = prepare.setup(trace, s)
    series = trace.series
    train = forecasts.slice_series(series, su.start - s.history_seconds, su.start)
    upto = forecasts.slice_series(series, float(series.t[0]), su.end)
    return pol.Context(su.scenario, su.hpa, su.qps, su.lead.seconds, s.hpa_tolerance, train.t, train.y,
                       len(train) * series.step, su.peak, upto.t, upto.y, series.step)


@pytest.fixture(scope="module")
def bursty():
    return weekly_bursty()


def test_envelope_family_equals_decide_on_the_servable_envelope_model(bursty):
    """The replay's envelope is what the server's decide makes of `model: envelope` curves, at every poll."""
    s = settings()
    ctx = context(bursty, s)
    vals, _ = anchors.envelope_values(ctx, 3600.0)
    sc, step, L = ctx.scenario, bursty.series.step, ctx.lead_seconds
    times = sc.t0 + sc.tick * value_ticks(sc.n, ctx.hpa, sc.tick)
    fitted = make("envelope", window=3600.0).fit(bursty.series.until(sc.t0))
    p = PolicyParams(mode="forecastAndScale", lead_seconds=L, quantile=0.9, qps_per_replica=10.0, hpa_tolerance=0.0)
    from scaler.policy import decide

    for k in range(0, len(times), 37):  # every 37th poll (the whole span costs a fit per poll)
        t = float(times[k])
        origin = sc.t0 + math.floor((t - sc.t0) / step) * step - step  # the last point before t
        fc = fitted.predict(int(math.ceil(L / step)) + 3, (0.9,), origin=origin, recent=bursty.series.until(t))
        want = decide(float(sc.observed[value_ticks(sc.n, ctx.hpa, sc.tick)[k]]), fc, p, t).base
        assert vals[k] == pytest.approx(want, rel=1e-12), (k, t)


def test_envelope_is_the_max_of_the_previous_weeks_window():
    """Worked: daily period, 7 periods back, window +-1 step on a ramp y[i] = i: the max is y[i - P + 1]."""
    from forecaster.models.envelope import envelope_at

    y = np.arange(40, dtype=float)  # lag 5 (a 'day' of 5 points), half 1, k 3
    # target 30: centres 25, 20, 15 -> windows [24..26], [19..21], [14..16] -> max 26
    assert envelope_at(y, np.array([30]), 5, 1, 3)[0] == 26.0
    y2 = y.copy()
    y2[20] = 100.0  # a spike two periods back, inside the window of the second centre
    assert envelope_at(y2, np.array([30, 31, 33]), 5, 1, 3).tolist() == [100.0, 100.0, 29.0]


def test_range_max_is_nanmax_of_each_slice():
    """The anchors' window max over many ranges at once equals ``np.nanmax`` of each slice taken one by one
    (NaN ignored, NaN when no finite value, ranges clipped to the series, empty and inverted ranges), exactly:
    300 random series with 30 % NaN, an inf here and there."""
    rng = np.random.default_rng(0)
    for trial in range(300):
        n = int(rng.integers(0, 200))
        y = rng.normal(size=n)
        y[rng.random(n) < 0.3] = np.nan
        if n and trial % 5 == 0:
            y[rng.integers(0, n)] = np.inf
        if n and trial % 7 == 0:
            y[rng.integers(0, n)] = -np.inf
        a = rng.integers(-20, n + 20, size=50)
        b = a + rng.integers(-3, 30, size=50)
        want = np.full(len(a), np.nan)
        for k in range(len(a)):
            lo, hi = max(0, a[k]), min(n, b[k] + 1)
            seg = y[lo:hi] if hi > lo else y[:0]
            if np.isfinite(seg).any():
                want[k] = np.nanmax(seg)
        assert np.array_equal(anchors._range_max(y, a, b), want, equal_nan=True)


def test_aws_like_is_the_mean_of_the_same_hour_over_seven_days_300s_ahead():
    """Hour h of day d carries 10 d + h req/s: the 7-day mean of hour h before day D is 10 (D - 4) + h."""
    step = 300.0
    days = 9
    t = T0 + step * np.arange(int(days * DAY / step))
    day = np.floor((t - T0) / DAY)
    hour = np.floor((t % DAY) / 3600)
    tr = engine.Trace("hours", Series(t, 10 * day + hour, step), "synthetic", "memory")
    s = settings(history_seconds=8 * DAY, span_seconds=DAY, qps_per_replica=100.0)
    ctx = context(tr, s)
    vals, _ = anchors.aws_values(ctx)
    sc = ctx.scenario
    times = sc.t0 + sc.tick * value_ticks(sc.n, ctx.hpa, sc.tick)
    obs = sc.observed[value_ticks(sc.n, ctx.hpa, sc.tick)]
    # day 8 (the simulated day): forecast for hour h = mean over d = 1..7 of 10 (8 - d) + h = 40 + h; the hour
    # is the one 300 s ahead (at 10:56 it is hour 11); observed on day 8 is about 80 + h, so observed wins
    # where the forecast is below it: every poll, max(observed, 40 + hour(t + 300))
    hour_ahead = np.floor(((times + 300) % DAY) / 3600)
    hour_ahead = np.where(times + 300 >= sc.t0 + DAY, 24 + hour_ahead, hour_ahead)  # day 9 has no value: a past day
    want = np.maximum(obs, np.where(hour_ahead < 24, 40 + hour_ahead, np.nan))
    ok = hour_ahead < 24
    np.testing.assert_allclose(vals[ok], want[ok])
    assert vals[5] == pytest.approx(max(obs[5], 40.0))  # 00:02:30 -> hour 0 of day 8


def test_mimir_like_is_last_weeks_next_half_hour():
    """y = minutes since T0 (rising): a week ago's max over [t - 1w, t - 1w + 30 min) is the last point of it."""
    step = 60.0
    t = T0 + step * np.arange(int(9 * DAY / step))
    tr = engine.Trace("ramp", Series(t, (t - T0) / 60.0, step), "synthetic", "memory")
    s = settings(history_seconds=8 * DAY, span_seconds=0.5 * DAY, qps_per_replica=1e5)
    ctx = context(tr, s)
    ctx = pol.Context(ctx.scenario, ctx.hpa, ctx.qps, ctx.lead_seconds, 0.1, ctx.train_t, ctx.train_y,
                      ctx.train_seconds, ctx.peak, ctx.trace_t, -ctx.trace_y + 1e6, step)  # falling: past > now
    vals, _ = anchors.mimir_values(ctx)
    sc = ctx.scenario
    times = sc.t0 + sc.tick * value_ticks(sc.n, ctx.hpa, sc.tick)
    # y = 1e6 - minutes; the max over the 30 points in [t - 1w, t - 1w + 30 min) is at its first point,
    # the minute holding t - 1w: 1e6 - floor((t - 1w - T0) / 60)
    want = 1e6 - np.floor((times - 7 * DAY - T0) / 60.0)
    np.testing.assert_allclose(vals, want)


def test_searched_point_meets_the_target_within_5_percent_and_nothing_in_its_family_is_cheaper(bursty):
    s = settings()
    base = engine.run(bursty, s, variants.variants(variants.Grid(families=("reactive", "linear_trend", "envelope",
                                                                              "aws_like", "mimir_like")), s))
    reactive = next(p for p in base.points if p.policy == "reactive" and p.default)
    target = 0.2 * reactive.miss
    assert target > 0
    r = engine.run(bursty, s, variants.variants(variants.Grid(families=("reactive", "linear_trend", "envelope",
                                                                           "aws_like", "mimir_like")), s),
                   target_miss=target)
    grid_pts = {p.variant: p.outcome for p in base.points}
    for p in r.points:  # the grid's points are unchanged by the search
        if not p.variant.searched:
            assert grid_pts[p.variant] == p.outcome
    searched_fams = {p.policy for p in r.points if p.variant.searched}
    assert {"reactive", "aws_like"} <= searched_fams  # their grid has no headroom close to the target's
    ctx = context(bursty, s)
    for fam in ("reactive", "linear_trend", "envelope", "aws_like", "mimir_like"):
        mine = [p for p in r.points if p.policy == fam]
        meeting = [p for p in mine if p.miss <= target]
        assert meeting, fam  # every family reaches it on this trace (headroom up to 4.2)
        best = min(meeting, key=lambda p: (p.cost, not p.variant.searched))
        # the family's answer is its searched point, or a grid point the search confirmed: at headroom 1 (the
        # knob's floor) or one of the grid's headroom values
        assert best.variant.searched or best.variant.headroom in (1.0, 1.1, 1.3), (fam, best.variant)
        v = best.variant
        if best.miss < (1 - search.TOLERANCE) * target and v.headroom > 1.0 and v.searched:
            # not within 5 %: only because a slightly smaller headroom already misses more than the target
            if v.model is None:  # the model-free families (a model's stage 1 needs its curves)
                vals = batches.base_values(ctx, v, None)[0]
                lower = pol.finish(vals, ctx.qps, v.headroom * (1 - 2 * search.RESOLUTION),
                                   ctx.tolerance if v.compensation else 0.0)
                o = scn.evaluate(ctx.scenario, run_hpa(ctx.scenario, lower, ctx.hpa))
                assert o.underprovisioned_fraction > target, (fam, v, best.miss, target)
    sel = frontier.select(r.points, target)
    assert sel.met and sel.point is not None and sel.point.miss <= target
    # tune says when an anchor it cannot run dominates its choice, and names the cheapest such point
    from scaler.cli.tune import summary

    text, _ = summary(r, sel, server_address="http://p:9090", query="q", scaler_address="s:9090", placeholders=True)
    p = sel.point
    beats = [q for q in r.points if not q.selectable and q.policy in variants.ANCHORS and q.miss <= p.miss
             and q.cost <= p.cost and (q.miss < p.miss or q.cost < p.cost)]
    if beats:
        best_anchor = min(beats, key=lambda q: (q.cost, q.miss))
        assert f"beaten    by a published autoscaler's policy forescale cannot run: {best_anchor.label}" in text
    else:
        assert "beaten" not in text


def test_search_on_a_known_monotone_curve():
    """miss(h) = 0.1 / h**4, cost(h) = h: the cheapest h with miss <= 0.01 is 10**0.25 = 1.778 (within 5 % or 0.2 %)."""
    def f(h: float) -> scn.Outcome:
        return scn.Outcome(0.1 / h ** 4, 0, h, 0, 0, 0.0, 0.0, 1.0)

    found = search.cheapest_meeting(f, 0.01)
    assert found is not None
    assert found.outcome.underprovisioned_fraction <= 0.01
    assert found.outcome.underprovisioned_fraction >= 0.95 * 0.01 or found.headroom / 1.7783 - 1 < 2 * search.RESOLUTION
    assert found.headroom == pytest.approx(10 ** 0.25, rel=0.02)
    assert search.cheapest_meeting(f, 0.2).headroom == 1.0  # headroom 1 already meets it
    assert search.cheapest_meeting(f, 1e-9) is None  # 0.1 / 4.2**4 = 3.2e-4 > 1e-9: no answer


def test_conformal_quantile_and_window_calibration_shift():
    r = np.arange(1.0, 20.0)  # 19 residuals: q0.9 -> rank ceil(20 * 0.9) = 18 -> 18.0
    assert calibration.conformal(r, 0.9) == 18.0
    assert calibration.conformal(r, 0.99) == 19.0  # rank 20 > 19: the max
    # a flat forecast of 10 and a demand of 10 except a 14 every 10th tick window: residuals 0 or 4
    n = 4 * 240
    t0 = T0
    demand = np.full(n, 10.0)
    demand[::40] = 14.0
    sc = scn.Scenario(t0, demand, np.full(n, 10.0), cold_start_seconds=60.0, qps_per_replica=1.0)
    step = 60.0
    curves = []
    for c in np.arange(t0, t0 + n * 15.0 - 600, step):
        ft = c + step * np.arange(0, 8)
        curves.append(forecasts.Curve(float(c), Forecast(ft, np.full(8, 10.0), {0.9: np.full(8, 10.0)}, "flat")))
    p = PolicyParams(mode="forecastAndScale", lead_seconds=120.0, quantile=0.9, qps_per_replica=1.0)
    cs, rs = calibration.residuals(sc, curves, p)
    assert set(np.round(rs, 9)) == {0.0, 4.0}
    out, fell_back = calibration.calibrated(sc, curves, p)
    # curve i (one a minute) has i - 1 realised residuals (c_j + 120 s <= c_i: j <= i - 2): curves 0..30 fall back
    assert fell_back == calibration.MIN_RESIDUALS + 1
    late = [cv for cv in out[fell_back:] if cv.forecast is not None]
    # a window of 120 s spans 9 ticks, so a cutoff sees the 14 (one tick in 40) in about 9/40 of the windows: more
    # than 10 % of the residuals are 4, so the q0.9 residual is 4 and the calibrated band 10 + 4 = 14
    share = float(np.mean(rs == 4.0))
    assert share > 0.1
    assert all(np.allclose(cv.forecast.quantiles[0.9], 14.0) for cv in late)
    # the replay's packed form gives the same band; no forecast at all (too little history): nothing to calibrate
    packed = forecasts.Packed.from_curves("flat", curves)
    cal, n_back = calibration.calibrated(sc, packed, p)
    assert n_back == fell_back and np.array_equal(cal.quantiles[0.9], np.vstack([cv.forecast.quantiles[0.9] for cv in out]))
    from scaler.policy import Reason
    empty = [forecasts.Curve(cv.since, None, None, Reason.INSUFFICIENT_HISTORY) for cv in curves]
    assert calibration.calibrated(sc, empty, p) == (empty, 0)
    pk_empty = forecasts.Packed.from_curves("flat", empty)
    assert calibration.calibrated(sc, pk_empty, p) == (pk_empty, 0)


def test_tuning_auto_can_pick_the_envelope_and_runs_it_as_model_envelope(bursty):
    """The server's tuning job, limited to the envelope: the settings it applies are the servable model's."""
    from scaler.serve.tuning import TuningJob, run_job

    s = bursty.series
    job = TuningJob("bursty", s.t, s.y, s.step, qps_per_replica=10.0, cold_start_seconds=180.0, buffer_seconds=105.0,
                    model="linear_trend", history_seconds=8 * DAY, refit_seconds=7200.0, span_seconds=2 * DAY,
                    tolerance=0.1, activation_threshold=0.0, target_miss=0.002, max_cost_ratio=None,
                    families=("envelope", "oracle"))
    out = run_job(job)
    assert out["policy"] == "envelope" and out["met"] and out["miss"] <= 0.002
    assert out["settings"]["model"] == "envelope" and out["settings"]["level_correction_seconds"] == 0.0
    assert out["settings"]["headroom"] >= 1.0 and out["knobs"]["envelopeWindow"] == "1h"


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(st.lists(st.floats(-50, 50, allow_nan=False).map(lambda x: round(x, 1)), min_size=1, max_size=120),
       st.lists(st.tuples(st.integers(0, 5), st.integers(1, 8)), min_size=1, max_size=60),
       st.sampled_from([0.5, 0.8, 0.9, 0.95, 0.99]))
def test_rolling_conformal_equals_conformal_on_each_window(values, moves, q):
    # windows sliding forward (lo and hi non-decreasing, as a replay's), ties frequent (one decimal)
    r = np.array(values)
    lo, hi, a, b = [], [], 0, 1
    for da, db in moves:
        b = min(len(r), b + db)
        a = min(b - 1, a + da)
        lo.append(a)
        hi.append(b)
    got = calibration.rolling_conformal(r, np.array(lo), np.array(hi), q)
    assert got.tolist() == [calibration.conformal(r[x:y], q) for x, y in zip(lo, hi)]


def test_rolling_conformal_takes_other_windows_one_at_a_time():
    r = np.array([3.0, 1.0, 2.0, np.nan, 5.0])
    # windows moving back, and residuals with a NaN: conformal window by window. q0.5 of n = 2 or 3: rank
    # ceil((n + 1) / 2) = 2. [1, 2] -> 2; [3, 1] -> 3; [3, 1, 2] -> 2; [2, NaN, 5] -> 5 (np.partition puts NaN last)
    assert calibration.rolling_conformal(r[:3], np.array([1, 0]), np.array([3, 2]), 0.5).tolist() == [2.0, 3.0]
    assert calibration.rolling_conformal(r, np.array([0, 2]), np.array([3, 5]), 0.5).tolist() == [2.0, 5.0]
    assert calibration.rolling_conformal(r, np.array([], dtype=int), np.array([], dtype=int), 0.5).shape == (0,)

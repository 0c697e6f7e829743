"""The pure scoring and drift core (scaler.drift): worked numbers."""

from __future__ import annotations

import math

import pytest

from scaler.drift import MAX_PENDING, DriftConfig, Scorecard, pinball, safe_planned

T0 = 1_700_000_400.0  # a multiple of 60


def feed(card: Scorecard, ys, q=10.0, planned=12.0, tau=0.9, start=T0):
    """Provision minute i with (q, planned), then observe ys[i] in it; the events of each minute."""
    out = []
    for i, y in enumerate(ys):
        t = start + 60 * i
        card.provision(t, q, tau, planned)
        out.append(card.observe(t + 30, y))
    return out


def test_scores_of_a_window_worked():
    card = Scorecard()
    feed(card, [8.0] * 8 + [11.0, 13.0])
    s = card.scores(0, T0 + 600)
    # covered: the 8 minutes at 8 <= 10 -> 8/10
    # pinball: 8 x (1-0.9) x (10-8) = 1.6; 0.9 x (11-10) = 0.9; 0.9 x (13-10) = 2.7 -> 5.2 / 10 = 0.52
    # under-provisioned: only 13 > 12 -> 1 minute; demand above planned: (13-12) / (8x8+11+13 = 88)
    assert s.scored == 10 and s.coverage == pytest.approx(0.8) and s.pinball == pytest.approx(0.52)
    assert s.under_minutes == 1 and s.demand_above_planned == pytest.approx(1 / 88)
    assert card.scores(1, T0 + 600).scored == 10  # the 24 h window holds them too
    # an hour and a bit later the 1 h window is empty, the 24 h one is not
    assert card.scores(0, T0 + 600 + 3660).scored == 0 and card.scores(1, T0 + 4260).scored == 10


def test_pinball():
    assert pinball(12.0, 10.0, 0.9) == pytest.approx(1.8)  # 0.9 x (12 - 10)
    assert pinball(8.0, 10.0, 0.9) == pytest.approx(0.2)  # 0.1 x (10 - 8)


def test_small_exceedances_are_scored_but_do_not_move_the_cusum():
    card = Scorecard()
    # 11.5 > 10 (not covered) but not above 10 x (1 + margin 0.2) = 12: the chart stays at 0
    events = feed(card, [11.5] * 60)
    assert card.cusum == 0.0 and card.scores(0, T0 + 3600).coverage == 0.0
    # the 1 h coverage (0 < 0.9 - 0.5) alone does not alarm either: the CUSUM is below coverage_cusum (4)
    assert not any(events) and card.alarms == 0


def test_cusum_alarms_on_the_fifth_exceedance_in_a_row_and_recovers():
    card = Scorecard()
    # tau 0.9: p0 = 0.1, p1 = 0.6; an exceedance adds ln(0.6/0.1) = 1.792, a covered minute ln(0.4/0.9) = -0.811
    # 4 exceedances: 7.17 < h = 8; the 5th: 8.96 -> alarm
    events = feed(card, [20.0] * 5)
    assert events == [[], [], [], [], ["alarm"]] and card.drifting and card.alarms == 1
    # recovery: 15 scored minutes with at most 3 exceedances
    events = feed(card, [8.0] * 14, start=T0 + 300)
    assert not any(events) and card.drifting
    assert feed(card, [8.0], start=T0 + 300 + 14 * 60) == [["recovered"]] and not card.drifting


def test_a_calibrated_forecast_never_alarms():
    card = Scorecard()
    # one exceedance in 10 minutes (the nominal 1 - 0.9), for a day: the sum falls back to 0 after each
    events = feed(card, ([20.0] + [8.0] * 9) * 144)
    assert not any(events) and card.alarms == 0


def test_low_coverage_over_the_hour_alarms_too():
    card = Scorecard(config=DriftConfig(h=1e9, coverage_cusum=0.0))  # the CUSUM off: only the 1 h coverage
    # 3 minutes in 4 exceeded: coverage 7/30 = 0.23 < 0.9 - 0.5 once 30 minutes are scored
    events = feed(card, [20.0, 20.0, 20.0, 8.0] * 10)
    first = next(i for i, e in enumerate(events) if e)
    assert events[first] == ["alarm"] and first == 29  # the 30th scored minute


def test_pending_is_bounded_and_the_safe_value_never_drops_below_observed():
    card = Scorecard()
    for i in range(MAX_PENDING + 50):
        card.provision(T0 + 60 * i, 10.0, 0.9, 12.0)
    assert len(card.pending) == MAX_PENDING
    card.provision(T0, math.nan, 0.9, 12.0)  # ignored
    card.observe(T0 + 10, 50.0)
    card.observe(T0 + 70, 5.0)
    assert card.window_max(T0 + 70) == 50.0
    # window max 50 x headroom 1.1 = 55 over the policy's 6; the observed rate (70) itself when it is higher
    assert safe_planned(6.0, 5.0, 50.0, 1.1) == pytest.approx(55.0)
    assert safe_planned(6.0, 70.0, 50.0, 1.0) == 70.0
    assert safe_planned(90.0, 70.0, 50.0, 1.0) == 90.0

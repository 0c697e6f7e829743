"""The one holiday mechanism every model goes through (forecaster.models.holiday, make_for_policy): history
substitution, the shared effect learned from past holidays, holidayAs ordinary / a weekday as a day-level factor,
recent points brought to the ordinary scale, past events learned per name. Worked values on synthetic weeks."""

from __future__ import annotations

import datetime as dt
import json
import math

import numpy as np
import pytest

from forecaster.base import Series
from forecaster.calendar import DAY, LEARNED, ORDINARY, holiday_as_name, parse_weekday, substitute_holidays
from forecaster.eventsfile import parse_events
from forecaster.models import NAMES, from_state, make_for_policy
from forecaster.models.holiday import HolidayFitted


def ts(*a) -> float:
    return dt.datetime(*a, tzinfo=dt.timezone.utc).timestamp()


def day(*a) -> int:
    return int(ts(*a) // DAY)


STEP = 3600.0
HOUR = np.arange(24, dtype=float)


def weeks(n: int = 3, holiday_value: float | None = 50.0) -> Series:
    """``n`` weeks hourly from Monday 2026-11-02: y = 100 x (weekday + 1) + hour; week 3's Thursday (2026-11-19)
    = ``holiday_value`` + hour."""
    t = ts(2026, 11, 2) + STEP * np.arange(n * 7 * 24)
    wd = (np.arange(len(t)) // 24) % 7
    y = 100.0 * (wd + 1) + np.arange(len(t)) % 24
    if holiday_value is not None:
        y[17 * 24:18 * 24] = holiday_value + HOUR
    return Series(t, y, STEP)


def in_progress(holiday_share: float | None = None) -> Series:
    """Monday 11-02 .. Thursday 11-26 11:00 hourly, the pattern of ``weeks``; Thursday 11-26 is a holiday in
    progress: its first 12 hours at 50 + hour (or ``holiday_share`` x the Thursday before)."""
    s = weeks(4, holiday_value=None)
    n = 24 * 24 + 12  # 11-26 is day 24 from 11-02
    y = s.y[:n].copy()
    y[576:] = 50.0 + HOUR[:12] if holiday_share is None else y[576 - 168:n - 168] * holiday_share
    return Series(s.t[:n], y, STEP)


THU, FRI = slice(3 * 24, 4 * 24), slice(4 * 24, 5 * 24)  # in a forecast from Sunday 11-22 24:00: 11-26, 11-27
HOLIDAYS = (day(2026, 11, 19), day(2026, 11, 26))


def policy_model(name: str, holiday_as: int, days=HOLIDAYS, events=()):
    return make_for_policy(name, seed=0, level_half_life=0.0, quantile=0.8, holiday_days=days,
                           holiday_as=holiday_as, events=events)


def test_the_holiday_in_progress_with_nothing_to_learn_from_is_forecast_as_observed_and_state_round_trips():
    """No earlier holiday in the history: no effect is learned (a quarter day says little about the rest: the
    holiday's night runs above an ordinary night, its day far below, docs/events.md); the holiday's first hours are
    not substituted: the model sees them as observed, exactly as without holidays (the level correction carries
    today's level). seasonal_naive then copies last Thursday (400 + h) for the rest of the day, as ``off`` does."""
    from forecaster.models.holiday import clean_history

    s = in_progress()
    f = policy_model("seasonal_naive", LEARNED, days=(day(2026, 11, 26),)).fit(s)
    assert isinstance(f, HolidayFitted) and f.model == "seasonal_naive" and f.chosen == "seasonal_naive"
    assert f.effects.holidays == () and f.effects.profile == () and f.effects.profile_day is None
    np.testing.assert_array_equal(clean_history(s, f.rule)[0][576:], 50.0 + HOUR[:12])  # as observed
    plain = make_for_policy("seasonal_naive", seed=0, level_half_life=0.0, quantile=0.8).fit(s)
    fc = f.predict(13, (0.8,))
    np.testing.assert_array_equal(fc.mean, plain.predict(13, (0.8,)).mean)
    np.testing.assert_allclose(fc.mean[:12], 400.0 + HOUR[12:])
    back = from_state(json.loads(json.dumps(f.to_state(), allow_nan=False)))
    np.testing.assert_allclose(back.predict(13, (0.8,)).mean, fc.mean, rtol=1e-12)


def test_a_holiday_not_begun_takes_the_profile_of_the_past_holiday_in_the_history():
    # history to Sunday 11-22 with a past holiday on 11-19 (50 + h, its ordinary substitute the Thursday before,
    # 400 + h): 11-26 is forecast with 11-19's profile, hour by hour log((50 + h + c) / (400 + h + c)) on the ordinary
    # copy 400 + h: (400 + h + c) x (50 + h + c) / (400 + h + c) - c = 50 + h; no holiday in progress
    f = policy_model("seasonal_naive", LEARNED).fit(weeks())
    assert f.effects.holidays == () and f.effects.profile_day == day(2026, 11, 19)
    fc = f.predict(7 * 24)
    np.testing.assert_allclose(fc.mean[THU], 50.0 + HOUR)
    np.testing.assert_allclose(fc.mean[FRI], 500.0 + HOUR)  # the day after: ordinary


def test_a_past_holiday_with_no_holiday_ahead_leaves_ordinary_days_alone():
    f = policy_model("seasonal_naive", LEARNED, days=HOLIDAYS[:1]).fit(weeks())
    fc = f.predict(7 * 24)
    np.testing.assert_allclose(fc.mean[THU], 400.0 + HOUR)  # 11-26 is no holiday here: 11-19 substituted
    np.testing.assert_allclose(fc.mean[FRI], 500.0 + HOUR)


def test_ordinary_substitutes_only():
    f = policy_model("seasonal_naive", ORDINARY).fit(weeks())
    fc = f.predict(7 * 24)
    np.testing.assert_allclose(fc.mean[THU], 400.0 + HOUR)  # the holiday ahead as its own weekday, no effect
    np.testing.assert_allclose(fc.mean[FRI], 500.0 + HOUR)


def test_a_weekday_rule_for_a_model_without_its_own_is_a_day_level_factor():
    # naive on the substituted history: the last value (Sunday 11-22 23:00 = 700 + 23 = 723) everywhere; on the
    # holiday x (level of the last Sunday + c) / (level of the last Thursday + c) over the last 7 whole days:
    # Sunday mean 711.5, Thursday 11-19 substituted by 11-12: 411.5; c = 5 % of the 3 substituted weeks' mean
    # (100 x 4 + 11.5 = 411.5) = 20.575
    f = policy_model("naive", 6).fit(weeks())
    fc = f.predict(7 * 24)
    c = 0.05 * 411.5
    ratio = (711.5 + c) / (411.5 + c)
    np.testing.assert_allclose(fc.mean[THU], (723.0 + c) * ratio - c, rtol=1e-9)
    np.testing.assert_allclose(fc.mean[FRI], 723.0)


def test_recent_points_on_a_holiday_are_brought_to_the_ordinary_scale_first():
    """naive from a later origin inside the holiday in progress with a profile (11-19's, hour h: p_h): its last value
    (60 at 20:00, on the holiday) is divided by the profile there, (60 + c) exp(-p_20) - c, and multiplied back by
    each later hour's: (ordinary + c) exp(p_h) - c on 21:00 .. 23:00; after midnight the ordinary level itself."""
    days = (day(2026, 11, 19), day(2026, 11, 26))
    f = policy_model("naive", LEARNED, days=days).fit(two_holidays())
    assert f.effects.profile_day == days[0]
    c, p = f.effects.offset, np.asarray(f.effects.profile)
    origin = ts(2026, 11, 26, 20)
    recent = Series(origin - STEP * np.arange(3)[::-1], np.full(3, 60.0), STEP)
    fc = f.predict(6, origin=origin, recent=recent)
    ordinary = (60.0 + c) * math.exp(-p[20]) - c
    np.testing.assert_allclose(fc.mean[:3], (ordinary + c) * np.exp(p[21:24]) - c, rtol=1e-9)  # 21:00 .. 23:00
    np.testing.assert_allclose(fc.mean[3:], ordinary, rtol=1e-9)  # Friday


def test_substitution_takes_two_weeks_back_when_the_week_before_is_a_holiday_too():
    # Christmas (Thursday 12-24 here) then New Year's Eve-like Thursday 12-31: the second one's week before is a
    # holiday and its week after is past the end, so it takes two weeks back (12-17)
    t = ts(2026, 12, 7) + STEP * np.arange(4 * 7 * 24)  # Monday 12-07 .. Sunday 01-03
    y = np.arange(len(t), dtype=float)
    out = substitute_holidays(t, y, np.array([day(2026, 12, 24), day(2026, 12, 31)]))
    i24, i31 = 17 * 24, 24 * 24
    assert out[i31 + 5] == y[i31 + 5 - 14 * 24] and out[i24 + 5] == y[i24 + 5 - 7 * 24]


def test_past_events_learned_per_name_and_substituted():
    """A 'promo' without a multiplier on Tuesday 11-10 10:00-14:00 doubled the traffic (y x 2); the history is
    substituted there (so the next Tuesday is ordinary) and its effect is learned: log((2 sum y + 4 c) / (sum y + 4 c))
    over its 4 hours (about +0.67);
    the promo again on Tuesday 11-24 10:00-14:00 is forecast with it. A 'launch' with a multiplier is only
    substituted (decide applies the multiplier)."""
    s = weeks(holiday_value=None)
    y = s.y.copy()
    i = 8 * 24 + 10  # Tuesday 11-10 10:00
    y[i:i + 4] *= 2.0
    s = Series(s.t, y, STEP)
    ev = parse_events("name,start,end,multiplier,floor_qps\n"
                      "promo,2026-11-10T10:00:00Z,2026-11-10T14:00:00Z,,5\n"
                      "promo,2026-11-24T10:00:00Z,2026-11-24T14:00:00Z,,5\n"
                      "launch,2026-11-17T10:00:00Z,2026-11-17T14:00:00Z,3,\n")
    f = policy_model("seasonal_naive", LEARNED, days=(), events=ev).fit(s)
    base = 200.0 + np.arange(10, 14)  # Tuesday 10:00-13:00 ordinary
    c = 0.05 * 411.5  # the substituted 3 weeks are the pattern: c = 5 % of 411.5
    e = math.log((2 * base.sum() + 4 * c) / (base.sum() + 4 * c))
    assert dict(f.effects.events) == {"promo": pytest.approx(e, rel=1e-9)}
    fc = f.predict(7 * 24)
    tue = 24 + np.arange(24)  # Tuesday 11-24 in the forecast
    np.testing.assert_allclose(fc.mean[tue[10:14]], (base + c) * math.exp(e) - c, rtol=1e-9)
    np.testing.assert_allclose(fc.mean[tue[:10]], 200.0 + HOUR[:10])  # not on the event: ordinary


@pytest.mark.parametrize("name", NAMES)
def test_every_model_goes_through_the_one_mechanism(name):
    """Every model, holidayAs learned: the rest of the holiday in progress (11-26) is its ordinary forecast scaled by
    the profile of the earlier holiday in the history (11-19, the similar day); the day after is untouched; the
    state survives JSON."""
    days = (day(2026, 11, 19), day(2026, 11, 26))
    f = policy_model(name, LEARNED, days=days).fit(two_holidays())
    assert isinstance(f, HolidayFitted) and f.effects.profile_day == days[0] and f.effects.holidays == ()
    c, prof = f.effects.offset, np.asarray(f.effects.profile)
    fc = f.predict(13, (0.5, 0.8))
    plain = f.inner.predict(13, (0.5, 0.8))  # the inner model's ordinary forecast
    np.testing.assert_allclose(fc.mean[:12], np.maximum((plain.mean[:12] + c) * np.exp(prof[12:]) - c, 0.0),
                               rtol=1e-9)
    assert fc.mean[12] == pytest.approx(plain.mean[12])
    assert np.all(fc.quantiles[0.8] >= fc.quantiles[0.5] - 1e-9)
    back = from_state(json.loads(json.dumps(f.to_state(), allow_nan=False)))
    np.testing.assert_allclose(back.predict(13, (0.8,)).mean, fc.mean, rtol=1e-9)


def test_holiday_as_names():
    assert parse_weekday("learned") == LEARNED and parse_weekday("ordinary") == ORDINARY
    assert holiday_as_name(LEARNED) == "learned" and holiday_as_name(6) == "sunday"


@pytest.mark.parametrize("holiday_as", [LEARNED, ORDINARY, 6])
def test_no_holiday_in_the_history_or_ahead_leaves_the_forecast_unchanged(holiday_as):
    """A trace whose span holds no holiday (e.g. nab_tweets 2015-02-26 .. 04-22 for US): the same forecast."""
    s = weeks(holiday_value=None)
    far = (day(2027, 7, 4),)
    for name in ("naive", "seasonal_naive", "envelope"):
        plain = make_for_policy(name, seed=0, level_half_life=0.0, quantile=0.8).fit(s).predict(48, (0.8,))
        hol = policy_model(name, holiday_as, days=far).fit(s).predict(48, (0.8,))
        np.testing.assert_array_equal(hol.mean, plain.mean)
        np.testing.assert_array_equal(hol.quantiles[0.8], plain.quantiles[0.8])


def test_an_effect_within_ordinary_week_on_week_change_is_not_applied():
    """Ordinary days vary week on week (each day's level x exp(N(0, 0.1)), seeded: day-on-week-before log ratios
    spread ~0.14); a past holiday (11-19) at 95 % of its Thursday before (log ratio ~ -0.05) is within that noise:
    no profile (11-26 ahead is an ordinary day), while one at 50 % (~ -0.69) gives the profile, each hour's log ratio
    less the ordinary days' median change."""
    from forecaster.models.holidayeffects import drift

    def traffic(holiday_share: float) -> Series:
        s = weeks(holiday_value=None)
        n_day = np.floor(s.t / DAY).astype(int)
        level = np.exp(np.random.default_rng(1).normal(0.0, 0.1, 21))
        y = s.y * level[n_day - n_day[0]]
        y[17 * 24:18 * 24] = y[10 * 24:11 * 24] * holiday_share  # 11-19: this share of the Thursday before
        return Series(s.t, y, s.step)

    small = policy_model("seasonal_naive", LEARNED).fit(traffic(0.95))
    assert small.effects.profile == () and small.effects.profile_day is None
    s = traffic(0.5)
    big = policy_model("seasonal_naive", LEARNED).fit(s)
    c = big.effects.offset
    base, spread = drift(s.t, s.y, big.rule.marked(s.t), s.step, c)
    assert 0.05 < spread < 0.4
    hol, before = s.y[17 * 24:18 * 24], s.y[10 * 24:11 * 24]  # 11-19 is substituted by 11-12, its Thursday before
    raw = math.log((hol.sum() + 24 * c) / (before.sum() + 24 * c))  # about log(0.5)
    assert raw == pytest.approx(-0.69, abs=0.05) and abs(raw - base) > 2 * spread
    assert big.effects.profile_day == day(2026, 11, 19)
    np.testing.assert_allclose(big.effects.profile, np.log((hol + c) / (before + c)) - base, rtol=1e-9)


def two_holidays() -> Series:
    """Hourly, Monday 11-09 .. Thursday 11-26 11:00, y = 100 x (weekday + 1) + hour; Thursday 11-19 a holiday at
    50 + hour; Thursday 11-26 a holiday in progress, its first 12 hours at 2 x (50 + hour)."""
    t = ts(2026, 11, 9) + STEP * np.arange(17 * 24 + 12)
    i = np.arange(len(t))
    y = 100.0 * ((i // 24) % 7 + 1) + i % 24
    y[10 * 24:11 * 24] = 50.0 + HOUR
    y[17 * 24:] = 2.0 * (50.0 + HOUR[:12])
    return Series(t, y, STEP)


# Substituted, the series is the plain pattern but for 11-26's morning (11-19 by 11-12; the holiday in progress is
# not substituted): two weeks of 24 x 100 x 28 + 7 x 276 = 69132 each, Mon-Wed 24 x 600 + 3 x 276 = 15228, Thursday's
# 12 hours as observed 2 x (12 x 50 + 66) = 1332: 154824 over 420 points, mean 368.63, c2 = 18.431. Ordinary days
# equal their week before: no drift. 11-19's profile, hour h: p_h = log((50 + h + c2) / (400 + h + c2)).
C2 = 0.05 * 154824.0 / 420


def test_two_holiday_values_are_what_the_comment_derives():
    assert C2 == pytest.approx(18.431, abs=0.001)


def test_the_holiday_in_progress_takes_the_earlier_holidays_profile_and_keeps_its_hours_on_the_ordinary_scale():
    """11-26 in progress after 11-19: forecast with 11-19's profile (seasonal_naive copies last Thursday, 400 + h, and
    the profile makes it 50 + h); the holiday's own first hours add no effect of their own, and the model sees them
    divided by the profile (on the ordinary scale, as recent points are), not replaced by the week before."""
    from forecaster.models.holiday import clean_history
    from forecaster.models.holidayeffects import log_factor

    days = (day(2026, 11, 19), day(2026, 11, 26))
    s = two_holidays()
    g = policy_model("seasonal_naive", LEARNED, days=days).fit(s)
    assert g.effects.holidays == () and g.effects.profile_day == days[0]
    assert g.effects.offset == pytest.approx(C2, rel=1e-9)
    np.testing.assert_allclose(g.effects.profile, np.log((50.0 + HOUR + C2) / (400.0 + HOUR + C2)), rtol=1e-9)
    np.testing.assert_allclose(g.predict(13).mean[:12], 50.0 + HOUR[12:], rtol=1e-9)  # 11-19's hours: 50 + h
    assert g.predict(13).mean[12] == pytest.approx(500.0)  # Friday 00:00: ordinary
    np.testing.assert_array_equal(clean_history(s, g.rule)[0][17 * 24:], 2.0 * (50.0 + HOUR[:12]))  # not substituted
    p = log_factor(s.t[17 * 24:], g.rule, g.effects)
    np.testing.assert_allclose(p, g.effects.profile[:12], rtol=1e-12)  # what the fit divides them by
    # naive, fitted on that history, carries its last point (11:00, 2 x 61 = 122) on the ordinary scale,
    # (122 + c2) exp(-p_11) - c2 = (140.431 / 79.431) x 429.431 - c2 = 740.8, and the profile puts it back
    n = policy_model("naive", LEARNED, days=days).fit(s)
    ordinary = (122.0 + C2) * math.exp(-n.effects.profile[11]) - C2
    assert ordinary == pytest.approx(740.8, abs=0.1)
    np.testing.assert_allclose(n.predict(13).mean[:12], (ordinary + C2) * np.exp(n.effects.profile[12:]) - C2,
                               rtol=1e-9)
    assert n.predict(13).mean[12] == pytest.approx(ordinary)

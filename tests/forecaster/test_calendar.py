"""forecaster.calendar: holidays from the holidays package, the events file, events applied to a curve,
and seasonal_naive's holiday rule on a synthetic week."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from forecaster.base import Series
from forecaster.calendar import DAY, CalendarError, holiday_days, parse_weekday, substitute_holidays, weekday_of_day
from forecaster.eventsfile import apply_events, check_floors, load_events, parse_events
from forecaster.models.seasonal_naive import SeasonalNaiveFitted, SeasonalNaiveForecaster

HEADER = "name,start,end,multiplier,floor_qps\n"


def ts(*a) -> float:
    return dt.datetime(*a, tzinfo=dt.timezone.utc).timestamp()


def day(*a) -> int:
    return int(ts(*a) // DAY)


def test_us_holidays_2014_with_window_and_subdivision():
    t0, t1 = ts(2014, 11, 20), ts(2015, 1, 5)
    d = holiday_days("US", t0, t1)
    assert d == {day(2014, 11, 27): "Thanksgiving Day", day(2014, 12, 25): "Christmas Day",
                 day(2015, 1, 1): "New Year's Day"}
    assert weekday_of_day(day(2014, 11, 27)) == 3  # a Thursday
    w = holiday_days("US", t0, t1, window=1)
    assert w[day(2014, 11, 26)] == "Thanksgiving Day (-1d)" and w[day(2014, 12, 26)] == "Christmas Day (+1d)"
    assert len(w) == 9
    ca = holiday_days("US-CA", t0, t1)  # California also keeps the day after Thanksgiving
    assert day(2014, 11, 28) in ca and day(2014, 11, 28) not in d


@pytest.mark.parametrize("spec,word", [("XX", "not a supported country"), ("US-ZZ", "not a subdivision")])
def test_bad_holidays_spec(spec, word):
    with pytest.raises(CalendarError, match=word):
        holiday_days(spec, 0.0, DAY)


def test_weekday_names():
    assert parse_weekday("Sunday") == 6 and parse_weekday("sat") == 5 and parse_weekday("0") == 0
    with pytest.raises(CalendarError, match="weekday name"):
        parse_weekday("someday")


def test_events_csv_parsed_sorted():
    text = HEADER + ("launch,2026-12-02T09:00:00Z,2026-12-02T12:00:00Z,2.5,\n"
                     "sale,2026-11-27,2026-11-28,,400\n")
    ev = parse_events(text)
    assert [e.name for e in ev] == ["sale", "launch"]
    assert ev[0].start == ts(2026, 11, 27) and ev[0].floor_qps == 400 and ev[0].multiplier is None
    assert ev[1].multiplier == 2.5 and ev[1].line == 2


@pytest.mark.parametrize("body,msg", [
    ("a,2026-12-02T12:00:00Z,2026-12-02T09:00:00Z,2,\n", "line 2: event 'a' ends before"),
    ("a,2026-12-02,2026-12-03,,\n", "line 2: event 'a' has neither"),
    ("a,tomorrow,2026-12-03,2,\n", "line 2: start 'tomorrow' is not an ISO-8601"),
    ("a,2026-12-02,2026-12-03,2\n", "line 2: 4 field"),
    ("a,2026-12-02,2026-12-03,,-1\n", "line 2: floor_qps -1 is out of range"),
    ("a,2026-12-02,2026-12-04,,100\nb,2026-12-03,2026-12-05,,200\n", "line 3: event 'b' overlaps 'a' \\(line 2\\)"),
])
def test_events_csv_errors_name_the_line(body, msg):
    with pytest.raises(CalendarError, match=msg):
        parse_events(HEADER + body)


def test_overlap_with_the_same_floor_or_multipliers_only_is_accepted():
    ev = parse_events(HEADER + "a,2026-12-02,2026-12-04,,100\nb,2026-12-03,2026-12-05,2,100\n")
    assert len(ev) == 2


def test_bad_header():
    with pytest.raises(CalendarError, match="line 1: header 'name,start,stop'"):
        parse_events("name,start,stop\n")


def test_events_yaml_with_line_numbers(tmp_path):
    p = tmp_path / "ev.yaml"
    p.write_text("events:\n  - name: launch\n    start: 2026-12-02T09:00:00Z\n    end: 2026-12-02T12:00:00Z\n"
                 "    multiplier: 3\n  - name: bad\n    start: 2026-12-05\n    end: 2026-12-04\n    floor_qps: 5\n")
    with pytest.raises(CalendarError, match="ev.yaml line 6: event 'bad' ends before"):
        load_events(str(p))
    p.write_text("- name: launch\n  start: 2026-12-02T09:00:00Z\n  end: 2026-12-02T12:00:00Z\n  multiplier: 3\n")
    (e,) = load_events(str(p))
    assert e.multiplier == 3 and e.end - e.start == 3 * 3600


def test_missing_and_too_large_files(tmp_path):
    with pytest.raises(CalendarError, match="does not exist"):
        load_events(str(tmp_path / "nope.csv"))
    big = tmp_path / "big.csv"
    big.write_text(HEADER + "a,2026-12-02,2026-12-03,2,\n" * 20000)  # ~ 560 KB
    with pytest.raises(CalendarError, match="accepted up to 256 KiB") as e:
        load_events(str(big))
    assert len(str(e.value)) < 200  # no echo of the content


def test_floor_above_max_replicas():
    ev = parse_events(HEADER + "a,2026-12-02,2026-12-03,,500\n")
    check_floors(ev, 500.0)  # 10 replicas x 50 req/s: exactly reachable
    with pytest.raises(CalendarError, match="line 2: event 'a' floor_qps 500 is above .* = 450"):
        check_floors(ev, 9 * 50.0)


def test_floor_from_start_minus_lead_and_multiplier_in_window_only():
    # a flat planned rate of 100 req/s on a 60 s grid; lead L = 300 s
    t = ts(2026, 12, 2, 8) + 60.0 * np.arange(120)  # 08:00 ... 09:59
    rate = np.full(120, 100.0)
    ev = parse_events(HEADER + "floor,2026-12-02T09:00:00Z,2026-12-02T09:30:00Z,,400\n"
                               "push,2026-12-02T08:20:00Z,2026-12-02T08:30:00Z,1.5,\n")
    out, which = apply_events(t, rate, ev, lead=300.0)
    # floor: in force from 09:00 - 5 min = 08:55 (index 55) to 09:30 (index 90) inclusive -> 400
    assert np.all(out[55:91] == 400.0) and out[54] == 100.0 and out[91] == 100.0
    # multiplier: 08:15 (index 15) to 08:30 (index 30) -> 100 x 1.5 = 150; 100 elsewhere
    assert np.all(out[15:31] == 150.0) and out[14] == 100.0 and out[31] == 100.0
    assert which[55] == 1 and which[15] == 0 and which[0] == -1  # events sorted by start: push = 0, floor = 1
    assert np.all(rate == 100.0)  # input untouched


def test_substitute_holidays_takes_the_week_before_else_after():
    step = 3600.0
    t = ts(2026, 11, 2) + step * np.arange(21 * 24)  # 3 weeks from Monday 2026-11-02
    y = np.arange(len(t), dtype=float)
    days = np.array([day(2026, 11, 5), day(2026, 11, 19)])  # Thursday of week 1 and of week 3
    out = substitute_holidays(t, y, days)
    i1, i3 = 3 * 24, 17 * 24  # Thursday week 1 (no week before: the week after), Thursday week 3
    assert out[i1] == y[i1 + 7 * 24] and out[i3 + 5] == y[i3 + 5 - 7 * 24]
    assert out[i1 - 1] == y[i1 - 1]


def _synthetic(holiday_thursday_value: float | None):
    """3 weeks hourly from Monday 2026-11-02: y = 100 x (weekday + 1) + hour; week 3's Thursday
    (2026-11-19) = 50 + hour when ``holiday_thursday_value`` is given."""
    step = 3600.0
    t = ts(2026, 11, 2) + step * np.arange(21 * 24)
    wd = (np.arange(len(t)) // 24) % 7
    hour = np.arange(len(t)) % 24
    y = 100.0 * (wd + 1) + hour
    if holiday_thursday_value is not None:
        y[17 * 24:18 * 24] = holiday_thursday_value + hour[:24]
    return Series(t=t, y=y, step=step), hour[:24]


def test_seasonal_naive_does_not_copy_a_holiday_into_the_next_week():
    series, hour = _synthetic(50.0)
    nov19 = day(2026, 11, 19)
    plain = SeasonalNaiveForecaster(level_half_life=0).fit(series).predict(7 * 24)
    hol = SeasonalNaiveForecaster(level_half_life=0, holiday_days=(nov19,)).fit(series).predict(7 * 24)
    thu = slice(3 * 24, 4 * 24)  # Thursday 2026-11-26 in the forecast week (not a declared holiday here)
    assert np.allclose(plain.mean[thu], 50.0 + hour)  # plain: the holiday copied
    assert np.allclose(hol.mean[thu], 400.0 + hour)  # the last ordinary Thursday (11-12): 100 x 4 + hour
    other = np.r_[0:3 * 24, 4 * 24:7 * 24]
    assert np.allclose(hol.mean[other], plain.mean[other])  # other days unchanged


def test_seasonal_naive_forecasts_a_holiday_as_sunday_and_survives_state():
    series, hour = _synthetic(50.0)
    days = (day(2026, 11, 19), day(2026, 11, 26))
    f = SeasonalNaiveForecaster(level_half_life=0, holiday_days=days).fit(series)
    fc = f.predict(7 * 24)
    # Thanksgiving 2026-11-26 as the last Sunday (11-22): 100 x 7 + hour; Friday 11-27 from 11-20: 500 + hour
    assert np.allclose(fc.mean[3 * 24:4 * 24], 700.0 + hour)
    assert np.allclose(fc.mean[4 * 24:5 * 24], 500.0 + hour)
    g = SeasonalNaiveFitted.from_state(f.to_state())
    assert np.allclose(g.predict(7 * 24).mean, fc.mean)
    sat = SeasonalNaiveForecaster(level_half_life=0, holiday_days=days, holiday_as=5).fit(series).predict(7 * 24)
    assert np.allclose(sat.mean[3 * 24:4 * 24], 600.0 + hour)  # as Saturday 11-21


def test_prophet_substitutes_past_holidays_and_forecasts_a_holiday_as_sunday():
    """Real Prophet fits on the synthetic weeks. Plain, the holiday (Thursday 11-19 at 50 + hour instead of
    400 + hour) pulls the weekly shape's Thursday down; with it declared, the history point is replaced by the
    Thursday a week before, so next Thursday's forecast is near 400 + hour (within 10 %), and a declared holiday
    next week (11-26) is forecast as that week's Sunday (near 700 + hour)."""
    from forecaster.models.prophet import ProphetFitted, ProphetForecaster

    series, hour = _synthetic(50.0)
    thu = slice(3 * 24, 4 * 24)
    plain = ProphetForecaster().fit(series).predict(7 * 24)
    hol = ProphetForecaster(holiday_days=(day(2026, 11, 19),)).fit(series).predict(7 * 24)
    want = 400.0 + hour
    err_plain = float(np.mean(np.abs(plain.mean[thu] - want) / want))
    err_hol = float(np.mean(np.abs(hol.mean[thu] - want) / want))
    assert err_hol < 0.10 and err_plain > 2 * err_hol, (err_plain, err_hol)
    f = ProphetForecaster(holiday_days=(day(2026, 11, 19), day(2026, 11, 26))).fit(series)
    fc = f.predict(7 * 24)
    assert np.allclose(fc.mean[thu], fc.mean[6 * 24:7 * 24])  # the curve at Sunday 11-29's times
    assert float(np.mean(np.abs(fc.mean[thu] - (700.0 + hour)) / (700.0 + hour))) < 0.10
    assert np.allclose(ProphetFitted.from_state(f.to_state()).predict(7 * 24).mean, fc.mean)

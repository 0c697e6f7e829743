"""Holidays and events reach the fits: the replay's ``holiday_kw`` (backtest, tune) and the server's
``holiday_args`` (FitJob) hand the model the holiday days, ``holidayAs`` and the events, which
``make_for_policy`` turns into the one holiday mechanism."""

from __future__ import annotations

import datetime as dt

import numpy as np

from forecaster.base import Series
from forecaster.calendar import DAY, LEARNED, ORDINARY
from forecaster.eventsfile import parse_events
from forecaster.models import make_for_policy
from forecaster.models.holiday import HolidayForecaster
from scaler.replay.engine import Settings, holiday_kw
from scaler.serve.fitjob import holiday_args
from scaler.spec import parse_metadata

EVENTS = "name,start,end,multiplier,floor_qps\npromo,2014-11-25T10:00:00Z,2014-11-25T14:00:00Z,,50\n"


def ts(*a) -> float:
    return dt.datetime(*a, tzinfo=dt.timezone.utc).timestamp()


def test_replay_hands_days_rule_and_events_to_the_fits():
    ev = parse_events(EVENTS)
    t = ts(2014, 11, 1) + 3600.0 * np.arange(24 * 30)
    kw = holiday_kw(Settings(holidays="US", events=ev), Series(t, np.ones_like(t), 3600.0), 0.0)
    thanksgiving = int(ts(2014, 11, 27) // DAY)
    assert thanksgiving in kw["holiday_days"] and kw["holiday_as"] == LEARNED and kw["events"] == ev
    assert int(ts(2014, 11, 25) // DAY) in kw["special_days"]  # the event's day is scored apart too
    f = make_for_policy("naive", seed=0, level_half_life=0.0, quantile=0.8, holiday_days=kw["holiday_days"],
                        holiday_as=kw["holiday_as"], events=kw["events"])
    assert isinstance(f, HolidayForecaster) and f.rule.spans[0].name == "promo" and f.rule.spans[0].learn


def test_server_fit_job_gets_the_events_file(tmp_path):
    path = tmp_path / "events.csv"
    path.write_text(EVENTS)
    spec, _ = parse_metadata({"serverAddress": "http://prometheus:9090", "query": "sum(rate(x[1m]))", "qpsPerReplica": "10",
                              "eventsFile": str(path)})
    # the server reads events files in the background (scaler.events): wait for this one's first read, from the
    # one cache holiday_args reads, allowed under tmp_path whatever a server test left allowed before
    from scaler.events import FILES

    before = FILES.allowed
    FILES.allow((str(tmp_path),))
    try:
        assert FILES.wait(str(path), 30.0).error is None
        args = holiday_args(spec, ts(2014, 11, 1), ts(2014, 12, 1))
    finally:
        FILES.allow(before)
    assert "holiday_days" not in args and [e.name for e in args["events"]] == ["promo"]
    spec, _ = parse_metadata({"serverAddress": "http://prometheus:9090", "query": "sum(rate(x[1m]))", "qpsPerReplica": "10",
                              "holidays": "US", "holidayAs": "ordinary"})
    args = holiday_args(spec, ts(2014, 11, 1), ts(2014, 12, 1))
    assert int(ts(2014, 11, 27) // DAY) in args["holiday_days"] and args["holiday_as"] == ORDINARY and "events" not in args


def test_timezone_reaches_the_fits_and_the_accuracy_split():
    """``timezone: America/New_York``: the fits get the zone (the server's FitJob, the replay's run_model), and the
    replay scores a point as a holiday on New York's day: Thanksgiving 2014-11-27 is 05:00Z .. 05:00Z (EST)."""
    from forecaster.base import Forecast
    from scaler.replay.forecasts import split_scores

    spec, _ = parse_metadata({"serverAddress": "http://prometheus:9090", "query": "sum(rate(x[1m]))", "qpsPerReplica": "10",
                              "holidays": "US", "timezone": "America/New_York"})
    args = holiday_args(spec, ts(2014, 11, 1), ts(2014, 12, 1))
    assert args["timezone"] == "America/New_York" and int(ts(2014, 11, 27) // DAY) in args["holiday_days"]
    t = ts(2014, 11, 1) + 3600.0 * np.arange(24 * 30)
    s = Series(t, np.arange(1.0, len(t) + 1.0), 3600.0)
    kw = holiday_kw(Settings(holidays="US", timezone="America/New_York"), s, 0.0)
    assert kw["timezone"] == "America/New_York"
    # one-point forecasts at the 25 hours 11-26 12:00Z .. 11-27 12:00Z, each off by 1: New York's Thanksgiving is
    # 11-27 05:00Z .. 11-28 05:00Z, so 8 of them (05:00Z .. 12:00Z) are holiday points and 17 ordinary; in UTC the
    # day is 11-27 00:00Z .. 24:00Z: 13 holiday points (00:00Z .. 12:00Z) and 12 ordinary
    cut = ts(2014, 11, 26, 12) + 3600.0 * np.arange(25)
    fcs = [(c, Forecast(np.array([c]), np.array([s.y[int((c - t[0]) // 3600)] + 1.0]), {}, "x")) for c in cut]
    sc = split_scores(s, fcs, kw["special_days"], q=None, season=24, h=1, tz="America/New_York")
    assert (sc["holiday_or_event"]["n"], sc["ordinary"]["n"]) == (8, 17)
    utc = split_scores(s, fcs, kw["special_days"], q=None, season=24, h=1)
    assert (utc["holiday_or_event"]["n"], utc["ordinary"]["n"]) == (13, 12)

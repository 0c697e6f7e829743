"""Holidays and events reach the fits: the replay's ``holiday_kw`` (backtest, tune) and the server's
``holiday_args`` (FitJob) hand the model the holiday days, ``holidayAs`` and the events, which
``make_for_policy`` turns into the one holiday mechanism."""

from __future__ import annotations

import datetime as dt

import numpy as np

from forecaster.base import Series
from forecaster.calendar import DAY, LEARNED, ORDINARY, parse_events
from forecaster.models import make_for_policy
from forecaster.models.holiday import HolidayForecaster
from scaler.replay.engine import Settings, holiday_kw
from scaler.serve.fitting import holiday_args
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
    args = holiday_args(spec, ts(2014, 11, 1), ts(2014, 12, 1))
    assert "holiday_days" not in args and [e.name for e in args["events"]] == ["promo"]
    spec, _ = parse_metadata({"serverAddress": "http://prometheus:9090", "query": "sum(rate(x[1m]))", "qpsPerReplica": "10",
                              "holidays": "US", "holidayAs": "ordinary"})
    args = holiday_args(spec, ts(2014, 11, 1), ts(2014, 12, 1))
    assert int(ts(2014, 11, 27) // DAY) in args["holiday_days"] and args["holiday_as"] == ORDINARY and "events" not in args

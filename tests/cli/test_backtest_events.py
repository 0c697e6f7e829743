"""``backtest --holidays/--events``: bad input exits 2 naming it; a 1-day span on a holiday scores that day as a
holiday; an event's floor shows as the reason ``event``; the JSON marks the span's holidays and events."""

from __future__ import annotations

import json

from click.testing import CliRunner

from scaler.cli import main
from support.paths import TRACES

TAXI = str(TRACES / "nab_nyc_taxi" / "per_30min.csv")
HEADER = "name,start,end,multiplier,floor_qps\n"


def invoke(*args: str):
    return CliRunner().invoke(main, ["backtest", *args], catch_exceptions=False)


def test_bad_holidays_and_events_exit_2(tmp_path):
    r = invoke(TAXI, "--holidays", "XX")
    assert r.exit_code == 2 and "--holidays: holidays 'XX': not a supported country code" in r.output
    r = invoke(TAXI, "--timezone", "America/Gotham")
    assert r.exit_code == 2 and "--timezone: timezone 'America/Gotham': not a known time zone; accepted an IANA" in r.output
    r = invoke(TAXI, "--holiday-as", "someday")
    assert r.exit_code == 2 and "--holiday-as:" in r.output
    p = tmp_path / "ev.csv"
    p.write_text(HEADER + "ok,2014-11-28T08:00:00,2014-11-28T09:00:00,,5\nbad,2014-11-29T08:00:00,2014-11-29T07:00:00,,5\n")
    r = invoke(TAXI, "--events", str(p))
    assert r.exit_code == 2 and "ev.csv line 3: event 'bad' ends before" in r.output
    r = invoke(TAXI, "--events", str(tmp_path / "none.csv"))
    assert r.exit_code == 2 and "does not exist" in r.output


def test_one_day_on_thanksgiving_is_scored_as_a_holiday_and_an_event_floor_decides(tmp_path):
    ev = tmp_path / "ev.csv"
    ev.write_text(HEADER + "rush,2014-11-27T18:00:00,2014-11-27T20:00:00,,30\n")  # above the peak (~ 21 req/s)
    out = tmp_path / "bt.json"
    r = invoke(TAXI, "--step", "30m", "--model", "seasonal_naive", "--span", "1d", "--sim-start", "2014-11-27T00:00:00",
               "--policies", "predictive", "--qps-per-replica", "1", "--holidays", "US", "--events", str(ev),
               "--json", str(out), "--no-progress")
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    days = doc["forecast"]["seasonal_naive"]["days"]
    # 48 cutoffs of 30 min, each scored one step (L = 285 s -> 1 step) ahead: all on Thanksgiving
    assert days["holiday_or_event"]["n"] == 48 and days["ordinary"]["n"] == 0
    cal = doc["calendar"]
    assert cal["holidays"] == "US" and cal["holiday_as"] == "learned"
    # no earlier holiday in the 14 d history: nothing to learn from (issue 36 item 9)
    assert cal["holiday_days"] == [{"start": "2014-11-27T00:00:00Z", "end": "2014-11-28T00:00:00Z",
                                    "name": "Thanksgiving Day", "learned_from": None}]
    assert cal["events"][0]["name"] == "rush" and cal["events"][0]["floor_qps"] == 30.0
    reasons = doc["policies"]["predictive"]["reasons"]
    # KEDA asks at every HPA sync, every 15 s, in [18:00 - 285 s, 20:00]: 17:55:15 .. 20:00:00 =
    # 7485 / 15 + 1 = 500 decisions
    assert reasons["event"] == 500
    assert "holiday/event" in r.output  # the text table's split row


def test_tune_takes_the_same_options_and_refuses_bad_ones(tmp_path):
    r = CliRunner().invoke(main, ["tune", TAXI, "--holidays", "US-ZZ"], catch_exceptions=False)
    assert r.exit_code == 2 and "'ZZ' is not a subdivision of US" in r.output
    p = tmp_path / "ev.yaml"
    p.write_text("- name: big\n  start: 2014-11-28T08:00:00\n  end: 2014-11-28T12:00:00\n  floor_qps: 500\n")
    r = CliRunner().invoke(main, ["tune", TAXI, "--events", str(p), "--qps-per-replica", "1", "--max-replicas", "100"],
                           catch_exceptions=False)
    # 500 req/s > 100 replicas x 1 req/s
    assert r.exit_code == 2 and "line 1: event 'big' floor_qps 500 is above" in r.output

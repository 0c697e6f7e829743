"""The status page's event column and the chart's holiday/event shading, in a real headless Chromium: a real server
(fake clock), a real Prometheus, a fitted forecast, a real events file. Names with HTML stay text."""

from __future__ import annotations

import json
import time
import urllib.request
from datetime import datetime, timedelta, timezone

import numpy as np

from support import promfixture as pf
from support.browser import chromium, console_errors, wait_for
from support.clock import FakeClock
from support.scaler import Scaler, wait_for_fit

EVIL = "<img/src=x/onerror=window.__pwned=1>"  # a valid event name (printable, no space): HTML in it stays text


def holiday_today(now: float) -> tuple[str, int, str]:
    """A country of the ``holidays`` package with a holiday on ``now``'s UTC day or within the smallest window
    (0 to 6 days) that reaches it, plus one more day (the test's clock may cross midnight): (code, window, name)."""
    import holidays

    day = datetime.fromtimestamp(now, timezone.utc).date()
    cals = {cc: holidays.country_holidays(cc, years=[day.year - 1, day.year, day.year + 1])
            for cc in sorted(holidays.list_supported_countries())}
    for window in range(7):
        for cc, cal in cals.items():
            for k in sorted(range(-window, window + 1), key=abs):
                if day + timedelta(days=k) in cal:
                    return cc, window + 1, cal[day + timedelta(days=k)]
    raise AssertionError(f"no country of the holidays package has a holiday within 6 days of {day}")


def test_event_column_and_chart_shading(prometheus_factory, tmp_path):
    end = float(int(time.time()) // 60 * 60)
    country, window, holiday = holiday_today(end)
    t = np.arange(end - 3 * 3600, end + 3600, 60.0)
    prom = prometheus_factory([pf.SeriesSpec("forescale_events_qps", {"job": "t"}, "gauge", t,
                                             30.0 + 3.0 * np.sin(2 * np.pi * t / 3600.0))])

    def iso(x: float) -> str:
        return datetime.fromtimestamp(x, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    now_file = tmp_path / "events.csv"  # an event in force now (with HTML in its name), one later today
    now_file.write_text("name,start,end,multiplier,floor_qps\n"
                        f"{EVIL},{iso(end - 600)},{iso(end + 3600)},,1\n"
                        f"later,{iso(end + 7200)},{iso(end + 9000)},1.5,\n")
    soon_file = tmp_path / "soon.csv"  # an event starting within the lead (120 s): "coming"
    soon_file.write_text("name,start,end,multiplier,floor_qps\n"
                         f"launch,{iso(end + 90)},{iso(end + 3600)},2,\n")
    clock = FakeClock(end)
    s = Scaler(clock, server={"events_dirs": (str(tmp_path),)})
    try:
        md = {"serverAddress": prom.url, "query": "max(forescale_events_qps)", "qpsPerReplica": "5",
              "model": "naive", "history": "2h", "minHistory": "1h", "levelCorrection": "0", "hpaTolerance": "0",
              "coldStartSeconds": "120", "bufferSeconds": "0", "tuning": "off", "holidays": country,
              "holidayWindow": str(window), "eventsFile": str(now_file)}
        soon = {k: v for k, v in md.items() if not k.startswith("holiday")} | {"eventsFile": str(soon_file)}
        s.value(md, name="llm")
        s.value(soon, name="soon")
        wait_for_fit(s, "llm", timeout=120)  # the first fit, in a worker process
        clock.advance(60)
        s.value(md, name="llm")
        base = f"http://127.0.0.1:{s.server.http_port}"
        doc = json.loads(urllib.request.urlopen(base + "/status.json", timeout=5).read())
        row = next(r for r in doc["scaledobjects"] if r["name"] == "llm")
        cal = row["calendar"]
        # the event is in force (floor 1 req/s, below the demand: the reason is not `event`, the event is shown)
        assert row["event"] == EVIL and EVIL in cal["active"]
        kinds = {(p["kind"], p["name"]) for p in cal["periods"]}
        assert ("event", EVIL) in kinds and ("event", "later") in kinds  # both within the chart's 3 h ahead
        # today is a holiday day of that country (the holiday found, or a neighbour's window claiming the day)
        on_today = [n for k, n in kinds if k == "holiday" and n in cal["active"]]
        assert len(on_today) == 1, (country, window, holiday, cal)
        srow = next(r for r in doc["scaledobjects"] if r["name"] == "soon")
        # launch starts at end + 90 s, the clock is at end + 60 s: 30 s ahead, within the lead (120 s)
        assert srow["calendar"]["active"] == [] and srow["calendar"]["coming"]["name"] == "launch"
        assert abs(srow["calendar"]["coming"]["in_seconds"] - 30) < 1e-6
        with chromium() as driver:
            driver.get(base + "/")
            rid = "so:serving/llm"
            wait_for(driver, f"document.getElementById({rid!r})", what="the row")
            cell = driver.find_element("css selector", f"[id={json.dumps(rid)}] td[data-col=event]").text
            assert EVIL in cell and on_today[0] in cell  # as text
            soon_cell = driver.find_element("css selector", "[id='so:serving/soon'] td[data-col=event]").text
            assert soon_cell == "launch in 30 s"
            driver.execute_script(f"document.getElementById({rid!r}).querySelector('td[data-col=name]').click()")
            wait_for(driver, "!document.getElementById('detail').hidden", what="the detail view")
            assert EVIL in driver.find_element("id", "d_event").text
            wait_for(driver, "Number(document.getElementById('chart').dataset.points || 0) > 0", what="chart points")
            # the chart shades the holiday (the whole day: over the chart's whole width) and the two events
            n_hol = driver.execute_script("return document.querySelectorAll('#chart rect.hol').length")
            titles = driver.execute_script(
                "return Array.from(document.querySelectorAll('#chart rect.evt title')).map(e => e.textContent)")
            assert n_hol >= 1 and sorted(titles) == sorted([f"event: {EVIL}", "event: later"])
            assert driver.execute_script("return document.querySelectorAll('img').length") == 0
            assert driver.execute_script("return window.__pwned === undefined") is True
            assert console_errors(driver) == []
    finally:
        s.close()

"""The interactive report with ``--holidays``/``--events``, in a real headless Chromium: the time charts shade the
holidays and events of the span, the accuracy table is split into ordinary days and holidays/events, the names
(HTML in an event's name) stay text."""

from __future__ import annotations

import json

from click.testing import CliRunner

from scaler.cli import main
from support.browser import chromium, console_errors, wait_for
from support.paths import TRACES

TAXI = str(TRACES / "nab_nyc_taxi" / "per_30min.csv")
EVIL = "</script><script>window.__pwned=1</script>"  # a valid event name: printable, no space


def test_report_shades_holidays_and_events_and_splits_the_accuracy(tmp_path):
    ev = tmp_path / "ev.csv"
    ev.write_text("name,start,end,multiplier,floor_qps\n"
                  f"{EVIL},2014-11-28T18:00:00,2014-11-28T20:00:00,1.2,\n")
    rep, out = tmp_path / "rep", tmp_path / "bt.json"
    # two days from Thanksgiving (2014-11-27): one holiday, one ordinary day with the event
    r = CliRunner().invoke(main, ["backtest", TAXI, "--step", "30m", "--model", "seasonal_naive", "--span", "2d",
                                  "--sim-start", "2014-11-27T00:00:00", "--policies", "reactive,predictive,oracle",
                                  "--qps-per-replica", "1", "--holidays", "US", "--events", str(ev), "--json", str(out),
                                  "--report", str(rep), "--no-progress"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    days = doc["forecast"]["seasonal_naive"]["days"]
    # 96 cutoffs of 30 min scored one step ahead: 48 on Thanksgiving; the 28th is ordinary but for the event's
    # day (an event day counts as holiday/event): all 96 are holiday/event days
    assert days["holiday_or_event"]["n"] == 96 and days["ordinary"]["n"] == 0
    page = (rep / "index.html").read_text()
    assert EVIL not in page  # escaped everywhere (the table, the charts' JSON)
    with chromium() as driver:
        driver.get((rep / "index.html").as_uri())
        wait_for(driver, "document.querySelectorAll('.js-plotly-plot .main-svg').length >= 4", what="the charts")
        for chart in ("chart-capacity", "chart-misses", "chart-forecast"):
            shapes = driver.execute_script(f"return document.getElementById('{chart}').layout.shapes"
                                           ".map(s => [s.x0, s.x1, s.fillcolor]);")
            # Thanksgiving's whole day (orange) and the event's two hours (green)
            assert sorted(shapes) == [["2014-11-27T00:00:00.000", "2014-11-28T00:00:00.000", "#ff7f0e"],
                                      ["2014-11-28T18:00:00.000", "2014-11-28T20:00:00.000", "#2ca02c"]], (chart, shapes)
            labels = driver.execute_script(f"return Array.from(document.querySelectorAll('#{chart} .annotation-text'))"
                                           ".map(e => e.textContent);")
            assert "Thanksgiving Day" in labels and EVIL in labels, labels  # shown as text
        rows = driver.execute_script("return Array.from(document.querySelectorAll('#accuracy tr'))"
                                     ".map(tr => Array.from(tr.cells).map(c => c.textContent.trim()));")
        names = [row[0] for row in rows]
        i = names.index("seasonal_naive")
        assert names[i + 1:i + 3] == ["ordinary days", "holiday / event days"]
        assert rows[i + 2][1] == f"{days['holiday_or_event']['mase']:.3f}" and rows[i + 2][5] == "96"
        cal = driver.execute_script("return Array.from(document.querySelectorAll('#calendar tr')).slice(1)"
                                    ".map(tr => Array.from(tr.cells).map(c => c.textContent));")
        assert cal == [["holiday", "Thanksgiving Day", "2014-11-27T00:00:00Z", "2014-11-28T00:00:00Z", "-"],
                       ["event", EVIL, "2014-11-28T18:00:00Z", "2014-11-28T20:00:00Z", "x1.2"]]
        assert driver.execute_script("return window.__pwned === undefined") is True
        assert console_errors(driver) == []

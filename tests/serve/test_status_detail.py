"""The status page's detail view in a real headless Chromium: a real server (fake clock), a real Prometheus,
a fitted forecast. The chart has data, the view updates in place, no console error, names with HTML escaped."""

from __future__ import annotations

import time

import grpc
import numpy as np
import pytest

from support import promfixture as pf
from support.browser import chromium, console_errors, wait_for
from support.clock import FakeClock
from support.scaler import Scaler, wait_for_fit

EVIL = '<img src=x onerror=window.__pwned=1>'  # in a query: the last error echoes it (names are DNS-1123)


def next_minute(clock, s, wl, md) -> None:
    """A minute later: the refresher observes the new minute, then KEDA polls (a decision is logged)."""
    clock.advance(60)
    deadline = time.monotonic() + 30
    while wl.observed_at != clock():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    s.value(md, name="llm")


def test_detail_view_chart_updates_in_place_and_escapes_names(prometheus_factory):
    end = float(int(time.time()) // 60 * 60)
    t = np.arange(end - 3 * 3600, end + 3600, 60.0)
    prom = prometheus_factory([pf.SeriesSpec("forescale_detail_qps", {"job": "t"}, "gauge", t,
                                             30.0 + 3.0 * np.sin(2 * np.pi * t / 3600.0))])
    clock = FakeClock(end)
    s = Scaler(clock)
    try:
        md = {"serverAddress": prom.url, "query": "max(forescale_detail_qps)", "qpsPerReplica": "5",
              "model": "naive", "history": "2h", "minHistory": "1h", "levelCorrection": "0", "hpaTolerance": "0",
              "coldStartSeconds": "120", "bufferSeconds": "0", "tuning": "off"}
        bad = {**md, "query": f'max(forescale_detail_qps{{job="{EVIL}"}})', "ignoreNullValues": "false"}
        with pytest.raises(grpc.RpcError):  # no series: FAILED_PRECONDITION, and the error is the last error
            s.value(bad, name="bad")
        s.value(md, name="llm")
        wl = wait_for_fit(s, "llm", timeout=120)  # the first fit, in a worker process
        for _ in range(3):  # three polls a minute apart: the decision log has points to draw
            next_minute(clock, s, wl, md)
        base = f"http://127.0.0.1:{s.server.http_port}"
        with chromium() as driver:
            driver.get(base + "/")
            rid = "so:serving/llm"
            wait_for(driver, f"document.getElementById({rid!r})", what="the row")
            # the bad one's last error, with HTML in it, is text, never markup: no <img> made, no handler ran
            driver.execute_script("document.getElementById('so:serving/bad').querySelector('td[data-col=name]').click()")
            wait_for(driver, "!document.getElementById('detail').hidden", what="the detail view")
            err = driver.find_element("id", "d_error").text
            assert EVIL in err and err.startswith("Prometheus: query returned no series")
            assert driver.execute_script("return document.querySelectorAll('img').length") == 0
            marker = driver.execute_script("window.__same_page = 1; return 1;")
            driver.execute_script(f"document.getElementById({rid!r}).querySelector('td[data-col=name]').click()")
            wait_for(driver, "!document.getElementById('detail').hidden", what="the detail view")
            wait_for(driver, "document.getElementById('d_title').textContent.startsWith('serving/llm')",
                     what="the llm detail")
            assert driver.find_element("id", "d_error").text == "none"
            # the chart has data: observed and planned lines, the forecast band, the lead marker
            pts = int(wait_for(driver, "Number(document.getElementById('chart').dataset.points || 0)",
                               what="chart points"))
            assert pts > 100  # 3 decisions x 2 + the band's 180 points x 3 curves
            for sel in ("polyline.obs", "polyline.plan", "polygon.band", "polyline.prov", "line.lead"):
                assert driver.execute_script(f"return document.querySelectorAll('#chart {sel}').length") == 1, sel
            before = driver.find_element("id", "d_observed").text
            # the view updates in place: a new observation shows up without a reload
            next_minute(clock, s, wl, md)
            wait_for(driver, f"document.getElementById('d_observed').textContent !== {before!r}", timeout=20,
                     what="the detail view refreshed")
            assert driver.execute_script("return window.__same_page;") == marker
            assert driver.execute_script("return window.__pwned === undefined") is True
            assert console_errors(driver) == []
    finally:
        s.close()

"""Shared fixtures: a real Prometheus with backfilled data (see support/promfixture.py).

* ``prometheus`` (session): one server holding
    - ``forescale_requests_total{job="llm",model="m1"}``: the last 14 days of the
      WorldCup98 trace (per minute), shifted to end at ``now - 10 s``, scraped
      every 15 s;
    - ``forescale_flat_requests_total{job="flat"}``: 5 req/s for 2 days;
    - ``forescale_multi_requests_total{job="multi",instance="a"|"b"|"c"}``:
      1, 2 and 3 req/s for 2 days;
    - gauge ``forescale_cold_start_seconds{phase="total",model="m1"}`` = 240
      for 1 day.
  Query it at ``time=prometheus.now`` (the data ends ``END_OFFSET_S`` before
  ``now``; at the wall-clock time it goes stale within minutes). The expected
  rate at t: ``prometheus.trace.expected_rate(t, 120)`` (exactly what
  ``rate(...[2m])`` gives), ``prometheus.trace.mean_qps(t0, t1)`` (the trace).
* ``prometheus_factory`` (function): ``make(series, **PrometheusServer kwargs)``
  starts a server with custom ``SeriesSpec``s; all are stopped at the end.
* ``free_port``: an unused TCP port on 127.0.0.1.

A missing ``prometheus``/``promtool`` FAILS these fixtures (run
``tests/system-deps.sh``): the real part is never skipped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support import promfixture as pf
from support.paths import TRACES

WORLDCUP98 = TRACES / "worldcup98" / "per_minute.csv"
_TRACE_CANDIDATES = [WORLDCUP98]

TRACE_DAYS = 14
SCRAPE_INTERVAL = 15.0
FLAT_QPS = 5.0
MULTI_QPS = {"a": 1.0, "b": 2.0, "c": 3.0}
COLD_START_SECONDS = 240.0


def _require_binaries() -> None:
    """Fail (never skip) when the real Prometheus is not installed."""
    try:
        pf.find_binaries()
        return
    except pf.PrometheusNotInstalled as e:
        msg = str(e)
    pytest.fail(msg, pytrace=False)


def _trace_csv() -> Path:
    for p in _TRACE_CANDIDATES:
        if p.is_file():
            return p
    pytest.fail(f"WorldCup98 trace not found (looked in {', '.join(map(str, _TRACE_CANDIDATES))})",
                pytrace=False)


@dataclass
class SeededPrometheus:
    """The session server plus what was put into it."""

    server: pf.PrometheusServer
    now: float  # reference time: query at time=now
    end_at: float  # every series' last sample (= now - END_OFFSET_S)
    trace: pf.TraceSamples  # worldcup98 as backfilled (timestamps, values, qps...)
    series: dict[str, pf.SeriesSpec] = field(default_factory=dict)  # by short key
    flat_qps: float = FLAT_QPS
    multi_qps: dict[str, float] = field(default_factory=lambda: dict(MULTI_QPS))
    cold_start_seconds: float = COLD_START_SECONDS

    @property
    def url(self) -> str:
        return self.server.url

    def query(self, promql: str, time: float | None = None) -> list[dict]:
        return self.server.query(promql, time)

    def query_value(self, promql: str, time: float | None = None) -> float | None:
        return self.server.query_value(promql, time)

    def query_range(self, promql: str, start: float, end: float, step: float | str = 60) -> list[dict]:
        return self.server.query_range(promql, start, end, step)

    def __getattr__(self, name: str):  # port, pid, timings, flags(), ...
        return getattr(self.server, name)


def standard_series(now: float) -> tuple[pf.TraceSamples, dict[str, pf.SeriesSpec]]:
    end_at = now - pf.END_OFFSET_S
    trace = pf.trace_to_samples(_trace_csv(), end_at=end_at, scrape_interval=SCRAPE_INTERVAL,
                                days=TRACE_DAYS)
    t2d = pf.sample_times(now - 2 * 86400, end_at, SCRAPE_INTERVAL)
    t1d = pf.sample_times(now - 86400, end_at, SCRAPE_INTERVAL)
    series = {
        "llm": trace.series("forescale_requests_total", {"job": "llm", "model": "m1"},
                            help="requests served (WorldCup98 replay)"),
        "flat": pf.SeriesSpec("forescale_flat_requests_total", {"job": "flat"}, "counter",
                              t2d, pf.counter_from_rate(t2d, FLAT_QPS), help="constant 5 req/s"),
        **{
            f"multi_{inst}": pf.SeriesSpec(
                "forescale_multi_requests_total", {"job": "multi", "instance": inst}, "counter",
                t2d, pf.counter_from_rate(t2d, qps, start=1000.0), help="three instances",
            )
            for inst, qps in MULTI_QPS.items()
        },
        "cold": pf.SeriesSpec("forescale_cold_start_seconds", {"phase": "total", "model": "m1"},
                              "gauge", t1d, [COLD_START_SECONDS] * len(t1d),
                              help="measured cold start (probe)"),
    }
    return trace, series


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory):
    _require_binaries()
    now = float(int(time.time()))
    trace, series = standard_series(now)
    # under pytest's basetemp: a killed run's leftovers are rotated away by pytest
    server = pf.PrometheusServer(series.values(), base_dir=tmp_path_factory.getbasetemp())
    server.start()
    try:
        yield SeededPrometheus(server=server, now=now, end_at=now - pf.END_OFFSET_S,
                               trace=trace, series=series)
    finally:
        server.stop()


@pytest.fixture
def prometheus_factory(tmp_path_factory):
    _require_binaries()
    servers: list[pf.PrometheusServer] = []

    def make(series, **kwargs) -> pf.PrometheusServer:
        kwargs.setdefault("base_dir", tmp_path_factory.getbasetemp())
        server = pf.PrometheusServer(series, **kwargs)
        servers.append(server)
        return server.start()

    yield make
    for s in servers:
        s.stop()


@pytest.fixture
def free_port() -> int:
    return pf.find_free_port("127.0.0.1")

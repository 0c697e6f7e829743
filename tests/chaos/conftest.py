"""The chaos suite's fixtures: a live-looking real Prometheus, real servers on the wall clock, misbehaving targets
(the parts are in ``support/live.py``)."""

from __future__ import annotations

import time

import pytest

from support import promfixture as pf
from support.live import FLAT_QPS, LiveScaler, Switchable


@pytest.fixture(scope="session")
def live_prom():
    """5 req/s from 2 h ago to 1 h ahead: a wall-clock query sees 5 req/s for the whole session."""
    now = time.time()
    t = pf.sample_times(now - 7200, now + 3600)
    series = [pf.SeriesSpec("chaos_requests", {"job": "flat"}, "counter", t, pf.counter_from_rate(t, FLAT_QPS))]
    server = pf.PrometheusServer(series).start()
    yield server
    server.stop()


@pytest.fixture
def live_scaler():
    made: list[LiveScaler] = []

    def make(**config) -> LiveScaler:
        s = LiveScaler(**config)
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


@pytest.fixture
def switchable():
    made: list[Switchable] = []

    def make(value: float = 7.0) -> Switchable:
        s = Switchable(value)
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()

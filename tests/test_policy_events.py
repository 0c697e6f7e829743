"""User events in the one decision function (scaler.policy.decide_array): a floor from start - L, a multiplier
in the window only, the reason ``event`` and the event's name on the decision."""

from __future__ import annotations

import numpy as np

from forecaster.base import Forecast
from forecaster.eventsfile import parse_events
from scaler.policy import REASONS, Curves, PolicyParams, Reason, decide, decide_array

HEADER = "name,start,end,multiplier,floor_qps\n"
T0 = 1_789_999_980.0  # 2026-09-21, an epoch second on a minute boundary (T0 % 60 == 0)


def flat_curve(rate: float, n: int = 400) -> Forecast:
    t = T0 + 60.0 * np.arange(n)
    return Forecast(t=t, mean=np.full(n, rate), quantiles={0.8: np.full(n, rate)})


def iso(t: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def params(events, mode="forecastAndScale") -> PolicyParams:
    # L = 300 s; qps 10 per replica; tolerance 0 so the planned value is the base itself (no dead-band push)
    return PolicyParams(mode=mode, lead_seconds=300.0, quantile=0.8, qps_per_replica=10.0, hpa_tolerance=0.0,
                        events=tuple(events))


def test_floor_in_force_from_start_minus_lead():
    assert T0 % 60 == 0
    start, end = T0 + 3600.0, T0 + 5400.0  # the event: 1 h to 1.5 h after T0
    ev = parse_events(HEADER + f"launch,{iso(start)},{iso(end)},,400\n")
    fc = flat_curve(100.0)
    now = T0 + 30.0 * np.arange(240)  # polls every 30 s over 2 h
    obs = np.full(240, 90.0)
    d = decide_array(obs, now, params(ev), Curves.of(fc), np.zeros(240, dtype=np.int64))
    # in force at polls in [start - 300 s, end] = [3300 s, 5400 s] after T0 = poll indices 110 .. 180
    on = (now >= start - 300.0) & (now <= end)
    assert np.flatnonzero(on)[[0, -1]].tolist() == [110, 180]
    assert np.all(d.planned[on] == 400.0)  # the floor; 400 req/s = 40 replicas of 10
    assert np.all(d.planned[~on] == 100.0)  # the forecast (100 > observed 90) elsewhere
    assert {REASONS[c] for c in d.reason[on]} == {Reason.EVENT}
    assert d.at(110).event == "launch" and d.at(109).event is None
    # the floor holds in reactive mode too (a scheduled override), observed 90 -> 400
    r = decide_array(obs, now, params(ev, "reactive"), None)
    assert np.all(r.planned[on] == 400.0) and np.all(r.planned[~on] == 90.0)


def test_multiplier_scales_the_forecast_in_the_window_only():
    start, end = T0 + 1800.0, T0 + 2400.0
    ev = parse_events(HEADER + f"push,{iso(start)},{iso(end)},1.5,\n")
    now = T0 + 60.0 * np.arange(60)
    obs = np.full(60, 90.0)
    d = decide_array(obs, now, params(ev), Curves.of(flat_curve(100.0)), np.zeros(60, dtype=np.int64))
    on = (now >= start - 300.0) & (now <= end)  # minutes 25 .. 40
    assert np.flatnonzero(on)[[0, -1]].tolist() == [25, 40]
    assert np.allclose(d.planned[on], 150.0)  # forecast peak 100 x 1.5
    assert np.allclose(d.planned[~on], 100.0)
    # a multiplier below 1 never goes under the observed rate: 100 x 0.5 = 50 < 90 -> observed 90
    low = parse_events(HEADER + f"quiet,{iso(start)},{iso(end)},0.5,\n")
    d2 = decide_array(obs, now, params(low), Curves.of(flat_curve(100.0)), np.zeros(60, dtype=np.int64))
    assert np.allclose(d2.planned[on], 90.0) and REASONS[d2.reason[30]] == Reason.OBSERVED_FLOOR


def test_decide_is_decide_array_with_events():
    ev = parse_events(HEADER + f"launch,{iso(T0 + 600)},{iso(T0 + 1200)},2,300\n")
    one = decide(90.0, flat_curve(100.0), params(ev), T0 + 400.0)
    # 400 s >= 600 - 300: in force; 100 x 2 = 200, then the floor 300 above it
    assert one.planned == 300.0 and one.reason == Reason.EVENT and one.event == "launch"
    before = decide(90.0, flat_curve(100.0), params(ev), T0 + 200.0)
    assert before.planned == 100.0 and before.event is None

"""The replay's decisions: ``planned_values`` on packed curves equals ``decide`` poll by poll."""

from __future__ import annotations

import numpy as np

from forecaster.base import Forecast
from scaler.policy import PolicyParams, Reason, decide
from scaler.replay.forecasts import Curve, Packed
from scaler.replay.hpa import Hpa, value_ticks
from scaler.replay.policies import finish, planned_values
from scaler.replay.scenario import EPS, Scenario

T0 = 1_700_000_000.0
TICK = 15.0


def scenario(n: int = 400) -> Scenario:
    rng = np.random.default_rng(7)
    t = np.arange(n)
    demand = 40 + 30 * np.sin(t / 40.0) + rng.normal(0, 3, n)
    observed = np.maximum(demand + rng.normal(0, 2, n), 0.0)
    return Scenario(T0, demand, observed, 180.0, 10.0, TICK)


def curves(sc: Scenario) -> list[Curve]:
    """A curve each minute: one with too little history first, one absurd, the rest a shifted sine."""
    out = [Curve(T0 - 60.0, None, None, Reason.INSUFFICIENT_HISTORY)]
    for k, c in enumerate(T0 + 60.0 * np.arange(sc.n * TICK / 60.0)):
        t = c + 60.0 * np.arange(0, 12)
        mean = 45 + 30 * np.sin((t - T0) / TICK / 40.0 + 0.3)
        scale = 1e4 if k == 5 else 1.0  # an absurd curve
        out.append(Curve(float(c), Forecast(t, mean * scale, {0.9: (mean + 8) * scale, 0.5: mean * scale}),
                         80.0 if k % 7 else None))
    return out


def test_planned_values_equal_decide_at_each_poll():
    sc, hpa = scenario(), Hpa(target=10.0)
    cv = curves(sc)
    packed = Packed.from_curves("test", cv)
    for params in (PolicyParams(mode="forecastAndScale", lead_seconds=285.0, quantile=0.9, qps_per_replica=10.0,
                                hpa_tolerance=0.0, level_correction_seconds=3600.0),
                   PolicyParams(mode="forecastAndScale", lead_seconds=285.0, quantile=0.7, qps_per_replica=10.0,
                                hpa_tolerance=0.0, floor_qps=20.0)):
        got = planned_values(sc, hpa, params, packed)
        as_list = planned_values(sc, hpa, params, cv)
        idx = value_ticks(sc.n, hpa, sc.tick)
        want, reasons = [], {}
        for i in idx:
            now = sc.t0 + sc.tick * i
            live = [c for c in cv if c.since <= now + EPS]
            c = live[-1] if live else None
            d = decide(float(sc.observed[i]), c.forecast if c else None, params, now,
                       unusable=c.unusable if c else None, history_max=c.history_max if c else None)
            want.append(d.planned)
            reasons[d.reason.value] = reasons.get(d.reason.value, 0) + 1
        assert got.values.tolist() == want == as_list.values.tolist()
        assert got.reasons == reasons == as_list.reasons
        assert reasons.get("fallback_forecast_absurd", 0) > 0 and reasons.get("forecast", 0) > 0


def test_finish_is_decide_in_reactive_mode_on_each_value():
    base = np.array([0.0, 9.99, 10.0, 10.5, 44.0, 44.001, np.nan, -3.0, 123.4567])
    got = finish(base, 10.0, 1.1, 0.1)
    p = PolicyParams(mode="reactive", lead_seconds=0.0, quantile=0.5, qps_per_replica=10.0, headroom=1.1,
                     hpa_tolerance=0.1)
    assert got.tolist() == [decide(float(b), None, p, 0.0).planned for b in base]
    # 10.5 x 1.1 = 11.55: needs 2 replicas, 11.55 / 10 = 1.155 is outside the band (> 1.1): unchanged;
    # 10.0 x 1.1 = 11.0 -> 1.1 exactly, inside: pushed to floor(1.1 x 10000 + 1e-6) + 1 = 11001 milli
    assert got[3] == 10.5 * 1.1 and got[2] == 11.001

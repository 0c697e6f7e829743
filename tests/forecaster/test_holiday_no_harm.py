"""Holidays may not make forecasts worse at the lead (issue 36 item 9).

The rule (``forecaster.models.holiday``): the holiday in progress stays as observed in the history (the level
correction carries today's level); an effect is learned only from an earlier holiday in the history (the similar
day). So a holiday with nothing to learn from is forecast exactly as without ``holidays``: the same forecast, bit for
bit, whatever the model, the history or the hour (a Hypothesis rule below); and on nab_nyc_taxi, cut at the end of
Thanksgiving and of Christmas, ``--span 1d``, Prophet, the MASE at L with ``--holidays US`` is at most the one without
at 14 and 60 days of history (tolerance: none; before: 0.214 -> 0.225 and 0.238 -> 0.255 at 14 d, 0.246 -> 0.258 for
Thanksgiving at 60 d). The backtest says when a holiday had nothing to learn from.
"""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st

from forecaster.base import Series
from forecaster.calendar import LEARNED
from forecaster.models import make_for_policy
from scaler.cli import main
from support.paths import TRACES

STEP = 1800.0
T0 = dt.datetime(2026, 10, 1, tzinfo=dt.timezone.utc).timestamp()  # a Thursday
THANKSGIVING = int((dt.datetime(2026, 11, 26, tzinfo=dt.timezone.utc).timestamp()) // 86400)


def traffic(days: int, hours_into_holiday: int) -> Series:
    """Half-hourly from ``days`` days before Thanksgiving 2026 to ``hours_into_holiday`` hours into it: a daily
    curve, a weekly level and seeded noise; the holiday's hours at a third of an ordinary Thursday's."""
    start = THANKSGIVING * 86400.0 - days * 86400.0
    t = start + STEP * np.arange(int((days * 24 + hours_into_holiday) * 3600 / STEP))
    hour = (t % 86400) / 3600
    y = (100 + 80 * np.sin((hour - 6) / 24 * 2 * np.pi)) * (1 + 0.1 * ((t // 86400 + 3) % 7 < 5))
    y = y * np.exp(np.random.default_rng(days + hours_into_holiday).normal(0, 0.05, len(t)))
    y[t >= THANKSGIVING * 86400.0] /= 3.0
    return Series(t, y, STEP)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(model=st.sampled_from(["naive", "seasonal_naive", "linear_trend", "envelope"]),
       days=st.integers(3, 14), hours=st.integers(0, 23), horizon=st.sampled_from([1, 12, 48]))
def test_a_holiday_with_nothing_to_learn_from_is_forecast_as_without_holidays(model, days, hours, horizon):
    """No earlier holiday in the history: the one before (15 days before, as Veterans Day is 16 before
    Thanksgiving) is outside every history drawn; the forecast from any hour of the holiday is the same."""
    s = traffic(days, hours)
    kw = dict(seed=0, level_half_life=4 * 3600.0, quantile=0.8)
    off = make_for_policy(model, **kw).fit(s).predict(horizon, (0.2, 0.8))
    us = make_for_policy(model, **kw, holiday_days=(THANKSGIVING - 15, THANKSGIVING), holiday_as=LEARNED)
    on = us.fit(s).predict(horizon, (0.2, 0.8))
    np.testing.assert_array_equal(on.mean, off.mean)
    for q in (0.2, 0.8):
        np.testing.assert_array_equal(on.quantiles[q], off.quantiles[q])


def test_prophet_too_forecasts_a_holiday_with_nothing_to_learn_from_as_without():
    s = traffic(14, 10)
    kw = dict(seed=0, level_half_life=4 * 3600.0, quantile=0.8)
    off = make_for_policy("prophet", **kw).fit(s).predict(12, (0.8,))
    on = make_for_policy("prophet", **kw, holiday_days=(THANKSGIVING,), holiday_as=LEARNED).fit(s).predict(12, (0.8,))
    np.testing.assert_allclose(on.mean, off.mean, rtol=1e-12)


def _cut(tmp_path, end: str):
    src = (TRACES / "nab_nyc_taxi" / "per_30min.csv").read_text().splitlines()
    out = tmp_path / f"taxi-{end}.csv"
    out.write_text("\n".join([src[0]] + [r for r in src[1:] if r < end]) + "\n")
    return out


def _mase(csv, history: str, holidays: bool, tmp_path) -> tuple[float, str]:
    out = tmp_path / "b.json"
    args = ["backtest", str(csv), "--span", "1d", "--model", "prophet", "--policies", "predictive", "--history",
            history, "--no-progress", "--json", str(out)] + (["--holidays", "US"] if holidays else [])
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())["forecast"]["prophet"]["mase"], r.output


@pytest.mark.slow
@pytest.mark.parametrize("end, history, name, said", [
    ("2014-11-28", "14d", "Thanksgiving", "2014-11-27 Thanksgiving Day: nothing to learn from (no earlier holiday "
                                          "in the 14 d history)"),
    ("2014-12-26", "14d", "Christmas", "2014-12-25 Christmas Day: nothing to learn from"),
    ("2014-11-28", "60d", "Thanksgiving", "2014-11-27 Thanksgiving Day: learned from 2014-11-11 Veterans Day"),
    ("2014-12-26", "60d", "Christmas", "2014-12-25 Christmas Day: learned from 2014-11-27 Thanksgiving Day"),
])
def test_nab_nyc_taxi_holidays_do_no_harm_at_the_lead(tmp_path, end, history, name, said):
    csv = _cut(tmp_path, end)
    off, _ = _mase(csv, history, False, tmp_path)
    on, text = _mase(csv, history, True, tmp_path)
    assert f"holidays  {said}" in text
    if "nothing to learn from" in said:
        assert on == pytest.approx(off, rel=1e-9)  # the same forecasts
    else:
        assert on <= off, (name, history, on, off)

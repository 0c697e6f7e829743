"""Prophet specifics: our numpy curve equals Prophet's, seasonality switches, warm starts, quiet fits."""

from __future__ import annotations

import glob
import os
import tempfile

import numpy as np
import pandas as pd
import pytest

from forecaster.base import Series
from forecaster.models import make
from forecaster.models import prophet_fit as PF

T0 = 1_700_000_000.0 - (1_700_000_000.0 % 86400)


def traffic(days: float, step: float = 60.0, seed: int = 1) -> Series:
    n = int(round(days * 86400 / step))
    t = T0 + step * np.arange(n)
    rng = np.random.default_rng(seed)
    day = 2 * np.pi * (t - T0) / 86400
    week = 2 * np.pi * (t - T0) / (7 * 86400)
    y = (40 + 25 * np.sin(day) + 10 * np.cos(week) + 0.001 * (t - T0) / 60) * rng.lognormal(0, 0.05, n)
    return Series(t, y, step)


def test_curve_equals_prophet_predict(monkeypatch):
    """The fitted curve evaluated with numpy is Prophet's own ``predict`` (additive, no transform)."""
    from prophet import Prophet

    seen = {}
    real = PF.stan_inputs

    def spy(t, z, seas, opts):
        seen.update(t=t, z=z, seas=seas)
        return real(t, z, seas, opts)

    monkeypatch.setattr(PF, "stan_inputs", spy)
    s = traffic(15)
    f = make("prophet", transform="none").fit(s)
    assert [x[0] for x in seen["seas"]] == ["daily", "weekly"]
    m = Prophet(yearly_seasonality=False, weekly_seasonality=False, daily_seasonality=False, uncertainty_samples=0)
    for name, period, order in seen["seas"]:
        m.add_seasonality(name=name, period=period, fourier_order=order, prior_scale=10.0)
    ds = pd.to_datetime(np.rint(seen["t"] * 1e3).astype("int64"), unit="ms")
    m.fit(pd.DataFrame({"ds": ds, "y": seen["z"]}), seed=0, **PF.STAN_STOP)  # the same L-BFGS stop as ours
    future = s.t[-1] + 60.0 * np.arange(1, 600)
    theirs = m.predict(pd.DataFrame({"ds": pd.to_datetime((future * 1e3).astype("int64"), unit="ms")}))["yhat"]
    np.testing.assert_allclose(f.curve(future), theirs.to_numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("days, expected", [(1.5, []), (2.0, ["daily"]), (12.9, ["daily"]),
                                            (13.0, ["daily", "weekly"]), (14.0, ["daily", "weekly"])])
def test_seasonalities_by_history_length(days, expected):
    """Daily from 2 days of history, weekly from 13 (history = points x step)."""
    f = make("prophet").fit(traffic(days, step=300.0))
    assert [x[0] for x in f.curve.seasonalities] == expected


def test_fourteen_days_of_one_minute_data_gets_weekly():
    s = traffic(14)
    assert s.t[-1] - s.t[0] < 14 * 86400  # Prophet's own rule would switch weekly off here
    f = make("prophet").fit(s)
    assert [x[0] for x in f.curve.seasonalities] == ["daily", "weekly"]
    assert f.fit_step == 900.0  # fitted on 15-min means, predicted at 1 min
    assert f.predict(3).t[0] == s.t[-1] + 60.0


def test_fit_step_falls_back_on_short_history():
    f = make("prophet").fit(traffic(0.5))  # 720 points: 15-min buckets would leave 48
    assert f.fit_step < 900.0


def test_warm_start_reaches_the_same_fit():
    s = traffic(14, step=300.0)
    cold = make("prophet").fit(s)
    later = Series(s.t[12:], s.y[12:], s.step)  # an hour later
    a = make("prophet").fit(later)
    b = make("prophet").fit(later, warm_start=cold)
    c = make("prophet", init=cold.stan_params()).fit(later)
    future = later.t[-1] + 300.0 * np.arange(1, 100)
    np.testing.assert_allclose(b.curve(future), a.curve(future), rtol=0.02)
    np.testing.assert_allclose(c.curve(future), b.curve(future), rtol=1e-9)


def test_quiet_and_no_stan_files_left(capfd, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # Stan's files go under a private temp dir
    make("prophet").fit(traffic(3))
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert glob.glob(os.path.join(str(tmp_path), "forescale-stan-*")) == []


def test_bands_follow_the_half_life():
    s = traffic(14, step=300.0)
    plain = make("prophet", level_half_life=0).fit(s).predict(24, (0.9,))
    corrected = make("prophet", level_half_life=3600).fit(s).predict(24, (0.9,))
    # level-corrected errors are small near the origin and grow with the horizon
    w_c = corrected.quantiles[0.9] - corrected.mean
    w_p = plain.quantiles[0.9] - plain.mean
    assert w_c[0] < w_p[0]
    assert w_c[0] < w_c[-1]


def test_transform_none_and_bad_transform():
    f = make("prophet", transform="none").fit(traffic(3))
    assert np.all(f.predict(10, (0.1, 0.9)).quantiles[0.1] >= 0)
    with pytest.raises(ValueError, match="transform"):
        make("prophet", transform="boxcox")

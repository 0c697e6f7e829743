"""Prophet's Stan inputs built with numpy (``forecaster.models.prophet_stan``) are Prophet's own, to the byte.

Stan reads a data file; if the file is the same bytes, the fit is the same fit. So the check is exact
(no tolerance): these are deterministic arithmetic, not optimiser output. Real Prophet on both sides.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forecaster.base import Series
from forecaster.models import prophet as P, prophet_fit as PF
from forecaster.models.prophet_curve import features
from forecaster.models.prophet_stan import Scales, inputs_of, rows_json, stan_json, supported
from forecaster.series import resample
from forecaster.tracecsv import from_csv
from support.paths import REPO, TRACES

AMZN = TRACES / "nab_tweets" / "AMZN_per_5min.csv"


def prophet(seasonalities, n_changepoints: int = 25):
    """A Prophet as ``prophet_fit.stan_inputs`` constructs it (the forescale defaults)."""
    m = PF.prophet_class()(growth="linear", n_changepoints=n_changepoints, changepoint_range=0.8,
                          changepoint_prior_scale=0.05, yearly_seasonality=False, weekly_seasonality=False,
                          daily_seasonality=False, uncertainty_samples=0, seasonality_mode="additive")
    for name, period, order in seasonalities:
        m.add_seasonality(name=name, period=period, fourier_order=order, prior_scale=10.0)
    return m


def frame(t: np.ndarray, z: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"ds": pd.to_datetime(np.rint(t * 1e3).astype("int64"), unit="ms"), "y": z})


def theirs(seasonalities, df, n_changepoints=25):
    """Prophet's own preprocessing: (the data file's bytes, the default init, the scales)."""
    m = prophet(seasonalities, n_changepoints)
    inputs = m.preprocess(df.copy())
    init = dataclasses.asdict(m.calculate_initial_params(inputs.K))
    _, data = m.stan_backend.prepare_data(init, {f.name: getattr(inputs, f.name) for f in dataclasses.fields(inputs)})
    return stan_json(data), init, Scales.of(m)


def assert_same(seasonalities, df, n_changepoints=25):
    ours = inputs_of(prophet(seasonalities, n_changepoints), df.copy())
    assert ours is not None
    data, init, scales = ours
    their_bytes, their_init, their_scales = theirs(seasonalities, df, n_changepoints)
    assert stan_json(data) == their_bytes
    for key in ("k", "m", "sigma_obs", "delta", "beta"):
        assert np.array_equal(np.asarray(init[key], dtype=float), np.asarray(their_init[key], dtype=float)), key
    assert (scales.start, scales.t_scale, scales.y_scale, scales.n_changepoints) == (
        their_scales.start, their_scales.t_scale, their_scales.y_scale, their_scales.n_changepoints)
    assert np.array_equal(scales.changepoints_t, their_scales.changepoints_t)


def test_inputs_equal_prophets_on_a_real_trace():
    """14 days of nab_tweets AMZN, bucketed and log-transformed as ``ProphetForecaster.fit`` does: 1,344 rows,
    daily order 10 + weekly order 25 = 70 features, 25 changepoints."""
    s, _ = from_csv(AMZN)
    n = int(14 * 86400 / s.step)
    hist = resample(type(s)(s.t[-n:], s.y[-n:], s.step), 900.0)
    keep = np.isfinite(hist.y)
    t, y = hist.t[keep] + 0.5 * (900.0 - s.step), hist.y[keep]
    z = np.log(y + 0.05 * y.mean())
    assert t.size > 1300
    assert_same([("daily", 1.0, 10), ("weekly", 7.0, 25)], frame(t, z))


@pytest.mark.parametrize("n, seasonalities, n_changepoints", [
    (200, [("daily", 1.0, 10)], 25),  # daily only
    (20, [], 25),  # no seasonality: Prophet's column of zeros; 15 changepoints (floor(0.8 * 20) - 1)
    (3, [], 25),  # one changepoint left
    (2, [], 25),  # none left: Prophet's dummy changepoint at 0
    (300, [("weekly", 7.0, 3)], 0),  # no changepoints asked for
])
def test_inputs_equal_prophets_on_edge_shapes(n, seasonalities, n_changepoints):
    rng = np.random.default_rng(n)
    t = 1.6e9 + 900.0 * np.arange(n) + 450.0
    assert_same(seasonalities, frame(t, rng.normal(3.0, 2.0, n)), n_changepoints)


def test_models_it_does_not_build_go_to_prophet():
    """Holidays, an extra regressor, a conditional seasonality or a frame with more columns: None (Prophet's own
    preprocess runs instead); so does a model with another growth."""
    t = 1.6e9 + 900.0 * np.arange(100)
    df = frame(t, np.linspace(1.0, 2.0, 100))
    assert supported(prophet([("daily", 1.0, 3)]), df)
    m = prophet([])
    m.add_regressor("load")
    assert inputs_of(m, df.assign(load=1.0)) is None
    m = PF.prophet_class()(holidays=pd.DataFrame({"holiday": ["x"], "ds": pd.to_datetime(["2020-09-14"])}))
    assert not supported(m, df)
    m = prophet([])
    m.add_seasonality(name="on", period=1.0, fourier_order=2, condition_name="busy")
    assert not supported(m, df.assign(busy=True))
    assert not supported(PF.prophet_class()(growth="flat"), df)


def test_features_are_the_per_harmonic_formula():
    """``features`` computes every harmonic at once; each column is still sin / cos of i * (2 pi days / period)."""
    t = 1.4e9 + np.random.default_rng(0).uniform(0, 3e8, 997)
    seas = [("daily", 1.0, 10), ("weekly", 7.0, 25)]
    cols = []
    for _, period, order in seas:
        x = 2.0 * np.pi * (t / 86400.0) / period
        for i in range(1, order + 1):
            cols += [np.sin(i * x), np.cos(i * x)]
    assert np.array_equal(features(t, seas), np.column_stack(cols))
    assert features(t[:4], []).shape == (4, 0)


def test_prophet_imported_without_matplotlib_leaves_it_importable():
    """A fresh process: Prophet imported through ``prophet_class`` did not load matplotlib, and a later
    ``import matplotlib`` (the CLI's report) still works."""
    code = ("import sys\nfrom forecaster.models.prophet_fit import prophet_class\nprophet_class()\n"
            "print('matplotlib' in sys.modules)\nimport matplotlib\nprint(matplotlib.__name__)\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-400:]
    assert out.stdout.split() == ["False", "matplotlib"]
    assert "Traceback" not in out.stderr


def test_a_fit_through_prophets_preprocess_is_the_same_fit(monkeypatch):
    """The same history fitted through the numpy inputs and through Prophet's ``preprocess`` (``inputs_of`` made to
    decline, as it does for a model with holidays): the same data file, so the same optimum. Tolerance 1e-12
    relative: the one process and binary read the same bytes, so only a nondeterministic Stan could differ."""
    t = 1.6e9 + 900.0 * np.arange(4 * 96)
    y = 50 + 20 * np.sin(2 * np.pi * t / 86400.0) + np.random.default_rng(3).normal(0, 2, t.size)
    s = Series(t, y, 900.0)
    fast = P.ProphetForecaster().fit(s).curve
    monkeypatch.setattr(PF, "inputs_of", lambda m, df: None)
    slow = P.ProphetForecaster().fit(s).curve
    for name in ("k", "m", "sigma_obs", "start", "t_scale", "y_scale"):
        assert getattr(fast, name) == pytest.approx(getattr(slow, name), rel=1e-12, abs=1e-12), name
    for name in ("delta", "beta", "changepoints_t"):
        np.testing.assert_allclose(getattr(fast, name), getattr(slow, name), rtol=1e-12, atol=1e-12)
    assert fast.beta.size == 20 and fast.delta.size == 25  # daily order 10; 25 changepoints


def test_the_data_file_with_reused_rows_is_the_same_bytes():
    """A chain of refits 2 h apart on 14 days of AMZN (and one step back, and another seasonality set): each
    data file written with ``rows_json`` (rows reused from the previous fit) is the plain file, byte for byte."""
    s, _ = from_csv(AMZN)
    seas = [("daily", 1.0, 10), ("weekly", 7.0, 25)]
    ends = [4032 + 24 * i for i in range(4)] + [4032 + 12, 4032 + 100]
    for j, end in enumerate(ends):
        part = s.y[end - 4032:end]
        ok = np.isfinite(part)
        df = frame(s.t[end - 4032:end][ok], part[ok])
        data, _, _ = inputs_of(prophet(seas if j < 5 else seas[:1]), df)
        assert stan_json(dict(data, X=rows_json(data["X"]))) == stan_json(data), end


POOL = np.array([[0.0, 1.5, -2.25], [-0.0, 1.5, -2.25], [0.1, 0.2, 0.3], [1e-300, -1e300, 5e-324],
                 [0.1, 0.2, 0.30000000000000004], [3.0, 3.0, 3.0]])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, len(POOL) - 1), max_size=12), st.integers(2, 3)),
                min_size=1, max_size=6))
def test_rows_json_is_the_plain_text_after_any_matrices(calls):
    """Any sequence of matrices in one thread (rows shared with the last one as a block, shifted, repeated, a
    row differing by one bit, -0.0 against 0.0, another width, empty): each text is ``stan_json``'s, byte for
    byte."""
    for rows, width in calls:
        x = np.ascontiguousarray(POOL[rows][:, :width]) if rows else np.zeros((0, width))
        assert stan_json({"X": rows_json(x)}) == stan_json({"X": x}), (rows, width)

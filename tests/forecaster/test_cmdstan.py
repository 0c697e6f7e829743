"""CmdStan called directly (``forecaster.models.cmdstan``) gives the optimum cmdstanpy gives, bit for bit.

The same binary, the same data file and the same arguments; the parameters read from the CSV's last line must be
the doubles cmdstanpy reads, for L-BFGS with forescale's stop, for Newton (Prophet's method under 100 points and
its fallback) and from a warm init. A run that fails raises RuntimeError with a bounded message, as cmdstanpy's
``optimize`` does (Prophet's fallback and ``FitFailed`` rest on it).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from forecaster.models import cmdstan
from forecaster.models import prophet_fit as PF
from forecaster.models.prophet_stan import inputs_of, stan_json

T0 = 1_700_006_400.0


def stan_inputs(n: int, seed: int):
    import pandas as pd

    rng = np.random.default_rng(seed)
    t = T0 + 900.0 * np.arange(n)
    y = 50 + 20 * np.sin(2 * np.pi * (t - T0) / 86400) + 0.01 * np.arange(n) + rng.normal(0, 2, n)
    m = PF.prophet_class()(growth="linear", n_changepoints=25, yearly_seasonality=False, weekly_seasonality=False,
                          daily_seasonality=False, uncertainty_samples=0)
    m.add_seasonality(name="daily", period=1.0, fourier_order=10)
    df = pd.DataFrame({"ds": pd.to_datetime(np.rint(t * 1e3).astype("int64"), unit="ms"), "y": y})
    data, default, _ = inputs_of(m, df)
    return m, data, default


@pytest.mark.parametrize("n,seed,warm", [(1344, 0, False), (1344, 1, True), (80, 2, False)])
def test_the_direct_run_reads_the_optimum_cmdstanpy_reads(tmp_path, n, seed, warm):
    m, data, init = stan_inputs(n, seed)
    if warm:  # a previous optimum as the init, as a warm refit starts
        d = tmp_path / "warm"
        d.mkdir()
        path = d / "data.json"
        path.write_bytes(stan_json(data))
        init = {k: (v[0] if v.size == 1 and k in ("k", "m", "sigma_obs") else v) for k, v in cmdstan.optimize(
            str(m.stan_backend.model.exe_file), data=str(path), init=init, seed=0, algorithm="LBFGS",
            iterations=PF.STAN_ITER, refresh=PF.STAN_ITER, stop=PF.STAN_STOP, workdir=str(d), params=PF.STAN_PARAMS,
            write_json=stan_json).items()}
        init = {k: (v * 1.01 if isinstance(v, np.ndarray) else v * 1.01) for k, v in init.items()}
    path = tmp_path / "data.json"
    path.write_bytes(stan_json(data))
    newton = n < 100
    algorithm, stop = ("Newton", {}) if newton else ("LBFGS", PF.STAN_STOP)
    mine = cmdstan.optimize(str(m.stan_backend.model.exe_file), data=str(path), init=init, seed=0,
                            algorithm=algorithm, iterations=PF.STAN_ITER, refresh=PF.STAN_ITER, stop=stop,
                            workdir=str(tmp_path), params=PF.STAN_PARAMS, write_json=stan_json)
    out = tmp_path / "cmdstanpy"
    out.mkdir()
    inits = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in init.items()}
    fit = m.stan_backend.model.optimize(data=str(path), inits=inits, iter=PF.STAN_ITER, refresh=PF.STAN_ITER, seed=0,
                                        output_dir=str(out), algorithm=algorithm, **stop)
    theirs = m.stan_backend.stan_to_dict_numpy(fit.column_names, fit.optimized_params_np)
    assert set(mine) == set(PF.STAN_PARAMS)
    for name in PF.STAN_PARAMS:
        a, b = mine[name], np.asarray(theirs[name], dtype=float).reshape(-1)
        assert a.shape == b.shape and a.tobytes() == b.tobytes(), name
    assert mine["delta"].size == 25 and mine["beta"].size == 20


def test_a_failed_run_raises_with_a_bounded_message(tmp_path):
    m, data, init = stan_inputs(200, 0)
    data = dict(data, K=data["K"] + 1)  # the feature matrix no longer matches K: CmdStan refuses the data
    path = tmp_path / "data.json"
    path.write_bytes(stan_json(data))
    with pytest.raises(RuntimeError) as e:
        cmdstan.optimize(str(m.stan_backend.model.exe_file), data=str(path), init=init, seed=0, algorithm="LBFGS",
                         iterations=100, refresh=100, stop={}, workdir=str(tmp_path), params=PF.STAN_PARAMS,
                         write_json=stan_json)
    msg = str(e.value)
    assert "exited with" in msg and len(msg) < cmdstan.MAX_MESSAGE + 100


def test_output_without_an_optimum_or_a_parameter_is_an_error(tmp_path):
    path = tmp_path / "out.csv"
    path.write_text("# comment\nlp__,k,m\n")
    with pytest.raises(RuntimeError, match="no optimum"):
        cmdstan.read_optimum(str(path), ("k",))
    path.write_text("# comment\nlp__,k,delta.1,delta.2\n1,2,3,4\n# Elapsed\n")
    assert {k: v.tolist() for k, v in cmdstan.read_optimum(str(path), ("k", "delta")).items()} == {
        "k": [2.0], "delta": [3.0, 4.0]}
    with pytest.raises(RuntimeError, match="lacks beta"):
        cmdstan.read_optimum(str(path), ("k", "beta"))
    assert not os.path.exists(tmp_path / "init.json")

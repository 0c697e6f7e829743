"""One Prophet MAP fit as forescale runs it: Prophet's model of ``(t, z)`` and Stan's data file
(``stan_inputs``), CmdStan's L-BFGS called directly (``cmdstan.optimize``, ``STAN_STOP``), warm-started from a
previous fit's parameters rescaled to the new data, and the parameters of a ``ProphetCurve`` out (``fit_stan``).
Prophet is imported quietly (``prophet_class``: without matplotlib, its loggers silenced). The decisions and their
measurements: ``forecaster.models.prophet``'s docstring.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..base import FitFailed
from . import cmdstan
from .prophet_curve import NAME
from .prophet_stan import Scales, inputs_of, rows_json, stan_json

STAN_ITER = 10000  # Prophet's own cap on L-BFGS iterations
# CmdStan's L-BFGS stop beyond its defaults: an iteration that gains less than 1e8 * machine epsilon (2.2e-8) of
# the log posterior, relatively, ends the fit (the default ends it at 1e4 * epsilon). See forecaster.models.prophet's
# docstring.
STAN_STOP: dict = {"tol_rel_obj": 1e8}
STAN_PARAMS = ("k", "m", "delta", "sigma_obs", "beta")  # Prophet's parameters (its model's other outputs: trend)
_quiet = False


def silence() -> None:
    """cmdstanpy's and Prophet's loggers off (once a process)."""
    global _quiet
    if _quiet:
        return
    import cmdstanpy

    cmdstanpy.disable_logging()
    for name, level in (("prophet", logging.ERROR), ("cmdstanpy", logging.ERROR),
                        ("prophet.plot", logging.CRITICAL)):  # "Importing plotly failed" is an ERROR at import
        lg = logging.getLogger(name)
        lg.setLevel(level)
        lg.propagate = False
        if not any(isinstance(h, logging.NullHandler) for h in lg.handlers):
            lg.addHandler(logging.NullHandler())  # else logging's last-resort handler prints to stderr
    _quiet = True


def prophet_class():
    """Prophet's class. Imported first (by nothing else in the process), its plotting module is kept from importing
    matplotlib: prophet.plot catches the ImportError and leaves its plots off (forescale never plots through
    Prophet), which saves 0.6-1.5 s of every process that fits. matplotlib itself stays importable afterwards."""
    import sys

    silence()  # prophet.plot logs the failed plotting imports as errors
    if "prophet" not in sys.modules and "matplotlib" not in sys.modules:
        sys.modules["matplotlib"] = None  # type: ignore[assignment]  # "import matplotlib" raises ImportError
        try:
            import prophet  # noqa: F401
        finally:
            if sys.modules.get("matplotlib", 0) is None:
                del sys.modules["matplotlib"]
    from prophet import Prophet

    return Prophet


class StanOptions(Protocol):
    """What a fit reads of its ``ProphetForecaster`` (a frozen dataclass: read-only)."""

    @property
    def seed(self) -> int: ...
    @property
    def n_changepoints(self) -> int: ...
    @property
    def changepoint_range(self) -> float: ...
    @property
    def changepoint_prior_scale(self) -> float: ...
    @property
    def seasonality_prior_scale(self) -> float: ...


@dataclass(frozen=True, eq=False)
class StanInputs:
    """One fit's inputs to Stan, made before its init is known (``stan_inputs``)."""

    m: Any  # the Prophet object (it names the seasonalities' order)
    df: Any  # its history frame (ds, y)
    z_scale: float  # max |z|: the warm start's parameters are rescaled to it
    data: dict | None  # Stan's data; None: a Prophet without the internals used here (its public fit)
    default: dict | None  # Prophet's own initial values
    scales: Scales | None
    text: bytes = b""  # the data file (empty for a constant history: no Stan run)


def stan_inputs(t: np.ndarray, z: np.ndarray, seasonalities, opts: StanOptions) -> StanInputs:
    """Prophet's model of (t, z) as ``fit_stan`` runs it, and Stan's data file for it.

    Prophet prepares the model inputs (scaling, changepoints, features); the
    Stan call is made in ``_optimize`` rather than through ``Prophet.fit``
    because cmdstanpy serialises the data with a per-element Python JSON
    encoder, which took ~70 % of a warm fit; ``stan_json`` is much faster.
    """
    silence()
    import pandas as pd

    Prophet = prophet_class()

    m = Prophet(growth="linear", n_changepoints=opts.n_changepoints, changepoint_range=opts.changepoint_range,
                changepoint_prior_scale=opts.changepoint_prior_scale, yearly_seasonality=False,
                weekly_seasonality=False, daily_seasonality=False, uncertainty_samples=0,
                seasonality_mode="additive")
    for name, period, order in seasonalities:
        m.add_seasonality(name=name, period=period, fourier_order=order, prior_scale=opts.seasonality_prior_scale)
    df = pd.DataFrame({"ds": pd.to_datetime(np.rint(t * 1e3).astype("int64"), unit="ms"), "y": z})
    z_scale = float(np.abs(z).max()) or 1.0
    backend = m.stan_backend
    if not all(hasattr(x, a) for x, a in ((m, "preprocess"), (m, "calculate_initial_params"),
                                          (backend, "prepare_data"), (backend, "stan_to_dict_numpy"))):
        return StanInputs(m, df, z_scale, None, None, None)
    try:
        fast = inputs_of(m, df)
        if fast is not None:
            data, default, scales = fast
        else:  # a model with parts ``inputs_of`` does not build (holidays, regressors): Prophet's own preprocessing
            import dataclasses

            inputs = m.preprocess(df)
            default = dataclasses.asdict(m.calculate_initial_params(inputs.K))
            _, data = backend.prepare_data(default, {f.name: getattr(inputs, f.name)
                                                     for f in dataclasses.fields(inputs)})
            scales = Scales.of(m)
    except (RuntimeError, ValueError) as e:
        raise FitFailed(f"{NAME}: Stan optimisation failed: {e}") from e
    if float(np.ptp(np.asarray(data["y"], dtype=float))) == 0.0:  # constant history: no Stan run (``_optimize``)
        return StanInputs(m, df, z_scale, data, default, scales)
    x = data.get("X")
    if isinstance(x, np.ndarray) and x.ndim == 2 and x.dtype == np.float64:  # the rows' text, reused
        text = stan_json(dict(data, X=rows_json(x)))
    else:
        text = stan_json(data)
    return StanInputs(m, df, z_scale, data, default, scales, text)


def fit_stan(inputs: StanInputs, seasonalities, opts: StanOptions, init: dict | None) -> dict:
    """Run Prophet's MAP fit on ``inputs``, warm-started from ``init``; return the parameters of ``ProphetCurve``."""
    custom = _rescaled_init(init, inputs.z_scale) if init is not None else None
    try:
        p, scales = _optimize(inputs, custom, int(opts.seed))
    except (RuntimeError, ValueError) as e:
        raise FitFailed(f"{NAME}: Stan optimisation failed: {e}") from e
    start, t_scale, y_scale = scales.start, scales.t_scale, scales.y_scale
    delta = np.asarray(p["delta"], dtype=float).reshape(-1)
    cps = np.asarray(scales.changepoints_t, dtype=float).reshape(-1)
    if scales.n_changepoints == 0:
        delta, cps = np.zeros(0), np.zeros(0)
    names = [s[0] for s in seasonalities]
    if list(inputs.m.seasonalities) != names:
        raise FitFailed(f"{NAME}: unexpected seasonality order {list(inputs.m.seasonalities)}")
    beta = np.asarray(p["beta"], dtype=float).reshape(-1)
    k, mm = float(np.ravel(p["k"])[0]), float(np.ravel(p["m"])[0])
    if not (np.all(np.isfinite(beta)) and np.all(np.isfinite(delta)) and math.isfinite(k) and math.isfinite(mm)):
        raise FitFailed(f"{NAME}: non-finite parameters")
    return dict(start=start, t_scale=t_scale, y_scale=y_scale, k=k, m=mm, delta=delta, changepoints_t=cps,
                beta=beta, sigma_obs=float(np.ravel(p["sigma_obs"])[0]))


def _optimize(inputs: StanInputs, custom_init: dict | None, seed: int) -> tuple[dict, Scales]:
    """Prophet's MAP estimate (what ``Prophet.fit`` does for mcmc_samples=0), with fast data I/O."""
    import os
    import tempfile

    m, data, default, scales = inputs.m, inputs.data, inputs.default, inputs.scales
    if data is None:
        kwargs: dict[str, Any] = {"seed": seed}
        if custom_init is not None:
            kwargs["init"] = custom_init
        m.fit(inputs.df, **kwargs)  # a Prophet without these internals: the slow, public path
        m.stan_backend.cleanup()
        return m.params, Scales.of(m)
    assert default is not None and scales is not None  # made with the data (``stan_inputs``)
    if not inputs.text:  # constant history: Prophet's own shortcut
        out = dict(default)
        out["sigma_obs"] = 1e-9
        return {k: np.array(v).reshape((1, -1)) for k, v in out.items()}, scales
    stan_init = m.stan_backend.sanitize_custom_inits(default, custom_init) if custom_init is not None else default
    with tempfile.TemporaryDirectory(prefix="forescale-stan-") as tmp:
        path = os.path.join(tmp, "data.json")
        with open(path, "wb") as fh:
            fh.write(inputs.text)
        # refresh=iter: CmdStan prints no per-iteration progress, so its few lines are read at exit in one piece
        # instead of a line per L-BFGS iteration while Stan runs
        newton = data["T"] < 100
        args: dict[str, Any] = dict(data=path, init=stan_init, iterations=STAN_ITER, refresh=STAN_ITER, seed=seed,
                                    workdir=tmp, params=STAN_PARAMS, write_json=stan_json)
        exe = str(m.stan_backend.model.exe_file)
        try:  # L-BFGS's tolerances (CmdStan refuses them for Newton)
            p = cmdstan.optimize(exe, algorithm="Newton" if newton else "LBFGS", stop={} if newton else STAN_STOP,
                                 **args)
        except RuntimeError:
            if newton:
                raise
            p = cmdstan.optimize(exe, algorithm="Newton", stop={}, **args)  # Prophet's own fallback
        return p, scales


def _rescaled_init(init: dict, new_scale: float) -> dict:
    """A previous fit's parameters, rescaled from its y_scale to the new one (Prophet fits y / y_scale)."""
    r = float(init.get("y_scale", new_scale)) / new_scale
    out = {"k": float(init["k"]) * r, "m": float(init["m"]) * r,
           "delta": np.asarray(init["delta"], dtype=float).reshape(-1) * r,
           "beta": np.asarray(init["beta"], dtype=float).reshape(-1) * r,
           "sigma_obs": max(float(init["sigma_obs"]) * r, 1e-6)}
    return out

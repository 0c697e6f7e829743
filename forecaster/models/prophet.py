"""Prophet: piecewise-linear trend plus daily and weekly Fourier seasonality.

Decisions (measured on the bundled traces, see ``tests/bench/``):

* **Fitted on a coarser grid.** Seasonality does not need 1-minute points: the
  history is averaged into ``fit_step`` buckets (default 15 min; each bucket
  stamped at its centre) before Stan sees it, but never into fewer than
  ``min_fit_points`` buckets. 14 days of 1-min data is 20,160 points and a
  cold fit took 8-13 s here; the same history at 15 min is 1,344 points. The
  curve is continuous and is evaluated at the series' own step. Accuracy at
  10 and 15 min was the same within 1 % (worldcup98, 3-10 min horizons).
* **Seasonalities switched on explicitly by history length**, not by Prophet's
  automatic rule: daily from ``daily_min_days`` (2 days), weekly from
  ``weekly_min_days`` (13 days). Prophet's own rule wants ``last - first >=
  14 days``, which 14 days of 1-min data (13 d 23 h 59 m) misses, so the
  default 14-day history would silently lose its weekly term. Yearly is off.
* **Weekly Fourier order 25** (Prophet's default is 3): with daily order 10
  the model is additive in log space, so every day has the same daily shape;
  high weekly harmonics let weekdays and weekends differ (nab_nyc_taxi,
  30-min, level-corrected: MASE 0.61 vs 0.67 at 30 min ahead, 0.91 vs 1.09
  at 1 h; worldcup98 within 1 %). It costs ~1.5x fit time.
* **Log transform** (``transform="log"``): the model is fitted to
  ``log(y + c)`` with ``c = 5 %`` of the mean rate. Request traffic is
  multiplicative (the daily swing grows with the level) and its noise grows
  with the level; on the log scale both are additive, as Prophet assumes.
  The point forecast is then a median, which is what MASE/WAPE reward.
* **Quantiles from empirical errors, not Prophet's interval.** Prophet's
  interval (simulated trend changes + Gaussian ``sigma_obs``) is not
  calibrated on request traces (bench, 4 windows each: its 80 % interval's
  upper edge, nominally q90, covered 46-100 % of worldcup98 (mean 81 %) and
  6-91 % of nab_nyc_taxi (mean 65 %)). The bands are quantiles of the relative errors of the curve *as the
  policy uses it*: level-corrected with half-life ``level_half_life``
  (``forecaster.level``; pass the policy's ``levelCorrection`` here), at each
  horizon h, over the last ``band_window`` of the training history:
  ``e_h = (r[i+h] - w_h * r[i]) / (curve[i+h] + c)`` with ``r`` the
  residual and ``w_h = 0.5 ** (h * step / half_life)``. ``level_half_life=0``
  gives bands for the plain curve. In-sample errors were chosen over a
  held-out tail (``band_holdout``): mean q90 coverage 0.87-0.91 vs
  0.89-0.91, but a lower pinball loss (sharper) and half the fit time.
  Coverage still varies by window (bench: 0.82-0.93 on worldcup98, 0.84-0.92
  on nab_nyc_taxi): traffic regimes change faster than any 7-day error
  sample. In-sample errors
  of a 100-parameter fit are a little optimistic: the band is widened by
  ``sqrt(n / (n - parameters))`` (``df_inflate``; 1.04-1.08 here), which
  moved q90 coverage on nab_nyc_taxi from 0.87 to 0.89 (worldcup98 0.91 to
  0.92) at an unchanged pinball loss.
  ``uncertainty_samples`` is 0: no sampling at all.
* **Prediction without Prophet.** The fitted parameters (trend, changepoints,
  Fourier coefficients, scales) are kept and the curve is evaluated with
  numpy (a test checks it equals ``Prophet.predict``): fast, usable from any
  later origin, and serialisable as plain JSON (``to_state``/``from_state``).
* **Warm start**: ``fit(series, warm_start=previous)`` or
  ``ProphetForecaster(init=fitted.stan_params())`` starts Stan's L-BFGS from
  the previous optimum (rescaled to the new data scale): 2-3x faster.
* **Fast Stan I/O.** Prophet prepares the inputs; CmdStan is called
  directly (``cmdstan.optimize``: cmdstanpy's command line, without its
  ~11 ms of Python a run) with the data written by msgspec (cmdstanpy's
  encoder took ~70 % of a warm fit, ``json.dumps`` 65 ms a fit on 1,344 x 70
  features, msgspec 5 ms, the same doubles), and CmdStan's progress lines
  are off (``refresh``), so its output is read once at exit, not line by line.
* **L-BFGS stops when the log posterior stops moving** (``STAN_STOP``: an
  iteration gaining under 2.2e-8 of it, relatively; CmdStan's default 2.2e-12).
  The Laplace prior on the changepoints makes the optimum flat where the trend
  bends; there L-BFGS crawled for hundreds to thousands of iterations. What
  stopping earlier gives up is measured, not assumed: over a 7-day tune's 84 warm refits
  (``tests/bench/bench_stan_stop.py``): CmdStan CPU 0.36-0.59x, curves moved
  0.9-13.9 % of peak, as much as a cold start instead of a warm one moves them
  (1.2-13.1 %), pinball loss within +0.3 %.
* **Inputs made ahead**: ``prepare(series)`` is a fit's work before the init is known (buckets, transform,
  Prophet's object, Stan's data file); ``fit(series, prepared=...)`` uses it, so a chain of refits can prepare the
  next while CmdStan runs the one before (``evaluate.historical_forecasts``). The same fit bit for bit.
* Deterministic (``seed`` goes to Stan; L-BFGS from a fixed init is
  deterministic), quiet (cmdstanpy and prophet loggers silenced), and Stan's
  files go to a temporary directory removed after each fit.

The Stan run (Prophet's model, the data file, CmdStan, the warm start) is ``prophet_fit``; the curve ``prophet_curve``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..calendar import UTC, substitute_holidays
from ..base import FitFailed, InsufficientHistory, Series
from ..level import DEFAULT_HALF_LIFE_SECONDS
from ..series import resample
from . import prophet_fit
from ._common import MIN_ERRORS, BandTable, h_grid, history_max
from .prophet_curve import DAY, NAME, ProphetCurve, ProphetFitted, forward


@dataclass(frozen=True, eq=False)
class ProphetForecaster:
    """Prophet with the decisions of the module docstring. All durations in seconds."""

    seed: int = 0
    fit_step: float = 900.0
    min_fit_points: int = 200  # fit_step is lowered so that at least this many buckets remain
    transform: str = "log"  # "log" | "none"
    daily_min_days: float = 2.0
    weekly_min_days: float = 13.0
    daily_order: int = 10
    weekly_order: int = 25
    changepoint_prior_scale: float = 0.05
    seasonality_prior_scale: float = 10.0
    n_changepoints: int = 25
    changepoint_range: float = 0.8
    level_half_life: float = DEFAULT_HALF_LIFE_SECONDS  # bands for the level-corrected curve; 0 = plain
    band_window: float = 7 * DAY  # in-sample errors over this window (band_holdout=0)
    df_inflate: bool = True  # widen in-sample bands by sqrt(n / (n - parameters))
    band_holdout: float = 0.0  # > 0: bands from errors on this held-out tail (a second, warm-started fit)
    min_points: int = 12  # finite points needed at the series' own step
    init: dict | None = field(default=None, repr=False)  # Stan init (k, m, delta, beta, sigma_obs)
    holiday_days: tuple[int, ...] = ()  # day numbers (local to holiday_tz) that are holidays (forecaster.calendar)
    holiday_as: int = 6  # a holiday is forecast as this weekday of its week (Monday = 0, Sunday = 6)
    holiday_tz: str = UTC  # the time zone of the holiday days (``timezone``)

    name = NAME

    def __post_init__(self) -> None:
        if self.transform not in ("log", "none"):
            raise ValueError(f"transform must be 'log' or 'none', got {self.transform!r}")

    def prepare(self, series: Series) -> "PreparedFit":
        """What ``fit(series)`` computes before Stan, which needs no earlier fit: the holiday substitution, the
        buckets, the transform, the seasonalities and Stan's data file (``historical_forecasts`` prepares the next
        refit in a thread while this one's CmdStan runs). A failure (too little history, inputs Prophet refuses)
        is kept and raised by ``fit``."""
        try:
            return self._prepare(series)
        except (InsufficientHistory, FitFailed) as e:
            return PreparedFit(source=series, error=e)

    def _prepare(self, series: Series) -> "PreparedFit":
        source, series = series, self._holiday_history(series)
        ok = np.isfinite(series.y)
        n_ok = int(ok.sum())
        if n_ok < self.min_points:
            raise InsufficientHistory(f"{NAME}: {n_ok} finite point(s), at least {self.min_points} needed")
        step = series.step
        k = max(1, int(self.fit_step // step))
        while k > 1 and n_ok / k < self.min_fit_points:
            k //= 2
        agg = resample(series, k * step) if k > 1 else series
        t_fit = agg.t + 0.5 * (k - 1) * step  # a bucket mean belongs to its centre
        y_fit = agg.y
        keep = np.isfinite(y_fit)
        t_fit, y_fit = t_fit[keep], y_fit[keep]
        if t_fit.size < 3:
            raise InsufficientHistory(f"{NAME}: {t_fit.size} usable bucket(s) of {k * step:g}s, at least 3 needed")

        mean_rate = float(np.mean(y_fit))
        offset = max(0.05 * mean_rate, 1e-6) if self.transform == "log" else 0.0
        z = forward(y_fit, self.transform, offset)

        span_days = (series.t[-1] - series.t[0] + step) / DAY
        seasonalities: list[tuple[str, float, int]] = []
        if span_days >= self.daily_min_days:
            seasonalities.append(("daily", 1.0, self.daily_order))
        if span_days >= self.weekly_min_days:
            seasonalities.append(("weekly", 7.0, self.weekly_order))
        return PreparedFit(source=source, series=series, fit_step=k * step, t_fit=t_fit, z=z, offset=offset,
                           seasonalities=tuple(seasonalities),
                           stan=prophet_fit.stan_inputs(t_fit, z, seasonalities, self))

    def fit(self, series: Series, *, warm_start: "ProphetFitted | None" = None,
            prepared: "PreparedFit | None" = None) -> "ProphetFitted":
        """The fit of ``series``; ``prepared``: ``prepare(series)`` made earlier (of this very object, else unused)."""
        p = prepared if prepared is not None and prepared.source is series else self.prepare(series)
        if p.error is not None:
            raise p.error
        assert p.series is not None and p.t_fit is not None and p.z is not None and p.stan is not None  # prepared
        series, t_fit, z, offset, seasonalities, step = p.series, p.t_fit, p.z, p.offset, p.seasonalities, series.step

        init = self.init
        if warm_start is not None and isinstance(warm_start, ProphetFitted):
            init = warm_start.stan_params()
        bands = None
        hold = int(self.band_holdout // step)
        if hold > 0 and len(series) >= 4 * hold:
            # bands from out-of-sample errors: fit without the last ``band_holdout``, score on it
            split_t = series.t[-hold]
            pre = t_fit < split_t
            if pre.sum() >= 3:
                pre_inputs = prophet_fit.stan_inputs(t_fit[pre], z[pre], seasonalities, self)
                p_pre = prophet_fit.fit_stan(pre_inputs, seasonalities, self, init)
                c_pre = ProphetCurve(**p_pre, seasonalities=seasonalities, transform=self.transform, offset=offset)
                lo = len(series) - hold - 1
                bands = _bands(series.y[lo:], c_pre(series.t[lo:]), step, offset, self.level_half_life)
                init = dict(p_pre)
        params = prophet_fit.fit_stan(p.stan, seasonalities, self, init)

        curve = ProphetCurve(**params, seasonalities=seasonalities, transform=self.transform, offset=offset)
        if bands is None:  # in-sample errors over the last ``band_window``
            n = min(len(series), max(2, int(round(self.band_window / step))))
            bands = _bands(series.y[-n:], curve(series.t[-n:]), step, offset, self.level_half_life)
            if self.df_inflate:
                q = 2 + curve.delta.size + curve.beta.size
                f = math.sqrt(t_fit.size / max(t_fit.size - q, 1.0))
                bands = BandTable(bands.hs, bands.values * f, bands.relative, bands.offset)
        return ProphetFitted(step=step, last_t=float(series.t[-1]), curve=curve, bands=bands,
                             history_max=history_max(series), fit_step=p.fit_step,
                             level_half_life=self.level_half_life, **self._holiday_fields())

    def _holiday_history(self, series: Series) -> Series:
        """History preprocessing: holiday points replaced by the same moment a week before (else after), so a
        past holiday's dip is not learned as part of the weekly shape (``forecaster.calendar``)."""
        if not self.holiday_days:
            return series
        y = substitute_holidays(series.t, series.y, np.asarray(self.holiday_days, dtype=np.int64), 7 * DAY,
                                self.holiday_tz)
        return Series(series.t, y, series.step)

    def _holiday_fields(self) -> dict:
        return {"holiday_days": tuple(self.holiday_days), "holiday_as": int(self.holiday_as),
                "holiday_tz": self.holiday_tz} if self.holiday_days else {}





@dataclass(frozen=True, eq=False)
class PreparedFit:
    """``ProphetForecaster.prepare``: a fit's work before Stan, or the failure it met."""

    source: Series  # the series given to ``prepare``
    series: Series | None = None  # holidays substituted
    fit_step: float = 0.0
    t_fit: np.ndarray | None = None
    z: np.ndarray | None = None
    offset: float = 0.0
    seasonalities: tuple = ()
    stan: prophet_fit.StanInputs | None = None
    error: Exception | None = None


def _bands(y: np.ndarray, fitted_y: np.ndarray, step: float, offset: float, half_life: float) -> BandTable:
    """Relative error quantiles of the (level-corrected) curve by horizon.

    ``e_h[i] = (r[i+h] - w_h * r[i]) / (curve[i+h] + offset)``, ``r = y - curve``,
    ``w_h = 0.5 ** (h * step / half_life)`` (0 without level correction).
    """
    n = len(y)
    r = y - fitted_y
    denom = np.maximum(fitted_y, 0.0) + max(offset, 1e-9)
    if half_life > 0:
        hmax = max(1, min(int(math.ceil(8 * half_life / step)), n - MIN_ERRORS))
        hs = h_grid(hmax, 20)
    else:
        hs = np.array([1])

    def errors(h: int) -> np.ndarray:
        if h >= n:
            return np.array([])
        w = 0.5 ** (h * step / half_life) if half_life > 0 else 0.0
        return (r[h:] - w * r[:-h]) / denom[h:]
    return BandTable.from_errors(hs, errors, relative=True, offset=offset)

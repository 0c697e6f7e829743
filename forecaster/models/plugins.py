"""Models from other packages: the entry point group ``forescale.models``.

A package adds a model by declaring, in its ``pyproject.toml``::

    [project.entry-points."forescale.models"]
    mymodel = "mypackage.model:MyForecaster"

The entry point's name is the model's name (``model: mymodel`` in the trigger metadata, ``--model mymodel`` on the
command line); its object is a class that follows the interface every built-in model follows
(``forecaster.base.Forecaster``, documented in docs/extending.md):

* a dataclass whose fields include ``seed`` and ``level_half_life`` (``make`` passes both); ``name`` equal to the
  entry point's name;
* ``fit(series, *, warm_start=None) -> Fitted``, raising ``InsufficientHistory`` or ``FitFailed``;
* ``fitted``: the class of what ``fit`` returns, with a static ``from_state(dict) -> Fitted``; a ``Fitted`` has
  ``model``, ``chosen``, ``step``, ``last_t``, ``history_max``, ``predict(horizon, quantiles, *, origin=None,
  recent=None) -> Forecast`` and ``to_state() -> dict`` (JSON-able, ``"model"`` its name).

A plugin that cannot be imported, is not such a class, or takes a name already taken is refused when the registry
loads (``refused()`` says why; the server and the CLI print it, ``model: <name>`` is answered with it); nothing
it raises escapes. One that passes and then breaks the contract at run time (``fit`` raising anything else, a
forecast of the wrong shape, NaN, negative or crossing quantiles) fails that fit with ``FitFailed`` naming what
was wrong (``Checked``), which the server serves as ``fallback_fit_failed``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from importlib.metadata import entry_points
from typing import Any, Sequence

import numpy as np

from ..base import FitFailed, Forecast, InsufficientHistory, Series

GROUP = "forescale.models"
REQUIRED_FIELDS = ("seed", "level_half_life")
UNCHECKED = ("predict_origins", "prepare")  # optional fast paths of the built-ins, never taken through a plugin


def check_class(name: str, obj: Any, taken: Sequence[str]) -> str | None:
    """Why ``obj`` (an entry point's object named ``name``) cannot be a model; None when it can."""
    if name in taken:
        return f"the name {name!r} is a built-in model's"
    if not isinstance(obj, type) or not is_dataclass(obj):
        return f"{obj!r} is not a dataclass (a Forecaster class)"
    if getattr(obj, "name", None) != name:
        return f"its class attribute name is {getattr(obj, 'name', None)!r}, not the entry point's {name!r}"
    missing = [f for f in REQUIRED_FIELDS if f not in {x.name for x in fields(obj)}]
    if missing:
        return f"its fields lack {', '.join(missing)} (every model takes seed and level_half_life)"
    if not callable(getattr(obj, "fit", None)):
        return "it has no fit(series, *, warm_start=None)"
    fitted = getattr(obj, "fitted", None)
    if not isinstance(fitted, type) or not callable(getattr(fitted, "from_state", None)):
        return "it has no fitted class with a from_state(state) (the server restores fits from its state)"
    return None


@dataclass(frozen=True)
class Found:
    """What the entry point group holds: the models accepted (name -> class) and those refused (name -> why)."""

    accepted: dict
    refused: dict


def discover(taken: Sequence[str], group: str = GROUP) -> Found:
    """Every entry point of ``group``, loaded and checked; never raises."""
    accepted: dict = {}
    refused: dict = {}
    try:
        eps = sorted(entry_points(group=group), key=lambda e: e.name)
    except Exception as e:  # a broken installed distribution's metadata
        return Found({}, {"(entry points)": f"reading the {group} entry points failed: {type(e).__name__}: {e}"})
    for ep in eps:
        name = str(ep.name).strip().lower()
        if name in accepted or name in refused:
            refused[name] = f"declared twice ({ep.value})"
            accepted.pop(name, None)
            continue
        try:
            obj = ep.load()
        except BaseException as e:  # noqa: BLE001 (an import may raise anything, SystemExit included)
            if isinstance(e, KeyboardInterrupt):
                raise
            refused[name] = f"{ep.value} failed to load: {type(e).__name__}: {str(e)[:200]}"
            continue
        why = check_class(name, obj, taken)
        if why is None:
            accepted[name] = obj
        else:
            refused[name] = f"{ep.value}: {why}"
    return Found(accepted, refused)


class Checked:
    """A plugin's forecaster with its run-time contract enforced: whatever ``fit`` raises besides
    ``InsufficientHistory``/``FitFailed`` becomes ``FitFailed``, and so does a forecast that breaks the contract
    (``check_forecast``) on a probe predict made right after the fit."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.name = inner.name

    def fit(self, series: Series, *, warm_start=None):
        try:
            fitted = self.inner.fit(series, warm_start=getattr(warm_start, "inner", warm_start))
        except (InsufficientHistory, FitFailed):
            raise
        except Exception as e:
            raise FitFailed(f"model plugin {self.name}: fit raised {type(e).__name__}: {str(e)[:200]}") from None
        return CheckedFit(self.name, fitted)

    def __getattr__(self, attr: str):
        if attr in UNCHECKED:
            raise AttributeError(attr)
        return getattr(self.inner, attr)


class CheckedFit:
    """A plugin's fit whose forecasts are checked (``check_forecast``) before anyone reads them."""

    def __init__(self, name: str, inner: Any):
        self.plugin, self.inner = name, inner
        try:
            check_forecast(name, inner.predict(2, (0.5,)), 2, (0.5,), float(inner.last_t), float(inner.step))
        except FitFailed:
            raise
        except Exception as e:
            raise FitFailed(f"model plugin {name}: predict raised {type(e).__name__}: {str(e)[:200]}") from None

    def predict(
        self,
        horizon: int,
        quantiles: Sequence[float] = (),
        *,
        origin: float | None = None,
        recent: Series | None = None,
    ) -> Forecast:
        try:
            fc = self.inner.predict(horizon, quantiles, origin=origin, recent=recent)
        except (InsufficientHistory, FitFailed, ValueError):
            raise
        except Exception as e:
            raise FitFailed(f"model plugin {self.plugin}: predict raised {type(e).__name__}: {str(e)[:200]}") from None
        start = (
            origin
            if origin is not None
            else (float(recent.t[-1]) if recent is not None and len(recent) else float(self.inner.last_t))
        )
        check_forecast(self.plugin, fc, horizon, quantiles, start, float(self.inner.step))
        return fc

    def to_state(self) -> dict:
        return self.inner.to_state()

    def __getattr__(self, attr: str):
        if attr in UNCHECKED:
            raise AttributeError(attr)  # a way around the checks: the callers fall back to predict
        return getattr(self.inner, attr)


def check_forecast(name: str, fc: Any, horizon: int, quantiles: Sequence[float], origin: float, step: float) -> None:
    """FitFailed naming what breaks the contract: a ``Forecast`` of ``horizon`` points at ``origin + step * k``,
    finite and non-negative, every quantile asked for, none crossing."""

    def bad(what: str) -> FitFailed:
        return FitFailed(f"model plugin {name} violates the forecast contract: {what}")

    if not isinstance(fc, Forecast):
        raise bad(f"predict returned {type(fc).__name__}, not forecaster.base.Forecast")
    if fc.t.shape != (horizon,) or fc.mean.shape != (horizon,):
        raise bad(f"{fc.t.shape[0] if fc.t.ndim else 0} points for a horizon of {horizon}")
    if horizon and not np.allclose(fc.t, origin + step * np.arange(1, horizon + 1)):
        raise bad("its timestamps are not origin + step * (1..horizon)")
    if not (np.all(np.isfinite(fc.mean)) and np.all(fc.mean >= 0)):
        raise bad("the mean has NaN, infinite or negative values")
    if sorted(fc.quantiles) != sorted(float(q) for q in quantiles):
        raise bad(f"quantiles {sorted(fc.quantiles)} for {sorted(quantiles)} asked")
    prev = None
    for q in sorted(fc.quantiles):
        v = np.asarray(fc.quantiles[q])
        if v.shape != (horizon,) or not (np.all(np.isfinite(v)) and np.all(v >= 0)):
            raise bad(f"quantile {q:g} is not {horizon} finite non-negative values")
        if prev is not None and np.any(prev > v + 1e-9 * max(1.0, float(np.max(np.abs(v)) if v.size else 1.0))):
            raise bad("its quantiles cross")
        prev = v

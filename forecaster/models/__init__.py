"""The model registry: ``make(name, **options) -> Forecaster`` and state (de)serialisation.

Names: ``prophet`` (the default), ``seasonal_naive``, ``naive``,
``linear_trend``, ``auto`` (picks one of the others per series by a
rolling-origin score: the provisioned quantile's pinball loss, ``make_for_policy``), ``envelope`` (the max around the same moment of past
periods, Crane EHPA's idea), ``mstl`` and ``ets`` (Nixtla statsforecast).
Every model accepts ``seed``.

``to_state(fitted) -> dict`` gives a JSON-able dict (``json.dumps`` works,
no NaN) and ``from_state(d) -> Fitted`` restores it without refitting: the
server writes fitted models to its state directory to survive restarts.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..base import Fitted, Forecaster
from .auto import AutoFitted, AutoForecaster
from .envelope import EnvelopeFitted, EnvelopeForecaster
from .linear_trend import LinearTrendFitted, LinearTrendForecaster
from .naive import NaiveFitted, NaiveForecaster
from .prophet import ProphetFitted, ProphetForecaster
from .seasonal_naive import SeasonalNaiveFitted, SeasonalNaiveForecaster
from .statsf import (STATS_MODELS, EtsFitted, EtsForecaster, MstlFitted, MstlForecaster, missing_models_message,
                     statsforecast_available)

_FORECASTERS = {
    "prophet": ProphetForecaster,
    "seasonal_naive": SeasonalNaiveForecaster,
    "naive": NaiveForecaster,
    "linear_trend": LinearTrendForecaster,
    "auto": AutoForecaster,
    "envelope": EnvelopeForecaster,
    "mstl": MstlForecaster,
    "ets": EtsForecaster,
}
_FITTED = {
    "prophet": ProphetFitted,
    "seasonal_naive": SeasonalNaiveFitted,
    "naive": NaiveFitted,
    "linear_trend": LinearTrendFitted,
    "auto": AutoFitted,
    "envelope": EnvelopeFitted,
    "mstl": MstlFitted,
    "ets": EtsFitted,
}
NAMES: tuple[str, ...] = tuple(_FORECASTERS)
DEFAULT = "prophet"


def make(name: str, **options: Any) -> Forecaster:
    """A model by name with its options (e.g. ``make("prophet", seed=1, fit_step=900)``)."""
    cls = _FORECASTERS.get(str(name).strip().lower())
    if cls is None:
        raise ValueError(f"unknown model {name!r}; accepted: {', '.join(NAMES)}")
    if cls.name in STATS_MODELS and not statsforecast_available():
        raise ValueError(missing_models_message(cls.name))
    accepted = [f.name for f in fields(cls)]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)} for model {name!r}; accepted: {', '.join(accepted)}")
    return cls(**options)


def make_for_policy(name: str, *, seed: int, level_half_life: float, quantile: float,
                    holiday_days: tuple[int, ...] = (), holiday_as: int = 6) -> Forecaster:
    """A model as the scaling policy uses it: bands for the level-corrected curve; ``auto`` scores its
    candidates on the quantile the policy provisions (the server's fits and the replay's both come here).
    ``holiday_days`` (epoch days, ``forecaster.calendar``) go to the models that take them
    (``takes_holidays``); the others forecast every day as an ordinary day."""
    extra: dict[str, Any] = {"quantile": quantile} if str(name).strip().lower() == "auto" else {}
    if holiday_days and takes_holidays(name):
        extra.update(holiday_days=tuple(int(d) for d in holiday_days), holiday_as=int(holiday_as))
    return make(name, seed=seed, level_half_life=level_half_life, **extra)


def takes_holidays(name: str) -> bool:
    """Whether the model named ``name`` has a holiday rule (``holiday_days``/``holiday_as`` options)."""
    cls = _FORECASTERS.get(str(name).strip().lower())
    return cls is not None and "holiday_days" in {f.name for f in fields(cls)}


def to_state(fitted: Fitted) -> dict:
    """A JSON-able dict of a fitted model (includes ``model`` and ``version``)."""
    return fitted.to_state()


def from_state(state: dict) -> Fitted:
    """The fitted model back from ``to_state``'s dict. ValueError on an unknown or malformed state."""
    name = state.get("model") if isinstance(state, dict) else None
    cls = _FITTED.get(name)
    if cls is None:
        raise ValueError(f"state names model {name!r}; accepted: {', '.join(NAMES)}")
    try:
        return cls.from_state(state)
    except (KeyError, TypeError, IndexError) as e:
        raise ValueError(f"malformed {name} state: missing or bad field {e}") from None


__all__ = ["DEFAULT", "NAMES", "from_state", "make", "to_state"] + [c.__name__ for c in _FORECASTERS.values()]

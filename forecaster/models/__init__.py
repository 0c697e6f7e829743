"""The model registry: ``make(name, **options) -> Forecaster`` and state (de)serialisation.

Names: ``prophet`` (the default), ``seasonal_naive``, ``naive``,
``linear_trend``, ``auto`` (picks one of the others per series by a
rolling-origin score: the provisioned quantile's pinball loss, ``make_for_policy``), ``envelope`` (the max around the same moment of past
periods, Crane EHPA's idea), ``mstl`` and ``ets`` (Nixtla statsforecast).
Every model accepts ``seed``. Other packages add models through the entry point group ``forescale.models``
(``plugins``): ``BUILTINS`` are this package's, ``NAMES`` those and the plugins accepted, ``refused()`` the plugins
refused and why.

``to_state(fitted) -> dict`` gives a JSON-able dict (``json.dumps`` works,
no NaN) and ``from_state(d) -> Fitted`` restores it without refitting: the
server writes fitted models to its state directory to survive restarts.

Modules: one per model (``prophet`` with ``prophet_fit``, ``prophet_curve``, ``prophet_stan`` and ``cmdstan``;
``seasonal_naive``, ``naive``, ``linear_trend``, ``auto``, ``envelope``, ``statsf`` for mstl and ets), ``holiday``
(the one holiday mechanism around any model; ``holidayeffects``: the rule and the effects it learns and puts back),
``plugins`` (the entry point group) and ``_common`` (shared grids, origins, bands).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..base import FitFailed, Fitted, Forecaster
from ..calendar import DEFAULT_HOLIDAY_AS_CODE, UTC
from .auto import AutoFitted, AutoForecaster
from .envelope import EnvelopeFitted, EnvelopeForecaster
from .holiday import HolidayFitted, HolidayForecaster
from .holidayeffects import HolidayRule, spans_of
from .linear_trend import LinearTrendFitted, LinearTrendForecaster
from .plugins import Checked, CheckedFit, discover
from .naive import NaiveFitted, NaiveForecaster
from .prophet import ProphetForecaster
from .prophet_curve import ProphetFitted
from .seasonal_naive import SeasonalNaiveFitted, SeasonalNaiveForecaster
from .statsf import (STATS_MODELS, EtsFitted, EtsForecaster, MstlFitted, MstlForecaster, missing_models_message,
                     statsforecast_available)

_FORECASTERS: dict[str, type[Any]] = {  # model classes (dataclasses, each with its ``name``)
    "prophet": ProphetForecaster,
    "seasonal_naive": SeasonalNaiveForecaster,
    "naive": NaiveForecaster,
    "linear_trend": LinearTrendForecaster,
    "auto": AutoForecaster,
    "envelope": EnvelopeForecaster,
    "mstl": MstlForecaster,
    "ets": EtsForecaster,
}
_FITTED: dict[str, type[Any]] = {  # their fitted classes (``from_state``)
    "prophet": ProphetFitted,
    "seasonal_naive": SeasonalNaiveFitted,
    "naive": NaiveFitted,
    "linear_trend": LinearTrendFitted,
    "auto": AutoFitted,
    "envelope": EnvelopeFitted,
    "mstl": MstlFitted,
    "ets": EtsFitted,
}
BUILTINS: tuple[str, ...] = tuple(_FORECASTERS)
_FOUND = discover(BUILTINS)  # the plugins (forescale.models entry points): loaded once, never raising
_PLUGINS = dict(_FOUND.accepted)
NAMES: tuple[str, ...] = BUILTINS + tuple(_PLUGINS)
DEFAULT = "prophet"


def refused() -> dict[str, str]:
    """The plugins of the ``forescale.models`` group that were refused: name -> why (empty: none)."""
    return dict(_FOUND.refused)


def plugin_names() -> tuple[str, ...]:
    """The plugins accepted, by name."""
    return tuple(_PLUGINS)


def make(name: str, **options: Any) -> Forecaster:
    """A model by name with its options (e.g. ``make("prophet", seed=1, fit_step=900)``)."""
    key = str(name).strip().lower()
    cls = _FORECASTERS.get(key) or _PLUGINS.get(key)
    if cls is None:
        why = _FOUND.refused.get(key)
        raise ValueError(f"unknown model {name!r}; accepted: {', '.join(NAMES)}" if why is None else
                         f"model plugin {key!r} was refused: {why}")
    if cls.name in STATS_MODELS and not statsforecast_available():
        raise ValueError(missing_models_message(cls.name))
    accepted = [f.name for f in fields(cls)]
    if "make" in accepted:  # a model built of others (auto) builds them through this registry
        options.setdefault("make", make)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)} for model {name!r}; accepted: {', '.join(accepted)}")
    return Checked(cls(**options)) if key in _PLUGINS else cls(**options)


def make_for_policy(name: str, *, seed: int, level_half_life: float, quantile: float,
                    holiday_days: tuple[int, ...] = (), holiday_as: int = DEFAULT_HOLIDAY_AS_CODE, events: tuple = (),
                    timezone: str = UTC) -> Forecaster:
    """A model as the scaling policy uses it: bands for the level-corrected curve; ``auto`` scores its
    candidates on the quantile the policy provisions (the server's fits and the replay's both come here).

    ``holiday_days`` (day numbers local to ``timezone``, ``forecaster.calendar``) and ``events`` (``eventsfile.Event``) go through the one
    holiday mechanism (``holiday.HolidayForecaster``: the history's holidays and past events substituted, learned
    effects put back on the forecast), whatever the model. With a weekday ``holiday_as`` the models that have
    their own weekday rule (``takes_holidays``: prophet's curve on that weekday, seasonal_naive's copy of it)
    apply it themselves."""
    extra: dict[str, Any] = {"quantile": quantile} if str(name).strip().lower() == "auto" else {}
    native = bool(holiday_days) and 0 <= int(holiday_as) <= 6 and takes_holidays(name)
    if native:
        extra.update(holiday_days=tuple(int(d) for d in holiday_days), holiday_as=int(holiday_as), holiday_tz=timezone)
    inner = make(name, seed=seed, level_half_life=level_half_life, **extra)
    if not (holiday_days or events) or native and not events:
        return inner  # no calendar, or the model's own weekday rule alone: as before
    rule = HolidayRule(tuple(int(d) for d in holiday_days), int(holiday_as), spans_of(events), timezone)
    # base.Forecaster and base.Fitted declare plain (settable) attributes, HolidayForecaster's ``name`` and
    # HolidayFitted's ``chosen``, ``step``, ... are read-only properties (the protocols are too strict):
    return HolidayForecaster(inner, rule, native=native)  # type: ignore[return-value]


def takes_holidays(name: str) -> bool:
    """Whether the model named ``name`` has its own weekday holiday rule (``holiday_days``/``holiday_as`` options);
    every model gets holidays through ``make_for_policy``."""
    cls = _FORECASTERS.get(str(name).strip().lower())  # a plugin gets holidays through the holiday mechanism
    return cls is not None and "holiday_days" in {f.name for f in fields(cls)}


def to_state(fitted: Fitted) -> dict:
    """A JSON-able dict of a fitted model (includes ``model`` and ``version``)."""
    return fitted.to_state()


def from_state(state: dict) -> Fitted:
    """The fitted model back from ``to_state``'s dict. ValueError on an unknown or malformed state."""
    name: Any = state.get("model") if isinstance(state, dict) else None  # anything the JSON held: judged below
    cls = _FITTED.get(name) if name not in _PLUGINS else _PLUGINS[name].fitted
    if cls is None:
        raise ValueError(f"state names model {name!r}; accepted: {', '.join(NAMES)}")
    try:
        if "holiday_rule" in state:  # a fit wrapped by the holiday mechanism
            return HolidayFitted.from_state(state, from_state)  # type: ignore[return-value]  # as above
        if name in _PLUGINS:
            return CheckedFit(name, cls.from_state(state))
        return cls.from_state(state, from_state) if getattr(cls, "nests", False) else cls.from_state(state)
    except (KeyError, TypeError, IndexError, FitFailed) as e:
        raise ValueError(f"malformed {name} state: missing or bad field {e}") from None


__all__ = ["BUILTINS", "DEFAULT", "NAMES", "from_state", "make", "plugin_names", "refused", "to_state"] + [c.__name__ for c in _FORECASTERS.values()]

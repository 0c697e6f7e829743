"""One holiday mechanism for every model: a wrapper around any forecaster (``HolidayForecaster``).

A model forecasts *ordinary* days; the wrapper takes holidays (days local to ``HolidayRule.tz``,
``forecaster.calendar``) and the user's events out of what it sees and puts their effect back on the forecast:

* **History substitution.** Before the inner model is fitted, every point on a past holiday day or inside a past
  event's span is replaced by the same moment a week before (else a week after, else two weeks before or
  after; ``calendar.substitute_mask``), so a past holiday's dip or a launch's spike is not learned as part of the
  weekly shape, and a seasonal copy never repeats it.
* **The holiday in progress is not substituted.** The points of a holiday whose day holds the end of the history
  stay as observed (divided by the effect the forecast puts back on that day, if any, as recent points are): they
  are today's level, which the level correction (and every model that follows the level) carries over the next
  hours. Substituting them made the model forecast the rest of the holiday as an ordinary day, and the effect
  learned from its first hours did not repair it: a holiday's night runs above an ordinary night and its day far
  below, so a quarter day says little about the rest (nab_nyc_taxi, Prophet, at L: Thanksgiving MASE 0.214 off,
  0.225 with that rule, 0.254 substituted without it; docs/events.md). Once the day is over it is a past holiday
  and substituted like the others.
* **Learned effects, only from an earlier occurrence.** The effect of an occurrence is the log ratio of what
  happened to what the substitution says an ordinary day held over the same points, ``log((sum y + n c) / (sum
  y_ordinary + n c))`` (``c`` = 5 % of the mean rate, as Prophet's log transform; sums, so the busy hours weigh
  most). A holiday's effect comes from the **similar day** (``learned``): when the history holds an earlier holiday
  (the most recent holiday day before the one in progress or ahead with at least a quarter of its points:
  ``similar_day``), a holiday after it is forecast with that holiday's **profile**: per local hour, the log ratio
  less the drift, kept only when the whole day's effect stands out of ordinary change. Without an earlier holiday in
  the history there is nothing to learn from: the holiday is forecast as an ordinary day of its weekday (the
  history at most 90 days never holds last year's occurrence of the same holiday). An event's effect is learned
  per name, from its past occurrences, only for events without a ``multiplier`` (with one,
  ``scaler.policy.decide`` applies the user's multiplier; learning it too would count it twice). **Against ordinary
  change**: the same ratio between each whole ordinary day and the same weekday a week before (growth, noise;
  ``drift``) gives a median, subtracted from the effect, and a robust spread: an effect within ``STAND_OUT`` (2)
  spreads of it is not told apart from an ordinary week and is 0. Days are the calendar days of ``HolidayRule.tz``
  (``timezone``).
* **Holiday ahead** (``holidayAs``): ``learned``: the forecast on a holiday after the similar day is ``(f + c) *
  exp(profile) - c`` (no similar day: an ordinary day); ``ordinary``: no effect;
  a weekday: the ratio of that weekday's mean level to the target's weekday's over the last week of the
  substituted history (a day-level factor; ``prophet`` and ``seasonal_naive`` instead evaluate their own
  curve / copy that weekday's profile, ``native``, and substitute their whole history themselves). A future event
  with a learned effect gets it over ``[start, end)``.
* **Recent points**: observations on a holiday or an event given to ``predict`` as ``recent`` (naive's last
  value, seasonal_naive's copies) are divided by the same effect first, so an inner model that tracks the
  level is not scaled twice.

The effects are a few numbers stored with the fit (``to_state``); predicting costs one mask per call. The rule,
the learning of the effects and the factor they put on a forecast are ``holidayeffects``; this module substitutes the
history and wraps the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..base import Forecast, Series
from ..calendar import DAY, substitute_mask
from ._common import Wrapping
from .holidayeffects import Effects, HolidayRule, learn, log_factor

WEEK = 7 * DAY


def in_progress(series: Series, rule: HolidayRule) -> np.ndarray:
    """The points of the holiday in progress: those on the holiday day that holds the end of the history (the day
    of the next point), outside any event's span (an event is substituted as ever); all False when that day is
    ordinary."""
    t = np.asarray(series.t, dtype=float)
    if not rule.days or not len(t):
        return np.zeros(t.shape, dtype=bool)
    d = int(rule.day_of([float(t[-1] + series.step)])[0])
    if d not in set(rule.days):
        return np.zeros(t.shape, dtype=bool)
    going = rule.day_of(t) == d
    for sp in rule.spans:
        going &= ~rule.in_span(t, sp)
    return going


def clean_history(series: Series, rule: HolidayRule) -> tuple[np.ndarray, np.ndarray]:
    """(``y`` substituted, ``y_ordinary``): the series with marked points replaced by the same moment a week
    before/after, and the same with NaN where a marked point found no substitute (what the effects compare). The
    holiday in progress (``in_progress``) is left as observed (an event's span in it is still substituted)."""
    marked = rule.marked(series.t) & ~in_progress(series, rule)
    if not marked.any():
        return np.array(series.y, dtype=float, copy=True), np.where(marked, np.nan, series.y)
    sub = substitute_mask(series.t, np.where(marked, np.nan, series.y), marked, WEEK)
    clean = np.where(marked & np.isnan(sub), series.y, sub)
    return clean, sub


def _scaled(x: np.ndarray, f: np.ndarray, c: float) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(f != 0.0, np.maximum((x + c) * np.exp(f) - c, 0.0), x)


@dataclass(frozen=True, eq=False)
class HolidayForecaster:
    """``inner`` fitted on the substituted history; effects put back on the forecast. ``native``: the inner model
    forecasts a holiday as the ``holidayAs`` weekday itself (prophet, seasonal_naive), the wrapper then only
    handles the events."""

    inner: Any
    rule: HolidayRule
    native: bool = False

    @property
    def name(self) -> str:
        return self.inner.name

    def fit(self, series: Series, *, warm_start=None) -> "HolidayFitted":
        clean, ordinary = clean_history(series, self.rule)
        eff = learn(series, self.rule, clean, ordinary)
        if self.native:
            eff = Effects(offset=eff.offset, events=eff.events)  # the model's own weekday rule forecasts the days
        going = in_progress(series, self.rule)
        if going.any():  # the holiday in progress on the ordinary scale, as recent points are
            clean = clean.copy()
            clean[going] = _scaled(clean[going], -log_factor(series.t[going], self.rule, eff), eff.offset)
        inner_ws = warm_start.inner if isinstance(warm_start, HolidayFitted) else warm_start
        fitted = self.inner.fit(Series(series.t, clean, series.step), warm_start=inner_ws)
        return HolidayFitted(fitted, self.rule, eff)


@dataclass(frozen=True, eq=False)
class HolidayFitted(Wrapping):
    inner: Any
    rule: HolidayRule
    effects: Effects = field(default_factory=Effects)

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def chosen(self) -> str:
        return self.inner.chosen

    def predict(self, horizon: int, quantiles: Sequence[float] = (), *, origin: float | None = None,
                recent: Series | None = None) -> Forecast:
        c = self.effects.offset
        if recent is not None and len(recent):
            fr = log_factor(recent.t, self.rule, self.effects)
            if fr.any():
                recent = Series(recent.t, _scaled(np.asarray(recent.y, dtype=float), -fr, c), recent.step)
        fc = self.inner.predict(horizon, quantiles, origin=origin, recent=recent)
        f = log_factor(fc.t, self.rule, self.effects)
        if not f.any():
            return fc
        return Forecast(fc.t, _scaled(fc.mean, f, c), {q: _scaled(v, f, c) for q, v in fc.quantiles.items()},
                        fc.model)

    def to_state(self) -> dict:
        return {**self.inner.to_state(), "holiday_rule": self.rule.to_state(), "holiday_effects": self.effects.to_state()}

    @staticmethod
    def from_state(d: dict, inner_from_state) -> "HolidayFitted":
        inner = {k: v for k, v in d.items() if k not in ("holiday_rule", "holiday_effects")}
        return HolidayFitted(inner_from_state(inner), HolidayRule.from_state(d["holiday_rule"]),
                             Effects.from_state(d.get("holiday_effects", {})))

    def __getattr__(self, name: str):  # anything else a caller reads from a fit (bands, curve, ...): the inner fit's
        if name.startswith("__") or name in ("inner", "rule", "effects"):
            raise AttributeError(name)
        return getattr(self.inner, name)


__all__ = ["HolidayFitted", "HolidayForecaster", "clean_history", "in_progress"]

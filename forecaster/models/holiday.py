"""One holiday mechanism for every model: a wrapper around any forecaster (``HolidayForecaster``).

A model forecasts *ordinary* days; the wrapper takes holidays (epoch days, ``forecaster.calendar``) and the
user's events out of what it sees and puts their effect back on the forecast:

* **History substitution.** Before the inner model is fitted, every point on a holiday day or inside a past
  event's span is replaced by the same moment a week before (else a week after, else two weeks before or
  after; ``calendar.substitute_mask``), so a past holiday's dip or a launch's spike is not learned as part of the
  weekly shape, and a seasonal copy never repeats it.
* **Learned effects.** The effect of an occurrence is the log ratio of what happened to what the
  substitution says an ordinary day held over the same points, ``log((sum y + n c) / (sum y_ordinary + n c))``
  (``c`` = 5 % of the mean rate, as Prophet's log transform; sums, so the busy hours weigh most). A holiday's
  effect is learned from its own occurrence only, as Prophet's holidays table has one effect per holiday: the
  history (at most 90 days) never holds last year's, so what is learned is **the holiday in progress**, from
  its first hours (a quarter of the day observed) to its end; a holiday not yet begun is an ordinary day.
  (One effect shared by all holidays was measured and dropped: it carried Christmas' dip onto New Year,
  docs/events.md.) An event's effect is learned per name, from its past occurrences,
  only for events without a ``multiplier`` (with one, ``scaler.policy.decide`` applies the user's multiplier;
  learning it too would count it twice). **Against ordinary change**: the same ratio between each whole
  ordinary day and the same weekday a week before (growth, noise; ``drift``) gives a median, subtracted from
  the effect, and a robust spread: an effect within ``STAND_OUT`` (2) spreads of it is not told apart from an
  ordinary week and is 0.
* **Holiday ahead** (``holidayAs``): ``learned``: the forecast on a holiday is ``(f + c) * exp(effect) - c``
  with the effect of that holiday (0, an ordinary day, before it has begun); ``ordinary``: no effect;
  a weekday: the ratio of that weekday's mean level to the target's weekday's over the last week of the
  substituted history (a day-level factor; ``prophet`` and ``seasonal_naive`` instead evaluate their own
  curve / copy that weekday's profile, ``native``). A future event with a learned effect gets it over
  ``[start, end)``.
* **Recent points**: observations on a holiday or an event given to ``predict`` as ``recent`` (naive's last
  value, seasonal_naive's copies) are divided by the same effect first, so an inner model that tracks the
  level is not scaled twice.

The effects are a few numbers stored with the fit (``to_state``); predicting costs one mask per call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..base import Forecast, Series
from ..calendar import DAY, LEARNED, ORDINARY, substitute_mask, weekday_of_day
from ._common import Wrapping

WEEK = 7 * DAY
OFFSET_SHARE = 0.05  # c = 5 % of the mean rate in the log ratios (as Prophet's transform)
MIN_DAY_SHARE = 0.25  # a past holiday day counts when at least this share of its points has a substitute
STAND_OUT = 2.0  # an effect is used only beyond this many robust spreads of ordinary days' week-on-week change


@dataclass(frozen=True)
class Span:
    """A user's event as the forecast sees it: ``learn`` when it has no multiplier."""

    name: str
    start: float
    end: float
    learn: bool


def spans_of(events: Sequence[Any]) -> tuple[Span, ...]:
    """``forecaster.calendar.Event``s -> ``Span``s (an event without a multiplier is learned)."""
    return tuple(Span(str(e.name), float(e.start), float(e.end), e.multiplier is None) for e in events)


@dataclass(frozen=True)
class HolidayRule:
    days: tuple[int, ...] = ()  # holiday epoch days (UTC), past and future
    holiday_as: int = LEARNED  # a weekday 0-6, LEARNED or ORDINARY (forecaster.calendar)
    spans: tuple[Span, ...] = ()

    def on_day(self, t: np.ndarray) -> np.ndarray:
        if not self.days:
            return np.zeros(np.shape(t), dtype=bool)
        return np.isin(np.floor(np.asarray(t, dtype=float) / DAY).astype(np.int64), np.asarray(self.days, np.int64))

    def in_span(self, t: np.ndarray, span: Span) -> np.ndarray:
        t = np.asarray(t, dtype=float)
        return (t >= span.start) & (t < span.end)

    def marked(self, t: np.ndarray) -> np.ndarray:
        m = self.on_day(t)
        for s in self.spans:
            m = m | self.in_span(t, s)
        return m

    def to_state(self) -> dict:
        return {"days": list(self.days), "holiday_as": self.holiday_as,
                "spans": [[s.name, s.start, s.end, s.learn] for s in self.spans]}

    @staticmethod
    def from_state(d: dict) -> "HolidayRule":
        return HolidayRule(tuple(int(x) for x in d.get("days", ())), int(d.get("holiday_as", LEARNED)),
                           tuple(Span(str(n), float(a), float(b), bool(lr)) for n, a, b, lr in d.get("spans", ())))


@dataclass(frozen=True)
class Effects:
    """Log effects learned at fit time."""

    offset: float = 0.0  # c
    holidays: tuple[tuple[int, float], ...] = ()  # (epoch day, effect): the holiday in progress, learned from its start
    events: tuple[tuple[str, float], ...] = ()  # (name, effect) for learned events with a past occurrence
    weekday: tuple[float, ...] = ()  # 7 log ratios: level of holidayAs / level of each weekday (weekday rule)

    def to_state(self) -> dict:
        return {"offset": self.offset, "holidays": [list(h) for h in self.holidays],
                "events": [list(e) for e in self.events], "weekday": list(self.weekday)}

    @staticmethod
    def from_state(d: dict) -> "Effects":
        return Effects(float(d.get("offset", 0.0)), tuple((int(n), float(v)) for n, v in d.get("holidays", ())),
                       tuple((str(n), float(v)) for n, v in d.get("events", ())),
                       tuple(float(x) for x in d.get("weekday", ())))


def clean_history(series: Series, rule: HolidayRule) -> tuple[np.ndarray, np.ndarray]:
    """(``y`` substituted, ``y_ordinary``): the series with marked points replaced by the same moment a week
    before/after, and the same with NaN where a marked point found no substitute (what the effects compare)."""
    marked = rule.marked(series.t)
    if not marked.any():
        return np.array(series.y, dtype=float, copy=True), np.where(marked, np.nan, series.y)
    sub = substitute_mask(series.t, np.where(marked, np.nan, series.y), marked, WEEK)
    clean = np.where(marked & np.isnan(sub), series.y, sub)
    return clean, sub


def _log_ratio(y: np.ndarray, ordinary: np.ndarray, c: float) -> tuple[float, int]:
    """log((sum y + n c) / (sum ordinary + n c)) over the ``n`` points where both are finite."""
    ok = np.isfinite(y) & np.isfinite(ordinary)
    n = int(ok.sum())
    if not n:
        return 0.0, 0
    a, b = float(np.maximum(y[ok], 0.0).sum()), float(np.maximum(ordinary[ok], 0.0).sum())
    return math.log(a + n * c) - math.log(b + n * c), n


def drift(t: np.ndarray, y: np.ndarray, marked: np.ndarray, step: float, c: float) -> tuple[float, float]:
    """How ordinary days differ from the same weekday a week before in the history: the median and the robust
    spread (1.4826 x MAD) of ``log((sum y_d + n c) / (sum y_{d-7} + n c))`` over the whole ordinary days whose week
    before is a whole ordinary day too; (0, 0) with fewer than 3 such days."""
    per = max(1, int(round(DAY / step)))
    n_day = np.floor(t / DAY).astype(np.int64)
    first = int(n_day[0]) + (0 if t[0] % DAY < 1e-6 else 1)
    last = int(np.floor((t[-1] + step) / DAY)) - 1  # the last whole day
    whole: dict[int, np.ndarray] = {}
    for d in range(first, last + 1):
        i0 = int(round((d * DAY - t[0]) / step))
        seg = slice(i0, i0 + per)
        if i0 >= 0 and i0 + per <= len(t) and not marked[seg].any():
            whole[d] = y[seg]
    r = [_log_ratio(whole[d], whole[d - 7], c)[0] for d in whole if d - 7 in whole]
    if len(r) < 3:
        return 0.0, 0.0
    med = float(np.median(r))
    return med, 1.4826 * float(np.median(np.abs(np.asarray(r) - med)))


def learn(series: Series, rule: HolidayRule, clean: np.ndarray, ordinary: np.ndarray) -> Effects:
    """The effects of the past holidays and learned events in ``series`` (see the module docstring)."""
    t, y = series.t, np.asarray(series.y, dtype=float)
    fin = np.isfinite(clean)
    c = max(OFFSET_SHARE * float(np.mean(clean[fin])), 1e-9) if fin.any() else 1e-9
    weekday = _weekday_ratios(t, clean, c, series.step, rule.holiday_as) if rule.days and rule.holiday_as <= 6 else ()
    learn_days = bool(rule.days) and rule.holiday_as == LEARNED
    if not (learn_days or any(s.learn for s in rule.spans)):
        return Effects(offset=c, weekday=weekday)
    base, spread = drift(t, y, rule.marked(t), series.step, c)

    def effect(values: list[float]) -> float:  # the median, less the drift, kept only where it stands out
        e = float(np.median(values)) - base if values else 0.0
        return e if abs(e) > STAND_OUT * spread else 0.0

    per_day: list[tuple[int, float]] = []
    if learn_days:  # the holiday in progress at the end of the history (a day that is still ahead of its last point)
        d = int(np.floor((t[-1] + series.step) / DAY))
        if (t[-1] + series.step) % DAY > 1e-6 and d in set(rule.days):
            on = np.floor(t / DAY).astype(np.int64) == d
            e, n = _log_ratio(y[on], ordinary[on], c)
            if n >= MIN_DAY_SHARE * DAY / series.step and effect([e]) != 0.0:
                per_day.append((d, effect([e])))
    events: dict[str, list[float]] = {}
    for s in rule.spans:
        if s.learn and s.end <= t[-1] + series.step:
            on = rule.in_span(t, s)
            e, n = _log_ratio(y[on], ordinary[on], c)
            if n:
                events.setdefault(s.name, []).append(e)
    return Effects(offset=c, holidays=tuple(per_day),
                   events=tuple((n, effect(v)) for n, v in sorted(events.items()) if effect(v) != 0.0), weekday=weekday)


def _weekday_ratios(t: np.ndarray, clean: np.ndarray, c: float, step: float, holiday_as: int) -> tuple[float, ...]:
    """log(level of the last holiday_as day + c) - log(level of the last day of weekday w + c), w = 0..6, over the
    last 7 whole days of the substituted history; () when it holds fewer."""
    n_day = np.floor(t / DAY).astype(np.int64)
    last = int(n_day[-1]) if (t[-1] + step) % DAY < 1e-6 else int(n_day[-1]) - 1  # the last whole day
    level = {}
    for d in range(last - 6, last + 1):
        v = clean[n_day == d]
        v = v[np.isfinite(v)]
        if v.size < MIN_DAY_SHARE * DAY / step:
            return ()
        level[weekday_of_day(d)] = float(v.mean())
    return tuple(math.log(level[holiday_as] + c) - math.log(level[w] + c) for w in range(7))


def log_factor(t: np.ndarray, rule: HolidayRule, eff: Effects) -> np.ndarray:
    """The log effect at each time ``t`` (0 on an ordinary moment)."""
    t = np.asarray(t, dtype=float)
    f = np.zeros(t.shape)
    if rule.days and rule.holiday_as != ORDINARY:
        on = rule.on_day(t)
        if on.any():
            if rule.holiday_as == LEARNED:
                if eff.holidays:
                    learned_days = dict(eff.holidays)
                    n_on = np.floor(t[on] / DAY).astype(np.int64)
                    f[on] += np.array([learned_days.get(int(n), 0.0) for n in n_on])
            elif eff.weekday:
                f[on] += np.asarray(eff.weekday)[weekday_of_day(np.floor(t[on] / DAY).astype(np.int64))]
    learned = dict(eff.events)
    for s in rule.spans:
        if s.learn and s.name in learned:
            f[rule.in_span(t, s)] += learned[s.name]
    return f


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
            eff = Effects(eff.offset, 0.0, 0, eff.events, ())
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


__all__ = ["Effects", "HolidayFitted", "HolidayForecaster", "HolidayRule", "Span", "clean_history", "learn",
           "log_factor", "spans_of"]

"""What a holiday or a user's event does to the rate, as ``forecaster.models.holiday`` learns and applies it.

``HolidayRule`` says which local days are holidays (``tz``), what a holiday ahead is forecast as (``holiday_as``)
and the user's events (``Span``); ``learn`` finds, at fit time, the ``Effects``: a holiday's hourly profile from
the similar day (``similar_day``, the most recent earlier holiday), each learned event's effect per name, the
weekday ratios of ``holidayAs``, all against ordinary week-on-week change (``drift``); ``log_factor`` is the log
effect they put on each moment of a forecast. The rules and their measured reasons: ``holiday``'s docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..base import Series
from ..calendar import DAY, LEARNED, ORDINARY, UTC, day_bounds, local_days, time_of_day, weekday_of_day


OFFSET_SHARE = 0.05  # c = 5 % of the mean rate in the log ratios (as Prophet's transform)
MIN_DAY_SHARE = 0.25  # a past holiday day counts when at least this share of its points has a substitute
STAND_OUT = 2.0  # an effect is used only beyond this many robust spreads of ordinary days' week-on-week change
HOURS = 24  # a profile has one log ratio per local hour of the day


@dataclass(frozen=True)
class Span:
    """A user's event as the forecast sees it: ``learn`` when it has no multiplier."""

    name: str
    start: float
    end: float
    learn: bool


def spans_of(events: Sequence[Any]) -> tuple[Span, ...]:
    """``forecaster.eventsfile.Event``s -> ``Span``s (an event without a multiplier is learned)."""
    return tuple(Span(str(e.name), float(e.start), float(e.end), e.multiplier is None) for e in events)


@dataclass(frozen=True)
class HolidayRule:
    days: tuple[int, ...] = ()  # holiday day numbers (local to ``tz``), past and future
    holiday_as: int = LEARNED  # a weekday 0-6, LEARNED or ORDINARY (forecaster.calendar)
    spans: tuple[Span, ...] = ()
    tz: str = UTC  # the IANA zone whose calendar days the holidays are (``timezone``)

    def day_of(self, t: np.ndarray | Sequence[float]) -> np.ndarray:
        return local_days(t, self.tz)

    def on_day(self, t: np.ndarray) -> np.ndarray:
        if not self.days:
            return np.zeros(np.shape(t), dtype=bool)
        return np.isin(self.day_of(t), np.asarray(self.days, np.int64))

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
                "spans": [[s.name, s.start, s.end, s.learn] for s in self.spans], "tz": self.tz}

    @staticmethod
    def from_state(d: dict) -> "HolidayRule":
        return HolidayRule(tuple(int(x) for x in d.get("days", ())), int(d.get("holiday_as", LEARNED)),
                           tuple(Span(str(n), float(a), float(b), bool(lr)) for n, a, b, lr in d.get("spans", ())),
                           str(d.get("tz", UTC)))


@dataclass(frozen=True)
class Effects:
    """Log effects learned at fit time."""

    offset: float = 0.0  # c
    holidays: tuple[tuple[int, float], ...] = ()  # (day, effect): read from older states only (no longer learned)
    events: tuple[tuple[str, float], ...] = ()  # (name, effect) for learned events with a past occurrence
    weekday: tuple[float, ...] = ()  # 7 log ratios: level of holidayAs / level of each weekday (weekday rule)
    profile: tuple[float, ...] = ()  # HOURS log ratios per local hour: the most recent past holiday (similar day)
    profile_day: int | None = None  # the day the profile was learned from; it applies to the holidays after it

    def to_state(self) -> dict:
        return {"offset": self.offset, "holidays": [list(h) for h in self.holidays],
                "events": [list(e) for e in self.events], "weekday": list(self.weekday),
                "profile": list(self.profile), "profile_day": self.profile_day}

    @staticmethod
    def from_state(d: dict) -> "Effects":
        pd = d.get("profile_day")
        return Effects(float(d.get("offset", 0.0)), tuple((int(n), float(v)) for n, v in d.get("holidays", ())),
                       tuple((str(n), float(v)) for n, v in d.get("events", ())),
                       tuple(float(x) for x in d.get("weekday", ())), tuple(float(x) for x in d.get("profile", ())),
                       None if pd is None else int(pd))

def similar_day(days: Sequence[int], day: int, first: float, step: float, tz: str = UTC) -> int | None:
    """The holiday a forecast of ``day`` can learn from: the most recent holiday day before it (in ``days``) with at
    least ``MIN_DAY_SHARE`` of its points in a history that starts at ``first`` (seconds); None: nothing to learn
    from. (Whether its effect is used depends on its standing out of ordinary change, decided at the fit.)"""
    for p in sorted((int(x) for x in set(days) if int(x) < day), reverse=True):
        lo, hi = day_bounds([p], tz)
        if (float(hi[0]) - max(float(lo[0]), first)) / step >= MIN_DAY_SHARE * DAY / step - 1e-9:
            return p
        return None  # the most recent one is (mostly) before the history: every earlier one is too
    return None


def learned_from(days: Sequence[int], in_span: Sequence[int], history_seconds: float, step: float, tz: str = UTC
                 ) -> dict[int, int | None]:
    """For each holiday day of ``in_span``: the earlier holiday its forecast learns from (``similar_day`` in the
    history before its first cutoff, ``history_seconds`` long), None when there is none: nothing to learn from."""
    out: dict[int, int | None] = {}
    for d in in_span:
        start = float(day_bounds([d], tz)[0][0])
        out[int(d)] = similar_day(days, int(d), start - history_seconds, step, tz)
    return out


def _log_ratio(y: np.ndarray, ordinary: np.ndarray, c: float) -> tuple[float, int]:
    """log((sum y + n c) / (sum ordinary + n c)) over the ``n`` points where both are finite."""
    ok = np.isfinite(y) & np.isfinite(ordinary)
    n = int(ok.sum())
    if not n:
        return 0.0, 0
    a, b = float(np.maximum(y[ok], 0.0).sum()), float(np.maximum(ordinary[ok], 0.0).sum())
    return math.log(a + n * c) - math.log(b + n * c), n


def _whole_days(t: np.ndarray, step: float, tz: str) -> dict[int, np.ndarray]:
    """Local day -> the indices of its points, for the days the series covers whole (local midnight to midnight,
    every step present)."""
    n_day = local_days(t, tz)
    out: dict[int, np.ndarray] = {}
    if not len(t):
        return out
    bounds = np.flatnonzero(np.diff(n_day)) + 1
    for seg in np.split(np.arange(len(t)), bounds):
        d = int(n_day[seg[0]])
        lo, hi = day_bounds([d], tz)
        if abs(t[seg[0]] - lo[0]) < 1e-6 * step and abs(t[seg[-1]] + step - hi[0]) < 1e-6 * step \
                and len(seg) == int(round((hi[0] - lo[0]) / step)):
            out[d] = seg
    return out


def drift(t: np.ndarray, y: np.ndarray, marked: np.ndarray, step: float, c: float, tz: str = UTC
          ) -> tuple[float, float]:
    """How ordinary days differ from the same weekday a week before in the history: the median and the robust
    spread (1.4826 x MAD) of ``log((sum y_d + n c) / (sum y_{d-7} + n c))`` over the whole ordinary days whose week
    before is a whole ordinary day of the same length too (local days of ``tz``); (0, 0) with fewer than 3."""
    whole = {d: y[i] for d, i in _whole_days(t, step, tz).items() if not marked[i].any()}
    r = [_log_ratio(whole[d], whole[d - 7], c)[0] for d in whole
         if d - 7 in whole and len(whole[d - 7]) == len(whole[d])]
    if len(r) < 3:
        return 0.0, 0.0
    med = float(np.median(r))
    return med, 1.4826 * float(np.median(np.abs(np.asarray(r) - med)))


def _hour_of_day(t: np.ndarray, tz: str) -> np.ndarray:
    """0 .. HOURS - 1: the hour since local midnight (a 25-h day's last hour counts as its 24th)."""
    return np.minimum((time_of_day(t, tz) // 3600.0).astype(np.int64), HOURS - 1)


def _profile(t: np.ndarray, y: np.ndarray, ordinary: np.ndarray, c: float, on: np.ndarray, tz: str
             ) -> tuple[float, np.ndarray]:
    """(whole-day log ratio, per-hour log ratios) of the points ``on`` one day; an hour without a point: NaN."""
    e_day, _ = _log_ratio(y[on], ordinary[on], c)
    hour = _hour_of_day(t[on], tz)
    prof = np.full(HOURS, np.nan)
    for h in np.unique(hour):
        e, n = _log_ratio(y[on][hour == h], ordinary[on][hour == h], c)
        if n:
            prof[h] = e
    return e_day, prof


def learn(series: Series, rule: HolidayRule, clean: np.ndarray, ordinary: np.ndarray) -> Effects:
    """The effects of the past holidays and learned events in ``series`` (see the module docstring)."""
    t, y = series.t, np.asarray(series.y, dtype=float)
    fin = np.isfinite(clean)
    c = max(OFFSET_SHARE * float(np.mean(clean[fin])), 1e-9) if fin.any() else 1e-9
    weekday = (_weekday_ratios(t, clean, c, series.step, rule.holiday_as, rule.tz)
               if rule.days and rule.holiday_as <= 6 else ())
    learn_days = bool(rule.days) and rule.holiday_as == LEARNED
    if not (learn_days or any(s.learn for s in rule.spans)):
        return Effects(offset=c, weekday=weekday)
    base, spread = drift(t, y, rule.marked(t), series.step, c, rule.tz)

    def effect(values: list[float]) -> float:  # the median, less the drift, kept only where it stands out
        e = float(np.median(values)) - base if values else 0.0
        return e if abs(e) > STAND_OUT * spread else 0.0

    profile: tuple[float, ...] = ()
    profile_day = None
    if learn_days:
        n_day = rule.day_of(t)
        d = int(rule.day_of([float(t[-1] + series.step)])[0])
        p = similar_day(rule.days, d, float(t[0]), series.step, rule.tz)
        on = n_day == p
        if p is not None and on.sum() >= MIN_DAY_SHARE * DAY / series.step:
            e_day, prof = _profile(t, y, ordinary, c, on, rule.tz)
            if np.isfinite(prof).sum() * 3600.0 >= MIN_DAY_SHARE * DAY and effect([e_day]) != 0.0:
                # the day stands out of ordinary change: its hours are the profile
                prof = np.where(np.isfinite(prof), prof, e_day) - base
                profile, profile_day = tuple(float(x) for x in prof), p
    events: dict[str, list[float]] = {}
    for s in rule.spans:
        if s.learn and s.end <= t[-1] + series.step:
            on = rule.in_span(t, s)
            e, n = _log_ratio(y[on], ordinary[on], c)
            if n:
                events.setdefault(s.name, []).append(e)
    return Effects(offset=c,
                   events=tuple((n, effect(v)) for n, v in sorted(events.items()) if effect(v) != 0.0), weekday=weekday,
                   profile=profile, profile_day=profile_day)


def _weekday_ratios(t: np.ndarray, clean: np.ndarray, c: float, step: float, holiday_as: int, tz: str = UTC
                    ) -> tuple[float, ...]:
    """log(level of the last holiday_as day + c) - log(level of the last day of weekday w + c), w = 0..6, over the
    last 7 whole days of the substituted history; () when it holds fewer."""
    n_day = local_days(t, tz)
    ends = float(day_bounds([n_day[-1]], tz)[1][0])
    last = int(n_day[-1]) if abs(t[-1] + step - ends) < 1e-6 else int(n_day[-1]) - 1  # the last whole day
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
            n_on = rule.day_of(t[on])
            if rule.holiday_as == LEARNED:
                if eff.holidays:
                    learned_days = dict(eff.holidays)
                    f[on] += np.array([learned_days.get(int(n), 0.0) for n in n_on])
                if eff.profile and eff.profile_day is not None:  # the similar day, on the holidays after it
                    after = n_on > eff.profile_day
                    f[np.flatnonzero(on)[after]] += np.asarray(eff.profile)[_hour_of_day(t[on][after], rule.tz)]
            elif eff.weekday:
                f[on] += np.asarray(eff.weekday)[weekday_of_day(n_on)]
    learned = dict(eff.events)
    for s in rule.spans:
        if s.learn and s.name in learned:
            f[rule.in_span(t, s)] += learned[s.name]
    return f


__all__ = ["Effects", "HolidayRule", "Span", "drift", "learn", "learned_from", "log_factor", "similar_day", "spans_of"]

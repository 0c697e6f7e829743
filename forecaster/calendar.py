"""Known days: public holidays (the ``holidays`` package) on the calendar days of a time zone; a user's events file
is ``forecaster.eventsfile``.

Pure: no I/O but the IANA zone data (``zoneinfo``), no clock.
Days are calendar days of a time zone (``timezone``, an IANA name; default ``UTC``): day ``n`` is the local
date ``1970-01-01 + n days``, covering local midnight to local midnight (23 or 25 h on a DST change;
``day_bounds``). In UTC epoch day ``n`` covers ``[n * 86400, (n + 1) * 86400)``, so a trace stored in local
time (as most exported traces are) has its holidays on the right days with the default.

* ``check_timezone(name)``: an IANA zone name, checked (``CalendarError`` naming what is accepted).
* ``local_days(t, tz)``: the local day number of each time; ``day_bounds(days, tz)``: their UTC start and end.

* ``holiday_days(spec, t_first, t_last, window, tz)``: the local days of the holidays of a country
  (``US``) or a subdivision (``US-CA``) between two times, each widened by ``window`` days before
  and after, with their names.
* ``weekday_of_day(n)``: Monday = 0 ... Sunday = 6 for an epoch day.
"""

from __future__ import annotations

import math
from datetime import date, datetime
from functools import lru_cache
from typing import Iterable

import numpy as np

DAY = 86400.0
MAX_WINDOW_DAYS = 7
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# holidayAs beyond the weekdays: ``learned`` (the effect of the past holidays in the history, else an ordinary day)
# and ``ordinary`` (an ordinary day of its own weekday: the history's past holidays are substituted, nothing more)
LEARNED, ORDINARY = 7, 8
HOLIDAY_AS_NAMES = WEEKDAYS + ("learned", "ordinary")
DEFAULT_HOLIDAY_AS = "learned"  # as scaler.keys declares holidayAs' default
DEFAULT_HOLIDAY_AS_CODE = LEARNED


class CalendarError(ValueError):
    """Bad holidays spec, time zone or events file (``forecaster.eventsfile``); the message names what was wrong and
    what is accepted."""


UTC = "UTC"  # the default ``timezone`` (as scaler.keys declares it)
_TZ_FORM = "an IANA time zone name such as UTC, America/New_York, Europe/Berlin, Asia/Tokyo"


@lru_cache(maxsize=64)
def _zone(name: str):
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def check_timezone(name: str) -> str:
    """``name`` if it is an IANA time zone (``UTC``, ``America/New_York``), else ``CalendarError``."""
    s = str(name).strip()
    if s.upper() == UTC or s == "Etc/UTC":
        return UTC
    if not s or len(s) > 64 or not s.isprintable() or s.startswith(("/", ".")) or ".." in s or _zone(s) is None:
        raise CalendarError(f"timezone {s[:40]!r}: not a known time zone; accepted {_TZ_FORM}")
    return s


def _is_utc(tz: str) -> bool:
    return not tz or tz == UTC


@lru_cache(maxsize=4096)  # pure; local_days asks for the same days at every forecast of a replay
def _midnight(n: int, tz: str) -> float:
    """UTC epoch seconds of local midnight starting day ``n`` in ``tz`` (where midnight is skipped by a DST change:
    the change itself, when the day begins)."""
    d = date.fromordinal(_EPOCH_ORDINAL + int(n))
    return datetime(d.year, d.month, d.day, tzinfo=_zone(tz)).timestamp()


def local_days(t, tz: str = UTC) -> np.ndarray:
    """The local day number (``n``: the date ``1970-01-01 + n days`` in ``tz``) of each time ``t`` (epoch seconds)."""
    t = np.asarray(t, dtype=float)
    if _is_utc(tz) or not t.size:
        return np.floor(t / DAY).astype(np.int64)
    lo, hi = float(np.nanmin(t)), float(np.nanmax(t))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return np.floor(t / DAY).astype(np.int64)
    n0, n1 = int(math.floor(lo / DAY)) - 2, int(math.floor(hi / DAY)) + 2  # every zone is within 26 h of UTC
    starts = np.array([_midnight(n, tz) for n in range(n0, n1 + 1)])
    return (n0 + np.searchsorted(starts, t, side="right") - 1).astype(np.int64)


def day_bounds(days, tz: str = UTC) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) in UTC epoch seconds of each local day number: local midnight to the next local midnight."""
    d = np.asarray(days, dtype=np.int64).reshape(-1)
    if _is_utc(tz):
        return d * DAY, (d + 1) * DAY
    return (np.array([_midnight(int(n), tz) for n in d], dtype=float),
            np.array([_midnight(int(n) + 1, tz) for n in d], dtype=float))


def time_of_day(t, tz: str = UTC) -> np.ndarray:
    """Seconds since local midnight of each time ``t``."""
    t = np.asarray(t, dtype=float)
    if _is_utc(tz):
        return np.mod(t, DAY)
    return t - day_bounds(local_days(t, tz), tz)[0]


def weekday_of_day(n: int | np.ndarray):
    """Monday = 0 ... Sunday = 6 of epoch day ``n`` (1970-01-01 was a Thursday)."""
    return (np.asarray(n) + 3) % 7 if isinstance(n, np.ndarray) else (int(n) + 3) % 7


def parse_weekday(text: str) -> int:
    """holidayAs: ``sunday`` / ``Sun`` / ``6`` -> 6; ``learned`` -> ``LEARNED``; ``ordinary`` -> ``ORDINARY``."""
    s = str(text).strip().lower()
    if s.isdigit() and 0 <= int(s) <= 6:
        return int(s)
    for i, name in enumerate(HOLIDAY_AS_NAMES):
        if len(s) >= 3 and name.startswith(s):
            return i
    raise CalendarError(f"holidayAs {text!r}: accepted a weekday name (monday ... sunday), 0-6 (Monday = 0), "
                        "learned or ordinary")


def holiday_as_name(holiday_as: int) -> str:
    """``6`` -> ``sunday``, ``LEARNED`` -> ``learned``."""
    return HOLIDAY_AS_NAMES[int(holiday_as)]


def parse_holidays_spec(spec: str) -> tuple[str, str | None]:
    """``US`` -> ("US", None); ``US-CA`` -> ("US", "CA"); checked against the ``holidays`` package."""
    import holidays

    s = str(spec).strip()
    country, _, subdiv = s.partition("-")
    country = country.upper()
    supported = holidays.list_supported_countries()
    if not country or country not in supported:
        raise CalendarError(f"holidays {spec!r}: not a supported country code; accepted: an ISO 3166 code such as "
                            "US, GB, DE, FR, JP, optionally with a subdivision (US-CA)")
    if subdiv:
        subdiv = subdiv.upper()
        if subdiv not in supported[country]:
            shown = ", ".join(supported[country][:12])
            raise CalendarError(f"holidays {spec!r}: {subdiv!r} is not a subdivision of {country}; accepted: "
                                f"{shown}{', ...' if len(supported[country]) > 12 else ''}")
        return country, subdiv
    return country, None


def holiday_days(spec: str, t_first: float, t_last: float, window: int = 0, tz: str = UTC) -> dict[int, str]:
    """Day number (local to ``tz``) -> holiday name for the holidays of ``spec`` touching ``[t_first, t_last]``,
    each widened by ``window`` days before and after (a widened day is named ``<name> (+-k)``)."""
    import holidays

    if not 0 <= int(window) <= MAX_WINDOW_DAYS:
        raise CalendarError(f"holidayWindow {window!r}: accepted 0 to {MAX_WINDOW_DAYS} days")
    country, subdiv = parse_holidays_spec(spec)
    d0, d1 = (int(x) for x in local_days([t_first, t_last], tz))
    d0, d1 = d0 - window, d1 + window
    years = range(_year(d0), _year(d1) + 1)
    cal = holidays.country_holidays(country, subdiv=subdiv, years=list(years))
    out: dict[int, str] = {}
    for day, name in sorted(cal.items()):
        n = day.toordinal() - _EPOCH_ORDINAL
        out[n] = name  # the day itself wins over a neighbour's window
        for k in range(-window, window + 1):
            if k and n + k not in out:
                out[n + k] = f"{name} ({k:+d}d)"
    return {n: out[n] for n in sorted(out) if d0 <= n <= d1}


def holiday_periods(spec: str, t_first: float, t_last: float, window: int = 0, tz: str = UTC
                    ) -> list[tuple[float, float, str]]:
    """``holiday_days`` as (start, end, name) in UTC epoch seconds: each local day, midnight to midnight."""
    days = holiday_days(spec, t_first, t_last, window, tz)
    lo, hi = day_bounds(list(days), tz)
    return [(float(a), float(b), name) for a, b, name in zip(lo, hi, days.values())]


def _year(n: int) -> int:
    return date.fromordinal(_EPOCH_ORDINAL + n).year


_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


def day_mask(t: np.ndarray, days: Iterable[int], tz: str = UTC) -> np.ndarray:
    """True where ``t`` (epoch seconds) falls on one of the ``days`` (local to ``tz``)."""
    return np.isin(local_days(t, tz), np.fromiter(days, dtype=np.int64))


def shift_off_holidays(t: np.ndarray, src: np.ndarray, origin: float, season: float, days: np.ndarray,
                       holiday_as: int, tries: int = 4, tz: str = UTC) -> np.ndarray:
    """Source times for a seasonal copy that keeps holidays out of ordinary days and vice versa.

    ``t``: target times; ``src``: the plain sources (``t - k * season``, at or before ``origin``);
    ``days``: holiday day numbers (local to ``tz``). An ordinary target whose source is a holiday takes the
    source one more season back (up to ``tries`` times): the last ordinary day of the same weekday (weekly
    season). A holiday target takes the same local time of day on the last ordinary ``holiday_as`` weekday
    at or before ``origin``.
    """
    t = np.asarray(t, dtype=float)
    s = np.array(src, dtype=float, copy=True)
    if not len(days) or not len(t):
        return s
    days = np.asarray(days, dtype=np.int64)
    hol_t = np.isin(local_days(t, tz), days)
    for _ in range(tries):
        m = ~hol_t & np.isin(local_days(s, tz), days)
        if not m.any():
            break
        s[m] -= season
    if hol_t.any():
        n = int(local_days([origin], tz)[0])
        tod = time_of_day(t[hol_t], tz)
        nd = np.full(tod.shape, n - (weekday_of_day(n) - holiday_as) % 7, dtype=np.int64)
        h = day_bounds(nd, tz)[0] + tod
        nd[h > origin] -= 7
        for _ in range(tries):
            m = np.isin(nd, days)
            if not m.any():
                break
            nd[m] -= 7
        s[hol_t] = day_bounds(nd, tz)[0] + tod
    return s


def substitute_holidays(t: np.ndarray, y: np.ndarray, days: np.ndarray, season: float = 7 * DAY,
                        tz: str = UTC) -> np.ndarray:
    """``y`` with points on holiday days (local to ``tz``) replaced by the same moment one season before when that
    is an ordinary, finite point, else one season after, else two seasons before, else two after, else left as it
    is (history preprocessing: a past holiday does not teach the model that the next week dips too)."""
    t = np.asarray(t, dtype=float)
    if not len(days) or len(t) < 2:
        return np.array(y, dtype=float, copy=True)
    return substitute_mask(t, y, np.isin(local_days(t, tz), np.asarray(days, dtype=np.int64)), season)


def substitute_mask(t: np.ndarray, y: np.ndarray, hol: np.ndarray, season: float = 7 * DAY) -> np.ndarray:
    """``substitute_holidays`` for any marked points (``hol``: True on a holiday or a past event's span)."""
    t = np.asarray(t, dtype=float)
    out = np.array(y, dtype=float, copy=True)
    if len(t) < 2 or not hol.any():
        return out
    step = float(t[1] - t[0])
    lag = int(round(season / step))
    idx = np.flatnonzero(hol)
    for shift in (-lag, lag, -2 * lag, 2 * lag):  # the nearest ordinary week: Christmas -> New Year takes 2 back
        j = idx + shift
        ok = (j >= 0) & (j < len(t))
        ok[ok] &= ~hol[j[ok]] & np.isfinite(y[j[ok]])
        out[idx[ok]] = y[j[ok]]
        idx = idx[~ok]
    return out


def as_weekday_times(t: np.ndarray, days: np.ndarray, holiday_as: int, tz: str = UTC) -> np.ndarray:
    """``t`` with each time on a holiday day moved to the same local time of day on the ``holiday_as`` weekday of
    the same Monday-to-Sunday week (a curve evaluated there forecasts the holiday as that weekday)."""
    t = np.asarray(t, dtype=float)
    if not len(days) or not len(t):
        return t
    n = local_days(t, tz)
    hol = np.isin(n, np.asarray(days, dtype=np.int64))
    if not hol.any():
        return t
    target = n[hol] + (holiday_as - weekday_of_day(n[hol]))
    out = t.copy()
    out[hol] = day_bounds(target, tz)[0] + time_of_day(t[hol], tz)
    return out


__all__ = ["CalendarError", "DAY", "UTC", "check_timezone", "day_bounds", "local_days", "time_of_day",
           "DEFAULT_HOLIDAY_AS", "DEFAULT_HOLIDAY_AS_CODE", "HOLIDAY_AS_NAMES", "LEARNED", "ORDINARY", "WEEKDAYS",
           "as_weekday_times", "day_mask", "holiday_as_name", "holiday_days", "holiday_periods", "parse_holidays_spec",
           "parse_weekday", "shift_off_holidays", "substitute_holidays", "substitute_mask", "weekday_of_day"]

"""What a backtest says about its calendar (with ``--holidays``/``--events``): the JSON ``calendar`` block and the
terminal's ``holidays`` lines, one per holiday day of the simulated span, saying what its forecast learned from
(``forecaster.models.holidayeffects.learned_from``: the earlier holiday in the history, the similar day) or that
it had nothing to learn from (an ordinary day of its weekday: the level correction carries its level)."""

from __future__ import annotations

from ..replay.engine import Result
from ..replay.prepare import iso
from ..replay.scenario import DAY

LEARNED = "learned"


def holiday_sources(r: Result) -> list[tuple[float, float, str, tuple[float, str] | None]]:
    """(start, end, name, (start, name) of the holiday it learns from or None) per holiday day of the span; the
    source only with ``holidayAs: learned`` (the other rules learn nothing)."""
    from forecaster.calendar import holiday_as_name, holiday_days, holiday_periods, local_days
    from forecaster.models.holidayeffects import learned_from

    s = r.settings
    if not s.holidays:
        return []
    span = holiday_periods(s.holidays, r.sim_start, r.sim_end - 1e-6, s.holiday_window, s.timezone)
    if holiday_as_name(s.holiday_as) != LEARNED:
        return [(a, b, name, None) for a, b, name in span]
    every = holiday_days(s.holidays, float(r.trace.series.t[0]), r.sim_end - 1e-6, s.holiday_window, s.timezone)
    ours = [int(local_days([a], s.timezone)[0]) for a, _, _ in span]
    src = learned_from(tuple(every), ours, s.history_seconds, float(r.trace.series.step), s.timezone)
    out = []
    for (a, b, name), d in zip(span, ours):
        p = src[d]
        out.append((a, b, name, None if p is None else (float(local_start(p, s.timezone)), every[p])))
    return out


def local_start(day: int, tz: str) -> float:
    from forecaster.calendar import day_bounds

    return float(day_bounds([day], tz)[0][0])


def calendar_json(r: Result) -> dict:
    """``calendar``, only with --holidays/--events: the holidays and events marked over the simulated span, each
    holiday with what its forecast learned from (``learned_from``: null = nothing, with ``holidayAs: learned``)."""
    s = r.settings
    if not (s.holidays or s.events):
        return {}
    from forecaster.calendar import holiday_as_name

    learned = holiday_as_name(s.holiday_as) == LEARNED
    days = [{"start": iso(a), "end": iso(b), "name": name,
             **({"learned_from": None if src is None else {"start": iso(src[0]), "name": src[1]}} if learned else {})}
            for a, b, name, src in holiday_sources(r)]
    return {"calendar": {
        "holidays": s.holidays or None, "holiday_window": s.holiday_window, "holiday_as": holiday_as_name(s.holiday_as),
        "timezone": s.timezone, "holiday_days": days,
        "events": [{"name": e.name, "start": iso(e.start), "end": iso(e.end), "multiplier": e.multiplier,
                    "floor_qps": e.floor_qps} for e in s.events],
    }}


def holiday_lines(r: Result) -> list[str]:
    """One ``holidays`` line per holiday day of the span under the accuracy table (``holidayAs: learned``)."""
    from forecaster.calendar import holiday_as_name

    s = r.settings
    if not s.holidays or holiday_as_name(s.holiday_as) != LEARNED:
        return []
    out = []
    for a, _, name, src in holiday_sources(r):
        day = f"{iso(a)[:10]} {name}"
        if src is None:
            out.append(f"holidays  {day}: nothing to learn from (no earlier holiday in the {s.history_seconds / DAY:g} d "
                       "history): forecast as an ordinary day of its weekday, its level carried by the level correction")
        else:
            out.append(f"holidays  {day}: learned from {iso(src[0])[:10]} {src[1]} (its hours, where that day stood "
                       "out of ordinary week-to-week change)")
    return out

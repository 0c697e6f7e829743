"""A forecast fit as a worker process runs it (``fitting``'s pool: forkserver processes, one fit each at a time).

``FitJob`` is everything the process needs, as plain data (it crosses a process boundary): the history, the
model and its policy settings, the quantiles, the warm-start state, the calendar (``holiday_args``: the holiday
days of ``holidays``/``holidayWindow``/``holidayAs`` and the events of ``eventsFile``, read in the server).
``run_fit`` fits and predicts and returns plain data: the curve, the model chosen, its state for the next warm
start, the seconds it took.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from forecaster.base import Series
from forecaster.calendar import DEFAULT_HOLIDAY_AS_CODE, UTC

from ..spec import ScalerSpec


@dataclass(frozen=True)
class FitJob:
    """Everything a worker process needs (plain data: it crosses a process boundary)."""

    model: str
    t: np.ndarray
    y: np.ndarray
    step: float
    horizon: int
    quantiles: tuple[float, ...]
    warm_state: dict | None
    level_half_life: float  # the policy's levelCorrection: the bands are measured for that correction
    quantile: float  # the one the policy provisions (model auto scores its candidates on it)
    seed: int = 0
    holiday_days: tuple[int, ...] = ()  # holidays (forecaster.calendar), days local to timezone over the history and horizon
    holiday_as: int = DEFAULT_HOLIDAY_AS_CODE
    events: tuple = ()  # forecaster.eventsfile.Event of eventsFile: past events substituted and learned
    timezone: str = UTC  # the zone whose calendar days holiday_days are (timezone)


def holiday_args(spec: ScalerSpec, t_first: float, t_last: float) -> dict:
    """FitJob's holiday fields for ``holidays``/``holidayWindow``/``holidayAs`` and the events of ``eventsFile``
    (past ones are substituted and learned in the fit: ``forecaster.models.holiday``); none when off."""
    out: dict = {}
    if spec.holidays:
        from forecaster.calendar import holiday_days

        out.update(holiday_days=tuple(holiday_days(spec.holidays, t_first, t_last, spec.holiday_window,
                                                   spec.timezone)), holiday_as=spec.holiday_as, timezone=spec.timezone)
    if spec.events_file:
        from ..events import FILES

        out["events"] = FILES.get(spec.events_file).events
    return out


def run_fit(job: FitJob) -> dict:
    """Fit and predict in a worker process. Returns plain data (forecast arrays, model state)."""
    from forecaster.models import from_state, make_for_policy, to_state

    t0 = time.perf_counter()
    series = Series(job.t, job.y, job.step)
    warm = None
    if job.warm_state is not None:
        try:
            warm = from_state(job.warm_state)
        except ValueError:
            warm = None  # a state from another model or version: fit cold
    fitted = make_for_policy(job.model, seed=job.seed, level_half_life=job.level_half_life,
                             quantile=job.quantile, holiday_days=job.holiday_days,
                             holiday_as=job.holiday_as, events=job.events,
                             timezone=job.timezone).fit(series, warm_start=warm)
    fc = fitted.predict(job.horizon, job.quantiles)
    return {
        "t": fc.t, "mean": fc.mean, "quantiles": dict(fc.quantiles),
        "model": getattr(fitted, "chosen", job.model) or job.model,
        "state": to_state(fitted),
        "seconds": time.perf_counter() - t0,
    }

"""The load test's plan: which steps, in which order, and what they add up to.

Modes (one per run):

* ``rates``: open loop at each listed rate, ascending;
* ``ramp``: open loop from ``start_rate``, x ``ramp_factor`` while the SLO holds, then ``refine``
  bisections between the highest passing and the lowest failing rate;
* ``concurrency``: closed loop with each listed number of workers (coordinated omission applies:
  the server's slowness slows the offered load; for comparison with other tools);
* ``step``: the design's step test: ``step[0] x capacity`` for ``duration``, then at once
  ``step[1] x capacity`` for ``duration``, with per-second figures across the jump.

After a step that misses the SLO the server may hold a backlog: the next step waits until a lone
request is served in about idle time (at most ``timeout``).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, replace
from typing import Callable

from . import stats
from .generator import Generator, LoadtestError, Target

ProgressFactory = Callable[[str, float], tuple[Callable[[float], None], Callable[[], None]]]
MODES = ("rates", "ramp", "concurrency", "step")


@dataclass(frozen=True)
class Settings:
    mode: str
    slo: float                       # seconds
    percentile: float = 95.0
    margin: float = 0.2
    duration: float = 30.0
    rates: tuple[float, ...] = ()
    start_rate: float = 1.0
    ramp_factor: float = 1.5
    refine: int = 2
    max_rate: float = 10000.0
    concurrency: tuple[int, ...] = ()
    step: tuple[float, float] = (0.6, 1.2)
    capacity: float | None = None    # req/s, for the step test
    seed: int = 0
    max_lag: float | None = None     # None: no fixed limit (see stats: lag that alone breaks the SLO counts)
    pause: float = 0.5
    window: float = 1.0              # seconds per point of the step test's timeline

    def validated(self) -> "Settings":
        if self.mode not in MODES:
            raise LoadtestError(f"mode {self.mode!r}: accepted: {', '.join(MODES)}")
        if not 0 < self.percentile < 100:
            raise LoadtestError(f"--percentile {self.percentile:g}: accepted: a number in (0, 100), e.g. 95")
        if not 0 <= self.margin < 1:
            raise LoadtestError(f"--margin {self.margin:g}: accepted: a fraction in [0, 1), e.g. 0.2")
        if self.mode == "rates" and (not self.rates or min(self.rates) <= 0):
            raise LoadtestError("--rates: accepted: req/s > 0, comma-separated, e.g. 1,2,4,8")
        if self.mode == "ramp" and not (self.start_rate > 0 and self.ramp_factor > 1 and self.refine >= 0):
            raise LoadtestError("--ramp: accepted: --start-rate > 0, --ramp-factor > 1, --refine >= 0")
        if self.mode == "concurrency" and (not self.concurrency or min(self.concurrency) < 1):
            raise LoadtestError("--concurrency: accepted: integers >= 1, comma-separated, e.g. 1,4,16")
        if self.mode == "step" and not (self.capacity and self.capacity > 0 and min(self.step) > 0):
            raise LoadtestError("--step: accepted: two factors > 0 (e.g. 0.6,1.2) and a capacity > 0 "
                                "(--capacity-from LOADTEST.json)")
        return self


@dataclass
class Outcome:
    settings: Settings
    baseline_s: float
    steps: list[dict]
    timeline: list[dict] | None = None

    @property
    def knee(self) -> dict | None:
        return None if self.settings.mode == "step" else stats.capacity(self.steps)

    @property
    def recommended(self) -> float | None:
        k = self.knee
        return None if k is None else stats.recommend(stats.rate_of(k), self.settings.margin)

    @property
    def generator_limited(self) -> list[dict]:
        return [s for s in self.steps if s["generator_limited"]]


def _summarize(records, s: Settings, g: Generator, target: float | None, duration: float, *, mode: str = "open",
               concurrency: int | None = None) -> dict:
    step = stats.summarize(records, target=target, duration=duration, slo=s.slo, q=s.percentile,
                           max_lag=s.max_lag, mode=mode, concurrency=concurrency)
    step["inflight_max"] = g.inflight_max
    reasons = []
    if mode == "open" and target:
        if step["offered_rps"] < stats.OFFERED_TOLERANCE * target:
            reasons.append(f"offered {step['offered_rps']:.3g} of {target:.3g} req/s")
        if not step["meets_slo"] and stats.lag_excused(records, s.slo, s.percentile):
            reasons.append(f"the generator's own send lag (p99 {step['send_lag_p99_s'] * 1e3:.0f} ms) is what "
                           "breaks the SLO")
        if s.max_lag is not None and step["send_lag_p99_s"] > s.max_lag:
            reasons.append(f"send lag p99 {step['send_lag_p99_s'] * 1e3:.0f} ms > --max-lag {s.max_lag * 1e3:.0f} ms")
        if g.inflight_max >= g.target.max_connections:
            reasons.append(f"all {g.target.max_connections} connections in use (--max-connections)")
    step["generator_limited"] = bool(reasons)
    step["limit_reason"] = "; ".join(reasons) or None
    return step


def _shift(records, lo: float, hi: float) -> list:
    return [replace(r, scheduled=r.scheduled - lo, sent=r.sent - lo,
                    finished=None if r.finished is None else r.finished - lo)
            for r in records if lo <= r.scheduled < hi]


async def run(target: Target, settings: Settings, *, on_step: Callable[[dict], None] | None = None,
              progress: ProgressFactory | None = None) -> Outcome:
    s = settings.validated()
    rng = random.Random(s.seed)

    def bar(label: str, seconds: float):
        return progress(label, seconds) if progress is not None else (None, lambda: None)

    async with Generator(target) as g:
        baseline = await g.preflight()
        out = Outcome(s, baseline, [])

        async def between(prev: dict | None) -> None:
            if prev is not None and not prev["meets_slo"]:
                await g.settle(baseline, target.timeout)
            await asyncio.sleep(s.pause)

        def done(step: dict) -> None:
            out.steps.append(step)
            if on_step is not None:
                on_step(step)

        if s.mode == "step":
            rates = [f * s.capacity for f in s.step]
            tick, close = bar(f"step {s.step[0]:g}x -> {s.step[1]:g}x", 2 * s.duration)
            try:
                records = await g.open_loop([(r, s.duration) for r in rates], rng, tick)
            finally:
                close()
            for i, r in enumerate(rates):
                part = _shift(records, i * s.duration, (i + 1) * s.duration)
                step = _summarize(part, s, g, r, s.duration)
                step["capacity_factor"] = s.step[i]
                done(step)
            out.timeline = stats.step_window(records, s.window, 2 * s.duration)
            return out

        if s.mode == "concurrency":
            for i, c in enumerate(sorted(set(s.concurrency))):
                if i:
                    await between(out.steps[-1])
                tick, close = bar(f"{c} workers", s.duration)
                try:
                    records = await g.closed_loop(c, s.duration, tick)
                finally:
                    close()
                done(_summarize(records, s, g, None, s.duration, mode="closed", concurrency=c))
            return out

        queue = sorted(set(s.rates)) if s.mode == "rates" else []
        while True:
            if s.mode == "rates":
                if not queue:
                    break
                rate, refinement = queue.pop(0), False
            else:
                nxt = stats.next_ramp_rate(out.steps, start=s.start_rate, factor=s.ramp_factor, refine=s.refine,
                                           max_rate=s.max_rate)
                if nxt is None:
                    break
                refinement = any(not st["meets_slo"] for st in out.steps)
                rate = nxt
            if out.steps:
                await between(out.steps[-1])
            tick, close = bar(f"{rate:.3g} req/s", s.duration)
            try:
                records = await g.open_loop([(rate, s.duration)], rng, tick)
            finally:
                close()
            step = _summarize(records, s, g, rate, s.duration)
            step["refinement"] = refinement
            done(step)
            if step["generator_limited"]:
                break  # higher rates cannot be offered either: stop, and say so
        return out

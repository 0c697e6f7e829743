"""The load test's plan: which steps, in which order, and what they add up to.

Modes (one per run):

* ``rates``: open loop at each listed rate, ascending;
* ``ramp``: open loop from ``start_rate``, x ``ramp_factor`` while the SLO holds, then ``refine``
  bisections between the highest passing and the lowest failing rate;
* ``concurrency``: closed loop with each listed number of workers (coordinated omission applies:
  the server's slowness slows the offered load; for comparison with other tools);
* ``step``: the design's step test: ``step[0] x capacity`` for ``duration``, then at once
  ``step[1] x capacity`` for ``duration``, with per-second figures across the jump;
* with ``grid`` (rates or ramp): the same steps at each grid point (prompt and answer tokens), each point's knee
  its capacity, in ``Outcome.points`` (``run_grid``; the capacity model is fitted on them, ``scaler.capacity``).

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
from .workload import Workload

ProgressFactory = Callable[[str, float], tuple[Callable[[float], None], Callable[[], None]]]
MODES = ("rates", "ramp", "concurrency", "step")


@dataclass(frozen=True)
class Settings:
    mode: str
    slo: float | None                # seconds to the last byte; None: not judged (a grid held to TTFT and ITL)
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
    slo_ttft: float | None = None    # seconds to the first token
    slo_itl: float | None = None     # seconds between tokens (the step's percentile of the pooled gaps)
    grid: tuple[tuple[int, int], ...] = ()  # (prompt tokens, answer tokens) per grid point

    def validated(self) -> "Settings":
        if self.mode not in MODES:
            raise LoadtestError(f"mode {self.mode!r}: accepted: {', '.join(MODES)}")
        if self.slo is None and self.slo_ttft is None and self.slo_itl is None:
            raise LoadtestError("no SLO: accepted: --slo, --slo-ttft or --slo-itl (a grid: --slo-ttft and/or "
                                "--slo-itl)")
        if self.grid and self.mode not in ("rates", "ramp"):
            raise LoadtestError(f"--grid-input/--grid-output run the open loop at each point: accepted with --rates "
                                f"or --ramp, not --{self.mode}")
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
    points: list[dict] | None = None  # a grid: per point {input_tokens, output_tokens, steps, knee, ...}

    @property
    def knee(self) -> dict | None:
        if self.settings.mode == "step" or self.points is not None:  # a grid has a knee per point
            return None
        return stats.capacity(self.steps)

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
                           max_lag=s.max_lag, mode=mode, concurrency=concurrency, slo_ttft=s.slo_ttft,
                           slo_itl=s.slo_itl)
    step["inflight_max"] = g.inflight_max
    reasons = []
    if mode == "open" and target:
        if step["offered_rps"] < stats.OFFERED_TOLERANCE * stats.scheduled_rate(target, len(records), duration):
            reasons.append(f"offered {step['offered_rps']:.3g} of {target:.3g} req/s")
        itl_ok = s.slo_itl is None or step["itl_slo_s"] is None or step["itl_slo_s"] <= s.slo_itl
        if not step["meets_slo"] and stats.lag_excused(records, s.slo, s.percentile, s.slo_ttft, itl_ok):
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
            assert s.capacity is not None  # validated(): a step test has one
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

        await _open_steps(g, s, rng, out.steps, between, done, bar)
        return out


async def _open_steps(g: Generator, s: Settings, rng: random.Random, steps: list[dict], between, done, bar,
                      label: str = "") -> None:
    """The rates (ascending) or the ramp, open loop, each step handed to ``done`` (which appends it to ``steps``)."""
    queue = sorted(set(s.rates)) if s.mode == "rates" else []
    while True:
        if s.mode == "rates":
            if not queue:
                break
            rate, refinement = queue.pop(0), False
        else:
            nxt = stats.next_ramp_rate(steps, start=s.start_rate, factor=s.ramp_factor, refine=s.refine,
                                       max_rate=s.max_rate)
            if nxt is None:
                break
            refinement = any(not st["meets_slo"] for st in steps)
            rate = nxt
        if steps:
            await between(steps[-1])
        tick, close = bar(f"{label}{rate:.3g} req/s", s.duration)
        try:
            records = await g.open_loop([(rate, s.duration)], rng, tick)
        finally:
            close()
        step = _summarize(records, s, g, rate, s.duration)
        step["refinement"] = refinement
        done(step)
        if step["generator_limited"]:
            break  # higher rates cannot be offered either: stop, and say so


async def run_grid(target: Target, settings: Settings, workload_of: Callable[[int, int], Workload], *,
                   on_step: Callable[[dict], None] | None = None, progress: ProgressFactory | None = None) -> Outcome:
    """The rates or the ramp at each grid point (``settings.grid``), with the point's requests
    (``workload_of(prompt_tokens, answer_tokens)``); ``Outcome.points`` holds each point's steps and knee,
    ``Outcome.steps`` every step (each with its point's ``input_tokens`` and ``output_tokens``)."""
    s = settings.validated()
    rng = random.Random(s.seed)
    points: list[dict] = []
    out = Outcome(s, 0.0, [], points=points)

    def bar(label: str, seconds: float):
        return progress(label, seconds) if progress is not None else (None, lambda: None)

    for n, (i, o) in enumerate(s.grid):
        async with Generator(replace(target, workload=workload_of(i, o))) as g:
            baseline = await g.preflight()
            if n == 0:
                out.baseline_s = baseline
            steps: list[dict] = []

            async def between(prev: dict | None) -> None:
                if prev is not None and not prev["meets_slo"]:
                    await g.settle(baseline, target.timeout)
                await asyncio.sleep(s.pause)

            def done(step: dict) -> None:
                step["input_tokens"], step["output_tokens"] = i, o
                steps.append(step)
                out.steps.append(step)
                if on_step is not None:
                    on_step(step)

            await _open_steps(g, s, rng, steps, between, done, bar, label=f"{i} in, {o} out: ")
            if steps and not steps[-1]["meets_slo"]:
                await g.settle(baseline, target.timeout)  # the next point starts on a drained server
        points.append(grid_point(i, o, steps, baseline))
    return out


def grid_point(i: int, o: int, steps: list[dict], baseline: float) -> dict:
    """One grid point's result: its knee (None: no rate met the SLO) and the mean lengths the server counted (over
    every answered request of the point; the nominal ones where it reported none)."""
    knee = stats.capacity(steps)
    answered = [(st["ok"], st["prompt_tokens_mean"], st["output_tokens_mean"]) for st in steps]

    def mean(k: int, nominal: int) -> float:
        xs = [(a[0], a[k]) for a in answered if a[k] is not None and a[0]]
        return sum(n * v for n, v in xs) / sum(n for n, _ in xs) if xs else float(nominal)

    return {"input_tokens_requested": i, "output_tokens_requested": o, "input_tokens": mean(1, i),
            "output_tokens": mean(2, o), "baseline_s": baseline, "steps": len(steps),
            "knee_step": None if knee is None else steps.index(knee),
            "capacity_rps": None if knee is None else stats.rate_of(knee),
            "ttft_p95_s": None if knee is None else knee["ttft_p95_s"],
            "itl_p95_s": None if knee is None else knee["itl_p95_s"]}

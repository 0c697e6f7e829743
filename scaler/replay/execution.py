"""How a replay's work runs: each model's fits and the variants' batches, in this process (the fits in threads
while the model-free variants replay) or in a process pool (fits first, a model's variants as its curves arrive).

``engine.run`` plans the work (``Work``: what to fit with which arguments, which variants wait for which model's
curves) and hands it here; what comes back is each model's run, its packed curves and every variant evaluated.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Callable

from forecaster.base import Series

from .batches import Evaluated, evaluate_batch
from .fitcache import FitCache
from .forecasts import ModelRun, fit_task, fit_threaded, restore
from .policies import Context
from .variant import Variant

Batch = list[tuple[Variant, bool]]  # (variant, keep its timeline)


@dataclass
class Work:
    """What one replay computes: the models to fit (the slow default first) with ``fit_task``'s arguments, the
    model-free variants (``free``), each model's variants by quantile (``by_model``), the progress units."""

    models: list[str]
    fit_kw: dict[str, dict]
    free: Batch
    by_model: dict[str, dict[float, Batch]]
    refits: int  # a model's share of the progress, whether its fits succeed or not
    total: int


@dataclass
class Done:
    """What the work gave: each model's run (in ``Work.models``' order) and packed curves, the evaluations."""

    runs: dict[str, ModelRun] = field(default_factory=dict)
    packs: dict[str, object] = field(default_factory=dict)
    evaluated: list[Evaluated] = field(default_factory=list)
    timing: dict[str, float] = field(default_factory=dict)

    def fitted(self, model: str, mr: ModelRun, packed) -> None:
        self.runs[model] = restore(mr, packed)
        self.packs[model] = packed
        self.timing[f"forecast_{model}_seconds"] = mr.seconds


@dataclass(frozen=True)
class Job:
    """One replay's work and what every part of it reads: the context, the series and the span, the target."""

    ctx: Context
    series: Series
    start: float
    end: float
    work: Work
    target_miss: float | None


def execute(
    job: Job, *, jobs: int, executor: ProcessPoolExecutor | None, fits: FitCache | None, tick: Callable[[int], None]
) -> Done:
    """Run the job's work (``jobs`` 1 and no ``executor``: in this process, ``fits`` used; else in the pool)."""
    done = Done()
    if executor is None and jobs <= 1:
        in_process(job, fits, tick, done)
    else:
        in_pool(job, jobs, executor, tick, done)
    done.runs = {m: done.runs[m] for m in job.work.models}  # in the order asked for, whatever finished first
    return done


def in_process(job: Job, fits: FitCache | None, tick: Callable[[int], None], done: Done) -> None:
    """One process: each model's fits in a thread (``forecasts.fit_threaded``) while this one replays."""
    ctx, work, target_miss = job.ctx, job.work, job.target_miss

    def meanwhile() -> None:
        done.evaluated.extend(evaluate_batch(ctx, work.free, None, target_miss))
        tick(len(work.free))

    fitted = fit_threaded(
        [(job.series, m, job.start, job.end, dict(work.fit_kw[m], fits=fits)) for m in work.models], meanwhile
    )
    for m, (mr, packed) in zip(work.models, fitted):
        tick(work.refits)
        done.fitted(m, mr, packed)
        for qq, batch in work.by_model.get(m, {}).items():
            done.evaluated += evaluate_batch(ctx, batch, packed.only([qq]), target_miss)
            tick(len(batch))


def in_pool(job: Job, jobs: int, executor: ProcessPoolExecutor | None, tick: Callable[[int], None], done: Done) -> None:
    """Worker processes: every fit and the model-free chunks at once, a model's chunks as its curves arrive."""
    ctx, work, target_miss = job.ctx, job.work, job.target_miss
    own = executor is None
    pool = executor or ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("forkserver"))
    try:
        pending: dict[Future, tuple] = {}
        for m in work.models:
            pending[pool.submit(fit_task, job.series, m, job.start, job.end, work.fit_kw[m])] = ("fit", m)
        for chunk in _chunks(work.free, 8):
            pending[pool.submit(evaluate_batch, ctx, chunk, None, target_miss)] = ("var", len(chunk))
        while pending:
            finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for f in finished:
                kind, what = pending.pop(f)
                if kind == "var":
                    done.evaluated += f.result()
                    tick(what)
                    continue
                mr, packed = f.result()
                tick(work.refits)
                done.fitted(what, mr, packed)
                for qq, batch in work.by_model.get(what, {}).items():
                    part = packed.only([qq])
                    for chunk in _chunks(batch, 6):
                        pending[pool.submit(evaluate_batch, ctx, chunk, part, target_miss)] = ("var", len(chunk))
    finally:
        if own:
            pool.shutdown(wait=True, cancel_futures=True)


def _chunks(batch: list, size: int) -> list[list]:
    """``batch`` in chunks of about ``size``, never splitting the variants that share a stage-1 sequence."""
    groups: dict[tuple, list] = {}
    for item in batch:
        v = item[0]
        groups.setdefault(v.stage1_key(), []).append(item)
    out: list[list] = []
    for g in groups.values():
        if out and len(out[-1]) + len(g) <= size:
            out[-1].extend(g)
        else:
            out.append(list(g))
    return out

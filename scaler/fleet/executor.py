"""Where a fleet's jobs run: a local process pool (default) or Ray tasks, with the per-workload result cache.

``run(jobs, ...)`` first takes every job whose input hash is in the cache,
then runs the rest and stores each result as it arrives (so a crashed run,
rerun, does only what is missing), and returns the ``Tuned`` in the jobs'
order. ``progress(tuned)`` is called once per job, cached ones included.

Ray (``ray_address``): each job is one Ray task (``num_cpus=1``). Ray retries
a task whose worker died (``max_retries``) and, with ``retry_exceptions``, one
that raised: ``tune_one`` returns bad input as data, so what raises is
unexpected (a lost worker's effects, memory) and worth the retry. At most
``IN_FLIGHT_PER_CPU`` tasks per cluster CPU are submitted at a time, so a
thousand workloads' points are not all in the object store at once.
``"local"`` starts a local Ray cluster of ``workers`` CPUs for the run;
``"auto"`` joins the running cluster (``ray start``), any other value is a
cluster address; an already initialised Ray (a test's) is used as it is.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Sequence

from .jobs import Cache, Job, Tuned, input_hash, tune_one
from .workloads import FleetError

MAX_RETRIES = 3  # Ray task retries (worker lost, or an unexpected exception)
IN_FLIGHT_PER_CPU = 4

Task = Callable[[Job], Tuned]


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover (not Linux)
        return os.cpu_count() or 1


def run(jobs: Sequence[Job], *, cache: Cache | None = None, ray_address: str | None = None,
        workers: int | None = None, progress: Callable[[Tuned], None] | None = None,
        task: Task = tune_one) -> list[Tuned]:
    """Every job's ``Tuned``, from the cache or computed (``workers`` processes or Ray CPUs; None: the cores)."""
    note = progress or (lambda t: None)
    hashes = [input_hash(j) for j in jobs]
    out: list[Tuned | None] = [None] * len(jobs)
    todo: list[int] = []
    for i, h in enumerate(hashes):
        hit = cache.get(h) if cache is not None else None
        if hit is not None and hit.key == jobs[i].key:
            out[i] = hit
            note(hit)
        else:
            todo.append(i)
    n = usable_cores() if workers is None else max(1, int(workers))
    results = (_ray(jobs, todo, ray_address, n, task) if ray_address else _local(jobs, todo, n, task))
    for i, t in results:
        if cache is not None:
            cache.put(hashes[i], t)
        out[i] = t
        note(t)
    return [t for t in out if t is not None]


def call(task: Task, job: Job) -> Tuned:
    """``task(job)``: the Ray task (a task may be any picklable callable, not only a function)."""
    return task(job)


def _failed(job: Job, e: BaseException) -> Tuned:
    return Tuned(job.key, None, None, f"{type(e).__name__}: {_short(str(e))}")


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _local(jobs: Sequence[Job], todo: list[int], workers: int, task: Task):
    if not todo:
        return
    if workers <= 1 or len(todo) == 1:
        for i in todo:
            try:
                yield i, task(jobs[i])
            except Exception as e:
                yield i, _failed(jobs[i], e)
        return
    pool = ProcessPoolExecutor(max_workers=min(workers, len(todo)),
                               mp_context=multiprocessing.get_context("forkserver"))
    try:
        pending: dict[Future, int] = {pool.submit(task, jobs[i]): i for i in todo}
        while pending:
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for f in done:
                i = pending.pop(f)
                try:
                    yield i, f.result()
                except BrokenProcessPool as e:  # a worker died: the pool is gone, the rest cannot run here
                    yield i, _failed(jobs[i], e)
                except Exception as e:
                    yield i, _failed(jobs[i], e)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _ray(jobs: Sequence[Job], todo: list[int], address: str, workers: int, task: Task):
    try:
        import ray
    except ImportError:
        raise FleetError("--ray needs Ray: pip install 'forescale[fleet]'") from None
    own = not ray.is_initialized()
    if own and todo:
        try:
            if address == "local":
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise FleetError(f"--ray {address}: cannot reach a Ray cluster ({_short(str(e), 200)}); accepted: "
                             "local (start one here), auto (the cluster `ray start` runs), or its address") from None
    try:
        if not todo:
            return
        remote = ray.remote(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=True)(call)
        cpus = int(ray.cluster_resources().get("CPU", workers)) or 1
        window = max(2, IN_FLIGHT_PER_CPU * cpus)
        queue = list(todo)
        pending: dict = {}
        while queue or pending:
            while queue and len(pending) < window:
                i = queue.pop(0)
                pending[remote.remote(task, jobs[i])] = i
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i = pending.pop(ref)
                try:
                    yield i, ray.get(ref)
                except Exception as e:  # retries exhausted: RayTaskError, WorkerCrashedError, ...
                    yield i, _failed(jobs[i], e)
    finally:
        if own and ray.is_initialized():
            ray.shutdown()

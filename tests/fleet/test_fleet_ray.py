"""Ray (a local cluster of 2 CPUs) against the local process pool: same selections, retries, the cache.

The workloads are three shapes of two and a half days at 1 min (a daily
ramp, the same shifted and tripled, a weekly-free noisy plateau with bursts),
tuned with a cheap model over a 12 h span: the same code path as a real
fleet (``tune_one`` = ``forescale tune`` on one series), small enough to
keep this module well under a minute.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import ray

from scaler.fleet import executor
from scaler.fleet.jobs import Cache, Job, Tuned, tune_one
from scaler.replay import engine, variants

T0 = 1_700_006_400
SETTINGS = engine.Settings(model="seasonal_naive", span_seconds=43200.0, history_seconds=86400.0,
                           refit_seconds=7200.0, qps_per_replica=10.0)


def _shapes() -> dict[str, np.ndarray]:
    t = T0 + 60.0 * np.arange(int(2.5 * 1440))
    hour = (t % 86400) / 3600

    def ramp(shift):
        h = (hour - shift) % 24
        return 20 + 173 / (1 + np.exp(-(h - 8) * 6)) - 173 / (1 + np.exp(-(h - 18) * 6))

    rng = np.random.default_rng(7)
    bursts = 40 + rng.gamma(2.0, 3.0, t.size) + 120 * (rng.random(t.size) < 0.01)
    return {"t": t, "ramp": ramp(0), "shifted": 3 * ramp(5), "bursty": bursts}


def jobs() -> list[Job]:
    s = _shapes()
    return [Job((("service", name),), s["t"], s[name], 60.0, "", SETTINGS, variants.Grid(), 0.005)
            for name in ("ramp", "shifted", "bursty")]


def fingerprint(t: Tuned) -> tuple:
    """Everything the selection and the frontier say, exactly."""
    assert t.error is None, t.error
    p = t.selection.point
    return (t.key, p.variant, p.miss, p.cost, p.cost_ratio, t.selection.met,
            tuple((q.variant, q.outcome, q.pareto) for q in t.result.points))


class FailOnce:
    """A task that fails the first time it runs anywhere (a marker file says it did), then tunes."""

    def __init__(self, marker: Path, how: str):
        self.marker, self.how = marker, how

    def __call__(self, job: Job) -> Tuned:
        if not self.marker.exists():
            self.marker.write_text(str(os.getpid()))
            if self.how == "exit":
                os._exit(1)  # the worker process dies mid-task, as a lost node's would
            raise RuntimeError("injected failure")
        return tune_one(job)


def must_not_run(job: Job) -> Tuned:
    raise AssertionError(f"{job.title} was recomputed although its result is cached")


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("cache"))
    seen = []
    out = executor.run(jobs(), cache=cache, workers=2, progress=seen.append)
    assert len(seen) == 3 and not any(t.cached for t in out)
    return out, cache


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # the test's task classes travel by value (the workers cannot import test modules)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        yield ray
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        ray.shutdown()


def test_ray_gives_the_local_pools_selections(local, cluster):
    pool, _ = local
    on_ray = executor.run(jobs(), ray_address="auto", workers=2)
    assert [fingerprint(t) for t in on_ray] == [fingerprint(t) for t in pool]
    # the shapes are different enough that the selections are not all one configuration
    assert len({t.selection.point.variant for t in pool}) >= 2


@pytest.mark.parametrize("how", ["raise", "exit"])
def test_a_task_that_fails_once_is_retried_by_ray_with_the_same_result(local, cluster, tmp_path, how):
    pool, _ = local
    marker = tmp_path / "failed-once"
    got = executor.run(jobs()[:1], ray_address="auto", task=FailOnce(marker, how))
    assert marker.exists()  # it did fail once ...
    assert fingerprint(got[0]) == fingerprint(pool[0])  # ... and the retry's result is the same


def test_rerun_takes_every_result_from_the_cache(local):
    pool, cache = local
    again = executor.run(jobs(), cache=cache, workers=2, task=must_not_run)
    assert all(t.cached for t in again)
    assert [fingerprint(t) for t in again] == [fingerprint(t) for t in pool]
    # one workload's traffic changes: only that one is recomputed
    changed = jobs()
    j = changed[2]
    changed[2] = Job(j.key, j.t, j.y * 1.5, j.step, j.hygiene, j.settings, j.grid, j.target_miss)
    mixed = executor.run(changed, cache=cache, workers=1, task=must_not_run)
    assert [t.cached for t in mixed] == [True, True, False]
    assert mixed[2].error == "AssertionError: service=bursty was recomputed although its result is cached"

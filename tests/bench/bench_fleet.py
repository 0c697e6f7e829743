"""A fleet of 50 workloads x 21 days: the local process pool against Ray (a local cluster), and the cost per workload.

The workloads are 21-day windows of the bundled WorldCup98 trace (1 min),
each ending at another hour of its last week (a phase shift) and scaled
x0.5..x4, tuned exactly as ``forescale tune --by`` tunes them
(``scaler.fleet.jobs.tune_one``: every family over its knob grid, the
selection at 0.5 % missed). Both backends get the same number of CPUs
(``--workers``); Ray's time is given with and without starting its cluster.
The selections of both backends must be identical (checked). Then the
per-workload cost, the memory of a task, the Prometheus range-query volume
of 1,000 workloads, and the sizing rule derived from them.

``--default-model`` also times one workload with ``forescale tune``'s own
defaults (Prophet, 7 d simulated, refit 2 h): the per-workload cost of a
real fleet run.

Run: ``.venv/bin/python tests/bench/bench_fleet.py [--workloads 50] [--workers 2] [--span 2d] [--model seasonal_naive]
[--abba] [--default-model]``
"""

from __future__ import annotations

import argparse
import time


def fleet(n: int, days: float):
    from scaler.cli import traces
    from scaler.fleet.workloads import Workload

    s = traces.bundled_trace().series
    out = []
    for i in range(n):
        end = len(s) - 60 * (i * 7 % 168)  # a different hour of the last week
        keep = int(days * 86400 / s.step)
        t, y = s.t[end - keep:end], s.y[end - keep:end] * (0.5, 1.0, 2.0, 4.0)[i % 4]
        from forecaster.base import Series

        out.append(Workload((("service", f"svc-{i:03d}"),), Series(t, y, s.step), ""))
    return out


def fingerprint(t) -> tuple:
    p = t.selection.point
    return t.key, p.variant, p.miss, p.cost


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", type=int, default=50)
    ap.add_argument("--days", type=float, default=21.0)
    ap.add_argument("--workers", type=int, default=2, help="processes of the pool = CPUs of the Ray cluster")
    ap.add_argument("--span", default="2d", help="simulated span per workload (the rest is history)")
    ap.add_argument("--model", default="seasonal_naive", help="the predictive family's model")
    ap.add_argument("--abba", action="store_true", help="pool, Ray, Ray, pool (fairer on a machine whose load drifts)")
    ap.add_argument("--default-model", action="store_true",
                    help="also time one workload with tune's defaults (prophet, 7d simulated)")
    a = ap.parse_args()

    import ray

    from scaler.fleet import executor
    from scaler.fleet.jobs import make_job, tune_one
    from scaler.fleet.workloads import chunk_windows
    from scaler.replay import engine, variants
    from scaler.spec import parse_duration

    ws = fleet(a.workloads, a.days)
    settings = engine.Settings(model=a.model, span_seconds=parse_duration(a.span), refit_seconds=7200.0)
    jobs = [make_job(w, settings, variants.Grid(), 0.005, None) for w in ws]
    print(f"fleet     {len(jobs)} workloads x {a.days:g} d at 60 s ({len(ws[0].series)} points each), "
          f"{len(variants.variants(variants.Grid(), settings))} configurations each, model {a.model}, "
          f"{a.span} simulated; {a.workers} CPUs for each backend")

    def pool_pass():
        t0 = time.perf_counter()
        out = executor.run(jobs, workers=a.workers)
        assert not any(t.error for t in out), [t.error for t in out if t.error]
        return time.perf_counter() - t0, out

    def ray_pass():
        t0 = time.perf_counter()
        out = executor.run(jobs, ray_address="auto", workers=a.workers)
        assert not any(t.error for t in out), [t.error for t in out if t.error]
        return time.perf_counter() - t0, out

    # ABBA (pool, Ray, Ray, pool) with --abba: a load that drifts over the run weighs on both backends alike
    walls: dict[str, list[float]] = {"pool": [], "ray": []}
    results: dict[str, list] = {"pool": [], "ray": []}
    w, out = pool_pass()
    walls["pool"].append(w)
    results["pool"].append(out)
    t0 = time.perf_counter()
    ray.init(num_cpus=a.workers, include_dashboard=False, log_to_driver=False)
    t_init = time.perf_counter() - t0
    try:
        for _ in range(2 if a.abba else 1):
            w, out = ray_pass()
            walls["ray"].append(w)
            results["ray"].append(out)
    finally:
        ray.shutdown()
    if a.abba:
        w, out = pool_pass()
        walls["pool"].append(w)
        results["pool"].append(out)
    local = results["pool"][0]
    same = all([fingerprint(x) for x in r] == [fingerprint(x) for x in local]
               for r in results["pool"] + results["ray"])
    t_local, t_ray = sum(walls["pool"]), sum(walls["ray"])
    k = len(walls["pool"])

    task = sorted(x.seconds for r in results["pool"] for x in r)
    task_ray = [x.seconds for r in results["ray"] for x in r]
    rss = max(x.peak_rss_mib for r in results["pool"] + results["ray"] for x in r)
    per = sum(task) / len(task)
    print(f"local     {' + '.join(f'{x:.1f}' for x in walls['pool'])} s wall "
          f"({t_local / k / len(jobs):.2f} s per workload on {a.workers} CPUs)")
    print(f"ray       {' + '.join(f'{x:.1f}' for x in walls['ray'])} s wall for the tasks + {t_init:.1f} s to start "
          f"the local cluster once")
    print(f"overhead  Ray / pool: {t_ray / t_local:.2f}x (tasks only), {(t_ray + t_init) / t_local:.2f}x "
          f"(with the cluster start); goal <= 1.2x")
    print(f"same      identical selections on every pass of both backends: {same}")
    print(f"task      {per:.2f} s per workload in the pool (median {task[len(task) // 2]:.2f}, max {task[-1]:.2f}), "
          f"{sum(task_ray) / len(task_ray):.2f} s as Ray tasks; peak RSS of a worker {rss:.0f} MiB")
    if not same:
        raise SystemExit("the backends disagree")

    n, step = 1000, 60.0
    end = 21 * 86400.0
    windows = chunk_windows(0.0, end, step, n)
    points = int(end / step) + 1
    print(f"prom      1,000 workloads x 21 d at 60 s: {len(windows) + 1} requests "
          f"({len(windows)} range windows of <= {round((windows[0][1] - windows[0][0]) / step) + 1} points per "
          f"series + 1 instant query), {n * points / 1e6:.1f} M samples in all")
    if a.default_model:
        d = engine.Settings()  # tune's defaults but for the span and refit, which tune sets
        d = engine.Settings(span_seconds=parse_duration("7d"), refit_seconds=7200.0, model=d.model)
        t0 = time.perf_counter()
        one = tune_one(make_job(ws[0], d, variants.Grid(), 0.005, None))
        print(f"default   one workload with tune's defaults ({d.model}, 7d simulated, refit 2h): "
              f"{time.perf_counter() - t0:.1f} s in one process, peak RSS {one.peak_rss_mib:.0f} MiB, "
              f"chose {one.selection.point.label}")


if __name__ == "__main__":
    main()

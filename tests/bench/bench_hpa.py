"""The HPA emulation: the compiled loop (scaler/replay/hpaloop.py) against the pure-Python one it replaced.

The old ``run_hpa`` is read from git (tests/support/oldhpa.py: commit BASE, nothing of it in the product),
and both run alternately in this process on the bundled trace's last 28 days at 15 s ticks (161,280
ticks), with the values of reactive KEDA (the observed rate) and of a spikier sequence, at the default
settings and with a 60 s scale-down period. Prints wall times per replay, the old/new ratio and whether
replicas and ready pods are identical tick for tick. The first (compiling) call is timed separately.

Run: ``PYTHONPATH=. .venv/bin/python tests/bench/bench_hpa.py``
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scaler.cli import traces  # noqa: E402
from scaler.replay import prepare  # noqa: E402
from scaler.replay.hpa import Hpa, poll_ticks  # noqa: E402
from scaler.replay.keda import run_hpa  # noqa: E402
from scaler.replay.scenario import scenario  # noqa: E402
from support import oldhpa  # noqa: E402

ROUNDS = 3


def main() -> None:
    t_first = time.perf_counter()
    tiny = scenario(np.arange(40) * 15.0, np.full(40, 5.0), 15.0, 0.0, 600.0, cold_start_seconds=60, qps_per_replica=1)
    run_hpa(tiny, np.full(20, 5.0), Hpa(target=1.0))
    first = time.perf_counter() - t_first  # numba: compile, or load from its cache
    old = oldhpa.load()
    s = traces.bundled_trace().series
    q = prepare.nice_round(float(np.nanmax(s.y)) / 20)
    start = float(s.t[0]) + 3600.0
    sc = scenario(s.t, s.y, s.step, start, float(s.t[-1] + s.step), cold_start_seconds=180, qps_per_replica=q)
    cases = []
    for label, kw in (("defaults", {}), ("scale-down 50 %/60 s, window 120 s",
                                         dict(scale_down_percent=50.0, scale_down_period_seconds=60.0,
                                              scale_down_window_seconds=120.0))):
        h = Hpa(target=q, **kw)
        obs = sc.observed[poll_ticks(sc.n, h)]
        rng = np.random.default_rng(0)
        spiky = obs * rng.choice([0.7, 1.0, 1.6], obs.size)
        for vlabel, v in (("observed", obs), ("spiky", spiky)):
            cases.append((f"{label}, {vlabel}", h, old.Hpa(**{k: getattr(h, k) for k in old.Hpa.__dataclass_fields__}),
                          v))
    print(f"bundled trace: {sc.n} ticks of 15 s ({sc.n * 15 / 86400:.1f} d); first call (numba compile or cache "
          f"load) {first:.2f} s")
    print(f"{'case':<44}{'old s':>9}{'new s':>9}{'old/new':>9}  identical")
    t_old_all = t_new_all = 0.0
    for label, h, oh, v in cases:
        t_old = t_new = 0.0
        same = True
        for _ in range(ROUNDS):  # alternately, so that machine load hits both alike
            t0 = time.perf_counter()
            a = old.run_hpa(sc, v, oh)
            t1 = time.perf_counter()
            b = run_hpa(sc, v, h)
            t2 = time.perf_counter()
            t_old += t1 - t0
            t_new += t2 - t1
            same &= bool(np.array_equal(a.replicas, b.replicas) and np.array_equal(a.ready, b.ready))
        t_old_all += t_old
        t_new_all += t_new
        print(f"{label:<44}{t_old / ROUNDS:>9.4f}{t_new / ROUNDS:>9.4f}{t_old / t_new:>9.1f}  {same}")
    print(f"{'all':<44}{t_old_all / ROUNDS:>9.4f}{t_new_all / ROUNDS:>9.4f}{t_old_all / t_new_all:>9.1f}")


if __name__ == "__main__":
    main()

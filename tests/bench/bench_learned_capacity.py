"""Capacity learned online, on a replayed day (issue 37, docs/llm.md): the server's estimator against the capacity
the replicas really have, and what planning on the learned figure does to the missed share.

The day: the last day of ServeGen m-small (Alibaba Cloud Model Studio, Apache-2.0; the shared trace next to the
repository), 2 days of history before it, replayed with reactive KEDA, predictive (linear_trend fits) and a hot
pool sized for the peak (keep_alive), all planned on qpsPerReplica 200, T_cold 180 s. The world: the trace's
requests, each ready replica sustaining ``200 / f`` req/s (what a loadtest of it measures); ``f`` > 1 is a figure
set too high. Requests beyond the ready capacity wait in a FIFO queue; every
30 s the learner reads what the server's queries would (the served rate over 2 min, the waiting requests, the
ready replicas; ``scaler.replay.saturation``), with Poisson arrivals and a per-tick service error of ``noise``.

Printed per (f, noise): the share of samples saturated, the samples counted, the learned figure / the true one,
the ratio exported and the figure put in force; then, at f = 1.3, each policy's missed share configured (200),
planning on the learned figure (``capacity: learned``: the plan in replicas of the figure in force), and
configured correctly (153.8), with their replica-hours.

Run: ``.venv/bin/python tests/bench/bench_learned_capacity.py``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scaler.replay import engine, variants  # noqa: E402
from scaler.replay.saturation import replay_learner  # noqa: E402
from support import shared_traces as st  # noqa: E402

DAY = 86400.0


def settings(qps: float, f: float, policies=("reactive",)) -> engine.Settings:
    return engine.Settings(cold_start_seconds=180.0, qps_per_replica=qps, span_seconds=DAY, history_seconds=2 * DAY,
                           min_replicas=1, max_replicas=1000, policies=policies, capacity_factor=f,
                           model="linear_trend")


def main() -> int:
    t0 = time.perf_counter()
    name, rel, qps, days = st.TRACE_SPECS[0]
    tr = st.load(name, rel, days)
    pols = ("reactive", "predictive", "keep_alive")
    base = engine.run(tr, settings(qps, 1.0, pols), variants.defaults(settings(qps, 1.0, pols)))
    sc = base.scenario
    print(f"{name}: the last day at qpsPerReplica {qps:g}, {sc.n} ticks of {sc.tick:g} s; requests as the trace has "
          "them, each replica serving 200 / f")
    print(f"{'policy':>11} {'f':>4} {'noise':>6} {'saturated':>10} {'samples':>8} {'learned/true':>13} {'ratio':>7} "
          f"{'in force':>9}")
    learned = {}
    for p in pols:
        for f in (1.3, 1.0, 0.8):
            for noise in (0.0, 0.1, 0.2):
                rep = replay_learner(sc.demand, base.policies[p].timeline.ready, sc.tick, true_capacity=qps / f,
                                     configured=qps, noise=noise)
                s = rep.learned
                est = "-" if s.estimate is None else f"{s.estimate / (qps / f):.4f}"
                ratio = "-" if s.ratio is None else f"{s.ratio:.3f}"
                print(f"{p:>11} {f:>4g} {noise:>6g} {100 * rep.saturated_share:>9.1f}% {s.samples:>8} {est:>13} "
                      f"{ratio:>7} {s.in_force:>9.1f}")
                learned[(p, f, noise)] = s
    f = 1.3
    s = learned[("keep_alive", f, 0.1)]
    print(f"\nat f = {f:g} (the replicas serve {qps / f:.1f}, the trigger says {qps:g}); learned {s.estimate:.1f} "
          f"(keep_alive's episodes, noise 0.1), in force {s.in_force:.1f}:")
    wrong = engine.run(tr, settings(qps, f, pols), variants.defaults(settings(qps, f, pols)))
    # capacity: learned plans in replicas of the figure in force: as if qpsPerReplica were it, the replicas really
    # serving qps / f, i.e. in_force / (qps / f) of it
    k = s.in_force * f / qps
    fixed = engine.run(tr, settings(s.in_force, k, pols), variants.defaults(settings(s.in_force, k, pols)))
    right = engine.run(tr, settings(qps / f, 1.0, pols), variants.defaults(settings(qps / f, 1.0, pols)))
    print(f"{'policy':>12} {'missed %: configured 200':>25} {'learned':>8} {'correct':>8}   replica-h: the same three")
    for p in pols:
        a, b, c = (x.policies[p].outcome for x in (wrong, fixed, right))
        print(f"{p:>12} {100 * a.underprovisioned_fraction:>25.3f} {100 * b.underprovisioned_fraction:>8.3f} "
              f"{100 * c.underprovisioned_fraction:>8.3f}   {a.replica_hours:.0f}, {b.replica_hours:.0f}, "
              f"{c.replica_hours:.0f}")
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

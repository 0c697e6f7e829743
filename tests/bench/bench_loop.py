"""The closed loop: the wrong-capacity benchmark of issue 37 (docs/llm.md, docs/results.md).

With ``qpsPerReplica`` (and ``tokensPerReplica``) overstated by 30 % -- a replica really sustains 1/1.3 of what the
trigger says (``Settings.capacity_factor``: the judged load is 1.3 x the trace's) -- each policy runs open loop
and closed loop (``Settings.loop``: the server's ``scaler.feedback`` rule against the replay's queue), and open
and closed loop with the capacity right, all in one process on one trace. Printed per policy: missed % and its
ratio to the correctly configured open loop's, replica-hours and their ratio to it, TTFT and ITL p95, the calls
the loop raised. The acceptance: the closed loop's miss with the wrong capacity within 1.5 x the correctly
configured run's, where the open loop misses several times more.

Traces: the bundled WorldCup98 (the default backtest's: its last 2 days) and the bundled Azure LLM code trace
(45 min at 10 s, with its token columns), and the shared ServeGen m-small (its last 2 days; next to the
repository in ``../shared/data/traces``; skipped when absent).

``--learned`` adds ``capacity: learned`` replayed (``Settings.capacity_learned``: the server's estimator fed at
every call, the plan in replicas of the figure it learned before the call; no loop target) with the capacity wrong
and right, and both together (learned + the loop) with it wrong: the same table, the learned figure at the end in
the last column's note.

Run: ``.venv/bin/python tests/bench/bench_loop.py [--model M] [--traces worldcup,azure,servegen]
[--queue-target Q] [--ttft-target S] [--factor F] [--step X --half-life S] [--learned]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the shared traces next to the repository (a worktree of it sits one level further down)
SHARED = next((p / "shared" / "data" / "traces" for p in (ROOT.parent, ROOT.parent.parent)
               if (p / "shared" / "data" / "traces").is_dir()), ROOT.parent / "shared" / "data" / "traces")
SERVEGEN = SHARED / "servegen_m-small" / "per_10min.csv"
AZURE = ROOT / "scaler" / "data" / "azure_llm_code" / "per_10s.csv"


def traces(names: list[str]):
    """(name, Trace, Settings keywords) per trace asked for and present."""
    from scaler.cli.traces import bundled_trace, load_csv
    from scaler.tokens import TokenCapacity

    out = []
    for n in names:
        if n == "worldcup":
            out.append(("worldcup98 (bundled), 2 d", bundled_trace(), dict(span_seconds=2 * 86400.0)))
        elif n == "azure":
            out.append(("azure code (bundled), 45 min at 10 s, tokens", load_csv(AZURE),
                        dict(span_seconds=2700.0, history_seconds=600.0, cold_start_seconds=60.0,
                             qps_per_replica=2.0, tokens=TokenCapacity(100.0, 0.02), refit_seconds=300.0)))
        elif n == "servegen":
            if not SERVEGEN.is_file():
                print(f"(servegen: not at {SERVEGEN}, skipped)")
                continue
            out.append(("servegen m-small (shared), 2 d", load_csv(SERVEGEN),
                        dict(span_seconds=2 * 86400.0, qps_per_replica=100.0)))
        else:
            raise SystemExit(f"unknown trace {n!r}: worldcup, azure, servegen")
    return out


# (label, capacity factor: the wrong one or 1, the loop on, capacity: learned)
RUNS = (("open, right", 1.0, False, False), ("open, wrong", None, False, False), ("closed, wrong", None, True, False),
        ("closed, right", 1.0, True, False), ("learned, wrong", None, False, True), ("learned, right", 1.0, False, True),
        ("both, wrong", None, True, True))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="prophet")
    ap.add_argument("--traces", default="worldcup,azure,servegen")
    ap.add_argument("--policies", default="reactive,predictive")
    ap.add_argument("--factor", type=float, default=1.3)
    ap.add_argument("--queue-target", type=float, default=2.0, help="0: no queue target")
    ap.add_argument("--ttft-target", type=float, default=None)
    ap.add_argument("--step", type=float, default=None)
    ap.add_argument("--half-life", type=float, default=None)
    ap.add_argument("--learned", action="store_true", help="also capacity: learned (wrong, right, + the loop)")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from scaler import feedback
    from scaler.replay import engine, llm, variants

    rule = feedback.RULE
    if a.step is not None:
        rule = dataclasses.replace(rule, step=a.step)
    if a.half_life is not None:
        rule = dataclasses.replace(rule, half_life_seconds=a.half_life)
    targets = feedback.Targets(queue=a.queue_target or None, ttft=a.ttft_target)
    print(f"loop: {targets}; rule {rule}; capacity overstated x{a.factor:g}; model {a.model}")
    for name, tr, kw in traces(a.traces.split(",")):
        rows = {}
        start = time.perf_counter()
        for label, f, loop, learned in RUNS[:len(RUNS) if a.learned else 4]:
            s = engine.Settings(model=a.model, policies=tuple(a.policies.split(",")), capacity_factor=f or a.factor,
                                loop=targets if loop else None, loop_rule=rule, capacity_learned=learned, **kw)
            r = engine.run(tr, s, variants.defaults(s), accuracy=False)
            for pol, p in r.policies.items():  # (the open loop on a trace without tokens: TTFT/ITL computed here)
                lm = p.llm or llm.figures(r.scenario, p.timeline, llm.Serving(s.itl_seconds))
                rows[(pol, label)] = (p.outcome, lm, p.reasons.get("feedback"), p.note.partition("capacity ")[2])
        print(f"\n{name} ({time.perf_counter() - start:.0f} s)")
        head = (f"{'policy':<12}{'run':<16}{'missed %':>10}{'x right':>9}{'replica-h':>11}{'x right':>9}"
                f"{'TTFT p95 s':>12}{'ITL p95 s':>11}{'raised':>8}")
        print(head)
        print("-" * len(head))
        for pol in a.policies.split(","):
            ref = rows[(pol, "open, right")][0]
            for label, *_ in RUNS[:len(RUNS) if a.learned else 4]:
                o, lm, raised, learnt = rows[(pol, label)]
                xm = o.underprovisioned_fraction / ref.underprovisioned_fraction if ref.underprovisioned_fraction else float("nan")
                print(f"{pol:<12}{label:<16}{100 * o.underprovisioned_fraction:>10.3f}{xm:>9.2f}{o.replica_hours:>11.1f}"
                      f"{o.replica_hours / ref.replica_hours:>9.3f}{lm.get('ttft_p95_s', float('nan')):>12.2f}"
                      f"{lm.get('itl_p95_s', float('nan')):>11.3f}{'-' if raised is None else raised:>8}"
                      + (f"  capacity {learnt}" if learnt else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Tokens as a load: the mix-shift benchmark of issue 37 (docs/llm.md), req/s alone against the binding load.

The trace: ServeGen m-small's requests per 10 min (14 days, Alibaba Cloud Model Studio, Apache-2.0), each interval
given the prompt and generated tokens per request of one minute of the Azure LLM code trace (CC-BY-4.0; its
minutes with at least 20 requests, taken in turn), and the generated tokens doubled from 08:00 to 14:00 of the
14th day (the output length doubles; the request rate does not move). Both traces are the shared ones, next to
the repository (``../shared/data/traces``); the product never reads them.

Each policy runs twice in one process: judged on the binding load of requests and tokens, scaling on req/s alone
(``--scale-on requests``) and on the binding load. Printed: missed % overall and during the shift, the TTFT p95
during the shift and over the whole replay (the replay's latency model, ``scaler.replay.llm``: the FIFO wait on
the ready capacity + one decode step + the prompt's prefill) against the SLO (``--slo-ttft``, 2 s: the p95 of the
requests that arrived in the shift), replica-hours and the ratio to the (token-aware) oracle. Then the predictive
policy again with the closed loop on TTFT (``--ttft-targets``: ``ttftTarget`` seconds, the server's rule replayed
call by call, ``scaler.replay.closedloop``), on both units; ``--open`` adds open-loop runs of it on the binding load
with other knobs (``quantile``, ``headroom``).

Run: ``.venv/bin/python tests/bench/bench_tokens.py [--model M] [--input-weight W] [--tokens-per-request K]
[--slo-ttft S] [--ttft-targets 2,4,8] [--open 'quantile=0.9;headroom=1.05']`` (about 2 minutes, 15 s a run more).
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data" / "traces"
SERVEGEN = SHARED / "servegen_m-small" / "per_10min.csv"
AZURE = SHARED / "azure_llm_2023_code" / "requests.csv"
SHIFT = (datetime(2000, 1, 16, 8), datetime(2000, 1, 16, 14))


def azure_minutes(min_requests: int = 20) -> list[tuple[float, float]]:
    """(prompt, generated) tokens per request of each Azure minute with at least ``min_requests`` requests."""
    by: dict[str, list[int]] = {}
    with open(AZURE, newline="") as fh:
        for r in csv.DictReader(fh):
            a = by.setdefault(r["TIMESTAMP"][:16], [0, 0, 0])
            a[0] += 1
            a[1] += int(r["ContextTokens"])
            a[2] += int(r["GeneratedTokens"])
    return [(a[1] / a[0], a[2] / a[0]) for _, a in sorted(by.items()) if a[0] >= min_requests]


def build(path: Path) -> dict:
    mix = azure_minutes()
    rows, shifted = [], 0
    with open(SERVEGEN, newline="") as fh:
        for i, r in enumerate(csv.DictReader(fh)):
            t = datetime.fromisoformat(r["timestamp"])
            n = r["count"]
            if n == "":
                rows.append((r["timestamp"], "", "", ""))
                continue
            c = float(n)
            p, g = mix[i % len(mix)]
            if SHIFT[0] <= t < SHIFT[1]:
                g, shifted = 2 * g, shifted + 1
            rows.append((r["timestamp"], f"{c:.0f}", f"{c * p:.0f}", f"{c * g:.0f}"))
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["timestamp", "count", "input_tokens", "output_tokens"])
        w.writerows(rows)
    p = np.array(mix)
    return {"minutes": len(mix), "prompt_mean": float(p[:, 0].mean()), "generated_mean": float(p[:, 1].mean()),
            "shifted_intervals": shifted}


def missed_in(result, name: str, t0: float, t1: float) -> float:
    sc, tl = result.scenario, result.policies[name].timeline
    sel = (sc.times >= t0) & (sc.times < t1)
    cap = tl.ready[sel] * sc.qps_per_replica
    d = sc.demand[sel]
    return float(np.maximum(d - cap, 0).sum() / d.sum())


def ttft_in(result, serving, name: str, t0: float, t1: float) -> tuple[float, float]:
    """The TTFT p95 (s) of the requests that arrived in ``[t0, t1)`` and of every request (the queue replayed
    from the start of the simulated span either way)."""
    from scaler.replay import llm

    sc, tl = result.scenario, result.policies[name].timeline
    cap = tl.ready.astype(np.float64) * sc.qps_per_replica
    a, b = (int(np.searchsorted(sc.times, t)) for t in (t0, t1))
    shift = llm.percentiles(sc.demand, cap, sc.tick, serving, ticks=(a, b))[0]
    return shift, llm.percentiles(sc.demand, cap, sc.tick, serving)[0]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="prophet")
    ap.add_argument("--input-weight", type=float, default=0.02)
    ap.add_argument("--tokens-per-request", type=float, default=80.0,
                    help="the budget per replica in weighted tokens per request of qpsPerReplica")
    ap.add_argument("--policies", default="reactive,predictive")
    ap.add_argument("--slo-ttft", type=float, default=2.0, help="the TTFT p95 objective in the shift, seconds")
    ap.add_argument("--ttft-targets", default="2,4,8", help="ttftTarget values of the closed-loop runs ('' none)")
    ap.add_argument("--open", default="", help="more open-loop runs of predictive on the binding load, e.g. "
                                               "'quantile=0.9;quantile=0.95;headroom=1.05' (Settings fields)")
    a = ap.parse_args(argv)
    if not SERVEGEN.is_file() or not AZURE.is_file():
        print(f"the shared traces are not at {SHARED}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    from scaler.cli.traces import load_csv
    from scaler.feedback import Targets
    from scaler.replay import engine, prepare, variants
    from scaler.tokens import TokenCapacity

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "mixshift.csv"
        info = build(path)
        tr = load_csv(path)
    qps = 100.0
    cap = TokenCapacity(qps * a.tokens_per_request, a.input_weight)
    w = a.input_weight * info["prompt_mean"] + info["generated_mean"]
    print(f"trace: ServeGen m-small requests x {info['minutes']} Azure code minutes' mix (mean {info['prompt_mean']:.0f} "
          f"prompt, {info['generated_mean']:.1f} generated tokens per request: {w:.1f} weighted at input weight "
          f"{a.input_weight:g}); output doubled in {info['shifted_intervals']} intervals of 10 min "
          f"({SHIFT[0]:%Y-%m-%d %H:%M} .. {SHIFT[1]:%H:%M})")
    print(f"replica: {qps:g} req/s and {cap.tokens_per_replica:g} weighted tokens/s ({a.tokens_per_request:g} per "
          f"request); model {a.model}")
    t0 = (SHIFT[0] - datetime(1970, 1, 1)) / timedelta(seconds=1)
    t1 = (SHIFT[1] - datetime(1970, 1, 1)) / timedelta(seconds=1)
    rows = []
    runs: list[tuple[str, str, dict]] = [(on, "-", {"policies": tuple(a.policies.split(","))})
                                         for on in ("requests", "binding")]
    runs += [(on, f"{float(x):g} s", {"loop": Targets(ttft=float(x))})
             for x in a.ttft_targets.split(",") if x for on in ("requests", "binding")]
    runs += [("binding", kv, {kv.split("=")[0]: float(kv.split("=")[1])}) for kv in a.open.split(";") if kv]
    for on, label, over in runs:
        s = engine.Settings(**{"qps_per_replica": qps, "model": a.model, "span_seconds": 2 * 86400.0,
                               "policies": ("predictive",), "tokens": cap, "token_aware": on == "binding", **over})
        start = time.perf_counter()
        r = engine.run(tr, s, variants.defaults(s), accuracy=False)
        serving = prepare.setup(tr, s).serving
        oh = r.oracle_hours
        for name, p in r.policies.items():
            o = p.outcome
            rows.append((name, on, label, 100 * o.underprovisioned_fraction, 100 * missed_in(r, name, t0, t1),
                         *ttft_in(r, serving, name, t0, t1), o.replica_hours, o.replica_hours / oh))
        print(f"  ({on}, {label}: {time.perf_counter() - start:.0f} s; {r.notes[-1]})")
    print(f"TTFT SLO: p95 <= {a.slo_ttft:g} s over the requests that arrived in the shift")
    print(f"{'policy':<12}{'scales on':<11}{'loop/open':>14}{'missed %':>10}{'in shift %':>12}{'TTFT p95 shift':>16}"
          f"{'SLO':>6}{'TTFT p95 all':>14}{'replica-h':>11}{'x oracle':>10}")
    for n, on, lp, m, ms, ts, ta, h, x in rows:
        ok = "met" if ts <= a.slo_ttft else "MISS"
        print(f"{n:<12}{on:<11}{lp:>14}{m:>10.3f}{ms:>12.3f}{ts:>16.3f}{ok:>6}{ta:>14.3f}{h:>11.0f}{x:>10.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Benchmark: what a user who sets nothing gets, week by week, on every shared trace.

The out-of-the-box configuration is two things (``scaler/spec.py`` DEFAULTS):

* the first week (``tuningMinHistory`` 7d): Prophet, quantile 0.8, level correction 4h, headroom 1;
* after it, ``tuning: auto`` at ``targetMiss: 0.25x`` within ``maxCostRatio: 1.3``: the server's own selection
  (``serve.tuning.run_job``'s calls: the server's families, the last 3 days of history simulated, refit 2 h,
  the targeted headroom search), made on the history before the scored week and then kept for all of it.

Walk-forward, so nothing is scored on the days it was chosen on: per trace the last 7 days are scored
(T_cold 180 s, minReplicaCount 1, HPA tolerance 0.1, the same traces and qps per replica as
``bench_anchors.py``), the tuned choice is made on the 14 days before them. Printed per trace: reactive
KEDA, the untuned default (and the previous default, quantile 0.9), the tuned choice, each as missed requests
and cost / the oracle's, and whether it halves reactive's miss at <= 1.3x the oracle's cost.

The server re-runs the selection every ``tuningInterval`` (24 h); choosing once per week, as here, is the
more pessimistic of the two (the choice never sees the scored week's first days).

Run (about 20-40 min on 2 busy cores): ``.venv/bin/python tests/bench/bench_default.py [--only NAME]``
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support.shared_traces import DAY, TRACE_SPECS, load, settings_for  # noqa: E402


def slice_days(tr, end: float, days: float):
    from forecaster.base import Series

    s = tr.series
    keep = (s.t >= end - days * DAY) & (s.t < end)
    return replace(tr, series=Series(s.t[keep], s.y[keep], s.step))


def server_choice(tr, qps: float, target: str):
    """The selection ``tuning: auto`` makes on this history with the default metadata (as ``run_job``)."""
    from scaler.misstarget import parse_miss_target
    from scaler.replay import engine, frontier, variants
    from scaler.serve.tuning import MIN_REFIT_SECONDS, SERVER_FAMILIES, SPAN_SECONDS
    from scaler.spec import DEFAULTS

    covered = float(tr.series.t[-1] - tr.series.t[0] + tr.series.step)
    s = replace(settings_for(qps), span_seconds=min(SPAN_SECONDS, covered / 2), refit_seconds=MIN_REFIT_SECONDS)
    grid = variants.Grid(families=SERVER_FAMILIES)
    r = engine.run(tr, s, variants.variants(grid, s), jobs=1, target_miss=parse_miss_target(target))
    sel = frontier.select(r.points, r.target_miss, float(DEFAULTS["maxCostRatio"]))
    return sel, r


def one_trace(name, rel, qps, days, target: str) -> dict:
    from scaler.replay import engine, variants

    tr = load(name, rel, days)
    end = float(tr.series.t[-1] + tr.series.step)
    t0 = time.perf_counter()
    sel, rt = server_choice(slice_days(tr, end - 7 * DAY, 14), qps, target)
    chosen = replace(sel.point.variant, searched=False)
    s = settings_for(qps)
    untuned = variants.default_variant("predictive", s)
    previous = replace(untuned, quantile=0.9)
    reactive = variants.default_variant("reactive", s)
    r = engine.run(tr, s, [reactive, untuned, previous, chosen], jobs=1)
    by = {p.variant: p for p in r.points}
    out = {"name": name, "reactive": by[reactive], "untuned": by[untuned], "previous": by[previous],
           "tuned": by[chosen], "choice": sel, "tune_target": rt.target_miss, "tune_reactive": rt.reactive_miss,
           "seconds": time.perf_counter() - t0, "target": target}
    return out


def verdict(p, reactive_miss: float) -> str:
    ok = p.miss <= 0.5 * reactive_miss + 1e-12 and p.cost_ratio <= 1.3 + 1e-9
    return "halves reactive at <= 1.3x" if ok else "FAILS"


def show(o: dict) -> None:
    rm = o["reactive"].miss
    print(f"\n== {o['name']} ({o['seconds']:.0f} s): scored on the last 7 days; reactive {100 * rm:.2f} % at "
          f"{o['reactive'].cost_ratio:.2f}x oracle")
    print(f"   tuned on the 14 days before: target {100 * o['tune_target']:.3f} % ({o['target']} reactive's "
          f"{100 * o['tune_reactive']:.3f} % there); chose {o['choice'].point.label} "
          f"({'met' if o['choice'].met else 'NOT MET'} in-sample: {100 * o['choice'].point.miss:.2f} % at "
          f"{o['choice'].point.cost_ratio:.2f}x)")
    for key, what in (("untuned", "first week: the default"), ("previous", "previous default (q0.9)"),
                      ("tuned", "after a week: tuned")):
        p = o[key]
        print(f"   {what:<26} {p.label:<40} {100 * p.miss:6.2f} % at {p.cost_ratio:.2f}x -> "
              f"{verdict(p, rm)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=None, help="one trace name (substring)")
    ap.add_argument("--target", default=None, help="targetMiss of the tuned choice [default: the metadata default]")
    a = ap.parse_args()
    from scaler.spec import DEFAULTS

    target = a.target or DEFAULTS["targetMiss"]
    from scaler.replay.forecasts import quiet_prophet_import

    quiet_prophet_import()
    rows = []
    for name, rel, qps, days in TRACE_SPECS:
        if a.only and a.only not in name:
            continue
        o = one_trace(name, rel, qps, days, target)
        show(o)
        rows.append(o)
        sys.stdout.flush()
    print(f"\n== summary (tuned at targetMiss {target}, maxCostRatio {DEFAULTS['maxCostRatio']}): halves reactive's "
          f"miss at <= 1.3x the oracle's cost, on the scored week")
    for key in ("untuned", "previous", "tuned"):
        n = sum(verdict(o[key], o["reactive"].miss).startswith("halves") for o in rows)
        print(f"   {key:<9} {n} of {len(rows)}")


if __name__ == "__main__":
    main()

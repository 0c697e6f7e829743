"""Benchmark: what the drift response buys, replayed with the server's own logic (``scaler.drift`` via
``scaler.replay.drift``).

Two parts:

* a level shift: the bundled WorldCup98 trace with its traffic doubled from the second simulated day on;
* ordinary days: the shared traces (``support.shared_traces``), where drift should rarely fire.

Per trace: the predictive policy (the backtest's default settings, model ``--model``) with and without the
drift response, as missed-request fraction and replica-hours, with the number of drift alarms and the
share of polls served by ``fallback_forecast_drift``. The replay refits on the schedule only (the server
refits at once on an alarm): the fallback lasts longer here than on the server.

Run: ``PYTHONPATH=$PWD .venv/bin/python tests/bench/bench_drift.py [--model seasonal_naive] [--days 7]``
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support.shared_traces import DAY, TRACE_SPECS, load, settings_for  # noqa: E402


def compare(tr, settings) -> dict:
    from scaler.policy import PolicyParams
    from scaler.replay import engine, prepare, variants
    from scaler.replay.drift import replay_drift

    r = engine.run(tr, settings, [variants.default_variant("predictive", settings)], jobs=1)
    su = prepare.setup(tr, settings)
    curves = r.models[settings.model].curves
    params = PolicyParams(mode="forecastAndScale", lead_seconds=su.lead.seconds, quantile=settings.quantile,
                          qps_per_replica=su.qps, headroom=settings.headroom, hpa_tolerance=settings.hpa_tolerance,
                          level_correction_seconds=settings.level_correction_seconds)
    step = tr.series.step
    off = replay_drift(su.scenario, su.hpa, params, curves, step=step, respond=False)
    on = replay_drift(su.scenario, su.hpa, params, curves, step=step, respond=True)
    polls = max(1, sum(on.reasons.values()))
    days = (su.end - su.start) / DAY
    return {"miss_off": off.outcome.underprovisioned_fraction, "miss_on": on.outcome.underprovisioned_fraction,
            "hours_off": off.outcome.replica_hours, "hours_on": on.outcome.replica_hours,
            "alarms": on.alarms, "alarms_per_day": on.alarms / days, "fallback_share": on.fallback_polls / polls,
            "first_alarm_after_start_h": ((on.alarm_times[0] - su.start) / 3600) if on.alarm_times else None,
            "start": su.start}


def row(name: str, c: dict) -> str:
    return (f"{name:28s} miss {c['miss_off']:.4f} -> {c['miss_on']:.4f}   replica-h {c['hours_off']:9.1f} -> "
            f"{c['hours_on']:9.1f} ({c['hours_on'] / c['hours_off']:.3f}x)   alarms {c['alarms']:3d} "
            f"({c['alarms_per_day']:.2f}/day)   fallback {100 * c['fallback_share']:.1f}% of polls")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="seasonal_naive")
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--only", default=None)
    a = ap.parse_args()
    from forecaster.base import Series
    from scaler.cli import traces

    t0 = time.perf_counter()
    wc = traces.bundled_trace()
    s = replace(settings_for(20.0), model=a.model, span_seconds=a.days * DAY)
    s_wc = replace(s, history_seconds=7 * DAY)
    if a.only in (None, "shift"):
        base = compare(wc, s_wc)
        y = wc.series.y.copy()
        shift_at = base["start"] + DAY  # the second simulated day
        y[wc.series.t >= shift_at] *= 2.0
        shifted = replace(wc, series=Series(wc.series.t, y, wc.series.step))
        print(row("worldcup98 (bundled)", base))
        for label, st in (("", s_wc), (", levelCorrection 0", replace(s_wc, level_correction_seconds=0.0))):
            c = compare(shifted, st)
            print(row(f"x2 from day 2{label}", c))
            if c["first_alarm_after_start_h"] is not None:
                print(f"  first alarm {60 * (c['first_alarm_after_start_h'] - 24):.0f} min after the shift")
    if a.only in (None, "shared"):
        for name, rel, qps, days in TRACE_SPECS:
            tr = load(name, rel, days)
            c = compare(tr, replace(s, qps_per_replica=qps))
            print(row(name, c))
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()

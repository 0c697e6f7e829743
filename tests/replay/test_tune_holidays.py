"""``tune`` chooses whether the holiday handling pays off: with ``holidays`` every forecast family is replayed with
and without it, the selection says which, and the printed metadata keeps or drops ``holidays``.

The traffic: every day the same ramp (20 req/s at night, 193 req/s from 08:00 to 18:00 UTC), except US
Thanksgiving, 2025-11-27, at a fifth of it. The simulated span is one day, Thursday 2025-12-04: one week after
Thanksgiving. The model is seasonal_naive with 21 days of history (>= 2 weeks: a weekly season).
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import yaml
from click.testing import CliRunner

from forecaster.base import Series
from scaler.cli import main
from scaler.replay import engine, frontier, variants
from scaler.replay.tune import NO_HOLIDAYS, tune
from scaler.serve.workload import Tuned
from scaler.spec import parse_metadata

STEP = 300.0
DAY = 86400.0
THANKSGIVING = 1764201600.0  # 2025-11-27T00:00:00Z
GRID = variants.Grid(families=("reactive", "predictive"))


def ramp(t: np.ndarray) -> np.ndarray:
    hour = (t % DAY) / 3600
    return 20 + 173 / (1 + np.exp(-(hour - 8) * 6)) - 173 / (1 + np.exp(-(hour - 18) * 6))


def trace(end: float, days: int = 29) -> engine.Trace:
    t = end - days * DAY + STEP * np.arange(int(days * DAY / STEP))
    y = ramp(t) * np.where((t >= THANKSGIVING) & (t < THANKSGIVING + DAY), 0.2, 1.0)
    return engine.Trace("thanksgiving", Series(t, y, STEP), "", "synthetic")


def settings(holidays: str = "US") -> engine.Settings:
    return engine.Settings(cold_start_seconds=600, qps_per_replica=10, model="seasonal_naive", history_seconds=21 * DAY,
                           refit_seconds=2 * 3600, span_seconds=DAY, holidays=holidays)


def test_tune_keeps_holidays_when_the_dip_would_be_copied_into_the_next_week():
    end = THANKSGIVING + 8 * DAY  # the span: 2025-12-04, a week after Thanksgiving
    tr = tune(trace(end), settings(), 0.001, None, grid=GRID)
    r, p = tr.result, tr.point
    kept = [q for q in r.points if q.variant.calendar is True]
    dropped = [q for q in r.points if q.variant.calendar is False]
    # every predictive grid configuration twice (and only those: reactive has no forecast)
    assert kept and {q.variant for q in kept if not q.variant.searched} == \
        {replace(q.variant, calendar=True) for q in dropped if not q.variant.searched}
    assert all(q.variant.model == "seasonal_naive" for q in kept + dropped)
    assert all(q.variant.calendar is None for q in r.points if q.policy == "reactive")
    assert set(r.models) >= {"seasonal_naive", "seasonal_naive" + NO_HOLIDAYS}
    # with the handling the source of 2025-12-04 is 2025-11-20 (the last ordinary Thursday): the same ramp, so the
    # forecast is the demand itself, its residuals are 0 (Thanksgiving's are substituted away) and q0.5 without
    # level correction at headroom 1 misses nothing (but float rounding); that is the choice, at the oracle's cost
    assert p.variant == variants.Variant("predictive", "seasonal_naive", 0.5, 0.0, 1.0, True, calendar=True)
    assert p.miss < 1e-6 and abs(p.cost_ratio - 1.0) < 0.01
    # without it the source is Thanksgiving, a fifth of the demand: below the observed rate, so the value is the
    # observed rate (the policy never plans below it) and the twin misses exactly what reactive KEDA with dead-band
    # compensation misses (a cold start behind every rise of the ramp)
    twin = next(q for q in r.points if q.variant == replace(p.variant, calendar=False))
    reactive = next(q for q in r.points if q.variant == variants.Variant("reactive", headroom=1.0, compensation=True))
    assert twin.miss > 0.005 and abs(twin.miss - reactive.miss) < 1e-12
    # the target without the handling takes a searched headroom of ~1.35 at ~1.3x the oracle's cost (1.29 with
    # KEDA asking at every HPA sync; 1.4 when the replay held each poll's value)
    off = frontier.select([q for q in r.points if q.variant.calendar is False], 0.001)
    assert off.met and off.point.variant.headroom > 1.2 and off.point.cost_ratio > 1.25
    assert p.variant.policy == "predictive" and p.variant.calendar is True and tr.selection.met
    assert tr.deployment().get("holidays") is None  # kept: the declared holidays stay in force
    # the forecast's accuracy with and without, on the span (all of it ordinary days)
    on, off = r.models["seasonal_naive"].scores, r.models["seasonal_naive" + NO_HOLIDAYS].scores
    assert on["mase"] < off["mase"]
    # both split on the same days (the span has none of them: all its cutoffs are ordinary)
    assert on["days"]["ordinary"]["n"] == off["days"]["ordinary"]["n"] > 0
    assert on["days"]["holiday_or_event"]["n"] == off["days"]["holiday_or_event"]["n"] == 0


def test_tune_drops_holidays_when_they_change_nothing():
    # 2025-10-14 .. 2025-11-10: no US holiday in the trace (Columbus Day is 10-13, Veterans Day 11-11), so the
    # forecasts with and without the handling are the same curves: every pair of points ties exactly, and the
    # selection's tie-break (the simpler configuration: without holiday handling) drops it
    end = 1762819200.0  # 2025-11-11T00:00:00Z
    tr = tune(trace(end, days=28), settings(), 0.001, None, grid=GRID)
    r, p = tr.result, tr.point
    pairs = {}
    for q in r.points:
        if q.variant.calendar is not None:
            pairs.setdefault(q.label.replace("no-holidays", "holidays"), []).append(q)
    assert pairs and all(len(v) == 2 and v[0].miss == v[1].miss and v[0].cost == v[1].cost for v in pairs.values())
    assert p.variant.calendar is False and "no-holidays" in p.label
    assert tr.deployment()["holidays"] == ""
    # the server's tuning: auto runs the declared spec with the choice applied: holidays cleared (TUNABLE)
    declared = parse_metadata({"serverAddress": "http://p:9090", "query": "q", "qpsPerReplica": "10",
                               "holidays": "US", "tuning": "auto"})[0]
    tuned = Tuned("k", tuple(tr.deployment().items()), p.label, str(p.variant.policy), 0.0, True, p.miss, 1.0)
    ran = tuned.apply(declared)
    assert declared.holidays == "US" and ran.holidays == "" and ran.model == "seasonal_naive"


def test_tune_cli_prints_which_and_the_metadata_says_it(tmp_path):
    end = THANKSGIVING + 8 * DAY
    tr = trace(end)
    csv = tmp_path / "t.csv"
    with open(csv, "w") as f:
        f.write("timestamp,qps\n")
        f.writelines(f"{int(a)},{b:.4f}\n" for a, b in zip(tr.series.t, tr.series.y))
    args = ["tune", str(csv), "--model", "seasonal_naive", "--span", "1d", "--history", "21d", "--refit", "2h",
            "--step", "5m", "--qps-per-replica", "10", "--cold-start", "600", "--target-miss", "0.001", "--jobs", "1",
            "--no-progress"]
    res = CliRunner().invoke(main, args + ["--holidays", "US"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "holidays  US kept: the holiday handling pays off" in res.stdout
    assert "# US kept" in res.stdout  # the comment above the ScaledObject
    block = res.stdout[res.stdout.index("apiVersion"):]
    md = yaml.safe_load(block.split("\n\n")[0])["spec"]["triggers"][0]["metadata"]
    assert md["holidays"] == "US" and md["model"] == "seasonal_naive"


def test_the_fleet_chooses_per_workload(tmp_path):
    # two workloads of one CSV fleet over the same days: "shop" dips to a fifth on Thanksgiving, "batch" does not.
    # With --holidays US the fleet keeps holidays for shop (as the first test: the dip is not copied into
    # 2025-12-04) and drops them for batch (its forecasts with and without are the same curves: a tie)
    tr = trace(THANKSGIVING + 8 * DAY)
    flat = ramp(tr.series.t)
    csv = tmp_path / "fleet.csv"
    with open(csv, "w") as f:
        f.write("timestamp,service,qps\n")
        for name, y in (("shop", tr.series.y), ("batch", flat)):
            f.writelines(f"{int(a)},{name},{b:.4f}\n" for a, b in zip(tr.series.t, y))
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["tune", str(csv), "--series-column", "service", "--out", str(out),
                                    "--model", "seasonal_naive", "--span", "1d", "--history", "21d", "--refit", "2h",
                                    "--step", "5m", "--qps-per-replica", "10", "--cold-start", "600", "--target-miss",
                                    "0.001", "--jobs", "1", "--no-progress", "--holidays", "US"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    md = {n: yaml.safe_load((out / f"{n}.yaml").read_text())["spec"]["triggers"][0]["metadata"]
          for n in ("shop", "batch")}
    assert md["shop"]["holidays"] == "US" and "holidays" not in md["batch"]
    doc = {w["workload"]: w["selection"] for w in json.loads((out / "fleet.json").read_text())["workloads"]}
    assert "seasonal_naive holidays" in doc["shop"]["label"] and "no-holidays" in doc["batch"]["label"]
    assert doc["shop"]["knobs"]["holidays"] == "kept" and doc["batch"]["knobs"]["holidays"] == "dropped"


def test_the_servers_tuning_job_drops_or_keeps_holidays():
    # tuning: auto's worker (serve.tuning.run_job) on the same trace: the server's families, the choice as the
    # ScalerSpec fields it applies (TUNABLE): holidays kept = not among them, dropped = cleared
    from scaler.misstarget import MissTarget
    from scaler.serve.tuning import TuningJob, run_job

    def job(tr: engine.Trace) -> dict:
        return run_job(TuningJob(name="serving/shop", t=tr.series.t, y=tr.series.y, step=STEP, qps_per_replica=10.0,
                                 cold_start_seconds=600.0, buffer_seconds=105.0, model="seasonal_naive",
                                 history_seconds=21 * DAY, refit_seconds=7200.0, span_seconds=DAY, tolerance=0.1,
                                 activation_threshold=0.0, target_miss=MissTarget(0.001), max_cost_ratio=None,
                                 holidays="US"))

    kept = job(trace(THANKSGIVING + 8 * DAY))
    assert "holidays" not in kept["settings"] and kept["knobs"]["holidays"] == "kept"
    dropped = job(trace(1762819200.0, days=28))  # no US holiday in it (the second test)
    assert dropped["settings"]["holidays"] == "" and "no-holidays" in dropped["label"]

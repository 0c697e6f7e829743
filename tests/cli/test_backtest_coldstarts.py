"""backtest with sampled start-ups: --cold-starts FILE.csv and --cold-start-from cluster (a real Prometheus
backfilled with kube-state-metrics-shaped series); bad inputs exit 2 with one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from scaler.cli import main
from support import promfixture as pf
from support.ksm import FakePod, pod_series, replicaset_series

FAST = ("--policies", "reactive,predictive", "--model", "seasonal_naive", "--history", "1d", "--span", "6h",
        "--no-progress")


def run(*args):
    r = CliRunner().invoke(main, ["backtest", *args])
    return r


def write_trace(path: Path, days: float = 2.0, step: int = 60) -> Path:
    t0 = 1_700_006_400
    t = t0 + step * np.arange(int(days * 86400 / step))
    qps = 50 + 40 * np.sin(2 * np.pi * ((t % 86400) / 3600 - 9) / 24)
    path.write_text("timestamp,qps\n" + "".join(f"{int(a)},{b:.3f}\n" for a, b in zip(t, qps)))
    return path


def write_starts(path: Path, totals, sched=2.0) -> Path:
    rows = ["pod,created,scheduled,started,ready"]
    for i, tot in enumerate(totals):
        c = 1_700_000_000 + 3600 * i
        rows.append(f"p{i},{c},{c + sched},{c + sched + 1},{c + tot}")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_cold_starts_csv_sets_t_cold_to_the_p90_and_reports_the_distribution(tmp_path):
    totals = [60, 70, 80, 90, 100, 110, 120, 130, 140, 400]
    starts = write_starts(tmp_path / "starts.csv", totals)
    out = tmp_path / "r.json"
    r = run(str(write_trace(tmp_path / "t.csv")), "--cold-starts", str(starts), *FAST, "--json", str(out))
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    # p90 of 60..140, 400: h = 8.1 -> 140 + 0.1 * 260 = 166
    assert doc["settings"]["cold_start_seconds"] == pytest.approx(166.0)
    cs = doc["cold_starts"]
    assert cs["starts"] == 10 and cs["t_cold_seconds"] == pytest.approx(166.0) and cs["max_seconds"] == 400.0
    assert cs["p50_seconds"] == pytest.approx(105.0)  # h = 4.5 -> 100 + 0.5 * 10
    assert "T_cold the scaler would pick (p90): 166 s" in r.output
    # the same run twice: the same draws (seeded)
    out2 = tmp_path / "r2.json"
    run(str(write_trace(tmp_path / "t.csv")), "--cold-starts", str(starts), *FAST, "--json", str(out2))
    assert json.loads(out2.read_text())["policies"] == doc["policies"]


def test_the_report_shows_the_start_up_distribution_and_the_t_cold_picked(tmp_path):
    starts = write_starts(tmp_path / "starts.csv", [60, 70, 80, 90, 100, 110, 120, 130, 140, 400])
    r = run(str(write_trace(tmp_path / "t.csv")), "--cold-starts", str(starts), *FAST, "--report",
            str(tmp_path / "rep"))
    assert r.exit_code == 0, r.output
    page = (tmp_path / "rep" / "index.html").read_text()
    # the row: 10 starts, none on a new node (2 s scheduling), p50 105, p90 166, p99 ~ 374, max 400, T_cold 166
    assert "<h2>Pod start-ups" in page and "<td>10</td><td>0</td><td>105</td><td>166</td>" in page
    assert "<td>400</td><td>166</td>" in page and "(p90)" in page
    assert (tmp_path / "rep" / "cold_starts.png").stat().st_size > 1000


def test_cold_starts_bad_input(tmp_path):
    trace = str(write_trace(tmp_path / "t.csv"))
    bad = tmp_path / "bad.csv"
    bad.write_text("pod,created,ready\np,1,2\n")
    r = run(trace, "--cold-starts", str(bad), *FAST)
    assert r.exit_code == 2 and "no column scheduled, started" in r.output
    bad.write_text("created,scheduled,started,ready\nyesterday,1,2,3\n")
    r = run(trace, "--cold-starts", str(bad), *FAST)
    assert r.exit_code == 2 and "line 2: created 'yesterday' is not a time" in r.output
    # every row skipped: negative (clock skew) and never ready; said, not T_cold 0
    bad.write_text("created,scheduled,started,ready\n100,90,95,200\n100,101,102,\n")
    r = run(trace, "--cold-starts", str(bad), *FAST)
    assert r.exit_code == 2 and "skipped: 1 not_ready, 1 negative" in r.output
    good = write_starts(tmp_path / "s.csv", [60, 70])
    r = run(trace, "--cold-starts", str(good), "--cold-start", "100", *FAST)
    assert r.exit_code == 2 and "either --cold-start or sampled start-ups" in r.output
    r = run(trace, "--cold-starts", str(good), "--image-pull-seconds", "30", *FAST)
    assert r.exit_code == 2 and "--image-pull-seconds: fixed cold-start phases do not apply" in r.output
    r = run(trace, "--cold-start-from", "cluster", *FAST)
    assert r.exit_code == 2 and "--cold-start-from cluster needs --prometheus URL" in r.output
    assert "Traceback" not in r.output


def test_cold_start_from_cluster_reads_kube_state_metrics(prometheus_factory, tmp_path):
    now = float(int(time.time()) // 60 * 60)
    end = now - 10
    totals = []
    series = []
    for i in range(12):  # created every hour from now - 20 h; created->ready 2 + 1 + (30 + 5 i)
        c = now - 20 * 3600 + 3600 * i
        pod = FakePod(f"vllm-6d5c4-{i}", "vllm-6d5c4", c, 2, 1, 30 + 5 * i, c + 5400)
        totals.append(pod.total)
        series += pod_series(pod, "serving")
    series.append(replicaset_series("vllm-6d5c4", "vllm", "serving", now - 21 * 3600, end))
    t = pf.sample_times(now - 2 * 86400, end)
    series.append(pf.SeriesSpec("req_total", {"job": "x"}, "counter", t, pf.counter_from_rate(t, 20.0)))
    prom = prometheus_factory(series)
    out = tmp_path / "r.json"
    r = run("--prometheus", prom.url, "--query", "sum(rate(req_total[2m]))", "--start", "now-2d", "--end", "now",
            "--cold-start-from", "cluster", "--cold-start-workload", "Deployment/vllm", "--cold-start-namespace",
            "serving", *FAST, "--json", str(out))
    assert r.exit_code == 0, r.output
    # totals 33, 38, ..., 88: p90 h = 9.9 -> 78 + 0.9 * 5 = 82.5
    cs = json.loads(out.read_text())["cold_starts"]
    assert cs["starts"] == 12 and cs["t_cold_seconds"] == pytest.approx(82.5)
    assert "cold starts from Deployment/vllm in serving: 12 starts" in r.output
    r = run("--prometheus", prom.url, "--query", "sum(rate(req_total[2m]))", "--start", "now-2d", "--end", "now",
            "--cold-start-from", "cluster", "--cold-start-workload", "Deployment/ghost", *FAST)
    assert r.exit_code == 2 and "Deployment/ghost in default: no start-up" in r.output


def test_the_drift_block_starts_from_the_tables_own_replay_of_sampled_cold_starts(tmp_path):
    """Issue 36 item 7: with --cold-starts the table's rows draw each start-up from the samples; the drift block's
    'without' replay was a fixed p90 beside them. Measured here: the row misses 6.21 %, the old block 14.80 %
    (a 2-hour wave of 5..95 req/s, start-ups of 60..900 s). Now the block's 'without' is the row."""
    t = 1_700_006_400 + 60 * np.arange(2 * 1440)
    qps = 50 + 45 * np.sin(2 * np.pi * (t % 7200) / 7200)
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,qps\n" + "".join(f"{int(a)},{b:.3f}\n" for a, b in zip(t, qps)))
    starts = write_starts(tmp_path / "starts.csv", [60, 90, 120, 150, 200, 300, 400, 500, 700, 900])
    out = tmp_path / "r.json"
    r = run(str(trace), "--cold-starts", str(starts), *FAST, "--drift", "--json", str(out))
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    row, drift = doc["policies"]["predictive"], doc["drift"]
    assert 0.01 < row["underprovisioned_fraction"] < 0.12  # a replay that misses, where T_cold matters
    assert drift["missed_fraction_without"] == pytest.approx(row["underprovisioned_fraction"], abs=1e-12)
    assert drift["replica_hours_without"] == pytest.approx(row["replica_hours"], rel=1e-12)

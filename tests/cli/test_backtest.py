"""``forescale backtest``: the command on the bundled trace, the JSON contract, the report, bad inputs."""

from __future__ import annotations

import gzip
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from scaler.cli import main, traces
from scaler.replay import variants

CONTRACT = {
    "trace": {"name", "points", "step_seconds", "span_days"},
    "settings": {"cold_start_seconds", "lead_seconds", "qps_per_replica"},
    "forecast": {"mase", "wape", "pinball", "coverage"},
    "policies": {"underprovisioned_fraction", "violation_minutes", "replica_hours", "scale_ups", "peak_replicas"},
}


def invoke(*args: str, cwd: Path | None = None):
    runner = CliRunner()
    if cwd is None:
        return runner.invoke(main, ["backtest", *args], catch_exceptions=False)
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return runner.invoke(main, ["backtest", *args], catch_exceptions=False)
    finally:
        os.chdir(old)


def write_trace(path: Path, days: float = 3.0, step: int = 60, column: str = "qps") -> Path:
    """A daily cycle with an evening burst, as a CSV."""
    t0 = 1_700_006_400  # a Wednesday 00:00 UTC
    n = int(days * 86400 / step)
    t = t0 + step * np.arange(n)
    hour = (t % 86400) / 3600
    qps = 50 + 40 * np.sin(2 * np.pi * (hour - 9) / 24) + np.where((hour > 19) & (hour < 20), 120, 0)
    vals = qps if column == "qps" else qps * step
    with open(path, "w") as f:
        f.write(f"timestamp,{column}\n")
        for a, b in zip(t, vals):
            f.write(f"{int(a)},{b:.3f}\n")
    return path


def test_bundled_trace_is_packaged_with_its_attribution():
    assert traces.BUNDLED_TRACE.is_file() and traces.BUNDLED_TRACE.stat().st_size < 400_000
    notice = (traces.BUNDLED_DIR / "ATTRIBUTION.txt").read_text()
    assert "distributed unmodified" in notice and "Arlitt" in notice
    assert (traces.BUNDLED_DIR / "LICENSE_AND_ATTRIBUTION.txt").is_file()
    tr = traces.bundled_trace()
    assert len(tr.series) == 28 * 1440 and tr.series.step == 60 and "Arlitt" in tr.attribution


def test_no_args_runs_on_the_bundled_trace_and_writes_nothing(tmp_path):
    # the newcomer's command, with the simulated span shortened for test speed
    res = invoke("--span", "2h", "--refit", "1h", cwd=tmp_path)
    assert res.exit_code == 0, res.output
    out = res.stdout
    for name in variants.POLICIES:
        assert f"\n{name} " in out
    assert "worldcup98" in out and "req/s per replica (derived" in out and "T_cold 180s" in out
    assert "prophet" in out and "Arlitt" in out
    assert list(tmp_path.iterdir()) == []  # nothing surprising written
    assert "plotly" not in res.output and "Traceback" not in res.output


def test_json_contract_and_report(tmp_path):
    trace = write_trace(tmp_path / "t.csv")
    out = tmp_path / "out" / "r.json"
    rep = tmp_path / "rep"
    res = invoke(str(trace), "--model", "seasonal_naive", "--span", "1d", "--history", "2d", "--refit", "1h",
                 "--qps-per-replica", "20", "--cold-start", "120", "--json", str(out), "--report", str(rep))
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    for section in ("trace", "settings"):
        assert CONTRACT[section] <= set(doc[section]), section
    assert set(doc["forecast"]) == {"seasonal_naive", "linear_trend"}
    for m in doc["forecast"].values():
        assert CONTRACT["forecast"] <= set(m)
    assert list(doc["policies"]) == list(variants.POLICIES)
    for p in doc["policies"].values():
        assert CONTRACT["policies"] <= set(p) and "cost_ratio" in p and "cold_start_requests" in p
    assert doc["trace"]["points"] == 3 * 1440 and doc["trace"]["step_seconds"] == 60.0
    assert doc["trace"]["span_days"] == pytest.approx(3.0)
    s = doc["settings"]
    assert s["cold_start_seconds"] == 120 and s["lead_seconds"] == 225 and s["qps_per_replica"] == 20
    pol = doc["policies"]
    assert pol["oracle"]["underprovisioned_fraction"] == 0 and pol["oracle"]["cost_ratio"] == 1.0
    assert pol["keep_alive"]["underprovisioned_fraction"] == 0
    for p in pol.values():
        if p["underprovisioned_fraction"] == 0:
            assert p["replica_hours"] >= pol["oracle"]["replica_hours"] - 1e-9
    for name in ("capacity.png", "capacity_zoom.png", "forecast.png", "frontier.png"):
        data = (rep / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
        assert name in (rep / "index.html").read_text()
    assert "predictive" in (rep / "index.html").read_text()


def test_count_csv_gzip_and_policy_subset(tmp_path):
    plain = write_trace(tmp_path / "c.csv", column="count")
    gz = tmp_path / "c.csv.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    res = invoke(str(gz), "--model", "naive", "--span", "12h", "--history", "1d", "--policies", "reactive,oracle",
                 "--json", str(tmp_path / "o.json"))
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o.json").read_text())
    assert list(doc["policies"]) == ["reactive", "oracle"]
    assert doc["trace"]["name"] == "c"


# --------------------------------------------------------------------------- bad inputs: exit 2, clear message


@pytest.mark.parametrize("args, needles", [
    (["/nonexistent/trace.csv"], ["/nonexistent/trace.csv", "does not exist", "timestamp,count"]),
    (["--policies", "reactive,magic"], ["'magic'", "accepted", "predictive", "oracle"]),
    (["--cold-start", "-5"], ["--cold-start", "-5", ">=0"]),
    (["--model", "arima"], ["--model", "arima", "prophet"]),
    (["--span", "soon"], ["--span", "soon", "duration"]),
    (["--cold-start", "60", "--cold-start-from", "x.json"], ["--cold-start", "--cold-start-from", "not both"]),
    (["--query", "up"], ["--query", "--prometheus"]),
])
def test_bad_arguments_exit_2_naming_the_problem(args, needles):
    res = invoke(*args)
    assert res.exit_code == 2, res.output
    for n in needles:
        assert n in res.output, (n, res.output)


def test_bad_csv_exits_2_with_the_accepted_form(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2\n3,4\n")
    res = invoke(str(bad))
    assert res.exit_code == 2
    assert str(bad) in res.output and "timestamp" in res.output and "qps" in res.output
    worse = tmp_path / "worse.csv"
    worse.write_text("timestamp,qps\n2024-01-01T00:00:00,1\n2024-01-01T00:01:00,lots\n")
    res = invoke(str(worse))
    assert res.exit_code == 2 and "line 3" in res.output and "'lots'" in res.output
    notgz = tmp_path / "x.csv.gz"
    notgz.write_text("timestamp,qps\n")
    res = invoke(str(notgz))
    assert res.exit_code == 2 and "gzip" in res.output


def test_cold_start_from_probe_report(tmp_path, monkeypatch):
    import scaler.probe.report as probe_report

    seen = []

    def fake(path):
        seen.append(str(path))
        return 42.0

    monkeypatch.setattr(probe_report, "read_cold_start", fake)
    trace = write_trace(tmp_path / "t.csv", days=2)
    res = invoke(str(trace), "--cold-start-from", str(tmp_path / "probe.json"), "--model", "naive", "--span", "6h",
                 "--history", "1d", "--policies", "reactive,oracle", "--json", str(tmp_path / "o.json"))
    assert res.exit_code == 0, res.output
    assert seen == [str(tmp_path / "probe.json")]
    assert json.loads((tmp_path / "o.json").read_text())["settings"]["cold_start_seconds"] == 42.0

    def broken(path):
        raise ValueError(f"{path}: not a probe report")

    monkeypatch.setattr(probe_report, "read_cold_start", broken)
    res = invoke(str(trace), "--cold-start-from", str(tmp_path / "probe.json"))
    assert res.exit_code == 2 and "not a probe report" in res.output


# --------------------------------------------------------------------------- Prometheus input (a real server)


def test_prometheus_input_in_chunks(prometheus, tmp_path, monkeypatch):
    calls = []
    from scaler.prom import PromPool

    real = PromPool.get

    def spy(self, url, params, **kw):
        if url.endswith("/api/v1/query_range"):
            calls.append((float(params["start"]), float(params["end"])))
        return real(self, url, params, **kw)

    monkeypatch.setattr(PromPool, "get", spy)
    end = prometheus.end_at
    start = end - 13 * 86400
    out = tmp_path / "p.json"
    res = invoke("--prometheus", prometheus.url, "--query", 'sum(rate(forescale_requests_total{job="llm"}[2m]))',
                 "--start", str(start), "--end", str(end), "--model", "naive", "--span", "6h", "--history", "2d",
                 "--policies", "reactive,predictive,oracle", "--json", str(out))
    assert res.exit_code == 0, res.output
    assert len(calls) == 2  # 13 days at 60 s = 18,721 points: two requests of at most 11,000
    assert all((e - s) / 60 + 1 <= 11_000 for s, e in calls)
    doc = json.loads(out.read_text())
    assert doc["trace"]["points"] >= 18_000
    # the rate Prometheus returns is the trace's (to within rate() extrapolation)
    tr = traces.load_prometheus(prometheus.url, 'sum(rate(forescale_requests_total{job="llm"}[2m]))', end - 3600, end, 60)
    assert math.isclose(float(np.nanmean(tr.series.y)), prometheus.trace.mean_qps(end - 3600 - 120, end), rel_tol=0.1)


def test_prometheus_unreachable_exits_2(tmp_path):
    res = invoke("--prometheus", "http://127.0.0.1:9", "--query", "up", "--start", "now-1h")
    assert res.exit_code == 2 and "Prometheus" in res.output and "127.0.0.1:9" in res.output


# --------------------------------------------------------------------------- the cluster, the queue, scenarios, advice

FAST = ("--model", "naive", "--span", "6h", "--history", "1d", "--no-progress")


def test_without_world_options_the_json_has_none_of_their_keys(tmp_path):
    res = invoke(str(write_trace(tmp_path / "t.csv", days=2)), *FAST, "--policies", "reactive,oracle",
                 "--json", str(tmp_path / "o.json"))
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o.json").read_text())
    assert "scenario_checks" not in doc and "world" not in doc["settings"] and "advice" not in doc
    assert not {"gpu_node_hours", "p95_latency_seconds"} & set(doc["policies"]["reactive"])
    assert "gpu-node-h" not in res.output and "cost advice" not in res.output


def test_node_pool_latency_kill_and_advice_in_json_table_and_report(tmp_path):
    res = invoke(str(write_trace(tmp_path / "t.csv", days=2)), *FAST, "--policies", "reactive,keep_alive,oracle",
                 "--gpus-per-node", "2", "--image-pull-seconds", "60", "--scheduling-seconds", "15",
                 "--timeout", "30", "--service-seconds", "0.2", "--scenario", "pod-kill:at=2h", "--advise",
                 "--json", str(tmp_path / "o.json"), "--report", str(tmp_path / "rep"))
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o.json").read_text())
    for name in ("reactive", "keep_alive"):
        p = doc["policies"][name]
        assert p["gpu_node_hours"] > 0 and p["p95_latency_seconds"] >= 0.2 and 0 <= p["timed_out_fraction"] <= 1
    # 2 GPUs per node: at least half the replica-hours in node-hours
    assert doc["policies"]["keep_alive"]["gpu_node_hours"] >= doc["policies"]["keep_alive"]["replica_hours"] / 2
    # the T_cold of 180 s is split: 15 s scheduling + 60 s pull + 105 s load and warm-up
    assert doc["settings"]["world"]["phases_seconds"] == {"scheduling": 15.0, "image_pull": 60.0,
                                                          "container_start": 0.0, "pod": 105.0}
    checks = doc["scenario_checks"]
    assert {c["policy"] for c in checks} == {"reactive", "keep_alive", "oracle"}
    assert all(set(c) == {"policy", "check", "value_seconds", "limit_seconds", "passed"} for c in checks)
    ka = next(c for c in checks if c["policy"] == "keep_alive")
    assert ka["limit_seconds"] == 60.0
    assert doc["advice"]["pick"] in {o["policy"] for o in doc["advice"]["options"]}
    assert doc["advice"]["unit"] == "GPU-node-hours" and doc["advice"]["paragraph"]
    assert "gpu-node-h" in res.output and "cost advice" in res.output and "pick " in res.output
    page = (tmp_path / "rep" / "index.html").read_text()
    assert 'src="checks.png"' in page and (tmp_path / "rep" / "checks.png").stat().st_size > 5000


def test_a_step_on_a_flat_load_from_the_command_line(tmp_path):
    # 6 req/s on 10 replicas of 1 req/s (60 %), doubled at 2 h (120 %): reactive takes at least one KEDA
    # poll (30 s) + T_cold (180 s) to cover it, so it fails the T_cold + T_buffer (255 s) check or just passes
    res = invoke("--flat-load", "6", *FAST, "--policies", "reactive", "--qps-per-replica", "1", "--min-replicas",
                 "10", "--scenario", "step:from=0.6,to=1.2,at=2h", "--json", str(tmp_path / "o.json"))
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o.json").read_text())
    (c,) = [c for c in doc["scenario_checks"] if c["policy"] == "reactive"]
    assert c["value_seconds"] >= 30 + 180 and c["limit_seconds"] == doc["settings"]["lead_seconds"]
    assert doc["trace"]["name"] == "flat 6 req/s"


def probe_report(path: Path) -> Path:
    """A minimal valid probe report: phases summing to 100 s, pull 30 s, scheduling 10 s, steady p50 0.4 s."""
    from scaler.probe.report import PHASES, SCHEMA

    phases = {p: 0.0 for p in PHASES}
    phases["weights_read"], phases["warmup_deep"] = 70.0, 30.0
    path.write_text(json.dumps({"schema": SCHEMA, "status": "ok", "t_cold_seconds": 140.0, "phases": phases,
                                "extras": {"image_pull_seconds": 30.0, "scheduling_seconds": 10.0},
                                "inference": {"steady": {"p50_seconds": 0.4}}}))
    return path


def test_the_probe_report_gives_the_phases_and_the_service_time(tmp_path):
    rep = probe_report(tmp_path / "probe.json")
    res = invoke(str(write_trace(tmp_path / "t.csv", days=2)), *FAST, "--policies", "reactive",
                 "--cold-start-from", str(rep), "--gpus-per-node", "4", "--prepull", "--p95-target", "1",
                 "--json", str(tmp_path / "o.json"))
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o.json").read_text())
    w = doc["settings"]["world"]
    # T_cold = 100 (the probe's phases) + 30 (its pull) + 10 (its scheduling) = 140 s, as the probe says
    assert w["phases_seconds"] == {"scheduling": 10.0, "image_pull": 30.0, "container_start": 0.0, "pod": 100.0}
    assert doc["settings"]["cold_start_seconds"] == 140.0 and w["service_seconds"] == 0.4 and w["prepull"]
    assert doc["policies"]["reactive"]["p50_latency_seconds"] >= 0.4


@pytest.mark.parametrize("args, needles", [
    (["--max-nodes", "3"], ["--max-nodes", "--gpus-per-node"]),
    (["--placeholder-policy"], ["--placeholder-policy", "--gpus-per-node"]),
    (["--scenario", "wobble:at=1h"], ["--scenario", "'wobble'", "step, spike, ramp, pod-kill, node-loss"]),
    (["--image-pull-seconds", "200"], ["200", "exceed T_cold 180", "--cold-start"]),
    (["--flat-load", "5", "x.csv"], ["TRACE", "--flat-load", "not more than one"]),
    (["--timeout", "0"], ["--timeout", "0"]),
])
def test_bad_world_arguments_exit_2_naming_the_problem(args, needles):
    res = invoke(*args)
    assert res.exit_code == 2, res.output
    for n in needles:
        assert n in res.output, (n, res.output)

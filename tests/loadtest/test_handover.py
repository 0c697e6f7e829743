"""The hand-over: a load test's result read back by backtest and tune (--qps-per-replica-from)."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from scaler.cli import main
from scaler.loadtest import LoadtestReportError, read_capacity, read_qps_per_replica


def result(tmp_path, **over):
    doc = {"schema": "forescale.loadtest/v1", "steps": [], "capacity_rps": 9.375, "recommended_qps_per_replica": 7.5}
    doc.update(over)
    p = tmp_path / "lt.json"
    p.write_text(json.dumps(doc))
    return p


def test_read_back(tmp_path):
    p = result(tmp_path)
    assert read_qps_per_replica(p) == 7.5 and read_capacity(p) == 9.375


@pytest.mark.parametrize("over, needle", [
    ({"schema": "forescale.probe/v1"}, "schema 'forescale.probe/v1', expected 'forescale.loadtest/v1'"),
    ({"recommended_qps_per_replica": None}, "recommended_qps_per_replica is null (no tested rate met the SLO"),
    ({"recommended_qps_per_replica": -1}, "-1 is not a number of req/s > 0"),
    ({"recommended_qps_per_replica": "7"}, "'7' is not a number of req/s > 0"),
])
def test_rejects(tmp_path, over, needle):
    with pytest.raises(LoadtestReportError) as e:
        read_qps_per_replica(result(tmp_path, **over))
    assert needle in str(e.value) and "--qps-per-replica-from" in str(e.value)


def test_rejects_files_that_are_not_results(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(LoadtestReportError, match="not JSON"):
        read_qps_per_replica(p)
    with pytest.raises(LoadtestReportError, match="cannot be read"):
        read_qps_per_replica(tmp_path / "absent.json")


@pytest.fixture
def trace(tmp_path):
    # 3 days of a daily sine, 50 +- 40 req/s at 60 s resolution
    p = tmp_path / "trace.csv"
    rows = [f"{1_700_000_000 + 60 * i},{50 + 40 * math.sin(2 * math.pi * i / 1440):.3f}" for i in range(3 * 1440)]
    p.write_text("timestamp,qps\n" + "\n".join(rows) + "\n")
    return p


def test_backtest_takes_qps_per_replica_from_a_loadtest(tmp_path, trace):
    out = tmp_path / "bt.json"
    r = CliRunner().invoke(main, ["backtest", str(trace), "--qps-per-replica-from", str(result(tmp_path)),
                                  "--policies", "reactive", "--span", "6h", "--history", "1d", "--json", str(out)])
    assert r.exit_code == 0, r.output
    settings = json.loads(out.read_text())["settings"]
    assert settings["qps_per_replica"] == 7.5 and settings["qps_per_replica_source"] == "given"


@pytest.mark.parametrize("verb", ["backtest", "tune"])
def test_both_or_a_bad_file_exit_2(tmp_path, trace, verb):
    p = result(tmp_path)
    r = CliRunner().invoke(main, [verb, str(trace), "--qps-per-replica-from", str(p), "--qps-per-replica", "3"])
    assert r.exit_code == 2 and "either --qps-per-replica or --qps-per-replica-from" in r.output
    bad = result(tmp_path, recommended_qps_per_replica=None)
    r = CliRunner().invoke(main, [verb, str(trace), "--qps-per-replica-from", str(bad)])
    assert r.exit_code == 2 and f"--qps-per-replica-from {bad}" in r.output and "is null" in r.output

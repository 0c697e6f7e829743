"""The world a printed ScaledObject was ranked in travels with it (issue 36 item 5): ``forescale.io/replay``.

tune writes the span, the replica capacity, T_cold (and the refit cadence, history, model, HPA tolerance it ran) as
backtest flags in the manifest's annotation; ``backtest --scaledobject`` takes them where its command line left them
at their defaults, so the manifest alone replays to tune's figures. Tolerance: none (the same double for the miss, to
1e-12 as test_roundtrip.py; the integer figures equal). A flag that disagrees is a warning naming both values; two
manifests ranked in different worlds are refused; a bad annotation is named. Without an annotation the replica
capacity is the forescale triggers' qpsPerReplica.
"""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from scaler.cli import main
from scaler.scaledobject import REPLAY_ANNOTATION
from support.traces import write_daily

ARGS = ("--model", "naive", "--span", "1d", "--history", "1d", "--refit", "2h", "--qps-per-replica", "10",
        "--cold-start", "600", "--hpa-tolerance", "0.05", "--no-progress")


def run(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input, catch_exceptions=False)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    d = tmp_path_factory.mktemp("ann")
    csv = write_daily(d / "daily.csv", days=3)
    res = run("tune", csv, *ARGS, "--jobs", "1", "--target-miss", "0.005", "--json", d / "t.json", "-o", d / "so.yaml")
    assert res.exit_code == 0, res.output
    return csv, json.loads((d / "t.json").read_text())["selection"], d / "so.yaml"


def backtest_row(csv, so, tmp_path, *extra, name="my-model"):
    out = tmp_path / "b.json"
    res = run("backtest", csv, "--policies", "reactive", "--no-progress", "--scaledobject", so, "--json", out, *extra)
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    return doc["policies"][name], doc["settings"], res.output


def test_tunes_manifest_alone_replays_to_its_expected_line(tuned, tmp_path):
    csv, sel, so = tuned
    text = so.read_text()
    assert text.startswith("# forescale tune on daily")  # --output holds the printed YAML, comments and all
    ann = yaml.safe_load(text)["metadata"]["annotations"][REPLAY_ANNOTATION]
    assert ann == "--span 1d --qps-per-replica 10 --cold-start 600 --hpa-tolerance 0.05 --refit 2h --history 1d " \
                  "--model naive"
    assert sel["manifest"]["metadata"]["annotations"][REPLAY_ANNOTATION] == ann  # --json carries the same
    row, settings, out = backtest_row(csv, so, tmp_path)  # no world flag on the command line
    assert f"world     {ann}: from {REPLAY_ANNOTATION} of ScaledObject 'my-model'" in out
    assert (settings["qps_per_replica"], settings["cold_start_seconds"], settings["simulated_days"],
            settings["refit_seconds"], settings["hpa_tolerance"]) == (10.0, 600.0, 1.0, 7200.0, 0.05)
    assert row["replica_hours"] == sel["replica_hours"] and row["violation_minutes"] == sel["violation_minutes"]
    assert row["underprovisioned_fraction"] == pytest.approx(sel["underprovisioned_fraction"], rel=1e-12, abs=1e-15)
    assert run("check", so).exit_code == 0  # an annotation KEDA accepts (a string)


def test_a_world_flag_that_disagrees_is_a_warning_naming_both_and_wins(tuned, tmp_path):
    csv, sel, so = tuned
    row, settings, out = backtest_row(csv, so, tmp_path, "--cold-start", "300")
    assert ("warning: ScaledObject 'my-model' was ranked with --cold-start 600 (forescale.io/replay), this run "
            "replays --cold-start 300: its row is not the figures it was ranked with") in out
    assert settings["cold_start_seconds"] == 300.0 and settings["qps_per_replica"] == 10.0  # the rest still read
    # a family knob given (--refit: the ScaledObject's row runs its own refitInterval) is no warning
    _, settings, out = backtest_row(csv, so, tmp_path, "--refit", "1h")
    assert "warning" not in out and settings["refit_seconds"] == 3600.0


def _manifest(name: str, qps: str, replay: str | None) -> str:
    meta = {"name": name, **({"annotations": {REPLAY_ANNOTATION: replay}} if replay is not None else {})}
    return yaml.safe_dump({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": meta,
                           "spec": {"scaleTargetRef": {"name": name}, "advanced": {"horizontalPodAutoscalerConfig": {
                               "behavior": {}}},
                                    "triggers": [{"type": "external", "metadata": {
                                        "scalerAddress": "forescale:6000", "serverAddress": "http://prom:9090",
                                        "query": "sum(rate(x[2m]))", "qpsPerReplica": qps, "mode": "reactive"}}]}})


def test_two_manifests_ranked_in_different_worlds_are_refused(tmp_path):
    csv = write_daily(tmp_path / "daily.csv", days=3)
    (tmp_path / "two.yaml").write_text(_manifest("a", "10", "--span 1d") + "---\n" + _manifest("b", "10", "--span 2h"))
    res = run("backtest", csv, "--policies", "reactive", "--model", "naive", "--scaledobject", tmp_path / "two.yaml")
    assert res.exit_code == 2
    assert ("the --scaledobject manifests were ranked in different worlds: 'a' --span 1d, 'b' --span 2h; one run "
            "replays one world: give --span") in res.output


@pytest.mark.parametrize("replay, says", [
    ("--span often", "--span 'often': 'often' is not a duration"),
    ("--colour blue", "'--colour' is not a flag it may carry; accepted: --span, --qps-per-replica"),
    ("--span", "--span without a value"),
    ("--qps-per-replica -4", "--qps-per-replica '-4'"),
    ("--span '7d", "No closing quotation"),
])
def test_a_bad_annotation_is_named(tmp_path, replay, says):
    csv = write_daily(tmp_path / "daily.csv", days=3)
    (tmp_path / "so.yaml").write_text(_manifest("a", "10", replay))
    res = run("backtest", csv, "--policies", "reactive", "--model", "naive", "--scaledobject", tmp_path / "so.yaml")
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert f"so.yaml document 1 (ScaledObject 'a'): metadata.annotations.{REPLAY_ANNOTATION}" in res.output
    assert says in res.output


def test_without_an_annotation_the_capacity_is_the_triggers_qps_per_replica(tmp_path):
    """The trace peaks at 193 req/s: derived, the capacity would be round(193 / 20) = 10 req/s per replica; the
    hand-written trigger says 20, so the pods replayed serve 20 (and the row equals the run given --qps-per-replica
    20). A capacity given that differs from the trigger's target is a warning naming both."""
    csv = write_daily(tmp_path / "daily.csv", days=3)
    (tmp_path / "so.yaml").write_text(_manifest("hand", "20", None))
    base = ("--model", "naive", "--span", "1d", "--history", "1d")
    row, settings, out = backtest_row(csv, tmp_path / "so.yaml", tmp_path, *base, name="hand")
    assert settings["qps_per_replica"] == 20.0
    assert "replica   20 req/s per replica: the qpsPerReplica of hand/trigger0" in out
    given, _, _ = backtest_row(csv, tmp_path / "so.yaml", tmp_path, *base, "--qps-per-replica", "20", name="hand")
    assert given == row
    _, settings, out = backtest_row(csv, tmp_path / "so.yaml", tmp_path, *base, "--qps-per-replica", "10", name="hand")
    assert settings["qps_per_replica"] == 10.0
    assert ("warning: hand/trigger0 has qpsPerReplica 20 (its HPA target), but the replicas replayed serve 10 req/s "
            "each") in out


def test_triggers_that_disagree_leave_the_capacity_derived_with_a_warning(tmp_path):
    csv = write_daily(tmp_path / "daily.csv", days=3)
    (tmp_path / "so.yaml").write_text(_manifest("a", "20", None) + "---\n" + _manifest("b", "10", None))
    row, settings, out = backtest_row(csv, tmp_path / "so.yaml", tmp_path, "--model", "naive", "--span", "1d",
                                      "--history", "1d", name="a")
    assert settings["qps_per_replica"] == 10.0  # derived: the peak 193 req/s / 20 replicas, rounded
    assert "warning: a/trigger0 has qpsPerReplica 20 (its HPA target), but the replicas replayed serve 10 req/s" in out
    assert "b/trigger0 has" not in out  # b's 10 is the capacity replayed

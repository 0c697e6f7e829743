"""Issue 36 item 6: what a replayed ScaledObject uses that the replay does not run is named in the terminal table
(the ``replayed`` line under the policy rows), not only in the JSON and the HTML report."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from scaler.cli import main
from support.traces import write_daily

ARGS = ("--model", "naive", "--span", "1d", "--history", "1d", "--refit", "2h", "--qps-per-replica", "10",
        "--cold-start", "600", "--policies", "reactive", "--no-progress")
BASE = {"serverAddress": "http://prometheus:9090", "query": "sum(rate(x[2m]))", "qpsPerReplica": "10",
        "model": "naive", "coldStartSeconds": "240"}


def manifest(extra: dict) -> str:
    md = "".join(f"        {k}: {v!r}\n" for k, v in {**BASE, **extra}.items())
    return ("apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata:\n  name: so\nspec:\n"
            "  scaleTargetRef:\n    name: so\n  triggers:\n    - type: external\n      metadata:\n"
            "        scalerAddress: 'forescale:6000'\n" + md)


@pytest.mark.parametrize("extra, said", [
    ({"tuning": "auto"}, "pred: tuning auto replayed as the knobs written (self-tuning is not replayed)"),
    ({"coldStartQuery": "max(x)"}, "pred: coldStartQuery not read, lead from coldStartSeconds"),
    # no --cold-starts: the T_cold replayed is the trigger's coldStartSeconds, 240 s, said in the table
    ({"coldStartFrom": "cluster", "coldStartWorkload": "Deployment/so"},
     "pred: coldStartFrom cluster not replayed, T_cold 240s (coldStartSeconds; give --cold-starts FILE or "
     "--cold-start-from cluster to replay it)"),
])
def test_the_terminal_table_names_what_the_replay_does_not_run(tmp_path, extra, said):
    csv = write_daily(tmp_path / "daily.csv", days=3)
    so = tmp_path / "so.yaml"
    so.write_text(manifest({**extra}).replace("      metadata:", "      name: pred\n      metadata:"))
    res = CliRunner().invoke(main, ["backtest", str(csv), *ARGS, "--scaledobject", str(so)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("replayed  ScaledObject so"))
    assert said in line, line


def start_ups(path, durations) -> None:
    """One pod an hour from 2023-11-15T00:00Z, created -> ready in each of ``durations`` seconds."""
    t0 = 1_700_006_400
    rows = [f"p{i},{t0 + 3600 * i},{t0 + 3600 * i + 5},{t0 + 3600 * i + 20},{t0 + 3600 * i + d}"
            for i, d in enumerate(durations)]
    path.write_text("pod,created,scheduled,started,ready\n" + "\n".join(rows) + "\n")


SAMPLED = ("--model", "naive", "--span", "1d", "--history", "1d", "--refit", "2h", "--qps-per-replica", "10",
           "--policies", "reactive", "--no-progress")


def _row(tmp_path, csv, extra: dict, starts):
    so, out = tmp_path / "so.yaml", tmp_path / "out.json"
    so.write_text(manifest(extra).replace("      metadata:", "      name: pred\n      metadata:"))
    res = CliRunner().invoke(main, ["backtest", str(csv), *SAMPLED, "--cold-starts", str(starts), "--scaledobject",
                                    str(so), "--json", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("replayed  ScaledObject so"))
    return json.loads(out.read_text())["policies"]["so"], line


def test_cold_start_from_cluster_with_cold_starts_leads_with_the_samples_quantile_as_the_server(tmp_path):
    """12 start-ups of 100, 110, ..., 210 s; the server's rule (scaler.coldstart.estimate, type-7 quantile):
    p90: h = 11 x 0.9 = 9.9, 190 + 0.9 x 10 = 199 s; p50 (coldStartQuantile 0.5): h = 5.5, 150 + 0.5 x 10 = 155 s.
    The trigger then replays exactly as one that says coldStartSeconds 199 (155) in the same world."""
    csv = write_daily(tmp_path / "daily.csv", days=3)
    starts = tmp_path / "starts.csv"
    start_ups(starts, range(100, 220, 10))
    cluster = {"coldStartFrom": "cluster", "coldStartWorkload": "Deployment/so"}
    rows = {}
    for q, t_cold in (("0.9", 199), ("0.5", 155)):
        row, line = _row(tmp_path, csv, {**cluster, "coldStartQuantile": q}, starts)
        assert (f"pred: coldStartFrom cluster replayed from {starts}: T_cold {t_cold}s, the p{float(q) * 100:g} of 12 "
                "start-ups in its coldStartWindow, as the server computes it") in line, line
        fixed, _ = _row(tmp_path, csv, {"coldStartSeconds": str(t_cold)}, starts)
        rows[q] = {k: v for k, v in row.items() if k != "note"}
        assert rows[q] == {k: v for k, v in fixed.items() if k != "note"}, q  # the same lead, the same figures
    assert rows["0.9"] != rows["0.5"]  # and the lead matters here: 199 s and 155 s replay differently


def test_cold_start_from_cluster_with_too_few_samples_falls_back_as_the_server_says(tmp_path):
    csv = write_daily(tmp_path / "daily.csv", days=3)
    starts = tmp_path / "starts.csv"
    start_ups(starts, range(100, 220, 10))
    row, line = _row(tmp_path, csv, {"coldStartFrom": "cluster", "coldStartWorkload": "Deployment/so",
                                     "coldStartMinSamples": "20"}, starts)
    assert (f"pred: coldStartFrom cluster replayed from {starts}: 12 cold starts of Deployment/so in the last 7d, "
            "coldStartMinSamples is 20; using coldStartSeconds=240, as the server falls back (T_cold 240s)") in line
    fixed, _ = _row(tmp_path, csv, {}, starts)  # BASE: coldStartSeconds 240
    assert {k: v for k, v in row.items() if k != "note"} == {k: v for k, v in fixed.items() if k != "note"}

"""Issue 36 item 6: what a replayed ScaledObject uses that the replay does not run is named in the terminal table
(the ``replayed`` line under the policy rows), not only in the JSON and the HTML report."""

from __future__ import annotations

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
     "pred: coldStartFrom cluster not replayed, T_cold 240s (coldStartSeconds)"),
])
def test_the_terminal_table_names_what_the_replay_does_not_run(tmp_path, extra, said):
    csv = write_daily(tmp_path / "daily.csv", days=3)
    so = tmp_path / "so.yaml"
    so.write_text(manifest({**extra}).replace("      metadata:", "      name: pred\n      metadata:"))
    res = CliRunner().invoke(main, ["backtest", str(csv), *ARGS, "--scaledobject", str(so)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("replayed  ScaledObject so"))
    assert said in line, line

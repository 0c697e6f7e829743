"""``tune --series-column ... --out DIR --gpu-budget``: the fleet replayed jointly within a GPU budget, and its bad
inputs (exit 2, before the run)."""

from __future__ import annotations

import json

import pytest
import yaml

from scaler.serve.ledger import Budget, read_budgets
from scaler.spec import parse_metadata
from support.paths import REPO
from support.fleetcsv import FAST, invoke, write_fleet


def test_a_fleet_within_70_percent_of_its_peak(tmp_path):
    # three workloads of one daily ramp, shifted 0, 6 and 12 h and scaled 1, 2, 1.5; a request of chat is worth
    # $0.01, of embed $0.001, of rank $0.005
    csv = write_fleet(tmp_path / "fleet.csv", {"chat": (2.5, 1.0, 0.0), "embed": (2.5, 2.0, 6.0),
                                              "rank": (2.5, 1.5, 12.0)})
    values = tmp_path / "values.csv"
    values.write_text("workload,value_per_request\nml-chat,0.01\nml-embed,0.001\nml-rank,0.005\n")
    out = tmp_path / "out"
    r = invoke("tune", str(csv), "--series-column", "team,service", "--out", str(out), "--gpu-budget", "70%",
               "--value-per-request", str(values), *FAST)
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "fleet.json").read_text())
    b = doc["budget"]
    peak = b["unconstrained"]["peak_gpus"]["*"]
    assert b["gpus"]["*"] == int(0.7 * peak) and b["rule"] == "value"
    for rule in ("value", "equal"):
        assert b["rules"][rule]["never_over_budget"] and b["rules"][rule]["peak_gpus"]["*"] <= b["gpus"]["*"]
    # without a budget each workload's joint replay is its selection's, as tuned alone
    for e, w in zip(doc["workloads"], b["workloads"]):
        assert w["workload"] == e["workload"]
        assert w["unconstrained"]["missed_fraction"] == pytest.approx(e["selection"]["underprovisioned_fraction"],
                                                                     rel=1e-12, abs=1e-15)
    by = {w["workload"]: w for w in b["workloads"]}
    # the budget costs: the fleet loses more than unconstrained by either rule, and the value rule less than equal
    assert 0 < b["rules"]["value"]["extra_lost_value"] < b["rules"]["equal"]["extra_lost_value"]
    # who gives way under the value rule: the cheapest requests (embed's), never the dearest (chat's)
    assert by["ml-embed"]["value"]["gave_way_minutes"] > 0 and by["ml-chat"]["value"]["gave_way_minutes"] == 0
    assert by["ml-embed"]["value"]["periods"]
    assert "value-weighted loses $" in r.output and "equal share $" in r.output and "equal: gave way min" in r.output
    assert "## ml-embed" in (out / "budget.md").read_text()
    # what it printed runs the budget live: each trigger joins the budget of DIR/budgets.yaml, which the server reads
    md = yaml.safe_load((out / "ml-embed.yaml").read_text())["spec"]["triggers"][0]["metadata"]
    assert {k: md[k] for k in ("gpuBudget", "gpusPerReplica", "valuePerRequest", "minReplicaCount")} == \
        {"gpuBudget": "gpus", "gpusPerReplica": "1", "valuePerRequest": "0.001", "minReplicaCount": "0"}
    spec, unknown = parse_metadata(md, name="ml-embed", namespace="default")
    assert unknown == () and spec.gpu_budget == "gpus" and spec.value_per_request == 0.001
    assert read_budgets(yaml.safe_load((out / "budgets.yaml").read_text())) == {
        "gpus": Budget("gpus", float(b["gpus"]["*"]), "value")}


@pytest.mark.parametrize("args,fragment", [
    (["--gpu-budget", "10"], "--gpu-budget is a fleet's budget: give --by LABELS"),
    (["--series-column", "service", "--out", "X", "--gpu-budget", "-1"], "GPU budget '-1': accepted is a finite number of GPUs >= 0"),
    (["--series-column", "service", "--out", "X", "--gpu-budget", "nan"], "GPU budget 'nan': accepted is a finite number"),
    (["--series-column", "service", "--out", "X", "--gpu-budget", "lots"], "GPU budget 'lots': accepted is a finite number of GPUs >= 0 (16); or P% of the unconstrained"),
    (["--series-column", "service", "--out", "X", "--gpu-budget", "150%"], "accepted is a percentage in (0, 100]"),
    (["--series-column", "service", "--out", "X", "--gpu-budget", "H100=4"], "needs the pool file"),
    (["--series-column", "service", "--out", "X", "--gpu-budget", "B200=4,H100=2", "--pools", "POOLS"],
     "unknown GPU type 'B200'; accepted: H100, L4"),
    (["--series-column", "service", "--out", "X", "--gpu-budget", "L4=4", "--pools", "POOLS", "--placement", "h100"],
     "no budget for H100, the GPU type the replicas are placed on (h100)"),
    (["--series-column", "service", "--out", "X", "--gpu-budget", "2", "--min-replicas", "1"],
     "below the 3 GPUs the minReplicaCounts keep (a: 1, b: 1, c: 1)"),
    (["--series-column", "service", "--out", "X", "--gpu-budget", "8", "--value-per-request", "-0.5"],
     "--value-per-request '-0.5': accepted is a finite value >= 0"),
    (["--series-column", "service", "--out", "X", "--gpu-budget", "8", "--value-per-request", "V:a,-1"],
     "line 2: value_per_request '-1'; accepted is a number >= 0"),
    (["--series-column", "service", "--out", "X", "--gpu-budget", "8", "--value-per-request",
      "V:a,1,2|b,1,"], "line 3: gpus_per_replica '' is missing or not a number; accepted is a number > 0"),
    (["--series-column", "service", "--out", "X", "--gpu-budget", "8", "--value-per-request", "V:zz,1"],
     "workload 'zz' is not in the fleet; its workloads: a, b, c"),
    (["--series-column", "service", "--out", "X", "--budget-rule", "equal"], "--budget-rule goes with --gpu-budget"),
])
def test_bad_budget_input_exits_2_before_the_run(tmp_path, args, fragment):
    csv = write_fleet(tmp_path / "f.csv", {"a": (0.1, 1.0, 0.0), "b": (0.1, 1.0, 0.0), "c": (0.1, 1.0, 0.0)})
    out = []
    for a in args:
        if a.startswith("V:"):  # a value file: rows separated by |
            rows = a[2:].split("|")
            head = "workload,value_per_request" + (",gpus_per_replica" if rows[0].count(",") == 2 else "")
            (tmp_path / "values.csv").write_text("\n".join([head, *rows]) + "\n")
            a = str(tmp_path / "values.csv")
        out.append(a.replace("X", str(tmp_path / "out")).replace("POOLS", str(REPO / "examples/pools/h100-l4.yaml")))
    r = invoke("tune", str(csv), *out, *FAST)
    assert r.exit_code == 2, r.output
    assert fragment in r.output and "Traceback" not in r.output
    assert not (tmp_path / "out" / "fleet.json").exists()  # nothing was run


def test_a_budget_per_gpu_type_draws_on_the_placed_pools_type(tmp_path):
    # --placement h100/3g.40gb: a replica is one 3g.40gb slice, half an H100 (2 slices a GPU), so it draws 0.5 GPU
    # on the H100 budget; the L4 budget caps nothing here (no replica is placed on L4) and is said so
    csv = write_fleet(tmp_path / "f.csv", {"chat": (2.0, 1.0, 0.0)})
    out = tmp_path / "out"
    r = invoke("tune", str(csv), "--series-column", "team,service", "--out", str(out), "--gpu-budget", "H100=12,L4=8",
               "--pools", str(REPO / "examples/pools/h100-l4.yaml"), "--placement", "h100/3g.40gb",
               *[a if a != "12h" else "4h" for a in FAST])
    assert r.exit_code == 0, r.output
    b = json.loads((out / "fleet.json").read_text())["budget"]
    assert b["gpus"] == {"H100": 12.0} and b["unused"] == {"L4": 8.0}
    assert b["workloads"][0]["gpus_per_replica"] == 0.5 and b["workloads"][0]["budget"] == "H100"
    assert b["rules"]["value"]["peak_gpus"]["H100"] <= 12.0

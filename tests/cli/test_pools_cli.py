"""``--pools FILE`` on ``backtest`` and ``tune``: GPU-hours and dollars per pool, bad files, the money selection.

A flat load of 10 req/s (``--flat-load``) with ``--qps-per-replica 1``: every policy holds a constant count, so
the dollars are derived by hand from the pool file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from scaler.cli import main

POOLS = """\
pools:
  - {name: h100, gpu: H100, gpusPerNode: 8, nodeBootSeconds: 420, maxNodes: 4, pricePerGpuHour: 6.88}
  - {name: l4, gpu: L4, gpusPerNode: 1, nodeBootSeconds: 240, maxNodes: MAXL4, pricePerGpuHour: 0.8}
replica: {capacity: {H100: 1, L4: 0.25}}
"""
FLAT = ("--flat-load", "10", "--qps-per-replica", "1", "--span", "1d", "--history", "1d", "--policies", "reactive")


def pool_file(tmp_path: Path, max_l4: int = 64, text: str = POOLS) -> Path:
    p = tmp_path / "pools.yaml"
    p.write_text(text.replace("MAXL4", str(max_l4)), encoding="utf-8")
    return p


def backtest(*args: str):
    return CliRunner().invoke(main, ["backtest", *args], catch_exceptions=False)


def test_dollars_per_pool_on_a_flat_load(tmp_path):
    # 10 req/s / 1 per replica = 10 replicas on h100 (the first pool): 2 nodes of 8 GPUs for 24 h =
    # 384 GPU-h x $6.88 = $2,641.92; l4 stays empty
    out = tmp_path / "o.json"
    r = backtest(*FLAT, "--pools", str(pool_file(tmp_path)), "--json", str(out))
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    p = d["policies"]["reactive"]
    assert p["gpu_hours"] == pytest.approx(384.0) and p["dollars"] == pytest.approx(2641.92)
    assert p["pools"]["h100"]["peak_nodes"] == 2 and p["pools"]["l4"]["dollars"] == 0.0
    assert [q["name"] for q in d["settings"]["world"]["pools"]["pools"]] == ["h100", "l4"]
    assert "2,642" in r.output  # the table shows the dollars beside the GPU-hours


def test_the_l4_placement_sizes_replicas_to_a_quarter_and_is_cheaper(tmp_path):
    # on l4 a replica serves 0.25 x 1 req/s: the HPA's target is 0.25, so 10 / 0.25 = 40 replicas on 40 nodes of
    # one L4 for 24 h = 960 GPU-h x $0.80 = $768 (against $2,641.92 on H100)
    out = tmp_path / "o.json"
    r = backtest(*FLAT, "--pools", str(pool_file(tmp_path)), "--placement", "l4", "--json", str(out))
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    assert d["settings"]["qps_per_replica"] == pytest.approx(0.25)
    p = d["policies"]["reactive"]
    assert p["peak_replicas"] == 40 and p["dollars"] == pytest.approx(768.0)


def test_replicas_beyond_every_pool_are_said(tmp_path):
    # l4 alone at <= 8 nodes: 40 wanted, 8 placed, 32 Pending for 24 h = 768 replica-h unplaced, said in the table
    out = tmp_path / "o.json"
    r = backtest(*FLAT, "--pools", str(pool_file(tmp_path, 8)), "--placement", "l4", "--json", str(out))
    assert r.exit_code == 0, r.output
    p = json.loads(out.read_text())["policies"]["reactive"]
    assert p["unplaced_replica_hours"] == pytest.approx(768.0) and p["peak_replicas"] == 40
    assert "unplaced: replica-hours Pending with every pool at its maxNodes, 768.00 h" in r.output


@pytest.mark.parametrize("text, args, needle", [
    (POOLS.replace("gpu: L4", "gpu: L5"), (), "pools[1].gpu 'L5': unknown GPU type; accepted: H100"),
    (POOLS.replace("pricePerGpuHour: 0.8", "pricePerGpuHour: -0.8"), (), "pools[1].pricePerGpuHour -0.8"),
    (POOLS.replace(", pricePerGpuHour: 0.8", ""), ("--lost-request-value", "0.01"),
     "pool l4 has no pricePerGpuHour: dollars need the price of each pool"),
    (POOLS, ("--placement", "a100"), "no pool named 'a100'"),
    (POOLS, ("--gpus-per-node", "8"), "--gpus-per-node and --pools: give one of them"),
    ("pools: [", (), "not valid YAML"),
])
def test_bad_pool_input_is_a_clear_error_before_the_run(tmp_path, text, args, needle):
    r = backtest(*FLAT, "--pools", str(pool_file(tmp_path, text=text)), *args)
    assert r.exit_code == 2 and needle in r.output, r.output
    assert "Traceback" not in r.output


def test_pool_options_need_a_pool_file():
    r = backtest(*FLAT, "--placement", "l4")
    assert r.exit_code == 2 and "--placement needs a pool file: add --pools FILE" in r.output


ROUND = ("--model", "naive", "--span", "1d", "--history", "1d", "--refit", "2h", "--qps-per-replica", "10",
         "--cold-start", "600", "--no-progress")


def test_tunes_pick_with_its_deployment_patch_replays_to_the_printed_dollars(tmp_path):
    # tune over h100 > l4 picks by dollars; its ScaledObject and Deployment patch, replayed by
    # backtest --scaledobject with the same pool file, give the same dollars and miss (one engine, one world)
    import yaml

    from support.traces import write_daily

    csv = write_daily(tmp_path / "daily.csv", days=3)
    pools = pool_file(tmp_path)
    out = tmp_path / "t.json"
    r = CliRunner().invoke(main, ["tune", str(csv), *ROUND, "--jobs", "1", "--target-miss", "0.05", "--max-cost-ratio", "3", "--pools",
                                  str(pools), "--json", str(out)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    sel = json.loads(out.read_text())["selection"]
    assert "in dollars" in sel["message"] and sel["dollars"] > 0
    patch = sel["deployment_patch"]["spec"]["template"]["spec"]
    terms = patch["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [t["matchExpressions"][0]["values"] for t in terms] == [["NVIDIA-H100-80GB-HBM3"], ["NVIDIA-L4"]]
    assert patch["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert "kind: Deployment" in r.output  # printed after the ScaledObject
    (tmp_path / "so.yaml").write_text(yaml.safe_dump_all([sel["manifest"], sel["deployment_patch"]]))
    bt = tmp_path / "b.json"
    r = CliRunner().invoke(main, ["backtest", str(csv), *ROUND, "--policies", "reactive", "--scaledobject",
                                  str(tmp_path / "so.yaml"), "--pools", str(pools), "--json", str(bt)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    got = json.loads(bt.read_text())["policies"][sel["manifest"]["metadata"]["name"]]
    assert got["dollars"] == pytest.approx(sel["dollars"], rel=1e-12)
    assert got["underprovisioned_fraction"] == pytest.approx(sel["underprovisioned_fraction"], rel=1e-12, abs=1e-15)


def test_a_slice_placement_patches_a_node_selector_and_the_mig_resource():
    from scaler.cli.pools import deployment_patch
    from scaler.gpus import parse_pool_file
    from scaler.replay.pools import from_file

    pf = parse_pool_file({"pools": [{"name": "h100", "gpu": "H100", "gpusPerNode": 8, "nodeBootSeconds": 420,
                                     "maxNodes": 2, "mig": ["3g.40gb"],
                                     "nodeSelector": {"pool": "h100-mig"}}],
                          "replica": {"capacity": {"H100/3g.40gb": 0.45}}})
    doc, notes = deployment_patch(from_file(pf, ["h100/3g.40gb"]), "my-model")
    spec = doc["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"pool": "h100-mig"} and "affinity" not in spec
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-3g.40gb": "1"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    # a priority list of a slice and a whole GPU cannot be one Deployment: said
    pf2 = parse_pool_file({"pools": [{"name": "h100", "gpu": "H100", "gpusPerNode": 8,
                                      "nodeBootSeconds": 420, "maxNodes": 2, "mig": ["3g.40gb"]},
                                     {"name": "l4", "gpu": "L4", "gpusPerNode": 1, "nodeBootSeconds": 240,
                                      "maxNodes": 4}],
                           "replica": {"capacity": {"H100/3g.40gb": 0.45, "L4": 0.25}}})
    _, notes = deployment_patch(from_file(pf2, ["h100/3g.40gb", "l4"]), "my-model")
    assert any("one Deployment per pool" in n for n in notes)


def test_the_break_even_rate_is_printed_in_dollars(tmp_path):
    # one H100 replica $6.88/h; a wake: (T_cold 180 s + cooldownPeriod 300 s) x 6.88 / 3600 = $0.91733, plus the
    # late request's $0.01 = $0.92733; r* = 6.88 / 0.92733 = 7.42 requests per hour
    r = backtest(*FLAT, "--cold-start", "180", "--pools", str(pool_file(tmp_path)), "--lost-request-value", "0.01")
    assert r.exit_code == 0, r.output
    assert "$0.9273: below 7.42 requests per hour scale to zero" in r.output


def test_choose_pool_tunes_on_each_and_picks_the_cheapest_in_dollars(tmp_path):
    # a flat 10 req/s, 1 req/s per H100 replica: on h100 alone 10 replicas on 2 nodes = $2,641.92 a day; on l4
    # alone 40 replicas of a quarter on 40 nodes = 960 GPU-h x $0.80 = $768; both miss nothing: l4 is the pick.
    # With l4 capped at 8 nodes, 32 of 40 find no GPU: 80 % missed, and h100 is the pick
    t0 = 1_700_006_400
    csv = tmp_path / "flat.csv"
    csv.write_text("timestamp,qps\n" + "".join(f"{t0 + 60 * i},10\n" for i in range(3 * 1440)))
    args = ["tune", str(csv), "--model", "naive", "--span", "1d", "--history", "1d", "--qps-per-replica", "1",
            "--no-progress", "--jobs", "1", "--target-miss", "0.01", "--choose-pool"]
    out = tmp_path / "t.json"
    r = CliRunner().invoke(main, [*args, "--pools", str(pool_file(tmp_path)), "--json", str(out)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    sel = json.loads(out.read_text())["selection"]
    assert sel["placement"] == ["l4"] and sel["dollars"] == pytest.approx(768.0)
    assert "the pick: l4" in r.output and "2,642" in r.output
    r = CliRunner().invoke(main, [*args, "--pools", str(pool_file(tmp_path, 8)), "--json", str(out)],
                           catch_exceptions=False)
    sel = json.loads(out.read_text())["selection"]
    assert sel["placement"] == ["h100"] and sel["dollars"] == pytest.approx(2641.92)
    assert "80.000" in r.output  # l4's miss, said in the by-pool table


def test_without_qps_per_replica_the_derived_replica_is_scaled_to_the_first_pool(tmp_path):
    # derived: the flat peak 10 req/s / 20 replicas = 0.5 req/s for a replica of capacity 1; on l4 (0.25) the
    # target is 0.125 and 10 / 0.125 = 80 replicas, as --qps-per-replica 0.5 --placement l4 gives
    args = ("--flat-load", "10", "--span", "1d", "--history", "1d", "--policies", "reactive", "--placement", "l4",
            "--pools", str(pool_file(tmp_path, 100)))
    docs = []
    for extra in ((), ("--qps-per-replica", "0.5")):
        out = tmp_path / f"o{len(docs)}.json"
        r = backtest(*args, *extra, "--json", str(out))
        assert r.exit_code == 0, r.output
        docs.append(json.loads(out.read_text()))
    for d in docs:
        assert d["settings"]["qps_per_replica"] == pytest.approx(0.125)
        assert d["policies"]["reactive"]["peak_replicas"] == 80


def test_advise_ranks_in_dollars_with_priced_pools(tmp_path):
    # --advise with priced pools ranks every option in dollars, GPU-hours beside them. On the flat 10 req/s the
    # hot pool is 10 replicas of 1 req/s: on h100 2 nodes of 8 GPUs for 24 h = 384 GPU-h x $6.88 = $2,641.92;
    # placed on l4 (a quarter-size replica) 40 nodes of one L4 = 960 GPU-h x $0.80 = $768
    for placement, gpu_h, usd in (("h100", 384.0, 2641.92), ("l4", 960.0, 768.0)):
        out = tmp_path / f"{placement}.json"
        r = backtest(*FLAT[:-2], "--pools", str(pool_file(tmp_path)), "--placement", placement, "--advise",
                     "--json", str(out))
        assert r.exit_code == 0, r.output
        adv = json.loads(out.read_text())["advice"]
        assert adv["unit"] == "dollars"
        ka = next(o for o in adv["options"] if o["policy"] == "keep_alive")
        assert ka["gpu_hours"] == pytest.approx(gpu_h) and ka["cost"] == pytest.approx(usd)
        assert all(o["gpu_hours"] > 0 for o in adv["options"])
        costs = [o["cost"] for o in adv["options"] if o["meets_slo"]]
        assert costs == sorted(costs) and adv["pick"] == adv["options"][0]["policy"]  # cheapest in dollars first
        assert f"${ka['cost']:,.0f}" in r.output and "GPU-hours" in r.output
    # without pools the unit stays GPU-hours, and no option carries a second figure
    r = backtest(*FLAT[:-2], "--advise", "--json", str(tmp_path / "plain.json"))
    assert r.exit_code == 0, r.output
    adv = json.loads((tmp_path / "plain.json").read_text())["advice"]
    assert adv["unit"] == "GPU-hours" and all(o["gpu_hours"] is None for o in adv["options"])

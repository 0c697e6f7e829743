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

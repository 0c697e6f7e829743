"""The round trip: the ScaledObject forescale prints for a configuration, replayed with ``backtest --scaledobject``
on the same trace and span, gives the numbers the ranking reported for it: every selectable family.

Tolerance: none. The manifest spells out what the ranking replayed (the trigger's knobs and lead, the
refit cadence as ``refitInterval``, ``history``, the HPA behaviour and tolerance, hybrid's floor as
``floorReplicas`` + ``minReplicaCount``), and both replays decide with the one ``decide`` and the one HPA
loop, so the figures are compared for equality (the miss is a ratio of the same sums, compared to 1e-12).
"""

from __future__ import annotations

import json
import time

import pytest
import yaml
from click.testing import CliRunner

from scaler.cli import main, render
from scaler.cli.options import load_trace
from scaler.replay import engine, families, variants
from support.traces import write_daily

DAY = 86400.0
ARGS = ("--model", "naive", "--span", "1d", "--history", "1d", "--refit", "2h", "--qps-per-replica", "10",
        "--cold-start", "600", "--hpa-tolerance", "0.05", "--no-progress")
KEYS = ("violation_minutes", "replica_hours", "scale_ups", "peak_replicas")


@pytest.fixture(scope="module")
def ranked(tmp_path_factory):
    """The ranking's run (what tune sweeps, one knob value per family so that every family is there)."""
    d = tmp_path_factory.mktemp("rt")
    csv = write_daily(d / "daily.csv", days=3)
    tr = load_trace(csv, None, None, "now-21d", "now", 60.0, now=time.time())
    s = engine.Settings(cold_start_seconds=600, qps_per_replica=10, model="naive", history_seconds=DAY,
                        span_seconds=DAY, refit_seconds=7200, hpa_tolerance=0.05)
    grid = variants.Grid(reactive_headroom=(1.2,), quantiles=(0.9,), level_corrections=(1800.0,), headroom=(1.1,),
                         simple_quantiles=(0.9,), hybrid_floor_percentiles=(25.0,), envelope_windows=(3600.0,),
                         anchor_margins=(1.2,), window_band_quantiles=(), families=(*families.SELECTABLE, "oracle"))
    return csv, engine.run(tr, s, variants.variants(grid, s), target_miss=0.005)  # with searched headrooms too


def test_every_familys_printed_manifest_replays_to_the_numbers_it_was_ranked_with(ranked, tmp_path):
    csv, r = ranked
    texts, expect = [], {}
    for i, p in enumerate(r.points):
        if not p.selectable:
            continue
        name = f"rt-{i}-{p.policy.replace('_', '-')}"
        md = render.metadata_for(p, r, server_address="http://prometheus:9090", query="sum(rate(x[2m]))")
        texts.append(render.manifest_yaml(render.manifest_for(p, r, md, name=name), [p.label]))
        expect[name] = p
    assert {p.policy for p in expect.values()} == set(families.SELECTABLE)
    assert any(p.extra.get("floorReplicas", 0) > 0 for p in expect.values())  # a hybrid with a real floor
    assert any(p.variant.searched for p in expect.values())  # tune's searched headroom values round-trip too
    (tmp_path / "all.yaml").write_text("---\n".join(texts))
    out = tmp_path / "rt.json"
    res = CliRunner().invoke(main, ["backtest", str(csv), *ARGS, "--policies", "reactive", "--scaledobject",
                                    str(tmp_path / "all.yaml"), "--json", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    got = json.loads(out.read_text())["policies"]
    for name, p in expect.items():
        o = p.outcome
        assert [got[name][k] for k in KEYS] == [getattr(o, k) for k in KEYS], (name, p.label)
        assert got[name]["underprovisioned_fraction"] == pytest.approx(o.underprovisioned_fraction, rel=1e-12,
                                                                       abs=1e-15), (name, p.label)


def test_tunes_printed_scaledobject_replays_to_its_expected_line(tmp_path):
    csv = write_daily(tmp_path / "daily.csv", days=3)
    out = tmp_path / "t.json"
    res = CliRunner().invoke(main, ["tune", str(csv), *ARGS, "--jobs", "1", "--target-miss", "0.005", "--json",
                                    str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    sel = json.loads(out.read_text())["selection"]
    (tmp_path / "so.yaml").write_text(yaml.safe_dump(sel["manifest"]))
    bt = tmp_path / "b.json"
    res = CliRunner().invoke(main, ["backtest", str(csv), *ARGS, "--policies", "reactive", "--scaledobject",
                                    str(tmp_path / "so.yaml"), "--json", str(bt)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    row = json.loads(bt.read_text())["policies"][sel["manifest"]["metadata"]["name"]]
    assert row["replica_hours"] == sel["replica_hours"] and row["violation_minutes"] == sel["violation_minutes"]
    assert row["underprovisioned_fraction"] == pytest.approx(sel["underprovisioned_fraction"], rel=1e-12, abs=1e-15)


def test_advices_printed_options_replay_to_the_numbers_it_ranked_them_by(tmp_path):
    csv = write_daily(tmp_path / "daily.csv", days=3)
    world = ("--service-seconds", "0.2")
    out = tmp_path / "a.json"
    res = CliRunner().invoke(main, ["backtest", str(csv), *ARGS, *world, "--advise", "--target-miss", "0.005",
                                    "--json", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    opts = json.loads(out.read_text())["advice"]["options"]
    docs = []
    for o in opts:
        o["manifest"]["metadata"]["name"] = f"advice-{o['policy'].replace('_', '-')}"
        docs.append(yaml.safe_dump(o["manifest"]))
        chk = CliRunner().invoke(main, ["check", "-"], input=docs[-1], catch_exceptions=False)
        assert chk.exit_code == 0, chk.output  # the cron-only schedule too: KEDA's triggers, nothing to reject
    (tmp_path / "opts.yaml").write_text("---\n".join(docs))
    bt = tmp_path / "b.json"
    res = CliRunner().invoke(main, ["backtest", str(csv), *ARGS, *world, "--policies", "reactive", "--scaledobject",
                                    str(tmp_path / "opts.yaml"), "--json", str(bt)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    got = json.loads(bt.read_text())["policies"]
    for o in opts:
        row = got[o["manifest"]["metadata"]["name"]]
        # no node pool: the cost is GPU-hours = replica-hours (one GPU per replica)
        assert (o["policy"], row["replica_hours"]) == (o["policy"], pytest.approx(o["cost"], rel=1e-12))
        assert row["underprovisioned_fraction"] == pytest.approx(o["underprovisioned_fraction"], rel=1e-12, abs=1e-15)
        assert row["p95_latency_seconds"] == pytest.approx(o["p95_latency_seconds"], rel=1e-9)

"""``forescale tune`` and ``forescale backtest --sweep`` from the command line."""

from __future__ import annotations

import json
import re
import yaml
from click.testing import CliRunner

from scaler.cli import main
from scaler.spec import parse_metadata
from support.traces import write_daily

FAST = ["--model", "seasonal_naive", "--span", "1d", "--history", "1d", "--refit", "2h", "--qps-per-replica", "10",
        "--jobs", "1", "--no-progress"]


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _block(stdout: str) -> str:
    """The YAML block: from the first '# forescale tune' comment to the end of the metadata."""
    lines = stdout.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("# forescale tune"))
    out = []
    for line in lines[i:]:
        if not line.strip() or line.startswith(("wrote", "data:")):
            break
        out.append(line)
    return "\n".join(out)


def test_tune_prints_metadata_the_parser_accepts_and_json(tmp_path):
    csv = write_daily(tmp_path / "daily.csv", days=2.5)
    out = tmp_path / "tune.json"
    r = invoke("tune", str(csv), *FAST, "--cold-start", "600", "--target-miss", "0.005", "--json", str(out))
    assert r.exit_code == 0, r.output
    assert "target met" in r.stdout and "Pareto-optimal" in r.stdout
    doc = yaml.safe_load(_block(r.stdout))
    assert doc["kind"] == "ScaledObject"  # the whole object, ready to apply
    trigger = doc["spec"]["triggers"][0]
    md = trigger["metadata"]
    assert trigger["type"] == "external" and all(isinstance(v, str) for v in md.values())
    assert re.search(r'^        \w+: "', _block(r.stdout), re.M)  # every value quoted in the text itself
    spec, unknown = parse_metadata(md, name="llm", namespace="serving")
    assert unknown == () and spec.qps_per_replica == 10 and spec.lead.cold_start_seconds == 600
    assert spec.mode == "forecastAndScale"  # the ramp: a forecast family wins
    j = json.loads(out.read_text())
    assert j["selection"]["met"] is True and j["selection"]["metadata"] == md
    assert j["selection"]["manifest"] == doc  # the JSON carries the ScaledObject printed
    assert j["selection"]["underprovisioned_fraction"] <= 0.005
    assert {"policy", "knobs", "underprovisioned_fraction", "replica_hours", "cost_ratio", "pareto"} <= set(j["frontier"][0])
    assert {"trace", "settings", "forecast", "policies"} <= set(j)


def test_tune_says_clearly_when_nothing_meets_the_target(tmp_path):
    csv = write_daily(tmp_path / "daily.csv", days=2.5)
    out = tmp_path / "tune.json"
    # 0x: zero times reactive's miss, so the relative form is resolved and said (and nothing reaches 0 at 1.0x)
    r = invoke("tune", str(csv), *FAST, "--cold-start", "600", "--target-miss", "0x", "--max-cost-ratio", "1.0",
               "--json", str(out))
    assert r.exit_code == 0
    assert "TARGET NOT MET" in r.stdout and "no configuration meets the target" in r.stderr
    sel = json.loads(out.read_text())["selection"]
    assert sel["met"] is False and sel["cost_ratio"] <= 1.0
    assert sel["target_miss"] == 0.0 and sel["reactive_miss"] > 0
    assert re.search(r"target    missed requests <= 0\.000 %: the asked multiple of reactive KEDA's "
                     rf"{100 * sel['reactive_miss']:.3f} %", r.stdout)
    parse_metadata(yaml.safe_load(_block(r.stdout))["spec"]["triggers"][0]["metadata"])  # still a usable block


def test_tune_rejects_bad_input(tmp_path):
    r = invoke("tune", str(tmp_path / "missing.csv"), *FAST)
    assert r.exit_code == 2 and "does not exist" in r.stderr
    r = invoke("tune", "--query", "up", *FAST)
    assert r.exit_code == 2 and "--query needs --prometheus" in r.stderr
    for bad in ("2x", "0.5%", "1"):
        r = invoke("tune", *FAST, "--target-miss", bad)
        assert r.exit_code == 2 and "a multiple of reactive KEDA's missed fraction" in r.stderr and repr(bad) in r.stderr
    r = invoke("tune", *FAST, "--max-cost-ratio", "cheap")
    assert r.exit_code == 2 and "(0, 1000]" in r.stderr and "or none" in r.stderr


def test_backtest_sweep_writes_frontier_json_and_plot(tmp_path):
    csv = write_daily(tmp_path / "daily.csv", days=2.5)
    out, rep = tmp_path / "bt.json", tmp_path / "report"
    r = invoke("backtest", str(csv), "--sweep", "--model", "seasonal_naive", "--span", "1d", "--history", "1d",
               "--refit", "2h", "--qps-per-replica", "10", "--cold-start", "600", "--jobs", "1", "--no-progress",
               "--json", str(out), "--report", str(rep))
    assert r.exit_code == 0, r.output
    assert "frontier:" in r.stdout and "Pareto-optimal" in r.stdout
    doc = json.loads(out.read_text())
    assert {"trace", "settings", "forecast", "policies", "frontier"} <= set(doc)
    assert set(doc["policies"]) == {"reactive", "linear_trend", "predictive", "hybrid", "envelope", "aws_like",
                                    "mimir_like", "scheduled", "keep_alive", "oracle"}
    pareto = [d for d in doc["frontier"] if d["pareto"]]
    for d in pareto:  # no listed optimal point is dominated
        assert not any(e["underprovisioned_fraction"] <= d["underprovisioned_fraction"]
                       and e["replica_hours"] <= d["replica_hours"]
                       and (e["underprovisioned_fraction"] < d["underprovisioned_fraction"]
                            or e["replica_hours"] < d["replica_hours"])
                       for e in doc["frontier"] if e["policy"] != "oracle")
    png = rep / "frontier_sweep.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert "frontier_sweep.png" in (rep / "index.html").read_text()


def test_a_history_shorter_than_the_default_min_history_prints_a_trigger_that_parses(tmp_path):
    # --history 6h is below minHistory's default (1d): the printed trigger carries minHistory 6h (the replay trusts
    # a forecast once its model fits), so the server accepts what tune printed (before: a traceback, 'minHistory:
    # a duration no longer than history')
    csv = write_daily(tmp_path / "daily.csv", days=2.5)
    args = [a if a != "1d" or i != FAST.index("--history") + 1 else "6h" for i, a in enumerate(FAST)]
    r = invoke("tune", str(csv), *args, "--target-miss", "0.005")
    assert r.exit_code == 0, r.output
    md = yaml.safe_load(_block(r.stdout))["spec"]["triggers"][0]["metadata"]
    assert md["history"] == md["minHistory"] == "6h"
    spec = parse_metadata(md, name="llm", namespace="serving")[0]
    assert spec.history_seconds == spec.min_history_seconds == 6 * 3600
